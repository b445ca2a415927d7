"""auditor."""
