"""The fast IK backend: each step's QP assembled with vectorised numpy and solved by Cholesky, or by
daqp when a bound binds."""

from __future__ import annotations

import daqp
import mink
import mujoco
import numpy as np
from scipy.linalg.lapack import dposv

from mocapline.core import quat as Q
from mocapline.robot import model as robot_model

from .backend import COST_FLOOR, SETTLE_LM_DAMPING, Posture
from .limits import LIMIT_GAIN, WINDOW_SIGNS, FrameVelocityLimit
from .tables import Table
from .workspace import JAC_FACTORS, FastTable

_INF = 1e30
# A step that raises the weighted cost by more than COST_TOLERANCE (numerical noise at an exact
# match) is halved.
COST_TOLERANCE = 1e-9


class FastBackend:
    """The IK QP assembled with vectorised numpy and solved by Cholesky or ``daqp.solve`` (box
    constraints).

    Errors are world-aligned: position ``p_target - p`` (m) and the quaternion error vector
    ``2 v`` of ``q_target * conj(q) = (w, v)``, w >= 0 (= 2 sin(angle/2) axis, the rotation vector
    to first order). Its exact derivative is used: ``d(2 v) = -(w I + [v]x) J_rot dq``, so the
    Gauss-Newton step is consistent even for large rotation errors. Every array of a step is
    preallocated and written in place (``out=``): at these sizes numpy's per-call overhead and
    allocation, not arithmetic, are the cost.
    """

    def __init__(self, model: mujoco.MjModel, tables: list[Table], lm_damping: float, solver_damping: float,
                 velocity_limit: FrameVelocityLimit | None, regular: Posture, arm_huber: float) -> None:
        self.model = model
        self.data = mujoco.MjData(model)
        self.lm_damping = lm_damping
        self.solver_damping = solver_damping
        self.velocity_limit = velocity_limit
        self.regular = regular
        self.arm_huber = arm_huber
        nv = model.nv
        self.nv = nv
        self._tables = [FastTable(model, t) for t in tables]
        names = robot_model.joint_names(model)
        jids = [model.joint(n).id for n in names]
        qposadr = np.array([model.jnt_qposadr[j] for j in jids])
        dofadr = np.array([model.jnt_dofadr[j] for j in jids])
        n = len(jids)
        # The hinge joints are contiguous after the free joint: slices, not index arrays.
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
        self._signed_range = LIMIT_GAIN * WINDOW_SIGNS * np.stack((self.q_min, self.q_max))
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
        self._lm = self.lm_damping if settled else min(self.lm_damping, SETTLE_LM_DAMPING)

    def set_weights(self, table: int, entry: int, position: float, rotation: float) -> None:
        t = self._tables[table]  # an arm's rotation rows are reweighted from arm_base at every step
        t.w[entry, :3] = position
        t.w[entry, 3:] = rotation
        self._cached = None

    def set_targets(self, table: int, poses: np.ndarray) -> None:
        t = self._tables[table]
        t.target_pos[:] = poses[:, 4:]
        quat = poses[:, :4]
        if len(t.site_rows):
            # A site's frame is its body's times the site's fixed rotation s, so the error quaternion
            # q_target * conj(q_body * s) = (q_target * conj(s)) * conj(q_body): folded into the target.
            quat = quat.copy()
            quat[t.site_rows] = Q.multiply(quat[t.site_rows], Q.conjugate(t.site_quat))
        Q.conjugate_product_matrix(quat, out=t.left_conj)
        self._cached = None

    def _error(self, t: FastTable) -> None:
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
        H, g, H_damping = self._normal_equations(table, track)
        x, newton = self._solve(H, g, self._limit_room())
        qpos = self._qpos
        if final_share > 0.0:
            # the model's decrease ||b||^2 - ||b - A x||^2 = 2 g.x - ||A x||^2, where the Newton
            # step has ||A x||^2 = x.H x - lambda ||x||^2 = g.x - lambda ||x||^2
            gx = float(np.dot(g, x))
            if newton:
                decrease = gx + (H_damping * float(np.dot(x, x)))
            else:
                ax = np.dot(t.A, x, out=t.ax)
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

    def _normal_equations(self, table: int, track: float) -> tuple[np.ndarray, np.ndarray, float]:
        """H, g (= -f) of the step's QP at q and the damping on H's diagonal. Needs ``t.b`` and
        ``t.w`` of :meth:`_evaluate` at q."""
        m, d, t, q = self.model, self.data, self._tables[table], self._q
        mujoco.mj_comPos(m, d)  # cdof and the subtree centres of mass at q
        # All frames' Jacobians at once (see FastTable), the rotation rows already multiplied by
        # the error's derivative: d(2 v) = -(w I + [v]x) J_rot dq (sign folded into the residual).
        np.subtract(t.pos, self._com[table], out=t.offset)
        np.dot(t.jac_in, JAC_FACTORS, out=t.factors)  # (n, 36) = (6n, 6): 6 rows per frame
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
        return H, g, H_damping

    def _limit_room(self) -> np.ndarray:
        """The hinge joints' bounds on dq at q as signed rows [-lower; upper] (2, n).

        Joint range (mink.ConfigurationLimit's rule, gain 0.95: 0.95 (q_min - q) <= dq <= 0.95
        (q_max - q), never pushing into a range) and the per-frame velocity limit (q_ref - v dt - q
        <= dq <= q_ref + v dt - q, never pushing either). Signed, so that both sides take the same
        few numpy calls, not one per bound.
        """
        q, room = self._q, self._room
        np.multiply(WINDOW_SIGNS, q, out=self._signed_q)  # [-q; q]
        np.multiply(self._signed_q, -LIMIT_GAIN, out=room)
        room += self._signed_range
        vl = self.velocity_limit
        if vl is not None and vl.q_ref is not None:
            np.subtract(vl.signed_window, self._signed_q, out=self._window_room)
            np.minimum(room, self._window_room, out=room)
        np.maximum(room, 0.0, out=room)  # lower <= 0 <= upper: never pushing into a limit
        return room

    def _solve(self, H: np.ndarray, g: np.ndarray, room: np.ndarray) -> tuple[np.ndarray, bool]:
        """The QP's solution x, and whether it is the unconstrained Newton step.

        Where every bound is inactive (most steps on most takes; the shares: docs/benchmarks.md)
        the solution is the Newton step H x = -f, one Cholesky solve (LAPACK dposv), cheaper than
        daqp's set-up, which factors H on every call. daqp only when a bound binds. A bound that bound on the
        previous step usually binds again (a joint resting at its limit): then straight to daqp,
        without the Cholesky attempt.
        """
        if not self._bound_binds:
            _, x, info = dposv(H, g)
            outside = np.multiply(WINDOW_SIGNS, x[self.vslice], out=self._window_room)  # [-x; x]
            outside -= room  # > 0 where x leaves [lower, upper]
            if info == 0 and outside.max() <= 0.0:
                return x, True
        np.multiply(room, WINDOW_SIGNS, out=self._joint_bounds)
        x, _, exitflag, info = daqp.solve(H, -g, self._A, self._upper, self._lower, self._sense)
        if exitflag < 1:
            self._cached = None
            self._bound_binds = False
            raise mink.NoSolutionFound(f"daqp exitflag {exitflag}")
        self._bound_binds = bool(np.any(info["lam"]))  # a multiplier != 0: a bound binds
        return x, False

    def _evaluate(self, t: FastTable) -> tuple[float, float]:
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
