"""The retarget stage: one RobotFrame per HumanFrame, same posture_index, END forwarded, counted."""

import json
import subprocess
import sys
import time

import g1_facts as rm
import numpy as np
import pytest
import zmq
from g1_facts import G1_JOINT_COUNT

from mocapline.core.bodies import GMR_BODIES, GMR_BODY_INDEX
from mocapline.core.frames import HumanFrame, RobotFrame
from mocapline.core.header import MessageType
from mocapline.core.transport import FrameReceiver, FrameSender, lossless_socket
from mocapline.services.retarget import synthetic
from mocapline.services.retarget.config import load_ik_config
from mocapline.services.retarget.ik.options import RetargetOptions
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.service import RetargetService, status_line
from mocapline.tools.pipeline.procs import free_tcp_port


@pytest.fixture(scope="module")
def take():
    model = rm.load_ik_model()
    cfg = load_ik_config("axis_studio", model=model)
    truth = synthetic.robot_motion(12, 60.0, model=model)
    pos, quat = synthetic.human_from_robot(truth, cfg, model=model)
    return model, cfg, truth, pos, quat


def human_frames(pos, quat, start=9368, segment=0, skip=()):
    out = []
    for f in range(len(pos)):
        if f in skip:
            continue
        out.append(HumanFrame(posture_index=start + f, capture_timestamp_us=1_000_000 + f, positions=pos[f],
                              quaternions=quat[f], traceparent=f"00-{f:032x}-{f:016x}-01", segment=segment,
                              session_id="sess"))
    return out


class Link:
    """An inproc PUSH/PULL pair with the real envelope on both ends."""

    def __init__(self, ctx, name, mtype, joints):
        self.push = FrameSender(lossless_socket(ctx, zmq.PUSH, f"inproc://{name}", bind=True), mtype, joints)
        self.pull = FrameReceiver(lossless_socket(ctx, zmq.PULL, f"inproc://{name}", bind=False), mtype, joints)


@pytest.fixture
def links():
    ctx = zmq.Context()
    human = Link(ctx, "human", MessageType.HUMAN_FRAME, len(GMR_BODIES))
    robot = Link(ctx, "robot", MessageType.ROBOT_STATE, G1_JOINT_COUNT)
    yield human, robot
    for link in (human, robot):
        link.push.socket.close(linger=0)
        link.pull.socket.close(linger=0)
    ctx.term()


def pump(service, human_link, n_messages):
    for _ in range(n_messages):
        msg = human_link.pull.recv(timeout_ms=1000)
        assert msg is not None
        service.on_message(msg)


def drain(robot_link):
    out = []
    while (msg := robot_link.pull.recv(timeout_ms=50)) is not None:
        out.append(msg)
    return out


@pytest.mark.parametrize("filter_name", ["none", "smooth3"])
def test_one_robot_frame_per_human_frame_and_end_forwarded(take, links, filter_name) -> None:
    model, cfg, truth, pos, quat = take
    human, robot = links
    # the known answer below is the IK's alone: no stance foot held on the floor
    service = RetargetService(Retargeter(cfg, RetargetOptions(footing=False), model=model), robot.push,
                              filter=filter_name)
    frames = human_frames(pos, quat, skip={5})  # index 9373 lost upstream
    for f in frames:
        human.push.send(f.to_bytes(), capture_timestamp_us=f.capture_timestamp_us)
    human.push.send_end()
    pump(service, human, len(frames) + 1)
    msgs = drain(robot)
    assert msgs[-1].header.message_type is MessageType.END_OF_STREAM
    robots = [RobotFrame.from_bytes(m.payload) for m in msgs[:-1]]
    assert [r.posture_index for r in robots] == [f.posture_index for f in frames]
    assert [m.header.capture_timestamp_us for m in msgs[:-1]] == [f.capture_timestamp_us for f in frames]
    assert [r.traceparent for r in robots] == [f.traceparent for f in frames]
    assert all(r.session_id == "sess" and not r.ik_failed for r in robots)
    c = service.counters
    assert (c.frames_in, c.gmr_processed, c.robot_frames_sent, c.ends_forwarded, c.ik_failed) == (11, 11, 11, 1, 0)
    assert service.ended and service.pending == 0
    if filter_name == "none":  # the known answer, frame by frame (the first one settles from standing)
        got = np.array([np.concatenate([r.root_pos, r.root_quat, r.joint_pos]) for r in robots])
        keep = [i for i in range(len(truth)) if i != 5]
        truth_pos = synthetic.all_body_positions(model, truth[keep])
        err = np.linalg.norm(truth_pos - synthetic.all_body_positions(model, got), axis=2)
        assert err[1:].max() < 0.005
    hb = service.heartbeat({})
    assert hb.gmr_processed == 11 and hb.input_link.missing_indices == 0
    assert "processed=11" in status_line(hb)


