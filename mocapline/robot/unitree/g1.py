"""The G1 (29 DoF) on Unitree's low-level interface: motor i is joint i of
:data:`mocapline.robot.g1.G1_JOINT_NAMES`; the gains of Unitree's examples; the joint groups; the
poses the bridge holds the legs at and comes to rest in."""

from __future__ import annotations

import numpy as np

from mocapline.robot.g1 import G1_JOINT_NAMES, G1_VELOCITY_LIMITS, N_JOINTS

LEGS = slice(0, 12)
WAIST = slice(12, 15)
ARMS = slice(15, 29)
UPPER = slice(12, 29)  # waist and arms: what `--joints upper` takes from the stream
GROUPS: dict[str, slice] = {"legs": LEGS, "waist": WAIST, "arms": ARMS}

# Unitree's example gains for the G1 at 500 Hz: legs (per leg) hip pitch/roll/yaw, knee, ankle
# pitch/roll; waist yaw/roll/pitch; every arm joint 40.
KP = np.array([60, 60, 60, 100, 40, 40] * 2 + [60, 40, 40] + [40] * 14, dtype=np.float64)
KD = np.array([1, 1, 1, 2, 1, 1] * 2 + [1] * 3 + [1] * 14, dtype=np.float64)

VELOCITY_LIMITS = np.array([G1_VELOCITY_LIMITS[name] for name in G1_JOINT_NAMES], dtype=np.float64)

# Legs slightly bent (knees 0.3 rad), arms down beside the body (the model's "stand" keyframe's arms).
STAND = np.zeros(N_JOINTS)
STAND[[0, 6]] = -0.1
STAND[[3, 9]] = 0.3
STAND[[4, 10]] = -0.2
STAND[[16, 23]] = (0.2, -0.2)
STAND[[18, 25]] = 1.28
REST = STAND.copy()
