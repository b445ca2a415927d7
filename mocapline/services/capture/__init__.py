"""capture: UDP (or journal) datagrams in, ledger and merge by posture_index, forward kinematics, HumanFrames out."""
