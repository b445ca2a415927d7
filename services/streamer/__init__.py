"""streamer."""
