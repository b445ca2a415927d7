"""`mocapline demo`: the whole pipeline on an emitted take, then the final ledger and verdict.

Starts its own NATS, capture, retarget, streamer, viewer (applying, not rendering) and auditor on
free loopback ports (so it never collides with a running `mocapline up`), sends a synthetic Axis
take to the main and side paths, drains every stage in order and prints the ledger with the
ledger's field names (docs/ledger.md). Exit status 0 when the unique frames were conserved, 1 when not.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from mocapline.core.options import EnvArgumentParser, parse_index_list
from mocapline.tools.emitter.emitter import TakePlan, emit_take, parse_performer_skip
from mocapline.tools.emitter.tcp_server import AxisTcpServer
from mocapline.tools.pipeline.stack import (
    PreflightError,
    Stack,
    local_config,
    print_ledger,
)


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline demo", description=__doc__)
    p.add_argument("--frames", type=int, default=600, help="frames in the take")
    p.add_argument("--first-index", type=int, default=0, help="posture_index of the first frame")
    p.add_argument("--rate", type=float, default=60.0, help="emit rate in Hz; 0 = as fast as possible")
    p.add_argument("--duplicate-last", action="store_true", help="send the last frame twice (as Axis does)")
    p.add_argument("--drop-main", type=parse_index_list, default=[], help="indices missing on the main path only")
    p.add_argument("--drop-side", type=parse_index_list, default=[], help="indices missing on the side path only")
    p.add_argument("--drop-both", type=parse_index_list, default=[], help="indices missing on both paths")
    p.add_argument("--garbage", type=int, default=0, help="non-BVH datagrams mixed into the main path")
    p.add_argument("--transport", choices=("udp", "tcp"), default="udp",
                   help="main path over UDP, or over TCP from a server as Axis Studio runs one")
    p.add_argument("--performers", type=int, default=1, help="avatars per frame (avatar_index 0..N-1)")
    p.add_argument("--drop-performer", type=parse_performer_skip, action="append", default=[],
                   metavar="AVATAR:INDICES", help="indices one performer misses on every path, e.g. 1:100-103")
    p.add_argument("--merge", action="store_true", help="capture merges main + side (recovers main-only losses)")
    p.add_argument("--input-fps", type=float, default=None, help="Axis rate for the interpolator (default --rate)")
    p.add_argument("--output-fps", type=float, default=None, help="output stream rate (default = input)")
    p.add_argument("--no-viewer", action="store_true", help="run without the viewer stage")
    p.add_argument("--log-dir", default=None, help="keep the services' logs here")
    p.add_argument("--durable", action="store_true",
                   help="durable mode (journal, ACKs, resends) with its state in a temporary folder")
    p.add_argument("--json", action="store_true", help="print the final ledger as one JSON object")
    return p


def run_demo(args: Any) -> dict[str, Any]:
    from pathlib import Path

    fps = args.input_fps or (args.rate if args.rate > 0 else 60.0)
    config = local_config(
        merge=args.merge,
        transport=args.transport,
        viewer=not args.no_viewer,
        input_fps=fps,
        output_fps=args.output_fps or fps,
        log_dir=Path(args.log_dir) if args.log_dir else None,
    )
    import tempfile

    state = tempfile.TemporaryDirectory(prefix="mocapline-demo-") if args.durable else None
    config.state_dir = Path(state.name) if state is not None else None
    stack = Stack(config)
    server = AxisTcpServer("127.0.0.1", config.axis_port) if args.transport == "tcp" else None
    try:
        stack.start()
        stack.wait_ready()
        last = args.first_index + args.frames - 1
        plan = TakePlan(
            frames=args.frames,
            first_index=args.first_index,
            duplicate={last} if args.duplicate_last else set(),
            skip_all=set(args.drop_both),
            skip_main=set(args.drop_main),
            skip_side=set(args.drop_side),
            garbage=args.garbage,
            performers=args.performers,
            skip_performer={avatar: set(indices) for avatar, indices in args.drop_performer},
        )
        side = ("127.0.0.1", config.side_port)
        if server is not None:
            emit_take(plan, [side], rate_hz=args.rate, tcp=server)
        else:
            emit_take(plan, [("127.0.0.1", config.main_port), side], rate_hz=args.rate)
        finals = stack.drain()
        return stack.verdict(finals)
    finally:
        stack.stop()
        if server is not None:
            server.close()
        if state is not None:
            state.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        ledger = run_demo(args)
    except PreflightError as exc:
        print(f"mocapline demo: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(ledger))
    else:
        print_ledger(ledger)
    return 0 if ledger["unique_frames_conserved"] else 1


if __name__ == "__main__":
    sys.exit(main())
