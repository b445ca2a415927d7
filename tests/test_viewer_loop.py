"""The viewer's loop: frames taken per frame while someone could be watching, in batches while a web
page could show them and none is open (the frames then wait in the socket, not in the viewer)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import mujoco
import numpy as np
import pytest
from g1_facts import G1, G1_JOINT_NAMES, load_ik_model

from mocapline.core import pb
from mocapline.core.counters import to_json
from mocapline.core.header import MessageType, decode_frame, encode_frame
from mocapline.core.stage import Links
from mocapline.core.transport import Received
from mocapline.services.viewer.apply import FrameApplier, FrameValidator, QposWriter, ViewerCounters
from mocapline.services.viewer.measured import CLOSE_AFTER_S, MeasuredRobot
from mocapline.services.viewer.scene import MeasuredPose
from mocapline.services.viewer.service import ViewerLoop


def received(frame_id: int, avatar: int = 0) -> Received:
    q = np.linspace(-0.3, 0.3, 29) * np.sin(frame_id / 10)
    msg = pb.MocapFrame(index=frame_id, body_pos_w=[0.0, 0.0, 0.79], body_lin_vel_w=[0, 0, 0],
                        body_quat_w=[1, 0, 0, 0], body_ang_vel_w=[0, 0, 0], joint_pos=q.tolist(),
                        joint_vel=[0.0] * 29, left_hand=[0.0] * 7, right_hand=[0.0] * 7,
                        posture_index=1000 + frame_id, avatar_index=avatar, avatar_name=f"actor{avatar}")
    wire = encode_frame(MessageType.MOTION_FRAME, frame_id, msg.SerializeToString(), capture_timestamp_us=1,
                        send_timestamp_us=2, joint_count=29)
    header, payload = decode_frame(wire)
    return Received(header, payload)


@dataclass
class QueuedSource:
    """A FrameSource over a list, recording the timeout of every receive."""

    waiting: deque[Received]
    timeouts: list[int] = field(default_factory=list)

    def recv(self, timeout_ms: int) -> Received | None:
        self.timeouts.append(timeout_ms)
        return self.waiting.popleft() if self.waiting else None


@dataclass
class FakeWeb:
    watching: bool
    updates: list[list[tuple[int, int | None, float]]] = field(default_factory=list)
    measured: list[MeasuredPose | None] = field(default_factory=list)

    def publish_poses(self, performers: list[tuple[int, int | None, np.ndarray, np.ndarray]],
                      measured: MeasuredPose | None = None) -> None:
        """Per update: (avatar_index, posture_index, pelvis height) of each performer."""
        self.updates.append([(k, index, round(float(xpos[1, 2]), 3)) for k, index, xpos, _ in performers])
        self.measured.append(measured)


def viewer_loop(frames: int, web: FakeWeb, performers: int = 1) -> tuple[ViewerLoop, QueuedSource]:
    model = load_ik_model()
    data = mujoco.MjData(model)
    counters = ViewerCounters()
    source = QueuedSource(deque(received(k, k % performers) for k in range(frames)))
    loop = ViewerLoop(Links(source=source), data, counters, FrameValidator(counters),
                      FrameApplier(model, data, QposWriter(model, G1_JOINT_NAMES), counters), web=web,
                      idle_batch_s=0.001)
    return loop, source


def test_with_no_page_open_a_step_takes_what_queued_without_waiting_per_frame() -> None:
    loop, source = viewer_loop(5, FakeWeb(watching=False))
    assert loop.step()
    assert source.timeouts == [0] * 6  # five frames and the empty receive that ends the batch
    assert loop.counters.viewer_applied == 5
    assert loop.web.updates == []  # nothing packed for a page nobody has open


def test_with_a_page_open_the_first_frame_is_awaited_and_the_pose_published() -> None:
    loop, source = viewer_loop(3, FakeWeb(watching=True))
    assert loop.step()
    assert source.timeouts == [10, 0, 0, 0]
    assert loop.counters.viewer_applied == 3
    assert [[(k, i) for k, i, _ in update] for update in loop.web.updates] == [[(0, 1002)]]


def test_each_performer_has_its_own_robot_and_name() -> None:
    loop, _ = viewer_loop(7, FakeWeb(watching=True), performers=3)
    assert loop.step()
    (update,) = loop.web.updates
    # frames 0..6 went to avatars 0, 1, 2, 0, 1, 2, 0: each robot holds its own latest frame
    assert [(k, i) for k, i, _ in update] == [(0, 1006), (1, 1004), (2, 1005)]
    assert all(z > 0.5 for _, _, z in update)  # every robot's pelvis was placed, not left at the origin
    assert to_json(loop.counters.counts())["performers"] == {
        "0": {"viewer_applied": 3, "avatar_name": "actor0"}, "1": {"viewer_applied": 2, "avatar_name": "actor1"},
        "2": {"viewer_applied": 2, "avatar_name": "actor2"}}


@dataclass
class FakeLowState:
    """Stands in for the DDS participant: counts the readers made; each take gives ``samples``."""

    samples: list[bytes]
    readers: int = 0
    takes: int = 0
    base: list[bytes] = field(default_factory=list)  # mocapline sim's base poses (its own topic)

    def state_reader(self, waitable: bool = True) -> FakeLowState:
        assert not waitable  # the viewer's reader is deleted when dropped
        self.readers += 1
        return self

    def base_reader(self, waitable: bool = True) -> FakeBase:
        assert not waitable
        return FakeBase(self.base)

    def take(self, n: int) -> list[bytes]:
        self.takes += 1
        return list(self.samples)

    def close(self) -> None:
        pass


@dataclass
class FakeBase:
    samples: list[bytes]

    def take(self, n: int) -> list[bytes]:
        return list(self.samples)


def measured_loop(web: FakeWeb, q: np.ndarray) -> tuple[ViewerLoop, FakeLowState]:
    from mocapline.robot.unitree.hg import LOW_STATE, new_low_state

    loop, _ = viewer_loop(3, web)
    state = new_low_state()
    state["motor_state"]["q"][:29] = q
    LOW_STATE.seal(state)
    fake = FakeLowState([LOW_STATE.sample(state)])
    loop.measured = MeasuredRobot(G1, 7, "lo", loop.applier.model, loop.applier.writer.joint_adr)
    loop.measured._dds = fake
    return loop, fake


def test_with_no_page_open_no_lowstate_is_read() -> None:
    loop, fake = measured_loop(FakeWeb(watching=False), np.zeros(29))
    for _ in range(3):
        assert loop.step()
    assert fake.readers == 0 and fake.takes == 0
    assert loop.heartbeat().lowstate_reading is False and loop.heartbeat().lowstate_received == 0


def test_with_a_page_open_the_measured_robot_is_sent_with_its_error_then_the_reader_goes() -> None:
    web = FakeWeb(watching=True)
    target = received(2).payload
    q_target = np.array(pb.MocapFrame.FromString(target).joint_pos)
    loop, fake = measured_loop(web, q_target + 0.1)
    assert loop.step()
    (measured,) = web.measured
    assert measured is not None and measured.avatar_index == 0 and fake.readers == 1
    for group in ("legs", "waist", "arms"):
        assert measured.errors is not None and measured.errors[group]["mean"] == pytest.approx(0.1, abs=1e-5)
    pelvis = loop.applier.performers[0].data.xpos[1]
    np.testing.assert_allclose(measured.xpos[1], pelvis)  # at the target's root
    assert loop.heartbeat().lowstate_received == 1 and loop.heartbeat().lowstate_reading is True
    web.watching = False
    robot = loop.measured
    assert robot is not None
    robot.poll(False, now=100.0)
    robot.poll(False, now=100.0 + CLOSE_AFTER_S / 2)
    assert robot.as_dict()["lowstate_reading"] is True  # a page reloading keeps it
    robot.poll(False, now=100.0 + CLOSE_AFTER_S)
    assert robot.as_dict()["lowstate_reading"] is False
    robot.poll(True, now=200.0)
    assert fake.readers == 2 and robot.as_dict()["lowstate_reader_opens"] == 2


def test_the_measured_robot_is_drawn_where_the_sims_base_is() -> None:
    """mocapline sim publishes its base's pose beside LowState: the page draws the physics robot
    there (a robot on its own feet walks off its target), not at the target's root."""
    from mocapline.robot.unitree.base import base_state

    web = FakeWeb(watching=True)
    q_target = np.array(pb.MocapFrame.FromString(received(2).payload).joint_pos)
    loop, fake = measured_loop(web, q_target)
    yaw = np.array([np.cos(0.3), 0.0, 0.0, np.sin(0.3)])
    fake.base = [base_state(7, np.array([1.5, -0.4, 0.7]), yaw, np.zeros(3))]
    assert loop.step()
    (measured,) = web.measured
    assert measured is not None
    np.testing.assert_allclose(measured.xpos[1], [1.5, -0.4, 0.7], atol=1e-6)  # the pelvis at the sim's base
    np.testing.assert_allclose(measured.xquat[1], yaw, atol=1e-6)
    assert loop.heartbeat().base_received == 1
    for group in ("legs", "waist", "arms"):  # the joints' error still
        assert measured.errors is not None and measured.errors[group]["mean"] == pytest.approx(0.0, abs=1e-5)


