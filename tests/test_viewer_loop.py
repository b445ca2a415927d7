"""The viewer's loop: frames taken per frame while someone could be watching, in batches while a web
page could show them and none is open (the frames then wait in the socket, not in the viewer)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import mujoco
import numpy as np

from mocapline.core import pb
from mocapline.core.counters import to_json
from mocapline.core.header import MessageType, decode_frame, encode_frame
from mocapline.core.stage import Links
from mocapline.core.transport import Received
from mocapline.robot.g1 import G1_JOINT_NAMES, load_ik_model
from mocapline.services.viewer.apply import FrameApplier, FrameValidator, QposWriter, ViewerCounters
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

    def publish_poses(self, performers: list[tuple[int, int | None, np.ndarray, np.ndarray]]) -> None:
        """Per update: (avatar_index, posture_index, pelvis height) of each performer."""
        self.updates.append([(k, index, round(float(xpos[1, 2]), 3)) for k, index, xpos, _ in performers])


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
