"""Axis BVH frames split over consecutive UDP datagrams, joined back.

Axis Neuron sends a frame larger than its send buffer as two (or more) datagrams of one source:
the first carries the 64-byte header and the first bytes of the values (1024 bytes in all), the
next ones the rest, with no header of their own (a 59-bone frame with displacement: 1480 bytes
as 1024 + 456). The header's ``data_count`` says how many bytes the frame has, so a part is joined
to the head before it until the frame is complete.

What cannot be joined is counted by reason, never decoded:

- ``split_incomplete``: a head (and any parts after it) whose frame never completed: the next
  datagram of that source was another head, a part that would overrun the frame, the rest came
  later than ``window_ns`` after the head, or the take ended.
- ``split_no_head``: a part with nothing to join it to (its head was lost). A headless datagram
  is taken for a part when its length is a tail length already seen on this path, or, before any
  was seen, when it is a whole number of finite float32 values shorter than a frame and not one of
  the ~192-195-byte packets Axis sends beside the frames; anything else is left to the parser,
  which rejects it (``not_bvh`` and so on).

``push`` raises nothing on any bytes-like input.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from mocapline.formats.axis_bvh import (
    DEFAULT_CONFIG,
    HEADER_SIZE,
    REFERENCE_FLOATS,
    UNKNOWN_SMALL_SIZES,
    AxisBvhConfig,
    declared_length,
)

SPLIT_INCOMPLETE = "split_incomplete"
SPLIT_NO_HEAD = "split_no_head"
SPLIT_REASONS: tuple[str, ...] = (SPLIT_INCOMPLETE, SPLIT_NO_HEAD)
MAX_BVH_VALUE = 1e6  # a part's values: angles in degrees, displacements in cm (noise is rarely all below)
# Axis sends a frame's parts back to back, and the next datagram of the same source already tells
# a lost tail (it is another head, or a part that does not fit). The window only bounds how stale a
# held head may be: long enough that capture killed between a head and its tail, restarted and fed
# the journal again, still joins them (the tail is read seconds after the head was journaled).
SPLIT_WINDOW_NS = 10_000_000_000
_BVH_START = b"\xff\xdd"
_CALC_START = b"\xff\x88"


@dataclass
class HeldFrame:
    """The first parts of a split frame from one sender."""

    data: bytes
    recv_ns: int
    length: int  # the frame's declared length
    parts: int  # datagrams held


@dataclass
class AxisSplitState:
    """An ``AxisSplitAssembler`` as plain values (capture's checkpoints); its config comes from the flags."""

    window_ns: int
    joined: int
    parts_joined: int
    rejected: dict[str, int]
    tail_sizes: list[int]
    held: dict[str, HeldFrame]


class AxisSplitAssembler:
    """One per path: joins the parts of split frames per source address."""

    def __init__(self, config: AxisBvhConfig = DEFAULT_CONFIG, window_ns: int = SPLIT_WINDOW_NS) -> None:
        self.config = config
        self.window_ns = window_ns
        self.rejected: Counter[str] = Counter()
        self.joined = 0  # frames reassembled from several datagrams
        self.parts_joined = 0  # the datagrams they were made of
        self._held: dict[str, HeldFrame] = {}
        self._tail_sizes: set[int] = set()
        self._max_len = HEADER_SIZE + 4 * (6 * 59 + REFERENCE_FLOATS)

    @property
    def pending(self) -> int:
        """Datagrams held, waiting for the rest of their frame."""
        return sum(h.parts for h in self._held.values())

    def push(self, data: bytes, recv_ns: int = 0, sender: str = "") -> bytes | None:
        """The datagram to parse (a whole frame as it came, or a joined one), or None: a part held
        or counted as rejected."""
        start = bytes(data[:2])
        if start == _BVH_START and not self._held and len(data) == self._claimed_length(data):
            return data  # the usual case: a whole datagram (the parser checks the rest)
        head = start in (_BVH_START, _CALC_START)
        length = declared_length(data, self.config) if head else None
        held = self._held.get(sender)
        if length is not None and bytes(data[:2]) == _BVH_START:
            if held is not None:
                self._drop(sender)
            if len(data) >= length:
                return data
            self._held[sender] = HeldFrame(bytes(data), recv_ns, length, 1)
            return None
        if held is not None and not head and len(data):
            if recv_ns - held.recv_ns > self.window_ns or not self._continues(held, data):
                self._drop(sender)
            else:
                size = len(held.data) + len(data)
                if size == held.length:
                    del self._held[sender]
                    self.joined += 1
                    self.parts_joined += held.parts + 1
                    self._tail_sizes.add(len(data))
                    return held.data + bytes(data)
                if size < held.length:
                    held.data += bytes(data)
                    held.parts += 1
                    return None
                self._drop(sender)
        if not head and self._looks_like_part(data):
            self.rejected[SPLIT_NO_HEAD] += 1
            return None
        return data

    def state(self) -> AxisSplitState:
        return AxisSplitState(self.window_ns, self.joined, self.parts_joined, dict(self.rejected),
                              sorted(self._tail_sizes), {s: replace(h) for s, h in self._held.items()})

    def restore(self, state: AxisSplitState) -> None:
        self.window_ns, self.joined, self.parts_joined = state.window_ns, state.joined, state.parts_joined
        self.rejected = Counter(state.rejected)
        self._tail_sizes = set(state.tail_sizes)
        self._held = {s: replace(h) for s, h in state.held.items()}

    def _claimed_length(self, data: bytes) -> int:
        """The length the header's ``data_count`` gives (no other check), -1 when there is no header."""
        if len(data) < HEADER_SIZE:
            return -1
        width = 2 if self.config.header_format == "current" else 4
        return HEADER_SIZE + 4 * int.from_bytes(data[6 : 6 + width], "little")

    def flush(self) -> None:
        """End of a take: a frame still incomplete never completes."""
        for sender in list(self._held):
            self._drop(sender)

    def _drop(self, sender: str) -> None:
        self.rejected[SPLIT_INCOMPLETE] += self._held.pop(sender).parts

    def _looks_like_part(self, data: bytes) -> bool:
        n = len(data)
        if n in self._tail_sizes:
            return True
        if self._tail_sizes or n == 0 or n % 4 or n >= self._max_len or n in UNKNOWN_SMALL_SIZES:
            return False
        return _bvh_values(data)

    @staticmethod
    def _continues(held: HeldFrame, data: bytes) -> bool:
        """Whether ``data`` can be the rest of ``held``'s values: both cut at a float and every value
        one a BVH frame holds. Any datagram of the right length would otherwise complete a head,
        garbage too (a cut-off frame followed by noise of just the missing length)."""
        return (len(held.data) - HEADER_SIZE) % 4 == 0 and len(data) % 4 == 0 and _bvh_values(data)


def _bvh_values(data: bytes) -> bool:
    """Finite float32 values no larger than any BVH channel holds (degrees, centimetres)."""
    values = np.frombuffer(data, dtype="<f4")
    return bool(np.isfinite(values).all() and (np.abs(values) < MAX_BVH_VALUE).all())


def split_datagram(data: bytes, first: int) -> list[bytes]:
    """A datagram as Axis Neuron sends one larger than ``first`` bytes: ``first`` bytes (with the
    header), then the rest in parts of at most ``first`` bytes (for tests and the emitter)."""
    if first < HEADER_SIZE:
        raise ValueError(f"the first part must hold the {HEADER_SIZE}-byte header, got {first}")
    return [data[k : k + first] for k in range(0, len(data), first)]
