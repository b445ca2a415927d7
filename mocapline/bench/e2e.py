"""``mocapline bench e2e``: end-to-end latency through every service, and the envelope's cost.

1. Latency from UDP arrival at capture to qpos applied in the viewer (no rendering), p50 / p99, for a
   take emitted at 60 Hz, 120 Hz and as fast as possible, through the real processes (NATS, capture,
   retarget, streamer, viewer, auditor) on loopback. Flat out measures queueing, not the pipeline's
   floor: frames wait behind the IK.
2. Transport throughput streamer -> viewer: FrameSender / FrameReceiver (44-byte header, CRC32 both
   ways, validation) against bare pyzmq PUSH/PULL of same-size messages, side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import zmq

from mocapline.core import pb
from mocapline.core.header import MessageType
from mocapline.core.transport import FrameReceiver, FrameSender, lossless_socket
from mocapline.robot.registry import get_robot
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.pipeline.stack import Stack, local_config

JOINTS = get_robot().joint_count  # the default build's: these benches measure links, not a robot


def sample_payload() -> bytes:
    q = np.linspace(-1, 1, JOINTS)
    return pb.MocapFrame(
        index=1, body_pos_w=[0.1, 0.2, 0.8], body_lin_vel_w=[0.0] * 3, body_quat_w=[1, 0, 0, 0],
        body_ang_vel_w=[0.0] * 3, joint_pos=q.tolist(), joint_vel=q.tolist(), left_hand=[0.0] * 7,
        right_hand=[0.0] * 7, posture_index=12345, posture_index_first=12345, posture_index_last=12345,
        capture_timestamp_us=1, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
    ).SerializeToString()


def _throughput(n: int, enveloped: bool) -> float:
    ctx = zmq.Context()
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    push = lossless_socket(ctx, zmq.PUSH, endpoint, bind=True)
    pull = lossless_socket(ctx, zmq.PULL, endpoint, bind=False)
    payload = sample_payload()
    bare = payload + bytes(44)
    sender = FrameSender(push, MessageType.MOTION_FRAME, JOINTS)
    receiver = FrameReceiver(pull, MessageType.MOTION_FRAME, JOINTS)

    def send() -> None:
        for _ in range(n):
            if enveloped:
                sender.send(payload, capture_timestamp_us=1)
            else:
                push.send_multipart((b"MOCAP_FRAME", bare))

    start = time.perf_counter()
    t = threading.Thread(target=send)
    t.start()
    got = 0
    while got < n:
        if enveloped:
            if receiver.recv() is not None:
                got += 1
        else:
            pull.recv_multipart(copy=False)
            got += 1
    elapsed = time.perf_counter() - start
    t.join()
    assert not receiver.rejects, receiver.rejects
    push.close(linger=0)
    pull.close(linger=0)
    ctx.term()
    return n / elapsed


def transport(n: int, rounds: int) -> dict[str, float]:
    env = [_throughput(n, True) for _ in range(rounds)]
    bare = [_throughput(n, False) for _ in range(rounds)]
    return {"envelope_msgs_per_s": max(env), "bare_msgs_per_s": max(bare), "envelope_cost": max(bare) / max(env)}


def latency(frames: int, rates: list[float]) -> dict[str, Any]:
    config = local_config(viewer=True, input_fps=120.0, output_fps=120.0)
    stack = Stack(config)
    out: dict[str, Any] = {}
    try:
        stack.start()
        stack.wait_ready()
        for rate in rates:
            stack.reset()
            emit_take(TakePlan(frames=frames, first_index=0), [("127.0.0.1", config.main_port)], rate_hz=rate)
            finals = stack.drain()
            view = finals["viewer"]
            name = f"{int(rate)}hz" if rate > 0 else "flat_out"
            out[name] = {"p50_ms": view["latency_p50_ms"], "p99_ms": view["latency_p99_ms"],
                         "applied": view["viewer_applied"]}
    finally:
        stack.stop()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mocapline bench e2e", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--frames", type=int, default=600, help="frames per latency take")
    parser.add_argument("--messages", type=int, default=20000, help="messages per transport round")
    parser.add_argument("--rounds", type=int, default=3, help="transport rounds (best is reported)")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    result: dict[str, Any] = {"latency": latency(args.frames, [60.0, 120.0, 0.0])}
    result["transport"] = transport(args.messages, args.rounds)
    if args.json:
        print(json.dumps(result))
        return 0
    print("end-to-end latency, UDP arrival at capture -> qpos applied in the viewer (no rendering)")
    for name, r in result["latency"].items():
        p50, p99 = (f"{v:8.2f}" if v is not None else "       -" for v in (r["p50_ms"], r["p99_ms"]))
        print(f"  {name:<9} p50 {p50} ms   p99 {p99} ms   ({r['applied']} frames)")
    t = result["transport"]
    print("transport streamer -> viewer, same-size messages")
    print(f"  envelope (header + CRC + validation) {t['envelope_msgs_per_s']:>10.0f} msg/s")
    print(f"  bare pyzmq PUSH/PULL                 {t['bare_msgs_per_s']:>10.0f} msg/s")
    print(f"  envelope cost                        {t['envelope_cost']:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
