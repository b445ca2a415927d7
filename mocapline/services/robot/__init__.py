"""`mocapline robot`: the stream drives a Unitree robot through its low-level DDS interface."""
