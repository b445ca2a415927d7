"""An IK table's arrays: what turns the human bodies into its entries' target poses."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX

from ..config import MatchEntry


@dataclass
class Table:
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
        self.lift = np.zeros((n, 20, 7))
        self.lift[:, 16:, :4] = Q.right_product_matrix(self.rot_offset)  # u * rot_offset = u @ this
        local = Q.rotate(self.rot_offset, self.pos_offset)  # (n, 3)
        self.lift[:, :16, 4:] = Q.rotation_map(local).reshape(16, n, 3).transpose(1, 0, 2)
        self.x = np.zeros((n, 1, 20))
        self.x_outer = self.x[:, 0, :16].reshape(n, 4, 4)
        self.x_quat = self.x[:, 0, 16:]
        self.x_quat_col = self.x_quat[:, :, None]
        self.x_quat_row = self.x_quat[:, None, :]
        self.norm = np.zeros((n, 1))
        self.gather = np.zeros((n, 0))

    def targets(self, used_positions: np.ndarray, quaternions: np.ndarray, ground: float) -> np.ndarray:
        """(n, 7) target poses (w x y z, x y z) from the used bodies' positions (see
        :meth:`set_scales`) and all bodies' quaternions, shifted down by ``ground`` on z."""
        u = quaternions[self.human_index]
        norm = self.norm
        np.einsum("ij,ij->i", u, u, out=norm[:, 0])
        if not (norm.min() >= 1e-12 and math.isfinite(norm.sum())):  # NaN fails the first, inf the second
            raise FloatingPointError("zero-norm or non-finite human body quaternion")
        np.sqrt(norm, out=norm)
        np.divide(u, norm, out=self.x_quat)
        np.multiply(self.x_quat_col, self.x_quat_row, out=self.x_outer)
        out = np.empty((len(u), 7))
        np.matmul(self.x, self.lift, out=out.reshape(-1, 1, 7))
        pos = out[:, 4:]
        pos += np.dot(self.gather, used_positions)
        pos[:, 2] -= ground
        return out

    def set_scales(self, scale: np.ndarray, used: np.ndarray, root_index: int, root_scale: float) -> None:
        """Target position = root_scale p_root + scale_i (p_i - p_root) as one linear map of the
        used bodies' positions (``used``: their indices, sorted): ``gather @ positions[used]``."""
        self.scale = scale
        n = len(self.entries)
        self.gather = np.zeros((n, len(used)))
        rows = np.arange(n)
        np.add.at(self.gather, (rows, np.searchsorted(used, self.human_index)), scale)
        np.add.at(self.gather, (rows, np.full(n, np.searchsorted(used, root_index))), root_scale - scale)

def build_table(entries: tuple[MatchEntry, ...]) -> Table:
    n = len(entries)
    return Table(
        entries=entries,
        human_index=np.array([GMR_BODY_INDEX[e.human_body] for e in entries], dtype=np.int64),
        pos_offset=np.array([e.position_offset for e in entries]).reshape(n, 3),
        rot_offset=np.array([e.rotation_offset for e in entries]).reshape(n, 4),
        scale=np.ones(n),
        weights=np.array([[e.position_weight] * 3 + [e.rotation_weight] * 3 for e in entries]).reshape(n, 6),
    )
