"""A consumer's own journal: each frame's result and the frame's position in one record, so that
"applied" and "remembered" are one step and a consumer killed at any point applies each frame once
(``MocapClient.run``; docs/protocol.md, "Exactly once on your side").

Records go to a ``SegmentLog`` (CRC-framed, one ``write()`` each, a record torn by a crash cut off
at open), keyed by their number; each holds ``<16sqB`` (the sender's epoch, the frame_id, 1 when a
result follows) and the result's bytes. A record without a result moves the position alone (frames
the consumer skipped, and positions stored by ``save``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mocapline.core.segmentlog import Fsync, LogConfig, SegmentLog

_ENTRY = struct.Struct("<16sqB")


@dataclass(frozen=True)
class JournalEntry:
    epoch: bytes
    frame_id: int
    result: bytes


class Journal:
    """A ``PositionStore`` that also keeps results: ``record`` appends a frame's result with its
    position; ``load`` is the last record's position. ``fsync``: as the stages' logs (``never``
    survives a killed process; ``always`` a power cut too)."""

    def __init__(self, directory: Path | str, fsync: Fsync = "never") -> None:
        self.log = SegmentLog(Path(directory), "journal", LogConfig(fsync=fsync))
        self._position: tuple[bytes, int] | None = None
        if self.log.last is not None:
            epoch, frame_id, _ = _ENTRY.unpack_from(self.log.last[1])
            self._position = (epoch, frame_id)

    def load(self) -> tuple[bytes, int] | None:
        return self._position

    def record(self, epoch: bytes, frame_id: int, result: bytes | None) -> None:
        """The one step: the frame's result (None: nothing to keep) and its position, one record."""
        key = 0 if self.log.last_key is None else self.log.last_key + 1
        self.log.append(key, _ENTRY.pack(epoch, frame_id, result is not None) + (result or b""))
        self._position = (epoch, frame_id)

    def save(self, epoch: bytes, frame_id: int) -> None:
        """The position alone (frames handed out and not recorded: skipped ones)."""
        if (epoch, frame_id) != self._position:
            self.record(epoch, frame_id, None)

    def entries(self) -> Iterator[JournalEntry]:
        """Every recorded result, oldest first."""
        for _, data in self.log.read_from(0):
            epoch, frame_id, has_result = _ENTRY.unpack_from(data)
            if has_result:
                yield JournalEntry(epoch, frame_id, data[_ENTRY.size:])

    def close(self) -> None:
        self.log.close()
