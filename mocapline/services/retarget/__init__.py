"""retarget: HumanFrames in, GMR-style IK onto the G1, RobotFrames out."""
