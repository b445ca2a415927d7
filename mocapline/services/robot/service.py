"""`mocapline robot`: a named, acknowledging consumer of the robot port that drives a Unitree robot
(``--robot-model``: the G1 builds, the H1) through its low-level DDS interface (LowCmd on
rt/lowcmd at ``--rate``, LowState from rt/lowstate, in the build's message family), safely. The
control law and safety states are in ``controller.py``, the playback
of the stream in ``timeline.py``; docs/robot.md describes both.

In durable mode a frame counts as processed (its position stored, then acknowledged) only once
its target reached a command (or, rejected, once every frame before it did): a kill -9 loses
nothing, and the restarted bridge ramps from the measured pose into the frames after it.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from mocapline.core import durable
from mocapline.core.counters import PolicyCounts, RobotCounts
from mocapline.core.frames import FrameFieldError, ProtobufDecodeError, parse_mocap_frame
from mocapline.core.header import MessageType
from mocapline.core.lifecycle import EXIT_STOPPED
from mocapline.core.metrics import LINK_REJECT_REASONS, PAYLOAD_REJECT_REASONS
from mocapline.core.options import (
    EnvArgumentParser,
    argv,
    declared_defaults,
    flag_values,
    non_negative_float,
    non_negative_int,
    parse_settings,
    positive_float,
    settings_from,
)
from mocapline.core.stage import Links, Stage, StageError, StageSettings, add_stage_arguments
from mocapline.core.transport import Received, add_curve_client_options, client_link
from mocapline.core.udp import raise_priority
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.robot.controller import (
    SUPPORTS,
    Command,
    Controller,
    ControlSettings,
    Measured,
    RobotController,
)
from mocapline.services.robot.counters import RobotCounters
from mocapline.services.robot.hands import HAND_KINDS, HandDriver
from mocapline.services.robot.policy.description import policy_names
from mocapline.services.robot.safety import Limits, SafetyFilter
from mocapline.services.robot.timeline import StreamFrame

log = logging.getLogger("mocapline.robot")
CONTROLLERS = ("pd", "policy", "arm-sdk")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline robot", description=__doc__)
    p.add_argument("--input", default="tcp://127.0.0.1:5555", help="the streamer's robot port")
    p.add_argument("--name", default="robot", help="durable mode: this consumer's name at the streamer")
    add_robot_model_argument(p)
    p.add_argument("--performer", type=non_negative_int, default=None,
                   help="the performer (avatar_index) this robot follows; default: the first one seen")
    p.add_argument("--domain", type=non_negative_int, default=1,
                   help="DDS domain id: 0 a real robot, 1 Unitree's simulator and `mocapline sim`")
    p.add_argument("--interface", default="",
                   help="network interface for DDS (the one wired to the robot, e.g. enp3s0); lo = loopback only")
    p.add_argument("--require-lowstate-crc", action="store_true",
                   help="refuse a LowState whose crc field is 0 too (by default it is taken and counted "
                        "lowstate_unsealed: Unitree's simulators publish LowState unsealed)")
    p.add_argument("--rate", type=positive_float, default=500.0, help="LowCmd per second")
    p.add_argument("--clock", choices=("wall", "lowstate"), default="wall",
                   help="wall: a tick every 1/--rate s of wall time; lowstate: a tick per new LowState, the "
                        "control time its tick (ms): with `mocapline sim --clock lockstep` the run is in simulated "
                        "time, whatever the machine's load (the benches, the tests)")
    p.add_argument("--controller", choices=CONTROLLERS, default="pd",
                   help="pd: the stream's joint targets with the vendor's gains (a robot on a band or gantry); "
                        "policy: a learned whole-body controller (--policy) keeps the robot on its feet; "
                        "arm-sdk: waist and arms on the vendor's arm interface, its own controller keeps the legs")
    p.add_argument("--policy", default="", help="policy: the ONNX file (TWIST2's checkpoint: docs/robot.md)")
    p.add_argument("--policy-description", default="twist2_g1",
                   help=f"policy: its description, shipped ({', '.join(policy_names())}) or a FILE.toml")
    p.add_argument("--fall-tilt-deg", type=positive_float, default=ControlSettings.fall_tilt_deg,
                   help="policy: the IMU tilted further than this from upright is a fall (damping, the bridge stops)")
    p.add_argument("--fall-rate", type=positive_float, default=ControlSettings.fall_rate,
                   help="policy: an IMU angular rate above this (rad/s) is a fall")
    p.add_argument("--rest-lean-s", type=non_negative_float, default=ControlSettings.rest_lean_s,
                   help="policy: the policy sees the reference's pitch relative to its mean over the first this "
                        "many seconds of each take (the performer's rest lean: a capture's pelvis leans forward "
                        "6-9 deg where the policy's rest is level, and a policy told to lean steps); 0: as streamed")
    p.add_argument("--arm-sdk-ramp-s", type=positive_float, default=ControlSettings.arm_sdk_ramp_s,
                   help="arm-sdk: seconds for the blend weight to go between 0 and 1 (at the start, the end, a stall "
                        "past --stall-damp-ms, an e-stop)")
    p.add_argument("--joints", choices=("all", "upper"), default="all",
                   help="upper: waist and arms from the stream, legs held at a stand pose (gantry / locomotion)")
    p.add_argument("--no-feed-forward", dest="feed_forward", action="store_false",
                   help="send no joint velocity feed-forward (dq = 0)")
    p.add_argument("--no-bias", dest="bias", action="store_false",
                   help="send no gravity/bias torque from the robot's model (tau = 0)")
    p.add_argument("--support", choices=SUPPORTS, default="torso",
                   help="what holds the robot up, for the bias torque: torso = a rope at the torso (Unitree's "
                        "elastic band, `mocapline sim --base band`, a gantry), pelvis = the pelvis held still (a "
                        "test stand, `mocapline sim --base fixed`); standing on its feet: --no-bias")
    p.add_argument("--stall-ms", type=positive_float, default=100.0,
                   help="no frame to play for this long while tracking: a stall (hold the last target)")
    p.add_argument("--stall-damp-ms", type=positive_float, default=1000.0,
                   help="holding this long: damping (kp 0, kd > 0) until frames resume (then ramp back in)")
    p.add_argument("--ramp-speed", type=positive_float, default=1.0,
                   help="rad/s of the largest joint move while ramping in (start, after damping) or to rest")
    p.add_argument("--range-margin", type=non_negative_float, default=0.05,
                   help="rad kept from each joint's end stops")
    p.add_argument("--max-speed", type=positive_float, default=ControlSettings.max_speed,
                   help="fastest playback while catching up with the stream (1 = never faster)")
    p.add_argument("--lag-target-ms", type=non_negative_float, default=ControlSettings.lag_target_ms,
                   help="stream time queued ahead of the playback, beyond one frame interval, from which it "
                        "plays faster (up to --max-speed)")
    p.add_argument("--damping-kd", type=positive_float, default=2.0, help="kd while damping (kp 0)")
    p.add_argument("--rest-after-end", action="store_true",
                   help="END_OF_STREAM: ramp to the rest pose (arms down) instead of holding the last target")
    p.add_argument("--hands", choices=HAND_KINDS, default="none",
                   help="dex3: the stream's hand joints as HandCmd_ on the build's hand topics (rt/dex3/{left,right}/"
                        "cmd; --robot-model g1_dex3), read HandState_; none: the body only")
    p.add_argument("--hand-rate", type=positive_float, default=100.0, help="HandCmd_ per second and hand")
    p.add_argument("--estop-damp-s", type=non_negative_float, default=0.5,
                   help="an e-stop (NATS `estop`, SIGINT, SIGTERM) damps this long, then the process exits")
    add_curve_client_options(p)
    add_stage_arguments(p, "robot", nats_help="NATS server for heartbeats and control (`estop` stops the robot)")
    return p


@dataclass(frozen=True)
class RobotSettings:
    input: str
    name: str
    robot_model: str
    performer: int | None
    domain: int
    interface: str
    require_lowstate_crc: bool
    support: str
    clock: str
    controller: str
    policy: str
    policy_description: str
    range_margin: float
    hands: str
    hand_rate: float
    estop_damp_s: float
    curve_client_key: str
    curve_server_public: str
    control: ControlSettings
    stage: StageSettings

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RobotSettings:
        if args.controller == "policy" and not args.policy:
            raise ValueError("--controller policy needs --policy FILE.onnx (TWIST2's checkpoint: docs/robot.md)")
        return settings_from(cls, args, stage=StageSettings.from_args(args))

    @classmethod
    def defaults(cls) -> RobotSettings:
        """The settings of ``mocapline robot`` with no flag (and no ``MOCAPLINE_*`` variable)."""
        return cls.from_args(declared_defaults(build_parser()))

    def to_argv(self) -> list[str]:
        """The flags that give these settings (those not at their default)."""
        parser = build_parser()
        return argv(parser, flag_values(parser, self, skip=("stage",))) + self.stage.to_argv(parser)


class RobotLoop:
    """The stage handler: one control tick per ``step``."""

    def __init__(self, settings: RobotSettings, links: Links, controller: RobotController, counters: RobotCounters,
                 dds: Any, hands: HandDriver | None = None) -> None:
        from mocapline.robot.unitree.family import family
        from mocapline.robot.unitree.state import StateDecoder

        robot = controller.robot
        self.robot = robot
        self.family = family(robot.low_level.family)
        self.decoder = StateDecoder(robot)
        self.motors = robot.motor_index
        self.wrong_robot_logged = False
        self.settings = settings
        self.links = links
        self.controller = controller
        self.counters = counters
        self.commands = dds.command_writer(controller.topic)
        self.states = dds.state_reader()
        self.dds = dds
        self.period = 1.0 / settings.control.rate
        self.cmd = self.family.new_low_cmd()
        self.cmd["motor_cmd"]["mode"][self.motors] = controller.modes
        self.weight_slot = robot.low_level.arm_sdk_weight_slot
        self.weight: float | None = None
        self.mode_machine = 0
        self.next_tick = time.monotonic()
        self.last_tick: float | None = None
        self.state_tick: int | None = None  # the newest LowState's tick (ms)
        self.ticks_seen: int | None = None
        self.performer = settings.performer
        self.done_upto = -1  # durable: the last input frame_id processed (applied, or passed over)
        self.estop_until: float | None = None
        self.stopped_for: str | None = None  # an e-stop's reason or "fall": exit EXIT_STOPPED, not restarted
        self.ended = False
        self.hands = hands
        if hands is not None:
            assert robot.hands is not None
            self.hand_writers = [dds.hand_writer(t) for t in robot.hands.cmd_topics]
            self.hand_readers = [dds.hand_reader(t, state=True) for t in robot.hands.state_topics]
        self.rx = links.durable.rx if links.durable is not None else None
        if self.rx is not None:
            self.done_upto = self.rx.last
            self.rx.ack_cap = self._ack_cap

    def _ack_cap(self) -> int:
        """What the link may acknowledge (and a HELLO say it holds): through the last frame
        processed, and with none taken in and waiting, everything it handed out or skipped. A
        bridge joining a running take is WELCOMEd past the frames the others took: capped at its
        last processed frame (-1), each idle HELLO rewound it to the take's first frame, and the
        streamer resent the take to it (dropped as duplicates) and held its log for it."""
        assert self.rx is not None
        return self.done_upto if self.controller.timeline.queue else max(self.done_upto, self.rx.last)

    # --- inputs ---

    def _read_state(self) -> None:
        from mocapline.robot.unitree.lowlevel import LayoutError

        newest = None
        for sample in self.states.take(64):
            try:
                newest = self.decoder.decode(sample, self.settings.require_lowstate_crc)
            except LayoutError as exc:
                self.counters.lowstate_rejected[exc.reason] += 1
                continue
            self.counters.lowstate_received += 1
            if not newest.sealed:
                self.counters.lowstate_unsealed += 1
        if self.hands is not None:
            for side, reader in enumerate(self.hand_readers):
                for hand in reader.take(16):
                    self.hands.on_state(side, hand)
        if newest is not None:
            self.mode_machine = newest.mode_machine
            self.state_tick = newest.tick
            self.controller.on_state(Measured(newest.q, newest.dq, newest.quaternion, newest.gyro))

    def _take_frames(self) -> None:
        rx = self.links.rx
        for _ in range(256):  # what is waiting, bounded
            msg = rx.recv(timeout_ms=0)
            if msg is None:
                return
            self._frame(msg)

    def _frame(self, msg: Received) -> None:
        frame_id = msg.header.frame_id
        if msg.header.message_type is MessageType.END_OF_STREAM:
            self.controller.timeline.push(StreamFrame(frame_id, 0.0, None, None, end=True))
            return
        try:
            m = parse_mocap_frame(msg.payload, self.robot.joint_count)
        except (FrameFieldError, ProtobufDecodeError) as exc:
            self._reject(frame_id, exc.reason)
            return
        if m.robot_model and m.robot_model != self.robot.name:
            if not self.wrong_robot_logged:
                log.error("the stream is for %r; this bridge drives %r (--robot-model): its frames are refused",
                          m.robot_model, self.robot.name)
                self.wrong_robot_logged = True
            self._reject(frame_id, "robot_model")
            return
        if self.performer is None:
            self.performer = m.avatar_index
        if m.avatar_index != self.performer:
            self.controller.timeline.push(StreamFrame(frame_id, 0.0, None, None, other=True))
            return
        q = np.array(m.joint_pos, dtype=np.float64)
        dq = np.array(m.joint_vel, dtype=np.float64)
        hands = None
        if self.hands is not None and len(m.hand_joint_pos) == self.hands.joints:
            hands = np.array(m.hand_joint_pos, dtype=np.float64)
        if not (np.all(np.isfinite(q)) and np.all(np.isfinite(dq)) and math.isfinite(m.source_time_s)
                and (hands is None or np.all(np.isfinite(hands)))):
            self._reject(frame_id, "non_finite")
            return
        self.counters.robot_received += 1
        root = np.array([*m.body_pos_w, *m.body_quat_w], dtype=np.float64)
        self.controller.on_frame(StreamFrame(frame_id, m.source_time_s, q, dq, m.capture_timestamp_us,
                                             m.posture_index, time.time_ns(),
                                             root=root if np.all(np.isfinite(root)) else None, hands=hands))

    def _reject(self, frame_id: int, reason: str) -> None:
        self.counters.rejected[reason] += 1
        self.controller.timeline.push(StreamFrame(frame_id, 0.0, None, None))

    # --- the tick ---

    def step(self) -> bool:
        if self.settings.clock == "lowstate":
            return self._step_on_lowstate()
        now = time.monotonic()
        if now < self.next_tick:
            time.sleep(self.next_tick - now)
            now = time.monotonic()
        late = now - self.next_tick
        if late > self.period / 2:
            self.counters.deadline_misses += 1
        self.next_tick = max(self.next_tick + self.period, now - self.period)  # no burst after a long miss
        # The stream plays on wall time (a late tick does not slow it down; the lag it would build
        # is not made up at 1.25x); a frozen process resumes at most 0.1 s further on.
        dt = self.period if self.last_tick is None else min(now - self.last_tick, 0.1)
        if self.last_tick is not None:
            self.counters.periods_s.append(now - self.last_tick)
        self.last_tick = now
        self._read_state()
        if self.controller.state != "estop":
            self._take_frames()
        command = self.controller.tick(now, dt)
        if command is not None:
            self._send(command, now)
        if self.controller.stopping and self.estop_until is None:
            self.estop_until = now + self.controller.stop_s  # a fall: the controller damps, the bridge stops
            self.stopped_for = self.stopped_for or "fall"
        return self.estop_until is None or now < self.estop_until

    def _step_on_lowstate(self) -> bool:
        """One tick per new LowState, the control time its tick: the robot's clock, not the wall's."""
        self.states.wait(0.05)
        self._read_state()
        if self.state_tick is None or self.state_tick == self.ticks_seen:
            return self.estop_until is None or time.monotonic() < self.estop_until
        now = self.state_tick / 1000.0
        dt = self.period if self.ticks_seen is None else max(1e-4, min(now - self.ticks_seen / 1000.0, 0.1))
        self.ticks_seen = self.state_tick
        wall = time.monotonic()
        if self.last_tick is not None:
            self.counters.periods_s.append(wall - self.last_tick)
        self.last_tick = wall
        if self.controller.state != "estop":
            self._take_frames()
        command = self.controller.tick(now, dt)
        if command is not None:
            self._send(command, wall)
        if self.controller.stopping and self.estop_until is None:
            self.estop_until = wall + self.controller.stop_s
            self.stopped_for = self.stopped_for or "fall"
        return self.estop_until is None or wall < self.estop_until

    def _send(self, command: Command, now: float) -> None:
        motors, slots = self.cmd["motor_cmd"], self.motors
        motors["q"][slots], motors["dq"][slots], motors["tau"][slots] = command.q, command.dq, command.tau
        motors["kp"][slots], motors["kd"][slots] = command.kp, command.kd
        if command.weight is not None:
            motors["q"][self.weight_slot] = command.weight
            self.weight = command.weight
        if self.family.has_mode_machine:
            self.cmd["mode_machine"] = self.mode_machine
        layout = self.family.low_cmd
        layout.seal(self.cmd)
        self.commands.write(layout.sample(self.cmd))
        c = self.counters
        c.commands_sent += 1
        c.sent_at.append(now)
        if c.first_sent_at is None:
            c.first_sent_at = now
        c.last_sent_at = now
        now_us = time.time_ns() // 1000
        for frame in command.started:
            if frame.q is not None and frame.capture_us:
                c.latencies_s.append((now_us - frame.capture_us) / 1e6)
        for frame in command.reached:
            if frame.end:
                self.controller.on_end()
                self.ended = True
            elif frame.q is not None:
                c.applied(frame.posture_index, self.state_tick)
                self.ended = False
                if self.hands is not None and frame.hands is not None:
                    self.hands.take(frame.hands, frame.posture_index)
            self.done_upto = frame.frame_id
            self.links.done(frame.frame_id, c.durable_state())
        self._send_hands(now)

    def _send_hands(self, now: float) -> None:
        if self.hands is None:
            return
        out = self.hands.tick(now, self.controller.state)
        if out is not None:
            for writer, sample in zip(self.hand_writers, out.samples, strict=True):
                writer.write(sample)

    # --- the stage's other duties ---

    def estop(self, reason: str) -> None:
        """Damp, then stop. Asked (``estop``: NATS, `mocapline estop`) it is for good: the process
        exits with EXIT_STOPPED; ``exit`` is the damping every ending gets."""
        if reason != "exit" and self.stopped_for is None:
            self.stopped_for = f"e-stop ({reason})"
        now = time.monotonic()
        self.controller.estop(reason, now)
        if self.estop_until is None:
            self.estop_until = now + self.controller.stop_s

    def heartbeat(self) -> RobotCounts:
        now = time.monotonic()
        figures = getattr(self.controller, "figures", None)
        policy = PolicyCounts(name=self.settings.policy_description, **figures(now)) if figures else None
        return self.counters.record(now, bridge_pending=self.controller.timeline.pending(),
                                    lag_s=round(self.controller.timeline.lag_s, 4), ended=self.ended,
                                    controller=self.controller.name, policy=policy, arm_sdk_weight=self.weight,
                                    hands=self.hands.counts() if self.hands is not None else None)

    def reset(self) -> None:
        keep = self.counters.clamps
        keep.clear()
        fresh = RobotCounters.for_robot(self.robot, state=self.counters.state)
        self.counters.__dict__.update(fresh.__dict__)
        self.counters.clamps = keep
        self.links.remember(self.counters.durable_state())

    def begin_drain(self, args: dict[str, Any]) -> None:
        pass

    def drained(self) -> bool:
        return self.controller.timeline.pending() == 0

    def finish(self) -> None:
        """Whatever ends the run, the robot is left damped: ``estop_damp_s`` of damping commands."""
        self.estop("exit")
        assert self.estop_until is not None
        for _ in range(int(self.controller.stop_s * self.settings.control.rate) + 1):
            if time.monotonic() >= self.estop_until:
                break
            self.step()


def robot_limits(robot: RobotDescription, range_margin: float) -> Limits:
    """The robot's joint ranges (less ``range_margin``) and torque limits from its model, its
    velocity limits from its description."""
    from mocapline.robot.model import joint_ranges, physics_spec, torque_limits

    model = physics_spec(robot).compile()
    return Limits.with_margin(joint_ranges(model, robot.joint_names), robot.velocity_limits,
                              torque_limits(model, robot.joint_names), range_margin)


def make_controller(settings: RobotSettings, robot: RobotDescription, safety: SafetyFilter,
                    counters: RobotCounters) -> RobotController:
    """The controller ``--controller`` names (a policy description or ONNX file that does not fit
    raises ValueError, saying why)."""
    from mocapline.services.robot.bias import BiasTorque

    s = settings.control
    if settings.controller == "policy":
        from mocapline.services.robot.policy.controller import PolicyController
        from mocapline.services.robot.policy.description import load_policy
        from mocapline.services.robot.policy.runner import PolicyRunner

        policy = load_policy(settings.policy_description)
        runner = PolicyRunner(settings.policy, policy)
        log.info("policy %s (%s) from %s: observation %d wide, %g Hz", policy.name, policy.title, settings.policy,
                 policy.width, policy.rate_hz)
        return PolicyController(robot, s, safety, counters, policy, runner, settings.estop_damp_s,
                                inference_s=lambda: runner.last_s)
    if settings.controller == "arm-sdk":
        from mocapline.services.robot.armsdk import ArmSdkController

        return ArmSdkController(robot, s, safety, counters, BiasTorque(robot, settings.support) if s.bias else None)
    return Controller(robot, s, safety, counters, BiasTorque(robot, settings.support), settings.estop_damp_s)


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(RobotSettings.from_args, build_parser(), argv)
    if settings is None:
        return 2
    try:
        from mocapline.robot.unitree.dds import LowLevel, dds_settings
    except ImportError:
        print("mocapline robot: needs Cyclone DDS 0.10 (pip install -e '.[robot]', see README: The robot end)",
              file=sys.stderr)
        return 2
    robot = get_robot(settings.robot_model)
    limits = robot_limits(robot, settings.range_margin)
    counters = RobotCounters.for_robot(robot)
    reasons = (*LINK_REJECT_REASONS, *PAYLOAD_REJECT_REASONS, "non_finite")
    with Stage("robot", settings.stage, reasons=reasons) as stage:
        try:
            links = stage.open_links(
                input=durable.LinkSpec(settings.input, MessageType.MOTION_FRAME, robot.joint_count, kind="fanout",
                                       name=settings.name, curve_client_key=settings.curve_client_key,
                                       curve_server_public=settings.curve_server_public),
                plain_input=lambda ctx: client_link(ctx, zmq.PULL, settings.input,
                                                    curve_client_key=settings.curve_client_key,
                                                    curve_server_public=settings.curve_server_public),
            )
        except StageError as exc:
            return stage.fail(str(exc))
        links.rx.rejects = counters.rejected
        if links.durable is not None and links.durable.restored is not None:
            counters.restore(links.durable.restored)
        try:
            controller = make_controller(settings, robot, SafetyFilter(limits), counters)
        except ValueError as exc:
            return stage.fail(str(exc))
        hands = None
        if settings.hands != "none":
            try:
                hands = HandDriver.for_robot(robot, settings.range_margin, settings.hand_rate)
            except ValueError as exc:
                return stage.fail(str(exc))
        dds = LowLevel(dds_settings(robot, settings.domain, settings.interface))
        stage.exits.callback(dds.close)
        loop = RobotLoop(settings, links, controller, counters, dds, hands)
        # a command every 2 ms: the bridge asks to be scheduled before the pipeline's batch work
        log.info("scheduling priority %s", raise_priority())
        log.info("driving the %s on DDS domain %d (%s, %s) at %.0f Hz, controller %s on %s, joints %s", robot.title,
                 settings.domain, settings.interface or "default interface", robot.low_level.family,
                 settings.control.rate, controller.name, controller.topic, settings.control.joints)
        code = stage.run(loop)
        if code == 0 and loop.stopped_for is not None:
            log.warning("stopped for good: %s (exit status %d: a supervisor does not restart it)",
                        loop.stopped_for, EXIT_STOPPED)
            return EXIT_STOPPED
        return code


if __name__ == "__main__":
    sys.exit(main())
