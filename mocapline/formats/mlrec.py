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

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mocapline.core.udp import Datagram
from mocapline.formats.recordfile import (
    RecordFileError,
    RecordWriter,
    has_magic,
    read_records,
)

MAGIC = b"MLREC001"
_FIELDS = "QH"  # recv_ns, port


class RecordingError(RecordFileError):
    pass


class RecordingWriter(RecordWriter):
    def __init__(self, path: Path, meta: dict[str, Any]) -> None:
        super().__init__(path, MAGIC, meta, _FIELDS)

    def write(self, dgram: Datagram) -> None:
        self.write_record((dgram.recv_ns, dgram.port), dgram.data)


@dataclass
class Recording:
    meta: dict[str, Any]
    datagrams: list[Datagram]
    torn_tail: bool


def is_recording(path: Path) -> bool:
    return has_magic(path, MAGIC)


def read_recording(path: Path) -> Recording:
    try:
        meta, records, torn = read_records(path, MAGIC, _FIELDS, "mocapline recording")
    except RecordFileError as exc:
        raise RecordingError(str(exc)) from None
    return Recording(meta, [Datagram(t, port, "", data) for (t, port), data in records], torn)


def tcp_ports(meta: dict[str, Any]) -> frozenset[int]:
    """The recorded paths that were an Axis TCP stream (capture --record writes its server as "tcp")."""
    server = meta.get("tcp")
    port = str(server).rpartition(":")[2] if server else ""
    return frozenset([int(port)]) if port.isdigit() else frozenset()
