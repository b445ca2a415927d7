"""``bench robot``'s base figures: path, where it ended, heading, against the reference's."""

from __future__ import annotations

import numpy as np

from mocapline.bench.robot import base_figures, reference_figures


def test_a_base_that_walks_a_square_back_to_its_start() -> None:
    corners = np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]], dtype=np.float64)
    pos = np.concatenate([np.linspace(a, b, 11)[:-1] for a, b in zip(corners[:-1], corners[1:], strict=True)]
                         + [corners[-1:]])
    up = np.array([1.0, 0.0, 0.0, 0.0])
    samples = [(10 * i, np.array([x, y, 0.75]), up) for i, (x, y) in enumerate(pos)]
    got = base_figures(samples)
    assert got["base_path_m"] == 4.0 and got["base_offset_m"] == 0.0 and got["base_heading_deg"] == 0.0
    root = np.zeros((len(pos), 7))
    root[:, :2], root[:, 3] = pos, 1.0
    root[-1, :2] = [0.3, 0.4]  # a reference that ends 0.5 m away
    ref = reference_figures({"root_pose": root})
    assert ref["ref_offset_m"] == 0.5 and ref["ref_path_m"] > 4.0
