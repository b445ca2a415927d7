"""The posture-index ledger: one class that classifies every index a stream delivers.

Rules (docs/ledger.md): current == previous + 1 is the next frame; current == previous is an exact
duplicate (dropped); current > previous + 1 skips ``current - previous - 1`` indices (recorded as a
missing range); current < previous is a backward jump (Axis restarted, replay, index reset, a looped take): it is
recorded and starts a new segment, and the frame itself is new. Each segment keeps its own counts
(first and last index, unique frames, missing indices): a take that loops is a run of segments,
each of which can be complete.

The same class counts frame_id continuity on every link, so gaps mean the same thing everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

MAX_RANGES = 10_000  # keep memory bounded on a pathological stream; the counts stay exact
MAX_SEGMENTS = 64  # per-segment detail kept for the latest segments; ``segments`` counts them all


@dataclass
class Segment:
    """One run of posture indices between backward jumps (an Axis restart or a looped take)."""

    first: int
    last: int
    unique: int = 1
    missing: int = 0

    def as_dict(self, number: int) -> dict[str, int]:
        return {"segment": number, "first_index": self.first, "last_index": self.last,
                "unique_frames": self.unique, "missing_indices": self.missing}


class Seen(Enum):
    FIRST = "first"
    NEXT = "next"
    GAP = "gap"
    DUPLICATE = "duplicate"
    BACKWARD = "backward"

    @property
    def is_new(self) -> bool:
        return self is not Seen.DUPLICATE


@dataclass
class SequenceLedger:
    received: int = 0
    unique: int = 0
    duplicates: int = 0
    missing: int = 0
    backward: int = 0
    first: int | None = None
    last: int | None = None
    segment: int = 0
    missing_ranges: list[tuple[int, int]] = field(default_factory=list)
    backward_jumps: list[tuple[int, int]] = field(default_factory=list)
    ranges_dropped: int = 0
    # The latest segments (at most MAX_SEGMENTS; the oldest are dropped, their counts stay in the totals).
    segments: list[Segment] = field(default_factory=list)

    def observe(self, index: int) -> Seen:
        self.received += 1
        last = self.last
        if last is None:
            self.first = self.last = index
            self.unique += 1
            self._start_segment(index)
            return Seen.FIRST
        if index == last + 1:
            self.last = index
            self.unique += 1
            self._extend_segment(index, 0)
            return Seen.NEXT
        if index == last:
            self.duplicates += 1
            return Seen.DUPLICATE
        self.last = index
        self.unique += 1
        if index > last:
            self.missing += index - last - 1
            self._record(self.missing_ranges, (last + 1, index - 1))
            self._extend_segment(index, index - last - 1)
            return Seen.GAP
        self.backward += 1
        self.segment += 1
        self._record(self.backward_jumps, (last, index))
        self._start_segment(index)
        return Seen.BACKWARD

    def _start_segment(self, index: int) -> None:
        self.segments.append(Segment(index, index))
        del self.segments[:-MAX_SEGMENTS]

    def _extend_segment(self, index: int, skipped: int) -> None:
        seg = self.segments[-1]
        seg.last = index
        seg.unique += 1
        seg.missing += skipped

    def _record(self, target: list[tuple[int, int]], item: tuple[int, int]) -> None:
        if len(target) < MAX_RANGES:
            target.append(item)
        else:
            self.ranges_dropped += 1

    def missing_indices(self) -> list[int]:
        return [i for lo, hi in self.missing_ranges for i in range(lo, hi + 1)]

    def as_dict(self, prefix: str = "") -> dict[str, object]:
        return {
            f"{prefix}received": self.received,
            f"{prefix}unique_frames": self.unique,
            f"{prefix}missing_indices": self.missing,
            f"{prefix}duplicate_indices": self.duplicates,
            f"{prefix}backward_indices": self.backward,
            f"{prefix}first_index": self.first,
            f"{prefix}last_index": self.last,
            f"{prefix}missing_ranges": [list(r) for r in self.missing_ranges],
            f"{prefix}segments": self.segment + 1 if self.first is not None else 0,
        }

    def segment_counts(self) -> list[dict[str, int]]:
        """Per-segment first/last index, unique frames and missing indices (the latest MAX_SEGMENTS)."""
        first_number = self.segment + 1 - len(self.segments)
        return [seg.as_dict(first_number + k) for k, seg in enumerate(self.segments)]


def index_ranges(indices: Iterable[int]) -> list[list[int]]:
    """Indices as sorted inclusive ``[lo, hi]`` runs of consecutive values (repeats count once)."""
    out: list[list[int]] = []
    for i in sorted(set(indices)):
        if out and i == out[-1][1] + 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def union_ranges(*range_lists: Iterable[Iterable[int]]) -> list[list[int]]:
    """Inclusive ``[lo, hi]`` ranges of several lists merged into one sorted, non-overlapping list."""
    spans = sorted((int(lo), int(hi)) for ranges in range_lists for lo, hi in ranges)
    out: list[list[int]] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def combine(ledgers: list[dict[str, Any]]) -> dict[str, Any]:
    """Several ledger dicts (one per performer) as one: counts add up, ``first*`` is the smallest,
    ``last*`` the largest, ``*ranges`` are united (an index missing for any performer), nested
    dicts (per path) combine the same way; anything else is taken from the first. With one
    ledger the result equals it."""
    if len(ledgers) == 1:
        return dict(ledgers[0])
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for led in ledgers for k in led):
        values = [led[key] for led in ledgers if key in led]
        present = [v for v in values if v is not None]
        if not present:
            out[key] = None
        elif all(isinstance(v, dict) for v in present):
            out[key] = combine(present)
        elif key.endswith("ranges"):
            out[key] = union_ranges(*present)
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in present):
            out[key] = min(present) if "first" in key else max(present) if "last" in key else sum(present)
        else:
            out[key] = present[0]
    return out
