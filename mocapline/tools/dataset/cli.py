"""`mocapline retarget-dataset SRC... --out DIR`: every take under the sources as robot motion, in
the formats trainers read, resumable.

Every ``.bvh`` (Axis Studio, CMU, Mixamo skeletons: detected from its joint names, each with its
own IK config) and ``.mlrec`` under each SRC (a folder, searched recursively, or a file) is
converted by the single-file path (``retarget-file``'s for a BVH, ``export``'s for a .mlrec) onto
``--robot-model``, and written under DIR at its path below its SRC, once per ``--format``
(``npz``: the project's clip; ``gmr-pkl``: GMR's motion pickle; ``beyondmimic-csv``: the CSV
BeyondMimic's csv_to_npz reads; docs/datasets.md). Tasks run on a local process pool
(``--workers``, default the cores) or on a Ray cluster (``--ray ADDRESS|auto|local``).

DIR/manifest/ holds one record per take (source sha256, settings hash, outputs and their sha256,
status, reason, quality figures); DIR/manifest.json all of them. A rerun skips what is done, redoes
what changed (the take or the settings), and (``--retry-failed``) what failed. Outputs are written
under a temporary name and renamed, so a kill -9 loses no finished take and leaves no half file.
A take that cannot be read, has an unknown skeleton or whose IK diverges is recorded with its
reason and the run goes on. At the end: a summary table on stderr, DIR/quality.json (per take and
per dataset), DIR/quality.png when matplotlib is installed, one JSON summary line on stdout.

Exit codes: 0 every take done, 1 some takes failed (the summary says how many), 2 bad options or
nothing to convert, 130 interrupted (what finished is kept).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from mocapline.core.options import EnvArgumentParser, positive_float, positive_int
from mocapline.core.paths import IK_CONFIG_DIR, SKELETON_DIR
from mocapline.formats.trainer import FORMATS, parse_formats
from mocapline.robot.registry import get_robot
from mocapline.tools.dataset import report
from mocapline.tools.dataset.engine import run_pool, run_ray
from mocapline.tools.dataset.manifest import DONE, FAILED, Manifest, settings_hash, sha256_file
from mocapline.tools.dataset.task import TakeResult, TakeTask
from mocapline.tools.retarget_file import CONVERSION, FileSettings, RetargetFileError, add_file_settings_arguments

PROG = "mocapline retarget-dataset"
KINDS = {".bvh": "bvh", ".mlrec": "mlrec"}


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _formats(text: str) -> tuple[str, ...]:
    try:
        return parse_formats(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("sources", nargs="+", type=Path, metavar="SRC", help="folders of takes (searched recursively) "
                   "or take files (.bvh, .mlrec)")
    p.add_argument("--out", "-o", type=Path, required=True, help="the dataset's folder (outputs, manifest, report)")
    p.add_argument("--format", dest="formats", type=_formats, default="npz",
                   help=f"output formats, comma-separated: {', '.join(FORMATS)} (default npz)")
    add_file_settings_arguments(p, each=True)
    p.add_argument("--workers", type=positive_int, default=default_workers(),
                   help="local worker processes (default: the cores this process may use)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="run the tasks on a Ray cluster: HOST:PORT, ray://HOST:PORT, auto (the cluster this machine "
                        "is in) or local (start one for this run); needs the [cluster] extra")
    p.add_argument("--retry-failed", action="store_true", help="convert again the takes recorded as failed")
    p.add_argument("--max-err-mm", type=positive_float, default=150.0,
                   help="a take whose mean position error is above this is recorded as diverged (failed)")
    p.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                   help="auto: a bar on a terminal, a line per take otherwise")
    return p


def discover(sources: list[Path], out: Path | None = None) -> tuple[list[tuple[str, Path, str]], list[str]]:
    """(take id, file, kind) of every take under the sources (none under ``out``), and what was
    left out and why."""
    found: dict[str, tuple[str, Path, str]] = {}
    notes = []
    inside = out.resolve() if out is not None else None
    for src in sources:
        if src.is_file():
            files = [(src, Path(src.name))]
        elif src.is_dir():
            files = [(p, p.relative_to(src)) for p in sorted(src.rglob("*"))
                     if p.is_file() and p.suffix.lower() in KINDS
                     and (inside is None or not p.resolve().is_relative_to(inside))]
        else:
            notes.append(f"{src}: no such file or folder")
            continue
        for path, rel in files:
            kind = KINDS.get(path.suffix.lower())
            if kind is None:
                notes.append(f"{path}: not a .bvh or .mlrec")
                continue
            take_id = str(rel.with_suffix(""))
            if take_id in found:
                notes.append(f"{path}: same output name as {found[take_id][1]}, left out")
                continue
            found[take_id] = (take_id, path, kind)
    return list(found.values()), notes


def _version() -> str:
    try:
        return importlib.metadata.version("mocapline")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def dataset_settings(args: argparse.Namespace) -> tuple[FileSettings, dict[str, Any], list[Path]]:
    settings = FileSettings.from_args(args)
    robot = get_robot(args.robot_model)
    files = [IK_CONFIG_DIR / name for name in robot.ik_configs.values()] + sorted(SKELETON_DIR.glob("*.json"))
    if Path(args.skeleton).is_file():
        files.append(Path(args.skeleton))
    described = {**asdict(settings), "formats": list(args.formats), "robot": repr(robot), "version": _version(),
                 "conversion": CONVERSION,
                 "max_err_mm": args.max_err_mm}
    return settings, described, files


class Progress:
    """Takes and frames done, rate and ETA: a redrawn bar on a terminal, else a line per take."""

    def __init__(self, total: int, mode: str, stream: TextIO = sys.stderr, width: int = 24) -> None:
        if mode == "auto":
            mode = "bar" if stream.isatty() else "lines"
        self.total, self.mode, self.stream, self.width = max(total, 1), mode, stream, width
        self.done = self.failed = self.frames = 0
        self.t0 = time.monotonic()
        self._drawn = 0.0

    def update(self, result: TakeResult) -> None:
        r = result.record
        self.done += 1
        self.failed += r["status"] == FAILED
        self.frames += int(r.get("frames", 0))
        elapsed = max(time.monotonic() - self.t0, 1e-9)
        eta = elapsed / self.done * (self.total - self.done)
        figures = (f"{self.done}/{self.total} takes, {self.frames} frames, {self.frames / elapsed:.0f} frames/s, "
                   f"ETA {int(eta) // 60}:{int(eta) % 60:02d}, {self.failed} failed")
        if self.mode == "lines":
            what = "done" if r["status"] == DONE else f"FAILED: {r.get('reason', '')}"
            self.stream.write(f"{PROG}: [{figures}] {r['take']}: {what}\n")
        elif self.mode == "bar":
            now = time.monotonic()
            if now - self._drawn < 0.1 and self.done < self.total:
                return
            self._drawn = now
            filled = int(self.width * self.done / self.total)
            self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {figures}")
            if self.done >= self.total:
                self.stream.write("\n")
        self.stream.flush()


def plan(manifest: Manifest, takes: list[tuple[str, Path, str]], settings: FileSettings, shash: str,
         formats: tuple[str, ...], args: argparse.Namespace) -> tuple[list[TakeTask], list[dict[str, Any]]]:
    """The tasks to run and the records of the takes kept as they are."""
    todo, kept = [], []
    for take_id, path, kind in takes:
        try:
            digest = sha256_file(path)
        except OSError as exc:
            digest = f"unreadable: {exc}"
        record = manifest.get(take_id)
        if (record is not None and record.get("source_sha256") == digest and record.get("settings_hash") == shash
                and (record["status"] == DONE or not args.retry_failed)):
            kept.append(record)
            continue
        todo.append(TakeTask(take_id, str(path), kind, digest, shash, settings, formats, args.max_err_mm))
    return todo, kept


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings, described, files = dataset_settings(args)
        settings.validate()
    except RetargetFileError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    takes, notes = discover(args.sources, args.out)
    for note in notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    if not takes:
        print(f"{PROG}: no .bvh or .mlrec take under {', '.join(map(str, args.sources))}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(args.out)
    manifest.folder.mkdir(exist_ok=True)
    cleaned = manifest.clean_temporaries()
    shash = settings_hash(described, files)
    todo, kept = plan(manifest, takes, settings, shash, args.formats, args)
    workers = min(args.workers, max(len(todo), 1))
    print(f"{PROG}: {len(takes)} takes: {len(kept)} already converted, {len(todo)} to convert on "
          f"{'Ray at ' + args.ray if args.ray else f'{workers} worker(s)'}"
          + (f"; removed {cleaned} temporary file(s) of an interrupted run" if cleaned else ""), file=sys.stderr)
    progress = Progress(len(todo), args.progress if todo else "none")
    converted: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    interrupted = False
    try:
        for result in run_ray(todo, args.ray) if args.ray else run_pool(todo, workers, staging=manifest.folder):
            manifest.commit(result.record, result.outputs)
            converted.append(result.record)
            progress.update(result)
    except KeyboardInterrupt:
        interrupted = True
    except RuntimeError as exc:  # no Ray
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - t0
    current = {take_id for take_id, _, _ in takes}
    records = [r for r in manifest.records() if r["take"] in current]
    summary = report.summarise(records, converted, seconds, engine=f"ray {args.ray}" if args.ray else f"pool {workers}")
    manifest.write_summary(records, {"summary": summary, "settings": described, "settings_hash": shash})
    summary.update(report.write_reports(args.out, records))
    report.print_table(records, summary, sys.stderr)
    print(json.dumps(summary))
    if interrupted:
        print(f"{PROG}: interrupted; {len(converted)} take(s) converted this run are kept, rerun to finish",
              file=sys.stderr)
        return 130
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
