"""The whole pipeline as processes: up, demo, status."""
