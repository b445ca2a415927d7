"""Each G1 shoulder keeps its branch at the gimbal pole (``services/retarget/shoulder_pole.py``), on
the bundled demo take's first overhead raise: its left arm passes 8 deg behind the pole, its right
arm as far in front."""

from __future__ import annotations

import g1_facts as robot_model
import numpy as np
import pytest
from g1_facts import G1
from hypothesis import given, settings
from hypothesis import strategies as st

from mocapline.bench.retarget import demo_take
from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODY_INDEX as B
from mocapline.services.retarget.shoulder_pole import BACK, FRONT, ShoulderPoles

RAISE = range(50, 110)  # 60 Hz frames of the first raise: the arms cross the pole at ~86
CROSSING = 80
UP = (0.1, -0.1)  # shoulder pitches with both arms below the pole: on the way up


@pytest.fixture(scope="module")
def demo():
    model = robot_model.load_ik_model()
    return model, demo_take(model)


def _poles(demo, branches: tuple[float, float] | None = None) -> ShoulderPoles:
    """Poles whose arms have committed to ``branches`` (pitch -2.5: FRONT, +2.5: BACK)."""
    model, take = demo
    poles = ShoulderPoles.for_config(model, take.config, G1.shoulder_pitch, G1.torso_body)
    assert poles is not None
    if branches is not None:
        poles.wanted_sides(tuple(-2.5 if b == FRONT else 2.5 for b in branches))  # type: ignore[arg-type]
    return poles


def _forward(demo, f: int, positions: np.ndarray, side: str) -> float:
    """The upper arm's component along the torso's forward axis (> 0: in front of the pole)."""
    _, take = demo
    torso = next(e for e in take.config.tables()[-1] if e.robot_frame == "torso_link")
    forward = Q.rotate(Q.multiply(take.quaternions[f][B[torso.human_body]], torso.rotation_offset),
                       np.array([1.0, 0.0, 0.0]))
    d = positions[B[f"{side}ForeArm"]] - positions[B[f"{side}Arm"]]
    return float(d @ forward / np.linalg.norm(d))


def test_the_first_crossing_of_a_take_is_left_to_the_ik(demo) -> None:
    _, take = demo
    p, q = take.positions[CROSSING], take.quaternions[CROSSING]
    assert _forward(demo, CROSSING, p, "Left") < -0.1 < 0.1 < _forward(demo, CROSSING, p, "Right")
    poles = _poles(demo)
    p2, q2 = poles.apply(p, q, UP)
    assert p2 is p and q2 is q and poles.branch == [0.0, 0.0]


def test_an_arm_passes_on_the_side_of_its_branch(demo) -> None:
    _, take = demo
    p, q = take.positions[CROSSING], take.quaternions[CROSSING]
    same = _poles(demo, (BACK, FRONT))  # each arm passes on its branch's side: nothing moves
    p1, q1 = same.apply(p, q, UP)
    assert p1 is p and q1 is q
    poles = _poles(demo, (FRONT, BACK))  # each arm is on the other side: both reflected
    p2, q2 = poles.apply(p.copy(), q.copy(), UP)
    assert _forward(demo, CROSSING, p2, "Left") > 0.1 and _forward(demo, CROSSING, p2, "Right") < -0.1
    arms = [B[f"{s}{b}"] for s in ("Left", "Right") for b in ("Arm", "ForeArm", "Hand")]
    rest = [i for i in range(len(p)) if i not in arms]
    np.testing.assert_array_equal(p2[rest + [B["LeftArm"], B["RightArm"]]], p[rest + [B["LeftArm"], B["RightArm"]]])
    np.testing.assert_array_equal(q2[rest], q[rest])
    for side in ("Left", "Right"):  # each arm turns as one rigid piece about its shoulder
        for a, b in (("Arm", "ForeArm"), ("ForeArm", "Hand")):
            shoulder = B[f"{side}Arm"]
            assert np.linalg.norm(p2[B[side + b]] - p2[shoulder]) == pytest.approx(
                np.linalg.norm(p[B[side + b]] - p[shoulder]))
            rel = Q.multiply(Q.conjugate(q[B[side + a]]), q[B[side + b]])
            rel2 = Q.multiply(Q.conjugate(q2[B[side + a]]), q2[B[side + b]])
            assert abs(float(rel @ rel2)) == pytest.approx(1.0, abs=1e-12)


