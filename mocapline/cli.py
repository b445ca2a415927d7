"""The `mocapline` command: one subcommand per service and tool.

Subcommands are imported lazily so that `mocapline emit` does not load MuJoCo.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module, one-line summary). Each module has `main(argv: list[str] | None) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "capture": ("services.capture.service", "receive Axis BVH / Xsens UDP, ledger, FK, push HumanFrames"),
    "retarget": ("services.retarget.service", "IK onto the Unitree G1: HumanFrames in, RobotFrames out"),
    "streamer": ("services.streamer.service", "resample, MocapFrame + header, lossless PUSH on tcp 5555"),
    "viewer": ("services.viewer.service", "validate and apply MocapFrames to the G1 in MuJoCo"),
    "auditor": ("services.auditor.service", "side-path audit and the conservation verdict"),
    "emit": ("services.emitter.emitter", "synthetic Axis Studio binary BVH emitter / recording replayer"),
    "inspect": ("services.capture.inspect", "decode a recording or pcap as capture would, JSON lines"),
    "up": ("services.pipeline.up", "start the whole pipeline (NATS too), live counts, Ctrl-C drains and stops"),
    "demo": ("services.pipeline.demo", "run the pipeline on an emitted take and print the final ledger"),
    "status": ("services.pipeline.status", "ask a running pipeline for its ledger and verdict"),
    "bench": ("bench.cli", "benchmarks: capture, retarget, e2e"),
    "keys": ("mocapline.keys", "CURVE keypairs for the streamer's output link (server + clients)"),
}


def _usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = ["usage: mocapline <command> [options]   (mocapline <command> --help for its options)", ""]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"mocapline: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
