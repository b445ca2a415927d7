"""GMR-style IK from HumanFrames onto the Unitree G1, with a bounded amount of work per frame.

Per frame:

1. Targets. An arm near its shoulder's gimbal pole is first moved, if need be, to pass on the side
   that keeps the shoulder pitch on its branch (:mod:`.shoulder_pole`, ``shoulder_poles``): the
   side decides which way the pitch turns. From the 23 human bodies, every table
   entry's target pose is computed at once (vectorised numpy): positions scaled about the root
   (``human_scale_table`` times ``human_height_assumption / human_height``), rotation offset on
   the right, position offset in the target frame, ground shift (``ground_height`` +
   ``ground_offset``) on z. Conventions in :mod:`mocapline.services.retarget.config`.
2. IK. Differential-IK steps from the previous frame's solution (warm start) until a step lowers
   the cost by less than ``tolerance`` (2 %) of it, at least ``min_iterations`` (2) and at most
   ``iterations`` (8): a slow frame stops after two steps, a fast one gets more (about 2 at
   120 Hz, 3 at 30 Hz on real takes). Each step is one weighted least-squares QP in the joint
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
   the hands 10-15 cm off; robust, the positions lead (see the README's measurements). Two
   backends solve it:
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
3. First frame of a take (after construction or :meth:`G1Retargeter.reset`): the root is put on its
   target, then a fixed, larger budget runs (GMR's two stages: ``settle_iterations`` steps of table
   1, then of table 2, plus one) with light damping (``SETTLE_LM_DAMPING``) and no velocity limit.
4. Failure. A non-finite input, a QP without solution (``mink.NoSolutionFound``), any solver
   exception or a non-finite solution never propagates: the frame gets the last good pose,
   ``ik_failed=True``, ``stats.failures`` goes up, and the next frame starts from that pose.

Frames: targets and solutions are in the HumanFrame's world (Z-up, metres); the G1's root (pelvis)
pose is qpos[0:7] in that world. Which way the robot faces follows from the config's rotation
offsets (Axis, Xsens: the robot faces where the human faces).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import daqp
import mink
import mujoco
import numpy as np
from scipy.linalg.lapack import dposv

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX
from mocapline.core.frames import HumanFrame, RobotFrame
from mocapline.robot import g1 as robot_model

from .config import IKConfig, MatchEntry, load_ik_config
from .shoulder_pole import ShoulderPoles

SOLVER = "daqp"
BACKENDS = ("fast", "mink")
LIMIT_GAIN = 0.95  # mink.ConfigurationLimit's default gain
_INF = 1e30
# A step of the fast backend that raises the weighted cost by more than COST_TOLERANCE (numerical
# noise at an exact match) is halved.
COST_TOLERANCE = 1e-9
# An adaptive frame stops at this weighted cost: the targets are met (a reachable pose; the known-answer
# take stays within 0.003 mm, jerk unchanged, with 2.0 instead of 3.0 steps a frame at 60 Hz).
COST_FLOOR = 1e-5

# Chosen by measurement (``mocapline bench retarget``; numbers in services/retarget/README.md):
# - lm_damping 0.1 converges fastest on reachable targets (2 steps: 0.1 mm at 4x motion speed, lm 1:
#   1.2 mm) but on targets the G1 cannot reach (arms overhead past the shoulder-roll limit, a
#   gimbal-locked shoulder) the lightly damped steps cycle between two poses: joint jerk x2-x40.
# - lm_damping 0.7: exact on reachable targets at 1x and 4x, jerk below GMR's.
# - steps until the cost drops < 2 % (2..8): the same error as a fixed 4 (or 30) steps on every
#   take, 2.0-3.2 steps a frame instead of 4; min 2 keeps the jerk below a fixed count's.
# - arm rotation Huber 0.01 rad: position and hand errors below GMR's on every take (quadratic: the
#   demo take 34.8 vs 31.7 mm, hands 63.5 vs 58.1; 0.05 rad: 33.6; 0.003: 27.0 but a jump on a
#   real take). A posture pull, more steps, lm_damping 1-3, a table-1 stage first, a log rotation
#   error and a Cauchy loss were measured too and changed the demo take's error by < 1 mm.
DEFAULT_ITERATIONS = 8
DEFAULT_TOLERANCE = 0.02
DEFAULT_MIN_ITERATIONS = 2
DEFAULT_POSTURE_WEIGHT = 0.0
DEFAULT_ARM_HUBER = 0.01
DEFAULT_STAGE1_ITERATIONS = 0
DEFAULT_LM_DAMPING = 0.7
DEFAULT_SOLVER_DAMPING = 1e-3
DEFAULT_SETTLE_ITERATIONS = 10
DEFAULT_FPS = 60.0
SETTLE_LM_DAMPING = 0.05


_WINDOW_SIGNS = np.array([[-1.0], [1.0]])


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
        self._reach = self.max_step * _WINDOW_SIGNS

    def set_reference(self, q: np.ndarray | None, frames: int = 1) -> None:
        """Bound the joints to ``frames`` frame periods of motion from ``q`` (None: no bound)."""
        self.q_ref = None if q is None else q[self._qslice].astype(np.float64)
        if frames != self._frames:
            self._frames = frames
            self.max_step = self.velocity * self.frame_dt * frames
            self._reach = self.max_step * _WINDOW_SIGNS
        if self.q_ref is not None:
            # the joints' window this frame, as (-lower, upper)
            self.signed_window = (self.q_ref + self._reach) * _WINDOW_SIGNS

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


@dataclass
class _Table:
    """One IK table: the arrays that turn human bodies into its targets."""

    entries: tuple[MatchEntry, ...]
    human_index: np.ndarray  # (n,)
    pos_offset: np.ndarray  # (n, 3)
    rot_offset: np.ndarray  # (n, 4)
    scale: np.ndarray  # (n,)
    weights: np.ndarray  # (n, 6): position x3, rotation x3

    def __post_init__(self) -> None:
        # The targets' rotations and rotated offsets as one batched product per frame (numpy's
        # per-call overhead, not the arithmetic, is the cost at these sizes): with u the unit
        # human quaternion and x = [u outer u (16), u (4)], x @ lift[i] = [u * rot_offset (4),
        # R(u) R(rot_offset) pos_offset (3)] (the rotation matrix is quadratic in u).
        n = len(self.entries)
        t3 = Q._T.reshape(4, 4, 4)
        self.lift = np.zeros((n, 20, 7))
        self.lift[:, 16:, :4] = np.einsum("nb,abj->naj", self.rot_offset, t3)  # u * rot_offset = u @ this
        local = Q.rotate(self.rot_offset, self.pos_offset)  # (n, 3)
        self.lift[:, :16, 4:] = np.einsum("kij,nj->nki", Q._M.reshape(16, 3, 3), local)
        self.x = np.zeros((n, 1, 20))
        self.x_outer = self.x[:, 0, :16].reshape(n, 4, 4)
        self.x_quat = self.x[:, 0, 16:]
        self.x_quat_col = self.x_quat[:, :, None]
        self.x_quat_row = self.x_quat[:, None, :]
        self.norm = np.zeros((n, 1))
        self.gather = np.zeros((n, 0))

    def set_scales(self, scale: np.ndarray, used: np.ndarray, root_index: int, root_scale: float) -> None:
        """Target position = root_scale p_root + scale_i (p_i - p_root) as one linear map of the
        used bodies' positions (``used``: their indices, sorted): ``gather @ positions[used]``."""
        self.scale = scale
        n = len(self.entries)
        self.gather = np.zeros((n, len(used)))
        rows = np.arange(n)
        np.add.at(self.gather, (rows, np.searchsorted(used, self.human_index)), scale)
        np.add.at(self.gather, (rows, np.full(n, np.searchsorted(used, root_index))), root_scale - scale)


