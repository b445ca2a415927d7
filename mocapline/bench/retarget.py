"""`mocapline bench retarget [--json]`: mocapline's IK against a GMR-equivalent baseline, on real
motion-capture takes beside synthetic ones.

Takes (:func:`take_set`), each run at two frame rates:

- real: every ``assets/motion/*.bvh`` (CMU Graphics Lab takes, see ``assets/motion/README.md``)
  through ``mocapline.formats.bvh`` and the detected skeleton config, performer height estimated
  from the take; at the take's own rate (120 Hz) and decimated to 30 Hz (GMR's BVH rate, where a
  frame asks the most of the IK);
- demo: ``assets/demo/walk_60hz.mlrec`` decoded exactly as capture does, at 60 Hz and
  interpolated to 120 Hz (positions linear, rotations slerp);
- robot: a synthetic motion of the robot mapped back to the human bodies the Axis config maps
  exactly onto it (known answer), at 60 and 120 Hz;
- human: a walking / arm-raising take on the Axis Studio skeleton, at 60 and 120 Hz.

The baseline is :class:`mocapline.services.retarget.gmr.GmrBaseline` (GMR's algorithm, re-written);
both start from the same pose, get the same targets (same config, same human height) on the same
mesh-free model of the robot (``--robot-model``, default the G1), and are
timed frame by frame alternately (baseline, then ours). The ratio is
by each IK's own CPU time (``time.thread_time``: both run in this thread, and their BLAS calls are
too small to use OpenBLAS's threads), so that other sessions on a shared machine do not move it: a
frame of ours is an order of magnitude shorter than GMR's, so one preemption of a few ms weighs that
much more in it, and wall-clock ratios swung widely between runs under load (docs/benchmarks.md).
The wall-clock ratio is printed beside it (``wall``).

Per run, for both (see ``mocapline.services.retarget.quality``): frames/s and the ratio; mean and
p99 position error over the position-weighted frames, and for hands / feet / pelvis (mm);
orientation error (deg); joint jerk (rad/s^3); configuration jumps; limit-to-limit swings (a joint
sweeping > 80 % of its range and > pi rad within 3 s); joint-limit contacts (frames); range and
velocity violations. ``--json``: the same per run, plus an overall line.

``--overhead`` runs a stress sweep instead: sideways raises to overhead that pass the robot's
shoulder's gimbal pole at planes from 15 deg in front to 15 deg behind it, on the same side every
raise or on alternate ones, with the shoulder poles (``services/retarget/shoulder_pole.py``),
without them and the baseline: accuracy, jumps and limit-to-limit swings, no timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import mujoco
import numpy as np

from mocapline.bench.hands import hand_bench, hand_table
from mocapline.core import quat as Q
from mocapline.core.paths import ASSETS_DIR, DEMO_TAKE
from mocapline.formats.bvh import gmr_bodies, load_bvh, take_height
from mocapline.robot import model as robot_model
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.retarget import synthetic
from mocapline.services.retarget.config import IKConfig, detect_bvh_skeleton, load_ik_config
from mocapline.services.retarget.footing import foot_geometry
from mocapline.services.retarget.gmr import GmrBaseline
from mocapline.services.retarget.ground_quality import GroundQuality, human_ground, robot_ground
from mocapline.services.retarget.ik.options import RetargetOptions, add_no_footing_argument
from mocapline.services.retarget.ik.retargeter import Retargeter
from mocapline.services.retarget.quality import Quality, evaluate

MOTION_DIR = ASSETS_DIR / "motion"
KINDS = ("real", "demo", "robot", "human")
HANDS = "hands"  # the hand stage's takes (a build with hands)
SYNTHETIC_FRAMES_S = 8.0  # seconds of each synthetic take


@dataclass
class Take:
    name: str
    kind: str
    fps: float
    positions: np.ndarray  # (F, 23, 3)
    quaternions: np.ndarray  # (F, 23, 4)
    config: IKConfig
    human_height: float | None = None
    q0: np.ndarray | None = None  # start pose of both IKs (None: standing)

    def head(self, frames: int | None) -> Take:
        if frames is None or frames >= len(self.positions):
            return self
        return Take(self.name, self.kind, self.fps, self.positions[:frames], self.quaternions[:frames],
                    self.config, self.human_height, self.q0)


def resample_bodies(
    positions: np.ndarray, quaternions: np.ndarray, fps: float, to_fps: float
) -> tuple[np.ndarray, np.ndarray]:
    """HumanFrame arrays at ``to_fps``: positions linear, rotations slerped (exact copies on source frames)."""
    n = len(positions)
    t = np.arange(int(np.floor((n - 1) * to_fps / fps + 1e-9)) + 1) * fps / to_fps
    i = np.minimum(np.floor(t + 1e-9).astype(int), n - 1)
    j = np.minimum(i + 1, n - 1)
    u = np.clip(t - i, 0.0, 1.0)[:, None, None]
    pos = (1.0 - u) * positions[i] + u * positions[j]
    quat = Q.slerp(quaternions[i], quaternions[j], np.broadcast_to(u[..., 0], quaternions[i].shape[:-1]))
    return pos, quat


def _rates(take: Take, rates: tuple[float, ...]) -> list[Take]:
    out = []
    for fps in rates:
        if abs(fps - take.fps) < 1e-6:
            out.append(take)
            continue
        step = take.fps / fps
        if abs(step - round(step)) < 1e-9:  # decimate: keep real samples
            s = int(round(step))
            pos, quat = take.positions[::s], take.quaternions[::s]
        else:
            pos, quat = resample_bodies(take.positions, take.quaternions, take.fps, fps)
        out.append(Take(take.name, take.kind, fps, pos, quat, take.config, take.human_height, take.q0))
    return out


def real_takes(model: mujoco.MjModel, directory: Path = MOTION_DIR,
               robot: RobotDescription | None = None) -> list[Take]:
    out = []
    for path in sorted(directory.glob("*.bvh")):
        motion = load_bvh(path)
        config, skeleton = detect_bvh_skeleton(motion, robot=robot, model=model)
        pos, quat = gmr_bodies(motion, skeleton)
        out.append(Take(path.stem, "real", motion.fps, pos, quat, config, take_height(motion, skeleton, pos)[0]))
    return out


def demo_take(model: mujoco.MjModel, robot: RobotDescription | None = None) -> Take:
    from mocapline.formats.mlrec import read_recording
    from mocapline.tools.recorder.take import TakeConfig, human_frames

    rec = read_recording(DEMO_TAKE)
    cfg = TakeConfig().resolved(rec.meta)
    frames, _ = human_frames(rec, cfg)
    pos = np.array([f.positions for f in frames])
    quat = np.array([f.quaternions for f in frames])
    config = load_ik_config(cfg.ik_config, robot=robot, model=model)
    return Take("demo_walk", "demo", float(cfg.input_fps or 60.0), pos, quat, config)


def synthetic_takes(model: mujoco.MjModel, fps: float, robot: RobotDescription | None = None) -> list[Take]:
    robot = robot or get_robot()
    axis = load_ik_config("axis_studio", robot=robot, model=model)
    n = int(SYNTHETIC_FRAMES_S * fps)
    truth = synthetic.robot_motion(n, fps, robot=robot, model=model)
    r_pos, r_quat = synthetic.human_from_robot(truth, axis, model=model)
    h_pos, h_quat = synthetic.human_motion(n, fps)
    return [Take(robot.name, "robot", fps, r_pos, r_quat, axis, None, truth[0]),
            Take("human", "human", fps, h_pos, h_quat, axis)]


OVERHEAD_PLANES = (-15.0, -8.0, -3.0, 3.0, 8.0, 15.0)  # deg, > 0: behind the shoulder's pole
OVERHEAD_S = 16.0  # seconds: three raises


def overhead_takes(model: mujoco.MjModel, fps: float = 60.0, robot: RobotDescription | None = None) -> list[Take]:
    """``--overhead``: sideways raises to overhead passing the shoulder's gimbal pole at each plane
    of OVERHEAD_PLANES, on the same side every raise and on alternate sides."""
    axis = load_ik_config("axis_studio", robot=robot, model=model)
    out = []
    for alternate in (False, True):
        for plane in OVERHEAD_PLANES:
            raise_ = synthetic.OverheadRaise(plane, alternate)
            pos, quat = synthetic.human_motion(int(OVERHEAD_S * fps), fps, overhead=raise_)
            name = f"{'alternate' if alternate else 'same side'} {plane:+.0f}"
            out.append(Take(name, "overhead", fps, pos, quat, axis))
    return out


def take_set(model: mujoco.MjModel, kinds: tuple[str, ...] = KINDS, frames: int | None = None,
             robot: RobotDescription | None = None) -> list[Take]:
    """Every take of the bench at both of its rates, each cut to ``frames`` frames."""
    out: list[Take] = []
    if "real" in kinds:
        for take in real_takes(model, robot=robot):
            out += _rates(take, (take.fps, 30.0))
    if "demo" in kinds:
        out += _rates(demo_take(model, robot), (60.0, 120.0))
    for fps in (60.0, 120.0):
        out += [t for t in synthetic_takes(model, fps, robot) if t.kind in kinds]
    out.sort(key=lambda t: (KINDS.index(t.kind), t.name, t.fps))
    return [t.head(frames) for t in out]


@dataclass
class Run:
    take: str
    kind: str
    rate: float
    frames: int
    fps: float
    baseline_fps: float
    ours: Quality
    base: Quality
    ik_failed: int = 0
    baseline_failures: int = 0
    steps_per_frame: float = 0.0
    wall_s: float = float("nan")  # wall-clock seconds (other processes' load included)
    baseline_wall_s: float = float("nan")
    extra: dict = field(default_factory=dict)
    ground: GroundQuality | None = None  # ours on the floor
    base_ground: GroundQuality | None = None
    human_ground: GroundQuality | None = None  # the source's own

    @property
    def speedup(self) -> float:
        """By CPU time (``time.thread_time``): what each IK computes, whatever else the machine runs."""
        return self.fps / self.baseline_fps

    @property
    def wall_speedup(self) -> float:
        return self.baseline_wall_s / self.wall_s

    def as_dict(self) -> dict:
        return {
            "take": self.take, "kind": self.kind, "rate": self.rate, "frames": self.frames,
            "fps": round(self.fps, 1), "baseline_fps": round(self.baseline_fps, 1), "speedup": round(self.speedup, 2),
            "ours": self.ours.as_dict(), "baseline": self.base.as_dict(), "ik_failed": self.ik_failed,
            "baseline_failures": self.baseline_failures, "steps_per_frame": round(self.steps_per_frame, 2),
            "wall_speedup": round(self.wall_speedup, 2),
            **({"ground": {"ours": self.ground.as_dict(), "baseline": self.base_ground.as_dict(),
                           "human": self.human_ground.as_dict()}}
               if self.ground and self.base_ground and self.human_ground else {}),
            **self.extra,
        }


def run_take(
    take: Take, model: mujoco.MjModel, options: RetargetOptions | None = None, *, baseline: bool = True,
    robot: RobotDescription | None = None,
) -> Run:
    """Both IKs over one take, timed alternately; quality of both against our targets."""
    robot = robot or get_robot()
    opts = options or RetargetOptions()
    # the known answer is the robot's own poses, off any floor: its IK without footing
    footing = opts.footing and take.kind != "robot"
    opts = RetargetOptions(**{**opts.__dict__, "fps": take.fps, "human_height": take.human_height,
                              "footing": footing})
    ours = Retargeter(take.config, opts, robot=robot, model=model)
    q0 = take.q0 if take.q0 is not None else robot_model.default_qpos(robot, model)
    ours.reset(q0)
    base = GmrBaseline(take.config, model, q0, take.human_height) if baseline else None
    n = len(take.positions)
    out = np.empty((n, model.nq))
    out_base = np.empty((n, model.nq))
    solved: list[np.ndarray | None] = []
    t_ours = t_base = wall_ours = wall_base = 0.0
    cpu, wall = time.thread_time, time.perf_counter
    for f in range(n):
        p, q = take.positions[f], take.quaternions[f]
        t0, w0 = cpu(), wall()
        if base is not None:
            out_base[f] = base.retarget(p, q)
        t1, w1 = cpu(), wall()
        out[f] = ours.retarget(p, q).qpos
        t2, w2 = cpu(), wall()
        solved.append(None if ours.solved_targets is None else ours.solved_targets.copy())
        t_base += t1 - t0
        t_ours += t2 - t1
        wall_base += w1 - w0
        wall_ours += w2 - w1
    targets = np.array([ours.targets(take.positions[f], take.quaternions[f]) for f in range(n)])
    entries = ours.table_entries()
    limits = take.config.velocity_limits(robot_model.joint_names(model))
    root = take.config.human_root_name
    quality = evaluate(model, entries, targets, out, take.fps, limits, root=root)
    quality_base = evaluate(model, entries, targets, out_base, take.fps, limits, root=root) if base else quality
    if ours.footing is not None and all(x is not None for x in solved):
        # the targets on the floor (the stance feet held, the body's height shift): both IKs against them
        grounded = np.array(solved)
        mine = evaluate(model, entries, grounded, out, take.fps, limits, root=root)
        theirs = evaluate(model, entries, grounded, out_base, take.fps, limits, root=root) if base else mine
        run_extra = {"grounded": {"ours": mine.as_dict(), "baseline": theirs.as_dict()}}
    else:
        run_extra = {}
    run = Run(take.name, take.kind, take.fps, n, n / t_ours, n / t_base if base else float("nan"), quality,
              quality_base, ours.stats.failures, base.failures if base else 0, ours.stats.steps / max(n, 1),
              wall_ours, wall_base if base else float("nan"), run_extra)
    if take.kind != "robot":  # the known answer's human is the robot mapped back: no floor of its own
        feet = foot_geometry(robot)
        run.ground = robot_ground(model, feet, out, take.positions, take.fps)
        run.base_ground = robot_ground(model, feet, out_base, take.positions, take.fps) if base else run.ground
        run.human_ground = human_ground(take.positions, take.fps)
    return run


def _tracks(r: Run) -> bool:
    """Error and hands' error at or below the baseline's; on the known answer both are exact (a few
    micrometres: the IK stops once the targets are met), so there it must be within 0.01 mm."""
    if r.kind == "robot":
        return r.ours.err_mm < 0.01 and r.ours.hands_mm < 0.01
    return r.ours.err_mm <= r.base.err_mm and r.ours.hands_mm <= r.base.hands_mm


def _smoother(r: Run) -> bool:
    """Jerk below the baseline's; on the known answer both track the true motion, whose jerk it is."""
    if r.kind == "robot":
        return r.ours.err_mm < 0.01 and abs(r.ours.jerk - r.base.jerk) <= 0.01 * r.base.jerk
    return r.ours.jerk < r.base.jerk