def test_the_measured_robot_stands_at_the_origin_without_a_target() -> None:
    from g1_facts import load_ik_model

    from mocapline.robot.unitree.hg import LOW_STATE, new_low_state

    model = load_ik_model()
    robot = MeasuredRobot(G1, 7, "lo", model, QposWriter(model, G1_JOINT_NAMES).joint_adr)
    assert robot.view(None) is None  # no LowState yet
    state = new_low_state()
    state["imu_state"]["quaternion"] = (0.0, 0.0, 0.0, 2.0)  # yawed half a turn (normalised here)
    LOW_STATE.seal(state)
    robot._dds = FakeLowState([LOW_STATE.sample(state)])
    robot.poll(True, now=1.0)
    pose = robot.view(None, now=1.25)
    assert pose is not None and pose.avatar_index == -1 and pose.errors is None
    assert pose.age_s == pytest.approx(0.25)
    np.testing.assert_allclose(pose.xpos[1], [0, 0, 0.793])
    np.testing.assert_allclose(np.abs(pose.xquat[1]), [0, 0, 0, 1], atol=1e-9)


def test_without_cyclonedds_the_page_goes_on_without_the_physics_robot(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "mocapline.robot.unitree.dds", None)  # import fails
    web = FakeWeb(watching=True)
    loop, _ = viewer_loop(3, web)
    loop.measured = MeasuredRobot(G1, 7, "lo", loop.applier.model, loop.applier.writer.joint_adr)
    assert loop.step() and loop.step()
    assert web.measured == [None, None] and loop.measured.unavailable is not None  # tried once, not again
    assert web.updates[0][0][:2] == (0, 1002)  # the target still drawn
    assert loop.heartbeat().lowstate_reader_opens == 0
