"""Unitree's low-level messages as numpy records, and their bytes in the two layouts that matter:
the C struct (what the CRC covers, natural alignment) and the CDR payload of a DDS sample (little
endian, each value aligned to its own size, no padding at a struct's end).

A message is a list of fields (:data:`Fields`); :class:`Layout` makes its C record type and maps it
to and from CDR through one precomputed byte map. The messages of each family are in :mod:`.hg`
(``unitree_hg``: G1, H1-2) and :mod:`.go` (``unitree_go``: H1); :mod:`.family` picks one by name.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np

from mocapline.robot.unitree.crc import crc32_words

CDR_LE_HEADER = b"\x00\x01\x00\x00"  # XCDR1 (plain CDR), little endian, no options

# (name, primitive numpy code or nested fields, element count)
Fields = list[tuple[str, Union[str, "Fields"], int]]


def c_dtype(fields: Fields) -> np.dtype:
    """The C struct (natural alignment, numpy's ``align=True``), little endian."""
    spec = []
    for name, kind, count in fields:
        base = c_dtype(kind) if isinstance(kind, list) else np.dtype("<" + kind)
        spec.append((name, base) if count == 1 else (name, base, (count,)))
    return np.dtype(spec, align=True)


def _cdr_walk(fields: Fields, dtype: np.dtype, c_base: int, pos: int, out: list[int]) -> int:
    """Append, for each CDR byte from ``pos`` on, the C offset it comes from (-1: padding)."""
    for name, kind, count in fields:
        sub, c_off = dtype.fields[name][:2]  # type: ignore[index]
        elem = sub.base
        for i in range(count):
            at = c_base + c_off + i * elem.itemsize
            if isinstance(kind, list):
                pos = _cdr_walk(kind, elem, at, pos, out)
                continue
            size = elem.itemsize
            while pos % size:
                out.append(-1)
                pos += 1
            out.extend(range(at, at + size))
            pos += size
    return pos


class Layout:
    """One message's C record and CDR bytes, and the CRC over the record."""

    def __init__(self, fields: Fields) -> None:
        self.dtype = c_dtype(fields)
        self.size = self.dtype.itemsize
        fields_by_name: dict[str, Any] = dict(self.dtype.fields or {})
        # the messages with a CRC end in it (LowCmd, LowState); a hand's have none
        self.crc_offset = int(fields_by_name["crc"][1]) if "crc" in fields_by_name else None
        cdr: list[int] = []
        _cdr_walk(fields, self.dtype, 0, 0, cdr)
        self.cdr_size = len(cdr)
        # padding reads (and writes) one spare zero byte past the record
        self._map = np.array([self.size if at < 0 else at for at in cdr], dtype=np.intp)
        self._values = np.array([at for at in cdr if at >= 0], dtype=np.intp)

    def c_bytes(self, record: np.ndarray) -> bytes:
        """The C struct's bytes with every padding byte zero (numpy leaves padding as it finds it)."""
        raw = np.frombuffer(record.tobytes(), dtype=np.uint8)
        out = np.zeros(self.size, dtype=np.uint8)
        out[self._values] = raw[self._values]
        return out.tobytes()

    def new(self) -> np.ndarray:
        return np.zeros((), dtype=self.dtype)

    def crc(self, record: np.ndarray) -> int:
        """The CRC over every word before the ``crc`` field (each family's last word)."""
        if self.crc_offset is None:
            raise ValueError("this message has no crc field")
        return crc32_words(self.c_bytes(record)[: self.crc_offset])

    def seal(self, record: np.ndarray) -> None:
        record["crc"] = self.crc(record)

    def crc_ok(self, record: np.ndarray) -> bool:
        return int(record["crc"]) == self.crc(record)

    def crc_status(self, record: np.ndarray) -> str:
        """``ok``; ``unset``: the crc field is 0 and that is not the CRC (a publisher that does not
        seal: Unitree's simulators publish LowState so); ``mismatch``: any other wrong CRC."""
        if self.crc_ok(record):
            return "ok"
        return "unset" if int(record["crc"]) == 0 else "mismatch"

    def to_cdr(self, record: np.ndarray) -> bytes:
        raw = np.frombuffer(record.tobytes() + b"\0", dtype=np.uint8)
        return raw[self._map].tobytes()

    def from_cdr(self, payload: bytes | memoryview) -> np.ndarray:
        if len(payload) < self.cdr_size:
            raise LayoutError("short_sample", f"{len(payload)} bytes, the message is {self.cdr_size}")
        raw = np.zeros(self.size + 1, dtype=np.uint8)
        raw[self._map] = np.frombuffer(payload, dtype=np.uint8, count=self.cdr_size)
        return raw[: self.size].view(self.dtype)[0]  # a view of this fresh buffer: no copy needed

    def sample(self, record: np.ndarray) -> bytes:
        """A DDS serialized sample: the encapsulation header, the CDR payload, padded to 4."""
        body = CDR_LE_HEADER + self.to_cdr(record)
        return body + b"\0" * (-len(body) % 4)

    def from_sample(self, sample: bytes | memoryview) -> np.ndarray:
        """The record of a little-endian CDR sample (XCDR1 or XCDR2: these messages have nothing
        the two encodings lay out differently)."""
        head = bytes(sample[:4])
        if len(head) < 4 or head[0] != 0 or head[1] not in (0x01, 0x07):  # CDR_LE, PLAIN_CDR2_LE
            raise LayoutError("encapsulation", f"encapsulation {head[:2].hex()} is not little-endian plain CDR")
        return self.from_cdr(memoryview(sample)[4:])


class LayoutError(ValueError):
    """A DDS sample that is not the message it claims to be (length, encapsulation)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
