"""The MocapFrame recording format (``.mlmf``): the frames the streamer sent, byte for byte.

Layout (all little-endian), the same framing as the raw-datagram ``.mlrec``:

    file   := magic meta record*
    magic  := b"MLMF0001"
    meta   := u32 length, then that many bytes of UTF-8 JSON (who wrote it, fps, configuration, ...)
    record := u64 t_ns | u32 length | u32 crc32(payload) | payload[length]

``payload`` is one serialized ``MocapFrame`` (proto/mocap.proto), exactly the bytes that went out
after the 44-byte header; ``t_ns`` is when it was sent (unix ns; 0 for frames made offline). A torn
last record (crash) is detected by its CRC and dropped by the reader; everything before it is intact.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"MLMF0001"
_LEN = struct.Struct("<I")
_RECORD = struct.Struct("<QII")


class FrameFileError(ValueError):
    pass


class FrameFileWriter:
    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: BinaryIO = open(self.path, "wb")
        blob = json.dumps(meta, sort_keys=True).encode()
        self._fh.write(MAGIC + _LEN.pack(len(blob)) + blob)
        self.records = 0

    def write(self, payload: bytes, t_ns: int = 0) -> None:
        self._fh.write(_RECORD.pack(int(t_ns), len(payload), zlib.crc32(payload)) + payload)
        self.records += 1

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> FrameFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class FrameFile:
    meta: dict[str, Any]
    payloads: list[bytes]
    times_ns: list[int]
    torn_tail: bool


def is_frame_file(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(MAGIC)) == MAGIC


def read_frame_file(path: Path) -> FrameFile:
    with open(path, "rb") as fh:
        if fh.read(len(MAGIC)) != MAGIC:
            raise FrameFileError(f"{path}: not a MocapFrame recording (magic MLMF0001 missing)")
        raw = fh.read(_LEN.size)
        if len(raw) < _LEN.size:
            raise FrameFileError(f"{path}: truncated inside its header")
        (n,) = _LEN.unpack(raw)
        try:
            meta = json.loads(fh.read(n))
        except ValueError as exc:
            raise FrameFileError(f"{path}: metadata is not JSON: {exc}") from None
        payloads: list[bytes] = []
        times: list[int] = []
        torn = False
        while True:
            head = fh.read(_RECORD.size)
            if not head:
                break
            if len(head) < _RECORD.size:
                torn = True
                break
            t_ns, length, crc = _RECORD.unpack(head)
            data = fh.read(length)
            if len(data) < length or zlib.crc32(data) != crc:
                torn = True
                break
            payloads.append(data)
            times.append(t_ns)
    return FrameFile(meta, payloads, times, torn)
