"""`mocapline sim`: a G1 in MuJoCo physics behind Unitree's low-level DDS interface, standing in
for the robot as the emitter stands in for Axis Studio."""
