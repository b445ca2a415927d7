"""A synthetic Axis Studio (emitter) and a lossy UDP relay, for demos and tests."""
