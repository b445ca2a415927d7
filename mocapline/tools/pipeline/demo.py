"""`mocapline demo`: the whole pipeline on an emitted take, then the final ledger and verdict.

Starts its own NATS, capture, retarget, streamer, viewer (applying, not rendering) and auditor on
free loopback ports (so it never collides with a running `mocapline up`), sends a synthetic Axis
take to the main and side paths (``--source xsens``: a synthetic Xsens MVN stream, with gloves,
props, names and scaling as asked, to capture's MVN port, as `mocapline emit --format mvn`
sends it), drains every stage in order and prints the ledger with the
ledger's field names (docs/ledger.md). Exit status 0 when the unique frames were conserved, 1 when
not (with one line saying why), 2 when the pipeline could not start, 130 when interrupted (Ctrl-C
stops emitting, drains what was sent and prints its ledger; a second Ctrl-C stops at once).

With ``--no-viewer`` nothing consumes the streamer's output: the streamer keeps every frame until
a consumer takes it (``streamer_pending``; durable: in its log until acknowledged), as it must. The verdict
then covers capture..streamer (every frame passed every stage and is held for a consumer, nothing
missing), says so in ``verdict_covers`` and in its ``state``, and the last line says the output
was not consumed; the demo does not invent a consumer to make the count come out.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from mocapline.core.counters import PipelineLedger
from mocapline.core.modes import Source, Transport
from mocapline.core.options import (
    EnvArgumentParser,
    choices,
    flags_given,
    non_negative_float,
    non_negative_int,
    parse_index_list,
    positive_float,
    positive_int,
)
from mocapline.core.verdict import conserved
from mocapline.formats.axis_bvh import AxisBvhConfig, add_axis_options
from mocapline.tools.emitter import mvn
from mocapline.tools.emitter.emitter import TakePlan, emit_take, parse_performer_skip, parse_version, split_size
from mocapline.tools.emitter.tcp_server import AxisTcpServer
from mocapline.tools.pipeline.console import print_ledger
from mocapline.tools.pipeline.interrupt import EXIT_INTERRUPTED, Phase, SignalGuard
from mocapline.tools.pipeline.stack import Stack, StackConfig, local_config, run_stack


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline demo", description=__doc__)
    p.add_argument("--source", choices=choices(Source), default="axis",
                   help="axis: Axis Studio BVH to the main and side paths; xsens: Xsens MVN (MXTP02/12/13) to "
                        "capture's MVN port, capture --source xsens (the Axis-only flags are refused: merge, TCP, "
                        "split, skeleton, version, garbage, side-path drops)")
    p.add_argument("--frames", type=positive_int, default=600, help="frames in the take")
    p.add_argument("--first-index", type=non_negative_int, default=0, help="posture_index of the first frame")
    p.add_argument("--rate", type=non_negative_float, default=60.0, help="emit rate in Hz; 0 = as fast as possible")
    p.add_argument("--duplicate-last", action="store_true", help="send the last frame twice (as Axis does)")
    p.add_argument("--drop-main", type=parse_index_list, default=[], help="indices missing on the main path only")
    p.add_argument("--drop-side", type=parse_index_list, default=[], help="indices missing on the side path only")
    p.add_argument("--drop-both", type=parse_index_list, default=[], help="indices missing on both paths")
    p.add_argument("--garbage", type=non_negative_int, default=0, help="non-BVH datagrams mixed into the main path")
    p.add_argument("--transport", choices=choices(Transport), default="udp",
                   help="main path over UDP, or over TCP from a server as Axis Studio runs one")
    p.add_argument("--performers", type=positive_int, default=1, help="avatars per frame (avatar_index 0..N-1)")
    p.add_argument("--drop-performer", type=parse_performer_skip, action="append", default=[],
                   metavar="AVATAR:INDICES", help="indices one performer misses on every path, e.g. 1:100-103")
    p.add_argument("--split", type=split_size, default=0, metavar="BYTES",
                   help="main UDP path: frames as parts of at most BYTES, as Axis Neuron sends them (1024)")
    p.add_argument("--lose-head", type=parse_index_list, default=[], help="--split: indices whose first part is lost")
    p.add_argument("--lose-tail", type=parse_index_list, default=[], help="--split: indices whose last part is lost")
    add_axis_options(p)  # the take is emitted, and capture told, with both
    p.add_argument("--version", type=parse_version, default=None, metavar="A.B.C.D",
                   help="the header's data version (Axis Studio 1.1.0.1, the default; Axis Neuron 1.1.0.0)")
    p.add_argument("--merge", action="store_true", help="capture merges main + side (recovers main-only losses)")
    p.add_argument("--input-fps", type=positive_float, default=None,
                   help="Axis rate for the interpolator (default --rate)")
    p.add_argument("--output-fps", type=positive_float, default=None, help="output stream rate (default = input)")
    p.add_argument("--no-viewer", action="store_true", help="run without the viewer stage")
    p.add_argument("--log-dir", default=None, help="keep the services' logs here")
    p.add_argument("--durable", action="store_true",
                   help="durable mode (journal, ACKs, resends) with its state in a temporary folder")
    p.add_argument("--retarget-workers", type=non_negative_int, default=0, metavar="N",
                   help="retarget as N workers sharing the performers (implies --durable; README: Scaling retarget)")
    p.add_argument("--json", action="store_true", help="print the final ledger as one JSON object")
    mvn.add_arguments(p)
    return p


# Flags an MVN take has no use for (one UDP path, no Axis framing), and the MVN ones an Axis take ignores.
AXIS_ONLY = ("merge", "transport", "split", "lose_head", "lose_tail", "skeleton", "rotation_order", "version",
             "garbage", "drop_main", "drop_side")


def foreign_flags(parser: EnvArgumentParser, args: Any) -> str | None:
    """One line naming the flags given that ``--source`` does not read, or None."""
    other = "axis" if args.source == "xsens" else "xsens"
    given = flags_given(parser, args, AXIS_ONLY if other == "axis" else mvn.MVN_ONLY)
    return f"{', '.join(given)}: for --source {other} only, not read by --source {args.source}" if given else None


def demo_config(args: Any) -> StackConfig:
    fps = args.input_fps or (args.rate if args.rate > 0 else 60.0)
    return local_config(
        source=args.source,
        merge=args.merge,
        skeleton=str(args.skeleton),
        rotation_order=args.rotation_order,
        transport=args.transport,
        viewer=not args.no_viewer,
        input_fps=fps,
        output_fps=args.output_fps or fps,
        log_dir=Path(args.log_dir) if args.log_dir else None,
    )


def take_plan(args: Any) -> TakePlan:
    last = args.first_index + args.frames - 1
    return TakePlan(
        frames=args.frames,
        first_index=args.first_index,
        duplicate={last} if args.duplicate_last else set(),
        skip_all=set(args.drop_both),
        skip_main=set(args.drop_main),
        skip_side=set(args.drop_side),
        garbage=args.garbage,
        performers=args.performers,
        skip_performer={avatar: set(indices) for avatar, indices in args.drop_performer},
        split_bytes=args.split,
        lose_head=set(args.lose_head),
        lose_tail=set(args.lose_tail),
        version=args.version,
    )


def why_not_conserved(ledger: dict[str, Any]) -> str:
    """One line: why the take was not conserved (the reason of the verdict's state)."""
    reason = str(ledger.get("state") or "not conserved")
    reason = reason.removeprefix("not conserved: ")
    by_path = ledger.get("missing_by_path") or {}
    lost = {k: sum(hi - lo + 1 for lo, hi in v) for k, v in by_path.items() if v}
    where = f" (missing by path: {', '.join(f'{k} {n}' for k, n in lost.items())})" if lost else ""
    return f"exit 1, frames not conserved: {reason}{where}"


def unconsumed_output(ledger: dict[str, Any]) -> dict[str, Any] | None:
    """The ledger judged through the streamer, for a run without a consumer of its output: the
    frames waiting in the streamer's log count as its output, not as pending inside the pipeline.
    None when a viewer ran or nothing waits there."""
    waiting = ledger.get("streamer_pending") or 0
    if ledger.get("viewer_applied") is not None or not waiting:
        return None
    counts = PipelineLedger.from_published(ledger)
    if not conserved(replace(counts, unconfirmed=(counts.unconfirmed or 0) + waiting,
                             robot_pending=max(0, counts.robot_pending - waiting))):
        return None
    return {**ledger, "unique_frames_conserved": 1,
            "state": f"conserved through the streamer; its output was not consumed ({waiting} frames wait in "
                     "the streamer for a consumer)",
            "verdict_covers": "capture..streamer (no consumer of the output: --no-viewer)"}


def run(stack: Stack, args: Any, guard: SignalGuard, server: AxisTcpServer | None) -> int:
    config = stack.config
    side = ("127.0.0.1", config.side_port)
    axis = AxisBvhConfig(skeleton=args.skeleton, rotation_order=args.rotation_order)
    if args.source == "xsens":
        take = mvn.MvnTake(performers=args.performers, gloves=args.gloves, props=args.props, names=args.names,
                           heights_m=args.height)
        mvn.emit_mvn(take_plan(args), take, [("127.0.0.1", config.main_port)], rate_hz=args.rate, stop=guard.stop)
    elif server is not None:  # capture connects to it, as to Axis Studio's server
        emit_take(take_plan(args), [side], rate_hz=args.rate, config=axis, tcp=server, stop=guard.stop)
    else:
        emit_take(take_plan(args), [("127.0.0.1", config.main_port), side], rate_hz=args.rate, config=axis,
                  stop=guard.stop)
    if guard.stop.is_set():  # Ctrl-C while emitting: the take so far is drained and judged
        print("mocapline demo: interrupted while emitting; draining the frames sent so far "
              "(Ctrl-C again stops at once)", file=sys.stderr, flush=True)
    guard.enter(Phase.DRAINING)
    ledger = stack.verdict(stack.drain())
    through_streamer = unconsumed_output(ledger) if args.no_viewer else None
    ledger = through_streamer or ledger
    if args.json:
        print(json.dumps(ledger))
    else:
        print_ledger(ledger)
    if guard.stop.is_set():
        return EXIT_INTERRUPTED
    if not ledger["unique_frames_conserved"]:
        guard.closing = why_not_conserved(ledger)  # the last line: why the exit status is 1
        return 1
    if through_streamer is not None:
        guard.closing = (f"output not consumed (--no-viewer): {ledger['streamer_pending']} frames wait in the "
                         "streamer; the verdict covers capture..streamer")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    foreign = foreign_flags(parser, args)
    if foreign:
        print(f"mocapline demo: {foreign}", file=sys.stderr)
        return 2
    durable = args.durable or args.retarget_workers > 0  # the workers' positions live in the logs
    state = tempfile.TemporaryDirectory(prefix="mocapline-demo-") if durable else None
    config = demo_config(args)
    config.state_dir = Path(state.name) if state is not None else None
    config.retarget_workers = args.retarget_workers
    stack = Stack(config)
    server = AxisTcpServer("127.0.0.1", config.axis_port) if args.transport == "tcp" else None
    try:
        return run_stack(stack, "mocapline demo", lambda guard: run(stack, args, guard, server), preflight_code=2)
    finally:
        if server is not None:
            server.close()
        if state is not None:
            state.cleanup()


if __name__ == "__main__":
    sys.exit(main())
