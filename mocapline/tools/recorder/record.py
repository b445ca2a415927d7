"""`mocapline record --dir TAKE`: run the pipeline (as `mocapline up` does) and record one take.

The take folder holds:

    raw.mlrec     every datagram capture received, byte for byte (capture --record; the .mlrec
                  format of mocapline/formats/mlrec.py)
    frames.mlmf   every MocapFrame the streamer sent, as sent (streamer --record-frames; the .mlmf
                  format of mocapline/formats/mlmf.py)
    config.json   the exact configuration: IK config (path, sha256 and full JSON content), human
                  height, input / output fps, source, rotation order, robot model source, ports
    ledger.json   the take's final ledger and verdict (each stage's drain answer + the audit)
    logs/         the services' logs

The recording starts when the pipeline is up and ends on Ctrl-C, after ``--seconds``, once capture
has ``--frames`` unique frames, or (with ``--replay FILE.mlrec``) when that recording has been sent
through the pipeline; then the take is drained stage by stage and everything stopped. Point Axis
Studio at the main port as for `mocapline up` (same options).

Afterwards: ``mocapline replay TAKE`` re-runs the take offline and checks it against frames.mlmf;
``mocapline export TAKE`` writes the 50 Hz reference clip.

Without this tool, the same recording comes from ``mocapline capture --record TAKE/raw.mlrec`` and
``mocapline streamer --record-frames TAKE/frames.mlmf`` (env MOCAPLINE_RECORD /
MOCAPLINE_RECORD_FRAMES), with the configuration written down by hand.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from mocapline.core.counters import CaptureCounts, decode
from mocapline.core.modes import Display
from mocapline.core.options import EnvArgumentParser, choices, non_negative_float, non_negative_int, port_number


def build_parser() -> EnvArgumentParser:
    from mocapline.tools.pipeline.up import add_stack_options

    p = EnvArgumentParser(prog="mocapline record", description=__doc__)
    p.add_argument("--dir", type=Path, required=True, help="the take folder to create")
    add_stack_options(p)
    p.add_argument("--seconds", type=non_negative_float, default=0.0, help="stop after this long (0 = until Ctrl-C)")
    p.add_argument("--frames", type=non_negative_int, default=0,
                   help="stop once capture has this many unique frames (0 = off)")
    p.add_argument("--replay", type=Path, default=None, help="feed this .mlrec through the pipeline, then stop")
    p.add_argument("--replay-speed", type=non_negative_float, default=1.0,
                   help="with --replay: 1 = original timing, 0 = asap")
    p.add_argument("--no-viewer", action="store_true",
                   help="leave the streamer's port to an external consumer (lossless: without one, nothing is sent)")
    p.add_argument("--display", choices=choices(Display), default="none", help="viewer display")
    p.add_argument("--web-port", type=port_number, default=8080, help="port of the web viewer")
    p.add_argument("--force", action="store_true", help="overwrite an existing take in --dir")
    return p


def take_description(args: Any, config: Any) -> dict[str, Any]:
    from mocapline.services.retarget.config import DEFAULT_CONFIG
    from mocapline.tools.recorder.take import TakeConfig

    shipped = "xsens" if config.source == "xsens" else DEFAULT_CONFIG
    ik = str(config.ik_config) if config.ik_config is not None else shipped
    take = TakeConfig(robot_model=config.robot_model, ik_config=ik, human_height=config.human_height,
                      input_fps=config.input_fps,
                      output_fps=config.output_fps, source=config.source, rotation_order=config.rotation_order,
                      skeleton=config.skeleton)
    return {
        **take.describe(),
        "stack": {"main_port": config.main_port, "side_port": config.side_port, "merge": config.merge,
                  "output_port": config.output_port, "nats_url": config.nats_url},
        "retarget_defaults": "iterations, lm_damping, filter, backend: the retarget service's defaults",
        "recorded_at_unix_s": time.time(),
        "generator": "mocapline record",
    }


def main(argv: list[str] | None = None) -> int:
    from mocapline.formats.mlmf import read_frame_file
    from mocapline.formats.mlrec import read_recording
    from mocapline.tools.pipeline.procs import free_tcp_port
    from mocapline.tools.pipeline.stack import Stack, run_stack
    from mocapline.tools.pipeline.up import stack_config

    args = build_parser().parse_args(argv)
    take: Path = args.dir
    raw, frames = take / "raw.mlrec", take / "frames.mlmf"
    if (raw.exists() or frames.exists()) and not args.force:
        print(f"mocapline record: {take} already holds a take (--force to overwrite)", file=sys.stderr)
        return 2
    if args.replay is not None and not args.replay.is_file():
        print(f"mocapline record: {args.replay}: no such recording", file=sys.stderr)
        return 2
    take.mkdir(parents=True, exist_ok=True)
    if args.log_dir is None:
        args.log_dir = take / "logs"
    # the internal links (capture -> retarget -> streamer) on free ports: nothing outside uses them
    config = stack_config(args, viewer=not args.no_viewer, display=args.display, web_port=args.web_port,
                          human_port=free_tcp_port(), robot_port=free_tcp_port(),
                          extra_env={"MOCAPLINE_RECORD": str(raw.resolve()),
                                     "MOCAPLINE_RECORD_FRAMES": str(frames.resolve())})
    try:
        description = take_description(args, config)
    except (ValueError, OSError) as exc:
        print(f"mocapline record: {exc}", file=sys.stderr)
        return 2
    (take / "config.json").write_text(json.dumps(description, indent=2, sort_keys=True) + "\n")
    stack = Stack(config)
    code = run_stack(stack, "mocapline record", lambda guard: record(stack, args, guard))
    summary: dict[str, Any] = {"take": str(take)}
    if raw.exists():
        summary["datagrams"] = len(read_recording(raw).datagrams)
    if frames.exists():
        summary["mocap_frames"] = len(read_frame_file(frames).payloads)
    print(json.dumps(summary))
    return code


def record(stack: Any, args: Any, guard: Any) -> int:
    """The take: until Ctrl-C, --seconds, --frames or the end of --replay; then drain and ledger.json."""
    from mocapline.tools.pipeline.interrupt import Interrupted, Phase

    config, take = stack.config, args.dir
    print(f"mocapline record: recording into {take}; Axis Studio -> udp {config.main_port}; Ctrl-C ends the take",
          file=sys.stderr, flush=True)
    stop = guard.stop
    sender = None
    if args.replay is not None:
        from mocapline.tools.emitter.emitter import replay

        def feed() -> None:
            replay(args.replay, [("127.0.0.1", config.main_port), ("127.0.0.1", config.side_port)],
                   args.replay_speed)
            stop.set()

        sender = threading.Thread(target=feed, daemon=True)
        sender.start()
    t0 = time.monotonic()
    while not stop.wait(0.2):
        if args.seconds and time.monotonic() - t0 >= args.seconds:
            break
        if args.frames:
            try:
                capture = decode(CaptureCounts, stack.ask("capture", "status", timeout=2.0))
                if capture.source_unique_frames >= args.frames:
                    break
            except Exception:  # noqa: BLE001 - ask again on the next tick
                pass
    guard.enter(Phase.DRAINING)
    print("mocapline record: draining (Ctrl-C again stops at once)...", file=sys.stderr, flush=True)
    try:
        if sender is not None:
            sender.join(timeout=5)
        time.sleep(0.3)  # the last datagrams reach capture
        finals = stack.drain()
        ledger = {"verdict": stack.verdict(finals), "stages": finals}
        (take / "ledger.json").write_text(json.dumps(ledger, indent=2, sort_keys=True, default=str) + "\n")
    except Interrupted:
        raise
    except Exception as exc:  # noqa: BLE001 - still stop everything and keep what was recorded
        print(f"mocapline record: drain failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
