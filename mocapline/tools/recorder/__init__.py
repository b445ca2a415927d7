"""Record a live take, replay it deterministically, export it as a reference clip, plot it."""
