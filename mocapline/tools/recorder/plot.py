"""`mocapline plot TAKE`: PNG plots of a take, for a first look without any other tool.

TAKE is a take folder of ``mocapline record`` or a ``.mlrec`` recording. Written to ``--out``
(default ``TAKE/plots``, or ``<recording stem>_plots`` next to a .mlrec):

- ``joints.png``: the robot's joint angles (rad) over the take (the offline retarget of the raw
  datagrams, see ``mocapline/tools/recorder/take.py``), each against its lower / upper limit (dashed red);
- ``latency.png``: per-frame latency (ms) from capture to send: each MocapFrame's send time minus
  its ``capture_timestamp_us`` (needs the take's ``frames.mlmf``; otherwise the plot says so);
- ``timeline.png``: posture_index against receive time, the missing ranges marked in red (shaded
  spans between the frames around each gap, and their posture_index ranges in the title).

matplotlib (Agg backend, no display needed) is imported only here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.options import EnvArgumentParser


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline plot", description=__doc__)
    p.add_argument("take", type=Path, help="a take folder of `mocapline record` or a .mlrec recording")
    p.add_argument("--out", type=Path, default=None, help="folder for the PNGs")
    p.add_argument("--frames", type=Path, default=None, help="the take's .mlmf (default: TAKE/frames.mlmf)")
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
    fig.suptitle("G1 joint angles (rad) against their limits (dashed)")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_latency(path: Path, send_ns: np.ndarray, capture_us: np.ndarray, dpi: int = 100) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 4))
    if len(send_ns):
        lat_ms = (send_ns.astype(np.float64) - capture_us.astype(np.float64) * 1000.0) / 1e6
        ax.plot(np.arange(len(lat_ms)), lat_ms, lw=0.8)
        p50, p99 = np.percentile(lat_ms, [50, 99])
        ax.set_title(f"capture -> sent latency per MocapFrame: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
                     f"max {lat_ms.max():.2f} ms")
        ax.set_xlabel("MocapFrame index")
        ax.set_ylabel("ms")
    else:
        ax.text(0.5, 0.5, "no recorded MocapFrames (frames.mlmf) for this take", ha="center", va="center")
        ax.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_timeline(path: Path, recv_s: np.ndarray, index: np.ndarray, missing: list[list[int]], dpi: int = 100) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot(recv_s, index, ".", ms=2, label="frame received")
    for a, b in missing:
        before = np.flatnonzero(index < a)
        after = np.flatnonzero(index > b)
        if len(before) and len(after):
            ax.axvspan(recv_s[before[-1]], recv_s[after[0]], color="tab:red", alpha=0.3)
        ax.axhspan(a - 0.5, b + 0.5, color="tab:red", alpha=0.15)
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in missing[:8]) + (" ..." if len(missing) > 8 else "")
    ax.set_title(f"posture_index timeline; {len(missing)} gap(s)" + (f": {text}" if missing else ""))
    ax.set_xlabel("receive time (s from the first frame)")
    ax.set_ylabel("posture_index")
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    from mocapline.core import pb
    from mocapline.formats.mlmf import FrameFileError, read_frame_file
    from mocapline.robot.model import joint_ranges, load_ik_model
    from mocapline.robot.registry import get_robot
    from mocapline.tools.recorder.take import load_take

    args = build_parser().parse_args(argv)
    folder = Path(args.take) if Path(args.take).is_dir() else None
    # load_take uses the take's own configuration
    loaded = load_take("mocapline plot", args)
    if loaded is None:
        return 2
    path, run, _ = loaded
    out = args.out or (folder / "plots" if folder else path.with_name(path.stem + "_plots"))
    out.mkdir(parents=True, exist_ok=True)
    fps = float(run.config.input_fps or 60.0)
    if not run.robot:
        print(f"mocapline plot: {path}: no frames decoded", file=sys.stderr)
        return 2
    index = np.array([f.posture_index for f in run.robot])
    q = np.array([f.joint_pos for f in run.robot])
    t = (index - index[0]) / fps
    robot = get_robot(run.config.robot_model)
    plot_joints(out / "joints.png", t, q, list(robot.joint_names), joint_ranges(load_ik_model(robot)), args.dpi)
    recv = np.array([f.capture_timestamp_us for f in run.human], dtype=np.float64) / 1e6
    plot_timeline(out / "timeline.png", recv - recv[0], np.array([f.posture_index for f in run.human]),
                  run.capture_ledger.get("missing_ranges", []), args.dpi)
    frames_path = args.frames or (folder / "frames.mlmf" if folder else None)
    send, cap = np.zeros(0, np.int64), np.zeros(0, np.int64)
    if frames_path is not None and frames_path.is_file():
        try:
            ff = read_frame_file(frames_path)
        except (FrameFileError, OSError) as exc:
            print(f"mocapline plot: {exc}", file=sys.stderr)
            return 2
        msg = pb.MocapFrame()
        caps = []
        for payload in ff.payloads:
            msg.ParseFromString(payload)
            caps.append(msg.capture_timestamp_us)
        send, cap = np.array(ff.times_ns, np.int64), np.array(caps, np.int64)
    plot_latency(out / "latency.png", send, cap, args.dpi)
    print(json.dumps({"plots": [str(out / n) for n in ("joints.png", "latency.png", "timeline.png")],
                      "latency_frames": len(send)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
