"""core/quat's product matrices: each the linear map that its docstring states, checked against multiply."""

import numpy as np
import pytest

from mocapline.core import quat as Q


def unit(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return Q.normalize(rng.normal(size=(*shape, 4)))


def test_right_product_matrix_is_multiplication_on_the_right() -> None:
    rng = np.random.default_rng(1)
    a, b = unit(rng, 5), unit(rng, 5)
    m = Q.right_product_matrix(b)
    assert m.shape == (5, 4, 4)
    np.testing.assert_allclose((a[:, None, :] @ m)[:, 0], Q.multiply(a, b), atol=1e-15)


def test_conjugate_product_matrix_is_the_error_towards_a() -> None:
    rng = np.random.default_rng(2)
    a, q = unit(rng, 6), unit(rng, 6)
    expected = Q.multiply(a, Q.conjugate(q))
    np.testing.assert_allclose((q[:, None, :] @ Q.conjugate_product_matrix(a))[:, 0], expected, atol=1e-15)
    out = np.zeros((6, 4, 4))
    Q.conjugate_product_matrix(a, out=out)
    np.testing.assert_allclose((q[:, None, :] @ out)[:, 0], expected, atol=1e-15)
    with pytest.raises(ValueError, match="C-contiguous"):
        Q.conjugate_product_matrix(a, out=np.zeros((6, 4, 8))[:, :, :4])


def test_rotation_map_turns_every_vector() -> None:
    rng = np.random.default_rng(3)
    q, v = unit(rng, 1)[0], rng.normal(size=(4, 3))
    outer = np.outer(q, q).reshape(16)
    np.testing.assert_allclose((outer @ Q.rotation_map(v)).reshape(4, 3), Q.rotate(q, v), atol=1e-14)
