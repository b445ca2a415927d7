"""The fast backend's per-table work space: the frames' model ids, the batched Jacobian's factors and
every buffer of a step, allocated once (numpy's allocation and per-call overhead, not the
arithmetic, is the cost at these sizes)."""

from __future__ import annotations

import mujoco
import numpy as np

from .backend import is_arm
from .tables import Table


def _jacobian_factors() -> np.ndarray:
    """(8, 36): [offset, error quaternion, 1] (8,) @ this -> the (6, 6) matrix that turns a dof's
    motion (cdof: angular, linear) into the frame's rows: [-[offset]x, I] (position: lin + ang x
    offset) over [(w I + [v]x), 0] (rotation error). One matrix product then gives all rows of all
    frames."""
    skew = np.zeros((3, 9))  # v @ skew = [v]_x flattened (cross-product matrix)
    for i, j, k in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        skew[i, 3 * j + k] = -1.0
        skew[i, 3 * k + j] = 1.0
    factors = np.zeros((8, 6, 6))
    factors[0:3, 0:3, 0:3] = -skew.reshape(3, 3, 3)
    factors[3, 3:6, 0:3] = np.eye(3)
    factors[4:7, 3:6, 0:3] = skew.reshape(3, 3, 3)
    factors[7, 0:3, 3:6] = np.eye(3)
    return factors.reshape(8, 36)


JAC_FACTORS = _jacobian_factors()


class FastTable:
    """Per-table arrays of the fast backend, allocated once."""

    def __init__(self, model: mujoco.MjModel, table: Table) -> None:
        entries = table.entries
        n = len(entries)
        self.n = n
        self.weights = table.weights.reshape(-1).copy()  # (6n,)
        self.weights6 = table.weights.copy()  # (n, 6)
        arm_rows = np.flatnonzero([is_arm(e) for e in entries])
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
