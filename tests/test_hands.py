"""The hands: capture's hand bodies (Axis finger bones; Xsens gloves or none), the emitter's finger
gestures (open, fist, pinch, point)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mocapline.bench.hands import _lag, gesture_take, run_hands
from mocapline.core import pb
from mocapline.core.bodies import HAND_BODIES, HAND_BONES
from mocapline.core.frames import FrameFieldError, HumanFrame, RobotFrame, check_mocap_frame
from mocapline.core.modes import SOURCE_PORTS
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.formats.mxtp02 import encode_mxtp02
from mocapline.formats.skeleton import SkeletonKind, get_skeleton
from mocapline.robot.registry import get_robot
from mocapline.services.capture.core import AxisDecoder, CaptureCore, XsensDecoder
from mocapline.services.capture.fk import AxisForwardKinematics
from mocapline.services.retarget.hands import HandModel, HandOptions, HandRetargeter
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.service import RetargetService
from mocapline.tools.emitter.motion import GESTURE_S, GESTURES, gesture_at, pose_channels
from mocapline.tools.pipeline.inprocess import InProcessPipeline, emitted_take
from mocapline.tools.portcheck.port_checks import hands_check

RATE = 60.0


def axis_frames(times: list[float], kind: SkeletonKind = SkeletonKind.AXIS_STUDIO) -> list[HumanFrame]:
    """Capture's HumanFrames for the emitter's pose at each time."""
    config = AxisBvhConfig(skeleton=kind)
    core = CaptureCore(AxisDecoder(config), [SOURCE_PORTS["axis"]])
    frames: list[HumanFrame] = []
    for k, t in enumerate(times):
        data = encode_datagram(k, pose_channels(get_skeleton(kind), "YXZ", t), config=config)
        frames += core.feed(Datagram(k * 1000, SOURCE_PORTS["axis"], "127.0.0.1", data), k * 1e-3)
    return frames + core.flush()


def tips_from_wrist(frame: HumanFrame, side: str) -> dict[str, float]:
    """Distance (m) from the carpus of each finger's last joint (the distal phalanx's origin)."""
    pos = dict(zip(HAND_BODIES, frame.finger_positions, strict=True))
    wrist = pos[f"{side}Carpus"]
    return {finger: float(np.linalg.norm(pos[f"{side}{finger}DP"] - wrist))
            for finger in ("First", "Second", "Third", "Fourth", "Fifth")}


@pytest.mark.parametrize("kind", list(SkeletonKind))
def test_hand_bodies_are_the_finger_bones_world_poses(kind: SkeletonKind) -> None:
    skeleton = get_skeleton(kind)
    fk = AxisForwardKinematics(kind)
    channels = np.stack([pose_channels(skeleton, "YXZ", t) for t in (0.3, 2.0, 4.1)])
    pos, quat = fk.bodies_and_hands_batch(channels)
    assert pos.shape == (3, 23 + len(HAND_BODIES), 3) and quat.shape == (3, 63, 4)
    body_pos, body_quat = fk.bodies_batch(channels)
    np.testing.assert_allclose(pos[:, :23], body_pos, atol=1e-12)
    np.testing.assert_allclose(quat[:, :23], body_quat, atol=1e-12)
    hand_bones = skeleton.hand_source_bones()
    assert hand_bones is not None and fk.has_hands
    bones = list(hand_bones)
    assert [skeleton.names[b] for b in bones[:4]] == ["LeftHand", "LeftHandThumb1", "LeftHandThumb2", "LeftHandThumb3"]
    for f in range(3):
        every, _ = fk.all_bones(channels[f])
        np.testing.assert_allclose(pos[f, 23:], every[bones], atol=1e-12)
        one_pos, _ = fk.bodies_and_hands(channels[f])
        np.testing.assert_allclose(one_pos, pos[f], atol=1e-12)


def test_axis_capture_carries_the_hands_and_the_wrist_is_the_hand() -> None:
    frames = axis_frames([k / RATE for k in range(5)])
    assert len(frames) == 5 and all(f.has_hands for f in frames)
    frame = HumanFrame.from_bytes(frames[-1].to_bytes())
    assert frame.has_hands and frame.finger_quaternions.shape == (40, 4)
    for side in ("Left", "Right"):
        np.testing.assert_allclose(frame.finger_positions[HAND_BODIES.index(f"{side}Carpus")],
                                   frame.body(f"{side}Hand")[0], atol=1e-12)


def test_xsens_without_gloves_has_no_hands() -> None:
    rng = np.random.default_rng(3)
    quats = rng.normal(size=(23, 4))
    data = encode_mxtp02(7, rng.normal(size=(23, 3)) + [0, 0, 1.0], quats / np.linalg.norm(quats, axis=1)[:, None])
    core = CaptureCore(XsensDecoder("m"), [SOURCE_PORTS["xsens"]])
    frames = core.feed(Datagram(0, SOURCE_PORTS["xsens"], "127.0.0.1", data), 0.0) + core.flush()
    assert len(frames) == 1 and not frames[0].has_hands
    assert not HumanFrame.from_bytes(frames[0].to_bytes()).has_hands


def test_the_emitter_cycles_the_gestures() -> None:
    assert gesture_at(0.0)[1] == GESTURES[0] and gesture_at(GESTURE_S * 1.9) == (GESTURES[0], GESTURES[1], 1.0)
    held = {g: GESTURE_S * (k + 0.9) for k, g in enumerate(GESTURES)}
    frames = dict(zip(held, axis_frames(list(held.values())), strict=True))
    for side in ("Left", "Right"):
        open_, fist, pinch, point = (tips_from_wrist(frames[g], side) for g in ("open", "fist", "pinch", "point"))
        for finger in ("Second", "Third", "Fourth", "Fifth"):
            assert fist[finger] < 0.6 * open_[finger], (side, finger)
        assert point["Second"] == pytest.approx(open_["Second"], abs=1e-9)
        assert all(point[f] < 0.6 * open_[f] for f in ("Third", "Fourth", "Fifth"))
        pos = dict(zip(HAND_BODIES, frames["pinch"].finger_positions, strict=True))
        assert np.linalg.norm(pos[f"{side}FirstDP"] - pos[f"{side}SecondDP"]) < 0.04
        assert pinch["Third"] > 0.9 * open_["Third"]
    # the two hands mirror each other
    left = tips_from_wrist(frames["pinch"], "Left")
    assert left == pytest.approx(tips_from_wrist(frames["pinch"], "Right"), abs=1e-9)
    assert len(HAND_BONES) == 20


# ---- the hand retargeting (services/retarget/hands.py) ----

@pytest.fixture(scope="module")
def dex3() -> HandModel:
    return HandModel(get_robot("g1_dex3"))


def held_frames() -> dict[str, HumanFrame]:
    """A frame of each gesture, once the hands hold it."""
    held = {g: GESTURE_S * (k + 0.95) for k, g in enumerate(GESTURES) if g != "open" or k == 0}
    return dict(zip(held, axis_frames(list(held.values())), strict=True))


def settled(hands: HandModel, frame: HumanFrame) -> np.ndarray:
    solver = HandRetargeter(hands)
    for _ in range(12):
        q = solver.retarget(frame)
    return q


def closing(hands: HandModel) -> np.ndarray:
    """Per hand joint, the end of its range a finger closes to (index / middle: the one away from 0)."""
    return np.where(np.abs(hands.lower) > np.abs(hands.upper), hands.lower, hands.upper)


def test_the_dex3_fingers_follow_open_fist_point_and_pinch(dex3: HandModel) -> None:
    names = dex3.joint_names
    fingers = np.array(["index" in n or "middle" in n for n in names])
    index = np.array(["index" in n for n in names])
    frames = held_frames()
    q = {g: settled(dex3, f) for g, f in frames.items()}
    span = dex3.upper - dex3.lower
    share = (q["fist"] - dex3.rest) / (closing(dex3) - dex3.rest)  # 0 open .. 1 closed
    assert np.all(share[fingers] > 0.9), dict(zip(names, share.round(2), strict=True))
    assert np.all(np.abs(q["open"][fingers] - dex3.rest[fingers]) < 0.05 * span[fingers])
    point = (q["point"] - dex3.rest) / (closing(dex3) - dex3.rest)
    assert np.all(point[index] < 0.05) and np.all(point[fingers & ~index] > 0.9)
    pinch = (q["pinch"] - dex3.rest) / (closing(dex3) - dex3.rest)
    assert np.all((pinch[index] > 0.1) & (pinch[index] < 0.9))
    for g, pose in q.items():
        assert np.all((pose >= dex3.lower) & (pose <= dex3.upper)), g
    # the pinch brings the robot's thumb tip to its index tip
    tips = {g: dex3.tips_and_jacobian(pose)[0] for g, pose in q.items()}
    k = len(dex3.fingers)
    for side in range(2):
        thumb, first = side * k + dex3.fingers.index("First"), side * k + dex3.fingers.index("Second")
        gap = {g: np.linalg.norm(t[thumb] - t[first]) for g, t in tips.items()}
        assert gap["pinch"] < 0.5 * gap["open"] and gap["pinch"] < 0.03, gap
    # the two hands mirror each other: the right's joints are the left's, signs as their ranges
    n = dex3.n_left
    np.testing.assert_allclose(np.abs(q["fist"][:n]), np.abs(q["fist"][n:]), atol=1e-6)


def test_the_hands_are_smoothed_with_one_frame_of_delay_and_stay_in_range(dex3: HandModel) -> None:
    frames = axis_frames([k / RATE for k in range(int(2.2 * GESTURE_S * RATE))])
    raw = HandRetargeter(dex3, HandOptions(smooth=False))
    smooth = HandRetargeter(dex3)
    q_raw = np.array([raw.retarget(f) for f in frames])
    q = np.array([smooth.retarget(f) for f in frames])
    padded = np.concatenate([q_raw[:1], q_raw[:1], q_raw])
    np.testing.assert_allclose(q, 0.25 * padded[:-2] + 0.5 * padded[1:-1] + 0.25 * padded[2:], atol=1e-12)
    assert np.all((q >= dex3.lower) & (q <= dex3.upper))
    assert np.ptp(q, axis=0).max() > 1.0  # the fingers moved (open -> fist)


def test_a_frame_without_hands_puts_them_at_rest(dex3: HandModel) -> None:
    frame = held_frames()["fist"]
    solver = HandRetargeter(dex3)
    assert np.abs(solver.retarget(frame) - dex3.rest).max() > 0.5
    bare = HumanFrame(frame.posture_index + 1, 0, frame.positions, frame.quaternions)
    assert not bare.has_hands
    np.testing.assert_array_equal(solver.retarget(bare), dex3.rest)


class _Sink:
    def __init__(self) -> None:
        self.frames: list[RobotFrame] = []

    def send(self, payload: bytes, **_: object) -> None:
        self.frames.append(RobotFrame.from_bytes(payload))

    def send_end(self, *_: object, **__: object) -> None:
        pass


@pytest.mark.parametrize("filter_name", ["none", "smooth3"])
def test_retarget_sends_the_hands_with_the_body(filter_name: str) -> None:
    robot = get_robot("g1_dex3")
    sink = _Sink()
    service = RetargetService(Retargeter(robot=robot), sink, filter=filter_name)  # type: ignore[arg-type]
    times = [GESTURE_S * 1.95 - k / RATE for k in range(6)][::-1]  # into the fist
    frames = axis_frames(times)
    frames[3] = HumanFrame(frames[3].posture_index, 0, frames[3].positions, frames[3].quaternions)  # no hands
    for f in frames:
        service.on_frame(f)
    service.on_end()
    assert [f.posture_index for f in sink.frames] == [f.posture_index for f in frames]
    assert all(len(f.hand_joint_pos) == 14 and len(f.joint_pos) == 29 for f in sink.frames)
    assert [f.has_hands for f in sink.frames] == [True, True, True, False, True, True]
    hands = service.heartbeat().hands
    assert hands is not None and (hands.frames, hands.without_hands) == (5, 1)
    assert RetargetService(Retargeter(), _Sink()).heartbeat().hands is None  # type: ignore[arg-type]


def test_bench_hands_measures_one_frame_of_lag_and_less_jitter(dex3: HandModel) -> None:
    take = gesture_take(60.0, noise_m=0.002)
    take.frames = take.frames[: int(2 * GESTURE_S * 60)]
    raw, q_raw = run_hands(take, dex3, smooth=False)
    smooth, q = run_hands(take, dex3, smooth=True)
    assert _lag(q, q_raw) == 1
    assert smooth.jitter < 0.5 * raw.jitter
    assert raw.contacts > 0 and raw.tip_mm > 0


@pytest.mark.integration
def test_the_hands_travel_the_pipeline_in_mocap_frames() -> None:
    """capture -> retarget -> streamer -> viewer on g1_dex3: every MocapFrame carries both hands'
    joints for its posture_index, the fingers close into the fist, and the header stays the body's."""
    pipeline = InProcessPipeline(robot_model="g1_dex3")
    seen: list[pb.MocapFrame] = []
    accept = pipeline.validator.accept

    def spy(received: Any) -> pb.MocapFrame | None:
        assert received.header.joint_count == 29
        frame = accept(received)
        if frame is not None:
            seen.append(frame)
        return frame

    pipeline.validator.accept = spy  # type: ignore[method-assign]
    try:
        pipeline.run(emitted_take(int(1.9 * GESTURE_S * 60)))
    finally:
        pipeline.close()
    assert [f.posture_index for f in seen] == pipeline.applied == list(range(len(seen)))
    assert len(seen) == int(1.9 * GESTURE_S * 60)
    assert all(len(f.hand_joint_pos) == 14 and f.has_hands for f in seen)
    hands = HandModel(get_robot("g1_dex3"))
    fingers = np.array(["index" in n or "middle" in n for n in hands.joint_names])
    share = (np.array(seen[-1].hand_joint_pos) - hands.rest) / (closing(hands) - hands.rest)
    assert np.all(share[fingers] > 0.9)
    share = (np.array(seen[30].hand_joint_pos) - hands.rest) / (closing(hands) - hands.rest)
    assert np.all(np.abs(share[fingers]) < 0.05)  # open
    old = pb.MocapFrame()  # a consumer without the fields reads the rest as before
    old.ParseFromString(seen[-1].SerializeToString())
    assert list(old.joint_pos) == list(seen[-1].joint_pos)


def test_port_check_and_consumers_hold_the_hands_to_their_build() -> None:
    from collections import Counter

    assert hands_check(Counter({("g1_dex3", 14): 50, ("g1", 0): 3}))[0]
    ok, detail = hands_check(Counter({("g1_dex3", 12): 5}))
    assert not ok and "expected 14" in detail
    assert not hands_check(Counter({("g1", 14): 1}))[0]
    msg = pb.MocapFrame(body_pos_w=[0.0] * 3, body_lin_vel_w=[0.0] * 3, body_quat_w=[1.0, 0, 0, 0],
                        body_ang_vel_w=[0.0] * 3, joint_pos=[0.0] * 29, joint_vel=[0.0] * 29,
                        left_hand=[0.0] * 7, right_hand=[0.0] * 7, hand_joint_pos=[0.0] * 14, has_hands=True)
    check_mocap_frame(msg, 29, 14)
    check_mocap_frame(msg, 29)
    with pytest.raises(FrameFieldError):
        check_mocap_frame(msg, 29, 12)
    del msg.hand_joint_pos[-1]
    with pytest.raises(FrameFieldError):
        check_mocap_frame(msg, 29)
