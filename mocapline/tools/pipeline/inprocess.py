"""The four stages in one process, for tests and benchmarks: the services' own classes (CaptureService,
RetargetService, Streamer, FrameValidator + FrameApplier) linked by inproc ZeroMQ PUSH/PULL pairs
with the real 44-byte envelope, driven one datagram at a time on one thread.

Each datagram goes through the same code the processes run: capture's CaptureCore (parse, ledger,
merge, FK) and CaptureService._send (HumanFrame protobuf), retarget's on_message (IK, RobotFrame),
the streamer's on_robot_frame / send_ready (interpolator, MocapFrame), the viewer's validation and
apply (qpos, mj_kinematics). Only the sockets' transport (inproc instead of tcp) and the loop that
polls them differ.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import mujoco
import zmq

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.frames import HumanFrame
from mocapline.core.header import MessageType
from mocapline.core.transport import FrameReceiver, FrameSender, lossless_socket
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.robot.model import load_ik_model
from mocapline.robot.registry import get_robot
from mocapline.services.capture.core import AxisDecoder, CaptureCore
from mocapline.services.capture.service import CaptureService
from mocapline.services.retarget.config import load_ik_config
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.service import RetargetService
from mocapline.services.streamer.service import Streamer
from mocapline.services.viewer.apply import (
    FrameApplier,
    FrameValidator,
    QposWriter,
    ViewerCounters,
)
from mocapline.tools.emitter.motion import pose_channels

PORT = 7014


def emitted_take(frames: int, first_index: int = 0, fps: float = 60.0,
                 config: AxisBvhConfig | None = None) -> list[bytes]:
    """The emitter's synthetic walk (``mocapline emit``) as Axis binary BVH datagrams."""
    from mocapline.formats.skeleton import get_skeleton

    config = config or AxisBvhConfig()
    skeleton = get_skeleton(config.skeleton)
    return [encode_datagram(first_index + k, pose_channels(skeleton, config.rotation_order, k / fps), config=config)
            for k in range(frames)]


class FedSource:
    """A capture source fed datagrams by hand (the UDP receiver's role), same core as the service."""

    name = "axis"

    def __init__(self, core: CaptureCore) -> None:
        self.core = core
        self.last_datagram = time.monotonic()
        self._ready: deque[HumanFrame] = deque()

    def feed(self, data: bytes) -> None:
        now = time.monotonic()
        self.last_datagram = now
        self._ready.extend(self.core.feed(Datagram(time.time_ns(), PORT, "127.0.0.1", data), now))

    def poll_frame(self, timeout_s: float) -> HumanFrame | None:
        return self._ready.popleft() if self._ready else None

    def flush(self) -> None:
        self._ready.extend(self.core.flush())

    def ledger(self) -> dict[str, Any]:
        return self.core.ledger(input_pending=len(self._ready))


@dataclass
class StageTracers:
    capture: Any = None
    retarget: Any = None
    streamer: Any = None
    viewer: Any = None


class _Link:
    def __init__(self, ctx: zmq.Context, name: str, mtype: MessageType, joints: int) -> None:
        self.tx = FrameSender(lossless_socket(ctx, zmq.PUSH, f"inproc://{name}", bind=True), mtype, joints)
        self.rx = FrameReceiver(lossless_socket(ctx, zmq.PULL, f"inproc://{name}", bind=False), mtype, joints)

    def close(self) -> None:
        self.tx.socket.close(linger=0)
        self.rx.socket.close(linger=0)


class InProcessPipeline:
    """capture -> retarget -> streamer -> viewer in one process; ``run(datagrams)``."""

    _instances = 0

    def __init__(self, *, fps: float = 60.0, tracers: StageTracers | None = None, metrics: Any = None,
                 config: AxisBvhConfig | None = None, robot_model: str = "g1") -> None:
        robot = get_robot(robot_model)
        tracers = tracers or StageTracers()
        metrics = metrics or {}
        InProcessPipeline._instances += 1
        tag = f"mocapline-inprocess-{id(self)}-{InProcessPipeline._instances}"
        self.ctx = zmq.Context()
        self.human = _Link(self.ctx, f"{tag}-human", MessageType.HUMAN_FRAME, len(GMR_BODIES))
        self.robot = _Link(self.ctx, f"{tag}-robot", MessageType.ROBOT_STATE, robot.joint_count)
        self.mocap = _Link(self.ctx, f"{tag}-mocap", MessageType.MOTION_FRAME, robot.joint_count)
        self.source = FedSource(CaptureCore(AxisDecoder(config or AxisBvhConfig()), [PORT]))
        self.capture = CaptureService(self.source, self.human.tx, metrics=metrics.get("capture"),  # type: ignore[arg-type]
                                      tracer=tracers.capture)
        model = load_ik_model(robot)
        self.retarget = RetargetService(
            Retargeter(load_ik_config("axis_studio", robot=robot, model=model), robot=robot, model=model),
            self.robot.tx, metrics=metrics.get("retarget"), tracer=tracers.retarget)
        self.streamer = Streamer(self.mocap.tx, fps, fps, metrics=metrics.get("streamer"), tracer=tracers.streamer,
                                 robot=robot)
        self.viewer_model = model
        self.viewer_data = mujoco.MjData(model)
        self.viewer_counters = ViewerCounters()
        self.validator = FrameValidator(self.viewer_counters, robot.name)
        self.applier = FrameApplier(model, self.viewer_data, QposWriter(model, robot.joint_names), self.viewer_counters,
                                    metrics=metrics.get("viewer"), tracer=tracers.viewer)
        self.applied: list[int] = []  # posture_index of every frame the viewer applied, in order

    def frame(self, datagram: bytes) -> None:
        """One datagram through every stage, as far as it goes."""
        self.source.feed(datagram)
        self.capture.send_ready()
        self._pump()

    def end(self) -> None:
        """End of the take: flush capture's merge, END_OF_STREAM through every stage."""
        self.source.flush()
        self.capture.send_ready()
        self.human.tx.send_end()
        self._pump()

    def run(self, datagrams: list[bytes]) -> None:
        for data in datagrams:
            self.frame(data)
        self.end()

    def _pump(self) -> None:
        while (msg := self.human.rx.recv(timeout_ms=0)) is not None:
            self.retarget.on_message(msg)
        while (msg := self.robot.rx.recv(timeout_ms=0)) is not None:
            if msg.header.message_type is MessageType.END_OF_STREAM:
                self.streamer.on_end()
            else:
                self.streamer.on_robot_frame(self.streamer.robot_frame(msg.payload), time.time_ns())
            self.streamer.send_ready(timeout_ms=0)
        while (msg := self.mocap.rx.recv(timeout_ms=0)) is not None:
            if msg.header.message_type is MessageType.END_OF_STREAM:
                continue
            frame = self.validator.accept(msg)
            if frame is not None:
                self.applied.append(frame.posture_index)
            self.applier.apply_pending(self.validator)

    def close(self) -> None:
        for link in (self.human, self.robot, self.mocap):
            link.close()
        self.ctx.term()
