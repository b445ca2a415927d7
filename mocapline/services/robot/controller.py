"""The bridge's control laws and safety states, free of I/O: fed the robot's measured state and
the stream's frames, asked once per tick for the command to send.

Every controller (``--controller``) is one class behind :class:`RobotController`: ``pd`` here (the
stream's joint targets through the vendor's gains), ``policy`` (:mod:`.policy.controller`, a
learned whole-body controller between the stream and the motors), ``arm-sdk`` (:mod:`.armsdk`,
the waist and arms beside the vendor's own balance).

The pd controller's states (docs/robot.md has the diagram):

- ``waiting``: no frame yet (damping, kp 0) — the robot is not driven before the stream starts;
- ``ramp_in``: from the measured pose to the stream's, blending over a time set by
  ``ramp_speed`` while the stream plays on (so no lag builds up), every step within the limits;
- ``tracking``: the stream, interpolated (``timeline``), with velocity and bias feed-forward;
- ``holding``: the stream ran dry: the last target, held stiff;
- ``damping``: held past ``stall_damp_ms``: kp 0, kd > 0; frames resuming -> ``ramp_in``;
- ``ended``: END_OF_STREAM played: hold (``resting`` first ramps to the rest pose when asked);
- ``estop``: damping until the process exits; nothing leaves it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mocapline.robot.description import RobotDescription
from mocapline.services.robot.counters import RobotCounters
from mocapline.services.robot.safety import SafetyFilter
from mocapline.services.robot.timeline import Step, StreamFrame, Timeline

log = logging.getLogger("mocapline.robot")

BIAS_EVERY = 4
SUPPORTS = ("torso", "pelvis")  # what holds the robot up (bias.py)
STATES = ("waiting", "ramp_in", "tracking", "holding", "damping", "ended", "resting", "estop")


@dataclass(frozen=True)
class ControlSettings:
    """The control law's settings, each named and in the unit of its ``mocapline robot`` flag (so
    the flags and these settings map onto each other without a table: core/options.settings_from)."""

    rate: float = 500.0  # Hz: a command this often
    joints: str = "all"  # "upper": legs held at the stand pose
    feed_forward: bool = True
    bias: bool = True
    stall_ms: float = 100.0  # no frame to play for this long while tracking: a stall (hold)
    stall_damp_ms: float = 1000.0  # holding this long: damping
    ramp_speed: float = 1.0  # rad/s of the largest joint move during a ramp
    min_ramp_s: float = 0.3
    damping_kd: float = 2.0
    rest_after_end: bool = False
    max_speed: float = Timeline.max_speed  # the playback's catch-up policy is the timeline's
    lag_target_ms: float = Timeline.lag_target_s * 1000
    fall_tilt_deg: float = 60.0  # policy: the IMU this far from upright is a fall
    fall_rate: float = 10.0  # policy: an IMU angular rate above this (rad/s) is a fall
    arm_sdk_ramp_s: float = 2.0  # arm-sdk: the blend weight's ramp between 0 and 1
    # policy: the reference's pitch relative to its mean over a take's first this many seconds (the
    # performer's rest lean: policy/rest_lean.py); 0: as streamed
    rest_lean_s: float = 1.0


@dataclass
class Command:
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    started: list[StreamFrame]  # frames this command is the first to move toward
    reached: list[StreamFrame]  # frames (valid or rejected) passed by this command, in order
    weight: float | None = None  # arm-sdk: the blend weight (the description's arm_sdk_weight_slot)


@dataclass
class Measured:
    q: np.ndarray
    dq: np.ndarray
    quat: np.ndarray
    gyro: np.ndarray | None = None


class RobotController(Protocol):
    """What the bridge's loop asks of a controller: the measured state and the stream's frames in,
    one command per tick out (None: nothing to send yet)."""

    name: str
    robot: RobotDescription
    timeline: Timeline
    topic: str  # the low-level topic its commands go to
    modes: np.ndarray  # motor_cmd mode of each joint (stream order)
    stop_s: float  # how long the loop keeps ticking after an e-stop before it exits

    @property
    def state(self) -> str:
        """Its safety state (docs/robot.md), as published in the heartbeat's ``robot_state``."""
        ...

    def on_state(self, measured: Measured) -> None: ...

    def on_frame(self, frame: StreamFrame) -> None: ...

    def on_end(self) -> None: ...

    def estop(self, reason: str, now: float) -> None: ...

    def tick(self, now: float, dt: float) -> Command | None: ...

    @property
    def stopping(self) -> bool:
        """True once the controller wants the bridge to stop (a fall)."""
        ...


