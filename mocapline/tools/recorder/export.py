"""`mocapline export TAKE -o CLIP.npz`: a take as a robot reference clip (the 50 Hz reference-clip
contract, docs/recording.md), for the take's robot build (``--robot-model``).

Input: a raw-datagram recording (``.mlrec``, e.g. ``take/raw.mlrec`` of ``mocapline record`` or
``assets/demo/walk_60hz.mlrec``), retargeted offline as the live pipeline does (capture core ->
Retargeter, deterministic; see ``mocapline/tools/recorder/take.py``), with the IK configuration
given here or, for a take folder, the one recorded in its ``config.json``. Or the MocapFrames a
robot was sent: a ``.mltap`` of ``mocapline tap --record`` or a ``.mlmf`` of the streamer, one
performer (``--performer``, default the first); their time axis is the stream's frame number
(``MocapFrame.index``) at the stream's rate, and a frame the streamer bridged across a gap
(``bridged``) counts as missing, so ``--on-gap`` decides about it as about any gap. Written to
``-o`` (default ``./<take>.npz`` in the working directory, never beside the take).

Output ``CLIP.npz`` (``numpy.load(path)``, no pickles), T samples at ``--fps`` (default 50 Hz):

    time          [T]        s, sample k at exactly k / fps from the take's first frame
    q             [T,J]      rad, joints in ``joint_names`` order (the robot's stream order; J = 29 on a G1)
    qd            [T,J]      rad/s, d q / dt of the resampled q (numpy.gradient: central differences,
                             one-sided at the ends)
    root_pose     [T,7]      pelvis position x y z (m, Z-up world) + quaternion w x y z
    body_pos_w    [T,B,3]    m, forward kinematics of the robot's model (every body but the world)
    body_quat_w   [T,B,4]    w x y z, same bodies, ``body_names`` order
    joint_names   [J]        str
    robot_model   str        the robot build (mocapline/robot/builds: g1, g1_23, g1_dex3, h1)
    body_names    [B]        str (``pelvis`` first)
    policy_clock  [T,2]      (progress in [0, 1] = time / duration, time remaining in s)
    posture_index [T]        int, the source frame at or before each sample
    valid         [T]        bool, False where the sample was interpolated across a gap (--on-gap flag)
    ik_failed     [T]        bool, a source frame of the sample was an IK failure
    gaps          [G,2]      int, the missing posture_index ranges (first, last) in the take
    fps, source_fps          float scalars
    meta                     str (JSON): input, its sha256, the configuration (IK config content,
                             human height, fps, model), conventions and the interval check

Resampling: the time axis is the source posture_index, ``t = (index - first) / source_fps``, so a
gap stretches time instead of speeding the motion up. Joints and root position are linear between
the two source frames around a sample, the root quaternion is slerped (shortest arc); a sample on
a source frame's time copies it exactly. Sample times are compared exactly (integer arithmetic).

Interval check: a sample interpolated between two source frames more than ``--max-gap`` frames
apart (default 1: consecutive frames only, i.e. any missing frame) crosses a gap. ``--on-gap
refuse`` (default) writes nothing and exits 3 with the gaps listed; ``--on-gap flag`` writes the
clip with ``valid`` False on those samples. Samples that land exactly on a source frame next to a
gap are valid.

CSV (unless ``--no-csv``): ``CLIP.csv`` next to the .npz, one row per sample, columns
``time, progress, root_x, root_y, root_z, root_qw, root_qx, root_qy, root_qz`` and then one column
per joint (its name, rad), for plotting in a spreadsheet or pandas.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from mocapline.core import quat as Q
from mocapline.core.modes import Source
from mocapline.core.options import EnvArgumentParser, choices
from mocapline.formats.axis_bvh import add_axis_options
from mocapline.formats.takefile import MocapSeries, TakeKind, check, default_output, read_mocap_series
from mocapline.robot.description import RobotDescription
from mocapline.robot.registry import add_robot_model_argument, get_robot
from mocapline.services.retarget.ik.options import (
    add_joint_ranges_argument,
    add_keep_flight_argument,
    add_no_footing_argument,
)

DEFAULT_FPS = 50.0
CSV_ROOT = ("root_x", "root_y", "root_z", "root_qw", "root_qx", "root_qy", "root_qz")


class GapError(ValueError):
    """Resampling would interpolate across a gap longer than allowed."""

    def __init__(self, gaps: list[tuple[int, int]], max_gap: int) -> None:
        self.gaps = gaps
        text = ", ".join(f"{a}..{b}" for a, b in gaps[:10]) + (" ..." if len(gaps) > 10 else "")
        super().__init__(f"{len(gaps)} interval(s) longer than {max_gap} source frame(s) would be "
                         f"interpolated across (missing posture_index {text}); use --on-gap flag to "
                         f"export with valid=False there, or --max-gap to allow them")


def _rate(value: float) -> Fraction:
    if not value > 0:
        raise ValueError(f"frame rate must be > 0, got {value}")
    return Fraction(str(value)).limit_denominator(1_000_000)


@dataclass
class Resampled:
    time: np.ndarray
    root_pos: np.ndarray
    root_quat: np.ndarray
    joint_pos: np.ndarray
    posture_index: np.ndarray
    valid: np.ndarray
    ik_failed: np.ndarray
    gaps: list[tuple[int, int]]


def resample(
    posture_index: np.ndarray,
    root_pos: np.ndarray,
    root_quat: np.ndarray,
    joint_pos: np.ndarray,
    source_fps: float,
    fps: float,
    *,
    ik_failed: np.ndarray | None = None,
    max_gap: int = 1,
    on_gap: str = "refuse",
) -> Resampled:
    """Resample one take (strictly increasing posture_index) to ``fps``; see the module docstring."""
    idx = np.asarray(posture_index, dtype=np.int64)
    n = len(idx)
    if n == 0:
        raise ValueError("no frames to resample")
    if np.any(np.diff(idx) <= 0):
        raise ValueError("posture_index must be strictly increasing within a take")
    if on_gap not in ("refuse", "flag"):
        raise ValueError(f"on_gap {on_gap!r}: choose refuse or flag")
    failed = np.zeros(n, bool) if ik_failed is None else np.asarray(ik_failed, bool)
    # Sample k sits at source position idx0 + k * r, r = source_fps / fps = a / b (exact).
    r = _rate(source_fps) / _rate(fps)
    a, b = r.numerator, r.denominator
    span = int(idx[-1] - idx[0])
    count = span * b // a + 1
    k = np.arange(count, dtype=np.int64)
    pos_b = idx[0] * b + k * a  # sample positions, scaled by b (integers)
    src_b = idx * b
    i = np.searchsorted(src_b, pos_b, side="right") - 1  # source frame at or before
    on_frame = src_b[i] == pos_b
    j = np.minimum(i + 1, n - 1)
    denom = np.where(on_frame, 1, src_b[j] - src_b[i])
    u = np.where(on_frame, 0.0, (pos_b - src_b[i]) / denom)
    qa = np.asarray(root_quat, dtype=np.float64)
    norm = np.linalg.norm(qa, axis=1, keepdims=True)
    qa = np.where(np.abs(norm - 1.0) > 1e-12, qa / norm, qa)  # unit input is kept bit for bit
    # continuous sign along the take, first quaternion with w >= 0
    qa = qa.copy()
    if qa[0, 0] < 0:
        qa[0] = -qa[0]
    for m in range(1, n):
        if np.dot(qa[m], qa[m - 1]) < 0:
            qa[m] = -qa[m]
    pa, ja = np.asarray(root_pos, np.float64), np.asarray(joint_pos, np.float64)
    uu = u[:, None]
    pos = (1.0 - uu) * pa[i] + uu * pa[j]
    joints = (1.0 - uu) * ja[i] + uu * ja[j]
    quat = Q.slerp(qa[i], qa[j], u)
    pos[on_frame], joints[on_frame], quat[on_frame] = pa[i[on_frame]], ja[i[on_frame]], qa[i[on_frame]]
    step = idx[j] - idx[i]
    across = ~on_frame & (step > max_gap)
    gaps = [(int(idx[m] + 1), int(idx[m + 1] - 1)) for m in np.flatnonzero(np.diff(idx) > 1)]
    if across.any() and on_gap == "refuse":
        bad = sorted({(int(idx[m] + 1), int(idx[m + 1] - 1)) for m in i[across]})
        raise GapError(bad, max_gap)
    return Resampled(
        time=(k * _rate(fps).denominator) / _rate(fps).numerator,  # k / fps, correctly rounded
        root_pos=pos,
        root_quat=quat,
        joint_pos=joints,
        posture_index=idx[i],
        valid=~across,
        ik_failed=failed[i] | (~on_frame & failed[j]),
        gaps=gaps,
    )


def forward_kinematics(root_pos: np.ndarray, root_quat: np.ndarray, joint_pos: np.ndarray,
                       model: mujoco.MjModel | None = None, robot: RobotDescription | None = None,
                       ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """World positions (T,B,3) and quaternions w x y z (T,B,4) of every robot body but the world."""
    from mocapline.robot.model import body_names, load_ik_model

    model = model if model is not None else load_ik_model(robot or get_robot())
    data = mujoco.MjData(model)
    T, B = len(root_pos), model.nbody - 1
    pos, quat = np.zeros((T, B, 3)), np.zeros((T, B, 4))
    for t in range(T):
        data.qpos[0:3] = root_pos[t]
        data.qpos[3:7] = root_quat[t]
        data.qpos[7:] = joint_pos[t]
        mujoco.mj_kinematics(model, data)
        pos[t] = data.xpos[1:]
        quat[t] = data.xquat[1:]
    return pos, quat, body_names(model)


def policy_clock(time: np.ndarray) -> np.ndarray:
    """(progress in [0, 1], time remaining in s) per sample."""
    duration = float(time[-1]) if len(time) else 0.0
    progress = time / duration if duration > 0 else np.ones_like(time)
    return np.stack((progress, duration - time), axis=1)


def save_clip(path: Path, clip: dict[str, np.ndarray]) -> None:
    """Write a clip as one compressed .npz (no pickles: ``numpy.load(path)`` reads it as is)."""
    # numpy's stubs cannot tell these keyword arrays from its allow_pickle flag
    np.savez_compressed(path, **clip)  # type: ignore[arg-type]


def write_clip_files(out: Path, clip: dict[str, np.ndarray], *, csv: bool) -> dict[str, Any]:
    """The clip as ``out`` (.npz, its folder made) and, with ``csv``, beside it as .csv; what was
    written, for a command's summary line: ``npz``, ``samples`` and ``csv``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    save_clip(out, clip)
    written: dict[str, Any] = {"npz": str(out), "samples": len(clip["time"])}
    if csv:
        write_csv(out.with_suffix(".csv"), clip)
        written["csv"] = str(out.with_suffix(".csv"))
    return written


