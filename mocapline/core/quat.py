"""Quaternion helpers (w, x, y, z; Hamilton product), pure numpy.

The functions take (..., 4) arrays. ``multiply`` and ``rotate`` are written as one small matrix
product each (no per-component Python arithmetic): the retargeter calls them on every frame and
numpy's per-call overhead, not the arithmetic, dominates at these sizes.
"""

from __future__ import annotations

import numpy as np


def _product_tensor() -> np.ndarray:
    """T (16, 4) with multiply(a, b) = (a outer b).reshape(16) @ T."""
    t = np.zeros((4, 4, 4))
    # (w1 w2 - v1.v2, w1 v2 + w2 v1 + v1 x v2)
    t[0, 0, 0] = 1
    for i in (1, 2, 3):
        t[i, i, 0] = -1
        t[0, i, i] = 1
        t[i, 0, i] = 1
    for i, j, k in ((1, 2, 3), (2, 3, 1), (3, 1, 2)):
        t[i, j, k] = 1
        t[j, i, k] = -1
    return t.reshape(16, 4)


_T = _product_tensor()
_T3 = _T.reshape(4, 4, 4)
_CONJ = np.array([1.0, -1.0, -1.0, -1.0])
# conjugate_product_matrix as one product: a @ _T_CONJ_LEFT = L(a).reshape(16)
_T_CONJ_LEFT = (_T3 * _CONJ[None, :, None]).reshape(4, 16)


def multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b for (..., 4) arrays (broadcasting)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    outer = a[..., :, None] * b[..., None, :]
    return outer.reshape(outer.shape[:-2] + (16,)) @ _T


def conjugate(q: np.ndarray) -> np.ndarray:
    return np.asarray(q, dtype=np.float64) * _CONJ


def right_product_matrix(b: np.ndarray) -> np.ndarray:
    """(..., 4, 4) M with ``multiply(a, b) = a @ M`` for (..., 4) b: b's product as a linear map of a."""
    return np.einsum("...b,abj->...aj", np.asarray(b, dtype=np.float64), _T3)


def conjugate_product_matrix(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """(..., 4, 4) L with ``multiply(a, conjugate(q)) = q @ L`` for (..., 4) a: the error rotation
    towards ``a`` as a linear map of q. ``out``: a C-contiguous (..., 4, 4) array to write it into
    (one call a frame, no allocation)."""
    a = np.asarray(a, dtype=np.float64)
    if out is not None and not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous (a reshaped copy would not receive the result)")
    flat = None if out is None else out.reshape(a.shape[:-1] + (16,))
    return np.matmul(a, _T_CONJ_LEFT, out=flat).reshape(a.shape[:-1] + (4, 4))


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Rotate (..., 3) vectors by unit quaternions (..., 4)."""
    v = np.asarray(v, dtype=np.float64)
    return (to_matrix(q) @ v[..., None])[..., 0]


def normalize(q: np.ndarray) -> np.ndarray:
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _matrix_tensor() -> np.ndarray:
    """M (16, 9) with to_matrix(q) = (q outer q).reshape(16) @ M, for unit q."""
    m = np.zeros((4, 4, 3, 3))
    w, x, y, z = 0, 1, 2, 3

    def put(i: int, j: int, terms: list[tuple[float, int, int]]) -> None:
        for coef, a, b in terms:
            m[a, b, i, j] += coef

    # 1 - 2(y^2 + z^2) = w^2 + x^2 - y^2 - z^2 for unit q
    put(0, 0, [(1, w, w), (1, x, x), (-1, y, y), (-1, z, z)])
    put(1, 1, [(1, w, w), (-1, x, x), (1, y, y), (-1, z, z)])
    put(2, 2, [(1, w, w), (-1, x, x), (-1, y, y), (1, z, z)])
    put(0, 1, [(2, x, y), (-2, w, z)])
    put(1, 0, [(2, x, y), (2, w, z)])
    put(0, 2, [(2, x, z), (2, w, y)])
    put(2, 0, [(2, x, z), (-2, w, y)])
    put(1, 2, [(2, y, z), (-2, w, x)])
    put(2, 1, [(2, y, z), (2, w, x)])
    return m.reshape(16, 9)


_M = _matrix_tensor()


def to_matrix(q: np.ndarray) -> np.ndarray:
    """(..., 4) unit quaternions -> (..., 3, 3) rotation matrices."""
    q = np.asarray(q, dtype=np.float64)
    outer = q[..., :, None] * q[..., None, :]
    return (outer.reshape(outer.shape[:-2] + (16,)) @ _M).reshape(q.shape[:-1] + (3, 3))


def rotation_map(vectors: np.ndarray) -> np.ndarray:
    """L (16, 3 n) with ``(q outer q).reshape(16) @ L`` = [R(q) v_1, ..., R(q) v_n] * |q|^2 for
    (n, 3) fixed vectors: any quaternion turns them in one product (unnormalised q scales them by
    |q|^2, which a direction test need not undo)."""
    vectors = np.asarray(vectors, dtype=np.float64).reshape(-1, 3)
    return np.einsum("aij,nj->ani", _M.reshape(16, 3, 3), vectors).reshape(16, -1)


def from_axis_angle(axis: np.ndarray, angle: np.ndarray | float) -> np.ndarray:
    axis = np.asarray(axis, dtype=np.float64)
    axis = axis / np.linalg.norm(axis, axis=-1, keepdims=True)
    half = 0.5 * np.asarray(angle, dtype=np.float64)[..., None]
    return np.concatenate((np.cos(half) + 0 * axis[..., :1], np.sin(half) * axis), axis=-1)


def log(q: np.ndarray) -> np.ndarray:
    """Rotation vector (..., 3) of unit quaternions (shortest arc, angle in [0, pi])."""
    q = np.asarray(q, dtype=np.float64)
    sign = np.copysign(1.0, q[..., :1])
    v = q[..., 1:] * sign
    s = np.sqrt(np.sum(v * v, axis=-1, keepdims=True))
    angle = 2.0 * np.arctan2(s, q[..., :1] * sign)
    # angle / s -> 2 as s -> 0 (angle ~ 2 s); s == 0 gives 0
    return v * (angle / np.maximum(s, 1e-300))


def exp(rotvec: np.ndarray) -> np.ndarray:
    """Unit quaternions (..., 4) of rotation vectors (..., 3)."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    angle = np.linalg.norm(rotvec, axis=-1, keepdims=True)
    half = 0.5 * angle
    k = np.divide(np.sin(half), angle, out=np.full_like(angle, 0.5), where=angle > 1e-12)
    return np.concatenate((np.cos(half), rotvec * k), axis=-1)


def slerp(a: np.ndarray, b: np.ndarray, t: np.ndarray | float) -> np.ndarray:
    """Spherical interpolation from a (t=0) to b (t=1) along the shortest arc; (..., 4)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    dot = np.sum(a * b, axis=-1)
    b = np.where((dot < 0)[..., None], -b, b)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin_theta = np.sin(theta)
    small = sin_theta < 1e-9
    safe = np.where(small, 1.0, sin_theta)
    wa = np.where(small, 1.0 - t, np.sin((1.0 - t) * theta) / safe)
    wb = np.where(small, t, np.sin(t * theta) / safe)
    return normalize(wa[..., None] * a + wb[..., None] * b)
