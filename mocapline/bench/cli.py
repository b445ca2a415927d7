"""``mocapline bench <name>``: one benchmark a module, each printing ratios measured side by side.

Each benchmark is a module with ``main(argv) -> int``, imported only when asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mocapline.core.subcommands import dispatch

BENCHMARKS: dict[str, tuple[str, str]] = {
    "capture": ("mocapline.bench.capture", "parse + forward kinematics frames/s vs a bare struct.unpack"),
    "retarget": ("mocapline.bench.retarget", "IK onto the robot (--robot-model) against the GMR baseline"),
    "e2e": ("mocapline.bench.e2e", "end-to-end through every service"),
    "tracing": ("mocapline.bench.tracing", "per-frame cost of a trace per posture_index, traced vs untraced"),
    "durability": ("mocapline.bench.durability", "crash safety's cost: reliable links and logs vs plain"),
    "viewer": ("mocapline.bench.viewer", "the viewer's CPU and RSS at 120 Hz, with no page and with one open"),
    "scale": ("mocapline.bench.scale", "retarget as 1, 2, 3 workers on 6 performers at 120 Hz: frames/s, p99"),
    "robot": ("mocapline.bench.robot", "the robot bridge driving the sim: rate, latency, tracking"),
    "cost": ("mocapline.bench.cost", "CPU per frame of each process beside its stage's kernel, overhead, profile"),
    "metrics": ("mocapline.bench.metrics", "per-frame cost of the Prometheus metrics vs prometheus-client's own"),
    "load": ("mocapline.bench.load", "up --demo beside a load (suite, busy, fsync, starved viewer...): conserved?"),
    "dataset": ("mocapline.bench.dataset", "retarget-dataset frames/s: 1, 2, all workers, Ray beside the pool, vs GMR"),
    "lowcmd": ("mocapline.bench.lowcmd", "one LowCmd onto DDS and one LowState off it, ours vs cyclonedds' serializer"),
}


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch("mocapline bench", BENCHMARKS, None if argv is None else list(argv))


if __name__ == "__main__":
    sys.exit(main())