def build_clip(resampled: Resampled, fps: float, source_fps: float, meta: dict[str, Any],
               robot: RobotDescription | None = None) -> dict[str, np.ndarray]:
    robot = robot or get_robot()
    r = resampled
    t = r.time
    qd = np.gradient(r.joint_pos, t, axis=0) if len(t) > 1 else np.zeros_like(r.joint_pos)
    body_pos, body_quat, names = forward_kinematics(r.root_pos, r.root_quat, r.joint_pos, robot=robot)
    meta = {
        **meta,
        "fps": fps,
        "source_fps": source_fps,
        "units": {"time": "s", "q": "rad", "qd": "rad/s", "positions": "m", "quaternions": "unit, w x y z"},
        "frame": "Z-up world of the take, metres; root = pelvis (free joint)",
        "resampling": "linear joints and root position, slerp root quaternion, time axis = posture_index",
        "qd": "numpy.gradient of the resampled q (central differences, one-sided at the ends)",
        "policy_clock": "[progress = time / duration, time remaining = duration - time]",
        "samples": len(t),
        "invalid_samples": int((~r.valid).sum()),
        "ik_failed_samples": int(r.ik_failed.sum()),
    }
    return {
        "time": t,
        "q": r.joint_pos,
        "qd": qd,
        "root_pose": np.concatenate((r.root_pos, r.root_quat), axis=1),
        "body_pos_w": body_pos,
        "body_quat_w": body_quat,
        "joint_names": np.array(robot.joint_names),
        "robot_model": np.array(robot.name),
        "body_names": np.array(names),
        "policy_clock": policy_clock(t),
        "posture_index": r.posture_index,
        "valid": r.valid,
        "ik_failed": r.ik_failed,
        "gaps": np.array(r.gaps, dtype=np.int64).reshape(-1, 2),
        "fps": np.array(fps, dtype=np.float64),
        "source_fps": np.array(source_fps, dtype=np.float64),
        "meta": np.array(json.dumps(meta, sort_keys=True)),
    }


