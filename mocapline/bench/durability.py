"""``mocapline bench durability``: what crash safety costs, durable mode against plain links,
side by side in one run.

1. One link, sender and receiver in two processes: frames/s through FrameSender/FrameReceiver
   (plain PUSH/PULL) against the reliable link (one log record per frame, ACKs, duplicates check)
   with each fsync policy.
2. The whole pipeline as real processes: p50 / p99 of UDP arrival -> qpos applied at 120 Hz, and
   frames/s when the take is emitted as fast as possible, plain against durable (fsync interval,
   the default, and always).
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from mocapline.bench.e2e import sample_payload
from mocapline.core.header import MessageType
from mocapline.core.reliable import (
    NO_EPOCH,
    ReliableReceiver,
    ReliableSender,
    receiver_sockets,
    sender_sockets,
)
from mocapline.core.segmentlog import Fsync, LogConfig
from mocapline.core.stagelog import Output, StageLog, StageRecord
from mocapline.core.transport import FrameReceiver, FrameSender, lossless_socket
from mocapline.robot.registry import get_robot
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.pipeline.stack import Stack, local_config

JOINTS = get_robot().joint_count  # the default build's: these benches measure links, not a robot

MT = MessageType.MOTION_FRAME


def _endpoint() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port()}"


def _send_plain(ep: str, n: int) -> None:
    ctx = zmq.Context()
    tx = FrameSender(lossless_socket(ctx, zmq.PUSH, ep, bind=True), MT, JOINTS)
    payload = sample_payload()
    for _ in range(n):
        tx.send(payload, capture_timestamp_us=1)
    tx.socket.close(linger=10_000)
    ctx.term()


def _send_reliable(ep: str, n: int, fsync: Fsync, state: str) -> None:
    ctx = zmq.Context()
    data, control = sender_sockets(ctx, ep)
    tx = ReliableSender(data, control, StageLog(Path(state), "out", LogConfig(fsync=fsync)), JOINTS)
    payload = sample_payload()
    for _ in range(n):  # one record per frame (the durable step), then what the window allows
        tx.commit(StageRecord(NO_EPOCH, -1, b"{}", [Output(MT, payload, 1)]))
        tx.pump()
    deadline = time.monotonic() + 60
    while tx.receiver.acked < n - 1 and time.monotonic() < deadline:
        tx.pump(5)
    tx.stage_log.close()
    ctx.destroy(linger=0)


def _rate(rx: Any, n: int) -> float:
    """Frames/s from the first frame received to the last (the sender's start-up excluded)."""
    got = 0
    start = 0.0
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        if rx.recv(100) is not None:
            got += 1
            if got == 1:
                start = time.perf_counter()
    if got < n:
        raise RuntimeError(f"only {got} of {n} frames arrived")
    return (n - 1) / (time.perf_counter() - start)


def _plain_link(n: int) -> float:
    ep = _endpoint()
    sender = multiprocessing.get_context("spawn").Process(target=_send_plain, args=(ep, n))
    sender.start()
    ctx = zmq.Context()
    rx = FrameReceiver(lossless_socket(ctx, zmq.PULL, ep, bind=False), MT, JOINTS)
    try:
        return _rate(rx, n)
    finally:
        sender.join(30)
        ctx.destroy(linger=0)


def _reliable_link(n: int, fsync: Fsync) -> float:
    """Sender and receiver in two processes, as the stages run."""
    ep = _endpoint()
    with tempfile.TemporaryDirectory(prefix="mocapline-bench-") as state:
        sender = multiprocessing.get_context("spawn").Process(target=_send_reliable, args=(ep, n, fsync, state))
        sender.start()
        ctx = zmq.Context()
        rdata, rcontrol = receiver_sockets(ctx, ep)
        rx = ReliableReceiver(rdata, rcontrol, MT, JOINTS)
        try:
            fps = _rate(rx, n)
            deadline = time.monotonic() + 30
            while sender.is_alive() and time.monotonic() < deadline:
                rx.recv(10)  # acknowledge the tail so the sender finishes
            return fps
        finally:
            sender.join(30)
            ctx.destroy(linger=0)


def link(n: int, rounds: int) -> dict[str, float]:
    """Best of ``rounds`` per variant, variants interleaved round by round."""
    best: dict[str, float] = {}
    variants: dict[str, Callable[[], float]] = {"plain": lambda: _plain_link(n)}
    for policy in ("never", "interval", "always"):
        variants[f"reliable_fsync_{policy}"] = functools.partial(_reliable_link, n, policy)
    for _ in range(rounds):
        for name, run in variants.items():
            best[name] = max(best.get(name, 0.0), run())
    return best


def pipeline(frames: int, flat_frames: int, modes: list[tuple[str, str | None]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, fsync in modes:
        with tempfile.TemporaryDirectory(prefix="mocapline-bench-") as state:
            config = local_config(viewer=True, input_fps=120.0, output_fps=120.0,
                                  state_dir=Path(state) if fsync else None, fsync=fsync or "interval")
            stack = Stack(config)
            try:
                stack.start()
                stack.wait_ready()
                emit_take(TakePlan(frames=120, first_index=0), [("127.0.0.1", config.main_port)], rate_hz=120.0)
                stack.drain()  # a warm-up take, not measured
                stack.reset()
                emit_take(TakePlan(frames=frames, first_index=0), [("127.0.0.1", config.main_port)], rate_hz=120.0)
                view = stack.drain()["viewer"]
                stack.reset()
                start = time.perf_counter()
                emit_take(TakePlan(frames=flat_frames, first_index=0), [("127.0.0.1", config.main_port)], rate_hz=0)
                flat = stack.drain()["viewer"]
                # drain waits 0.3 s of quiet at capture before it ends the take
                elapsed = time.perf_counter() - start - 0.3
                out[name] = {"p50_ms": view["latency_p50_ms"], "p99_ms": view["latency_p99_ms"],
                             "applied": view["viewer_applied"], "flat_out_fps": flat["viewer_applied"] / elapsed,
                             "flat_applied": flat["viewer_applied"]}
            finally:
                stack.stop()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mocapline bench durability", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--messages", type=int, default=5000, help="frames per link round")
    parser.add_argument("--rounds", type=int, default=3, help="link rounds (best is reported)")
    parser.add_argument("--frames", type=int, default=600, help="frames of the 120 Hz take")
    parser.add_argument("--flat-frames", type=int, default=1500, help="frames of the flat-out take")
    parser.add_argument("--no-pipeline", action="store_true", help="only the link benchmark")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    result: dict[str, Any] = {"link": link(args.messages, args.rounds)}
    if not args.no_pipeline:
        result["pipeline"] = pipeline(args.frames, args.flat_frames,
                                      [("plain", None), ("durable_never", "never"), ("durable_interval", "interval"),
                                       ("durable_always", "always")])
    if args.json:
        print(json.dumps(result))
        return 0
    base = result["link"]["plain"]
    print("one link, frames/s (best of rounds), and as a share of plain PUSH/PULL")
    for name, fps in result["link"].items():
        print(f"  {name:<24} {fps:>9.0f} /s   {fps / base:5.2f}x")
    if "pipeline" in result:
        p = result["pipeline"]
        print("whole pipeline, real processes: 120 Hz latency (UDP arrival -> applied) and flat-out frames/s")
        for name, r in p.items():
            print(f"  {name:<17} p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  "
                  f"flat out {r['flat_out_fps']:7.0f} /s ({r['flat_applied']} frames)   "
                  f"p99 {r['p99_ms'] / p['plain']['p99_ms']:4.2f}x  "
                  f"throughput {r['flat_out_fps'] / p['plain']['flat_out_fps']:4.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
