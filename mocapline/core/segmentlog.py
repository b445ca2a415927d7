"""An append-only, segmented, CRC-framed log on disk: the one durable store of every service.

    directory/NAME-<first key, 20 digits>.seg
    segment := b"MLSEG001" record*
    record  := u64 key | u32 length | u32 crc32(data) | data[length]

Keys never decrease (several records may share one). A segment is closed and a new one started
when it passes ``max_segment_bytes`` or ``max_segment_age_s``; whole segments are removed by
``drop_before`` (what the consumer has acknowledged) or by ``retain_bytes`` (oldest first).
Opening a log recovers it: a record torn by a crash at the end of the newest segment is cut off,
everything before it is kept.

Fsync policy (``--fsync``), what each one survives:

- ``never``: every record is written with one ``write()`` before the caller goes on, so a killed
  process (``kill -9``, a crash) loses nothing: the kernel holds the bytes. A power cut or kernel
  panic loses what the kernel had not written back yet (up to ~30 s by default Linux settings).
- ``interval`` (default): as ``never``, plus ``fdatasync`` every ``fsync_interval_s`` (0.2 s) from
  a background thread: a power cut loses about that much, and a slow disk stalls no frame.
- ``always``: ``fdatasync`` after every record: nothing acknowledged is lost even on power cut,
  at the cost of one disk flush per frame (see ``bench durability`` for what that costs here).
"""

from __future__ import annotations

import itertools
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

MAGIC = b"MLSEG001"
_HEAD = struct.Struct("<QII")
Fsync = Literal["never", "interval", "always"]
FSYNC_POLICIES: tuple[Fsync, ...] = get_args(Fsync)


@dataclass(frozen=True)
class LogConfig:
    max_segment_bytes: int = 64 * 1024 * 1024
    max_segment_age_s: float = 600.0
    fsync: Fsync = "interval"
    fsync_interval_s: float = 0.2
    retain_bytes: int = 0  # 0 = keep until dropped; else remove the oldest segments beyond this

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy {self.fsync!r}: choose from {FSYNC_POLICIES}")
        if self.max_segment_bytes <= 0 or self.max_segment_age_s <= 0:
            raise ValueError("segment size and age limits must be positive")


def _segment_key(path: Path) -> int:
    return int(path.stem.rpartition("-")[2])


