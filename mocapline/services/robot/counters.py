"""The robot bridge's counters: its heartbeat, its /metrics, its durable record."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mocapline.robot.unitree.g1 import GROUPS

WINDOW_TICKS = 5000  # the percentiles are over the last 10 s at 500 Hz


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
    lowstate_received: int = 0
    lowstate_rejected: Counter[str] = field(default_factory=Counter)
    last_posture_index: int | None = None
    state: str = "waiting"
    periods_s: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW_TICKS))
    sent_at: deque[float] = field(default_factory=lambda: deque(maxlen=2 * WINDOW_TICKS))
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=20_000))
    errors: deque[np.ndarray] = field(default_factory=lambda: deque(maxlen=WINDOW_TICKS))
    first_sent_at: float | None = None  # the achieved rate over the run: commands / (last - first)
    last_sent_at: float | None = None
    clamps: Counter[str] = field(default_factory=Counter)  # the safety filter's (shared)

    def rate_hz(self, now: float) -> float:
        recent = [t for t in self.sent_at if t > now - 1.0]
        return float(len(recent))

    def mean_rate_hz(self) -> float | None:
        if self.first_sent_at is None or self.last_sent_at is None or self.last_sent_at <= self.first_sent_at:
            return None
        return round((self.commands_sent - 1) / (self.last_sent_at - self.first_sent_at), 2)

    def tracking(self) -> dict[str, dict[str, float]]:
        if not self.errors:
            return {}
        err = np.abs(np.array(self.errors))
        out = {}
        for name, group in GROUPS.items():
            values = err[:, group].ravel()
            p50, p99 = np.percentile(values, [50, 99])
            out[name] = {"mean": round(float(values.mean()), 5), "p50": round(float(p50), 5),
                         "p99": round(float(p99), 5)}
        return out

    def durable_state(self) -> dict[str, Any]:
        return {"robot_received": self.robot_received, "robot_applied": self.robot_applied,
                "rejected": dict(self.rejected), "last_posture_index": self.last_posture_index}

    def restore(self, state: dict[str, Any]) -> None:
        self.robot_received = int(state.get("robot_received", 0))
        self.robot_applied = int(state.get("robot_applied", 0))
        self.rejected.update(state.get("rejected", {}))
        self.last_posture_index = state.get("last_posture_index")

    def as_dict(self, now: float) -> dict[str, Any]:
        periods = np.array(self.periods_s) if self.periods_s else np.zeros(1)
        lat = np.array(self.latencies_s) if self.latencies_s else None
        return {
            "robot_received": self.robot_received,
            "robot_applied": self.robot_applied,
            "rejected_by_reason": dict(sorted(self.rejected.items())),
            "commands_sent": self.commands_sent,
            "command_rate_hz": self.rate_hz(now),
            "command_rate_mean_hz": self.mean_rate_hz(),
            "period_p99_ms": round(float(np.percentile(periods, 99)) * 1000, 3),
            "deadline_misses": self.deadline_misses,
            "clamps_by_reason": dict(sorted(self.clamps.items())),
            "stalls": self.stalls,
            "damped_s": round(self.damped_s, 3),
            "catchup_ticks": self.catchup_ticks,
            "estops": self.estops,
            "transitions": dict(sorted(self.transitions.items())),
            "lowstate_received": self.lowstate_received,
            "lowstate_rejected_by_reason": dict(sorted(self.lowstate_rejected.items())),
            "tracking_error_rad": self.tracking(),
            "latency_p50_ms": None if lat is None else round(float(np.percentile(lat, 50)) * 1000, 3),
            "latency_p99_ms": None if lat is None else round(float(np.percentile(lat, 99)) * 1000, 3),
            "last_posture_index": self.last_posture_index,
            "robot_state": self.state,
        }
