"""Forward kinematics of Axis BVH channels, and conversion to GMR's Z-up frame in metres.

Per bone: local rotation R = A0(a0) @ A1(a1) @ A2(a2) from the three Euler angles in the
configured order (intrinsic, as BVH channels); global rotation = parent global @ local; global
position = parent global position + parent global rotation @ local translation. Then cm -> m and
Y-up -> Z-up as GMR's BVH loader does: C = [[1,0,0],[0,0,-1],[0,1,0]], p' = C p, R' = C R.

This runs for every frame, and at these sizes numpy's cost is the number of calls, not the
arithmetic, so the hot path is a fixed, short sequence of whole-array operations with no per-bone
Python loop:

1. one gather of the needed channel values, scaled so that a single ``cos`` yields, per bone and
   per Euler factor k, the triple (1, cos a_k, sin a_k) (sin a = cos(a - pi/2); cos 0 = 1);
2. the outer product of the three triples (27 terms): a local rotation is multilinear in them, so
   one matmul of [27 terms, translation] with a precomputed (30, 16) basis gives each bone's
   local 4x4 transform;
3. pointer jumping for the global transforms, T_i <- T_anc(i) @ T_i, anc <- anc[anc]:
   ceil(log2(depth + 1)) batched matmuls for the whole tree (3 on these skeletons);
4. one matmul maps each selected global transform to [C p, 4 q q^T of C R] and q is read off
   the column of 4 q q^T with the largest diagonal entry (Shepperd's method, well conditioned
   for every rotation), w >= 0.

``bodies`` only evaluates the bones the 23 GMR bodies need (21 of 59 on Axis Studio);
``bodies_and_hands`` adds the 40 hand bodies (core/bodies.py HAND_BODIES: 61 of 59 + the identity
row, the same sequence of operations, one more pointer jump).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from mocapline.core.bodies import GMR_BODIES, HAND_BODIES
from mocapline.formats.axis_bvh import ROTATION_ORDERS
from mocapline.formats.skeleton import Skeleton, SkeletonKind, get_skeleton

logger = logging.getLogger(__name__)

Y_UP_TO_Z_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
CM_TO_M = 0.01
N_BODIES = len(GMR_BODIES)
N_WITH_HANDS = N_BODIES + len(HAND_BODIES)

_AXIS = {"X": 0, "Y": 1, "Z": 2}
_EULER_TERMS = [(i, j, k) for i in range(3) for j in range(3) for k in range(3)]


def _skew(axis: int) -> np.ndarray:
    """K with K v = e_axis x v."""
    x, y, z = np.eye(3)[axis]
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def _elementary(axis: int, slot: int) -> np.ndarray:
    """Coefficient of slot (0: the constant 1, 1: cos a, 2: sin a) in the rotation by a about
    ``axis`` (Rodrigues: I + sin a K + (1 - cos a) K^2)."""
    kk = _skew(axis)
    return (np.eye(3) + kk @ kk, -(kk @ kk), kk)[slot]


def _quaternion_map() -> tuple[np.ndarray, np.ndarray]:
    """Linear map from a flattened rotation matrix (9,) to Q = 4 q q^T (16,), q = (w, x, y, z)."""
    m = {(i, j): 3 * i + j for i in range(3) for j in range(3)}
    entries: dict[tuple[int, int], list[tuple[float, tuple[int, int] | None]]] = {
        (0, 0): [(1, None), (1, (0, 0)), (1, (1, 1)), (1, (2, 2))],
        (1, 1): [(1, None), (1, (0, 0)), (-1, (1, 1)), (-1, (2, 2))],
        (2, 2): [(1, None), (-1, (0, 0)), (1, (1, 1)), (-1, (2, 2))],
        (3, 3): [(1, None), (-1, (0, 0)), (-1, (1, 1)), (1, (2, 2))],
        (0, 1): [(1, (2, 1)), (-1, (1, 2))],
        (0, 2): [(1, (0, 2)), (-1, (2, 0))],
        (0, 3): [(1, (1, 0)), (-1, (0, 1))],
        (1, 2): [(1, (0, 1)), (1, (1, 0))],
        (1, 3): [(1, (0, 2)), (1, (2, 0))],
        (2, 3): [(1, (1, 2)), (1, (2, 1))],
    }
    linear = np.zeros((9, 16))
    constant = np.zeros(16)
    for (a, b), items in entries.items():
        for coef, entry in items:
            for r, c in {(a, b), (b, a)}:
                if entry is None:
                    constant[4 * r + c] += coef
                else:
                    linear[m[entry], 4 * r + c] += coef
    return linear, constant


_Q_LINEAR, _Q_CONSTANT = _quaternion_map()
_Q_DIAGONAL = np.array([0, 5, 10, 15])
_Q_DIAGONALS = {start: start + _Q_DIAGONAL for start in (0, 3)}


def _output_map() -> np.ndarray:
    """(16, 19) map from a flattened Y-up global transform T to [C p (3), Q(C R) (16)]."""
    out = np.zeros((16, 19))
    c = Y_UP_TO_Z_UP
    for a in range(3):
        out[4 * a + 3, :3] = c[:, a]
        for j in range(3):
            for i in range(3):
                out[4 * a + j, 3:] += c[i, a] * _Q_LINEAR[3 * i + j]
    out[15, 3:] = _Q_CONSTANT  # T[3, 3] == 1
    return out


_OUTPUT_MAP = _output_map()
_COLUMN_OFFSETS: dict[tuple[int, int], np.ndarray] = {}


def _quaternions_from_outer(rows: np.ndarray, start: int) -> np.ndarray:
    """(n, width) rows holding Q = 4 q q^T at columns start..start+16 -> (n, 4) quaternions.

    Column k of Q is 4 q q_k; the k with the largest q_k^2 is the best conditioned. Its norm is
    4 |q_k|; its sign is fixed so that w >= 0.
    """
    n, width = rows.shape
    offsets = _COLUMN_OFFSETS.get((n, width))
    if offsets is None:
        offsets = width * np.arange(n)[:, None] + start + 4 * np.arange(4)
        if len(_COLUMN_OFFSETS) < 64:  # batch sizes vary; keep the cache bounded
            _COLUMN_OFFSETS[(n, width)] = offsets
    flat = rows.reshape(-1)
    k = np.argmax(rows[:, _Q_DIAGONALS[start]], axis=-1)
    column = flat[offsets + k[:, None]]
    norm = np.sqrt(np.einsum("ij,ij->i", column, column))
    return column * (np.copysign(1.0, column[:, 0]) / norm)[:, None]


def matrices_to_quaternions(rotations: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotation matrices -> (..., 4) unit quaternions w, x, y, z with w >= 0."""
    rotations = np.asarray(rotations, dtype=np.float64)
    flat = rotations.reshape(-1, 9)
    q = _quaternions_from_outer(flat @ _Q_LINEAR + _Q_CONSTANT, 0)
    return q.reshape(rotations.shape[:-2] + (4,))


