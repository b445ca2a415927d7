"""The G1's bias torque at a pose (gravity, and Coriolis with a velocity): MuJoCo's recursive
Newton-Euler on the mesh-free model, the base's orientation from the IMU. Sent as feed-forward
``tau``, it leaves the PD gains only the tracking to do (gravity otherwise pulls every joint off
by tau_g / kp: 0.3 rad on the waist pitch of a hanging G1)."""

from __future__ import annotations

import mujoco
import numpy as np

from mocapline.robot.g1 import G1_JOINT_NAMES, load_ik_model


class BiasTorque:
    def __init__(self) -> None:
        self.model = load_ik_model()
        self.data = mujoco.MjData(self.model)
        ids = [self.model.joint(n).id for n in G1_JOINT_NAMES]
        self.qadr = np.array([self.model.jnt_qposadr[i] for i in ids])
        self.vadr = np.array([self.model.jnt_dofadr[i] for i in ids])
        self.data.qpos[3] = 1.0
        self._out = np.zeros(self.model.nv)

    def __call__(self, q: np.ndarray, quat: np.ndarray | None = None, dq: np.ndarray | None = None) -> np.ndarray:
        d = self.data
        d.qpos[self.qadr] = q
        if quat is not None and np.all(np.isfinite(quat)) and np.linalg.norm(quat) > 0.5:
            d.qpos[3:7] = quat / np.linalg.norm(quat)
        d.qvel[:] = 0.0
        if dq is not None:
            d.qvel[self.vadr] = dq
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_comPos(self.model, d)
        mujoco.mj_rne(self.model, d, 0, self._out)
        return self._out[self.vadr].copy()
