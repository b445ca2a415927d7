"""`mocapline bench retarget [--json]`: mocapline's retargeter against a GMR-equivalent baseline.

Two takes, each at 1x and 4x motion speed (same frame rate, 60 fps), optionally with noise
(``--noise-mm``, ``--noise-deg``):

- ``g1``: a synthetic G1 motion (walking with turns, arm swing, arm raising, torso twist; see
  ``mocapline.services.retarget.synthetic``) mapped back to the 23 human bodies that the Axis Studio config
  maps exactly onto it, so the right answer is known: error = every G1 body against it.
- ``human``: a walking / arm-raising take on the Axis Studio skeleton (human proportions), as
  capture delivers it; the G1 cannot meet every target (arms overhead pass its shoulder-roll
  limit), so this is where an IK shows jitter. Error = distance of the position-weighted G1 frames
  to their targets.

The baseline is GMR's published algorithm (YanjieZe/GMR ``motion_retarget.py``), re-written here:
per frame, the human data dict is scaled about the root and offset with scipy Rotations body by
body; then two stages (table 1, table 2), each calling ``mink.solve_ik`` (daqp, solver damping 0.5,
FrameTask lm_damping 1, dt = model timestep) until the error drop is < 0.001 or 10 extra
iterations; limits passed as GMR passes them (the list lands in ``safety_break``, so mink rebuilds a
ConfigurationLimit per call and the 3*pi rad/s velocity limit never applies). Both run on the same
mesh-free G1 model and the same config; frames are timed alternately (baseline, ours) so machine
load hits both alike.

Reported per take and speed: frames/s of both and the ratio, mean and p99 error (mm), mean
absolute joint jerk (rad/s^3; the true motion's for the g1 take), failures, and what the optional
one-frame ``smooth3`` output filter would give. ``--json``: one object; ``fps``, ``baseline_fps``,
``speedup`` over every frame; ``pos_err_mm`` / ``baseline_pos_err_mm`` (+ ``_p99``) on the g1 take
(known answer); ``target_err_mm`` / ``baseline_target_err_mm`` on the human take; ``jerk`` /
``baseline_jerk`` over every run (``human_jerk`` for the human take alone); ``runs`` in detail.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

import mink
import numpy as np
from scipy.spatial.transform import Rotation

from mocapline.core import quat as Q
from mocapline.core.bodies import GMR_BODIES
from mocapline.robot import g1 as robot_model
from mocapline.services.retarget import synthetic
from mocapline.services.retarget.config import IKConfig, load_ik_config
from mocapline.services.retarget.retargeter import (
    G1Retargeter,
    OneFrameSmoother,
    RetargetOptions,
)

FPS = 60.0


class GmrBaseline:
    """GMR's ``GeneralMotionRetargeting.retarget`` algorithm, faithfully (see module docstring)."""

    max_iter = 10

    def __init__(self, config: IKConfig, model, q0: np.ndarray) -> None:
        self.model = model
        self.configuration = mink.Configuration(model, q0.copy())
        self.solver = "daqp"
        self.damping = 0.5
        joint_names = robot_model.joint_names(model)
        self.ik_limits = [
            mink.ConfigurationLimit(model),
            mink.VelocityLimit(model, {name: 3 * np.pi for name in joint_names}),
        ]
        self.human_root_name = config.human_root_name
        self.human_scale_table = dict(config.human_scale_table)
        self.tables = []
        self.pos_offsets: dict[str, np.ndarray] = {}
        self.rot_offsets: dict[str, Rotation] = {}
        for t_index, table in enumerate((config.ik_match_table1, config.ik_match_table2)):
            use = config.use_ik_match_table1 if t_index == 0 else config.use_ik_match_table2
            tasks, body_to_task = [], {}
            for e in table:
                if e.position_weight == 0 and e.rotation_weight == 0:
                    continue
                task = mink.FrameTask(
                    frame_name=e.robot_frame,
                    frame_type=e.frame_type,
                    position_cost=e.position_weight,
                    orientation_cost=e.rotation_weight,
                    lm_damping=1,
                )
                tasks.append(task)
                body_to_task[e.human_body] = task
                if t_index == 0:  # GMR offsets the data with table 1's offsets for both tables
                    self.pos_offsets[e.human_body] = np.array(e.position_offset) - config.ground_height * np.array([0, 0, 1])
                    self.rot_offsets[e.human_body] = Rotation.from_quat(e.rotation_offset, scalar_first=True)
            self.tables.append((use, tasks, body_to_task))
        self.failures = 0

    def _scale(self, data: dict) -> dict:
        root_pos, root_quat = data[self.human_root_name]
        scaled_root = self.human_scale_table[self.human_root_name] * root_pos
        local = {}
        for name in data:
            if name not in self.human_scale_table or name == self.human_root_name:
                continue
            local[name] = (data[name][0] - root_pos) * self.human_scale_table[name]
        out = {self.human_root_name: (scaled_root, root_quat)}
        for name, p in local.items():
            out[name] = (p + scaled_root, data[name][1])
        return out

    def _offset(self, data: dict) -> dict:
        out = {}
        for name, (pos, quat) in data.items():
            if name not in self.rot_offsets:
                out[name] = [pos, quat]
                continue
            updated = (Rotation.from_quat(quat, scalar_first=True) * self.rot_offsets[name]).as_quat(scalar_first=True)
            offset = Rotation.from_quat(updated, scalar_first=True).apply(self.pos_offsets[name])
            out[name] = [pos + offset, updated]
        return out

    def _error(self, tasks) -> float:
        return float(np.linalg.norm(np.concatenate([t.compute_error(self.configuration) for t in tasks])))

    def _solve(self, tasks) -> None:
        dt = self.configuration.model.opt.timestep
        # GMR's call: the limits list is the 6th positional argument, i.e. safety_break.
        vel = mink.solve_ik(self.configuration, tasks, dt, self.solver, self.damping, self.ik_limits)
        self.configuration.integrate_inplace(vel, dt)

    def retarget(self, positions: np.ndarray, quaternions: np.ndarray) -> np.ndarray:
        data = {name: [np.asarray(positions[i]), np.asarray(quaternions[i])] for i, name in enumerate(GMR_BODIES)}
        data = self._offset(self._scale(data))
        for use, _, body_to_task in self.tables:
            if use:
                for name, task in body_to_task.items():
                    pos, rot = data[name]
                    task.set_target(mink.SE3.from_rotation_and_translation(mink.SO3(rot), pos))
        try:
            for use, tasks, _ in self.tables:
                if not use:
                    continue
                curr = self._error(tasks)
                self._solve(tasks)
                nxt = self._error(tasks)
                n = 0
                while curr - nxt > 0.001 and n < self.max_iter:
                    curr = nxt
                    self._solve(tasks)
                    nxt = self._error(tasks)
                    n += 1
        except (mink.NotWithinConfigurationLimits, mink.NoSolutionFound):
            self.failures += 1  # GMR itself would raise and stop
        return self.configuration.data.qpos.copy()


