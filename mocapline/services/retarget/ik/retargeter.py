"""GMR-style IK from HumanFrames onto a robot (its description: mocapline/robot/builds), with a
bounded amount of work per frame.

Per frame:

1. Targets. An arm near its shoulder's gimbal pole is first moved, if need be, to pass on the side
   that keeps the shoulder pitch on its branch (:mod:`..shoulder_pole`, ``shoulder_poles``): the
   side decides which way the pitch turns. From the 23 human bodies, every table
   entry's target pose is computed at once (vectorised numpy): positions scaled about the root
   (``human_scale_table`` times ``human_height_assumption / human_height``), rotation offset on
   the right, position offset in the target frame, ground shift (``ground_height`` +
   ``ground_offset``) on z. Conventions in :mod:`mocapline.services.retarget.config`. Then the
   feet (:mod:`..footing`, ``footing``, on by default): a foot the performer stands on is held
   flat on the floor where it touched down, the body shifted to the height its stance legs give,
   and a stance foot weighs more in the IK.
2. IK. Differential-IK steps from the previous frame's solution (warm start) until a step lowers
   the cost by less than ``tolerance`` (2 %) of it, at least ``min_iterations`` (2) and at most
   ``iterations`` (8): a slow frame stops after two steps, a fast one gets more (steps a frame
   by rate: docs/benchmarks.md). Each step is one weighted least-squares QP in the joint
   displacement ``dq``, mink's FrameTask formulation::

       min  sum_i || W_i (J_i dq - e_i) ||^2 + (solver_damping + lm_damping * sum_i ||W_i e_i||^2) ||dq||^2
            + || P (q + dq - q_standing) ||^2                              (posture, off by default)
       s.t. joint range:     0.95 (q_min - q) <= dq <= 0.95 (q_max - q)        (mink.ConfigurationLimit)
            joint velocity:  |q + dq - q_previous_frame| <= v_max * elapsed / fps (FrameVelocityLimit)

   solved by daqp. ``W_i`` are the table's position / rotation weights, the LM term is mink's
   FrameTask ``lm_damping``. The arms' rotation errors are Huber-robust (``arm_huber``, 0.01 rad):
   beyond the width they cost linearly, their rows reweighted each step (IRLS). The configs weight
   an upper arm's rotation 10x its hand's position, and a human arm the G1 cannot copy (overhead
   past the shoulder limits, a CMU shoulder 16 cm from the G1's) then twisted the torso and left
   the hands far off; robust, the positions lead (docs/retarget.md "Choices, by measurement").
   Two backends solve it (:mod:`.fast_backend`, :mod:`.mink_backend`):
   - ``fast`` (default): all tasks at once in a handful of numpy operations (MuJoCo Jacobians,
     world-aligned errors: position, and the quaternion error vector 2v of q_target * conj(q) with
     its exact derivative; all frames' Jacobians at once from MuJoCo's ``cdof``). The QP is one
     Cholesky solve (LAPACK ``dposv``) when no bound binds, else daqp with the limits as simple
     bounds (directly after a step whose solution had a bound active). A step that raises the cost
     (the linear model overshot) is halved: one more FK, never a second solve. A step that may be
     the frame's last and that the Gauss-Newton model predicts to lower the cost by less than
     ``tolerance`` is taken without evaluating the errors after it.
   - ``mink``: ``mink.solve_ik`` on FrameTasks (built once, targets updated per frame) with
     ``limits=[ConfigurationLimit, FrameVelocityLimit]`` passed as limits, so that they apply;
     daqp through qpsolvers. The reference; ``tests/test_retarget.py`` checks both agree.
   Two-table configs: the first ``stage1_iterations`` steps of a frame use table 1 (default 0),
   the rest table 2.
3. First frame of a take (after construction or :meth:`Retargeter.reset`): the root is put on its
   target, then a fixed, larger budget runs (GMR's two stages: ``settle_iterations`` steps of table
   1, then of table 2, plus one) with light damping (``SETTLE_LM_DAMPING``) and no velocity limit.
4. Failure. A numeric failure (:data:`.backend.NUMERIC_FAILURES`: a non-finite input or
   solution, a singular system, a QP without solution) never propagates: the frame gets the last
   good pose, ``ik_failed=True``, ``stats.failures`` goes up, and the next frame starts from that
   pose. Any other exception is a bug and propagates.

Frames: targets and solutions are in the HumanFrame's world (Z-up, metres); the robot's root
(pelvis) pose is qpos[0:7] in that world. Which way the robot faces follows from the config's rotation
offsets (Axis, Xsens: the robot faces where the human faces).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mujoco
import numpy as np

from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.core.frames import HumanFrame, RobotFrame
from mocapline.robot import model as robot_model
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import get_robot

from ..config import IKConfig, MatchEntry, load_ik_config
from ..footing import Footing, FootingSettings, contact_holds, foot_geometry, plan_contacts, stance_floor
from ..shoulder_pole import ShoulderPoles
from .backend import COST_FLOOR, NUMERIC_FAILURES, IKBackend, Posture
from .fast_backend import FastBackend
from .limits import FrameVelocityLimit
from .mink_backend import MinkBackend
from .options import RetargetOptions
from .tables import build_table


@dataclass
class RetargetStats:
    frames: int = 0
    failures: int = 0
    last_error: str = ""
    steps: int = 0  # IK steps over all frames


@dataclass
class RetargetResult:
    qpos: np.ndarray  # (7 + n,) root pos, root quat w x y z, the robot's n joints
    ik_failed: bool
    error: str = ""
    # The last table's (m, 7) targets of this frame as computed from the bodies given, before the
    # shoulder poles and the footing moved them: what ``Retargeter.targets(positions, quaternions)``
    # returns for them (float64 bodies: bit for bit), handed back so that whoever measures the
    # frame against them (``retarget_file.convert``'s quality) need not compute them again. None
    # when the poles moved an arm (the bodies solved for are not the ones given) or the frame failed
    # before its targets were computed. The targets solved for, after the poles and the footing:
    # ``Retargeter.solved_targets``.
    targets: np.ndarray | None = None

    @property
    def root_pos(self) -> np.ndarray:
        return self.qpos[0:3]

    @property
    def root_quat(self) -> np.ndarray:
        return self.qpos[3:7]

    @property
    def joint_pos(self) -> np.ndarray:
        return self.qpos[7:]


class Retargeter:
    """HumanFrame (23 GMR bodies) -> robot qpos, a fixed number of IK steps per frame.

    Not thread-safe; one instance per stream. ``reset()`` between takes.
    """

    def __init__(
        self,
        config: IKConfig | str | None = None,
        options: RetargetOptions | None = None,
        *,
        robot: RobotDescription | None = None,
        model: mujoco.MjModel | None = None,
    ) -> None:
        self.robot = robot or get_robot()
        self.model = model if model is not None else robot_model.load_ik_model(self.robot)
        if config is None or isinstance(config, str):
            config = load_ik_config(config or "axis_studio", robot=self.robot, model=self.model)
        self.config = config
        self.options = options or RetargetOptions()
        self.options.validate()
        if self.options.joint_ranges == "human":
            self.model = robot_model.with_ik_ranges(self.robot, self.model)
        self.joint_names = robot_model.joint_names(self.model)
        if self.joint_names != self.robot.joint_names:
            raise ValueError(f"the model's joints {self.joint_names} are not {self.robot.name}'s")
        self.velocity_limit = FrameVelocityLimit(
            self.model, config.velocity_limits(self.joint_names), 1.0 / self.options.fps
        )
        self.stats = RetargetStats()
        self._root_index = GMR_BODY_INDEX[config.human_root_name]
        self._tables = [build_table(t) for t in config.tables()]
        self._used_bodies = np.unique(np.concatenate([t.human_index for t in self._tables] + [[self._root_index]]))
        self._schedules = self._make_schedules()
        self._schedule_tables = {k: tuple(sorted(set(v))) for k, v in self._schedules.items()}
        self.set_human_height(self.options.human_height)
        backend_cls = FastBackend if self.options.backend == "fast" else MinkBackend
        regular = Posture(
            neutral=robot_model.default_qpos(self.robot, self.model)[7:],
            posture=np.full(len(self.joint_names), self.options.posture_weight),
        )
        self.backend: IKBackend = backend_cls(
            self.model,
            self._tables,
            self.options.lm_damping,
            self.options.solver_damping,
            self.velocity_limit if self.options.velocity_limit else None,
            regular,
            self.options.arm_huber,
        )
        pitch = self.robot.shoulder_pitch
        self.poles = (ShoulderPoles.for_config(self.model, config, pitch, self.robot.torso_body)
                      if self.options.shoulder_poles and pitch is not None else None)
        self._pitch_qpos = [7 + self.joint_names.index(j) for j in pitch] if pitch is not None else []
        self.footing = self._make_footing() if self.options.footing else None
        self._fk = mujoco.MjData(self.model)  # the solved pose's feet, for the footing's last lift
        self._foot_ids = [self.model.body(name).id for name in self.robot.feet] if self.footing else []
        self._weight_scale: dict[tuple[int, int], float] = {}  # (table, foot): the stance weights' scale
        self.solved_targets: np.ndarray | None = None  # the last table's targets of the last frame, as solved
        self.ranges = robot_model.joint_ranges(self.model)
        self._last_good = robot_model.default_qpos(self.robot, self.model)
        self.reset()

    # -- settings ---------------------------------------------------------------------------------

    def set_human_height(self, human_height: float | None) -> None:
        """Rescale for a human ``human_height`` m tall (None: the config's assumed height)."""
        scales = self.config.scaled(human_height)
        self.human_height = human_height
        self._root_scale = scales[self.config.human_root_name]
        for table in self._tables:
            table.set_scales(np.array([scales[e.human_body] for e in table.entries]), self._used_bodies,
                             self._root_index, self._root_scale)

    @property
    def ground(self) -> float:
        return self.config.ground_height + self.options.ground_offset

    def reset(self, qpos: np.ndarray | None = None, branches: list[float] | None = None) -> None:
        """Start a new take from ``qpos`` (default: standing zero pose); the next frame settles.
        ``branches``: the shoulders' branches at the gimbal pole to go on with (``pole_branches``
        of the IK that stopped; default: none yet)."""
        q = robot_model.default_qpos(self.robot, self.model) if qpos is None else np.array(qpos, dtype=np.float64)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = np.clip(q[7:], self.ranges[:, 0], self.ranges[:, 1])
        self.backend.set_qpos(q)
        self.backend.reset()
        self._last_good = q.copy()
        self._last_out = q.copy()  # the last pose handed out (an ik_failed frame repeats it)
        self._settled = False
        self.velocity_limit.set_reference(None)
        if self.poles is not None:
            self.poles.reset(branches)
        if self.footing is not None:
            self.footing.reset()

    @property
    def qpos(self) -> np.ndarray:
        """The current (last good) solution."""
        return self._last_good.copy()

    @property
    def pole_branches(self) -> list[float] | None:
        """The shoulders' branches at the gimbal pole (left, right; ``shoulder_pole``), for a
        restarted IK to go on with; None without the poles."""
        return None if self.poles is None else list(self.poles.branch)

    # -- targets ----------------------------------------------------------------------------------

    def targets(self, positions: np.ndarray, quaternions: np.ndarray, table: int = -1) -> np.ndarray:
        """(n, 7) target poses (w x y z, x y z) of one table's entries, in table order."""
        return self._tables[table].targets(np.asarray(positions)[self._used_bodies], quaternions, self.ground)

    def plan_take(self, positions: np.ndarray, quaternions: np.ndarray) -> None:
        """Offline, the whole take known (``positions`` (F, 23, 3), ``quaternions`` (F, 23, 4)): the
        footing's floor, contacts and holds from all of it (``Footing.set_plan``); the i-th call
        of :meth:`retarget` after it is frame i. Without footing, nothing."""
        footing = self.footing
        if footing is None:
            return
        floor = stance_floor(positions, footing.settings.floor_percentile)
        contacts = plan_contacts(positions, footing.fps, footing.settings, floor)
        feet = [body for body, _ in footing.tables[-1] if body is not None]
        holds = None
        if len(feet) == 2:
            xy = np.array([self.targets(p, q)[feet, 4:6] for p, q in zip(positions, quaternions, strict=True)])
            holds = contact_holds(contacts, xy)
        footing.set_plan(contacts, floor, holds)

    def _place_root(self, positions: np.ndarray, quaternions: np.ndarray) -> None:
        """First frame of a take: put the root on its target (the joints keep their pose), so the
        settling steps only have to bend joints, never turn the whole robot around."""
        for i, table in enumerate(self._tables):
            for k, e in enumerate(table.entries):
                if e.robot_frame == self.config.robot_root_name and e.frame_type == "body":
                    pose = self.targets(positions, quaternions, i)[k]
                    q = np.array(self.backend.qpos, dtype=np.float64)
                    q[3:7] = pose[:4]
                    q[0:3] = pose[4:]
                    self.backend.set_qpos(q)
                    return

    def _make_footing(self) -> Footing | None:
        """The feet's entries of each table (the foot link's, and those of sites on it)."""
        feet = self.robot.feet
        m = self.model
        layout: list[list[tuple[int | None, list[int]]]] = []
        for table in self._tables:
            per_foot: list[tuple[int | None, list[int]]] = []
            for foot in feet:
                body = next((i for i, e in enumerate(table.entries)
                             if e.frame_type == "body" and e.robot_frame == foot), None)
                sites = [i for i, e in enumerate(table.entries) if e.frame_type == "site"
                         and m.body(int(m.site_bodyid[m.site(e.robot_frame).id])).name == foot]
                per_foot.append((body, sites))
            layout.append(per_foot)
        if all(body is None for per_foot in layout for body, _ in per_foot):
            return None
        settings = FootingSettings(flight_cap=math.inf) if self.options.keep_flight else None
        return Footing(foot_geometry(self.robot), layout, self.options.fps, settings)

    def _stance_weights(self, targets: dict[int, np.ndarray]) -> None:
        """A stance foot's entries weigh more (``stance_gain`` on the position, a share of it on the
        rotation), blended with its hold."""
        footing = self.footing
        assert footing is not None
        gain = footing.settings.stance_gain - 1.0
        share = footing.settings.stance_rotation_share
        for i in targets:
            for k, (body, sites) in enumerate(footing.tables[i]):
                scale = 1.0 + gain * footing.stance[k]
                if self._weight_scale.get((i, k)) == scale:
                    continue
                self._weight_scale[(i, k)] = scale
                w = self._tables[i].weights
                for e in ([] if body is None else [body]) + sites:
                    self.backend.set_weights(i, e, float(w[e, 0]) * scale,
                                             float(w[e, 3]) * (1.0 + (scale - 1.0) * share))

    def table_entries(self, table: int = -1) -> tuple[MatchEntry, ...]:
        return self._tables[table].entries

    # -- solve ------------------------------------------------------------------------------------

    def _make_schedules(self) -> dict[bool, tuple[int, ...]]:
        last = len(self._tables) - 1
        settle = [i for i in range(last + 1) for _ in range(self.options.settle_iterations)] + [last]
        if last == 0:
            steady = [0] * self.options.iterations
        else:
            s1 = self.options.stage1_iterations
            steady = [0] * s1 + [1] * (self.options.iterations - s1)
        return {False: tuple(settle), True: tuple(steady)}

    def _solve(self, schedule: tuple[int, ...]) -> None:
        """Run the schedule; on the settled last table, stop early once a step has lowered the
        cost by less than ``tolerance`` of it (after ``min_iterations`` steps of that table) or
        the targets are met (``COST_FLOOR``). One step a frame (min_iterations 1) would stop some
        frames after one step and others after two, a jerk above GMR's: two is the floor."""
        o = self.options
        last = len(self._tables) - 1
        tol = o.tolerance if self._settled else 0.0
        done = 0
        for table in schedule:
            may_stop = tol > 0 and table == last and done + 1 >= o.min_iterations
            before, after = self.backend.step(table, tol if may_stop else 0.0)
            self.stats.steps += 1
            if table != last:
                continue
            done += 1
            if after is None or (may_stop and (after <= COST_FLOOR or before - after <= tol * before)):
                break

    def retarget(self, positions: np.ndarray, quaternions: np.ndarray, elapsed_frames: int = 1) -> RetargetResult:
        """Solve one frame: positions (23, 3) m, quaternions (23, 4) w x y z, GMR_BODIES order.

        ``elapsed_frames``: source frames since the previous call (> 1 after upstream loss); the
        velocity limit allows that many frame periods of motion.
        """
        self.stats.frames += 1
        error = ""
        given: np.ndarray | None = None
        try:
            positions = np.asarray(positions, dtype=np.float64)
            quaternions = np.asarray(quaternions, dtype=np.float64)
            bodies = positions, quaternions
            if self.poles is not None and self._settled:
                last = self._last_good
                positions, quaternions = self.poles.apply(
                    positions, quaternions, (float(last[self._pitch_qpos[0]]), float(last[self._pitch_qpos[1]])))
            used = self._used_bodies
            used_positions = positions[used]
            if not math.isfinite(used_positions.sum()):  # one check: NaN and inf propagate
                raise FloatingPointError("non-finite human body position")
            schedule = self._schedules[self._settled]
            targets = {i: self._tables[i].targets(used_positions, quaternions, self.ground)
                       for i in self._schedule_tables[self._settled]}
            raw = targets.get(len(self._tables) - 1)
            if raw is not None and positions is bodies[0] and quaternions is bodies[1]:  # the poles moved nothing
                given = raw.copy()  # before the footing moves them (in place)
            if self.footing is not None:
                self.footing.adjust(positions, targets, max(1, int(elapsed_frames)))
                self._stance_weights(targets)
            for i, poses in targets.items():
                self.backend.set_targets(i, poses)
            self.solved_targets = targets.get(len(self._tables) - 1)
            self.velocity_limit.set_reference(self._last_good if self._settled else None, max(1, int(elapsed_frames)))
            if not self._settled:
                self._place_root(positions, quaternions)
            self.backend.begin_frame(self._settled)
            self._solve(schedule)
            q = self.backend.qpos
            if not math.isfinite(q.sum()):  # NaN and inf propagate
                raise FloatingPointError("non-finite IK solution")
        except NUMERIC_FAILURES as exc:  # a frame the numbers defeat must never kill the stream
            error = f"{type(exc).__name__}: {exc}"
        if error:
            self.stats.failures += 1
            self.stats.last_error = error
            self.backend.set_qpos(self._last_good)
            return RetargetResult(self._last_out.copy(), True, error, targets=given)
        self._settled = True
        self._last_good = np.array(self.backend.qpos, dtype=np.float64)
        self._last_out = self._on_floor(self._last_good)
        return RetargetResult(self._last_out.copy(), False, targets=given)

    def _on_floor(self, q: np.ndarray) -> np.ndarray:
        """The output pose: with footing, ``q`` raised where a sole point is under the floor (the
        IK goes on from ``q`` itself: the next frame's start and velocity limit are the solution's)."""
        out = q.copy()
        if self.footing is None:
            return out
        fk = self._fk
        fk.qpos[:] = q
        mujoco.mj_kinematics(self.model, fk)
        out[2] += self.footing.solved_lift([[*fk.xquat[b], *fk.xpos[b]] for b in self._foot_ids])
        return out

    def retarget_frame(self, frame: HumanFrame, elapsed_frames: int = 1) -> RobotFrame:
        """HumanFrame -> RobotFrame with the same posture_index, timestamps and trace context."""
        result = self.retarget(frame.positions, frame.quaternions, elapsed_frames)
        return robot_frame_from(frame, result.qpos, result.ik_failed, self.robot.name)


def robot_frame_from(frame: HumanFrame, qpos: np.ndarray, ik_failed: bool, robot_model: str = "") -> RobotFrame:
    return RobotFrame(
        posture_index=frame.posture_index,
        capture_timestamp_us=frame.capture_timestamp_us,
        root_pos=np.array(qpos[0:3], dtype=np.float64),
        root_quat=np.array(qpos[3:7], dtype=np.float64),
        joint_pos=np.array(qpos[7:], dtype=np.float64),
        ik_failed=ik_failed,
        traceparent=frame.traceparent,
        segment=frame.segment,
        session_id=frame.session_id,
        avatar_index=frame.avatar_index,
        avatar_name=frame.avatar_name,
        robot_model=robot_model,
    )