_SKEW = np.zeros((3, 9))  # v @ _SKEW = [v]_x flattened (cross-product matrix)
for _i, _j, _k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
    _SKEW[_i, 3 * _j + _k] = -1.0
    _SKEW[_i, 3 * _k + _j] = 1.0
_EYE9 = np.eye(3).reshape(9)
# multiply(a, conjugate(b)) as one product: (a outer b).reshape(16) @ _T_CONJ
_T_CONJ = (Q._T.reshape(4, 4, 4) * Q._CONJ[None, :, None]).reshape(16, 4)
_T_CONJ_LEFT = _T_CONJ.reshape(4, 16)  # target @ _T_CONJ_LEFT -> (4, 4) L with q_target * conj(q) = q @ L
# [offset, error quaternion, 1] (8,) @ _JAC_FACTORS -> the (6, 6) matrix that turns a dof's motion
# (cdof: angular, linear) into the frame's rows: [-[offset]x, I] (position: lin + ang x offset) over
# [(w I + [v]x), 0] (rotation error). One matrix product then gives all rows of all frames.
_factors = np.zeros((8, 6, 6))
_factors[0:3, 0:3, 0:3] = -_SKEW.reshape(3, 3, 3)
_factors[3, 3:6, 0:3] = np.eye(3)
_factors[4:7, 3:6, 0:3] = _SKEW.reshape(3, 3, 3)
_factors[7, 0:3, 3:6] = np.eye(3)
_JAC_FACTORS = _factors.reshape(8, 36)


@dataclass
class _Regularisation:
    """A posture pull ``posture * (q - neutral)`` per hinge joint, added to the residual (mink's
    PostureTask)."""

    neutral: np.ndarray
    posture: np.ndarray

    def __post_init__(self) -> None:
        self.active = bool(np.any(self.posture))

    def residual(self, q: np.ndarray) -> np.ndarray:
        return self.posture * (q - self.neutral) if self.active else np.zeros(0)


