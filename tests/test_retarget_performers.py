"""Retarget with several performers: one IK state per performer, so two performers interleaved
come out exactly as each alone would, in order, carrying their avatar index and name."""

from __future__ import annotations

import dataclasses

import g1_facts as rm
import numpy as np
import pytest

from mocapline.core.frames import HumanFrame, RobotFrame
from mocapline.services.retarget import synthetic
from mocapline.services.retarget.config import load_ik_config
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.service import RetargetService


class Sink:
    """Collects what the service sends (the FrameSink interface, no sockets)."""

    def __init__(self) -> None:
        self.frames: list[RobotFrame] = []
        self.ends = 0

    def send(self, payload: bytes, **_: object) -> None:
        self.frames.append(RobotFrame.from_bytes(payload))

    def send_end(self, *_: object, **__: object) -> None:
        self.ends += 1


@pytest.fixture(scope="module")
def takes():
    model = rm.load_ik_model()
    cfg = load_ik_config("axis_studio", model=model)
    out = []
    for seconds in (1.0, 1.3):
        truth = synthetic.robot_motion(int(60 * seconds), 60.0, model=model)
        out.append(synthetic.human_from_robot(truth, cfg, model=model))
    return model, cfg, out


def frames_of(pos, quat, avatar: int) -> list[HumanFrame]:
    return [HumanFrame(posture_index=100 + f, capture_timestamp_us=f, positions=pos[f], quaternions=quat[f],
                       avatar_index=avatar, avatar_name=f"Performer{avatar + 1}") for f in range(len(pos))]


@pytest.mark.parametrize("filter_name", ["none", "smooth3"])
def test_interleaved_performers_match_each_alone(takes, filter_name):
    model, cfg, ((pos_a, quat_a), (pos_b, quat_b)) = takes
    n = min(len(pos_a), len(pos_b))
    a, b = frames_of(pos_a[:n], quat_a[:n], 0), frames_of(pos_b[:n], quat_b[:n], 2)

    def run(frames: list[HumanFrame]) -> list[RobotFrame]:
        sink = Sink()
        service = RetargetService(Retargeter(cfg, model=model), sink, filter=filter_name)
        for frame in frames:
            service.on_frame(dataclasses.replace(frame))
        service.on_end()
        return sink.frames, service

    alone_a, _ = run(a)
    alone_b, _ = run(b)
    mixed, service = run([f for pair in zip(a, b, strict=True) for f in pair])
    got_a = [f for f in mixed if f.avatar_index == 0]
    got_b = [f for f in mixed if f.avatar_index == 2]
    assert [f.posture_index for f in got_a] == [f.posture_index for f in alone_a] == list(range(100, 100 + n))
    assert {f.avatar_name for f in got_b} == {"Performer3"}
    for x, y in zip(got_a + got_b, alone_a + alone_b, strict=True):
        np.testing.assert_allclose(x.joint_pos, y.joint_pos, atol=1e-9)
    hb = service.heartbeat()
    assert hb.gmr_processed == 2 * n
    assert hb.performers["0"].gmr_processed == n and hb.performers["2"].robot_frames_sent == n


def test_durable_state_restores_every_performer(takes):
    model, cfg, ((pos, quat), _) = takes
    service = RetargetService(Retargeter(cfg, model=model), Sink())
    for avatar in (0, 1):
        for frame in frames_of(pos[:5], quat[:5], avatar):
            service.on_frame(frame)
    poles = service.tracks[1].retargeter.poles
    assert poles is not None
    poles.branch = [1.0, -1.0]  # as after an overhead raise: left arm in front, right behind
    state = service.durable_state()
    again = RetargetService(Retargeter(cfg, model=model), Sink())
    again.restore(state)
    assert sorted(again.tracks) == [0, 1]
    assert again.tracks[1].last_posture_index == 104 and again.tracks[1].gmr_processed == 5
    np.testing.assert_allclose(again.tracks[1].qpos, service.tracks[1].qpos)
    # the shoulders keep their branches at the gimbal pole across the restart
    assert again.tracks[1].retargeter.pole_branches == [1.0, -1.0]
    assert again.tracks[0].retargeter.pole_branches == [0.0, 0.0]


def test_a_claim_carries_the_shoulders_branches_to_the_next_owner():
    from mocapline.core.assign import Claim

    claim = Claim("w1", "ab", 3, [0.0] * 36, 4, "Performer1", [1.0, -1.0])
    assert Claim.decode(claim.encode()) == claim
    older = b'{"owner":"w1","epoch":"ab","seq":3,"qpos":null,"frames":4,"name":""}'  # before branches
    assert Claim.decode(older).branches is None


def test_each_performer_gets_its_height_by_avatar_name(takes):
    model, cfg, ((pos, quat), _) = takes
    service = RetargetService(Retargeter(cfg, model=model), Sink(), heights={"Performer2": 1.55})
    for avatar in (0, 1):
        service.on_frame(frames_of(pos[:1], quat[:1], avatar)[0])
    assert service.tracks[1].retargeter.human_height == 1.55
    assert service.tracks[0].retargeter.human_height is None  # the config's assumed height


def test_performer_height_flag():
    from mocapline.services.retarget.service import build_parser, parse_performer_height

    assert parse_performer_height("Performer2=1.62") == ("Performer2", 1.62)
    args = build_parser().parse_args(["--performer-height", "A=1.7", "--performer-height", "B=1.5"])
    assert dict(args.performer_height) == {"A": 1.7, "B": 1.5}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--performer-height", "A=tall"])
