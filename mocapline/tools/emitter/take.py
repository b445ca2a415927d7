"""What an emitted take is, whatever its format: the plan (indices, duplicates, what each path or
performer misses, Axis split frames), its counts, and the pacing of its frames."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from mocapline.formats.axis_split import split_datagram


@dataclass
class TakePlan:
    """What to send: which indices, which to repeat, which each destination skips, garbage."""

    frames: int
    first_index: int = 0
    duplicate: set[int] = field(default_factory=set)
    skip_all: set[int] = field(default_factory=set)
    skip_main: set[int] = field(default_factory=set)
    skip_side: set[int] = field(default_factory=set)
    garbage: int = 0
    seed: int = 0
    performers: int = 1  # avatars per frame: avatar_index 0 .. performers - 1
    skip_performer: dict[int, set[int]] = field(default_factory=dict)  # avatar_index -> indices not sent
    tcp_cut: set[int] = field(default_factory=set)  # TCP: drop the connection half-way through these
    # UDP main path: frames of every ``split_every``-th index sent as parts of at most ``split_bytes``
    # (as Axis Neuron does), of which those in ``lose_head`` / ``lose_tail`` lose their first / last part
    split_bytes: int = 0
    split_every: int = 1
    lose_head: set[int] = field(default_factory=set)
    lose_tail: set[int] = field(default_factory=set)
    version: tuple[int, int, int, int] | None = None  # the header's data version (default 1.1.0.1)

    def indices(self) -> Iterator[int]:
        for i in range(self.frames):
            index = self.first_index + i
            yield index
            if index in self.duplicate:
                yield index

    def sends_to(self, dest: int, index: int) -> bool:
        if index in self.skip_all:
            return False
        if dest == 0 and index in self.skip_main:
            return False
        return not (dest == 1 and index in self.skip_side)

    def performs(self, avatar: int, index: int) -> bool:
        return index not in self.skip_performer.get(avatar, ())

    def parts(self, index: int, data: bytes) -> list[bytes]:
        """What the main UDP path sends of a frame's datagram: whole, or split (and maybe a part lost)."""
        if not self.split_bytes or len(data) <= self.split_bytes or (index - self.first_index) % self.split_every:
            return [data]
        parts = split_datagram(data, self.split_bytes)
        return parts[index in self.lose_head : len(parts) - (index in self.lose_tail)]


def performer_name(avatar: int) -> str:
    return f"Performer{avatar + 1}"


@dataclass
class EmitStats:
    frames: int = 0
    datagrams: dict[str, int] = field(default_factory=dict)
    garbage: int = 0
    tcp_cuts: int = 0


class Pacer:
    """Absolute schedule: frame k goes out at t0 + k / rate (no drift, no fixed sleeps)."""

    def __init__(self, rate_hz: float) -> None:
        self.period = 1.0 / rate_hz if rate_hz > 0 else 0.0
        self.t0 = time.perf_counter()
        self.k = 0

    def wait(self) -> None:
        if self.period:
            delay = self.t0 + self.k * self.period - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        self.k += 1
