"""streamer: RobotFrames in, resampled MocapFrames with header and CRC out to robots and viewers."""