def _summary(runs: list[Run]) -> dict:
    frames = sum(r.frames for r in runs)
    fps = frames / sum(r.frames / r.fps for r in runs)
    base_fps = frames / sum(r.frames / r.baseline_fps for r in runs)
    ok = [r for r in runs if r.speedup >= 10 and _tracks(r) and _smoother(r) and r.ours.jumps == 0
          and r.ours.swings == 0 and r.ours.range_violations == 0 and r.ours.velocity_violations == 0]
    return {
        "fps": round(fps, 1), "baseline_fps": round(base_fps, 1), "speedup": round(fps / base_fps, 2),
        "min_speedup": round(min(r.speedup for r in runs), 2),
        "wall_speedup": round(sum(r.baseline_wall_s for r in runs) / sum(r.wall_s for r in runs), 2),
        "min_wall_speedup": round(min(r.wall_speedup for r in runs), 2),
        "runs_meeting_every_goal": len(ok), "runs": [r.as_dict() for r in runs],
        "jumps": sum(r.ours.jumps for r in runs), "baseline_jumps": sum(r.base.jumps for r in runs),
        "swings": sum(r.ours.swings for r in runs), "baseline_swings": sum(r.base.swings for r in runs),
        "violations": sum(r.ours.range_violations + r.ours.velocity_violations for r in runs),
        "baseline_violations": sum(r.base.range_violations + r.base.velocity_violations for r in runs),
    }


