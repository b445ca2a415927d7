"""The IK of the retarget stage; :mod:`.retargeter` describes a frame's way through it."""
