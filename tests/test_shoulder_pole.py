"""Arms pass the G1 shoulder's gimbal pole in front (``services/retarget/shoulder_pole.py``), on
the bundled demo take's first overhead raise: its left arm passes 8 deg behind the pole, its right
arm as far in front."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mocapline.bench.retarget import demo_take
from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX as B
from mocapline.robot import g1 as robot_model
from mocapline.services.retarget.shoulder_pole import ShoulderPoles

RAISE = range(50, 110)  # 60 Hz frames of the first raise: the arms cross the pole at ~86


@pytest.fixture(scope="module")
def demo():
    model = robot_model.load_ik_model()
    take = demo_take(model)
    return take, ShoulderPoles(model, take.config)


def _direction(positions: np.ndarray, side: str) -> np.ndarray:
    d = positions[B[f"{side}ForeArm"]] - positions[B[f"{side}Arm"]]
    return d / np.linalg.norm(d)


def test_an_arm_behind_the_pole_is_moved_to_its_front_the_other_is_left(demo) -> None:
    take, poles = demo
    p, q = take.positions[80], take.quaternions[80]
    torso = next(e for e in take.config.tables()[-1] if e.robot_frame == "torso_link")
    forward = Q.rotate(Q.multiply(q[B[torso.human_body]], torso.rotation_offset), np.array([1.0, 0.0, 0.0]))
    assert _direction(p, "Left") @ forward < -0.1 < 0.1 < _direction(p, "Right") @ forward
    p2, q2 = poles.apply(p.copy(), q.copy())
    assert _direction(p2, "Left") @ forward > 0.1  # reflected to the front
    np.testing.assert_array_equal(p2[B["RightForeArm"]], p[B["RightForeArm"]])
    np.testing.assert_array_equal(q2[B["RightArm"]], q[B["RightArm"]])
    moved = [B[n] for n in ("LeftArm", "LeftForeArm", "LeftHand")]
    untouched = [i for i in range(len(p)) if i not in moved]
    np.testing.assert_array_equal(p2[untouched + [B["LeftArm"]]], p[untouched + [B["LeftArm"]]])
    np.testing.assert_array_equal(q2[untouched], q[untouched])
    # the arm turns as one rigid piece about the shoulder
    for a, b in (("LeftArm", "LeftForeArm"), ("LeftForeArm", "LeftHand")):
        assert np.linalg.norm(p2[B[b]] - p2[B["LeftArm"]]) == pytest.approx(np.linalg.norm(p[B[b]] - p[B["LeftArm"]]))
        rel = Q.multiply(Q.conjugate(q[B[a]]), q[B[b]])
        rel2 = Q.multiply(Q.conjugate(q2[B[a]]), q2[B[b]])
        assert abs(float(rel @ rel2)) == pytest.approx(1.0, abs=1e-12)


def test_arms_away_from_the_pole_give_back_the_same_arrays(demo) -> None:
    take, poles = demo
    p, q = take.positions[0], take.quaternions[0]  # arms down
    p2, q2 = poles.apply(p, q)
    assert p2 is p and q2 is q


def test_the_moved_targets_stay_smooth(demo) -> None:
    """Weights are smoothsteps of the distance to the pole and of how far behind it the arm is: the
    moved arm direction changes from frame to frame by no more than a few times the human's own."""
    take, poles = demo
    before = np.array([_direction(take.positions[f], "Left") for f in RAISE])
    after = np.array([_direction(poles.apply(take.positions[f].copy(), take.quaternions[f].copy())[0], "Left")
                      for f in RAISE])
    step = np.degrees(np.arccos(np.clip(np.sum(before[1:] * before[:-1], axis=1), -1, 1)))
    step_after = np.degrees(np.arccos(np.clip(np.sum(after[1:] * after[:-1], axis=1), -1, 1)))
    assert np.degrees(np.arccos(np.min(np.sum(before * after, axis=1)))) > 10.0  # it did move
    assert step_after.max() < 1.4 * step.max(), (step_after.max(), step.max())


@settings(max_examples=25, deadline=None)
@given(yaw=st.floats(-np.pi, np.pi), frame=st.sampled_from(list(RAISE)), shift=st.floats(-2.0, 2.0))
def test_the_move_turns_and_travels_with_the_performer(demo, yaw: float, frame: int, shift: float) -> None:
    """Turning the whole performer about the vertical and moving them turns and moves the result
    the same way: the rule depends on the body only."""
    take, poles = demo
    p, q = take.positions[frame], take.quaternions[frame]
    turn = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    offset = np.array([shift, -shift, 0.0])
    p_turned = Q.rotate(turn, p) + offset
    q_turned = Q.multiply(turn, q)
    p_a, q_a = poles.apply(p.copy(), q.copy())
    p_b, q_b = poles.apply(p_turned, q_turned)
    np.testing.assert_allclose(p_b, Q.rotate(turn, p_a) + offset, atol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(q_b * Q.multiply(turn, q_a), axis=1)), 1.0, atol=1e-9)


def test_bad_input_passes_through_for_the_retargeter_to_refuse(demo) -> None:
    take, poles = demo
    p, q = take.positions[80].copy(), take.quaternions[80].copy()
    q[B["Spine2"]] = 0.0
    assert poles.apply(p, q)[0] is p
    p[B["LeftForeArm"]] = np.nan
    assert poles.apply(p, take.quaternions[80])[0] is p
