"""The robot's bias torque at a pose (gravity, and Coriolis with a velocity): MuJoCo's recursive
Newton-Euler on the mesh-free model, the base's orientation from the IMU. Sent as feed-forward
``tau``, it leaves the PD gains only the tracking to do (gravity otherwise pulls every joint off
by tau_g / kp: 0.3 rad on the waist pitch of a G1 hanging on a band).

Which joints carry which weight depends on what holds the robot up (``SUPPORTS``):

- ``torso``: a rope at the torso (Unitree's elastic band, `mocapline sim --base band`, a gantry's
  harness). It pulls, it does not twist: the force that balances the floating base best (least
  squares over the base's six rows) is taken off at the torso, and the rest is the joints'. The
  waist then carries the pelvis and legs hanging below it, not the torso above it.
- ``pelvis``: the pelvis held still (a test stand, `mocapline sim --base fixed`): MuJoCo's bias
  as it is, the waist carrying the torso, arms and head.

A robot standing on its feet is neither (the legs carry the body; how the weight splits between the
feet is the locomotion controller's business): send no bias (``--no-bias``) or ``--joints upper``.
"""

from __future__ import annotations

import mujoco
import numpy as np

from mocapline.robot.description import RobotDescription
from mocapline.robot.model import load_ik_model, qpos_addresses
from mocapline.services.robot.controller import SUPPORTS


class BiasTorque:
    def __init__(self, robot: RobotDescription, support: str = "torso") -> None:
        if support not in SUPPORTS:
            raise ValueError(f"support {support!r}: choose from {SUPPORTS}")
        self.support = support
        self.model = load_ik_model(robot)
        self.data = mujoco.MjData(self.model)
        self.qadr, self.vadr = qpos_addresses(self.model, robot.joint_names)
        self.data.qpos[3] = 1.0
        self._out = np.zeros(self.model.nv)
        self._rope = self.model.body(robot.torso_body).id  # the rope (band, harness) holds the torso
        self._jacp = np.zeros((3, self.model.nv))

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
        bias = self._out
        if self.support == "torso":
            # the rope's force f (at the torso's centre of mass) with J_base^T f closest to the
            # base's bias: what it holds is no joint's to hold
            mujoco.mj_jac(self.model, d, self._jacp, None, d.xipos[self._rope], self._rope)
            force, *_ = np.linalg.lstsq(self._jacp[:, :6].T, bias[:6], rcond=None)
            bias = bias - self._jacp.T @ force
        return bias[self.vadr].copy()
