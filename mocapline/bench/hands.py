"""The hands' part of `mocapline bench retarget` (a build with hands: ``g1_dex3``): the hand stage
(services/retarget/hands.py) on takes with finger motion, its output filter on and off side by side
on the same targets.

Takes: the emitter's gestures (open, fist, open, pinch, open, point; ``tools/emitter/motion.py``)
through capture's FK at 60 and 120 Hz, the same with glove noise (2 mm, Gaussian, on every hand
body; the rotations as sent), and the MVN streamer's gloves (``--format mvn --gloves``: MVN's
conventions, the same motion) at 60 Hz. Per run, both ways: fingertip error (mm, each tip against
its target, mean and p99), limit contacts (joint samples within 1e-3 rad of their range's end: a
fist rests there), jitter (RMS of the joints' second difference, rad/s^2), the lag (frames) that
best aligns the output with the unfiltered solution, and the stage's CPU time per frame (ms,
``time.thread_time``, targets included).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mocapline.core.frames import HumanFrame
from mocapline.formats.skeleton import SkeletonKind, get_skeleton
from mocapline.robot.description import RobotDescription
from mocapline.services.capture.fk import AxisForwardKinematics
from mocapline.services.retarget.hands import HandModel, HandOptions, HandRetargeter
from mocapline.services.retarget.quality import CONTACT_RAD
from mocapline.tools.emitter.motion import GESTURE_S, GESTURES, pose_channels
from mocapline.tools.emitter.mvn import MvnBody

TAKE_S = 2 * GESTURE_S * len(GESTURES)  # the gesture cycle twice
NOISE_M = 0.002
MAX_LAG = 4


@dataclass
class HandTake:
    name: str
    fps: float
    frames: list[HumanFrame]


def _frame(k: int, positions: np.ndarray, quaternions: np.ndarray, fingers: tuple[np.ndarray, np.ndarray]
           ) -> HumanFrame:
    return HumanFrame(k, 0, positions, quaternions, finger_positions=fingers[0], finger_quaternions=fingers[1])


def gesture_take(fps: float, noise_m: float = 0.0, seed: int = 0) -> HandTake:
    skeleton = get_skeleton(SkeletonKind.AXIS_STUDIO)
    fk = AxisForwardKinematics(skeleton)
    n = int(TAKE_S * fps)
    pos, quat = fk.bodies_and_hands_batch(np.stack([pose_channels(skeleton, "YXZ", k / fps) for k in range(n)]))
    if noise_m:
        pos = pos + np.random.default_rng(seed).normal(0.0, noise_m, pos.shape)
    name = "gestures" + (f" +{noise_m * 1000:.0f}mm" if noise_m else "")
    return HandTake(name, fps, [_frame(k, pos[k, :23], quat[k, :23], (pos[k, 23:], quat[k, 23:])) for k in range(n)])


def mvn_take(fps: float) -> HandTake:
    body = MvnBody()
    poses = [body.pose(k / fps) for k in range(int(TAKE_S * fps))]
    return HandTake("mvn gloves", fps, [_frame(k, p.positions, p.quaternions,
                                               (p.finger_positions, p.finger_quaternions))
                                        for k, p in enumerate(poses)])


def hand_takes() -> list[HandTake]:
    return [gesture_take(60.0), gesture_take(120.0), gesture_take(60.0, NOISE_M), mvn_take(60.0)]


@dataclass
class HandRun:
    take: str
    fps: float
    frames: int
    tip_mm: float
    tip_p99_mm: float
    contacts: int
    jitter: float
    lag_frames: int
    ms_per_frame: float

    def as_dict(self) -> dict[str, float | int | str]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def _lag(q: np.ndarray, raw: np.ndarray) -> int:
    """The shift (frames) of ``q`` behind ``raw`` that matches them best (least squares)."""
    errors = [float(np.mean((q[lag:] - raw[: len(raw) - lag]) ** 2)) for lag in range(MAX_LAG + 1)]
    return int(np.argmin(errors))


def run_hands(take: HandTake, hands: HandModel, smooth: bool) -> tuple[HandRun, np.ndarray]:
    solver = HandRetargeter(hands, HandOptions(smooth=smooth))
    out = np.empty((len(take.frames), len(hands.rest)))
    targets = []
    cpu = 0.0
    for k, frame in enumerate(take.frames):
        t0 = time.thread_time()
        out[k] = solver.retarget(frame)
        cpu += time.thread_time() - t0
        targets.append(solver.targets(frame))
    errors = np.array([solver.tip_error(q, t) for q, t in zip(out, targets, strict=True)]) * 1000.0
    near = np.minimum(out - hands.lower, hands.upper - out) < CONTACT_RAD
    jitter = float(np.sqrt(np.mean(np.diff(out, 2, axis=0) ** 2))) * take.fps ** 2
    run = HandRun(take.name, take.fps, len(out), float(errors.mean()), float(np.percentile(errors, 99)),
                  int(near.sum()), jitter, 0, 1000.0 * cpu / len(out))
    return run, out


def hand_bench(robot: RobotDescription) -> list[dict[str, object]]:
    """Per take: the filtered output (what the stage sends) beside the unfiltered solution."""
    hands = HandModel(robot)
    rows: list[dict[str, object]] = []
    for take in hand_takes():
        raw, q_raw = run_hands(take, hands, smooth=False)
        smooth, q = run_hands(take, hands, smooth=True)
        smooth.lag_frames = _lag(q, q_raw)
        rows.append({"take": take.name, "rate": take.fps, "frames": raw.frames, "smoothed": smooth.as_dict(),
                     "unfiltered": raw.as_dict(),
                     "jitter_ratio": round(smooth.jitter / raw.jitter, 3) if raw.jitter else None})
    return rows


def hand_table(rows: list[dict[str, object]], robot: RobotDescription) -> list[str]:
    lines = [
        "",
        f"hands ({robot.hands.kind if robot.hands else '-'}): the hand stage on takes with finger motion; each cell: "
        "filtered (what is sent) | unfiltered",
        "tip mm: fingertips against their targets; lim: joint samples at a range's end; jitter: RMS second "
        "difference, rad/s^2; lag: frames; ms: CPU per frame",
        f"{'take':<22} {'Hz':>4} {'tip mm':>11} {'p99':>11} {'lim':>11} {'jitter':>13} {'ratio':>6} {'lag':>4} "
        f"{'ms':>11}",
    ]
    for r in rows:
        s, u = r["smoothed"], r["unfiltered"]
        assert isinstance(s, dict) and isinstance(u, dict)

        def pair(key: str, fmt: str, width: int, s: dict = s, u: dict = u) -> str:
            return f"{format(s[key], fmt)}|{format(u[key], fmt)}".rjust(width)

        lines.append(f"{r['take']:<22} {r['rate']:>4.0f} {pair('tip_mm', '.1f', 11)} {pair('tip_p99_mm', '.1f', 11)} "
                     f"{pair('contacts', 'd', 11)} {pair('jitter', '.0f', 13)} {r['jitter_ratio']:>6.2f} "
                     f"{s['lag_frames']:>4} {pair('ms_per_frame', '.3f', 11)}")
    return lines
