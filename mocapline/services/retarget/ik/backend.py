"""What the retargeter asks of an IK backend, and what both backends share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import mink
import numpy as np

from ..config import MatchEntry

SOLVER = "daqp"
# An adaptive frame stops at this weighted cost: the targets are met (a reachable pose).
COST_FLOOR = 1e-5
# The first frame of a take starts from the default pose, far from the answer, where damping
# proportional to the error would crawl: it is damped lightly (jitter is no concern there).
SETTLE_LM_DAMPING = 0.05
# What a frame's solve may fail with on numbers, not on code: a non-finite input or solution, a
# singular system, a QP without solution (daqp's exit flag < 1, or mink.solve_ik's). The retargeter
# counts these as ``ik_failed`` frames; anything else is a bug and raises.
NUMERIC_FAILURES: tuple[type[Exception], ...] = (FloatingPointError, np.linalg.LinAlgError, mink.NoSolutionFound)
_ARM_BODIES = ("Arm", "ForeArm", "Hand")


def is_arm(entry: MatchEntry) -> bool:
    """An entry whose rotation error is Huber-robust (``arm_huber``)."""
    return entry.human_body.endswith(_ARM_BODIES)


@dataclass
class Posture:
    """A posture pull ``posture * (q - neutral)`` per hinge joint, added to the residual (mink's
    PostureTask)."""

    neutral: np.ndarray
    posture: np.ndarray

    def __post_init__(self) -> None:
        self.active = bool(np.any(self.posture))

    def residual(self, q: np.ndarray) -> np.ndarray:
        return self.posture * (q - self.neutral) if self.active else np.zeros(0)


class IKBackend(Protocol):
    """What :class:`~.retargeter.Retargeter` needs of an IK solver: the fast one (numpy + daqp) and the
    reference one (mink.solve_ik) both provide it, and a test checks they reach the same answer."""

    @property
    def qpos(self) -> np.ndarray: ...

    def set_qpos(self, q: np.ndarray) -> None: ...

    def reset(self) -> None: ...

    def begin_frame(self, settled: bool) -> None:
        """A new frame: ``settled`` once the take's first frame has converged."""
        ...

    def set_targets(self, table: int, poses: np.ndarray) -> None: ...

    def set_weights(self, table: int, entry: int, position: float, rotation: float) -> None:
        """One entry's position and rotation weights from now on (a stance foot's, ``footing``)."""
        ...

    def step(self, table: int, final_share: float = 0.0) -> tuple[float, float | None]:
        """One step on ``table``; the weighted cost before and after it. ``final_share`` > 0: a
        backend may make this the frame's last step, taken without evaluating the cost after it
        (returned as None), when the step is predicted to lower the cost by at most this share."""
        ...
