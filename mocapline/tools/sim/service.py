"""`mocapline sim`: a simulated robot (``--robot-model``) on Unitree's low-level DDS interface
(LowCmd in on rt/lowcmd, LowState out on rt/lowstate, in the build's message family), the physics
of ``physics.py``.

``--clock realtime`` (default) steps the physics every 2 ms of wall time with the newest valid
LowCmd, as a robot does. ``--clock lockstep`` steps once per LowCmd received (every command,
none skipped; while no command comes the state is published unstepped every 50 ms): the run is
then a function of the command sequence alone, which the tests use.

Its counts say what became of every LowCmd in the bridge's terms: ``commands_received`` (taken
off DDS: the reader keeps up to ``READER_DEPTH`` between two steps, so none is dropped there) =
``commands_applied`` (a physics step ran with it) + ``commands_superseded`` (valid, but a newer one
came in before the next step: the realtime clock steps with the newest alone, and the bridge's
500 Hz and the sim's 2 ms steps beat against each other) + the rejected (``rejected_by_reason``).
The bridge's ``commands_sent`` less ``commands_received`` were never delivered (sent before the
sim's reader was matched, or lost by DDS): :func:`command_balance` says so in a line.

Beside LowState it publishes the base's pose on mocapline's own topic (``mocapline/sim/base_state``,
:mod:`mocapline.robot.unitree.base`) for the web page and the benches. With ``--vendor-controller
stand`` a stand-in for the robot's own controller holds the stand pose until the first LowCmd,
and takes the vendor's arm interface (rt/arm_sdk) blended in by its weight, as the robot does.
A build with hands (``g1_dex3``) also takes each hand's HandCmd_ (``rt/dex3/{left,right}/cmd``, the
newest valid one before each step) and publishes its HandState_ (``rt/dex3/{left,right}/state``) with
every 5th LowState (100 Hz); ``hand_commands_received`` / ``_applied`` / ``hand_states_published``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from mocapline.core.lifecycle import add_service_arguments, setup_logging, stop_on_signals
from mocapline.core.options import (
    EnvArgumentParser,
    argv,
    declared_defaults,
    non_negative_int,
    positive_float,
    settings_from,
)
from mocapline.robot.registry import add_robot_model_argument

log = logging.getLogger("mocapline.sim")
MAX_CATCHUP_STEPS = 10
READER_DEPTH = 64  # realtime: LowCmds kept between two steps (at 500 Hz, 1-2 come in a 2 ms step)
LOCKSTEP_IDLE_S = 0.05
HAND_STATE_EVERY = 5  # HandState_ with every 5th LowState: 100 Hz, the hands' command rate


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline sim", description=__doc__)
    add_robot_model_argument(p)
    p.add_argument("--domain", type=non_negative_int, default=1,
                   help="DDS domain id (Unitree's simulator uses 1, a real robot 0)")
    p.add_argument("--interface", default="",
                   help="network interface for DDS: lo = loopback only; empty = Cyclone's choice")
    p.add_argument("--base", choices=("band", "fixed", "free"), default="band",
                   help="band: pelvis on a spring (k 200, d 100; the G1's tied 3 m up); fixed: pelvis welded 1 m "
                        "up; free: on the floor")
    p.add_argument("--clock", choices=("realtime", "lockstep"), default="realtime",
                   help="realtime: a step every 2 ms with the newest command; lockstep: a step per command")
    p.add_argument("--vendor-controller", choices=("none", "stand"), default="none",
                   help="stand: a stand-in for the robot's own controller holds the stand pose (PD) until the first "
                        "LowCmd and blends rt/arm_sdk in by its weight; none: limp until the first LowCmd")
    p.add_argument("--mode-machine", type=non_negative_int, default=5,
                   help="the robot type reported in LowState (the bridge copies it into LowCmd; unitree_hg only)")
    p.add_argument("--duration", type=positive_float, default=None, help="stop after this many seconds")
    add_service_arguments(p, nats_help="NATS server for its heartbeat and status (empty: none)")
    return p


@dataclass(frozen=True)
class SimSettings:
    """``mocapline sim``'s flags as typed settings (how `up --robot sim` plans the process)."""

    robot_model: str
    domain: int
    interface: str
    base: str
    clock: str
    vendor_controller: str
    mode_machine: int
    duration: float | None
    nats: str
    log_level: str

    @classmethod
    def defaults(cls) -> SimSettings:
        return settings_from(cls, declared_defaults(build_parser()))

    def to_argv(self) -> list[str]:
        """The flags that give these settings (those not at their default)."""
        return argv(build_parser(), {f: getattr(self, f) for f in self.__dataclass_fields__})


