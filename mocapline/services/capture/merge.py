"""Merge several UDP paths carrying the same take (main 7014 + side 7015) by posture_index.

Every path keeps its own ledger (what that path saw). The merger emits each posture_index once, in
order. When the next index is missing, the gap becomes final only when every *live* path has passed
that index (its newest index is beyond it: the index is lost upstream of all paths). A path lagging
another by any amount (150 ms, 500 ms, seconds) is still live and is waited for: no frame is lost to
a timer while a path that can still bring it is delivering.

Silence: a path is *silent* when no datagram has arrived on it for ``window_s`` (``--merge-window-ms``,
250 ms by default: 15 frame periods at 60 Hz, well above the scheduling and network jitter of a
loaded host, where 50 ms made a lagging path look silent now and then and turned its copies into
late frames), measured on the arrival clock the caller passes in (``now``: the receive loop's
monotonic time, or the recorded arrival time when a journal is replayed). A silent path is not
waited for, so the window only bounds how long a gap waits on a path that has stopped (unplugged,
Axis stopped sending there); the capture loop calls ``poll`` to release frames once that happens.
A path that was never heard from is silent (``CaptureCore.paths_live`` counts every path as just
heard when capture starts listening). As a memory bound, more than ``max_pending`` frames waiting
also makes the oldest gap final (a path stuck far behind).

Silence is judged in ``poll`` only, never in ``push``: a gap becomes final on a push only when
every path has passed it. The caller polls once everything that has arrived is pushed (capture: its
FIFO empty and no socket holding an unread datagram). A batch pushed in the order the receive
threads queued it (one path's thread may have queued a hundred datagrams before the other's ran,
on a loaded host) could otherwise find the other path "silent" while its copies wait in the same
batch or in its socket, and turn them into late frames.

A copy that arrives after its gap was declared final (its path fell silent and came back) is a
``late_frame``; its index stays missing in the merged stream and is listed in ``late_indices``, so
the classification calls it ``late`` (a path had it, too late), not ``side_only`` / ``main_only``.
With one path there is nothing to wait for, so a single-path capture adds no latency.

Accounting identity, exact at every moment once pending frames are flushed:
``received == unique + duplicates + cross_path_copies + late_frames``, where ``duplicates`` counts
each index Axis sent twice once (its second copy on another path is a cross-path copy).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from mocapline.core.ledger import Seen, SequenceLedger

T = TypeVar("T")
U = TypeVar("U")

_SKIPPED_MEMORY = 4096
_LATE_MEMORY = 10_000
MAX_PENDING = 8192  # ~68 s at 120 Hz waiting on a path that is live but never passes a gap


@dataclass
class PathState:
    ledger: SequenceLedger = field(default_factory=SequenceLedger)
    last_arrival: float = float("-inf")


@dataclass
class MergerState(Generic[T]):
    """A merger's whole state as plain values (capture's checkpoints): ``pending`` holds the frames
    waiting on a gap as (index, item, arrival time)."""

    paths: dict[int, PathState]
    window_s: float
    max_pending: int
    merged: SequenceLedger
    duplicates: int
    cross_path_copies: int
    late_frames: int
    late_indices: list[int]
    duplicated: list[int]
    segment: int
    next_index: int | None
    pending: list[tuple[int, T, float]]
    skipped: list[int]
    previous_segment_last: int | None

    def map_items(self, convert: Callable[[T], U]) -> MergerState[U]:
        return MergerState(**{**self.__dict__, "pending": [(i, convert(item), t) for i, item, t in self.pending]})


def _copy_ledger(ledger: SequenceLedger) -> SequenceLedger:
    return replace(ledger, missing_ranges=list(ledger.missing_ranges), backward_jumps=list(ledger.backward_jumps),
                   segments=[replace(seg) for seg in ledger.segments])


class PathMerger(Generic[T]):
    def __init__(self, paths: list[int], window_s: float = 0.25, max_pending: int = MAX_PENDING) -> None:
        if not paths:
            raise ValueError("at least one path is needed")
        self.paths: dict[int, PathState] = {p: PathState() for p in paths}
        self.window_s = window_s
        self.max_pending = max_pending
        self.late_indices: list[int] = []  # indices whose copy came after their gap was final
        self.merged = SequenceLedger()
        self.duplicates = 0
        self.cross_path_copies = 0
        self.late_frames = 0
        self._duplicated: deque[int] = deque(maxlen=64)
        self._segment = 0
        self._next: int | None = None
        self._pending: dict[int, tuple[T, float]] = {}
        self._skipped: deque[int] = deque(maxlen=_SKIPPED_MEMORY)
        self._previous_segment_last: int | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    def state(self) -> MergerState[T]:
        """A copy of the whole state: later pushes do not change it."""
        return MergerState(
            paths={p: PathState(_copy_ledger(s.ledger), s.last_arrival) for p, s in self.paths.items()},
            window_s=self.window_s, max_pending=self.max_pending, merged=_copy_ledger(self.merged),
            duplicates=self.duplicates, cross_path_copies=self.cross_path_copies, late_frames=self.late_frames,
            late_indices=list(self.late_indices), duplicated=list(self._duplicated), segment=self._segment,
            next_index=self._next, pending=[(i, item, t) for i, (item, t) in self._pending.items()],
            skipped=list(self._skipped), previous_segment_last=self._previous_segment_last,
        )

    @classmethod
    def from_state(cls, state: MergerState[T]) -> PathMerger[T]:
        merger = cls(list(state.paths), window_s=state.window_s, max_pending=state.max_pending)
        merger.paths = {p: PathState(_copy_ledger(s.ledger), s.last_arrival) for p, s in state.paths.items()}
        merger.merged = _copy_ledger(state.merged)
        merger.duplicates, merger.cross_path_copies = state.duplicates, state.cross_path_copies
        merger.late_frames, merger.late_indices = state.late_frames, list(state.late_indices)
        merger._duplicated.extend(state.duplicated)
        merger._segment, merger._next = state.segment, state.next_index
        merger._pending = {i: (item, t) for i, item, t in state.pending}
        merger._skipped.extend(state.skipped)
        merger._previous_segment_last = state.previous_segment_last
        return merger

    @property
    def segment(self) -> int:
        return self._segment

    def push(self, path: int, index: int, item: T, now: float) -> list[tuple[int, T]]:
        """Offer one frame from one path; return the frames now ready, in order."""
        state = self.paths.get(path)
        if state is None:
            state = self.paths[path] = PathState()
        state.last_arrival = now
        seen = state.ledger.observe(index)
        if seen is Seen.DUPLICATE:
            if index in self._duplicated:
                self.cross_path_copies += 1
            else:
                self.duplicates += 1
                self._duplicated.append(index)
            return []
        out: list[tuple[int, T]] = []
        path_segment = state.ledger.segment
        if path_segment > self._segment:
            out.extend(self._release_all())
            self._previous_segment_last = self.merged.last
            self._segment = path_segment
            self._next = None
            self._skipped.clear()
        elif path_segment < self._segment:
            # A slower path still replaying the previous segment.
            prev = self._previous_segment_last
            if prev is not None and index <= prev:
                self.cross_path_copies += 1
            else:
                self._late(index)
            return out
        if self._next is None:
            self._next = index
        if index < self._next:
            if index in self._skipped:
                self._late(index)
            else:
                self.cross_path_copies += 1
            return out
        if index in self._pending:
            self.cross_path_copies += 1
            return out
        self._pending[index] = (item, now)
        out.extend(self._release(None))
        return out

    def _late(self, index: int) -> None:
        self.late_frames += 1
        if len(self.late_indices) < _LATE_MEMORY:
            self.late_indices.append(index)

    def poll(self, now: float) -> list[tuple[int, T]]:
        """Release frames whose gap has become final because a path fell silent."""
        return self._release(now)

    def flush(self) -> list[tuple[int, T]]:
        """End of take: release everything pending, declaring the remaining gaps missing."""
        return self._release_all()

    def _emit(self, index: int) -> tuple[int, T]:
        item, _ = self._pending.pop(index)
        self.merged.observe(index)
        self._next = index + 1
        return index, item

    def _release(self, now: float | None) -> list[tuple[int, T]]:
        out: list[tuple[int, T]] = []
        while self._pending:
            nxt = self._next
            assert nxt is not None
            if nxt in self._pending:
                out.append(self._emit(nxt))
                continue
            if not self._gap_is_final(nxt, now):
                break
            resume = min(self._pending)
            self._skipped.extend(range(nxt, min(resume, nxt + _SKIPPED_MEMORY)))
            out.append(self._emit(resume))
        return out

    def _gap_is_final(self, index: int, now: float | None) -> bool:
        """Final when every path of this segment has passed ``index``; at ``now`` (a poll), every
        path not silent by then (see the module doc)."""
        if len(self._pending) > self.max_pending:
            return True
        for state in self.paths.values():
            if state.ledger.segment != self._segment:
                continue
            if now is not None and now - state.last_arrival >= self.window_s:
                continue  # silent
            last = state.ledger.last
            if last is None or last <= index:
                return False
        return True

    def _release_all(self) -> list[tuple[int, T]]:
        out: list[tuple[int, T]] = []
        while self._pending:
            nxt = self._next
            if nxt not in self._pending:
                resume = min(self._pending)
                assert nxt is not None
                self._skipped.extend(range(nxt, min(resume, nxt + _SKIPPED_MEMORY)))
                nxt = resume
            out.append(self._emit(nxt))
        return out
