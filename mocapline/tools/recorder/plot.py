"""`mocapline plot TAKE`: PNG plots of a take, for a first look without any other tool.

TAKE is any take file that holds the robot's motion (mocapline/formats/takefile.py): a take folder
of ``mocapline record`` or a ``.mlrec`` (retargeted offline, as the live pipeline does: see
``mocapline/tools/recorder/take.py``), a ``.mltap`` of ``mocapline tap --record``, a ``.mlmf`` of
the streamer, or a reference clip ``.npz`` of ``export`` / ``retarget-file``. Written to ``--out``
(default ``./<take>_plots`` in the working directory, never beside the take):

- ``joints.png``: the robot's joint angles (rad) over the take (the take's robot build), each
  against its lower / upper limit (dashed red);
- ``root.png``: the pelvis' path seen from above, and its height over time;
- ``latency.png``, where the file has the times: per-frame latency (ms) from capture's receive to
  the frame's send (a take folder's ``frames.mlmf``, a ``.mlmf`` made live) or to the tap's receive
  (``.mltap``). A bare ``.mlrec`` or a clip keeps no such times: no latency.png, and the summary
  line says so (``latency``);
- ``timeline.png``: posture_index against time, the missing ranges marked in red (shaded spans
  between the frames around each gap, and their posture_index ranges in the title).

One JSON line on stdout names the PNGs written. matplotlib (Agg backend, no display needed) is
imported only here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.options import EnvArgumentParser
from mocapline.formats.takefile import (
    TAKE_FRAMES,
    MocapSeries,
    TakeKind,
    check,
    default_output,
    read_clip,
    read_mocap_series,
)

NO_TIMES = ("{what} keeps no send or receive times of MocapFrames: a take folder of `mocapline record` or a "
            ".mltap has them")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline plot", description=__doc__)
    p.add_argument("take", type=Path, help="a take folder, .mlrec, .mltap, .mlmf or reference clip .npz")
    p.add_argument("--out", type=Path, default=None, help="folder for the PNGs (default: ./TAKE_plots)")
    p.add_argument("--frames", type=Path, default=None,
                   help="a take folder or .mlrec: its .mlmf, for the latency (default: TAKE/frames.mlmf)")
    p.add_argument("--performer", type=int, default=None, metavar="AVATAR_INDEX",
                   help=".mltap / .mlmf with several performers: this one (default: the first)")
    p.add_argument("--dpi", type=int, default=100, help="resolution of the PNGs")
    return p


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_joints(path: Path, t: np.ndarray, q: np.ndarray, names: list[str], ranges: np.ndarray, dpi: int = 100) -> None:
    plt = _plt()
    fig, axes = plt.subplots(6, 5, figsize=(20, 16), sharex=True)
    for k, ax in enumerate(axes.flat):
        if k >= q.shape[1]:
            ax.axis("off")
            continue
        ax.plot(t, q[:, k], lw=1.0, color="tab:blue")
        lo, hi = ranges[k]
        ax.axhline(lo, color="tab:red", ls="--", lw=0.8)
        ax.axhline(hi, color="tab:red", ls="--", lw=0.8)
        at_limit = (q[:, k] <= lo + 1e-3) | (q[:, k] >= hi - 1e-3)
        if at_limit.any():
            ax.plot(t[at_limit], q[at_limit, k], ".", ms=2, color="tab:red")
        ax.set_title(names[k].removesuffix("_joint"), fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("time (s)", fontsize=8)
    fig.suptitle("joint angles (rad) against their limits (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_root(path: Path, t: np.ndarray, root_pos: np.ndarray, dpi: int = 100) -> None:
    """The pelvis from above (x, y) and its height over time."""
    plt = _plt()
    fig, (top, height) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [1, 1.6]})
    top.plot(root_pos[:, 0], root_pos[:, 1], lw=1.0)
    top.plot(root_pos[:1, 0], root_pos[:1, 1], "o", color="tab:green", label="start")
    top.plot(root_pos[-1:, 0], root_pos[-1:, 1], "s", color="tab:red", label="end")
    top.set_aspect("equal", adjustable="datalim")
    top.set_xlabel("x (m)")
    top.set_ylabel("y (m)")
    top.set_title("pelvis path, from above")
    top.legend(fontsize=8)
    height.plot(t, root_pos[:, 2], lw=1.0)
    height.set_xlabel("time (s)")
    height.set_ylabel("z (m)")
    height.set_title("pelvis height")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_latency(path: Path, lat_ms: np.ndarray, what: str, dpi: int = 100) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(np.arange(len(lat_ms)), lat_ms, lw=0.8)
    p50, p99 = np.percentile(lat_ms, [50, 99])
    ax.set_title(f"{what} latency per MocapFrame: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {lat_ms.max():.2f} ms")
    ax.set_xlabel("MocapFrame")
    ax.set_ylabel("ms")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_timeline(path: Path, t_s: np.ndarray, index: np.ndarray, missing: list[list[int]], dpi: int = 100,
                  xlabel: str = "receive time (s from the first frame)") -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(t_s, index, ".", ms=2, label="frame")
    for a, b in missing:
        before = np.flatnonzero(index < a)
        after = np.flatnonzero(index > b)
        if len(before) and len(after):
            ax.axvspan(t_s[before[-1]], t_s[after[0]], color="tab:red", alpha=0.3)
        ax.axhspan(a - 0.5, b + 0.5, color="tab:red", alpha=0.15)
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in missing[:8]) + (" ..." if len(missing) > 8 else "")
    ax.set_title(f"posture_index timeline; {len(missing)} gap(s)" + (f": {text}" if missing else ""))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("posture_index")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


class Figures:
    """The PNGs of one take, and the summary line that names them."""

    def __init__(self, out: Path, dpi: int) -> None:
        self.out, self.dpi = out, dpi
        self.summary: dict[str, Any] = {"plots": []}

    def _add(self, name: str) -> Path:
        self.out.mkdir(parents=True, exist_ok=True)
        self.summary["plots"].append(str(self.out / name))
        return self.out / name

    def motion(self, t: np.ndarray, q: np.ndarray, root_pos: np.ndarray, robot_model: str = "") -> None:
        """``robot_model``: the take's build ("": the default), whose joints and limits q is in."""
        from mocapline.robot.model import joint_ranges, load_ik_model
        from mocapline.robot.registry import get_robot

        robot = get_robot(robot_model) if robot_model else get_robot()
        if q.shape[1] != robot.joint_count:
            raise ValueError(f"{q.shape[1]} joints a frame, the {robot.name} has {robot.joint_count}")
        self.summary["robot_model"] = robot.name
        plot_joints(self._add("joints.png"), t, q, list(robot.joint_names), joint_ranges(load_ik_model(robot)),
                    self.dpi)
        plot_root(self._add("root.png"), t, root_pos, self.dpi)

    def latency(self, lat_ms: np.ndarray, what: str, absent: str) -> None:
        self.summary["latency_frames"] = len(lat_ms)
        if len(lat_ms):
            plot_latency(self._add("latency.png"), lat_ms, what, self.dpi)
        else:
            self.summary["latency"] = absent

    def timeline(self, t_s: np.ndarray, index: np.ndarray, missing: list[list[int]], xlabel: str) -> None:
        plot_timeline(self._add("timeline.png"), t_s, index, missing, self.dpi, xlabel)