class _Chain:
    """Precomputed FK over a subset of bones that is closed under taking the parent."""

    def __init__(self, skeleton: Skeleton, rotation_order: str, bones: list[int]) -> None:
        parents = skeleton.parents
        sub = {bone: i for i, bone in enumerate(bones)}
        m = len(bones)
        self.n_bones = len(parents)
        self.size = m
        if any(parents[b] > b for b in bones):
            raise ValueError("skeleton bones must come after their parents")
        # Row m is the identity: parent of the root and fixed point of the jumps.
        local_parent = np.array([sub[parents[b]] if parents[b] >= 0 else m for b in bones] + [m])
        depth = [0] * m
        for i in range(m):  # stream order: parents come first
            depth[i] = depth[local_parent[i]] + 1 if local_parent[i] != m else 0
        max_depth = max(depth, default=0)
        self.jumps: list[np.ndarray] = []
        anc = local_parent
        for _ in range(math.ceil(math.log2(max_depth + 1))):
            self.jumps.append(anc)
            anc = anc[anc]

        # Gathered row per bone: t_x, t_y, t_z in metres, then for each Euler factor k the
        # arguments whose cos are 1, cos a_k, sin a_k. Row m, the identity, gathers arguments
        # 0, 0, pi/2 for every factor: its local transform is I up to cos(pi/2) ~ 6e-17.
        base = 6 * np.array(bones + [0], dtype=np.int64)[:, None]
        index = np.zeros((m + 1, 12), dtype=np.int64)
        scale = np.zeros((m + 1, 12))
        shift = np.zeros((m + 1, 12))
        index[:, :3] = base + np.arange(3)
        scale[:m, :3] = CM_TO_M
        for k in range(3):
            index[:, 3 + 3 * k : 6 + 3 * k] = base + 3 + k
            scale[:m, 4 + 3 * k : 6 + 3 * k] = np.pi / 180.0
            shift[:m, 5 + 3 * k] = np.pi / 2
            shift[m, 5 + 3 * k] = -np.pi / 2
        self.index = index
        self.scale = scale
        self.shift = shift
        # Outer product as one take from the flattened (m + 1, 12) cos array: factor f of term
        # (i, j, l) of row b is cos[b, 3 + 3 f + (i, j, l)[f]]. Shape (3, m + 1, 27), each factor
        # contiguous.
        terms = np.array(_EULER_TERMS)
        self.take = np.stack(
            [12 * np.arange(m + 1)[:, None] + (3 + 3 * f + terms[:, f])[None, :] for f in range(3)]
        )
        # Local transform (16,) = [27 terms, t (3)] @ basis: the rotation block from the terms,
        # the translation column from t, the bottom-right 1 from the all-constants term.
        basis = np.zeros((30, 16))
        axes = [_AXIS[letter] for letter in rotation_order]
        for n, term in enumerate(_EULER_TERMS):
            factors = [_elementary(axes[f], term[f]) for f in range(3)]
            basis[n].reshape(4, 4)[:3, :3] = factors[0] @ factors[1] @ factors[2]
        basis[0, 15] = 1.0
        for r in range(3):
            basis[27 + r, 4 * r + 3] = 1.0
        self.basis = basis

    def global_transforms(self, channels: np.ndarray) -> np.ndarray:
        """(n_bones, 6) or (F, n_bones, 6) channels -> (size + 1, 4, 4) or (F, size + 1, 4, 4)
        global transforms in the Y-up frame, metres; the last row is the identity."""
        # Plain a[i] is several times cheaper than a[..., i] for one frame: keep both paths.
        flat: np.ndarray
        if channels.ndim == 2:
            pick = _pick_single
            flat = channels.reshape(-1)
        else:
            pick = _pick_batch
            flat = channels.reshape(len(channels), -1)
        values = pick(flat, self.index) * self.scale - self.shift  # (..., m + 1, 12)
        cos = np.cos(values).reshape(flat.shape[:-1] + (-1,))
        factors = pick(cos, self.take)  # (..., 3, m + 1, 27)
        terms = factors[..., 0, :, :] * factors[..., 1, :, :] * factors[..., 2, :, :]
        local = np.concatenate((terms, values[..., :3]), axis=-1) @ self.basis
        transforms = local.reshape(flat.shape[:-1] + (self.size + 1, 4, 4))
        for anc in self.jumps:
            transforms = pick(transforms, anc) @ transforms
        return transforms