@dataclass
class SimCounters:
    steps: int = 0
    commands_received: int = 0  # LowCmds taken off DDS
    commands_applied: int = 0  # ... that a physics step ran with
    commands_superseded: int = 0  # ... valid, but replaced by a newer one before the next step
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    states_published: int = 0
    overruns: int = 0  # realtime: wake-ups more than a period late (the missed steps then taken at once)
    arm_sdk_received: int = 0
    arm_sdk_applied: int = 0  # blended into the vendor's stand-in (not in low-level mode)
    arm_sdk_weight: float = 0.0  # the newest weight applied
    hand_commands_received: int = 0  # HandCmd_ (a build with hands), both hands
    hand_commands_applied: int = 0
    hand_states_published: int = 0

    def reject(self, reason: str) -> None:
        self.rejected_by_reason[reason] = self.rejected_by_reason.get(reason, 0) + 1

    @classmethod
    def from_json(cls, answer: dict[str, Any]) -> SimCounters:
        """The sim's status answer or final line (other keys, such as pelvis_height, left aside)."""
        return cls(**{k: answer[k] for k in cls.__dataclass_fields__ if k in answer})

    def summary(self) -> str:
        """What became of the LowCmds it received, in words."""
        return (f"received {self.commands_received} LowCmd: {self.commands_applied} stepped with, "
                f"{self.commands_superseded} superseded (a newer one came before the physics step), "
                f"{sum(self.rejected_by_reason.values())} rejected")


def command_balance(commands_sent: int, sim: SimCounters) -> str:
    """What became of the bridge's LowCmds at the sim, in one line. Exact once the bridge has
    stopped sending (its final count) and the sim has taken what was on its way."""
    lost = commands_sent - sim.commands_received
    parts = [f"the bridge sent {commands_sent} LowCmd; the sim {sim.summary()}"]
    if lost > 0:
        parts.append(f"{lost} not received (sent before the sim's reader matched, or lost by DDS)")
    elif lost < 0:
        parts.append(f"{-lost} more received than this bridge sent (another publisher on the DDS domain)")
    return "; ".join(parts)


def settled_counts(ask: Callable[[], dict[str, Any]], commands_sent: int, settle_s: float = 2.0,
                   timeout: float = 10.0) -> SimCounters:
    """The sim's counts (``ask`` returns its status answer) once it has taken what a stopped bridge
    sent: the last LowCmds may still be on their way through DDS or waiting in the sim's reader on
    a loaded machine (CI saw 2866 of 2867 when asked at once). Asked again until it has received
    ``commands_sent``, or until its count has not moved for ``settle_s`` (the rest is then not
    received, as :func:`command_balance` says), at most ``timeout`` seconds."""
    sim = SimCounters.from_json(ask())
    end = time.monotonic() + timeout
    moved = time.monotonic()
    while sim.commands_received < commands_sent and time.monotonic() < end:
        time.sleep(0.05)
        now = SimCounters.from_json(ask())
        if now.commands_received != sim.commands_received:
            moved = time.monotonic()
        sim = now
        if time.monotonic() - moved > settle_s:
            break
    return sim


