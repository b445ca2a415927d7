"""A stage's durable memory: one record per input frame, holding the input's link position, the
frames it produced and the stage's counters after it. Appending the record is the one step that
makes a frame both processed and remembered (``mocapline/core/durable.py``); the records' outputs are
also the sender's outbox on disk (``mocapline/core/reliable.py`` resends from them).

    record := input epoch (16) | input seq i64 | output count u16 | state length u32 | state
              | (message type u8 | capture timestamp u64 | payload length u32 | payload)*
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mocapline.core.header import MessageType
from mocapline.core.segmentlog import LogConfig, SegmentLog

_REC = struct.Struct("<16sqHI")  # input epoch, input seq, output count, state length
_OUT = struct.Struct("<BQI")  # message type, capture timestamp (us), payload length


@dataclass
class Output:
    message_type: MessageType
    payload: bytes
    capture_timestamp_us: int = 0


@dataclass
class StageRecord:
    in_epoch: bytes
    in_seq: int
    state: bytes
    outputs: list[Output] = field(default_factory=list)

    def encode(self) -> bytes:
        parts = [_REC.pack(self.in_epoch, self.in_seq, len(self.outputs), len(self.state)), self.state]
        for out in self.outputs:
            parts.append(_OUT.pack(int(out.message_type), out.capture_timestamp_us, len(out.payload)))
            parts.append(out.payload)
        return b"".join(parts)

    @classmethod
    def decode(cls, blob: bytes) -> StageRecord:
        in_epoch, in_seq, n_out, n_state = _REC.unpack_from(blob, 0)
        pos = _REC.size
        state = blob[pos : pos + n_state]
        pos += n_state
        outputs = []
        for _ in range(n_out):
            kind, cap_us, n = _OUT.unpack_from(blob, pos)
            pos += _OUT.size
            outputs.append(Output(MessageType(kind), blob[pos : pos + n], cap_us))
            pos += n
        return cls(in_epoch, in_seq, state, outputs)


class StageLog:
    """A stage's durable memory: its outputs (the sender's outbox on disk) and where its input
    stands. Keyed by the sequence number of the record's first output (``key_by_input``: by the
    input's sequence number, for a stage that sends nothing on, the viewer)."""

    def __init__(
        self, directory: Path, name: str, config: LogConfig | None = None, *, key_by_input: bool = False
    ) -> None:
        self.directory = Path(directory)
        self.log = SegmentLog(self.directory, name, config)
        self.key_by_input = key_by_input
        self.epoch = self._load_epoch(self.directory / f"{name}.epoch")
        self.last: StageRecord | None = None
        self.next_seq = 0
        if self.log.last is not None:
            self.last = StageRecord.decode(self.log.last[1])
            if not key_by_input:
                self.next_seq = self.log.last[0] + len(self.last.outputs)

    @staticmethod
    def _load_epoch(path: Path) -> bytes:
        if path.exists() and len(raw := path.read_bytes()) == 16:
            return raw
        epoch = uuid.uuid4().bytes
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(epoch)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return epoch

    @property
    def state(self) -> dict[str, Any] | None:
        """The counters stored with the newest record (None for a fresh log)."""
        return None if self.last is None or not self.last.state else json.loads(self.last.state)

    def append(self, record: StageRecord) -> int:
        """Write one record (the durable step); returns the sequence number of its first output."""
        first = self.next_seq
        if self.key_by_input:  # -1 (nothing received yet) and repeats (a reset) keep the last key
            key = max(record.in_seq, 0, self.log.last_key or 0)
        else:
            key = first
        self.log.append(key, record.encode())
        self.next_seq += len(record.outputs)
        self.last = record
        return first

    def outputs_from(self, seq: int) -> Iterator[tuple[int, Output]]:
        """Every output with sequence number >= seq, read from disk."""
        for key, blob in self.log.read_from(seq):
            rec = StageRecord.decode(blob)
            for k, out in enumerate(rec.outputs):
                if key + k >= seq:
                    yield key + k, out

    def first_seq(self) -> int:
        """The oldest output still on disk."""
        first = self.log.first_key()
        return self.next_seq if first is None else first

    def close(self) -> None:
        self.log.close()


@dataclass
class DiskStream:
    """One reader's pass over the log on disk (a resend of a backlog older than the cache)."""

    it: Iterator[tuple[int, Output]] | None = None
    next: int = -1


class Outbox:
    """A StageLog's outputs by sequence number: the newest ``cache`` in memory, older ones
    streamed from disk, one pass per reader (``DiskStream``) however long the backlog."""

    def __init__(self, stage_log: StageLog, cache: int = 4096) -> None:
        self.stage_log = stage_log
        self._cache: deque[tuple[int, Output]] = deque(maxlen=cache)

    def append(self, first: int, outputs: list[Output]) -> None:
        for k, out in enumerate(outputs):
            self._cache.append((first + k, out))

    def fetch(self, seq: int, stream: DiskStream) -> tuple[int, Output]:
        """Output ``seq``, or the next one still on disk when retention removed it (the caller
        sees the higher number and counts the skip)."""
        cache = self._cache
        if cache and cache[0][0] <= seq < cache[0][0] + len(cache):
            entry = cache[seq - cache[0][0]]
            if entry[0] == seq:
                return entry
        if stream.next != seq or stream.it is None:
            stream.it = self.stage_log.outputs_from(seq)
        item = next(stream.it, None)
        if item is None:
            stream.it = None
            raise RuntimeError(f"frame {seq} is neither cached nor on disk")
        stream.next = item[0] + 1
        return item
