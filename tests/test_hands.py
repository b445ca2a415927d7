"""The hands: capture's hand bodies (Axis finger bones; Xsens gloves or none), the emitter's finger
gestures (open, fist, pinch, point)."""

from __future__ import annotations

import numpy as np
import pytest

from mocapline.core.bodies import HAND_BODIES, HAND_BONES
from mocapline.core.frames import HumanFrame
from mocapline.core.modes import SOURCE_PORTS
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.formats.mxtp02 import encode_mxtp02
from mocapline.formats.skeleton import SkeletonKind, get_skeleton
from mocapline.services.capture.core import AxisDecoder, CaptureCore, XsensDecoder
from mocapline.services.capture.fk import AxisForwardKinematics
from mocapline.tools.emitter.motion import GESTURE_S, GESTURES, gesture_at, pose_channels

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
