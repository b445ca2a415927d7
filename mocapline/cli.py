"""The `mocapline` command: one subcommand per service and tool.

Subcommands are imported lazily so that `mocapline emit` does not load MuJoCo.
"""

from __future__ import annotations

import sys

from mocapline.bench.cli import BENCHMARKS
from mocapline.core.subcommands import dispatch

# name -> (module, one-line summary). Each module has `main(argv: list[str] | None) -> int`.
COMMANDS: dict[str, tuple[str, str]] = {
    "capture": ("mocapline.services.capture.service", "receive Axis BVH / Xsens UDP, ledger, FK, push HumanFrames"),
    "retarget": ("mocapline.services.retarget.main", "IK onto the robot: HumanFrames in, RobotFrames out"),
    "streamer": ("mocapline.services.streamer.main",
                 "resample, MocapFrame + header; the robot port on tcp 5555: an acknowledged fan-out to named "
                 "consumers"),
    "viewer": ("mocapline.services.viewer.service", "validate and apply MocapFrames to the robot in MuJoCo"),
    "auditor": ("mocapline.services.auditor.service", "side-path audit and the conservation verdict"),
    "robot": ("mocapline.services.robot.service", "drive a Unitree robot over DDS (LowCmd) from the stream, safely"),
    "sim": ("mocapline.tools.sim.service", "a robot in MuJoCo physics behind Unitree's low-level DDS interface"),
    "estop": ("mocapline.tools.estop", "e-stop the robot bridge over NATS (damping, then it exits)"),
    "tap": ("mocapline.tools.tap", "a consumer of the robot port: print or record every frame once (resumes)"),
    "port-check": ("mocapline.tools.portcheck.cli",
                   "the robot port's conformance kit: check a consumer (--consumer CMD) or a port (--port)"),
    "supervise-capture": ("mocapline.tools.pipeline.supervise",
                          "capture under a supervisor that holds its UDP sockets and restarts it (compose)"),
    "emit": ("mocapline.tools.emitter.emitter", "synthetic Axis Studio binary BVH emitter / recording replayer"),
    "relay": ("mocapline.tools.emitter.relay", "forward UDP and drop a share of it (loss on one path)"),
    "inspect": ("mocapline.tools.inspect", "decode a recording or pcap as capture would, JSON lines"),
    "up": ("mocapline.tools.pipeline.up", "start the whole pipeline (NATS too), live counts, Ctrl-C drains and stops"),
    "demo": ("mocapline.tools.pipeline.demo", "run the pipeline on an emitted take and print the final ledger"),
    "status": ("mocapline.tools.pipeline.status", "ask a running pipeline for its ledger and verdict"),
    "bench": ("mocapline.bench.cli", "benchmarks: " + ", ".join(BENCHMARKS)),
    "retarget-file": ("mocapline.tools.retarget_file", "a BVH take (Axis, CMU, Mixamo) as a robot reference clip"),
    "retarget-dataset": ("mocapline.tools.dataset.cli",
                         "folders of takes as a robot motion dataset (npz, GMR pickle, BeyondMimic csv), resumable, "
                         "on a process pool or Ray"),
    "skeleton-config": ("mocapline.tools.skeleton_config",
                        "a starting IK config for a BVH skeleton no shipped config knows (bones mapped by name)"),
    "export": ("mocapline.tools.recorder.export", "a take as a 50 Hz robot reference clip (.npz + .csv)"),
    "replay": ("mocapline.tools.recorder.replay", "a recorded take through the pipeline, offline, deterministic"),
    "record": ("mocapline.tools.recorder.record", "record a live take: datagrams, MocapFrames, config, ledger"),
    "plot": ("mocapline.tools.recorder.plot", "PNG plots of a take: joints vs limits, latency, gaps"),
    "keys": ("mocapline.core.keys", "CURVE keypairs for the streamer's output link (server + clients)"),
    "ik-config": ("mocapline.tools.ik_config", "write a robot build's IK configs from another build's (its template)"),
}


def main(argv: list[str] | None = None) -> int:
    try:
        return dispatch("mocapline", COMMANDS, argv)
    except KeyboardInterrupt:
        # Ctrl-C before a command installed its own handling (while Python imports it, say):
        # nothing was started yet, so there is nothing to stop; no traceback.
        print("mocapline: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
