"""Orchestration: start the services as processes, drain a take, print the ledger."""