@dataclass
class Run:
    take: str  # "g1": known answer; "human": Axis skeleton proportions
    speed: float
    frames: int
    fps: float
    baseline_fps: float
    err_mm: float  # g1: every body vs the known answer; human: position targets vs robot frames
    err_p99_mm: float
    baseline_err_mm: float
    baseline_err_p99_mm: float
    jerk: float
    baseline_jerk: float
    true_jerk: float | None
    ik_failed: int
    baseline_failures: int
    smooth3_err_mm: float | None = None
    smooth3_jerk: float | None = None

    @property
    def speedup(self) -> float:
        return self.fps / self.baseline_fps


def _truth_errors(model, truth: np.ndarray, got: np.ndarray, skip: int) -> np.ndarray:
    bt = synthetic.all_body_positions(model, truth[skip:])
    bg = synthetic.all_body_positions(model, got[skip:])
    return np.linalg.norm(bt - bg, axis=2).ravel() * 1000.0


def _target_errors(retargeter: G1Retargeter, positions, quaternions, got: np.ndarray, skip: int) -> np.ndarray:
    entries = [e for e in retargeter.table_entries() if e.position_weight > 0]
    keep = np.array([e.position_weight > 0 for e in retargeter.table_entries()])
    poses = synthetic.FramePoses(retargeter.model, [(e.robot_frame, e.frame_type) for e in entries])
    out = []
    for f in range(skip, len(got)):
        target = retargeter.targets(positions[f], quaternions[f])[keep]
        p, _ = poses(got[f])
        out.append(np.linalg.norm(p - target[:, 4:], axis=1))
    return np.concatenate(out) * 1000.0


def _smooth3(qs: np.ndarray) -> np.ndarray:
    smoother = OneFrameSmoother()
    out = [r[0] for r in (smoother.push(q) for q in qs) if r is not None]
    last = smoother.flush()
    if last is not None:
        out.append(last[0])
    return np.array(out)


