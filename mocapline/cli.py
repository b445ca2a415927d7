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
    "relay": ("services.emitter.relay", "forward UDP and drop a share of it (packet loss on one path, for tests)"),
    "inspect": ("services.capture.inspect", "decode a recording or pcap as capture would, JSON lines"),
    "up": ("services.pipeline.up", "start the whole pipeline (NATS too), live counts, Ctrl-C drains and stops"),
    "demo": ("services.pipeline.demo", "run the pipeline on an emitted take and print the final ledger"),
    "status": ("services.pipeline.status", "ask a running pipeline for its ledger and verdict"),
    "bench": ("bench.cli", "benchmarks: capture, retarget, e2e"),
    "export": ("services.recorder.export", "a take as a 50 Hz G1 reference clip (.npz + .csv, seed 002's contract)"),
    "replay": ("services.recorder.replay", "a recorded take through the pipeline logic, offline and deterministic"),
    "record": ("services.recorder.record", "run the pipeline and record a take: datagrams, MocapFrames, config, ledger"),
    "plot": ("services.recorder.plot", "PNG plots of a take: joint angles vs limits, latency, posture_index gaps"),
    "keys": ("mocapline.keys", "CURVE keypairs for the streamer's output link (server + clients)"),
}


def dispatch(prog: str, commands: dict[str, tuple[str, str]], argv: list[str] | None) -> int:
    """Run ``<prog> <name> [options]``: import the named module and call its ``main``."""
    args = sys.argv[1:] if argv is None else list(argv)
    width = max(len(n) for n in commands)
    usage = "\n".join(
        [f"usage: {prog} <command> [options]   ({prog} <command> --help for its options)", ""]
        + [f"  {name:<{width}}  {summary}" for name, (_, summary) in commands.items()]
    )
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage)
        return 0
    name, rest = args[0], args[1:]
    if name not in commands:
        print(f"{prog}: unknown command {name!r}\n\n{usage}", file=sys.stderr)
        return 2
    module = importlib.import_module(commands[name][0])
    return int(module.main(rest) or 0)


def main(argv: list[str] | None = None) -> int:
    return dispatch("mocapline", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