class SimLoop:
    """The sim's process loop: commands in, physics, states out (see the module docstring)."""

    def __init__(self, args: Any, dds: Any = None) -> None:
        """``dds``: the low-level topics (default: Cyclone DDS on the args' domain and interface)."""
        from mocapline.robot.registry import get_robot
        from mocapline.tools.sim.physics import RobotPhysics

        robot = get_robot(args.robot_model)
        self.sim = RobotPhysics(robot, args.base, mode_machine=args.mode_machine,
                                vendor=args.vendor_controller == "stand")
        self.period = self.sim.model.opt.timestep
        self.lockstep = args.clock == "lockstep"
        if dds is None:
            from mocapline.robot.unitree.dds import LowLevel, dds_settings

            dds = LowLevel(dds_settings(robot, args.domain, args.interface),
                           depth=1024 if self.lockstep else READER_DEPTH)
        self.dds = dds
        self.commands, self.states = self.dds.command_reader(), self.dds.state_writer()
        self.base = self.dds.base_writer()
        topic = robot.low_level.arm_sdk_topic
        self.arm = self.dds.command_reader(topic) if topic else None
        hands = robot.hands
        topics = (hands.cmd_topics, hands.state_topics) if hands is not None and self.sim.hand_rows else ((), ())
        self.hand_cmds = [self.dds.hand_reader(t) for t in topics[0]]
        self.hand_states = [self.dds.hand_writer(t, state=True) for t in topics[1]]
        self.counters = SimCounters()
        self.next_tick = time.monotonic()

    def counts(self) -> dict[str, Any]:
        d = self.sim.data
        return {**asdict(self.counters), "pelvis_height": round(self.sim.pelvis_height, 4),
                "base_position": [round(float(v), 4) for v in d.xpos[self.sim.pelvis]]}

    def take_arm(self) -> None:
        """The arm interface's newest command (each one counted; the vendor's stand-in blends it)."""
        from mocapline.robot.unitree.lowlevel import LayoutError

        if self.arm is None:
            return
        c = self.counters
        for sample in self.arm.take(64):
            c.arm_sdk_received += 1
            try:
                cmd = self.sim.family.low_cmd.from_sample(sample)
            except LayoutError as exc:
                c.reject(f"arm_sdk_{exc.reason}")
                continue
            if self.sim.apply_arm(cmd):
                c.arm_sdk_applied += 1
                c.arm_sdk_weight = round(self.sim.arm_weight, 6)
                if self.lockstep:
                    self.step_and_publish()

    def take_hands(self) -> None:
        """Each hand's newest valid HandCmd_ is its law from the next step on."""
        from mocapline.robot.unitree.hand import read_hand_cmd
        from mocapline.robot.unitree.lowlevel import LayoutError

        c = self.counters
        for side, reader in enumerate(self.hand_cmds):
            for sample in reader.take(64):
                c.hand_commands_received += 1
                try:
                    cmd = read_hand_cmd(sample)
                except (LayoutError, ValueError):
                    c.reject("hand_cmd")
                    continue
                if self.sim.apply_hand(side, cmd):
                    c.hand_commands_applied += 1
                else:
                    c.reject("hand_non_finite")

    def take_commands(self, limit: int) -> None:
        """Lockstep: a step per valid command. Realtime: every waiting command is taken and
        checked, the newest valid one is the law for the next step, the others are superseded."""
        from mocapline.robot.unitree.lowlevel import LayoutError

        c = self.counters
        self.take_hands()
        valid = 0
        for sample in self.commands.take(limit):
            c.commands_received += 1
            try:
                cmd = self.sim.family.low_cmd.from_sample(sample)
            except LayoutError as exc:
                c.reject(exc.reason)
                continue
            if not self.sim.apply(cmd):
                c.reject("crc_or_non_finite")
                continue
            valid += 1
            if self.lockstep:
                c.commands_applied += 1
                self.step_and_publish()
        if valid and not self.lockstep:
            c.commands_applied += 1
            c.commands_superseded += valid - 1

    def publish(self) -> None:
        from mocapline.robot.unitree.base import base_state

        state = self.sim.state()
        self.states.write(self.sim.family.low_state.sample(state))
        d = self.sim.data
        pelvis = self.sim.pelvis
        velocity = d.qvel[0:3] if self.sim.base != "fixed" else np.zeros(3)
        self.base.write(base_state(int(state["tick"]), d.xpos[pelvis], d.xquat[pelvis], velocity))
        self.counters.states_published += 1
        if self.hand_states and self.counters.states_published % HAND_STATE_EVERY == 0:
            for side, writer in enumerate(self.hand_states):
                writer.write(self.sim.hand_state(side))
            self.counters.hand_states_published += 1

    def step_and_publish(self) -> None:
        self.sim.step()
        self.counters.steps += 1
        self.publish()

    def tick_lockstep(self) -> None:
        """A step per command; while none comes (before the first, or with the bridge gone: a
        restarted one waits for a LowState before it commands) the state as it is, unstepped,
        every LOCKSTEP_IDLE_S. The vendor's mode: a step per arm_sdk command as well."""
        if self.sim.vendor and self.arm is not None:
            if self.arm.wait(0.01):
                self.take_arm()
            else:
                self.publish()
            if not self.commands.wait(0.0):
                return
        if self.commands.wait(LOCKSTEP_IDLE_S):
            self.take_commands(1024)
        else:
            self.publish()

    def tick_realtime(self) -> None:
        """Physics keeps wall time: after a late wake-up the steps missed are taken (up to
        MAX_CATCHUP_STEPS) with the newest command, as a robot's world does not wait for its
        firmware; only the last state is published."""
        self.take_commands(READER_DEPTH)
        self.take_arm()
        due = min(MAX_CATCHUP_STEPS, max(1, int((time.monotonic() - self.next_tick) / self.period) + 1))
        if due > 1:
            self.counters.overruns += 1
        for _ in range(due - 1):
            self.sim.step()
            self.counters.steps += 1
        self.step_and_publish()
        self.next_tick += due * self.period
        now = time.monotonic()
        if now - self.next_tick > MAX_CATCHUP_STEPS * self.period:
            self.next_tick = now  # further behind than that: the sim's time slips (counted as overruns)
        else:
            time.sleep(max(0.0, self.next_tick - now))


def run(args: Any) -> dict[str, Any]:
    from mocapline.core.udp import raise_priority

    stop = stop_on_signals()
    loop = SimLoop(args)
    bus = None
    if args.nats:
        from mocapline.core.bus import Bus

        bus = Bus(args.nats, "sim", loop.counts).start()
    log.info("%s (%s base) on DDS domain %d, %s clock; scheduling priority %s", loop.sim.robot.title, args.base,
             args.domain, args.clock, raise_priority())  # it stands in for the robot's real-time firmware
    deadline = time.monotonic() + args.duration if args.duration else float("inf")
    loop.next_tick = time.monotonic()
    while not stop.is_set() and time.monotonic() < deadline:
        if bus is not None and loop.counters.states_published % 25 == 0:
            answer_requests(bus, loop.counters, stop)
        if loop.lockstep:
            loop.tick_lockstep()
        else:
            loop.tick_realtime()
    loop.dds.close()
    if bus is not None:
        bus.stop()
    return loop.counts()


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