def iter_segment(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """(key, data, end offset) of each intact record, streamed; stops at the first torn or corrupt
    one. Nothing for a file without the magic."""
    with open(path, "rb", buffering=1 << 20) as fh:
        if fh.read(len(MAGIC)) != MAGIC:
            return
        pos = len(MAGIC)
        while len(head := fh.read(_HEAD.size)) == _HEAD.size:
            key, length, crc = _HEAD.unpack(head)
            data = fh.read(length)
            if len(data) != length or zlib.crc32(data) != crc:
                return
            pos += _HEAD.size + length
            yield key, data, pos


def read_segment(path: Path) -> tuple[list[tuple[int, bytes]], int]:
    """(records, bytes of intact data: where a torn tail starts)."""
    records: list[tuple[int, bytes]] = []
    good = 0
    for key, data, end in iter_segment(path):
        records.append((key, data))
        good = end
    if not records:
        with open(path, "rb") as fh:
            good = len(MAGIC) if fh.read(len(MAGIC)) == MAGIC else 0
    return records, good


class SegmentLog:
    """Append records under increasing keys; read them back from any key; drop old segments."""

    def __init__(self, directory: Path, name: str, config: LogConfig | None = None) -> None:
        self.directory = Path(directory)
        self.name = name
        self.config = config or LogConfig()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.last: tuple[int, bytes] | None = None  # the newest record (recovered at open)
        self.torn_bytes = 0  # bytes cut off a torn tail at open
        self._fd: int | None = None
        self._size = 0
        self._opened_at = 0.0
        self._lock = threading.Lock()  # the fd against the sync thread
        self._dirty = False
        self._closing = threading.Event()
        self._syncer: threading.Thread | None = None
        self._recover()
        if self.config.fsync == "interval":
            self._syncer = threading.Thread(target=self._sync_loop, name=f"fsync-{name}", daemon=True)
            self._syncer.start()

    def segments(self) -> list[Path]:
        return sorted(self.directory.glob(f"{self.name}-*.seg"), key=_segment_key)

    def _recover(self) -> None:
        segments = self.segments()
        while segments:
            newest = segments[-1]
            records, good = read_segment(newest)
            size = newest.stat().st_size
            if good == 0:  # not even the magic made it to disk
                newest.unlink()
                segments.pop()
                self.torn_bytes += size
                continue
            if good < size:
                self.torn_bytes += size - good
                os.truncate(newest, good)
            if records:
                self.last = records[-1]
                break
            segments.pop()  # an empty segment: the newest record is in an older one
        if self.last is None:
            return
        newest = self.segments()[-1]
        self._fd = os.open(newest, os.O_WRONLY | os.O_APPEND)
        self._size = newest.stat().st_size
        self._opened_at = time.monotonic()

    @property
    def last_key(self) -> int | None:
        return None if self.last is None else self.last[0]

    def append(self, key: int, data: bytes) -> None:
        """One record, written with a single write(): durable against a killed process at return."""
        if self.last is not None and key < self.last[0]:
            raise ValueError(f"{self.name}: key {key} after {self.last[0]}: keys never decrease")
        c = self.config
        too_old = time.monotonic() - self._opened_at >= c.max_segment_age_s
        if self._fd is None or self._size >= c.max_segment_bytes or too_old:
            self._rotate(key)
        assert self._fd is not None
        record = _HEAD.pack(key, len(data), zlib.crc32(data)) + data
        os.write(self._fd, record)
        self._size += len(record)
        self.last = (key, data)
        self._dirty = True
        if c.fsync == "always":
            os.fdatasync(self._fd)

    def _sync_loop(self) -> None:
        """``interval``: flush to disk off the writer's path (fdatasync releases the GIL), so a slow
        disk delays nobody; a duplicate of the fd keeps a rotation from closing it underneath."""
        while not self._closing.wait(self.config.fsync_interval_s):
            with self._lock:
                if not self._dirty or self._fd is None:
                    continue
                fd = os.dup(self._fd)
                self._dirty = False
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)

    def _rotate(self, key: int) -> None:
        with self._lock:
            self._rotate_locked(key)
        self._enforce_retention()

    def _rotate_locked(self, key: int) -> None:
        if self._fd is not None:
            if self.config.fsync != "never":
                os.fdatasync(self._fd)
            os.close(self._fd)
        path = self.directory / f"{self.name}-{key:020d}.seg"
        if path.exists():  # several records under one key across a rotation: keep appending there
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self._size = path.stat().st_size
        else:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(self._fd, MAGIC)
            self._size = len(MAGIC)
            if self.config.fsync != "never":
                dir_fd = os.open(self.directory, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)  # the new file's name is durable too
                finally:
                    os.close(dir_fd)
        self._opened_at = time.monotonic()

    def read_from(self, key: int) -> Iterator[tuple[int, bytes]]:
        """Every record with a key >= ``key``, in order (reads the disk; for recovery and resends)."""
        segments = self.segments()
        start = 0
        for i, path in enumerate(segments):
            if _segment_key(path) < key:  # an equal first key may continue the segment before
                start = i
        for path in segments[start:]:
            try:
                for rec_key, data, _ in iter_segment(path):
                    if rec_key >= key:
                        yield rec_key, data
            except FileNotFoundError:  # dropped meanwhile (acknowledged): the next one goes on
                continue

    def drop_before(self, key: int) -> int:
        """Remove whole segments whose records all have keys < ``key`` (never the one written to).
        Returns how many were removed."""
        segments = self.segments()
        removed = 0
        for path, following in itertools.pairwise(segments):
            if _segment_key(following) < key:
                path.unlink(missing_ok=True)
                removed += 1
            else:
                break
        return removed

    def _enforce_retention(self) -> None:
        if self.config.retain_bytes <= 0:
            return
        segments = self.segments()
        sizes = [p.stat().st_size for p in segments]
        total = sum(sizes)
        for path, size in zip(segments[:-1], sizes[:-1], strict=True):
            if total <= self.config.retain_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size

    def first_key(self) -> int | None:
        """The first key of the oldest segment on disk (None when there is none)."""
        segments = self.segments()
        return _segment_key(segments[0]) if segments else None

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.segments())

    def close(self) -> None:
        self._closing.set()
        if self._syncer is not None:
            self._syncer.join(timeout=5)
        with self._lock:
            if self._fd is not None:
                if self.config.fsync != "never":
                    os.fdatasync(self._fd)
                os.close(self._fd)
                self._fd = None