def run_take(
    take: str,
    speed: float,
    frames: int,
    *,
    config: IKConfig,
    model,
    options: RetargetOptions,
    noise_mm: float = 0.0,
    noise_deg: float = 0.0,
    seed: int = 0,
) -> Run:
    if take == "g1":
        truth = synthetic.g1_motion(frames, FPS, speed, model=model)
        positions, quaternions = synthetic.human_from_robot(truth, config, model=model)
        q0 = truth[0]
    else:
        truth = None
        positions, quaternions = synthetic.human_motion(frames, FPS, speed)
        q0 = robot_model.default_qpos(model)
    rng = np.random.default_rng(seed)
    if noise_mm > 0:
        positions = positions + rng.normal(scale=noise_mm / 1000.0, size=positions.shape)
    if noise_deg > 0:
        rotvec = rng.normal(scale=np.radians(noise_deg), size=quaternions.shape[:-1] + (3,))
        quaternions = Q.multiply(quaternions, Q.exp(rotvec))

    ours = G1Retargeter(config, options, model=model)
    ours.reset(q0)
    base = GmrBaseline(config, model, q0)
    out = np.empty((frames, model.nq))
    out_base = np.empty((frames, model.nq))
    t_ours = t_base = 0.0
    clock = time.perf_counter
    for f in range(frames):
        p, q = positions[f], quaternions[f]
        t0 = clock()
        out_base[f] = base.retarget(p, q)
        t1 = clock()
        out[f] = ours.retarget(p, q).qpos
        t2 = clock()
        t_base += t1 - t0
        t_ours += t2 - t1

    skip = 5  # the first frames: start-up from the initial pose (both start alike)
    smoothed = _smooth3(out)
    if truth is not None:
        err = _truth_errors(model, truth, out, skip)
        err_base = _truth_errors(model, truth, out_base, skip)
        err_smooth = _truth_errors(model, truth, smoothed, skip)
    else:
        err = _target_errors(ours, positions, quaternions, out, skip)
        err_base = _target_errors(ours, positions, quaternions, out_base, skip)
        err_smooth = _target_errors(ours, positions, quaternions, smoothed, skip)
    return Run(
        take=take,
        speed=speed,
        frames=frames,
        fps=frames / t_ours,
        baseline_fps=frames / t_base,
        err_mm=float(err.mean()),
        err_p99_mm=float(np.percentile(err, 99)),
        baseline_err_mm=float(err_base.mean()),
        baseline_err_p99_mm=float(np.percentile(err_base, 99)),
        jerk=synthetic.joint_jerk(out[skip:, 7:], FPS),
        baseline_jerk=synthetic.joint_jerk(out_base[skip:, 7:], FPS),
        true_jerk=None if truth is None else synthetic.joint_jerk(truth[skip:, 7:], FPS),
        ik_failed=ours.stats.failures,
        baseline_failures=base.failures,
        smooth3_err_mm=float(err_smooth.mean()),
        smooth3_jerk=synthetic.joint_jerk(smoothed[skip:, 7:], FPS),
    )


def _summary(runs: list[Run]) -> dict:
    frames = sum(r.frames for r in runs)
    fps = frames / sum(r.frames / r.fps for r in runs)
    baseline_fps = frames / sum(r.frames / r.baseline_fps for r in runs)

    def mean(attr: str, take: str | None = None) -> float | None:
        values = [getattr(r, attr) for r in runs if take is None or r.take == take]
        return round(float(np.mean(values)), 4) if values else None

    def worst(attr: str, take: str) -> float | None:
        values = [getattr(r, attr) for r in runs if r.take == take]
        return round(float(max(values)), 4) if values else None

    return {
        "fps": round(fps, 1),
        "baseline_fps": round(baseline_fps, 1),
        "speedup": round(fps / baseline_fps, 2),
        # known-answer take (G1 round trip): mean / worst-speed p99 over every G1 body
        "pos_err_mm": mean("err_mm", "g1"),
        "baseline_pos_err_mm": mean("baseline_err_mm", "g1"),
        "pos_err_p99_mm": worst("err_p99_mm", "g1"),
        "baseline_pos_err_p99_mm": worst("baseline_err_p99_mm", "g1"),
        # human-proportioned take: distance of the position-weighted frames to their targets
        "target_err_mm": mean("err_mm", "human"),
        "baseline_target_err_mm": mean("baseline_err_mm", "human"),
        # mean absolute joint jerk (rad/s^3), every run
        "jerk": mean("jerk"),
        "baseline_jerk": mean("baseline_jerk"),
        "human_jerk": mean("jerk", "human"),
        "baseline_human_jerk": mean("baseline_jerk", "human"),
        "smooth3_human_jerk": mean("smooth3_jerk", "human"),
        "ik_failed": sum(r.ik_failed for r in runs),
        "runs": [
            {**{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.__dict__.items()}, "speedup": round(r.speedup, 2)}
            for r in runs
        ],
    }