def write_csv(path: Path, clip: dict[str, np.ndarray]) -> None:
    names = [str(n) for n in clip["joint_names"]]
    table = np.concatenate((clip["time"][:, None], clip["policy_clock"][:, :1], clip["root_pose"], clip["q"]), axis=1)
    header = ",".join(["time", "progress", *CSV_ROOT, *names])
    np.savetxt(path, table, delimiter=",", header=header, comments="", fmt="%.9g")


def split_takes(frames: list[Any]) -> list[list[Any]]:
    """RobotFrames -> takes (a backward posture_index or a new segment starts one; repeats dropped)."""
    takes: list[list[Any]] = []
    for f in frames:
        if takes and (f.posture_index < takes[-1][-1].posture_index or f.segment != takes[-1][-1].segment) or not takes:
            takes.append([])
        if takes[-1] and f.posture_index == takes[-1][-1].posture_index:
            continue
        takes[-1].append(f)
    return takes


def export_frames(frames: list[Any], source_fps: float, fps: float, *, max_gap: int = 1, on_gap: str = "refuse",
                  meta: dict[str, Any] | None = None, robot: RobotDescription | None = None) -> dict[str, np.ndarray]:
    """One take of RobotFrames -> the clip's arrays."""
    r = resample(
        np.array([f.posture_index for f in frames]),
        np.array([f.root_pos for f in frames]),
        np.array([f.root_quat for f in frames]),
        np.array([f.joint_pos for f in frames]),
        source_fps, fps,
        ik_failed=np.array([f.ik_failed for f in frames]),
        max_gap=max_gap, on_gap=on_gap,
    )
    return build_clip(r, fps, source_fps, {**(meta or {}), "max_gap": max_gap, "on_gap": on_gap}, robot)


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline export", description=__doc__)
    p.add_argument("take", type=Path, help="a take folder of `mocapline record`, a .mlrec, .mltap or .mlmf")
    p.add_argument("-o", "--output", type=Path, default=None,
                   help="the .npz to write (default: ./TAKE.npz in the working directory)")
    p.add_argument("--fps", type=float, default=DEFAULT_FPS, help="output rate (Hz)")
    p.add_argument("--input-fps", type=float, default=None,
                   help="the recording's frame rate (default: its metadata, else 60)")
    add_robot_model_argument(p, None, " (default: the take's, else g1)")
    p.add_argument("--ik-config", default=None, help="IK config name or JSON (default: the take's, else axis_studio)")
    p.add_argument("--human-height", type=float, default=None, help="performer height in m (default: the take's)")
    add_axis_options(p, from_take=True)
    p.add_argument("--source", choices=choices(Source), default=None, help="what sent the datagrams")
    p.add_argument("--max-gap", type=int, default=1,
                   help="longest source interval (frames) a sample may be interpolated across (1 = no missing frame)")
    p.add_argument("--on-gap", choices=("refuse", "flag"), default="refuse",
                   help="refuse: exit 3 when a sample crosses a longer gap; flag: write it with valid=False")
    p.add_argument("--take-index", type=int, default=0, help="which take when the recording holds several")
    p.add_argument("--performer", type=int, default=None, metavar="AVATAR_INDEX",
                   help=".mltap / .mlmf: the performer to export (default: the first)")
    p.add_argument("--no-csv", action="store_true", help="do not write the CSV next to the .npz")
    add_joint_ranges_argument(p, default=None, what=" (default: the take's, else full)")
    add_no_footing_argument(p, " (default: the take's, else held)")
    add_keep_flight_argument(p)
    return p