def _table(summary: dict, options: RetargetOptions, robot: RobotDescription) -> str:
    lines = [
        f"retarget bench: {robot.title}; mocapline {options.backend} backend, {options.describe()}",
        "baseline: GMR's algorithm (2 stages, each until drop < 0.001 or 10 iter, lm_damping 1, damping 0.5)",
        "errors: mm over the position-weighted frames (hands / feet / pelvis), deg over the rotation-weighted ones;",
        "each cell: mocapline | baseline. jumps: joint > 1 rad in 10 frames while targets < 5 cm, 20 deg;",
        "swing: a joint sweeping > 80 % of its range and > pi rad within 3 s (limit to limit);",
        "fps, base, ratio: by each IK's own CPU time (thread_time; other sessions' load left out), wall: the ratio "
        "by wall clock",
        "",
        f"{'take':<22} {'Hz':>4} {'fps':>6} {'base':>5} {'ratio':>6} {'wall':>6} {'err mm':>13} {'p99':>13} "
        f"{'hands':>13} {'feet':>11} {'pelvis':>11} {'rot deg':>11} {'jerk':>13} {'jumps':>5} {'swing':>5} "
        f"{'lim':>9} {'viol':>6}",
    ]

    def pair(a: float, b: float, width: int, fmt: str = ".1f") -> str:
        return f"{format(a, fmt)}|{format(b, fmt)}".rjust(width)

    for r in summary["runs"]:
        o, b = r["ours"], r["baseline"]
        viol = f"{o['range_violations'] + o['velocity_violations']}|{b['range_violations'] + b['velocity_violations']}"
        lines.append(
            f"{r['take']:<22} {r['rate']:>4.0f} {r['fps']:>6.0f} {r['baseline_fps']:>5.0f} {r['speedup']:>5.1f}x "
            f"{r['wall_speedup']:>5.1f}x "
            f"{pair(o['err_mm'], b['err_mm'], 13)} {pair(o['err_p99_mm'], b['err_p99_mm'], 13)} "
            f"{pair(o['hands_mm'], b['hands_mm'], 13)} {pair(o['feet_mm'], b['feet_mm'], 11)} "
            f"{pair(o['pelvis_mm'], b['pelvis_mm'], 11)} {pair(o['rot_deg'], b['rot_deg'], 11)} "
            f"{pair(o['jerk'], b['jerk'], 13, '.0f')} {o['jumps']:>2}|{b['jumps']:<2} "
            f"{o['swings']:>2}|{b['swings']:<2} "
            f"{pair(o['limit_contacts'], b['limit_contacts'], 9, 'd')} {viol:>6}"
        )
    lines += ["", "feet on the ground (robot soles: the feet's collision geoms, floor z = 0; contact: the performer's "
              "ankle within 2.5 cm of its stance floor);",
              "each cell: mocapline | baseline | the human source (its ankles against their stance floor)",
              "skate: cm/s of a foot in contact; slid: m in contact; float: % of frames both feet > 4 cm up; "
              "pen: cm below the floor, mean / max; travel: m, root / feet",
              f"{'take':<22} {'Hz':>4} {'skate':>17} {'slid':>16} {'float':>16} {'pen mean':>14} {'pen max':>14} "
              f"{'travel':>26}"]
    for r in summary["runs"]:
        if "ground" not in r:
            continue
        g = r["ground"]
        o, b, h = g["ours"], g["baseline"], g["human"]

        def three(key: str, scale: float = 1.0, width: int = 16, cells: tuple = (o, b, h)) -> str:
            return "|".join(f"{x[key] * scale:.1f}" for x in cells).rjust(width)

        travel = " ".join(f"{x['root_travel_m']:.2f}/{x['feet_travel_m']:.2f}" for x in (o, b, h))
        lines.append(f"{r['take']:<22} {r['rate']:>4.0f} {three('skate_cm_s', width=17)} {three('slid_m')} "
                     f"{three('float_share', 100.0)} {three('penetration_mean_cm', width=14)} "
                     f"{three('penetration_max_cm', width=14)} {travel:>26}")
    lines += [
        "",
        f"overall: {summary['fps']:.0f} vs {summary['baseline_fps']:.0f} frames/s = {summary['speedup']:.1f}x "
        f"(lowest run {summary['min_speedup']:.1f}x; by wall clock {summary['wall_speedup']:.1f}x, lowest "
        f"{summary['min_wall_speedup']:.1f}x); jumps {summary['jumps']} vs {summary['baseline_jumps']}; "
        f"swings {summary['swings']} vs {summary['baseline_swings']}; "
        f"limit violations {summary['violations']} vs {summary['baseline_violations']}; "
        f"runs meeting every goal: {summary['runs_meeting_every_goal']}/{len(summary['runs'])}",
    ]
    return "\n".join(lines)


