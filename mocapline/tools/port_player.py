"""A robot port played from this process: the streamer's own acknowledged fan-out sender
(``mocapline.core.fanout``, the 44-byte header and MocapFrame on the wire) fed frames at a stream
rate, for whatever consumes a robot port (``mocapline robot``, the viewer) without the pipeline in
front of it: ``mocapline bench robot`` plays the CMU takes retargeted offline through it, the
robot bridge's tests their synthetic motions.

Each frame's ``capture_timestamp_us`` is stamped as it is committed to the sender, so a consumer's
latency "capture -> applied" is here "the port sent it -> applied".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import zmq

from mocapline.core import pb
from mocapline.core import quat as Q
from mocapline.core.fanout import DEFAULT_MAX_BACKLOG, FanoutSender
from mocapline.core.header import MessageType
from mocapline.core.reliable import NO_EPOCH
from mocapline.core.segmentlog import LogConfig
from mocapline.core.stagelog import Output, StageLog, StageRecord
from mocapline.core.transport import lossless_socket, server_link
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import get_robot
from mocapline.tools.pipeline.procs import free_tcp_port

FIRST_POSTURE_INDEX = 1000


def joint_frame(i: int, q: np.ndarray, dq: np.ndarray, t: float, robot_model: str = "") -> pb.MocapFrame:
    """Frame ``i`` of a joint trajectory alone: the root still 1 m up, no hands."""
    return pb.MocapFrame(index=i, body_pos_w=[0.0, 0.0, 1.0], body_lin_vel_w=[0.0] * 3, body_quat_w=[1.0, 0, 0, 0],
                         body_ang_vel_w=[0.0] * 3, joint_pos=list(q), joint_vel=list(dq), left_hand=[0.0] * 7,
                         right_hand=[0.0] * 7, posture_index=FIRST_POSTURE_INDEX + i,
                         posture_index_first=FIRST_POSTURE_INDEX + i, posture_index_last=FIRST_POSTURE_INDEX + i,
                         source_time_s=t, robot_model=robot_model)


def root_angular_velocity(time_s: np.ndarray, root_quat: np.ndarray) -> np.ndarray:
    """World angular velocity (T, 3) of a root orientation track (w x y z), by central
    differences (one-sided at the ends), as ``numpy.gradient`` gives the clip's ``qd``."""
    n = len(time_s)
    if n < 2:
        return np.zeros((n, 3))
    hi = np.minimum(np.arange(n) + 1, n - 1)
    lo = np.maximum(np.arange(n) - 1, 0)
    dt = (time_s[hi] - time_s[lo])[:, None]
    return Q.log(Q.multiply(root_quat[hi], Q.conjugate(root_quat[lo]))) / dt


def clip_frames(clip: Mapping[str, np.ndarray], first_posture_index: int = FIRST_POSTURE_INDEX,
                robot: RobotDescription | None = None) -> list[pb.MocapFrame]:
    """A reference clip (the contract of ``mocapline export`` / ``retarget-file``: ``time``,
    ``q``, ``qd``, ``root_pose``, ``posture_index``) of ``robot`` (default: the clip's
    ``robot_model``, else the default build) as the streamer's MocapFrames, one per sample: joints
    and their velocities as the clip has them, root pose and velocities, hands from the robot's
    forward kinematics (the streamer's builder), posture indices the clip's source frames offset by
    ``first_posture_index``. ``capture_timestamp_us`` is left 0: the player stamps it."""
    from mocapline.services.streamer.frames import MocapFrameBuilder

    time_s = np.asarray(clip["time"], dtype=np.float64)
    q, qd = np.asarray(clip["q"], dtype=np.float64), np.asarray(clip["qd"], dtype=np.float64)
    root = np.asarray(clip["root_pose"], dtype=np.float64)
    pos, rot = root[:, :3], root[:, 3:7]
    lin = np.gradient(pos, time_s, axis=0) if len(time_s) > 1 else np.zeros_like(pos)
    ang = root_angular_velocity(time_s, rot)
    source = np.asarray(clip["posture_index"], dtype=np.int64) + first_posture_index
    if robot is None:
        robot = get_robot(str(clip["robot_model"])) if "robot_model" in clip else get_robot()
    builder = MocapFrameBuilder(robot)
    return [builder.build(k, root_pos=pos[k], root_quat=rot[k], root_lin_vel=lin[k], root_ang_vel=ang[k],
                          joint_pos=q[k], joint_vel=qd[k], posture_index=int(source[k]),
                          posture_index_first=int(source[k]), posture_index_last=int(source[k]),
                          capture_timestamp_us=0, time_s=float(time_s[k]))
            for k in range(len(time_s))]