def test_on_the_way_down_an_arm_passes_on_the_side_that_unwinds_its_pitch(demo) -> None:
    """Past ``arm_down`` the side follows the pitch now, not the remembered branch."""
    _, take = demo
    p, q = take.positions[CROSSING], take.quaternions[CROSSING]
    poles = _poles(demo, (BACK, FRONT))
    p2, _ = poles.apply(p.copy(), q.copy(), (-1.5, 1.5))  # left on the front branch, right on the back one
    assert _forward(demo, CROSSING, p2, "Left") > 0.1 and _forward(demo, CROSSING, p2, "Right") < -0.1
    assert poles.branch == [BACK, FRONT]  # |pitch| 1.5 commits to nothing
    poles.reset()
    assert poles.branch == [0.0, 0.0]


def test_the_moved_targets_stay_smooth(demo) -> None:
    """Weights are smoothsteps of the distance to the pole and of how far on the other side the arm
    is: the moved arm direction changes from frame to frame by little more than the human's own."""
    _, take = demo
    poles = _poles(demo, (FRONT, FRONT))

    def left(positions: np.ndarray) -> np.ndarray:
        d = positions[B["LeftForeArm"]] - positions[B["LeftArm"]]
        return d / np.linalg.norm(d)

    before = np.array([left(take.positions[f]) for f in RAISE])
    after = np.array([left(poles.apply(take.positions[f].copy(), take.quaternions[f].copy(), UP)[0]) for f in RAISE])
    step = np.degrees(np.arccos(np.clip(np.sum(before[1:] * before[:-1], axis=1), -1, 1)))
    step_after = np.degrees(np.arccos(np.clip(np.sum(after[1:] * after[:-1], axis=1), -1, 1)))
    assert np.degrees(np.arccos(np.min(np.sum(before * after, axis=1)))) > 10.0  # it did move
    assert step_after.max() < 1.4 * step.max(), (step_after.max(), step.max())  # a hard zone edge gives 1.7x


@settings(max_examples=25, deadline=None)
@given(yaw=st.floats(-np.pi, np.pi), frame=st.sampled_from(list(RAISE)), shift=st.floats(-2.0, 2.0))
def test_the_move_turns_and_travels_with_the_performer(demo, yaw: float, frame: int, shift: float) -> None:
    """Turning the whole performer about the vertical and moving them turns and moves the result
    the same way: the rule depends on the body only."""
    _, take = demo
    poles = _poles(demo, (FRONT, BACK))
    p, q = take.positions[frame], take.quaternions[frame]
    turn = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
    offset = np.array([shift, -shift, 0.0])
    p_a, q_a = poles.apply(p.copy(), q.copy(), UP)
    p_b, q_b = poles.apply(Q.rotate(turn, p) + offset, Q.multiply(turn, q), UP)
    np.testing.assert_allclose(p_b, Q.rotate(turn, p_a) + offset, atol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(q_b * Q.multiply(turn, q_a), axis=1)), 1.0, atol=1e-9)


def test_bad_input_passes_through_for_the_retargeter_to_refuse(demo) -> None:
    _, take = demo
    poles = _poles(demo, (FRONT, BACK))
    p, q = take.positions[CROSSING].copy(), take.quaternions[CROSSING].copy()
    q[B["Spine2"]] = 0.0
    assert poles.apply(p, q, UP)[0] is p
    p[B["LeftForeArm"]] = p[B["RightForeArm"]] = np.nan
    assert poles.apply(p, take.quaternions[CROSSING], UP)[0] is p


@pytest.mark.integration
def test_human_joint_ranges_keep_each_shoulder_off_its_second_branch(demo) -> None:
    """The demo's sideways raises past the shoulder roll's limit: with the model's ranges the IK
    takes the other Euler branch (pitch and yaw about half a turn away, which a learned policy
    does not follow); with ``joint_ranges="human"`` (the G1's shoulder yaw +-1.4 rad) neither
    shoulder's pitch passes a quarter turn, and every target is still solved."""
    from mocapline.services.retarget.ik.options import RetargetOptions
    from mocapline.services.retarget.ik.retargeter import Retargeter

    model, take = demo
    names = robot_model.joint_names(model)
    cols = {n: 7 + names.index(n) for n in names if "shoulder_pitch" in n or "shoulder_yaw" in n}
    out = {}
    for ranges in ("full", "human"):
        ik = Retargeter(take.config, RetargetOptions(fps=take.fps, joint_ranges=ranges), model=model)
        ik.reset(robot_model.default_qpos(model))
        out[ranges] = np.array([ik.retarget(p, q).qpos for p, q in zip(take.positions, take.quaternions, strict=True)])
        assert ik.stats.failures == 0, ranges
    assert max(np.abs(out["full"][:, c]).max() for n, c in cols.items() if "pitch" in n) > 2.0
    for n, c in cols.items():
        limit = 1.4 + 1e-6 if "yaw" in n else np.pi / 2
        assert np.abs(out["human"][:, c]).max() <= limit, n
    assert np.array_equal(model.jnt_range, robot_model.load_ik_model().jnt_range)  # the shared model is untouched
