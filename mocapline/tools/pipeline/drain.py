"""The end of a take waits for the robot port's consumers: a take ends only when every consumer
that acknowledges and is there (heard from within the streamer's ``LIVE_S``) has applied every
frame of it, however slow it is. What the wait shows, once a second: each consumer's frames
applied of its frames in the take, and how long the drain has waited ("viewer 619 of 1754 applied,
waiting 12 s"). A consumer that is gone (silent) is not waited for: its frames stay in the
streamer's durable log for its return, and the verdict says so (``core/verdict.consumers_note``).

The stack's own viewer and robot bridge are waited for while their processes run, connected or
not (``DrainWait.expected``): one restarted after a crash is silent until it has started.

Bounded: a wait in which no consumer applies a single frame for ``stall_s`` ends too (a consumer
that is there but does not move is not "slow"), as does one whose streamer is not given the take's
END_OF_STREAM within ``END_S`` (what its own drain waited before); a second Ctrl-C stops it at
once, and ``up`` says what was not applied (``DrainWait.not_applied``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mocapline.core.counters import StreamerCounts, decode_stage

STALL_S = 120.0  # no frame applied by any waited-for consumer for this long: the wait ends
END_S = 30.0  # the streamer not given the take's end within this (its input gone): the wait ends
POLL_S = 0.5


@dataclass(frozen=True)
class ConsumerProgress:
    """One acknowledging consumer of the robot port, as the streamer's status has it."""

    name: str
    applied: int  # MocapFrames it acknowledged (applied and stored) this take
    to_apply: int  # MocapFrames after its acknowledged position
    backlog: int  # messages (END_OF_STREAM included) it has not acknowledged
    connected: bool

    @property
    def done(self) -> bool:
        return self.backlog == 0

    @property
    def total(self) -> int:
        return self.applied + self.to_apply


@dataclass
class DrainWait:
    """Where the wait for the consumers stands (see the module docstring)."""

    started: float = field(default_factory=time.monotonic)
    ended: bool = False  # the streamer has taken the take's END_OF_STREAM
    consumers: list[ConsumerProgress] = field(default_factory=list)
    progress_at: float = field(default_factory=time.monotonic)  # when a consumer last applied a frame
    stalled: bool = False
    # consumers waited for even while not connected: the stack's own viewer and robot while their
    # processes run (one restarted after a crash is not heard from until it has started)
    expected: frozenset[str] = frozenset()

    def update(self, streamer: StreamerCounts) -> None:
        before = {c.name: c.applied for c in self.consumers}
        self.ended = streamer.ended
        self.consumers = [ConsumerProgress(name, c.frames_acked, c.frames_to_apply, c.backlog, c.connected)
                          for name, c in sorted((streamer.consumers or {}).items()) if c.acknowledges]
        if any(c.applied > before.get(c.name, -1) for c in self.consumers):
            self.progress_at = time.monotonic()

    @property
    def waiting_for(self) -> list[ConsumerProgress]:
        return [c for c in self.consumers if (c.connected or c.name in self.expected) and not c.done]

    @property
    def gone(self) -> list[ConsumerProgress]:
        return [c for c in self.consumers if not c.connected and c.name not in self.expected and not c.done]

    @property
    def complete(self) -> bool:
        return self.ended and not self.waiting_for

    @property
    def waited_s(self) -> float:
        return time.monotonic() - self.started

    def line(self) -> str:
        """``viewer 619 of 1754 applied, waiting 12 s`` (and the consumers gone)."""
        parts = [f"{c.name} {c.applied} of {c.total} applied" for c in self.waiting_for]
        if not self.ended:
            parts.insert(0, "the streamer has not had the take's end yet")
        elif not parts:
            parts = ["every consumer there has applied the take"]
        gone = [f"{c.name} gone ({c.to_apply} frames kept for it)" for c in self.gone]
        return ", ".join(parts + gone) + f", {'waited' if self.complete else 'waiting'} {self.waited_s:.0f} s"

    def not_applied(self) -> str:
        """What a drain stopped here leaves: each consumer's frames not applied."""
        left = [f"{c.name} {c.to_apply} of {c.total}" + ("" if c.connected else " (gone)")
                for c in self.consumers if not c.done]
        return ("not applied: " + ", ".join(left) + "; they wait in the streamer's log for each consumer's return"
                if left else "every frame was applied")


def wait_for_consumers(ask: Callable[[], dict[str, Any]], wait: DrainWait,
                       progress: Callable[[DrainWait], None] | None = None, *, stall_s: float = STALL_S,
                       end_s: float = END_S, poll_s: float = POLL_S) -> DrainWait:
    """Ask the streamer's status (``ask``) until the take is complete for every consumer there, or
    none applied a frame for ``stall_s`` (the end not come within ``end_s``); ``wait`` is kept up to
    date and ``progress`` told each answer."""
    while True:
        counts = decode_stage("streamer", ask())
        assert isinstance(counts, StreamerCounts)
        wait.update(counts)
        if progress is not None:
            progress(wait)
        if wait.complete:
            return wait
        if time.monotonic() - wait.progress_at > stall_s or (not wait.ended and wait.waited_s > end_s):
            wait.stalled = True
            return wait
        time.sleep(poll_s)
