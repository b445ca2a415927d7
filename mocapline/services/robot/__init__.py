"""`mocapline robot`: the stream drives a Unitree G1 through its low-level DDS interface."""
