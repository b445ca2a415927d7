"""Capture's raw journal: every datagram the UDP sockets deliver, on disk before it is processed.

Written by the receive threads right after ``recvfrom`` (one ``write()`` per datagram, so a
killed capture loses at most the datagram between those two calls), read back when capture
restarts: the take is replayed through a fresh CaptureCore, which rebuilds the ledger and the
merge state exactly, and the HumanFrames already in capture's stage log are not sent again.

    record  := kind u8 | recv_ns u64 | port u16 | source length u8 | source | data
    kind 0  := a datagram; kind 1 := a take starts (data: the session id, ASCII)
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from mocapline.core.segmentlog import LogConfig, SegmentLog, read_segment
from mocapline.core.udp import Datagram

_HEAD = struct.Struct("<BQHB")
DATAGRAM, TAKE_START = 0, 1


def _encode(kind: int, recv_ns: int, port: int, source: str, data: bytes) -> bytes:
    src = source.encode()[:255]
    return _HEAD.pack(kind, recv_ns, port, len(src)) + src + data


def _decode(blob: bytes) -> tuple[int, int, int, str, bytes]:
    kind, recv_ns, port, n = _HEAD.unpack_from(blob, 0)
    src = blob[_HEAD.size : _HEAD.size + n].decode(errors="replace")
    return kind, recv_ns, port, src, blob[_HEAD.size + n :]


class RawJournal:
    """Append-only, thread-safe (one receive thread per port); keys are journal sequence numbers."""

    def __init__(self, directory: Path, config: LogConfig | None = None) -> None:
        self.log = SegmentLog(directory, "raw", config)
        self.next_seq = 0 if self.log.last_key is None else self.log.last_key + 1
        self.lock = threading.Lock()  # also taken by capture to read next_seq and recorded together
        self.recorded = 0  # datagrams journaled by this process
        self.last_by_port: dict[int, bytes] = {}
        self._take: tuple[int, str] | None = None
        self._scan_tail()

    def _scan_tail(self) -> None:
        """One pass over the newest segments at open, for the newest take marker and the newest
        datagram of each port (in the newest segment that has any): what a capture killed between
        journaling and consuming a datagram finds first in its socket."""
        for path in reversed(self.log.segments()):
            by_port: dict[int, bytes] = {}
            take = None
            for key, blob in read_segment(path)[0]:
                kind, _, port, _, data = _decode(blob)
                if kind == DATAGRAM:
                    by_port[port] = data
                elif kind == TAKE_START:
                    take = (key, data.decode())
            if not self.last_by_port:
                self.last_by_port = by_port
            if self._take is None:
                self._take = take
            if self.last_by_port and self._take is not None:
                return

    def record(self, dgram: Datagram) -> Datagram:
        """Journal one datagram; returns it carrying its journal sequence number."""
        with self.lock:
            seq = self.next_seq
            self.log.append(seq, _encode(DATAGRAM, dgram.recv_ns, dgram.port, dgram.source, dgram.data))
            self.next_seq = seq + 1
            self.recorded += 1
        return replace(dgram, seq=seq)

    def mark_take(self, session_id: str) -> int:
        """A take starts here (capture started fresh, or was reset); returns the marker's number."""
        with self.lock:
            seq = self.next_seq
            self.log.append(seq, _encode(TAKE_START, time.time_ns(), 0, "", session_id.encode()))
            self.next_seq = seq + 1
            self._take = (seq, session_id)
        return seq

    def last_take(self) -> tuple[int, str] | None:
        """(journal number, session id) of the newest take marker, None when there is none."""
        return self._take

    def datagrams_from(self, seq: int) -> Iterator[Datagram]:
        """The datagrams journaled at or after ``seq`` (markers skipped)."""
        for key, blob in self.log.read_from(seq):
            kind, recv_ns, port, source, data = _decode(blob)
            if kind == DATAGRAM:
                yield Datagram(recv_ns, port, source, data, key)

    def close(self) -> None:
        self.log.close()
