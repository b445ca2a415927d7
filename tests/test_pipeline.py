"""The whole pipeline as real processes (NATS, capture, retarget, streamer, viewer, auditor) on
loopback, driven by the emitter: the reference scenarios end to end."""

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import nats
import pytest
import zmq
from g1_facts import G1_JOINT_COUNT

from mocapline.core import pb
from mocapline.core.header import MessageType
from mocapline.core.transport import FrameReceiver, lossless_socket
from mocapline.core.verdict import BOTH, MAIN_ONLY, SIDE_ONLY
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.stack import Stack, local_config

pytestmark = pytest.mark.integration


def make_stack(tmp_path, *, merge: bool = False, viewer: bool = True) -> Stack:
    config = local_config(
        merge=merge, viewer=viewer, input_fps=120.0, output_fps=120.0, log_dir=tmp_path / "logs",
    )
    stack = Stack(config)
    stack.start()
    stack.wait_ready()
    return stack


@pytest.fixture
def stack_factory(tmp_path) -> Iterator:
    made: list[Stack] = []

    def make(**kw: object) -> Stack:
        made.append(make_stack(tmp_path, **kw))
        return made[-1]

    yield make
    for stack in made:
        stack.stop()


def run_take(stack: Stack, plan: TakePlan, rate: float = 600.0) -> dict:
    c = stack.config
    emit_take(plan, [("127.0.0.1", c.main_port), ("127.0.0.1", c.side_port)], rate_hz=rate)
    return stack.verdict(stack.drain())


def test_take008_end_to_end(stack_factory) -> None:
    stack = stack_factory()
    v = run_take(stack, TakePlan(frames=3151, first_index=9368, duplicate={12518}))
    assert (v["source_received"], v["source_unique_frames"], v["source_duplicate_indices"]) == (3152, 3151, 1)
    assert v["source_missing_indices"] == 0 and v["source_backward_indices"] == 0
    assert v["gmr_processed"] == v["motion_generated"] == v["zmq_sent"] == v["viewer_applied"] == 3151
    assert v["input_pending"] == 0 and v["robot_pending"] == 0
    assert (v["first_posture_index"], v["last_posture_index"]) == (9368, 12518)
    assert v["unique_frames_conserved"] == 1


def test_missing_indices_classified_without_merge(stack_factory) -> None:
    stack = stack_factory(merge=False)
    plan = TakePlan(frames=400, first_index=100, skip_main={150, 151}, skip_all={200}, skip_side={300})
    v = run_take(stack, plan)
    by_path = v["missing_by_path"]
    assert by_path[MAIN_ONLY] == [[150, 151]]
    assert by_path[BOTH] == [[200, 200]]
    assert by_path[SIDE_ONLY] == [[300, 300]]
    assert v["source_missing_indices"] == 3
    assert v["unique_frames_conserved"] == 0  # frames were lost (upstream and on our receiver)
    assert v["gmr_processed"] == 397  # every frame received went through the IK...
    # ...and the stream stays on its clock: the interpolator bridges the gaps, every frame it
    # generated reached the viewer.
    assert v["motion_generated"] == v["zmq_sent"] == v["viewer_applied"] == 400


def test_merge_recovers_what_is_recoverable(stack_factory) -> None:
    stack = stack_factory(merge=True)
    plan = TakePlan(frames=400, first_index=100, skip_main={150, 151, 320}, skip_side={300, 301})
    v = run_take(stack, plan)
    assert v["source_missing_indices"] == 0
    assert v["missing_by_path"][MAIN_ONLY] == [[150, 151], [320, 320]]
    assert v["missing_by_path"][SIDE_ONLY] == [[300, 301]]
    assert v["viewer_applied"] == 400 and v["unique_frames_conserved"] == 1
    stack.reset()  # a new take: fresh ledgers everywhere
    v2 = run_take(stack, TakePlan(frames=100, first_index=1000, skip_all={1050}))
    assert v2["missing_by_path"][BOTH] == [[1050, 1050]]  # upstream: no path can recover it
    assert v2["source_unique_frames"] == 99 and v2["viewer_applied"] == 100


def test_garbage_is_rejected_and_the_take_conserved(stack_factory) -> None:
    stack = stack_factory()
    v = run_take(stack, TakePlan(frames=500, first_index=0, garbage=1000, seed=7), rate=1000)
    assert v["rejected_datagrams"] == 1000
    assert v["source_unique_frames"] == 500 and v["unique_frames_conserved"] == 1


def test_slow_consumer_gets_everything(stack_factory) -> None:
    stack = stack_factory(viewer=False)
    ctx = zmq.Context()
    rx = FrameReceiver(lossless_socket(ctx, zmq.PULL, f"tcp://127.0.0.1:{stack.config.output_port}", bind=False),
                       MessageType.MOTION_FRAME, G1_JOINT_COUNT)
    got: list[int] = []
    done = threading.Event()

    def consume() -> None:
        while not done.is_set():
            msg = rx.recv(timeout_ms=100)
            if msg is None:
                continue
            if msg.header.message_type is MessageType.END_OF_STREAM:
                done.set()
                break
            frame = pb.MocapFrame()
            frame.ParseFromString(bytes(msg.payload))
            got.append(frame.posture_index)
            time.sleep(0.01)  # a consumer 5x slower than the stream

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    c = stack.config
    emit_take(TakePlan(frames=300, first_index=0), [("127.0.0.1", c.main_port)], rate_hz=500)
    peak = 0  # frames sent on but not yet taken by the consumer: they wait in the link's queues
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = stack.ask("streamer", "status")
        peak = max(peak, status["zmq_sent"] + status["pending"] - len(got))
        if peak > 20:
            break
        time.sleep(0.05)
    v = stack.verdict(stack.drain())
    done.wait(60)
    rx.socket.close(linger=0)
    ctx.term()
    assert peak > 20  # the backlog waited...
    assert got == list(range(300))  # ...and nothing was dropped or reordered
    assert v["zmq_sent"] == 300 and v["robot_pending"] == 0


def test_nats_restart_mid_take(stack_factory) -> None:
    stack = stack_factory()
    c = stack.config
    sender = threading.Thread(
        target=emit_take, args=(TakePlan(frames=900, first_index=0), [("127.0.0.1", c.main_port)]),
        kwargs={"rate_hz": 300}, daemon=True,
    )
    sender.start()
    time.sleep(0.8)
    assert stack.nats is not None
    stack.kill_nats()
    time.sleep(1.0)
    stack.restart_nats()
    sender.join(30)

    async def heartbeats() -> set[str]:
        nc = await nats.connect(c.nats_url)
        seen: set[str] = set()

        async def cb(msg) -> None:
            seen.add(json.loads(msg.data)["service"])

        await nc.subscribe("mocapline.heartbeat.*", cb=cb)
        deadline = time.monotonic() + 10
        while not wanted <= seen and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await nc.close()
        return seen

    wanted = {"capture", "retarget", "streamer", "viewer"}
    assert wanted <= asyncio.run(heartbeats())
    v = stack.verdict(stack.drain())
    assert v["source_unique_frames"] == 900 and v["unique_frames_conserved"] == 1
