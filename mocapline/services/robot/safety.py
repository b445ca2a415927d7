"""What every command passes before it leaves: finite values, the joint range with a margin, a
step no faster than the joint's velocity limit, torques within the motor's limit. Each clamp is
counted by reason (per command in which it acted)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

CLAMP_REASONS = ("non_finite", "range", "velocity", "velocity_ff", "torque")


@dataclass
class Limits:
    lower: np.ndarray  # joint range, rad (already shrunk by the margin)
    upper: np.ndarray
    velocity: np.ndarray  # rad/s
    torque: np.ndarray  # N m

    @classmethod
    def with_margin(cls, ranges: np.ndarray, velocity: np.ndarray, torque: np.ndarray, margin: float) -> Limits:
        lower, upper = ranges[:, 0] + margin, ranges[:, 1] - margin
        mid = (ranges[:, 0] + ranges[:, 1]) / 2
        narrow = lower > upper  # a range narrower than twice the margin: its middle
        return cls(np.where(narrow, mid, lower), np.where(narrow, mid, upper), velocity, torque)


@dataclass
class SafetyFilter:
    limits: Limits
    clamps: Counter[str] = field(default_factory=Counter)

    def target(self, q: np.ndarray, previous: np.ndarray, dt: float, in_range: bool = True) -> np.ndarray:
        """``q`` made safe to command after ``previous`` (sent ``dt`` earlier); ``in_range`` False
        leaves a target past the joint's range as it is (a PD target, not a pose: the end stop and
        the torque limit bound what it pushes)."""
        lim = self.limits
        if not np.isfinite(q).all():
            self.clamps["non_finite"] += 1
            q = np.where(np.isfinite(q), q, previous)
        clipped = np.clip(q, lim.lower, lim.upper) if in_range else q
        if (clipped != q).any():
            self.clamps["range"] += 1
        step = lim.velocity * dt
        stepped = np.clip(clipped, previous - step, previous + step)
        if (stepped != clipped).any():
            self.clamps["velocity"] += 1
        return stepped

    def velocity(self, dq: np.ndarray) -> np.ndarray:
        if not np.isfinite(dq).all():
            self.clamps["non_finite"] += 1
            dq = np.where(np.isfinite(dq), dq, 0.0)
        out = np.clip(dq, -self.limits.velocity, self.limits.velocity)
        if (out != dq).any():
            self.clamps["velocity_ff"] += 1
        return out

    def pd_target(self, target: np.ndarray, q: np.ndarray, dq: np.ndarray, kp: np.ndarray, kd: np.ndarray,
                  limit: np.ndarray) -> np.ndarray:
        """``target`` kept where the motor's PD law ``kp (target - q) - kd dq`` at the measured
        state stays within ``limit`` (N m): a torque limit the motor has no field for, applied
        through the one field it has. Joints with kp 0 are left as they are."""
        k = np.where(kp > 0, kp, 1.0)
        lo, hi = q + (kd * dq - limit) / k, q + (kd * dq + limit) / k
        out = np.where(kp > 0, np.clip(target, lo, hi), target)
        if (out != target).any():
            self.clamps["torque"] += 1
        return out

    def torque(self, tau: np.ndarray) -> np.ndarray:
        if not np.isfinite(tau).all():
            self.clamps["non_finite"] += 1
            tau = np.where(np.isfinite(tau), tau, 0.0)
        out = np.clip(tau, -self.limits.torque, self.limits.torque)
        if (out != tau).any():
            self.clamps["torque"] += 1
        return out