class ControllerStates:
    """What every controller does alike with its inputs and states: keeps the measured state (the
    first one is the last target until one is sent), the end of the stream, the e-stop latch and
    each transition, counted (``counters.transitions``, ``counters.state``)."""

    state: str
    since: float  # when the current state began
    counters: RobotCounters
    measured: Measured | None
    q_cmd: np.ndarray | None  # the last target sent
    end_pending: bool

    def on_state(self, measured: Measured) -> None:
        self.measured = measured
        if self.q_cmd is None:
            self.q_cmd = measured.q.copy()

    def on_end(self) -> None:
        self.end_pending = True

    def estop(self, reason: str, now: float) -> None:
        if self.state != "estop":
            self.counters.estops += 1
            log.warning("e-stop (%s): damping", reason)
            self._go("estop", now)

    def _go(self, state: str, now: float) -> None:
        if state == self.state:
            return
        log.info("robot: %s -> %s", self.state, state)
        self.counters.transitions[f"{self.state}->{state}"] += 1
        self.state = self.counters.state = state
        self.since = now


class Controller(ControllerStates):
    """The pd controller: the stream's joint targets through the safety filter, the vendor's gains
    (the robot's description), gravity fed forward."""

    name = "pd"
    stopping = False

    def __init__(self, robot: RobotDescription, settings: ControlSettings, safety: SafetyFilter,
                 counters: RobotCounters, bias: object | None = None, estop_damp_s: float = 0.5) -> None:
        self.robot = robot
        self.topic = robot.low_level.lowcmd_topic
        self.modes = robot.motor_modes
        self.stop_s = estop_damp_s
        self.kp, self.kd = robot.kp, robot.kd
        self.legs, self.stand, self.rest = robot.group("legs"), robot.stand, robot.rest
        self.settings = settings
        self.safety = safety
        self.counters = counters
        counters.clamps = safety.clamps
        self.bias = bias if settings.bias else None
        self.timeline = Timeline(max_speed=settings.max_speed, lag_target_s=settings.lag_target_ms / 1000,
                                 velocity_limits=safety.limits.velocity)
        self.state = "waiting"
        self.measured: Measured | None = None
        self.q_cmd: np.ndarray | None = None  # the last target sent
        self.since = 0.0  # when the current state began
        self.starved_since: float | None = None
        self.ramp_from: np.ndarray | None = None
        self.ramp_s = 0.0
        self.end_seen = False  # END_OF_STREAM taken (after the frames before it)
        self.end_pending = False
        self._bias: np.ndarray | None = None
        self._bias_age = 0

    # --- inputs ---

    def on_frame(self, frame: StreamFrame) -> None:
        if frame.q is None:
            self.timeline.push(frame)
            return
        if self.settings.joints == "upper":
            frame.q[self.legs] = self.stand[self.legs]
            if frame.dq is not None:
                frame.dq[self.legs] = 0.0
        self.timeline.push(frame)
        self.end_pending = False

    # --- the tick ---

    def _start_ramp(self, target: np.ndarray, now: float, state: str = "ramp_in") -> None:
        assert self.measured is not None
        self.ramp_from = self.measured.q.copy()
        move = float(np.max(np.abs(target - self.ramp_from)))
        self.ramp_s = max(self.settings.min_ramp_s, move / max(self.settings.ramp_speed, 1e-6))
        self.q_cmd = self.ramp_from.copy()  # the ramp starts where the robot is: no jump
        self._go(state, now)

    def tick(self, now: float, dt: float) -> Command | None:
        """The command for this tick, or None before the robot's state is known."""
        if self.measured is None or self.q_cmd is None:
            return None
        if self.state == "estop":
            self.counters.damped_s += dt
            return self._damping([], [])
        if self.state in ("waiting", "damping"):
            return self._idle(now, dt)
        step = self.timeline.step(dt)
        assert step is not None
        return self._drive(step, now, dt)

    def _idle(self, now: float, dt: float) -> Command:
        """Damping until a frame comes; then the ramp in from where the robot is."""
        has_frame = any(f.q is not None for f in self.timeline.queue)
        step = self.timeline.step(dt)  # rejected frames at the head are passed over either way
        if has_frame and step is not None and step.q.size:
            self._start_ramp(self._shape(step.q), now)
            return self._drive(step, now, dt)
        if self.state == "damping":
            self.counters.damped_s += dt
        return self._damping(step.started if step else [], step.reached if step else [])

    def _drive(self, step: Step, now: float, dt: float) -> Command:
        target = self._shape(step.q)
        dq = step.dq if self.settings.feed_forward else np.zeros_like(step.q)
        if step.speed > 1.0:
            self.counters.catchup_ticks += 1
        if self.state == "ramp_in":
            a = self._ramp_fraction(now)
            assert self.ramp_from is not None
            target, dq = self.ramp_from + a * (target - self.ramp_from), a * dq
            if a >= 1.0:
                self._go("tracking", now)
                self.starved_since = None
        elif self.state in ("tracking", "holding") and self._watch_stall(step, now):
            return self._damping(step.started, step.reached)
        if self.state in ("ended", "resting"):
            dq = np.zeros_like(target)
            if self.timeline.queue:
                self._go("tracking", now)
            elif self.state == "resting":
                assert self.ramp_from is not None
                target = self.ramp_from + self._ramp_fraction(now) * (self.rest - self.ramp_from)
        return self._stiff(target, dq, dt, step.started, step.reached)

    def _ramp_fraction(self, now: float) -> float:
        a = min(1.0, (now - self.since) / self.ramp_s)
        return a * a * (3 - 2 * a)  # smoothstep: no step in velocity at either end

    def _watch_stall(self, step: Step, now: float) -> bool:
        """tracking <-> holding -> damping (True: damp now), and the end of the stream."""
        s = self.settings
        if self.timeline.queue or step.reached:
            self.starved_since = None
            self._go("tracking", now)
            return False
        if self.end_pending:
            if s.rest_after_end:
                self._start_ramp(self.rest, now, "resting")
            else:
                self._go("ended", now)
            return False
        if self.starved_since is None:
            self.starved_since = now
        if self.state == "tracking" and now - self.starved_since >= s.stall_ms / 1000:
            self.counters.stalls += 1
            self._go("holding", now)
        elif self.state == "holding" and now - self.since >= s.stall_damp_ms / 1000:
            self._go("damping", now)
            self.timeline.reset()
            return True
        return False

    def _shape(self, q: np.ndarray) -> np.ndarray:
        if self.settings.joints == "upper":
            q = q.copy()
            q[self.legs] = self.stand[self.legs]
        return q

    def _stiff(self, target: np.ndarray, dq: np.ndarray, dt: float, started: list[StreamFrame],
               reached: list[StreamFrame]) -> Command:
        assert self.q_cmd is not None and self.measured is not None
        # each step within the velocity limits over at most two periods, however late this tick is
        q = self.safety.target(target, self.q_cmd, min(dt, 2.0 / self.settings.rate))
        dq = self.safety.velocity(dq)
        tau = np.zeros_like(q)
        if self.bias is not None:
            # gravity changes slowly with the pose: recomputed every BIAS_EVERY ticks (~2 ms of CPU
            # in ten under load otherwise)
            if self._bias is None or self._bias_age >= BIAS_EVERY:
                self._bias = self.safety.torque(self.bias(q, self.measured.quat))  # type: ignore[operator]
                self._bias_age = 0
            self._bias_age += 1
            tau = self._bias
        self.q_cmd = q
        if self.state == "tracking":
            self.counters.errors.append(self.measured.q - q)
        return Command(q, dq, tau, self.kp.copy(), self.kd.copy(), started, reached)

    def _damping(self, started: list[StreamFrame], reached: list[StreamFrame]) -> Command:
        assert self.measured is not None
        q = self.measured.q.copy()
        self.q_cmd = q
        z = np.zeros_like(q)
        return Command(q, z, z.copy(), z.copy(), np.full_like(q, self.settings.damping_kd), started, reached)
