"""The reference's rest lean, calibrated from the take, taken off the pitch the policy sees.

A capture's pelvis leans where a robot's stands level: the bundled CMU takes' retargeted pelvis
pitches forward 6-9 deg on average, where a policy's rest (TWIST2's ``DEFAULT_MIMIC_OBS``) is
level and the example clips of TWIST2's own pipeline lean -4 to +3 deg. A policy told to lean 8 deg
steps forward to catch it and walks off (docs/retarget.md "Feet on the ground"). So the policy sees
the reference's pitch relative to the performer's own rest: its mean over the first ``seconds`` of
each take (the performer standing, as a take starts), then held for the rest of it. The roll is
left as streamed (the CMU takes' mean roll is within 1 deg of level: what it carries is the
sideways sway of a step), and so are the joints, height, heading and velocities. Calibrated again
for each take (perhaps another performer): from its END_OF_STREAM on, so a take that starts while
the robot is still going back to rest is calibrated on its own too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from mocapline.services.robot.policy.observation import Reference, from_yaw_pitch_roll, yaw_pitch_roll


@dataclass
class RestLean:
    """The mean pitch of the reference over its first ``seconds`` (0: no calibration)."""

    seconds: float
    elapsed: float = 0.0
    total: float = 0.0  # time-weighted sum of the pitch, rad s

    def reset(self) -> None:
        self.elapsed = self.total = 0.0

    @property
    def pitch(self) -> float | None:
        """rad, the rest so far; None before the first observation or when off."""
        return self.total / self.elapsed if self.elapsed > 0 else None

    def observe(self, quat: np.ndarray, dt: float) -> None:
        """The reference's orientation, played for ``dt`` s: counted while the calibration lasts."""
        if self.elapsed >= self.seconds:
            return
        self.elapsed += dt
        self.total += dt * yaw_pitch_roll(quat)[1]

    def level(self, ref: Reference) -> Reference:
        """``ref`` with the rest's pitch taken off its root's (its heading and roll kept)."""
        rest = self.pitch
        if rest is None:
            return ref
        yaw, pitch, roll = yaw_pitch_roll(ref.root_quat)
        return replace(ref, root_quat=from_yaw_pitch_roll(yaw, pitch - rest, roll))
