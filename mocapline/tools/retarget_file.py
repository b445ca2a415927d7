"""`mocapline retarget-file TAKE.bvh`: a BVH take of any supported skeleton -> a reference clip of a
robot build (``--robot-model``, default the G1).

What GMR users do with ``bvh_to_robot``, offline: the BVH is read (any rotation orders and channel
counts, namespaced joints, any frame time; ``mocapline.formats.bvh``), its skeleton is picked by
``--skeleton`` (``auto`` detects it from the joint names: Axis Studio, Mixamo, CMU), the performer's
height is estimated from the take standing (or, for a take that never stands straight, from its
skeleton's legs) unless ``--human-height`` is given, every frame is retargeted by
the same IK as ``mocapline retarget`` at the take's own rate (the live service's poses, frame by
frame), and the result is written in the clip contract of ``mocapline export`` (``CLIP.npz``: 50 Hz
``time``, ``q``, ``qd``, ``root_pose``, ``body_pos_w`` / ``body_quat_w``, ``joint_names``,
``body_names``, ``policy_clock``, ...; ``--csv`` adds ``CLIP.csv``), by default ``./TAKE_STEM.npz`` in
the working directory (``inspect`` and ``plot`` read it). A progress bar goes to
stderr, one JSON summary line to stdout: frames, mean and p99 position error, overall and by body
group (hands, feet, pelvis, the rest: ``quality.GROUPS``), the joints' jerk, joint-limit contacts, configuration
jumps, limit-to-limit swings, IK failures, seconds and CPU seconds.
``--baseline`` also runs the GMR-equivalent IK on the same frames and reports its time and error.

Exit codes: 0 written, 2 bad input (unreadable or malformed BVH, unknown skeleton, bad option).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.options import EnvArgumentParser, non_negative_int, positive_float, positive_int
from mocapline.formats.bvh import BvhError, gmr_bodies, load_bvh, take_height
from mocapline.formats.takefile import TakeFileError, TakeKind, default_output, detect, refusal
from mocapline.robot import model as robot_model
from mocapline.robot.registry import DEFAULT_ROBOT, add_robot_model_argument, get_robot
from mocapline.services.retarget.config import BVH_SKELETONS, IKConfigError, detect_bvh_skeleton
from mocapline.services.retarget.footing import foot_geometry
from mocapline.services.retarget.gmr import GmrBaseline
from mocapline.services.retarget.ground_quality import robot_ground
from mocapline.services.retarget.ik.options import (
    RetargetOptions,
    add_joint_ranges_argument,
    add_keep_flight_argument,
    add_no_footing_argument,
)
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.quality import evaluate, first_frames_error
from mocapline.tools.recorder.export import DEFAULT_FPS, build_clip, resample, write_clip_files

PROG = "mocapline retarget-file"
# The last day the clips a take converts to changed (the IK, the footing, the resampling): in each
# clip's meta and in retarget-dataset's settings hash, so that a rerun redoes what older code made.
CONVERSION = "2026-12-04"


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("take", type=Path, help="a .bvh file")
    add_file_settings_arguments(p)
    p.add_argument("--out", "-o", type=Path, default=None,
                   help="the .npz to write (default: ./TAKE_STEM.npz in the working directory, never beside the take)")
    p.add_argument("--csv", action="store_true", help="also write CLIP.csv next to the .npz")
    p.add_argument("--baseline", action="store_true", help="also time the GMR-equivalent IK on the same frames")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


class Progress:
    """A one-line progress bar on a terminal stream, redrawn at most ~10 times a second."""

    def __init__(self, total: int, stream=sys.stderr, enabled: bool = True, width: int = 30) -> None:
        self.total, self.stream, self.enabled, self.width = max(total, 1), stream, enabled, width
        self._last = 0.0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self._last < 0.1 and done < self.total):
            return
        self._last = now
        filled = int(self.width * done / self.total)
        self.stream.write(f"\rretargeting [{'#' * filled}{'.' * (self.width - filled)}] {done}/{self.total}")
        if done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


class RetargetFileError(ValueError):
    """A take that cannot be converted, and why (bad input: exit 2, or a dataset's manifest reason)."""


@dataclass(frozen=True)
class FileSettings:
    """How a BVH take becomes a clip: what ``retarget-file`` and ``retarget-dataset`` both take."""

    robot_model: str = DEFAULT_ROBOT
    skeleton: str = "auto"
    fps: float = DEFAULT_FPS
    human_height: float | None = None
    start: int = 0
    frames: int | None = None
    footing: bool = True
    keep_flight: bool = False  # RetargetOptions.keep_flight
    joint_ranges: str = "full"  # RetargetOptions.joint_ranges

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FileSettings:
        """The settings that :func:`add_file_settings_arguments` declared, as parsed."""
        return cls(robot_model=args.robot_model, skeleton=args.skeleton, fps=args.fps,
                   human_height=args.human_height, start=args.start, frames=args.frames,
                   footing=not args.no_footing, keep_flight=args.keep_flight, joint_ranges=args.joint_ranges)

    def validate(self) -> None:
        if not self.fps > 0:
            raise RetargetFileError(f"--fps must be > 0, got {self.fps}")
        if self.human_height is not None and not 0.5 < self.human_height < 2.5:
            raise RetargetFileError(f"--human-height {self.human_height} m: expected a person's height (0.5-2.5 m)")


def add_file_settings_arguments(p: argparse.ArgumentParser, each: bool = False) -> None:
    """The flags of :class:`FileSettings`, for ``retarget-file`` (one take) and ``retarget-dataset``
    (``each``: the same settings for every take)."""
    of = " of each take" if each else ""
    add_robot_model_argument(p)
    p.add_argument("--skeleton", default="auto",
                   help=f"skeleton of the BVH{of}: {', '.join(BVH_SKELETONS)}, auto (detected from its joint names) or "
                        "an IK config JSON with a 'bvh' section")
    p.add_argument("--fps", type=positive_float, default=DEFAULT_FPS, help="clip rate (Hz)")
    p.add_argument("--human-height", type=positive_float, default=None,
                   help=f"performer height in m{' for every take' if each else ''} (default: estimated"
                        f"{' per take' if each else ''})")
    whole = " (a .mlrec is converted whole)" if each else ""
    p.add_argument("--start", type=non_negative_int, default=0, help=f"first frame{of} to use{whole}")
    p.add_argument("--frames", type=positive_int, default=None,
                   help=f"number of frames{of} to use (default: to the end){whole}")
    add_no_footing_argument(p, " (by default they are held: contacts found over the whole take, the floor "
                               "calibrated from it)")
    add_keep_flight_argument(p)
    add_joint_ranges_argument(p, what=" (in each take's settings)" if each else "")


@dataclass
class Converted:
    """A converted take: the clip's arrays and the figures of its summary line."""

    clip: dict[str, np.ndarray]
    summary: dict[str, Any]


def convert(take: Path, settings: FileSettings, *, baseline: bool = False,
            progress: Callable[[int, int], None] | None = None) -> Converted:
    """The one BVH -> clip conversion (RetargetFileError: why not). ``progress(done, total)`` per frame."""
    settings.validate()
    try:
        if take.is_file() and (kind := detect(take)) is not TakeKind.BVH and kind is not TakeKind.UNKNOWN:
            raise TakeFileError(refusal(take, kind, "retarget-file"))
        motion = load_bvh(take)
        stop = None if settings.frames is None else settings.start + settings.frames
        if settings.start < 0 or settings.start >= motion.frames or (stop is not None and stop <= settings.start):
            raise RetargetFileError(f"{take}: --start/--frames select no frames (the take has {motion.frames})")
        motion = motion.slice(settings.start, stop)
        robot = get_robot(settings.robot_model)
        model = robot_model.load_ik_model(robot)
        config, skeleton = detect_bvh_skeleton(motion, settings.skeleton, robot=robot, model=model)
        positions, quaternions = gmr_bodies(motion, skeleton)
    except (BvhError, IKConfigError, TakeFileError) as exc:
        raise RetargetFileError(str(exc)) from None
    height, height_from = ((settings.human_height, "given") if settings.human_height
                           else take_height(motion, skeleton, positions))
    n = motion.frames
    ours = Retargeter(config, RetargetOptions(fps=motion.fps, human_height=height, footing=settings.footing,
                                           keep_flight=settings.keep_flight, joint_ranges=settings.joint_ranges),
                      robot=robot, model=model)
    ours.plan_take(positions, quaternions)  # offline: the whole take's floor, contacts and holds (look-ahead)
    qpos = np.empty((n, model.nq))
    failed = np.zeros(n, dtype=bool)
    # the quality's targets: the last table's, from the take's bodies as they are (before the poles
    # and the footing moved them), as the IK computed them; computed here only where it handed none
    targets = np.empty((n, len(ours.table_entries()), 7))
    missing = []
    t0, cpu0 = time.perf_counter(), time.thread_time()
    for f in range(n):
        result = ours.retarget(positions[f], quaternions[f])
        qpos[f], failed[f] = result.qpos, result.ik_failed
        if result.targets is None:
            missing.append(f)
        else:
            targets[f] = result.targets
        if progress is not None:
            progress(f + 1, n)
    seconds, cpu_seconds = time.perf_counter() - t0, time.thread_time() - cpu0
    for f in missing:
        targets[f] = ours.targets(positions[f], quaternions[f])
    limits = config.velocity_limits(robot_model.joint_names(model))
    quality = evaluate(model, ours.table_entries(), targets, qpos, motion.fps, limits, root=config.human_root_name)
    first = first_frames_error(model, ours.table_entries(), targets, qpos)
    feet = foot_geometry(robot)
    ground = robot_ground(model, feet, qpos, positions, motion.fps)
    summary: dict[str, Any] = {
        "take": str(take), "robot_model": robot.name, "skeleton": skeleton.name, "frames": n,
        "source_fps": round(motion.fps, 3),
        "human_height_m": round(height, 3), "height_from": height_from, "err_mm": round(quality.err_mm, 1),
        "err_p99_mm": round(quality.err_p99_mm, 1),
        "hands_mm": round(quality.hands_mm, 1), "feet_mm": round(quality.feet_mm, 1),
        "pelvis_mm": round(quality.pelvis_mm, 1), "rest_mm": round(quality.rest_mm, 1),
        "hands_p99_mm": round(quality.hands_p99_mm, 1), "feet_p99_mm": round(quality.feet_p99_mm, 1),
        "pelvis_p99_mm": round(quality.pelvis_p99_mm, 1), "rest_p99_mm": round(quality.rest_p99_mm, 1),
        "rot_deg": round(quality.rot_deg, 1), "jerk": round(quality.jerk, 1),
        "limit_contacts": quality.limit_contacts, "jumps": quality.jumps,
        "swings": quality.swings, "velocity_violations": quality.velocity_violations,
        "first_frame_err_mm": round(first, 1),
        "skate_cm_s": round(ground.skate_cm_s, 1), "float_share": round(ground.float_share, 4),
        "penetration_max_cm": round(ground.penetration_max_cm, 2),
        "ik_failed": int(failed.sum()), "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3), "frames_per_s": round(n / max(seconds, 1e-9), 1),
    }
    if baseline:
        base = GmrBaseline(config, model, robot_model.default_qpos(robot, model), height)
        t0, cpu0 = time.perf_counter(), time.thread_time()
        base_q = np.array([base.retarget(positions[f], quaternions[f]) for f in range(n)])
        base_s, base_cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        bq = evaluate(model, ours.table_entries(), targets, base_q, motion.fps, limits, root=config.human_root_name)
        summary.update({"baseline_seconds": round(base_s, 3), "speedup": round(base_s / seconds, 1),
                        "cpu_speedup": round(base_cpu / cpu_seconds, 1),
                        "baseline_err_mm": round(bq.err_mm, 1), "baseline_hands_mm": round(bq.hands_mm, 1),
                        "baseline_jerk": round(bq.jerk, 1)})
        bg = robot_ground(model, feet, base_q, positions, motion.fps)
        summary.update({"baseline_skate_cm_s": round(bg.skate_cm_s, 1),
                        "baseline_float_share": round(bg.float_share, 4),
                        "baseline_penetration_max_cm": round(bg.penetration_max_cm, 2)})

    meta = {
        "input": str(take), "input_sha256": hashlib.sha256(take.read_bytes()).hexdigest(),
        "skeleton": skeleton.name, "config": config.source, "human_height": height, "start": settings.start,
        "options": ours.options.describe(),
        "generator": PROG, "conversion": CONVERSION,
    }
    r = resample(np.arange(n), qpos[:, 0:3], qpos[:, 3:7], qpos[:, 7:], motion.fps, settings.fps,
                 ik_failed=failed)
    return Converted(build_clip(r, settings.fps, motion.fps, meta, robot), summary)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = FileSettings.from_args(args)
    bar = Progress(0, enabled=not args.no_progress)

    def progress(done: int, total: int) -> None:
        bar.total = max(total, 1)
        bar.update(done)

    try:
        converted = convert(args.take, settings, baseline=args.baseline, progress=progress)
    except RetargetFileError as exc:
        return _fail(str(exc))
    out = Path(args.out or default_output(args.take, ".npz"))
    summary = {**converted.summary, **write_clip_files(out, converted.clip, csv=args.csv)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