def _table(summary: dict, options: RetargetOptions, noise: tuple[float, float]) -> str:
    lines = [
        f"retarget bench: G1 29-DoF, axis_studio config, {FPS:.0f} fps, noise {noise[0]} mm / {noise[1]} deg",
        f"mocapline: backend {options.backend}, {options.iterations} steps/frame, FrameTask lm_damping "
        f"{options.lm_damping}, solver damping {options.solver_damping}, limits: joint range + velocity",
        "baseline:  GMR algorithm (2 stages, each until drop < 0.001 or 10 iter, lm_damping 1, damping 0.5)",
        "takes: g1 = G1 motion mapped back to human bodies (known answer; error over every body)",
        "       human = Axis-skeleton walk / arm raise (error = position targets vs robot frames)",
        "",
        f"{'take':>5} {'speed':>5} {'fps':>7} {'base':>6} {'ratio':>6} {'err mm':>8} {'p99':>7} {'base err':>8} "
        f"{'p99':>7} {'jerk':>7} {'base':>7} {'true':>7} {'fail':>4} {'smooth3 err/jerk':>17}",
    ]
    for r in summary["runs"]:
        true = "-" if r["true_jerk"] is None else f"{r['true_jerk']:.0f}"
        filt = f"{r['smooth3_err_mm']:.2f} / {r['smooth3_jerk']:.0f}"
        lines.append(
            f"{r['take']:>5} {r['speed']:>4.0f}x {r['fps']:>7.0f} {r['baseline_fps']:>6.0f} {r['speedup']:>5.1f}x "
            f"{r['err_mm']:>8.3f} {r['err_p99_mm']:>7.2f} {r['baseline_err_mm']:>8.3f} {r['baseline_err_p99_mm']:>7.2f} "
            f"{r['jerk']:>7.0f} {r['baseline_jerk']:>7.0f} {true:>7} {r['ik_failed']:>4} {filt:>17}"
        )
    lines += [
        "",
        f"overall: {summary['fps']:.0f} vs {summary['baseline_fps']:.0f} frames/s = {summary['speedup']:.1f}x; "
        f"known-answer error {summary['pos_err_mm']} vs {summary['baseline_pos_err_mm']} mm; "
        f"target error {summary['target_err_mm']} vs {summary['baseline_target_err_mm']} mm; "
        f"jerk {summary['jerk']:.0f} vs {summary['baseline_jerk']:.0f} rad/s^3",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mocapline bench retarget", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--frames", type=int, default=600, help="frames per speed (default 600 = 10 s at 60 fps)")
    parser.add_argument("--speeds", default="1,4", help="motion speed factors, comma separated (default 1,4)")
    parser.add_argument("--takes", default="g1,human", help="takes to run: g1 (known answer), human (default both)")
    parser.add_argument("--iterations", type=int, default=None, help="mocapline IK steps per frame")
    parser.add_argument("--lm-damping", type=float, default=None, help="mocapline FrameTask lm_damping")
    parser.add_argument("--backend", choices=("fast", "mink"), default="fast")
    parser.add_argument("--noise-mm", type=float, default=0.0, help="Gaussian position noise on the human bodies")
    parser.add_argument("--noise-deg", type=float, default=0.0, help="Gaussian rotation noise on the human bodies")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    options = RetargetOptions(backend=args.backend, fps=FPS)
    bad = set(t for t in args.takes.split(",") if t.strip()) - {"g1", "human"}
    if bad:
        parser.error(f"unknown takes {sorted(bad)}: choose from g1, human")
    if args.iterations is not None:
        options.iterations = args.iterations
    if args.lm_damping is not None:
        options.lm_damping = args.lm_damping
    options.validate()
    model = robot_model.load_ik_model()
    config = load_ik_config("axis_studio", model=model)
    speeds = [float(s) for s in args.speeds.split(",") if s.strip()]
    takes = [t for t in args.takes.split(",") if t.strip()]
    runs = [
        run_take(take, s, args.frames, config=config, model=model, options=options,
                 noise_mm=args.noise_mm, noise_deg=args.noise_deg, seed=args.seed)
        for take in takes
        for s in speeds
    ]
    summary = _summary(runs)
    summary["settings"] = {
        "backend": options.backend,
        "iterations": options.iterations,
        "lm_damping": options.lm_damping,
        "solver_damping": options.solver_damping,
        "noise_mm": args.noise_mm,
        "noise_deg": args.noise_deg,
        "frames_per_speed": args.frames,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(_table(summary, options, (args.noise_mm, args.noise_deg)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
