"""One take of a dataset, converted: the function the process pool and Ray both run.

It reads the take, converts it through the one single-file path (``retarget_file.convert`` for a
BVH, ``export``'s offline replay for a ``.mlrec``), renders every requested format to bytes and
returns them with the take's record; it writes nothing, so a worker (or a Ray node) killed
half-way leaves no file behind, and the driver alone places outputs (``Manifest.commit``).
Anything wrong with the take becomes a failed record with its reason, never an exception.
"""

from __future__ import annotations

import io
import json
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.formats.trainer import SUFFIX, WRITERS
from mocapline.tools.dataset.manifest import DONE, FAILED
from mocapline.tools.retarget_file import FileSettings, RetargetFileError, convert

# A take whose IK diverges: its clip is written but its record says so (status failed) when
# more than this share of its frames failed or its mean position error exceeds ``max_err_mm``.
MAX_FAILED_SHARE = 0.05


@dataclass(frozen=True)
class TakeTask:
    take: str  # the take's id: its path under its source folder, without suffix
    source: str  # the file
    kind: str  # "bvh" or "mlrec"
    source_sha256: str
    settings_hash: str
    settings: FileSettings
    formats: tuple[str, ...]
    max_err_mm: float = 150.0


@dataclass
class TakeResult:
    record: dict[str, Any]
    outputs: dict[str, bytes] = field(default_factory=dict)  # relative path -> bytes


def _mlrec_clip(task: TakeTask) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from mocapline.tools.recorder.export import build_parser, recording_clip

    s = task.settings
    args = build_parser().parse_args([task.source, "--fps", repr(s.fps), "--robot-model", s.robot_model,
                                      "--on-gap", "flag", "--no-csv", "--joint-ranges", s.joint_ranges]
                                     + ([] if s.human_height is None else ["--human-height", repr(s.human_height)])
                                     + ([] if s.footing else ["--no-footing"])
                                     + (["--keep-flight"] if s.keep_flight else []))
    clip, _, _ = recording_clip(args)
    summary = {"frames": int(json.loads(str(clip["meta"]))["source_frames"]), "ik_failed": int(clip["ik_failed"].sum()),
               "invalid_samples": int((~clip["valid"]).sum())}
    return clip, summary


def run_task(task: TakeTask) -> TakeResult:
    """Convert one take (never raises for a bad take: the record says why)."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    record: dict[str, Any] = {"take": task.take, "source": task.source, "source_sha256": task.source_sha256,
                              "settings_hash": task.settings_hash, "kind": task.kind}
    try:
        if task.kind == "mlrec":
            clip, summary = _mlrec_clip(task)
        else:
            converted = convert(Path(task.source), task.settings)
            clip, summary = converted.clip, converted.summary
    except (RetargetFileError, ValueError, OSError) as exc:
        return TakeResult({**record, "status": FAILED, "reason": str(exc), "seconds": time.perf_counter() - t0})
    except Exception as exc:  # noqa: BLE001 (a take must never stop the run: recorded with its traceback's last line)
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return TakeResult({**record, "status": FAILED, "reason": f"internal error: {last}",
                           "seconds": time.perf_counter() - t0})
    quality = {k: v for k, v in summary.items() if k not in ("take", "seconds", "cpu_seconds", "frames_per_s")}
    outputs = {}
    for fmt in task.formats:
        buf = io.BytesIO()
        WRITERS[fmt](buf, clip)
        outputs[task.take + SUFFIX[fmt]] = buf.getvalue()
    frames = int(summary.get("frames", 0))
    reason = ""
    if frames and summary.get("ik_failed", 0) > MAX_FAILED_SHARE * frames:
        reason = f"IK diverged: {summary['ik_failed']} of {frames} frames failed"
    elif summary.get("err_mm", 0.0) > task.max_err_mm:
        reason = f"IK diverged: mean position error {summary['err_mm']} mm > {task.max_err_mm} mm"
    return TakeResult({**record, "status": FAILED if reason else DONE, "reason": reason, "frames": frames,
                       "samples": int(len(clip["time"])), "quality": quality,
                       "settings": asdict(task.settings), "seconds": round(time.perf_counter() - t0, 3),
                       "cpu_seconds": round(time.process_time() - cpu0, 3)}, outputs)