def _pick_single(array: np.ndarray, index: np.ndarray) -> np.ndarray:
    return array[index]


def _pick_batch(array: np.ndarray, index: np.ndarray) -> np.ndarray:
    return array[:, index]


def _ancestors_closure(parents: np.ndarray, bones: set[int]) -> list[int]:
    closed: set[int] = set()
    for bone in bones:
        while bone >= 0 and bone not in closed:
            closed.add(bone)
            bone = int(parents[bone])
    return sorted(closed)


class AxisForwardKinematics:
    """FK for one skeleton and rotation order; every index table is built here, once."""

    def __init__(
        self,
        skeleton: Skeleton | SkeletonKind | str = SkeletonKind.AXIS_STUDIO,
        rotation_order: str = "YXZ",
    ) -> None:
        if not isinstance(skeleton, Skeleton):
            skeleton = get_skeleton(skeleton)
        order = rotation_order.upper()
        if order not in ROTATION_ORDERS:
            raise ValueError(f"rotation_order {rotation_order!r} is not one of {ROTATION_ORDERS}")
        self.skeleton = skeleton
        self.rotation_order = order
        self.n_bones = len(skeleton.bones)

        sources = skeleton.gmr_source_bones()
        self.missing_bodies: tuple[str, ...] = tuple(
            body for body, src in zip(GMR_BODIES, sources, strict=True) if src is None
        )
        if self.missing_bodies:
            logger.warning(
                "skeleton %s has no bone for GMR bodies %s: they get the identity pose",
                skeleton.kind.value,
                ", ".join(self.missing_bodies),
            )
        needed = _ancestors_closure(skeleton.parents, {s for s in sources if s is not None})
        self._bodies = _Chain(skeleton, order, needed)
        row = {bone: i for i, bone in enumerate(needed)}
        self._body_rows = np.array([row[s] if s is not None else len(needed) for s in sources])
        self._missing_rows = np.array(
            [i for i, s in enumerate(sources) if s is None], dtype=np.int64
        )
        self._all = _Chain(skeleton, order, list(range(self.n_bones)))
        hand_bones = skeleton.hand_source_bones()
        self.has_hands = hand_bones is not None
        self._with_hands, self._with_hands_rows = self._bodies, self._body_rows
        if hand_bones is not None:
            with_hands = _ancestors_closure(skeleton.parents, {s for s in sources if s is not None} | set(hand_bones))
            self._with_hands = _Chain(skeleton, order, with_hands)
            row = {bone: i for i, bone in enumerate(with_hands)}
            self._with_hands_rows = np.array([row[s] if s is not None else len(with_hands) for s in sources]
                                             + [row[b] for b in hand_bones])

    def _check(self, channels: np.ndarray, batched: bool) -> np.ndarray:
        channels = np.asarray(channels, dtype=np.float64)
        ndim = 3 if batched else 2
        if channels.ndim != ndim or channels.shape[-2:] != (self.n_bones, 6):
            expected = f"(F, {self.n_bones}, 6)" if batched else f"({self.n_bones}, 6)"
            raise ValueError(f"channels shape {channels.shape}, expected {expected}")
        return channels

    def _bodies_from(self, channels: np.ndarray, hands: bool = False) -> tuple[np.ndarray, np.ndarray]:
        batch = channels.shape[:-2]
        chain, body_rows = (self._with_hands, self._with_hands_rows) if hands else (self._bodies, self._body_rows)
        transforms = chain.global_transforms(channels)
        if batch:
            selected = transforms.reshape(batch + (-1, 16))[:, body_rows]
        else:
            selected = transforms.reshape(-1, 16)[body_rows]
        rows = (selected @ _OUTPUT_MAP).reshape(-1, 19)
        n = len(body_rows)
        positions = rows[:, :3].copy().reshape(batch + (n, 3))
        quaternions = _quaternions_from_outer(rows, 3).reshape(batch + (n, 4))
        if self._missing_rows.size:
            positions[..., self._missing_rows, :] = 0.0
            quaternions[..., self._missing_rows, :] = (1.0, 0.0, 0.0, 0.0)
        return positions, quaternions

    def bodies(self, channels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n_bones, 6) channels -> positions (23, 3) in m and quaternions (23, 4) w x y z,
        Z-up, in GMR_BODIES order."""
        return self._bodies_from(self._check(channels, batched=False))

    def bodies_batch(self, channels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(F, n_bones, 6) -> positions (F, 23, 3) and quaternions (F, 23, 4)."""
        return self._bodies_from(self._check(channels, batched=True))

    def bodies_and_hands(self, channels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n_bones, 6) -> positions (63, 3) and quaternions (63, 4): GMR_BODIES then HAND_BODIES
        (only the 23 bodies for a skeleton without finger bones: ``has_hands``)."""
        return self._bodies_from(self._check(channels, batched=False), hands=True)

    def bodies_and_hands_batch(self, channels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(F, n_bones, 6) -> positions (F, 63, 3) and quaternions (F, 63, 4)."""
        return self._bodies_from(self._check(channels, batched=True), hands=True)

    def all_bones(self, channels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n_bones, 6) -> every bone's global position (n_bones, 3) in m and rotation matrix
        (n_bones, 3, 3), Z-up."""
        transforms = self._all.global_transforms(self._check(channels, batched=False))
        transforms = transforms[: self.n_bones]
        positions = transforms[:, :3, 3] @ Y_UP_TO_Z_UP.T
        rotations = Y_UP_TO_Z_UP @ transforms[:, :3, :3]
        return positions, rotations