def test_failures_are_flagged_and_counted_not_fatal(take, links) -> None:
    model, cfg, truth, pos, quat = take
    human, robot = links
    service = RetargetService(Retargeter(cfg, model=model), robot.push)
    frames = human_frames(pos[:4], quat[:4])
    frames[2].positions = frames[2].positions.copy()
    frames[2].positions[GMR_BODY_INDEX["Hips"], 0] = np.nan
    for f in frames:
        human.push.send(f.to_bytes(), capture_timestamp_us=f.capture_timestamp_us)
    human.push.send(b"\xff\xfe not a protobuf", capture_timestamp_us=0)  # valid envelope, bad payload
    pump(service, human, 5)
    robots = [RobotFrame.from_bytes(m.payload) for m in drain(robot)]
    assert [r.ik_failed for r in robots] == [False, False, True, False]
    np.testing.assert_array_equal(robots[2].joint_pos, robots[1].joint_pos)  # the last good pose
    assert service.counters.ik_failed == 1 and service.counters.gmr_processed == 4
    assert service.counters.decode_errors == 1
    assert "NaN" in service.counters.last_error or "decode" in service.counters.last_error


def test_a_backward_index_starts_a_new_take(take, links) -> None:
    model, cfg, truth, pos, quat = take
    human, robot = links
    service = RetargetService(Retargeter(cfg, model=model), robot.push, filter="smooth3")
    first = human_frames(pos[:4], quat[:4], start=500)
    second = human_frames(pos[:3], quat[:3], start=10)  # Axis restarted: no END in between
    for f in first + second:
        human.push.send(f.to_bytes(), capture_timestamp_us=f.capture_timestamp_us)
    pump(service, human, 7)
    robots = [RobotFrame.from_bytes(m.payload) for m in drain(robot)]
    # the filter's held frame of the first take went out before the second take began
    assert [r.posture_index for r in robots] == [500, 501, 502, 503, 10, 11]
    assert service.counters.takes == 2 and service.pending == 1


@pytest.mark.integration
def test_main_runs_as_a_process(take) -> None:
    model, cfg, truth, pos, quat = take
    in_port, out_port = free_tcp_port(), free_tcp_port()
    ctx = zmq.Context()
    human = FrameSender(lossless_socket(ctx, zmq.PUSH, f"tcp://127.0.0.1:{in_port}", bind=True),
                        MessageType.HUMAN_FRAME, len(GMR_BODIES))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mocapline.cli", "retarget", f"--input=tcp://127.0.0.1:{in_port}",
         f"--output=tcp://127.0.0.1:{out_port}", "--nats=", "--max-takes=1", "--status-interval=0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    rx = FrameReceiver(lossless_socket(ctx, zmq.PULL, f"tcp://127.0.0.1:{out_port}", bind=False),
                       MessageType.ROBOT_STATE, G1_JOINT_COUNT)
    try:
        frames = human_frames(pos, quat)
        for f in frames:
            human.send(f.to_bytes(), capture_timestamp_us=f.capture_timestamp_us)
        human.send_end()
        got, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = rx.recv(timeout_ms=200)
            if msg is None:
                assert proc.poll() is None, proc.stderr.read()
                continue
            if msg.header.message_type is MessageType.END_OF_STREAM:
                break
            got.append(RobotFrame.from_bytes(msg.payload).posture_index)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        human.socket.close(linger=0)
        rx.socket.close(linger=0)
        ctx.term()
    assert proc.returncode == 0, err
    assert got == [f.posture_index for f in frames]
    final = json.loads(out.strip().splitlines()[-1])
    assert final["gmr_processed"] == final["robot_frames_sent"] == len(frames)
    assert final["ends_forwarded"] == 1 and final["ik_failed"] == 0 and final["pending"] == 0


def test_bad_config_is_a_clear_start_up_error(tmp_path) -> None:
    from mocapline.services.retarget.main import main

    bad = tmp_path / "cfg.json"
    bad.write_text("{}")
    assert main(["--ik-config", str(bad), "--nats="]) == 2
