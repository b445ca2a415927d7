"""Data that ships with mocapline: IK configs, the demo take, skeleton maps (see README.md here)."""
