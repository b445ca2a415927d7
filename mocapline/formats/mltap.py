"""The tap recording format (``.mltap``, ``mocapline tap --record``): every frame a consumer of the
robot port received, as it arrived.

Layout (all little-endian), the framing of every mocapline recording (recordfile.py):

    file   := magic meta record*
    magic  := b"MLTAP001"
    meta   := u32 length, then that many bytes of UTF-8 JSON (generator, consumer name, endpoint)
    record := u64 t_ns | u64 frame_id | u32 length | u32 crc32(data) | data[length]

``data`` is the sender's 16-byte epoch, then the frame exactly as it arrived (44-byte header +
payload; END_OF_STREAM included); ``t_ns`` is when the tap received it (unix ns). The records are
also the tap's position store: the last intact one says where a restarted tap resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from mocapline.formats.recordfile import has_magic, read_records_at

MAGIC = b"MLTAP001"
FIELDS = "QQ"  # t_ns, frame_id
EPOCH_BYTES = 16
WHAT = "tap recording"


def is_tap_recording(path: Path) -> bool:
    return has_magic(path, MAGIC)


class TapRecord(NamedTuple):
    t_ns: int
    epoch: bytes
    frame_id: int
    wire: bytes  # 44-byte header + payload


@dataclass
class TapFile:
    meta: dict[str, Any]
    records: list[TapRecord]
    torn_tail: bool


def read_tap_file(path: Path) -> TapFile:
    """Every intact record, in file order (RecordFileError when the header itself is bad)."""
    meta, records, torn, _ = read_records_at(path, MAGIC, FIELDS, WHAT)
    return TapFile(meta, [TapRecord(t_ns, data[:EPOCH_BYTES], frame_id, data[EPOCH_BYTES:])
                          for (t_ns, frame_id), data in records], torn)
