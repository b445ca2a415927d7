"""The one framed record-file layout behind every mocapline recording.

    file   := magic meta record*
    magic  := 8 bytes naming the format (b"MLREC001": raw datagrams, b"MLMF0001": MocapFrames)
    meta   := u32 length, then that many bytes of UTF-8 JSON
    record := <format's fixed fields> | u32 length | u32 crc32(data) | data[length]

All little-endian. The CRC lets a reader stop cleanly at a record torn by a crash: everything
before it is intact and is returned, with ``torn`` set.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Self

_LEN = struct.Struct("<I")


class RecordFileError(ValueError):
    pass


def has_magic(path: Path, magic: bytes) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(magic)) == magic


class RecordWriter:
    """Appends records ``fields | length | crc32 | data``; ``fields`` per ``head`` (without the
    two trailing u32s, which the writer adds)."""

    def __init__(self, path: Path, magic: bytes, meta: dict[str, Any], fields: str, *,
                 append_at: int | None = None) -> None:
        """``append_at``: continue an existing file after its last good record, this many bytes
        in (a torn record beyond is cut off); the metadata already there is kept."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._head = struct.Struct("<" + fields + "II")
        self.records = 0
        if append_at is not None:
            self._fh: BinaryIO = open(self.path, "r+b")  # noqa: SIM115 - held until close()
            self._fh.truncate(append_at)
            self._fh.seek(append_at)
            return
        self._fh = open(self.path, "wb")  # noqa: SIM115 - held until close()
        blob = json.dumps(meta, sort_keys=True).encode()
        self._fh.write(magic + _LEN.pack(len(blob)) + blob)

    def write_record(self, fields: tuple[int, ...], data: bytes) -> None:
        self._fh.write(self._head.pack(*fields, len(data), zlib.crc32(data)) + data)
        self.records += 1

    def flush(self) -> None:
        self._fh.flush()

    def sync(self) -> None:
        """Flush to the disk (survives a power cut, not only a crash)."""
        import os

        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(
    path: Path, magic: bytes, fields: str, what: str
) -> tuple[dict[str, Any], list[tuple[tuple[int, ...], bytes]], bool]:
    """(meta, [(fields, data)], torn). Raises RecordFileError when the header itself is bad."""
    meta, records, torn, _ = read_records_at(path, magic, fields, what)
    return meta, records, torn


def read_records_at(
    path: Path, magic: bytes, fields: str, what: str
) -> tuple[dict[str, Any], list[tuple[tuple[int, ...], bytes]], bool, int]:
    """``read_records`` and the length of the file's intact part (where an append continues)."""
    head = struct.Struct("<" + fields + "II")
    n_fields = len(head.unpack(bytes(head.size))) - 2
    with open(path, "rb") as fh:
        if fh.read(len(magic)) != magic:
            raise RecordFileError(f"{path}: not a {what} (magic {magic.decode()} missing)")
        raw = fh.read(_LEN.size)
        if len(raw) < _LEN.size:
            raise RecordFileError(f"{path}: {what} truncated inside its header")
        (n,) = _LEN.unpack(raw)
        try:
            meta = json.loads(fh.read(n))
        except ValueError as exc:
            raise RecordFileError(f"{path}: {what} metadata is not JSON: {exc}") from None
        records: list[tuple[tuple[int, ...], bytes]] = []
        good = fh.tell()
        while True:
            raw = fh.read(head.size)
            if not raw:
                return meta, records, False, good
            if len(raw) < head.size:
                return meta, records, True, good
            values = head.unpack(raw)
            length, crc = values[n_fields:]
            data = fh.read(length)
            if len(data) < length or zlib.crc32(data) != crc:
                return meta, records, True, good
            records.append((values[:n_fields], data))
            good = fh.tell()