def series_takes(series: MocapSeries) -> list[MocapSeries]:
    """One performer's MocapFrames -> takes: a new one where the stream's frame number or the
    posture_index goes back (a new take, a new segment)."""
    back = (np.diff(series.index) <= 0) | (np.diff(series.posture_index) < 0)
    bounds = [0, *(np.flatnonzero(back) + 1).tolist(), len(series)]
    out = []
    for a, b in pairwise(bounds):
        keep = np.zeros(len(series), bool)
        keep[a:b] = True
        out.append(series.where(keep))
    return out


def export_series(take: MocapSeries, fps: float, *, max_gap: int = 1, on_gap: str = "refuse",
                  meta: dict[str, Any] | None = None) -> dict[str, np.ndarray]:
    """One take of MocapFrames -> the clip's arrays, on the stream's frame number (bridged frames
    left out: they are the gaps)."""
    stream_fps = take.fps
    if stream_fps is None:
        raise ValueError("fewer than two frames: no rate to resample from")
    real = take.where(~take.bridged)
    r = resample(real.index, real.root_pos, real.root_quat, real.joint_pos, stream_fps, fps,
                 max_gap=max_gap, on_gap=on_gap)
    posture = dict(zip(real.index.tolist(), real.posture_index.tolist(), strict=True))
    r.posture_index = np.array([posture[int(i)] for i in r.posture_index], dtype=np.int64)
    r.gaps = [(posture[a - 1] + 1, posture[b + 1] - 1) for a, b in r.gaps]
    robot = get_robot(take.robot_model) if take.robot_model else get_robot()
    return build_clip(r, fps, stream_fps, {**(meta or {}), "max_gap": max_gap, "on_gap": on_gap,
                                           "time_axis": "MocapFrame.index at the stream's rate"}, robot)


