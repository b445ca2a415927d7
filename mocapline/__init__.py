"""mocapline: the shared core every service uses (wire contracts, ledger, config, transport)."""

__version__ = "0.1.0"
