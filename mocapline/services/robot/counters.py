"""The robot bridge's counters: its heartbeat, its /metrics, its durable record.

The per-tick samples (periods, tracking errors, send times, latencies) go into fixed numpy rings:
appending costs no allocation in the control loop, and the heartbeat (NATS' thread, and the
metrics sync in the loop itself) reads copies, never a container being changed under it. Their
percentiles are computed at most once a second.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mocapline.core.counters import PolicyCounts, RobotCounts, RobotHandCounts, TrackingError
from mocapline.robot.description import RobotDescription

WINDOW_TICKS = 5000  # the percentiles are over the last 10 s at 500 Hz


class Ring:
    """The last ``size`` samples (each a float or a row of ``width`` floats)."""

    def __init__(self, size: int, width: int = 0) -> None:
        self.data = np.zeros((size, width) if width else size)
        self.next = 0
        self.count = 0

    def append(self, value: Any) -> None:
        self.data[self.next] = value
        self.next = (self.next + 1) % len(self.data)
        self.count = min(self.count + 1, len(self.data))

    def values(self) -> np.ndarray:
        return self.data[: self.count].copy()

    def __len__(self) -> int:
        return self.count


@dataclass
class RobotCounters:
    robot_received: int = 0  # valid frames taken from the stream
    robot_applied: int = 0  # frames whose target reached a command
    rejected: Counter[str] = field(default_factory=Counter)  # frames refused, by reason (non_finite, ...)
    commands_sent: int = 0
    deadline_misses: int = 0  # control ticks that started more than half a period late
    stalls: int = 0  # times the stream ran dry while tracking (hold)
    damped_s: float = 0.0  # time in damping (stall past --stall-damp-ms, e-stop)
    catchup_ticks: int = 0  # commands played faster than 1x to make up lag
    transitions: Counter[str] = field(default_factory=Counter)  # "tracking->holding": n
    estops: int = 0
    falls: int = 0  # the policy controller: the IMU past its fall limits (damping, the bridge stops)
    lowstate_received: int = 0
    lowstate_rejected: Counter[str] = field(default_factory=Counter)
    lowstate_unsealed: int = 0  # LowStates taken with their crc field 0 (Unitree's simulators do not seal)
    last_posture_index: int | None = None
    applied_ticks_ms: tuple[int, int] | None = None  # the LowState tick at the first and the last applied
    state: str = "waiting"
    periods_s: Ring = field(default_factory=lambda: Ring(WINDOW_TICKS))
    sent_at: Ring = field(default_factory=lambda: Ring(2 * WINDOW_TICKS))
    latencies_s: Ring = field(default_factory=lambda: Ring(20_000))
    # the robot's joints and their groups (legs, waist, arms: stream indices); the ring of
    # measured - commanded is as wide as the robot
    groups: dict[str, np.ndarray] = field(kw_only=True)
    joint_count: int = field(kw_only=True)
    errors: Ring = field(init=False)
    _stats: dict[str, Any] | None = field(default=None, repr=False)
    _stats_at: float = field(default=0.0, repr=False)
    first_sent_at: float | None = None  # the achieved rate over the run: commands / (last - first)
    last_sent_at: float | None = None
    clamps: Counter[str] = field(default_factory=Counter)  # the safety filter's (shared)

    def __post_init__(self) -> None:
        self.errors = Ring(WINDOW_TICKS, self.joint_count)

    @classmethod
    def for_robot(cls, robot: RobotDescription, **values: Any) -> RobotCounters:
        return cls(groups=robot.groups, joint_count=robot.joint_count, **values)

    def rate_hz(self, now: float) -> float:
        return float(np.count_nonzero(self.sent_at.values() > now - 1.0))

    def mean_rate_hz(self) -> float | None:
        if self.first_sent_at is None or self.last_sent_at is None or self.last_sent_at <= self.first_sent_at:
            return None
        return round((self.commands_sent - 1) / (self.last_sent_at - self.first_sent_at), 2)

    def tracking(self) -> dict[str, dict[str, float]]:
        if not len(self.errors):
            return {}
        err = np.abs(self.errors.values())
        out = {}
        for name, group in self.groups.items():
            if not len(group):
                continue
            values = err[:, group].ravel()
            p50, p99 = np.percentile(values, [50, 99])
            out[name] = {"mean": round(float(values.mean()), 5), "p50": round(float(p50), 5),
                         "p99": round(float(p99), 5)}
        return out

    def applied(self, posture_index: int, tick_ms: int | None) -> None:
        """A frame's target reached a command, at the robot's ``tick_ms`` (None before a LowState)."""
        self.robot_applied += 1
        self.last_posture_index = posture_index
        if tick_ms is not None:
            first = self.applied_ticks_ms[0] if self.applied_ticks_ms is not None else tick_ms
            self.applied_ticks_ms = (first, tick_ms)

    def durable_state(self) -> dict[str, Any]:
        return {"robot_received": self.robot_received, "robot_applied": self.robot_applied,
                "rejected": dict(self.rejected), "last_posture_index": self.last_posture_index}

    def restore(self, state: dict[str, Any]) -> None:
        self.robot_received = int(state.get("robot_received", 0))
        self.robot_applied = int(state.get("robot_applied", 0))
        self.rejected.update(state.get("rejected", {}))
        self.last_posture_index = state.get("last_posture_index")

    def stats(self) -> dict[str, Any]:
        """The windowed percentiles, recomputed at most once a second (they cost milliseconds)."""
        wall = time.monotonic()
        if self._stats is None or wall - self._stats_at >= 1.0:
            periods = self.periods_s.values()
            lat = self.latencies_s.values()
            self._stats = {
                "period_p99_ms": round(float(np.percentile(periods, 99)) * 1000, 3) if periods.size else None,
                "tracking_error_rad": self.tracking(),
                "latency_p50_ms": round(float(np.percentile(lat, 50)) * 1000, 3) if lat.size else None,
                "latency_p99_ms": round(float(np.percentile(lat, 99)) * 1000, 3) if lat.size else None,
            }
            self._stats_at = wall
        return self._stats

    def record(self, now: float, *, bridge_pending: int, lag_s: float, ended: bool, controller: str = "pd",
               policy: PolicyCounts | None = None, arm_sdk_weight: float | None = None,
               hands: RobotHandCounts | None = None) -> RobotCounts:
        """The heartbeat: these counts with the bridge's timeline state and its controller's own."""
        stats = self.stats()
        return RobotCounts(
            robot_received=self.robot_received,
            robot_applied=self.robot_applied,
            rejected_by_reason=dict(sorted(self.rejected.copy().items())),
            commands_sent=self.commands_sent,
            command_rate_hz=self.rate_hz(now),
            command_rate_mean_hz=self.mean_rate_hz(),
            period_p99_ms=stats["period_p99_ms"],
            deadline_misses=self.deadline_misses,
            clamps_by_reason=dict(sorted(self.clamps.copy().items())),
            stalls=self.stalls,
            damped_s=round(self.damped_s, 3),
            catchup_ticks=self.catchup_ticks,
            estops=self.estops,
            transitions=dict(sorted(self.transitions.copy().items())),
            lowstate_received=self.lowstate_received,
            lowstate_rejected_by_reason=dict(sorted(self.lowstate_rejected.copy().items())),
            lowstate_unsealed=self.lowstate_unsealed,
            tracking_error_rad={name: TrackingError(**e) for name, e in stats["tracking_error_rad"].items()},
            latency_p50_ms=stats["latency_p50_ms"],
            latency_p99_ms=stats["latency_p99_ms"],
            last_posture_index=self.last_posture_index,
            robot_state=self.state,
            bridge_pending=bridge_pending,
            lag_s=lag_s,
            ended=ended,
            controller=controller,
            falls=self.falls,
            policy=policy,
            arm_sdk_weight=arm_sdk_weight,
            hands=hands,
            applied_ticks_ms=list(self.applied_ticks_ms) if self.applied_ticks_ms is not None else None,
        )
