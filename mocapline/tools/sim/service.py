"""`mocapline sim`: a simulated G1 on Unitree's low-level DDS interface (LowCmd in on rt/lowcmd,
LowState out on rt/lowstate), the physics of ``physics.py``.

``--clock realtime`` (default) steps the physics every 2 ms of wall time with the newest valid
LowCmd, as a robot does. ``--clock lockstep`` steps once per LowCmd received (every command,
none skipped; the initial state is published until the first arrives): the run is then a
function of the command sequence alone, which the tests use.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from mocapline.core.lifecycle import add_service_arguments, setup_logging, stop_on_signals
from mocapline.core.options import EnvArgumentParser, non_negative_int, positive_float

log = logging.getLogger("mocapline.sim")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline sim", description=__doc__)
    p.add_argument("--domain", type=non_negative_int, default=1,
                   help="DDS domain id (Unitree's simulator uses 1, a real G1 0)")
    p.add_argument("--interface", default="",
                   help="network interface for DDS: lo = loopback only; empty = Cyclone's choice")
    p.add_argument("--base", choices=("band", "fixed", "free"), default="band",
                   help="band: pelvis on a spring 3 m up (k 200, d 100); fixed: pelvis welded 1 m up; "
                        "free: on the floor")
    p.add_argument("--clock", choices=("realtime", "lockstep"), default="realtime",
                   help="realtime: a step every 2 ms with the newest command; lockstep: a step per command")
    p.add_argument("--mode-machine", type=non_negative_int, default=5,
                   help="the robot type reported in LowState (the bridge copies it into LowCmd)")
    p.add_argument("--duration", type=positive_float, default=None, help="stop after this many seconds")
    add_service_arguments(p, nats_help="NATS server for its heartbeat and status (empty: none)")
    return p


@dataclass
class SimCounters:
    steps: int = 0
    commands_received: int = 0
    commands_applied: int = 0
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    states_published: int = 0
    overruns: int = 0  # realtime: steps that started more than a period late

    def reject(self, reason: str) -> None:
        self.rejected_by_reason[reason] = self.rejected_by_reason.get(reason, 0) + 1


def run(args: Any) -> dict[str, Any]:
    from mocapline.robot.unitree.dds import DdsSettings, LowLevel
    from mocapline.robot.unitree.lowlevel import LOW_CMD, LOW_STATE, LayoutError
    from mocapline.tools.sim.physics import G1Physics

    stop = stop_on_signals()
    sim = G1Physics(args.base, mode_machine=args.mode_machine)
    period = sim.model.opt.timestep
    lockstep = args.clock == "lockstep"
    dds = LowLevel(DdsSettings(args.domain, args.interface), depth=1024 if lockstep else 1)
    commands, states = dds.command_reader(), dds.state_writer()
    counters = SimCounters()

    def take_commands(limit: int) -> int:
        taken = 0
        for sample in commands.take(limit):
            taken += 1
            counters.commands_received += 1
            try:
                cmd = LOW_CMD.from_sample(sample)
            except LayoutError as exc:
                counters.reject(exc.reason)
                continue
            if sim.apply(cmd):
                counters.commands_applied += 1
            else:
                counters.reject("crc_or_non_finite")
            if lockstep:
                step_and_publish()
        return taken

    def step_and_publish() -> None:
        sim.step()
        counters.steps += 1
        states.write(LOW_STATE.sample(sim.state()))
        counters.states_published += 1

    bus = None
    if args.nats:
        from mocapline.core.bus import Bus

        bus = Bus(args.nats, "sim", lambda: {**asdict(counters), "pelvis_height": round(sim.pelvis_height, 4)}).start()
    from mocapline.core.udp import raise_priority

    log.info("G1 (%s base) on DDS domain %d, %s clock; scheduling priority %s", args.base, args.domain, args.clock,
             raise_priority())  # it stands in for the robot's real-time firmware
    started = time.monotonic()
    deadline = started + args.duration if args.duration else float("inf")
    next_tick = started
    while not stop.is_set() and time.monotonic() < deadline:
        if bus is not None and counters.states_published % 25 == 0:
            answer_requests(bus, counters, stop)
        if lockstep:
            if counters.commands_received == 0:
                states.write(LOW_STATE.sample(sim.state()))  # the initial pose, until someone commands
                counters.states_published += 1
            if commands.wait(0.01 if counters.commands_received else 0.05):
                take_commands(1024)
            continue
        take_commands(64)
        step_and_publish()
        next_tick += period
        now = time.monotonic()
        if now - next_tick > period:
            counters.overruns += 1
            next_tick = now  # no burst of steps to catch up: a robot does not replay lost time
        else:
            time.sleep(max(0.0, next_tick - now))
    dds.close()
    if bus is not None:
        bus.stop()
    return {**asdict(counters), "pelvis_height": round(sim.pelvis_height, 4)}


def answer_requests(bus: Any, counters: SimCounters, stop: Any) -> None:
    """status (and the pipeline's drain and reset) answered with the counts; shutdown stops."""
    for req in bus.poll_requests():
        if req.cmd == "shutdown":
            stop.set()
        req.answer(asdict(counters))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        import cyclonedds  # noqa: F401
    except ImportError:
        print("mocapline sim: needs Cyclone DDS 0.10 (pip install -e '.[robot]', see README: The robot end)",
              file=sys.stderr)
        return 2
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
