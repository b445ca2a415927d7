"""The dataset's manifest: one record per take in ``DIR/manifest/``, the truth a rerun reads, and
``DIR/manifest.json``, every record in one file, rewritten from them.

A take is committed in three renames: its record as ``NAME.pending`` (with the sha256 of every
output it is about to place), the outputs from their temporary names, then the record to
``NAME.json``. A driver killed between the first and the last leaves a pending record whose
outputs are checked on the next run: all there with those hashes, the take is done (adopted, not
redone); otherwise it is redone. A temporary file is never a finished output.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECORDS = "manifest"
MANIFEST = "manifest.json"
TMP_MARK = ".tmp-"  # in every temporary name (NAME.tmp-PID-N)
DONE, FAILED = "done", "failed"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def settings_hash(settings: Mapping[str, Any], files: Iterable[Path]) -> str:
    """What decides a take's outputs besides the take: the settings and the files they read
    (robot description, IK configs, skeleton maps), by content."""
    h = hashlib.sha256(json.dumps(dict(settings), sort_keys=True, default=str).encode())
    for path in sorted(files):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


_counter = 0


def temp_name(path: Path) -> Path:
    global _counter
    _counter += 1
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}-{_counter}")


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` as ``path``: written under a temporary name, flushed to disk, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def record_name(take_id: str) -> str:
    return take_id.replace(os.sep, "__")


@dataclass
class Manifest:
    """The records of one output folder."""

    root: Path

    @property
    def folder(self) -> Path:
        return self.root / RECORDS

    def path(self, take_id: str, suffix: str = ".json") -> Path:
        return self.folder / f"{record_name(take_id)}{suffix}"

    def get(self, take_id: str) -> dict[str, Any] | None:
        """The committed record of a take, or a pending one whose outputs all landed (adopted)."""
        done = self.path(take_id)
        if done.is_file():
            return dict(json.loads(done.read_text()))
        pending = self.path(take_id, ".pending")
        if not pending.is_file():
            return None
        record = dict(json.loads(pending.read_text()))
        outputs = record.get("outputs", {})
        if all((self.root / rel).is_file() and sha256_file(self.root / rel) == digest
               for rel, digest in outputs.items()):
            os.replace(pending, done)
            return record
        return None

    def commit(self, record: dict[str, Any], outputs: Mapping[str, bytes]) -> None:
        """Place a take's outputs (relative paths -> bytes) and its record, in the order above."""
        take_id = str(record["take"])
        record = {**record, "outputs": {rel: sha256_bytes(data) for rel, data in outputs.items()}}
        body = json.dumps(record, sort_keys=True).encode()
        pending = self.path(take_id, ".pending")
        write_atomic(pending, body)
        for rel, data in outputs.items():
            write_atomic(self.root / rel, data)
        os.replace(pending, self.path(take_id))

    def clean_temporaries(self) -> int:
        """Remove what a killed run left under temporary names (files, and the folders its pool's
        results waited in, with what they hold); how many files."""
        n = 0
        for p in sorted(self.root.rglob(f"*{TMP_MARK}*")):
            if p.is_dir():
                n += sum(1 for f in p.rglob("*") if f.is_file())
                shutil.rmtree(p)
            elif p.is_file():
                p.unlink()
                n += 1
        return n

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.folder.glob("*.json"))] if self.folder.is_dir() else []

    def write_summary(self, records: list[dict[str, Any]], extra: Mapping[str, Any]) -> Path:
        """``manifest.json``: the run's figures and the records of the takes it found, by take
        (the records of takes no longer under the sources stay in ``manifest/``)."""
        body = {**extra, "takes": {r["take"]: r for r in records}}
        path = self.root / MANIFEST
        write_atomic(path, json.dumps(body, indent=1, sort_keys=True).encode())
        return path
