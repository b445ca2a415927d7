"""``MOCAPLINE_PROFILE=<dir>``: a stage profiles its loop with cProfile and writes
``<dir>/<name>.pstats`` when it stops (``mocapline bench cost`` reads them).

Only the thread that runs the loop is profiled (cProfile's reach), in that thread's CPU time (a
blocking poll counts what it burns, not how long it waits); the loop is where a stage spends its
frames. Profiling slows what it measures, so the benchmark takes its CPU figures from
runs without it.
"""

from __future__ import annotations

import cProfile
import os
import time
from pathlib import Path

PROFILE_ENV = "MOCAPLINE_PROFILE"


class LoopProfile:
    """cProfile of the calling thread from ``start`` to ``stop`` (nothing when the variable is unset)."""

    def __init__(self, name: str, directory: str | None = None) -> None:
        directory = os.environ.get(PROFILE_ENV, "") if directory is None else directory
        self.path = Path(directory) / f"{name}.pstats" if directory else None
        self._profile: cProfile.Profile | None = None

    def start(self) -> LoopProfile:
        if self.path is not None:
            self._profile = cProfile.Profile(time.thread_time)  # CPU time: waits cost nothing
            self._profile.enable()
        return self

    def stop(self) -> None:
        if self._profile is None or self.path is None:
            return
        self._profile.disable()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._profile.dump_stats(str(self.path))
        self._profile = None