class _FastTable:
    """Per-table arrays of the fast backend, allocated once."""

    def __init__(self, model: mujoco.MjModel, table: _Table) -> None:
        entries = table.entries
        n = len(entries)
        self.n = n
        self.weights = table.weights.reshape(-1).copy()  # (6n,)
        self.weights6 = table.weights.copy()  # (n, 6)
        arm_rows = np.flatnonzero([e.human_body.endswith(("Arm", "ForeArm", "Hand")) for e in entries])
        self.has_arms = arm_rows.size > 0
        # a slice (a view, no copy) when the arm entries are consecutive, as in the shipped configs
        contiguous = self.has_arms and np.array_equal(arm_rows, np.arange(arm_rows[0], arm_rows[0] + arm_rows.size))
        self.arm_rows: slice | np.ndarray = slice(arm_rows[0], arm_rows[-1] + 1) if contiguous else arm_rows
        self.arm_rot_w2 = self.weights6[arm_rows, 3] ** 2
        self.target_pos = np.zeros((n, 3))
        self.target_quat = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
        # q_target * conj(q) = q @ left_conj[i]: the target's product matrix, refreshed with the targets
        self.left_conj = np.zeros((n, 4, 4))
        # Every frame is a body or a site on a body: pose = body pose (+ site offset).
        self.body = np.array([
            model.body(e.robot_frame).id if e.frame_type == "body" else model.site_bodyid[model.site(e.robot_frame).id]
            for e in entries
        ])
        self.site_rows = np.array([i for i, e in enumerate(entries) if e.frame_type == "site"], dtype=np.int64)
        self.site_ids = np.array([model.site(entries[i].robot_frame).id for i in self.site_rows], dtype=np.int64)
        self.site_quat = model.site_quat[self.site_ids].copy() if len(self.site_ids) else np.zeros((0, 4))
        # Batched Jacobians (what mj_jacBody / mj_jacSite compute, for all frames in a few numpy
        # operations instead of one MuJoCo call each): with cdof = (angular, linear) motion of
        # each dof about the root subtree's centre of mass c, a frame at p on a body moved by dof k
        # has J_rot[:, k] = ang_k and J_pos[:, k] = lin_k + ang_k x (p - c), for the dofs on the
        # body's path to the root (``mask``), zero otherwise.
        mask = np.zeros((n, 1, model.nv))
        for i, b in enumerate(self.body):
            while b > 0:
                adr, num = model.body_dofadr[b], model.body_dofnum[b]
                mask[i, 0, adr:adr + num] = 1.0
                b = model.body_parentid[b]
        # one row per Jacobian row, the same shape as the rows (a broadcast operand costs more)
        self.mask = np.repeat(mask[:, 0], 6, axis=0)
        roots = {int(model.body_rootid[b]) for b in self.body}
        if len(roots) != 1:
            raise ValueError("the IK frames must hang from one root body")
        self.root = roots.pop()
        self.jac_in = np.ones((n, 8))  # [offset, error quaternion, 1] per frame, written in place
        # Work buffers, written in place at every evaluation and step (numpy's allocation and
        # per-call overhead, not the arithmetic, is the cost at these sizes).
        self.pos = np.zeros((n, 3))  # frame positions
        self.quat = np.zeros((n, 4))  # frame quaternions (bodies')
        self.quat3 = self.quat.reshape(n, 1, 4)
        self.offset = self.jac_in[:, :3]  # frame position - root subtree's centre of mass
        self.qe = self.jac_in[:, 3:7]  # error quaternions, w >= 0
        self.qe_raw = np.zeros((n, 1, 4))
        self.qe_raw2 = self.qe_raw[:, 0]
        self.qe_raw_w = self.qe_raw[:, :, 0]
        self.qe_v = self.qe[:, 1:]
        self.sign = np.zeros((n, 1))
        self.err = np.zeros((n, 6))  # position (m), quaternion error vector 2 v
        self.err_pos = self.err[:, :3]
        self.err_rot = self.err[:, 3:]
        self.w = self.weights6.copy()  # row weights of the next step (the arms' Huber-reweighted)
        self.w_col = self.w.reshape(-1, 1)
        self.b = np.zeros((n, 6))  # W * err
        # the arm rows' rotation errors and weights: views when the rows are consecutive
        contiguous = isinstance(self.arm_rows, slice)
        self.arm_w = self.w[self.arm_rows, 3:] if contiguous else None
        self.arm_err = self.err_rot[self.arm_rows] if contiguous else None
        self.b_flat = self.b.reshape(-1)
        self.arm_base = self.weights6[arm_rows, 3:].copy()  # (k, 3)
        self.arm_size = np.zeros((arm_rows.size, 1))
        self.arm_size_flat = self.arm_size[:, 0]
        self.arm_w2_sum = float(self.arm_rot_w2.sum())
        self.factors = np.zeros((n, 36))
        self.factors6 = self.factors.reshape(6 * n, 6)
        self.A = np.zeros((6 * n, model.nv))
        self.AT = self.A.T
        self.ax = np.zeros(6 * n)  # A x: the model's change of W e


class IKBackend(Protocol):
    """What :class:`G1Retargeter` needs of an IK solver: the fast one (numpy + daqp) and the
    reference one (mink.solve_ik) both provide it, and a test checks they reach the same answer."""

    @property
    def qpos(self) -> np.ndarray: ...

    def set_qpos(self, q: np.ndarray) -> None: ...

    def reset(self) -> None: ...

    def begin_frame(self, settled: bool) -> None:
        """A new frame: ``settled`` once the take's first frame has converged."""
        ...

    def set_targets(self, table: int, poses: np.ndarray) -> None: ...

    def step(self, table: int, final_share: float = 0.0) -> tuple[float, float | None]:
        """One step on ``table``; the weighted cost before and after it. ``final_share`` > 0: a
        backend may make this the frame's last step, taken without evaluating the cost after it
        (returned as None), when the step is predicted to lower the cost by at most this share."""
        ...


