"""``bench robot``'s base figures: path, where it ended, heading, against the reference's."""

from __future__ import annotations

import numpy as np

from mocapline.bench.robot import base_figures, clip_figures, reference_figures


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


def test_the_clip_figures_cover_only_the_ticks_the_take_was_applied_in() -> None:
    """The base walks 1 m before the take (standing up, say), 2 m during it and 3 m after it:
    the clip's figures are the 2 m, its time the take's."""
    up = np.array([1.0, 0.0, 0.0, 0.0])
    xs = np.concatenate([np.linspace(0, 1, 101), np.linspace(1, 3, 201)[1:], np.linspace(3, 6, 301)[1:]])
    samples = [(10 * i, np.array([x, 0.0, 0.75]), up) for i, x in enumerate(xs)]
    whole = base_figures(samples)
    clip = clip_figures(samples, [1000, 3000])
    assert whole["base_path_m"] == 6.0 and clip["clip_base_path_m"] == 2.0
    assert clip["clip_base_offset_m"] == 2.0 and clip["clip_sim_s"] == 2.0
    assert clip_figures(samples, None) == {}


def test_the_bridge_counts_the_robot_ticks_of_its_first_and_last_applied_frame() -> None:
    from mocapline.robot.registry import get_robot
    from mocapline.services.robot.counters import RobotCounters

    counters = RobotCounters.for_robot(get_robot())
    counters.applied(7, None)  # before any LowState: no tick to give
    assert counters.robot_applied == 1 and counters.applied_ticks_ms is None
    for tick, index in ((5002, 8), (5004, 9), (5010, 10)):
        counters.applied(index, tick)
    assert counters.applied_ticks_ms == (5002, 5010) and counters.last_posture_index == 10
    assert counters.record(0.0, bridge_pending=0, lag_s=0.0, ended=False).applied_ticks_ms == [5002, 5010]
