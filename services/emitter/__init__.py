"""emitter."""
