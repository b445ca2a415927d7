"""The reference IK backend: ``mink.solve_ik`` on FrameTasks; a test checks the fast one agrees."""

from __future__ import annotations

from collections.abc import Callable

import mink
import mujoco
import numpy as np

from mocapline.robot import model as robot_model

from .backend import SETTLE_LM_DAMPING, SOLVER, Posture, is_arm
from .limits import LIMIT_GAIN, FrameVelocityLimit
from .tables import Table


class MinkBackend:
    """``mink.solve_ik`` with FrameTasks (built once) and the limits in ``limits=``."""

    def __init__(self, model: mujoco.MjModel, tables: list[Table], lm_damping: float, solver_damping: float,
                 velocity_limit: FrameVelocityLimit | None, regular: Posture, arm_huber: float) -> None:
        self.model = model
        self.lm_damping = lm_damping
        self.arm_huber = arm_huber
        self.arm_tasks = [
            [(k, e.rotation_weight) for k, e in enumerate(t.entries) if is_arm(e)]
            for t in tables
        ]
        self.configuration = mink.Configuration(model, robot_model.neutral_qpos(model))
        self.solver_damping = solver_damping
        self.limits: list[mink.Limit] = [mink.ConfigurationLimit(model, gain=LIMIT_GAIN)]
        if velocity_limit is not None:
            self.limits.append(velocity_limit)
        self.tasks = [
            [
                mink.FrameTask(
                    frame_name=e.robot_frame,
                    frame_type=e.frame_type,
                    position_cost=e.position_weight,
                    orientation_cost=e.rotation_weight,
                    lm_damping=lm_damping,
                )
                for e in t.entries
            ]
            for t in tables
        ]
        self.extra: list[mink.Task] = []
        if regular.active:
            posture = mink.PostureTask(model, cost=np.concatenate((np.zeros(6), regular.posture)))
            target = robot_model.neutral_qpos(model)
            target[7:] = regular.neutral
            posture.set_target(target)
            self.extra.append(posture)
        self.solve: Callable[..., np.ndarray] = mink.solve_ik

    @property
    def data(self) -> mujoco.MjData:
        return self.configuration.data

    @property
    def qpos(self) -> np.ndarray:
        return self.configuration.data.qpos

    def set_qpos(self, q: np.ndarray) -> None:
        self.configuration.update(np.array(q, dtype=np.float64))

    def reset(self) -> None:
        pass

    def begin_frame(self, settled: bool) -> None:
        lm = self.lm_damping if settled else min(self.lm_damping, SETTLE_LM_DAMPING)
        for tasks in self.tasks:
            for task in tasks:
                task.lm_damping = lm

    def set_weights(self, table: int, entry: int, position: float, rotation: float) -> None:
        task = self.tasks[table][entry]
        task.set_position_cost(position)
        task.set_orientation_cost(rotation)

    def set_targets(self, table: int, poses: np.ndarray) -> None:
        for task, pose in zip(self.tasks[table], poses, strict=True):
            task.set_target(mink.SE3(wxyz_xyz=pose))

    def step(self, table: int, final_share: float = 0.0) -> tuple[float, float | None]:
        del final_share  # always evaluated: the reference
        if self.arm_huber:  # the fast backend's Huber, as reweighted orientation costs
            for k, weight in self.arm_tasks[table]:
                task = self.tasks[table][k]
                size = float(np.linalg.norm(task.compute_error(self.configuration)[3:]))
                task.set_orientation_cost(weight * np.sqrt(min(1.0, self.arm_huber / max(size, 1e-300))))
        tasks = self.tasks[table] + self.extra
        before = self._cost(tasks)
        v = self.solve(self.configuration, tasks, 1.0, SOLVER, damping=self.solver_damping, limits=self.limits)
        self.configuration.integrate_inplace(v, 1.0)
        return before, self._cost(tasks)

    def _cost(self, tasks: list[mink.Task]) -> float:
        return float(sum(np.sum((t.cost * t.compute_error(self.configuration)) ** 2) for t in tasks))