class PortPlayer:
    """The robot port on a free loopback port (or ``endpoint``), its sender pumped in a thread;
    ``play`` commits frames at their stream rate, as the streamer would."""

    def __init__(self, state: Path, endpoint: str | None = None, window: int = 256, *, push: bool = False,
                 max_backlog: int = DEFAULT_MAX_BACKLOG, curve: dict[str, str] | None = None,
                 segment_bytes: int = LogConfig.max_segment_bytes, joint_count: int | None = None) -> None:
        """``push``, ``max_backlog``: as the streamer's ``FanoutSender``; ``curve``: the
        ``server_link`` keys of a CURVE port; ``segment_bytes``: the log's segment size;
        ``joint_count``: the robot's (default: the default build's)."""
        self.endpoint = endpoint or f"tcp://127.0.0.1:{free_tcp_port()}"
        self.ctx = zmq.Context()
        self.auth = None
        if curve:
            sock, self.auth = server_link(self.ctx, zmq.ROUTER, self.endpoint, **curve)
        else:
            sock = lossless_socket(self.ctx, zmq.PUSH if push else zmq.ROUTER, self.endpoint, bind=True)
        self.log = StageLog(state, "stage", LogConfig(fsync="never", max_segment_bytes=segment_bytes))
        joints = joint_count if joint_count is not None else get_robot().joint_count
        self.sender = FanoutSender(sock, self.log, joints, window=window, push=push,
                                   max_backlog=max_backlog)
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.produced = 0
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        while not self.halt.is_set():
            with self.lock:
                self.sender.pump()
            self.sender.sock.poll(2)

    def play(self, frames: Sequence[pb.MocapFrame], rate: float, start: int = 0, end: bool = False) -> None:
        """Commit frame k as record ``start + k`` at ``k / rate`` s after the call, its
        ``capture_timestamp_us`` stamped then (the messages given are changed); ``end`` then
        commits END_OF_STREAM."""
        t0 = time.monotonic()
        for k, msg in enumerate(frames):
            wait = t0 + k / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            now_us = time.time_ns() // 1000
            msg.capture_timestamp_us = now_us
            with self.lock:
                self.sender.commit(StageRecord(NO_EPOCH, start + k, b"", [
                    Output(MessageType.MOTION_FRAME, msg.SerializeToString(), now_us)]))
                self.produced += 1
        if end:
            self.end()

    def end(self) -> None:
        with self.lock:
            self.sender.commit(StageRecord(NO_EPOCH, -1, b"", [Output(MessageType.END_OF_STREAM, b"", 0)]))

    def counts(self) -> dict[str, int]:
        """The sender's delivered / unconfirmed / pending frames."""
        with self.lock:
            return self.sender.counts()

    def connected(self, name: str) -> bool:
        """Whether the consumer ``name`` has completed its handshake and is connected."""
        with self.lock:
            consumer = self.sender.snapshot()["consumers"].get(name)
        return bool(consumer and consumer["connected"])

    def close(self) -> None:
        self.halt.set()
        self.thread.join(5)
        self.sender.close()
        self.sender.sock.close(linger=0)
        self.log.close()
        if self.auth is not None:
            self.auth.stop()
        self.ctx.term()
