"""The retargeter's settings and their defaults."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

BACKENDS = ("fast", "mink")
# full: the model's joint ranges; human: the robot description's ``ik_range`` where it gives one
# (the G1's shoulder yaw kept to a human arm's twist, so that its shoulders never take the
# other Euler branch: what a learned policy can follow; docs/retarget.md "The shoulders' second branch")
JOINT_RANGES = ("full", "human")


def add_joint_ranges_argument(parser: argparse.ArgumentParser, default: str | None = "full", what: str = "") -> None:
    """``--joint-ranges full|human`` (``RetargetOptions.joint_ranges``), the same in every command
    that retargets; ``what`` says where a default of None comes from."""
    parser.add_argument("--joint-ranges", choices=JOINT_RANGES, default=default,
                        help="full: the robot model's joint ranges; human: the robot description's ik_range where "
                             "it gives one (the G1's shoulder yaw +-80 deg: the shoulders keep one branch, which a "
                             f"learned policy follows; docs/retarget.md){what}")


def add_no_footing_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--no-footing`` (``RetargetOptions.footing`` off), the same in every command that retargets;
    ``what`` adds what the command's default is."""
    parser.add_argument("--no-footing", action="store_true",
                        help="do not hold the performer's stance feet on the floor (the robot's feet then follow "
                             "the human's as they are: sliding, hovering, sinking; docs/retarget.md \"Feet on the "
                             f"ground\"){what}")


def add_keep_flight_argument(parser: argparse.ArgumentParser) -> None:
    """``--keep-flight`` (``RetargetOptions.keep_flight``), the same in every command that has it."""
    parser.add_argument("--keep-flight", action="store_true",
                        help="with footing, copy the performer's flight (a hop, a jump) as it is; by default the "
                             "body is lowered while neither foot is down, so that the lower sole stays within 3 cm "
                             "of the floor (docs/retarget.md \"Feet on the ground\")")

# Chosen by measurement (``mocapline bench retarget``; the figures: docs/benchmarks.md "Retarget",
# and docs/retarget.md "Choices, by measurement"):
# - lm_damping: lightly damped steps (0.1) converge fastest on reachable targets, but on targets the
#   G1 cannot reach (arms overhead past the shoulder-roll limit, a gimbal-locked shoulder) they
#   cycle between two poses, a jerk many times GMR's; 0.7 stays exact on reachable targets at 1x
#   and 4x motion speed, with jerk below GMR's.
# - steps until the cost drops < 2 % (2..8): the error of a fixed count at fewer steps a frame; a
#   floor of 2 keeps the jerk below a fixed count's (frames alternating 1 and 2 steps jitter).
# - arm rotation Huber 0.01 rad: position and hand errors below GMR's on every take, where quadratic
#   arm rotations twist the torso for arm orientations the G1 cannot take; a narrower width buys
#   error with a limit-to-limit swing on a real take. A posture pull, more steps, more damping, a
#   table-1 stage first, a log rotation error and a Cauchy loss changed the demo take's error little.
DEFAULT_ITERATIONS = 8
DEFAULT_TOLERANCE = 0.02
DEFAULT_MIN_ITERATIONS = 2
DEFAULT_POSTURE_WEIGHT = 0.0
DEFAULT_ARM_HUBER = 0.01
DEFAULT_STAGE1_ITERATIONS = 0
DEFAULT_LM_DAMPING = 0.7
DEFAULT_SOLVER_DAMPING = 1e-3
DEFAULT_SETTLE_ITERATIONS = 10
DEFAULT_FPS = 60.0


@dataclass
class RetargetOptions:
    iterations: int = DEFAULT_ITERATIONS  # cap on the steps of a frame
    tolerance: float = DEFAULT_TOLERANCE  # stop once a step lowers the cost by less than this share
    min_iterations: int = DEFAULT_MIN_ITERATIONS
    stage1_iterations: int = DEFAULT_STAGE1_ITERATIONS
    lm_damping: float = DEFAULT_LM_DAMPING
    solver_damping: float = DEFAULT_SOLVER_DAMPING
    posture_weight: float = DEFAULT_POSTURE_WEIGHT  # pull of every joint towards the standing pose
    arm_huber: float = DEFAULT_ARM_HUBER  # rad: arm rotation errors beyond it cost linearly (0: quadratic)
    settle_iterations: int = DEFAULT_SETTLE_ITERATIONS
    fps: float = DEFAULT_FPS
    velocity_limit: bool = True
    shoulder_poles: bool = True  # each shoulder keeps its branch at the gimbal pole (``shoulder_pole``)
    human_height: float | None = None
    ground_offset: float = 0.0
    backend: str = "fast"
    footing: bool = True  # stance feet held on the floor (``services/retarget/footing.py``)
    keep_flight: bool = False  # with footing: a hop's flight copied (by default the body is kept near the floor)
    joint_ranges: str = "full"  # JOINT_RANGES

    def validate(self) -> None:
        if self.iterations < 1:
            raise ValueError("iterations must be >= 1")
        if not 1 <= self.min_iterations <= self.iterations:
            raise ValueError("min_iterations must be in [1, iterations]")
        if not 0 <= self.tolerance < 1:
            raise ValueError("tolerance must be in [0, 1)")
        if not 0 <= self.stage1_iterations <= self.iterations:
            raise ValueError("stage1_iterations must be in [0, iterations]")
        if self.settle_iterations < 0:
            raise ValueError("settle_iterations must be >= 0")
        if min(self.lm_damping, self.solver_damping, self.arm_huber, self.posture_weight) < 0:
            raise ValueError("dampings, the arm Huber width and the posture weight must be >= 0")
        if not self.fps > 0:
            raise ValueError("fps must be > 0")
        if self.joint_ranges not in JOINT_RANGES:
            raise ValueError(f"joint ranges {self.joint_ranges!r}: choose from {JOINT_RANGES}")
        if self.backend not in BACKENDS:
            raise ValueError(f"backend {self.backend!r}: choose from {BACKENDS}")
        if self.human_height is not None and not self.human_height > 0:
            raise ValueError(f"human height must be > 0 m, got {self.human_height}")

    def describe(self) -> str:
        steps = (f"{self.iterations} steps/frame" if self.tolerance == 0 else
                 f"{self.min_iterations}-{self.iterations} steps/frame until the cost drops < {self.tolerance:g}")
        extra = (f", arm rotation Huber {self.arm_huber:g} rad" if self.arm_huber else "") + (
            f", posture {self.posture_weight:g}" if self.posture_weight else "") + (
            ", shoulders keep their branch at the gimbal pole" if self.shoulder_poles else "") + (
            ", stance feet held on the floor" if self.footing else "") + (
            ", flights kept" if self.footing and self.keep_flight else "") + (
            ", human joint ranges" if self.joint_ranges == "human" else "")
        return f"{steps}, lm_damping {self.lm_damping}, solver damping {self.solver_damping}{extra}"
