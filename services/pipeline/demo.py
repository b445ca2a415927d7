"""`mocapline demo`: run the pipeline on an emitted take, drain it, print the final ledger.

Stage 1 of the pipeline (this build): the emitter sends a synthetic Axis take to capture's main and
side UDP ports; capture parses, merges, runs FK and pushes HumanFrames; the demo consumes them and
checks they arrive once each and in order. The live ledger streams to stderr while it runs.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from typing import Any

import zmq

from mocapline.frames import HumanFrame
from mocapline.header import MessageType
from mocapline.options import EnvArgumentParser, parse_index_list
from mocapline.skeleton import GMR_BODIES
from mocapline.transport import FrameReceiver, lossless_socket
from services.emitter.emitter import TakePlan, emit_take
from services.pipeline.procs import Service, free_tcp_port, port_free


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline demo", description=__doc__)
    p.add_argument("--frames", type=int, default=600, help="frames in the take")
    p.add_argument("--first-index", type=int, default=0, help="posture_index of the first frame")
    p.add_argument("--rate", type=float, default=60.0, help="emit rate in Hz; 0 = as fast as possible")
    p.add_argument("--duplicate-last", action="store_true", help="send the last frame twice (as Axis does)")
    p.add_argument("--drop-main", type=parse_index_list, default=[], help="indices missing on the main path only")
    p.add_argument("--drop-both", type=parse_index_list, default=[], help="indices missing on both paths")
    p.add_argument("--drop-side", type=parse_index_list, default=[], help="indices missing on the side path only")
    p.add_argument("--garbage", type=int, default=0, help="non-BVH datagrams mixed into the main path")
    p.add_argument("--main-port", type=int, default=7014, help="capture's main UDP port")
    p.add_argument("--side-port", type=int, default=7015, help="capture's side UDP port")
    p.add_argument("--json", action="store_true", help="print the final ledger as one JSON object")
    return p


class FrameCounter(threading.Thread):
    """Consumes HumanFrames and checks order (stands in for the next stage)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(daemon=True)
        self.ctx = zmq.Context()
        self.rx = FrameReceiver(
            lossless_socket(self.ctx, zmq.PULL, endpoint, bind=False), MessageType.HUMAN_FRAME, len(GMR_BODIES)
        )
        self.frames = 0
        self.out_of_order = 0
        self.last: int | None = None
        self.ended = threading.Event()

    def run(self) -> None:
        while not self.ended.is_set():
            msg = self.rx.recv(timeout_ms=200)
            if msg is None:
                continue
            if msg.header.message_type is MessageType.END_OF_STREAM:
                self.ended.set()
                break
            frame = HumanFrame.from_bytes(msg.payload)
            if self.last is not None and frame.posture_index <= self.last and frame.segment == 0:
                self.out_of_order += 1
            self.last = frame.posture_index
            self.frames += 1
        self.rx.socket.close(linger=0)
        self.ctx.term()


def run_demo(args: Any) -> dict[str, Any]:
    for port in (args.main_port, args.side_port):
        if not port_free(port, kind=socket.SOCK_DGRAM):
            raise SystemExit(f"mocapline demo: UDP port {port} is in use (another capture running?); "
                             f"choose others with --main-port/--side-port")
    out_port = free_tcp_port()
    endpoint = f"tcp://127.0.0.1:{out_port}"
    capture = Service(
        "capture",
        ["--ports", str(args.main_port), str(args.side_port), "--host", "127.0.0.1",
         "--output", endpoint, "--exit-on-idle", "1.0"],
    )
    capture.start(stdout=subprocess.PIPE, stderr=None)
    counter = FrameCounter(endpoint)
    counter.start()
    ready = wait_udp_bound(args.main_port)
    if not ready:
        capture.stop()
        raise SystemExit("mocapline demo: capture did not start (see its messages above)")
    last = args.first_index + args.frames - 1
    plan = TakePlan(
        frames=args.frames,
        first_index=args.first_index,
        duplicate={last} if args.duplicate_last else set(),
        skip_all=set(args.drop_both),
        skip_main=set(args.drop_main),
        skip_side=set(args.drop_side),
        garbage=args.garbage,
    )
    emit_take(plan, [("127.0.0.1", args.main_port), ("127.0.0.1", args.side_port)], rate_hz=args.rate)
    assert capture.proc is not None and capture.proc.stdout is not None
    out, _ = capture.proc.communicate(timeout=120)
    counter.ended.wait(30)
    ledger: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    ledger["human_frames_received"] = counter.frames
    ledger["human_frames_out_of_order"] = counter.out_of_order
    ledger["unique_frames_conserved"] = int(
        ledger["source_unique_frames"] == counter.frames
        and counter.out_of_order == 0
        and ledger["input_pending"] == 0
        and ledger["source_missing_indices"] == 0
        and ledger["source_backward_indices"] == 0
    )
    return ledger


def wait_udp_bound(port: int, timeout: float = 20.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_free(port, kind=socket.SOCK_DGRAM):
            return True
        time.sleep(0.05)
    return False


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    ledger = run_demo(args)
    if args.json:
        print(json.dumps(ledger))
    else:
        width = max(len(k) for k in ledger)
        for key, value in ledger.items():
            if key in ("paths", "missing_ranges", "rcvbuf_granted", "rejected_by_reason"):
                value = json.dumps(value)
            print(f"{key:<{width}}  {value}")
    return 0 if ledger["unique_frames_conserved"] else 1


if __name__ == "__main__":
    sys.exit(main())