def recording_clip(args: Any) -> tuple[dict[str, np.ndarray], int, Path]:
    """A take folder or .mlrec (``args`` of :func:`build_parser`), retargeted offline, without
    printing (``ValueError``: why not; ``retarget-dataset`` calls it for its ``.mlrec`` takes)."""
    from mocapline.formats.mlrec import RecordingError
    from mocapline.tools.recorder.take import run_recording, take_config

    path, cfg = take_config(args)
    if not path.is_file():
        raise ValueError(f"{path}: no such recording")
    try:
        run, _ = run_recording(path, cfg)
    except (OSError, ValueError, RecordingError) as exc:
        raise ValueError(str(exc)) from None
    return _clip_of_run(args, path, run)


def _recording_clip(args: Any) -> tuple[dict[str, np.ndarray], int, Path]:
    """A take folder or .mlrec, retargeted offline (ValueError, GapError: why not)."""
    from mocapline.tools.recorder.take import load_take

    loaded = load_take("mocapline export", args)
    if loaded is None:
        raise _Reported
    path, run, _ = loaded
    return _clip_of_run(args, path, run)


def _clip_of_run(args: Any, path: Path, run: Any) -> tuple[dict[str, np.ndarray], int, Path]:
    takes = split_takes(run.robot)
    if not takes:
        raise ValueError(f"{path}: no frames decoded")
    if not 0 <= args.take_index < len(takes):
        raise ValueError(f"--take-index {args.take_index}: the recording has {len(takes)} take(s)")
    meta = {"input": str(path), "input_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "take_index": args.take_index, "takes_in_input": len(takes), "source_frames": len(takes[args.take_index]),
            "config": run.config.describe(),
            "capture_ledger": run.capture_ledger, "generator": "mocapline export"}
    clip = export_frames(takes[args.take_index], float(run.config.input_fps or 60.0), args.fps,
                         max_gap=args.max_gap, on_gap=args.on_gap, meta=meta, robot=get_robot(run.config.robot_model))
    return clip, len(takes), path


def _series_clip(args: Any) -> tuple[dict[str, np.ndarray], int, Path]:
    """A .mltap / .mlmf: one performer's MocapFrames."""
    series = read_mocap_series(args.take)
    if not len(series):
        raise ValueError(f"{args.take}: no MocapFrames in it")
    performer = series.performers[0] if args.performer is None else args.performer
    if performer not in series.performers:
        raise ValueError(f"{args.take}: no frames of performer {performer} (it holds {series.performers})")
    takes = series_takes(series.of_performer(performer))
    if not 0 <= args.take_index < len(takes):
        raise ValueError(f"--take-index {args.take_index}: the recording has {len(takes)} take(s)")
    meta = {"input": str(args.take), "input_sha256": hashlib.sha256(args.take.read_bytes()).hexdigest(),
            "input_kind": series.kind.what, "input_meta": series.meta, "performer": performer,
            "avatar_name": series.avatar_names.get(performer, ""), "performers_in_input": series.performers,
            "take_index": args.take_index, "takes_in_input": len(takes), "generator": "mocapline export"}
    clip = export_series(takes[args.take_index], args.fps, max_gap=args.max_gap, on_gap=args.on_gap, meta=meta)
    return clip, len(takes), args.take


class _Reported(Exception):
    """The failure was already printed (load_take's messages)."""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        kind = check(args.take, "export")
        clip, takes, _ = _series_clip(args) if kind in (TakeKind.TAP, TakeKind.FRAMES) else _recording_clip(args)
    except _Reported:
        return 2
    except GapError as exc:
        print(f"mocapline export: {exc}", file=sys.stderr)
        return 3
    except (ValueError, OSError) as exc:  # TakeFileError, a damaged file, nothing to export
        print(f"mocapline export: {exc}", file=sys.stderr)
        return 2
    out = args.output or default_output(args.take, ".npz")
    summary = {**write_clip_files(out, clip, csv=not args.no_csv), "fps": args.fps,
               "duration_s": float(clip["time"][-1]), "invalid_samples": int((~clip["valid"]).sum()),
               "gaps": len(clip["gaps"]), "takes_in_input": takes}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
