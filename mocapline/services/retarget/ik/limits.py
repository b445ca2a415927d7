"""The joints' bounds per IK step: range (mink.ConfigurationLimit's rule) and velocity over a frame."""

from __future__ import annotations

import mink
import mujoco
import numpy as np

from mocapline.robot import model as robot_model

LIMIT_GAIN = 0.95  # mink.ConfigurationLimit's default gain
# (2, 1): turns a (2, n) pair [lower; upper] into the signed rows [-lower; upper], so that both
# sides of a bound take the same numpy calls
WINDOW_SIGNS = np.array([[-1.0], [1.0]])


class FrameVelocityLimit(mink.Limit):
    """Joint velocity limit over a whole frame: ``|q - q_ref| <= v_max * frame_dt`` per hinge joint.

    ``q_ref`` is the previous frame's solution (:meth:`set_reference`; None disables the limit,
    e.g. on the first frame of a take). Being relative to it, the bound holds across any number of
    IK steps in a frame, unlike ``mink.VelocityLimit``, which bounds one step by ``v_max * dt``.
    Built once; only ``q_ref`` changes.
    """

    def __init__(self, model: mujoco.MjModel, velocity_limits: np.ndarray, frame_dt: float) -> None:
        names = robot_model.joint_names(model)
        if len(velocity_limits) != len(names):
            raise ValueError(f"{len(velocity_limits)} velocity limits for {len(names)} joints")
        ids = [model.joint(n).id for n in names]
        self.qposadr = np.array([model.jnt_qposadr[j] for j in ids])
        contiguous = np.array_equal(self.qposadr, np.arange(self.qposadr[0], self.qposadr[0] + len(ids)))
        self._qslice = slice(int(self.qposadr[0]), int(self.qposadr[0]) + len(ids)) if contiguous else self.qposadr
        self.dofadr = np.array([model.jnt_dofadr[j] for j in ids])
        self.velocity = np.asarray(velocity_limits, dtype=np.float64)
        self.frame_dt = float(frame_dt)
        n, nv = len(ids), model.nv
        projection = np.zeros((n, nv))
        projection[np.arange(n), self.dofadr] = 1.0
        self.G = np.vstack((projection, -projection))
        self.q_ref: np.ndarray | None = None
        self.max_step = self.velocity * self.frame_dt  # largest change of each joint (rad)
        self._frames = 1
        self._reach = self.max_step * WINDOW_SIGNS

    def set_reference(self, q: np.ndarray | None, frames: int = 1) -> None:
        """Bound the joints to ``frames`` frame periods of motion from ``q`` (None: no bound)."""
        self.q_ref = None if q is None else q[self._qslice].astype(np.float64)
        if frames != self._frames:
            self._frames = frames
            self.max_step = self.velocity * self.frame_dt * frames
            self._reach = self.max_step * WINDOW_SIGNS
        if self.q_ref is not None:
            # the joints' window this frame, as (-lower, upper)
            self.signed_window = (self.q_ref + self._reach) * WINDOW_SIGNS

    def bounds(self, qpos: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(lower, upper) on the joints' dq, or None when inactive."""
        if self.q_ref is None:
            return None
        moved = qpos[self.qposadr] - self.q_ref
        step = self.max_step
        return np.minimum(-step - moved, 0.0), np.maximum(step - moved, 0.0)

    def compute_qp_inequalities(self, configuration: mink.Configuration, dt: float) -> mink.Constraint:
        del dt  # the bound is per frame, not per step
        b = self.bounds(configuration.data.qpos)
        if b is None:
            return mink.Constraint()
        lower, upper = b
        return mink.Constraint(G=self.G, h=np.concatenate((upper, -lower)))