class _FastBackend:
    """The IK QP assembled with vectorised numpy and solved by Cholesky or ``daqp.solve`` (box
    constraints).

    Errors are world-aligned: position ``p_target - p`` (m) and the quaternion error vector
    ``2 v`` of ``q_target * conj(q) = (w, v)``, w >= 0 (= 2 sin(angle/2) axis, the rotation vector
    to first order). Its exact derivative is used: ``d(2 v) = -(w I + [v]x) J_rot dq``, so the
    Gauss-Newton step is consistent even for large rotation errors. Every array of a step is
    preallocated and written in place (``out=``): at these sizes numpy's per-call overhead and
    allocation, not arithmetic, are the cost.
    """

    def __init__(self, model: mujoco.MjModel, tables: list[_Table], lm_damping: float, solver_damping: float,
                 velocity_limit: FrameVelocityLimit | None, regular: _Regularisation, arm_huber: float) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.lm_damping = lm_damping
        self.solver_damping = solver_damping
        self.velocity_limit = velocity_limit
        self.regular = regular
        self.arm_huber = arm_huber
        nv = model.nv
        self.nv = nv
        self._tables = [_FastTable(model, t) for t in tables]
        names = robot_model.joint_names(model)
        jids = [model.joint(n).id for n in names]
        qposadr = np.array([model.jnt_qposadr[j] for j in jids])
        dofadr = np.array([model.jnt_dofadr[j] for j in jids])
        n = len(jids)
        # The G1's hinge joints are contiguous after the free joint: slices, not index arrays.
        if not (np.array_equal(qposadr, np.arange(qposadr[0], qposadr[0] + n))
                and np.array_equal(dofadr, np.arange(dofadr[0], dofadr[0] + n))):
            raise ValueError("expected the hinge joints to follow the free joint contiguously")
        self.qslice = slice(int(qposadr[0]), int(qposadr[0]) + n)
        self.vslice = slice(int(dofadr[0]), int(dofadr[0]) + n)
        self.q_min = model.jnt_range[jids, 0].copy()
        self.q_max = model.jnt_range[jids, 1].copy()
        # [lower; upper] bounds on dq; the free joint's dofs are unbounded
        self._bounds = np.stack((np.full(nv, -_INF), np.full(nv, _INF)))
        self._lower, self._upper = self._bounds  # views, written in place each step
        self._joint_bounds = self._bounds[:, self.vslice]
        # [-0.95 q_min; 0.95 q_max]
        self._signed_range = LIMIT_GAIN * _WINDOW_SIGNS * np.stack((self.q_min, self.q_max))
        self._signed_q = np.zeros((2, n))
        self._room = np.zeros((2, n))
        self._window_room = np.zeros((2, n))
        self._A = np.zeros((0, nv))
        self._sense = np.zeros(nv, dtype=np.int32)
        self._H = np.zeros((nv, nv))
        self._H_diag = np.lib.stride_tricks.as_strided(self._H, shape=(nv,), strides=((nv + 1) * 8,))
        self._g = np.zeros(nv)
        # MjData's arrays as views, fetched once (each attribute access builds a new array object)
        d = self.data
        self._qpos = d.qpos
        self._q = d.qpos[self.qslice]
        self._xpos, self._xquat, self._site_xpos = d.xpos, d.xquat, d.site_xpos
        self._cdof_t = d.cdof.T
        self._com = [d.subtree_com[t.root] for t in self._tables]
        self._q_old = np.zeros(model.nq)
        # (table, cost, tracking cost) of the configuration the table's buffers were evaluated at
        self._cached: tuple[int, float, float] | None = None
        self._lm = lm_damping  # this frame's lm_damping
        self._bound_binds = False  # a bound was active in the last step's solution

    @property
    def qpos(self) -> np.ndarray:
        return self._qpos

    def set_qpos(self, q: np.ndarray) -> None:
        self._qpos[:] = q
        mujoco.mj_kinematics(self.model, self.data)
        self._cached = None

    def reset(self) -> None:
        self._cached = None

    def begin_frame(self, settled: bool) -> None:
        # The first frame of a take starts from the default pose, far from the answer, where
        # damping proportional to the error would crawl: damp it lightly (jitter is no concern).
        self._lm = self.lm_damping if settled else min(self.lm_damping, SETTLE_LM_DAMPING)

    def set_targets(self, table: int, poses: np.ndarray) -> None:
        t = self._tables[table]
        t.target_pos[:] = poses[:, 4:]
        quat = poses[:, :4]
        if len(t.site_rows):
            # A site's frame is its body's times the site's fixed rotation s, so the error quaternion
            # q_target * conj(q_body * s) = (q_target * conj(s)) * conj(q_body): folded into the target.
            quat = quat.copy()
            quat[t.site_rows] = Q.multiply(quat[t.site_rows], Q.conjugate(t.site_quat))
        np.matmul(quat, _T_CONJ_LEFT, out=t.left_conj.reshape(-1, 16))
        self._cached = None

    def _error(self, t: _FastTable) -> None:
        """The errors at the current q into ``t.err``, the error quaternions into ``t.qe`` and the
        frame positions into ``t.pos``. Needs ``mj_kinematics`` at the current q."""
        np.take(self._xpos, t.body, axis=0, out=t.pos)
        np.take(self._xquat, t.body, axis=0, out=t.quat)
        if len(t.site_rows):
            t.pos[t.site_rows] = self._site_xpos[t.site_ids]
        np.matmul(t.quat3, t.left_conj, out=t.qe_raw)
        # (w, v) and (-w, -v) are the same rotation: take w >= 0, the short way round
        np.copysign(1.0, t.qe_raw_w, out=t.sign)
        np.multiply(t.qe_raw2, t.sign, out=t.qe)
        np.subtract(t.target_pos, t.pos, out=t.err_pos)
        np.multiply(t.qe_v, 2.0, out=t.err_rot)

    def step(self, table: int, final_share: float = 0.0) -> tuple[float, float | None]:
        """One Gauss-Newton step on ``table``; returns the weighted cost before and after it.

        With ``final_share`` > 0, a step that the Gauss-Newton model predicts to lower the cost by
        at most that share of it (or to below ``COST_FLOOR``) is the frame's last: it is taken
        without evaluating the errors after it (None is returned for the cost after), which saves
        one error evaluation a frame. The next frame evaluates at its new targets anyway.
        """
        m, d = self.model, self.data
        t = self._tables[table]
        if self._cached is not None and self._cached[0] == table:
            _, cost, track = self._cached
        else:  # new targets: the kinematics are at q already (set_qpos and step leave them so)
            self._error(t)
            cost, track = self._evaluate(t)
        q = self._q
        mujoco.mj_comPos(m, d)  # cdof and the subtree centres of mass at q
        # All frames' Jacobians at once (see _FastTable), the rotation rows already multiplied by
        # the error's derivative: d(2 v) = -(w I + [v]x) J_rot dq (sign folded into the residual).
        np.subtract(t.pos, self._com[table], out=t.offset)
        np.dot(t.jac_in, _JAC_FACTORS, out=t.factors)  # (n, 36) = (6n, 6): 6 rows per frame
        t.factors6 *= t.w_col  # the row weights, on the small factor matrices
        A = np.dot(t.factors6, self._cdof_t, out=t.A)  # one (6n, 6) x (6, nv) product, not n small ones
        A *= t.mask  # zero the dofs not on the frame's path to the root
        H = np.dot(t.AT, A, out=self._H)
        H_damping = self.solver_damping + self._lm * track
        self._H_diag += H_damping
        g = np.dot(t.b_flat, A, out=self._g)  # = -f, the QP's linear term is f
        reg = self.regular
        if reg.active:
            H[self.vslice, self.vslice].flat[:: q.size + 1] += reg.posture**2
            g[self.vslice] -= reg.posture * reg.residual(q)

        # Limits as simple bounds on dq: joint range (mink.ConfigurationLimit's rule, gain 0.95:
        # 0.95 (q_min - q) <= dq <= 0.95 (q_max - q), never pushing into a range) and the per-frame
        # velocity limit (q_ref - v dt - q <= dq <= q_ref + v dt - q, never pushing either).
        # Both as one (2, n) array of signed rows [-lower; upper], so that both sides take the same
        # few numpy calls, not one per bound.
        room = self._room
        np.multiply(_WINDOW_SIGNS, q, out=self._signed_q)  # [-q; q]
        np.multiply(self._signed_q, -LIMIT_GAIN, out=room)
        room += self._signed_range
        vl = self.velocity_limit
        if vl is not None and vl.q_ref is not None:
            np.subtract(vl.signed_window, self._signed_q, out=self._window_room)
            np.minimum(room, self._window_room, out=room)
        np.maximum(room, 0.0, out=room)  # lower <= 0 <= upper: never pushing into a limit
        # Most steps leave every bound inactive (86-100 % on the synthetic and arm takes, a third to
        # a half on the real whole-body ones): the QP's solution is then the Newton step H x = -f,
        # one Cholesky solve (LAPACK dposv, ~3x cheaper than daqp's set-up). daqp only when a bound binds.
        # A bound that bound on the previous step usually binds again (a joint resting at its
        # limit): then straight to daqp, without the Cholesky attempt.
        newton = False
        if not self._bound_binds:
            _, x, info = dposv(H, g)
            outside = np.multiply(_WINDOW_SIGNS, x[self.vslice], out=self._window_room)  # [-x; x]
            outside -= room  # > 0 where x leaves [lower, upper]
            newton = info == 0 and outside.max() <= 0.0
        if not newton:
            np.multiply(room, _WINDOW_SIGNS, out=self._joint_bounds)
            x, _, exitflag, info = daqp.solve(H, -g, self._A, self._upper, self._lower, self._sense)
            if exitflag < 1:
                self._cached = None
                self._bound_binds = False
                raise mink.NoSolutionFound(f"daqp exitflag {exitflag}")
            self._bound_binds = bool(np.any(info["lam"]))  # a multiplier != 0: a bound binds
        qpos = self._qpos
        if final_share > 0.0:
            # the model's decrease ||b||^2 - ||b - A x||^2 = 2 g.x - ||A x||^2, where the Newton
            # step has ||A x||^2 = x.H x - lambda ||x||^2 = g.x - lambda ||x||^2
            gx = float(np.dot(g, x))
            if newton:
                decrease = gx + (H_damping * float(np.dot(x, x)))
            else:
                ax = np.dot(A, x, out=t.ax)
                decrease = 2.0 * gx - float(np.dot(ax, ax))
            if decrease <= final_share * cost or cost - decrease <= COST_FLOOR:
                mujoco.mj_integratePos(m, qpos, x, 1.0)
                mujoco.mj_kinematics(m, d)
                self._cached = None
                return cost, None
        np.copyto(self._q_old, qpos)
        mujoco.mj_integratePos(m, qpos, x, 1.0)
        mujoco.mj_kinematics(m, d)
        self._error(t)
        after, after_track = self._evaluate(t)
        if after > cost + COST_TOLERANCE:
            # The linear model overshot (a joint limit, a near-singular arm, targets the G1 cannot
            # reach): fall back to half the step. Bounded work: one more FK, no second solve.
            np.copyto(qpos, self._q_old)
            mujoco.mj_integratePos(m, qpos, x, 0.5)
            mujoco.mj_kinematics(m, d)
            self._error(t)
            after, after_track = self._evaluate(t)
        self._cached = (table, after, after_track)
        return cost, after

    def _evaluate(self, t: _FastTable) -> tuple[float, float]:
        """(cost, tracking cost) at ``t.err``; writes the row weights W of the next step into
        ``t.w`` and W * err into ``t.b``.

        The arms' rotation errors beyond ``arm_huber`` rad cost linearly (Huber), not
        quadratically: their rows are scaled by sqrt(width / |error|) (iteratively reweighted
        least squares), so an arm orientation the G1 cannot take stops outweighing the positions.
        """
        extra = 0.0
        if self.arm_huber and t.has_arms:
            delta = self.arm_huber
            size = t.arm_size  # (k, 1)
            rot = t.arm_err if t.arm_err is not None else t.err_rot[t.arm_rows]
            np.einsum("ij,ij->i", rot, rot, out=t.arm_size_flat)
            np.sqrt(size, out=size)
            np.maximum(size, delta, out=size)  # max(|e|, d)
            # Huber w^2 d (2|e| - d) minus what the reweighted rows count, w^2 d max(|e|, d)
            extra = delta * (float(np.dot(t.arm_rot_w2, t.arm_size_flat)) - delta * t.arm_w2_sum)
            np.divide(delta, size, out=size)
            np.sqrt(size, out=size)  # sqrt(min(1, d / |e|))
            if t.arm_w is not None:
                np.multiply(t.arm_base, size, out=t.arm_w)
            else:
                t.w[t.arm_rows, 3:] = t.arm_base * size
        np.multiply(t.err, t.w, out=t.b)
        track = float(np.vdot(t.b, t.b)) + extra
        if self.regular.active:
            posture = self.regular.residual(self._q)
            return track + float(posture @ posture), track
        return track, track


