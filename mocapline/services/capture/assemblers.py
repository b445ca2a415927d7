"""Each path's assembler: joins a frame sent as several datagrams before it is decoded, and its
state as a record (``state.AssemblerRecord``) for capture's checkpoints."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from mocapline.formats.axis_split import AxisSplitAssembler, AxisSplitState
from mocapline.formats.mxtp02 import AssemblerState, MxtpAssembler
from mocapline.services.capture.state import AssemblerRecord, StateError


class Assembler(Protocol):
    """Joins a frame sent as several datagrams of one path (Axis split frames, MVN split samples)."""

    @property
    def joined(self) -> int: ...

    @property
    def rejected(self) -> Mapping[str, int]: ...

    @property
    def pending(self) -> int: ...

    def push(self, data: bytes, recv_ns: int = 0, sender: str = "") -> bytes | None: ...

    def flush(self) -> None: ...


class WholeDatagrams:
    """The assembler of a path whose datagrams always come whole (Axis over TCP: the stream
    splitter already cut them, and rejected what was cut short as ``truncated``)."""

    joined = 0
    pending = 0

    @property
    def rejected(self) -> dict[str, int]:
        return {}

    def push(self, data: bytes, recv_ns: int = 0, sender: str = "") -> bytes | None:
        return data

    def flush(self) -> None:
        pass


def assembler_record(assembler: Assembler) -> AssemblerRecord:
    if isinstance(assembler, AxisSplitAssembler | MxtpAssembler):
        return assembler.state()
    if isinstance(assembler, WholeDatagrams):
        return None
    raise TypeError(f"no record for a {type(assembler).__name__}")


def restored_assembler(record: AssemblerRecord, new: Callable[[], Assembler]) -> Assembler:
    """The assembler ``record`` holds; ``new`` makes the decoder's own (built from the flags), which
    must be of the record's kind."""
    if record is None:
        return WholeDatagrams()
    assembler = new()
    if isinstance(record, AxisSplitState) and isinstance(assembler, AxisSplitAssembler):
        assembler.restore(record)
        return assembler
    if isinstance(record, AssemblerState) and isinstance(assembler, MxtpAssembler):
        return MxtpAssembler.from_state(record)
    raise StateError(f"a path's assembler in the state is not this source's ({type(assembler).__name__})")
