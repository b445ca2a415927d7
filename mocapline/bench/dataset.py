"""`mocapline bench dataset [--json]`: retarget-dataset's frames/s on the bundled takes with 1, 2
and all workers, on a local Ray cluster beside the pool, and the GMR baseline's in the same run.

The takes: every ``assets/motion/*.bvh``, whole, copied ``--copies`` times under other names into
a temporary folder. Each engine converts the folder from scratch into a folder of its own, end to
end as the command does (``retarget-dataset`` in this process: discovery, hashes, the workers'
start, reading, IK, quality figures, every ``--format``, the manifest): frames/s is the takes'
source frames over the run's wall time. ``ray`` starts a one-machine cluster (``--ray local``)
and its start is in its time: the overhead a one-machine user pays against the pool.

The baseline is GMR's algorithm (``mocapline.services.retarget.gmr.GmrBaseline``) run as GMR's
``bvh_to_robot_dataset.py`` does, one take after the other in one process, on the first
``--baseline-frames`` frames of each take (IK only: no reading, no writing, which flatters it);
frames/s by wall time and by its CPU time, run before the engines and after them (the ratios use
the mean of the two: other work on the machine moves it by 1.5x between runs). "per core"
compares the one-worker run with it: end to end; by the seconds its tasks took in the worker
("per task s": frames over the sum of the takes' conversion times, the workers' start and the
driver left out: a dataset of thousands of takes pays the start once); and by their CPU time
("per CPU s", ``time.process_time`` in the worker, against GMR's thread's CPU time: steadier than
wall time on a shared machine, though contention inflates CPU time too). The driver's own CPU
time is beside it (it hashes, commits and reports).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.bench.retarget import MOTION_DIR
from mocapline.formats.bvh import gmr_bodies, load_bvh, take_height
from mocapline.robot import model as robot_model
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.retarget.config import detect_bvh_skeleton
from mocapline.services.retarget.gmr import GmrBaseline
from mocapline.tools.dataset import cli as dataset
from mocapline.tools.dataset.cli import default_workers
from mocapline.tools.dataset.manifest import Manifest


def _convert(src: Path, out: Path, engine: list[str], formats: str, robot: str) -> dict[str, Any]:
    argv = [str(src), "--out", str(out), "--format", formats, "--progress", "none", "--robot-model", robot, *engine]
    stdout, stderr = io.StringIO(), io.StringIO()
    t0, cpu0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = dataset.main(argv)
    wall, driver_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if rc not in (0, 1):
        raise RuntimeError(f"retarget-dataset {' '.join(engine)} exited {rc}: {stderr.getvalue()[-800:]}")
    summary = json.loads(stdout.getvalue().strip().splitlines()[-1])
    records = Manifest(out).records()
    frames = summary["frames_now"]
    busy = sum(float(r.get("seconds", 0.0)) for r in records)
    cpu = sum(float(r.get("cpu_seconds", 0.0)) for r in records)
    return {"takes": summary["done"], "failed": summary["failed"], "frames": frames,
            "seconds": round(wall, 3), "frames_per_s": round(frames / wall, 1),
            "task_seconds": round(busy, 3), "frames_per_task_s": round(frames / busy, 1),
            "task_cpu_seconds": round(cpu, 3), "frames_per_cpu_s": round(frames / cpu, 1),
            "driver_cpu_seconds": round(driver_cpu, 3)}


def gmr_baseline(robot_name: str, frames: int) -> dict[str, Any]:
    robot = get_robot(robot_name)
    model = robot_model.load_ik_model(robot)
    total, wall, cpu = 0, 0.0, 0.0
    for path in sorted(MOTION_DIR.glob("*.bvh")):
        motion = load_bvh(path).slice(0, frames)
        config, skeleton = detect_bvh_skeleton(motion, robot=robot, model=model)
        pos, quat = gmr_bodies(motion, skeleton)
        base = GmrBaseline(config, model, robot_model.default_qpos(robot, model), take_height(motion, skeleton, pos)[0])
        t0, c0 = time.perf_counter(), time.thread_time()
        np.array([base.retarget(pos[f], quat[f]) for f in range(len(pos))])
        wall += time.perf_counter() - t0
        cpu += time.thread_time() - c0
        total += len(pos)
    return {"frames": total, "seconds": round(wall, 3), "frames_per_s": round(total / wall, 1),
            "cpu_frames_per_s": round(total / cpu, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mocapline bench dataset", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_robot_model_argument(p)
    p.add_argument("--copies", type=int, default=5, help="copies of each bundled take (default 5: 20 takes)")
    p.add_argument("--format", default="npz,gmr-pkl,beyondmimic-csv", help="the formats each take is written in")
    p.add_argument("--baseline-frames", type=int, default=150, help="frames of each take the GMR baseline solves")
    p.add_argument("--no-ray", action="store_true", help="leave the Ray run out")
    args = p.parse_args(argv)
    cores = default_workers()
    counts = sorted({1, 2, cores})
    root = Path(tempfile.mkdtemp(prefix="mocapline-bench-dataset-"))
    results: dict[str, Any] = {"cores": cores, "copies": args.copies, "formats": args.format}
    try:
        src = root / "takes"
        for i in range(args.copies):
            (src / f"copy{i}").mkdir(parents=True)
            for path in sorted(MOTION_DIR.glob("*.bvh")):
                shutil.copyfile(path, src / f"copy{i}" / path.name)
        runs: dict[str, Any] = {}
        gmr = [gmr_baseline(args.robot_model, args.baseline_frames)]  # before and after: the load moves
        for n in counts:
            runs[f"pool {n}"] = _convert(src, root / f"pool{n}", ["--workers", str(n)], args.format, args.robot_model)
        if not args.no_ray:
            try:
                import ray  # noqa: F401
            except ImportError:
                results["ray"] = "not installed (pip install 'mocapline[cluster]')"
            else:
                runs["ray local"] = _convert(src, root / "ray", ["--ray", "local"], args.format, args.robot_model)
        results["runs"] = runs
        gmr.append(gmr_baseline(args.robot_model, args.baseline_frames))
        results["gmr_runs"] = gmr
        results["gmr"] = {k: round((gmr[0][k] + gmr[1][k]) / 2, 3 if k == "seconds" else 1) for k in gmr[0]}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    one = runs["pool 1"]["frames_per_s"]
    results["ratios"] = {
        "pool 2 / pool 1": round(runs["pool 2"]["frames_per_s"] / one, 2),
        **({f"pool {cores} / pool 1": round(runs[f"pool {cores}"]["frames_per_s"] / one, 2)} if cores > 2 else {}),
        **({"ray local / pool 2 (frames/s)": round(runs["ray local"]["frames_per_s"] / runs["pool 2"]["frames_per_s"],
                                                   2)} if "ray local" in runs else {}),
        "pool 1 / gmr (per core)": round(one / results["gmr"]["frames_per_s"], 1),
        "pool 1 tasks / gmr (per core, the workers' start left out)": round(
            runs["pool 1"]["frames_per_task_s"] / results["gmr"]["frames_per_s"], 1),
        "pool 1 / gmr, frames per CPU second (per core)": round(
            runs["pool 1"]["frames_per_cpu_s"] / results["gmr"]["cpu_frames_per_s"], 1),
        "pool 2 / pool 1, frames per CPU second (1: no cost of a second worker)": round(
            runs["pool 2"]["frames_per_cpu_s"] / runs["pool 1"]["frames_per_cpu_s"], 2),
    }
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"retarget-dataset on {args.copies} copies of the bundled takes ({args.format}), {cores} cores")
    print(f"  {'engine':<12} {'takes':>5} {'frames':>7} {'seconds':>8} {'frames/s':>9} {'per task s':>10} "
          f"{'per CPU s':>9} {'driver CPU s':>12}")
    for name, r in runs.items():
        print(f"  {name:<12} {r['takes']:>5} {r['frames']:>7} {r['seconds']:>8.2f} {r['frames_per_s']:>9.1f} "
              f"{r['frames_per_task_s']:>10.1f} {r['frames_per_cpu_s']:>9.1f} {r['driver_cpu_seconds']:>12.2f}")
    for when, g in zip(("before", "after"), results["gmr_runs"], strict=True):
        print(f"  {'gmr ' + when:<12} {'':>5} {g['frames']:>7} {g['seconds']:>8.2f} {g['frames_per_s']:>9.1f} "
              f"{'':>10} {g['cpu_frames_per_s']:>9.1f}   (IK only, serial; the ratios use the mean of both)")
    for name, value in results["ratios"].items():
        print(f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
