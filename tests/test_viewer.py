"""The viewer as a real process: every valid frame applied, every bad one rejected by reason, and the
headless web view serving the robot's meshes and streaming its body poses over a WebSocket."""

import contextlib
import json
import struct
import subprocess
import sys
import time
import urllib.request
import zlib

import numpy as np
import pytest
import zmq

from mocapline.core import pb
from mocapline.core.header import HEADER_SIZE, MessageType, encode_frame
from mocapline.core.transport import FrameSender, lossless_socket
from mocapline.tools.pipeline.procs import free_tcp_port

pytestmark = pytest.mark.integration


def motion(index: int, joints: int = 29) -> pb.MocapFrame:
    q = np.linspace(-0.3, 0.3, joints) * np.sin(index / 10)
    return pb.MocapFrame(
        index=index, body_pos_w=[0.0, 0.0, 0.79], body_lin_vel_w=[0, 0, 0], body_quat_w=[1, 0, 0, 0],
        body_ang_vel_w=[0, 0, 0], joint_pos=q.tolist(), joint_vel=[0.0] * joints,
        left_hand=[0.0] * 7, right_hand=[0.0] * 7, posture_index=1000 + index,
    )


def bad_frames() -> dict[str, bytes]:
    good = encode_frame(MessageType.MOTION_FRAME, 0, motion(0).SerializeToString(),
                        capture_timestamp_us=1, send_timestamp_us=2, joint_count=29)
    flipped = bytearray(good)
    flipped[HEADER_SIZE + 5] ^= 0xFF

    def refield(data: bytes, offset: int, fmt: str, value: int) -> bytes:
        b = bytearray(data)
        struct.pack_into(fmt, b, offset, value)
        crc = zlib.crc32(bytes(b[HEADER_SIZE:]), zlib.crc32(bytes(b[:40])))
        struct.pack_into("<I", b, 40, crc)
        return bytes(b)

    short = encode_frame(MessageType.MOTION_FRAME, 0, motion(0, joints=28).SerializeToString(),
                         capture_timestamp_us=1, send_timestamp_us=2, joint_count=29)
    return {
        "crc_mismatch": bytes(flipped),
        "unknown_version": refield(good, 4, "<H", 9),
        "joint_count": refield(good, 36, "<H", 23),
        "field_length": short,
    }


def test_viewer_applies_valid_and_rejects_bad_by_reason() -> None:
    port, web_port = free_tcp_port(), free_tcp_port()
    ctx = zmq.Context()
    sock = lossless_socket(ctx, zmq.PUSH, f"tcp://127.0.0.1:{port}", bind=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "mocapline.cli", "viewer", f"--input=tcp://127.0.0.1:{port}", "--display=web",
         f"--web-port={web_port}", "--exit-on-end", "--nats=nats://127.0.0.1:1", "--log-level=WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    stack = contextlib.ExitStack()
    try:
        deadline = time.monotonic() + 60
        while True:  # the web view answers once the viewer is up and connected
            assert proc.poll() is None, proc.communicate()[1]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{web_port}/healthz", timeout=1).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "viewer did not start"
                time.sleep(0.2)
        from websockets.sync.client import connect

        page_socket = stack.enter_context(connect(f"ws://127.0.0.1:{web_port}/ws", open_timeout=10))  # as the page
        sender = FrameSender(sock, MessageType.MOTION_FRAME, 29)
        for i in range(50):
            sender.send(motion(i).SerializeToString(), capture_timestamp_us=time.time_ns() // 1000)
        for data in bad_frames().values():
            sock.send_multipart([b"MOCAP_FRAME", data])
        sender.next_frame_id += 3  # a frame_id gap of 3
        for i in range(50, 60):
            sender.send(motion(i).SerializeToString(), capture_timestamp_us=time.time_ns() // 1000)
        poses = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not poses or np.frombuffer(poses[-1], "<f4")[2] < 1059):
            poses.append(page_socket.recv(timeout=30))
        stack.close()
        get = lambda path: urllib.request.urlopen(f"http://127.0.0.1:{web_port}{path}", timeout=10).read()  # noqa: E731
        page = get("/").decode()
        robot = json.loads(get("/robot.json"))
        meshes = get("/robot.bin")  # urllib does not decode gzip: the page's browser does
        live = json.loads(get("/ledger.json"))
        sender.send_end()
        out, err = proc.communicate(timeout=60)
    finally:
        stack.close()
        if proc.poll() is None:
            proc.kill()
        sock.close(linger=0)
        ctx.term()
    final = json.loads(out.strip().splitlines()[-1])
    assert final["viewer_applied"] == 60 and final["viewer_received"] == 60
    assert final["rejected_by_reason"] == {"crc_mismatch": 1, "unknown_version": 1, "joint_count": 1, "field_length": 1}
    assert final["crc_invalid"] == 1
    assert final["frame_id_gaps"] == 3
    assert final["last_posture_index"] == 1059
    pose = np.frombuffer(poses[-1], "<f4")
    # one performer (avatar_index 0) at posture_index 1059, then each body
    assert pose[:3].tolist() == [1, 0, 1059] and len(pose) == 3 + 7 * len(robot["bodies"])
    pelvis = pose[3 + 7 * robot["pelvis"]:][:3]
    assert abs(pelvis[2] - 0.79) < 1e-4  # the frame's body_pos_w, applied
    assert len(robot["geoms"]) > 20 and meshes[:2] == b"\x1f\x8b" and len(meshes) > 100_000
    assert "/static/app.js" in page and live["viewer"]["viewer_applied"] >= 1


def test_a_new_header_epoch_is_a_sender_restart_not_a_backward_jump() -> None:
    """A plain streamer restarted numbers from 0 again under a new header epoch: the viewer counts a
    restart, no backward jump and no gap; the same epoch going back is a real jump back."""
    from types import SimpleNamespace

    from mocapline.services.viewer.apply import ViewerCounters

    c = ViewerCounters()
    for fid in range(0, 840):
        c.observe_frame_id(SimpleNamespace(frame_id=fid, epoch=7))
    for fid in range(0, 10):
        c.observe_frame_id(SimpleNamespace(frame_id=fid, epoch=9))
    assert c.sender_restarts == 1 and c.frame_ids.backward == 0 and c.frame_ids.missing == 0
    c.observe_frame_id(SimpleNamespace(frame_id=3, epoch=9))
    assert c.frame_ids.backward == 1


def test_latency_percentiles_are_not_held_from_an_empty_window() -> None:
    """The percentiles are cached for a second, but a short take right after a reset is not
    answered with the None its empty window gave a moment before (bench e2e's flat-out take)."""
    from mocapline.services.viewer.apply import ViewerCounters

    counters = ViewerCounters()
    assert counters.latency_percentiles_ms() == {"latency_p50_ms": None, "latency_p99_ms": None}
    for ms in (1, 2, 3, 4, 100):
        counters.record_latency(ms / 1000)
    got = counters.latency_percentiles_ms()
    assert got["latency_p50_ms"] == pytest.approx(3.0) and got["latency_p99_ms"] > 90