class _MinkBackend:
    """``mink.solve_ik`` with FrameTasks (built once) and the limits in ``limits=``."""

    def __init__(self, model: mujoco.MjModel, tables: list[_Table], lm_damping: float, solver_damping: float,
                 velocity_limit: FrameVelocityLimit | None, regular: _Regularisation, arm_huber: float) -> None:
        self.model = model
        self.lm_damping = lm_damping
        self.arm_huber = arm_huber
        self.arm_tasks = [
            [(k, e.rotation_weight) for k, e in enumerate(t.entries)
             if e.human_body.endswith(("Arm", "ForeArm", "Hand"))]
            for t in tables
        ]
        self.configuration = mink.Configuration(model, robot_model.default_qpos(model))
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
            target = robot_model.default_qpos(model)
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


@dataclass
class RetargetStats:
    frames: int = 0
    failures: int = 0
    last_error: str = ""
    steps: int = 0  # IK steps over all frames


@dataclass
class RetargetResult:
    qpos: np.ndarray  # (36,) root pos, root quat w x y z, 29 joints
    ik_failed: bool
    error: str = ""

    @property
    def root_pos(self) -> np.ndarray:
        return self.qpos[0:3]

    @property
    def root_quat(self) -> np.ndarray:
        return self.qpos[3:7]

    @property
    def joint_pos(self) -> np.ndarray:
        return self.qpos[7:]