def _overhead(model: mujoco.MjModel, options: RetargetOptions, as_json: bool, robot: RobotDescription) -> None:
    """The stress sweep: each overhead take with the shoulder poles (the default), without them,
    and the baseline; accuracy, jumps and swings (no timing)."""
    rows = []
    for take in overhead_takes(model, robot=robot):
        ours = run_take(take, model, options, robot=robot)
        plain = run_take(take, model, replace(options, shoulder_poles=False), baseline=False, robot=robot)
        rows.append({"take": take.name, "ours": ours.ours, "without_poles": plain.ours, "baseline": ours.base})
    totals = {k: {m: sum(getattr(r[k], m) for r in rows) for m in ("jumps", "swings")}
              for k in ("ours", "without_poles", "baseline")}
    if as_json:
        print(json.dumps({"runs": [{k: (v.as_dict() if isinstance(v, Quality) else v) for k, v in r.items()}
                                   for r in rows], "totals": totals}))
        return
    print("overhead raises past the shoulder's gimbal pole, 60 Hz, 16 s (three raises); the raise plane in deg "
          "behind the pole,\non the same side every raise or on alternate sides (the first raise's given)\n"
          "each cell: with the shoulder poles (default) | without | baseline")
    print(f"{'take':14} {'err mm':>19} {'hands mm':>19} {'jerk':>17} {'jumps':>8} {'swings':>8}")

    def cell(r: dict, metric: str, fmt: str = ".1f") -> str:
        return "|".join(format(getattr(r[k], metric), fmt) for k in ("ours", "without_poles", "baseline"))

    for r in rows:
        print(f"{r['take']:14} {cell(r, 'err_mm'):>19} {cell(r, 'hands_mm'):>19} {cell(r, 'jerk', '.0f'):>17} "
              f"{cell(r, 'jumps', 'd'):>8} {cell(r, 'swings', 'd'):>8}")
    print("totals: " + "; ".join(f"{k}: jumps {v['jumps']}, swings {v['swings']}" for k, v in totals.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mocapline bench retarget", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_robot_model_argument(parser)
    parser.add_argument("--takes", default=None,
                        help=f"kinds of take, comma separated: {', '.join((*KINDS, HANDS))} (default "
                             f"{','.join(KINDS)}, and {HANDS} on a build with hands: the hand stage, "
                             "mocapline/bench/hands.py)")
    parser.add_argument("--frames", type=int, default=None,
                        help="cut every run to this many frames (default: whole takes)")
    parser.add_argument("--iterations", type=int, default=None, help="mocapline's cap on IK steps per frame")
    parser.add_argument("--lm-damping", type=float, default=None, help="mocapline FrameTask lm_damping")
    parser.add_argument("--min-iterations", type=int, default=None, help="mocapline's floor on IK steps per frame")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="mocapline stops a frame once a step lowers the cost by less than this share (0: always "
                             "--iterations steps)")
    parser.add_argument("--arm-huber", type=float, default=None,
                        help="rad: mocapline's arm rotation errors beyond it cost linearly (0: quadratic)")
    parser.add_argument("--backend", choices=("fast", "mink"), default="fast")
    add_no_footing_argument(parser, " (mocapline's IK; the baseline never holds them)")
    parser.add_argument("--overhead", action="store_true",
                        help="instead: the stress sweep of overhead raises past the shoulder's gimbal pole, with and "
                             "without the shoulder poles (about 1 min)")
    args = parser.parse_args(argv)

    robot = get_robot(args.robot_model)
    with_hands = robot.hands is not None and bool(robot.hands.fingers)
    given = args.takes if args.takes is not None else ",".join((*KINDS, HANDS) if with_hands else KINDS)
    kinds = tuple(k.strip() for k in given.split(",") if k.strip())
    bad = sorted(set(kinds) - {*KINDS, HANDS})
    if bad:
        parser.error(f"unknown takes {bad}: choose from {', '.join((*KINDS, HANDS))}")
    if HANDS in kinds and not with_hands:
        parser.error(f"--takes {HANDS}: robot model {robot.name!r} has no hands to retarget (try g1_dex3)")
    options = RetargetOptions(backend=args.backend, footing=not args.no_footing)
    for name in ("iterations", "lm_damping", "min_iterations", "tolerance", "arm_huber"):
        if getattr(args, name) is not None:
            setattr(options, name, getattr(args, name))
    try:
        options.validate()
    except ValueError as exc:
        parser.error(str(exc))
    model = robot_model.load_ik_model(robot)
    if args.overhead:
        _overhead(model, options, args.json, robot)
        return 0
    body_kinds = tuple(k for k in kinds if k != HANDS)
    summary: dict = {}
    if body_kinds:
        summary = _summary([run_take(t, model, options, robot=robot)
                            for t in take_set(model, body_kinds, args.frames, robot)])
    summary["settings"] = {"robot_model": robot.name, "backend": options.backend, "options": options.describe(),
                           "frames": args.frames}
    if HANDS in kinds:
        summary["hands"] = hand_bench(robot)
    if args.json:
        print(json.dumps(summary))
        return 0
    lines = _table(summary, options, robot).splitlines() if body_kinds else []
    if HANDS in kinds:
        lines += hand_table(summary["hands"], robot)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
