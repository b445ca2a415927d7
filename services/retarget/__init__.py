"""retarget."""
