"""The policy controller: a learned whole-body controller between the stream and the motors. The
stream is the policy's reference (at the timeline's playback time: every frame applied in order,
counted as the pd controller counts them); the policy runs at its description's rate, LowCmd keeps
the bridge's rate carrying its latest targets with the policy's PD gains.

States (docs/robot.md, "The policy controller"):

- ``waiting``: no LowState yet (nothing is sent);
- ``standup``: from the measured pose into the policy's default pose, a PD ramp within the
  velocity limits (the robot on its feet, or hung on a band or gantry); a robot measured lying
  (past the fall limits) is not stood up: ``fallen``;
- ``balancing``: the policy with the reference at rest (the default pose, standing still): before
  the first frame and after the end;
- ``ramp_in``: the reference blended from where it was into the stream while the stream plays;
- ``tracking``: the stream; ``holding``: the stream ran dry, the reference holds still (zero
  velocity, the last frame's pose) and the policy keeps the robot standing, however long;
- ``ending``: END_OF_STREAM played: the reference blended back to rest, then ``balancing``;
- ``fallen``: the IMU past ``fall_tilt_deg`` or ``fall_rate``: damping, counted, logged, the
  bridge stops; ``estop``: damping until the process exits.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import numpy as np

from mocapline.core import quat as Q
from mocapline.robot.description import RobotDescription
from mocapline.services.robot.controller import Command, ControllerStates, ControlSettings, Measured
from mocapline.services.robot.counters import Ring, RobotCounters
from mocapline.services.robot.policy.description import PolicyDescription
from mocapline.services.robot.policy.observation import Observation, Proprio, Reference
from mocapline.services.robot.policy.rest_lean import RestLean
from mocapline.services.robot.safety import SafetyFilter
from mocapline.services.robot.timeline import Step, StreamFrame, Timeline

log = logging.getLogger("mocapline.robot")

STATES = ("waiting", "standup", "balancing", "ramp_in", "tracking", "holding", "ending", "fallen", "estop")
RUNNING = ("balancing", "ramp_in", "tracking", "holding", "ending")  # the policy drives
MIN_BLEND_S = 1.0  # the shortest blend of the reference into and out of a take


def tilt(quat: np.ndarray) -> float:
    """The angle (rad) between the IMU's z axis and the world's."""
    up = Q.rotate(np.asarray(quat, dtype=np.float64), np.array([0.0, 0.0, 1.0]))
    return float(np.arccos(np.clip(up[2], -1.0, 1.0)))


class PolicyController(ControllerStates):
    name = "policy"

    def __init__(self, robot: RobotDescription, settings: ControlSettings, safety: SafetyFilter,
                 counters: RobotCounters, policy: PolicyDescription, run: Callable[[np.ndarray], np.ndarray],
                 estop_damp_s: float = 0.5, inference_s: Callable[[], float] | None = None) -> None:
        self.robot, self.settings, self.safety, self.counters = robot, settings, safety, counters
        counters.clamps = safety.clamps
        self.policy, self.run = policy, run
        self.inference_s = inference_s
        self.topic = robot.low_level.lowcmd_topic
        self.modes = robot.motor_modes
        self.stop_s = estop_damp_s
        self.idx = policy.indices(robot)
        self.observation = Observation(policy, self.idx)
        self.rest_lean = RestLean(settings.rest_lean_s)
        # joints the policy does not drive: held at the robot's stand pose with its own gains
        self.default, self.kp, self.kd, self.torque = robot.stand.copy(), robot.kp.copy(), robot.kd.copy(), \
            safety.limits.torque.copy()
        self.default[self.idx], self.kp[self.idx], self.kd[self.idx] = policy.default, policy.kp, policy.kd
        self.torque[self.idx] = np.minimum(policy.torque, self.torque[self.idx])
        self.rest = Reference.at_rest(self.default, policy.stand_height)
        self.timeline = Timeline(max_speed=settings.max_speed, lag_target_s=settings.lag_target_ms / 1000,
                                 velocity_limits=safety.limits.velocity, play_root=True)
        self.state = counters.state = "waiting"
        self.measured: Measured | None = None
        self.q_cmd: np.ndarray | None = None
        self.since = 0.0
        self.ramp_from: np.ndarray | None = None
        self.ramp_s = 0.0
        self.blend_from = self.rest
        self.reference = self.rest
        self.last_action = np.zeros(len(self.idx))
        self.targets = self.default.copy()
        self.period = 1.0 / policy.rate_hz
        self.next_policy: float | None = None
        self.end_pending = False
        self.starved_since: float | None = None
        self.policy_steps = 0
        self.inference = Ring(2000)
        self.policy_at = Ring(200)
        self.observations: list[np.ndarray] | None = None  # tests: every observation fed, when a list

    @property
    def stopping(self) -> bool:
        return self.state == "fallen"

    # --- inputs ---

    def on_frame(self, frame: StreamFrame) -> None:
        self.timeline.push(frame)
        if frame.q is not None:
            self.end_pending = False

    # --- states ---

    def _fallen(self, m: Measured) -> str | None:
        s = self.settings
        angle = tilt(m.quat)
        if np.degrees(angle) > s.fall_tilt_deg:
            return f"tilted {np.degrees(angle):.0f} deg (limit {s.fall_tilt_deg:g})"
        rate = float(np.linalg.norm(m.gyro)) if m.gyro is not None else 0.0
        if rate > s.fall_rate:
            return f"turning at {rate:.1f} rad/s (limit {s.fall_rate:g})"
        return None

    def _blend(self, now: float) -> float:
        a = min(1.0, (now - self.since) / max(self.ramp_s, 1e-6))
        return a * a * (3 - 2 * a)

    def _blend_time(self, a: np.ndarray, b: np.ndarray) -> float:
        move = float(np.max(np.abs(a[self.idx] - b[self.idx])))
        return max(MIN_BLEND_S, move / max(self.settings.ramp_speed, 1e-6))

    # --- the tick ---

    def tick(self, now: float, dt: float) -> Command | None:
        m = self.measured
        if m is None or self.q_cmd is None:
            return None
        if self.state in ("estop", "fallen"):
            self.counters.damped_s += dt
            return self._damping([], [])
        why = self._fallen(m)
        if why is not None:
            self.counters.falls += 1
            log.error("robot fell (%s) in %s: damping, the bridge stops", why, self.state)
            self._go("fallen", now)
            return self._damping([], [])
        if self.state == "waiting":
            self.ramp_from = m.q.copy()
            self.ramp_s = max(self.settings.min_ramp_s,
                              float(np.max(np.abs(self.default - m.q))) / max(self.settings.ramp_speed, 1e-6))
            self._go("standup", now)
        if self.state == "standup":
            assert self.ramp_from is not None
            a = self._blend(now)
            if a < 1.0:
                return self._stiff(self.ramp_from + a * (self.default - self.ramp_from), now, [], [])
            self._go("balancing", now)
            self.observation.reset()
            self.last_action[:] = 0.0
            self.next_policy = now
        step = self.timeline.step(dt)
        self.reference = self._reference(step, now, dt)
        if self.next_policy is not None and now >= self.next_policy - 1e-9:
            self._policy_step(m, now)
        return self._stiff(self.targets, now, step.started if step else [], step.reached if step else [])

    def _reference(self, step: Step | None, now: float, dt: float) -> Reference:
        """The reference of this tick, and the state it puts the controller in."""
        stream = self._stream(step)
        if stream is not None:
            if self.state in ("ramp_in", "tracking"):
                self.rest_lean.observe(stream.root_quat, dt)
            stream = self.rest_lean.level(stream)
        if self.state == "balancing":
            if stream is None or not self._new_frames(step):
                return self.rest
            self.blend_from = self.reference
            self.ramp_s = self._blend_time(self.blend_from.joint_pos, stream.joint_pos)
            self._go("ramp_in", now)
        assert stream is not None or self.state == "ending"
        if self.state == "ramp_in":
            assert stream is not None
            a = self._blend(now)
            if a >= 1.0:
                self._go("tracking", now)
                self.starved_since = None
            return self.blend_from.blend(stream, a)
        if self.state in ("tracking", "holding"):
            assert stream is not None and step is not None
            self._watch_stall(step, now)
            if self.state == "ending":
                self.blend_from = stream
                self.ramp_s = self._blend_time(stream.joint_pos, self.rest.joint_pos)
                self.rest_lean.reset()  # the next take, even one that starts while this blends out, on its own
            else:
                self.counters.errors.append(self._measured_q() - stream.joint_pos)
                return stream
        if self.state == "ending":
            if stream is not None and self.timeline.queue:
                self.blend_from = self.reference
                self.ramp_s = self._blend_time(self.reference.joint_pos, stream.joint_pos)
                self._go("ramp_in", now)
                return self.reference
            a = self._blend(now)
            if a >= 1.0:
                self._go("balancing", now)
                return self.rest
            return self.blend_from.blend(self.rest, a)
        return self.rest

    def _new_frames(self, step: Step | None) -> bool:
        """A frame to play beyond the one the timeline holds (the first, or after the end)."""
        reached = step.reached if step is not None else []
        return any(f.q is not None for f in (*reached, *self.timeline.queue))

    def _measured_q(self) -> np.ndarray:
        assert self.measured is not None
        return self.measured.q

    def _stream(self, step: Step | None) -> Reference | None:
        if step is None or not step.q.size:
            return None
        if step.root is None or step.root_vel is None:
            root = np.array([0.0, 0.0, self.policy.stand_height, 1.0, 0.0, 0.0, 0.0])
            vel = np.zeros(6)
        else:
            root, vel = step.root, step.root_vel
        return Reference(root[:3], root[3:], vel[:3], vel[3:], step.q)

    def _watch_stall(self, step: Step, now: float) -> None:
        """tracking <-> holding; the end of the stream -> ending. Never damping: the policy stands."""
        if self.timeline.queue or step.reached:
            self.starved_since = None
            self._go("tracking", now)
            return
        if self.end_pending:
            self.end_pending = False
            self._go("ending", now)
            return
        if self.starved_since is None:
            self.starved_since = now
        if self.state == "tracking" and now - self.starved_since >= self.settings.stall_ms / 1000:
            self.counters.stalls += 1
            self._go("holding", now)

    def _policy_step(self, m: Measured, now: float) -> None:
        gyro = m.gyro if m.gyro is not None else np.zeros(3)
        obs = self.observation(self.reference, Proprio(m.q, m.dq, m.quat, gyro), self.last_action)
        if self.observations is not None:
            self.observations.append(obs)
        action = self.run(obs)
        if not np.all(np.isfinite(action)):
            self.safety.clamps["non_finite"] += 1
            action = np.where(np.isfinite(action), action, 0.0)
        self.last_action = action
        p = self.policy
        targets = self.default.copy()
        targets[self.idx] = p.default + p.action_scale * np.clip(action, -p.action_clip, p.action_clip)
        self.targets = targets
        self.policy_steps += 1
        self.policy_at.append(time.monotonic())
        if self.inference_s is not None:
            self.inference.append(self.inference_s())
        assert self.next_policy is not None
        self.next_policy = max(self.next_policy + self.period, now - self.period)  # no burst after a stall

    def _stiff(self, target: np.ndarray, now: float, started: list[StreamFrame],
               reached: list[StreamFrame]) -> Command:
        m = self.measured
        assert m is not None and self.q_cmd is not None
        q = self.safety.pd_target(target, m.q, m.dq, self.kp, self.kd, self.torque)
        # the policy's targets are not clipped to the joint range: it was trained with targets past
        # it (clipped 0.05 rad inside, the G1 fell on the demo take within 2.5 s; unclipped it stood)
        q = self.safety.target(q, self.q_cmd, 2.0 / self.settings.rate, in_range=self.state == "standup")
        self.q_cmd = q
        z = np.zeros_like(q)
        return Command(q, z, z.copy(), self.kp.copy(), self.kd.copy(), started, reached)

    def _damping(self, started: list[StreamFrame], reached: list[StreamFrame]) -> Command:
        assert self.measured is not None
        q = self.measured.q.copy()
        self.q_cmd = q
        z = np.zeros_like(q)
        return Command(q, z, z.copy(), z.copy(), np.full_like(q, self.settings.damping_kd), started, reached)

    # --- the heartbeat's figures ---

    def figures(self, now: float) -> dict[str, float | int | None]:
        inf = self.inference.values()
        at = self.policy_at.values()
        lean = self.rest_lean.pitch
        return {
            "policy_steps": self.policy_steps,
            "policy_rate_hz": float(np.count_nonzero(at > now - 1.0)),
            "inference_p50_ms": round(float(np.percentile(inf, 50)) * 1000, 3) if inf.size else None,
            "inference_p99_ms": round(float(np.percentile(inf, 99)) * 1000, 3) if inf.size else None,
            "rest_lean_deg": None if lean is None else round(math.degrees(lean), 2),
        }
