"""GMR's per-frame IK, re-written: the reference that ``mocapline bench retarget`` and
``mocapline retarget-file --baseline`` measure against.

The algorithm is GMR's published ``GeneralMotionRetargeting.retarget`` (YanjieZe/GMR
``motion_retarget.py``), re-written here, not copied: per frame, the human data dict is scaled about
the root and offset with scipy Rotations body by body; then two stages (table 1, table 2), each
calling ``mink.solve_ik`` (daqp, solver damping 0.5, FrameTask lm_damping 1, dt = model timestep)
until the error drop is < 0.001 or 10 extra iterations; limits passed as GMR passes them (the list
lands in ``safety_break``, so mink rebuilds a ConfigurationLimit per call and the 3*pi rad/s
velocity limit never applies). It reproduces real GMR's joint trajectories to 5e-9 rad (issue 14).
"""

from __future__ import annotations

import mink
import numpy as np
from scipy.spatial.transform import Rotation

from mocapline.core.bodies import GMR_BODIES
from mocapline.robot import model as robot_model

from .config import IKConfig


class GmrBaseline:
    """GMR's ``GeneralMotionRetargeting.retarget`` algorithm, faithfully (see module docstring)."""

    max_iter = 10

    def __init__(self, config: IKConfig, model, q0: np.ndarray, human_height: float | None = None) -> None:
        self.model = model
        self.configuration = mink.Configuration(model, q0.copy())
        self.solver = "daqp"
        self.damping = 0.5
        joint_names = robot_model.joint_names(model)
        self.ik_limits = [
            mink.ConfigurationLimit(model),
            mink.VelocityLimit(model, {name: 3 * np.pi for name in joint_names}),
        ]
        self.human_root_name = config.human_root_name
        # the same targets as Retargeter's (GMR's own height ratio is inverted, see config.py)
        self.human_scale_table = config.scaled(human_height)
        self.tables = []
        self.pos_offsets: dict[str, np.ndarray] = {}
        self.rot_offsets: dict[str, Rotation] = {}
        for t_index, table in enumerate((config.ik_match_table1, config.ik_match_table2)):
            use = config.use_ik_match_table1 if t_index == 0 else config.use_ik_match_table2
            tasks, body_to_task = [], {}
            for e in table:
                if e.position_weight == 0 and e.rotation_weight == 0:
                    continue
                task = mink.FrameTask(
                    frame_name=e.robot_frame,
                    frame_type=e.frame_type,
                    position_cost=e.position_weight,
                    orientation_cost=e.rotation_weight,
                    lm_damping=1,
                )
                tasks.append(task)
                body_to_task[e.human_body] = task
                if t_index == 0:  # GMR offsets the data with table 1's offsets for both tables
                    ground = config.ground_height * np.array([0, 0, 1])
                    self.pos_offsets[e.human_body] = np.array(e.position_offset) - ground
                    self.rot_offsets[e.human_body] = Rotation.from_quat(e.rotation_offset, scalar_first=True)
            self.tables.append((use, tasks, body_to_task))
        self.failures = 0

    def _scale(self, data: dict) -> dict:
        root_pos, root_quat = data[self.human_root_name]
        scaled_root = self.human_scale_table[self.human_root_name] * root_pos
        local = {}
        for name in data:
            if name not in self.human_scale_table or name == self.human_root_name:
                continue
            local[name] = (data[name][0] - root_pos) * self.human_scale_table[name]
        out = {self.human_root_name: (scaled_root, root_quat)}
        for name, p in local.items():
            out[name] = (p + scaled_root, data[name][1])
        return out

    def _offset(self, data: dict) -> dict:
        out = {}
        for name, (pos, quat) in data.items():
            if name not in self.rot_offsets:
                out[name] = [pos, quat]
                continue
            updated = (Rotation.from_quat(quat, scalar_first=True) * self.rot_offsets[name]).as_quat(scalar_first=True)
            offset = Rotation.from_quat(updated, scalar_first=True).apply(self.pos_offsets[name])
            out[name] = [pos + offset, updated]
        return out

    def _error(self, tasks) -> float:
        return float(np.linalg.norm(np.concatenate([t.compute_error(self.configuration) for t in tasks])))

    def _solve(self, tasks) -> None:
        dt = self.configuration.model.opt.timestep
        # GMR's call: the limits list is the 6th positional argument, i.e. safety_break.
        vel = mink.solve_ik(self.configuration, tasks, dt, self.solver, self.damping,
                            self.ik_limits)  # type: ignore[arg-type]
        self.configuration.integrate_inplace(vel, dt)

    def retarget(self, positions: np.ndarray, quaternions: np.ndarray) -> np.ndarray:
        data = {name: [np.asarray(positions[i]), np.asarray(quaternions[i])] for i, name in enumerate(GMR_BODIES)}
        data = self._offset(self._scale(data))
        for use, _, body_to_task in self.tables:
            if use:
                for name, task in body_to_task.items():
                    pos, rot = data[name]
                    task.set_target(mink.SE3.from_rotation_and_translation(mink.SO3(rot), pos))
        try:
            for use, tasks, _ in self.tables:
                if not use:
                    continue
                curr = self._error(tasks)
                self._solve(tasks)
                nxt = self._error(tasks)
                n = 0
                while curr - nxt > 0.001 and n < self.max_iter:
                    curr = nxt
                    self._solve(tasks)
                    nxt = self._error(tasks)
                    n += 1
        except (mink.NotWithinConfigurationLimits, mink.NoSolutionFound):
            self.failures += 1  # GMR itself would raise and stop
        return self.configuration.data.qpos.copy()