def gaps_of(index: np.ndarray) -> list[list[int]]:
    """The posture_index ranges missing between consecutive frames of one take (a backward jump,
    a new segment, is none)."""
    step = np.diff(index)
    return [[int(index[k] + 1), int(index[k + 1] - 1)] for k in np.flatnonzero(step > 1)]


def plot_recording(args: Any, figures: Figures) -> str | None:
    """A take folder or .mlrec: the offline retarget's motion, capture's timeline and, from the
    take's .mlmf, the latency. An error message, or None."""
    from mocapline.tools.recorder.take import load_take

    loaded = load_take("mocapline plot", args)  # with the take's own configuration
    if loaded is None:
        return ""
    _, run, _ = loaded
    if not run.robot:
        return "no frames decoded"
    fps = float(run.config.input_fps or 60.0)
    index = np.array([f.posture_index for f in run.robot])
    figures.motion((index - index[0]) / fps, np.array([f.joint_pos for f in run.robot]),
                   np.array([f.root_pos for f in run.robot]), run.config.robot_model)
    recv = np.array([f.capture_timestamp_us for f in run.human], dtype=np.float64) / 1e6
    figures.timeline(recv - recv[0], np.array([f.posture_index for f in run.human]),
                     run.capture_ledger.get("missing_ranges", []), "receive time (s from the first frame)")
    folder = Path(args.take) if Path(args.take).is_dir() else None
    frames_path = args.frames or (folder / TAKE_FRAMES if folder else None)
    lat = np.zeros(0)
    if frames_path is not None and frames_path.is_file():
        lat = read_mocap_series(frames_path).latency_ms()
    figures.latency(lat, "capture -> sent", NO_TIMES.format(what="a bare .mlrec (the datagrams alone)"))
    return None


def plot_series(series: MocapSeries, performer: int | None, figures: Figures) -> str | None:
    """A .mltap / .mlmf: the frames as the robot port carried them (one performer)."""
    if not len(series):
        return "no MocapFrames in it"
    chosen = series.performers[0] if performer is None else performer
    if chosen not in series.performers:
        return f"no frames of performer {chosen} (it holds {series.performers})"
    one = series.of_performer(chosen)
    figures.summary.update(performer=chosen, performers=series.performers)
    t = one.source_time_s - one.source_time_s[0]
    figures.motion(t, one.joint_pos, one.root_pos, series.robot_model)
    real = ~one.bridged
    figures.timeline(t[real], one.posture_index[real], gaps_of(one.posture_index[real]),
                     "stream time (s from the first frame)")
    what = "capture -> tap received" if series.kind is TakeKind.TAP else "capture -> sent"
    figures.latency(one.latency_ms(), what, NO_TIMES.format(what="this .mlmf (made offline)"))
    return None


def plot_clip(clip: dict[str, np.ndarray], figures: Figures) -> str | None:
    """A reference clip: its samples (no timestamps of a run)."""
    figures.motion(clip["time"], clip["q"], clip["root_pose"][:, :3], str(clip.get("robot_model", "")))
    figures.timeline(clip["time"], clip["posture_index"], clip["gaps"].tolist(), "clip time (s)")
    figures.latency(np.zeros(0), "", NO_TIMES.format(what="a reference clip"))
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        kind = check(args.take, "plot")
        figures = Figures(args.out or default_output(args.take, "_plots"), args.dpi)
        if kind in (TakeKind.TAP, TakeKind.FRAMES):
            problem = plot_series(read_mocap_series(args.take), args.performer, figures)
        elif kind is TakeKind.CLIP:
            problem = plot_clip(read_clip(args.take), figures)
        else:
            problem = plot_recording(args, figures)
    except (ValueError, OSError) as exc:  # TakeFileError, a damaged file
        print(f"mocapline plot: {exc}", file=sys.stderr)
        return 2
    if problem is not None:
        if problem:
            print(f"mocapline plot: {args.take}: {problem}", file=sys.stderr)
        return 2
    print(json.dumps(figures.summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