@dataclass
class RetargetOptions:
    iterations: int = DEFAULT_ITERATIONS  # cap on the steps of a frame
    tolerance: float = DEFAULT_TOLERANCE  # stop once a step lowers the cost by less than this share
    min_iterations: int = DEFAULT_MIN_ITERATIONS
    stage1_iterations: int = DEFAULT_STAGE1_ITERATIONS
    lm_damping: float = DEFAULT_LM_DAMPING
    solver_damping: float = DEFAULT_SOLVER_DAMPING
    posture_weight: float = DEFAULT_POSTURE_WEIGHT  # pull of every joint towards the standing pose
    arm_huber: float = DEFAULT_ARM_HUBER  # rad: arm rotation errors beyond it cost linearly (0: quadratic)
    settle_iterations: int = DEFAULT_SETTLE_ITERATIONS
    fps: float = DEFAULT_FPS
    velocity_limit: bool = True
    shoulder_poles: bool = True  # each shoulder keeps its branch at the gimbal pole (``shoulder_pole``)
    human_height: float | None = None
    ground_offset: float = 0.0
    backend: str = "fast"

    def validate(self) -> None:
        if self.iterations < 1:
            raise ValueError("iterations must be >= 1")
        if not 1 <= self.min_iterations <= self.iterations:
            raise ValueError("min_iterations must be in [1, iterations]")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")
        if not 0 <= self.stage1_iterations <= self.iterations:
            raise ValueError("stage1_iterations must be in [0, iterations]")
        if self.settle_iterations < 0:
            raise ValueError("settle_iterations must be >= 0")
        if min(self.lm_damping, self.solver_damping, self.arm_huber, self.posture_weight) < 0:
            raise ValueError("dampings, the arm Huber width and the posture weight must be >= 0")
        if not self.fps > 0:
            raise ValueError("fps must be > 0")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: choose from {BACKENDS}")
        if self.human_height is not None and not self.human_height > 0:
            raise ValueError(f"human height must be > 0 m, got {self.human_height}")

    def describe(self) -> str:
        steps = (f"{self.iterations} steps/frame" if self.tolerance == 0 else
                 f"{self.min_iterations}-{self.iterations} steps/frame until the cost drops < {self.tolerance:g}")
        extra = (f", arm rotation Huber {self.arm_huber:g} rad" if self.arm_huber else "") + (
            f", posture {self.posture_weight:g}" if self.posture_weight else "") + (
            ", shoulders keep their branch at the gimbal pole" if self.shoulder_poles else "")
        return f"{steps}, lm_damping {self.lm_damping}, solver damping {self.solver_damping}{extra}"


