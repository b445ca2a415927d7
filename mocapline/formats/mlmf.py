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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mocapline.formats.recordfile import (
    RecordFileError,
    RecordWriter,
    has_magic,
    read_records,
)

MAGIC = b"MLMF0001"
_FIELDS = "Q"  # t_ns


class FrameFileError(RecordFileError):
    pass


class FrameFileWriter(RecordWriter):
    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        super().__init__(path, MAGIC, meta, _FIELDS)

    def write(self, payload: bytes, t_ns: int = 0) -> None:
        self.write_record((int(t_ns),), payload)


@dataclass
class FrameFile:
    meta: dict[str, Any]
    payloads: list[bytes]
    times_ns: list[int]
    torn_tail: bool


def is_frame_file(path: Path) -> bool:
    return has_magic(path, MAGIC)


def read_frame_file(path: Path) -> FrameFile:
    try:
        meta, records, torn = read_records(path, MAGIC, _FIELDS, "MocapFrame recording")
    except RecordFileError as exc:
        raise FrameFileError(str(exc)) from None
    return FrameFile(meta, [data for _, data in records], [t for (t,), _ in records], torn)
