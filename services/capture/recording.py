"""The raw-datagram recording format (``.mlrec``): what capture received, byte for byte.

Layout (all little-endian):

    file   := magic meta record*
    magic  := b"MLREC001"
    meta   := u32 length, then that many bytes of UTF-8 JSON (source, ports, session_id, ...)
    record := u64 recv_ns | u16 port | u32 length | u32 crc32(data) | data[length]

``recv_ns`` is the receive time (unix epoch, ns), ``port`` the local UDP port the datagram arrived
on. The CRC lets a reader stop cleanly at a record torn by a crash: everything before it is intact.
The emitter replays a recording at its original timing or as fast as possible; `mocapline inspect`
decodes it as capture would.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from services.capture.receiver import Datagram

MAGIC = b"MLREC001"
_LEN = struct.Struct("<I")
_RECORD = struct.Struct("<QHII")


class RecordingError(ValueError):
    pass


class RecordingWriter:
    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: BinaryIO = open(self.path, "wb")
        blob = json.dumps(meta, sort_keys=True).encode()
        self._fh.write(MAGIC + _LEN.pack(len(blob)) + blob)
        self.records = 0

    def write(self, dgram: Datagram) -> None:
        data = dgram.data
        self._fh.write(_RECORD.pack(dgram.recv_ns, dgram.port, len(data), zlib.crc32(data)) + data)
        self.records += 1

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Recording:
    meta: dict[str, Any]
    datagrams: list[Datagram]
    torn_tail: bool


def is_recording(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(MAGIC)) == MAGIC


def read_meta(fh: BinaryIO) -> dict[str, Any]:
    if fh.read(len(MAGIC)) != MAGIC:
        raise RecordingError("not a mocapline recording (magic MLREC001 missing)")
    raw = fh.read(_LEN.size)
    if len(raw) < _LEN.size:
        raise RecordingError("recording truncated inside its header")
    (n,) = _LEN.unpack(raw)
    blob = fh.read(n)
    try:
        return json.loads(blob)
    except ValueError as exc:
        raise RecordingError(f"recording metadata is not JSON: {exc}") from None


def iter_records(fh: BinaryIO) -> Iterator[Datagram]:
    """Records until the end, or until the first torn or corrupt record (then RecordingError)."""
    while True:
        head = fh.read(_RECORD.size)
        if not head:
            return
        if len(head) < _RECORD.size:
            raise RecordingError("torn record header at end of file")
        recv_ns, port, length, crc = _RECORD.unpack(head)
        data = fh.read(length)
        if len(data) < length or zlib.crc32(data) != crc:
            raise RecordingError("torn or corrupt record")
        yield Datagram(recv_ns, port, "", data)


def read_recording(path: Path) -> Recording:
    with open(path, "rb") as fh:
        meta = read_meta(fh)
        out: list[Datagram] = []
        torn = False
        try:
            for dgram in iter_records(fh):
                out.append(dgram)
        except RecordingError:
            torn = True
    return Recording(meta, out, torn)
