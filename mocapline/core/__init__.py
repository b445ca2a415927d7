"""The shared core: wire contracts (44-byte header, protobuf frames), ledger and verdict, ZeroMQ
links (plain and acknowledged), durable logs, NATS bus, metrics, tracing, config loading.
"""
