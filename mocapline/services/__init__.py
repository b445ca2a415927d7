"""One package per pipeline process: capture, retarget, streamer, viewer, auditor. Services import
core, formats and robot, never each other or a tool.
"""