class G1Retargeter:
    """HumanFrame (23 GMR bodies) -> G1 qpos, a fixed number of IK steps per frame.

    Not thread-safe; one instance per stream. ``reset()`` between takes.
    """

    def __init__(
        self,
        config: IKConfig | str | None = None,
        options: RetargetOptions | None = None,
        *,
        model: mujoco.MjModel | None = None,
    ) -> None:
        self.model = model if model is not None else robot_model.load_ik_model()
        if config is None or isinstance(config, str):
            config = load_ik_config(config or "axis_studio", model=self.model)
        self.config = config
        self.options = options or RetargetOptions()
        self.options.validate()
        self.joint_names = robot_model.joint_names(self.model)
        if len(self.joint_names) != robot_model.N_JOINTS:
            raise ValueError(f"model has {len(self.joint_names)} hinge joints, expected {robot_model.N_JOINTS}")
        self.velocity_limit = FrameVelocityLimit(
            self.model, config.velocity_limits(self.joint_names), 1.0 / self.options.fps
        )
        self.stats = RetargetStats()
        self._root_index = GMR_BODY_INDEX[config.human_root_name]
        self._tables = [self._build_table(t) for t in config.tables()]
        self._used_bodies = np.unique(np.concatenate([t.human_index for t in self._tables] + [[self._root_index]]))
        self._schedules = self._make_schedules()
        self._schedule_tables = {k: tuple(sorted(set(v))) for k, v in self._schedules.items()}
        self.set_human_height(self.options.human_height)
        backend_cls = _FastBackend if self.options.backend == "fast" else _MinkBackend
        regular = _Regularisation(
            neutral=robot_model.default_qpos(self.model)[7:],
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
        self.poles = ShoulderPoles.for_config(self.model, config) if self.options.shoulder_poles else None
        self._pitch_qpos = [7 + self.joint_names.index(f"{s}_shoulder_pitch_joint") for s in ("left", "right")]
        self.ranges = robot_model.joint_ranges(self.model)
        self._last_good = robot_model.default_qpos(self.model)
        self.reset()

    def _build_table(self, entries: tuple[MatchEntry, ...]) -> _Table:
        n = len(entries)
        return _Table(
            entries=entries,
            human_index=np.array([GMR_BODY_INDEX[e.human_body] for e in entries], dtype=np.int64),
            pos_offset=np.array([e.position_offset for e in entries]).reshape(n, 3),
            rot_offset=np.array([e.rotation_offset for e in entries]).reshape(n, 4),
            scale=np.ones(n),
            weights=np.array([[e.position_weight] * 3 + [e.rotation_weight] * 3 for e in entries]).reshape(n, 6),
        )

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
        q = robot_model.default_qpos(self.model) if qpos is None else np.array(qpos, dtype=np.float64)
        q[3:7] /= np.linalg.norm(q[3:7])
        q[7:] = np.clip(q[7:], self.ranges[:, 0], self.ranges[:, 1])
        self.backend.set_qpos(q)
        self.backend.reset()
        self._last_good = q.copy()
        self._settled = False
        self.velocity_limit.set_reference(None)
        if self.poles is not None:
            self.poles.reset(branches)

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
        return self._targets(self._tables[table], np.asarray(positions)[self._used_bodies], quaternions)

    def _targets(self, t: _Table, used_positions: np.ndarray, quaternions: np.ndarray) -> np.ndarray:
        u = quaternions[t.human_index]
        norm = t.norm
        np.einsum("ij,ij->i", u, u, out=norm[:, 0])
        if not (norm.min() >= 1e-12 and math.isfinite(norm.sum())):  # NaN fails the first, inf the second
            raise FloatingPointError("zero-norm or non-finite human body quaternion")
        np.sqrt(norm, out=norm)
        np.divide(u, norm, out=t.x_quat)
        np.multiply(t.x_quat_col, t.x_quat_row, out=t.x_outer)
        out = np.empty((len(u), 7))
        np.matmul(t.x, t.lift, out=out.reshape(-1, 1, 7))
        pos = out[:, 4:]
        pos += np.dot(t.gather, used_positions)
        pos[:, 2] -= self.ground
        return out

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
        the targets are met (``COST_FLOOR``). One step a frame (min_iterations 1) would halve the
        work at 120 Hz but stops some frames after one step and others after two: jerk above GMR's
        on two real takes, so two is the floor."""
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
        try:
            positions = np.asarray(positions, dtype=np.float64)
            quaternions = np.asarray(quaternions, dtype=np.float64)
            if self.poles is not None and self._settled:
                last = self._last_good
                positions, quaternions = self.poles.apply(
                    positions, quaternions, (float(last[self._pitch_qpos[0]]), float(last[self._pitch_qpos[1]])))
            used = self._used_bodies
            used_positions = positions[used]
            if not math.isfinite(used_positions.sum()):  # one check: NaN and inf propagate
                raise FloatingPointError("non-finite human body position")
            schedule = self._schedules[self._settled]
            for i in self._schedule_tables[self._settled]:
                self.backend.set_targets(i, self._targets(self._tables[i], used_positions, quaternions))
            self.velocity_limit.set_reference(self._last_good if self._settled else None, max(1, int(elapsed_frames)))
            if not self._settled:
                self._place_root(positions, quaternions)
            self.backend.begin_frame(self._settled)
            self._solve(schedule)
            q = self.backend.qpos
            if not math.isfinite(q.sum()):  # NaN and inf propagate
                raise FloatingPointError("non-finite IK solution")
        except Exception as exc:  # noqa: BLE001 - a failed solve must never kill the stream
            error = f"{type(exc).__name__}: {exc}"
        if error:
            self.stats.failures += 1
            self.stats.last_error = error
            self.backend.set_qpos(self._last_good)
            return RetargetResult(self._last_good.copy(), True, error)
        self._settled = True
        self._last_good = np.array(self.backend.qpos, dtype=np.float64)
        return RetargetResult(self._last_good.copy(), False)

    def retarget_frame(self, frame: HumanFrame, elapsed_frames: int = 1) -> RobotFrame:
        """HumanFrame -> RobotFrame with the same posture_index, timestamps and trace context."""
        result = self.retarget(frame.positions, frame.quaternions, elapsed_frames)
        return robot_frame_from(frame, result.qpos, result.ik_failed)


def robot_frame_from(frame: HumanFrame, qpos: np.ndarray, ik_failed: bool) -> RobotFrame:
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
    )


class OneFrameSmoother:
    """Centred binomial [1, 2, 1] / 4 filter over consecutive qpos: exactly one frame of delay.

    ``push(q, tag)`` returns ``(smoothed q, tag)`` of the *previous* push (None on the first): the
    centred average of that pose and its two neighbours, with the tag (e.g. the frame's metadata)
    it was pushed with. ``flush()`` returns the last one (an end uses its nearest neighbour twice).
    Root quaternion: the same weights, sign-aligned, normalised. Frequency response at 60 fps:
    gain 0 at 30 Hz (frame-to-frame alternation is removed completely), 0.93 at 5 Hz, 0.99 at 2 Hz.
    """

    def __init__(self) -> None:
        self._prev: np.ndarray | None = None
        self._cur: np.ndarray | None = None
        self._tag: object = None

    def reset(self) -> None:
        self._prev = self._cur = None
        self._tag = None

    @property
    def pending(self) -> bool:
        return self._cur is not None

    @staticmethod
    def _blend(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        out = 0.25 * a + 0.5 * b + 0.25 * c
        qa, qb, qc = a[3:7], b[3:7], c[3:7]
        qa = qa if np.dot(qa, qb) >= 0 else -qa
        qc = qc if np.dot(qc, qb) >= 0 else -qc
        qq = 0.25 * qa + 0.5 * qb + 0.25 * qc
        out[3:7] = qq / np.linalg.norm(qq)
        return out

    def push(self, q: np.ndarray, tag: object = None) -> tuple[np.ndarray, object] | None:
        q = np.array(q, dtype=np.float64)
        if self._cur is None:
            self._cur, self._tag = q, tag
            return None
        prev = self._prev if self._prev is not None else self._cur
        out = (self._blend(prev, self._cur, q), self._tag)
        self._prev, self._cur, self._tag = self._cur, q, tag
        return out

    def flush(self) -> tuple[np.ndarray, object] | None:
        if self._cur is None:
            return None
        prev = self._prev if self._prev is not None else self._cur
        out = (self._blend(prev, self._cur, self._cur), self._tag)
        self.reset()
        return out
