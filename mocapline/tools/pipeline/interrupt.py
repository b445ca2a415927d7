"""Ctrl-C, SIGTERM and SIGHUP (the terminal closed, the ssh session dropped) for the tools that
start a pipeline (`up`, `demo`, `record`): the services run in sessions of their own, so a
hangup reaches the tool alone, and the tool must not die leaving them running.

The tools run in phases, and a signal means something different in each:

- starting (``guard.phase = STARTING``): give up at once; ``Interrupted`` is raised in the main
  thread and unwinds to the ``finally`` that stops every process started so far;
- running (``RUNNING``): the first signal sets ``guard.stop``; the main loop then ends the take
  (drain, final ledger);
- draining (``DRAINING``): a further signal raises ``Interrupted``: stop at once, skip the ledger;
- stopping (``STOPPING``): signals are noted and ignored; the stop itself is bounded in time.

Whatever the phase, no traceback reaches the person: the tools catch ``Interrupted``, stop
everything (``procs.kill_children`` is the last safety net) and print one closing line.
"""

from __future__ import annotations

import signal
import threading
from enum import Enum
from types import FrameType
from typing import Any

from mocapline.core.lifecycle import set_from_handler

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_INTERRUPTED = 130  # as a shell reports a command ended by Ctrl-C


class Phase(Enum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    STOPPING = "stopping"


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM during start-up, or a second one while draining. A BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, phase: Phase, signum: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} while {phase.value}")
        self.phase = phase
        self.signum = signum


class SignalGuard:
    """Installs the handlers on enter, restores the previous ones on exit (main thread only)."""

    def __init__(self) -> None:
        self.phase = Phase.STARTING
        self.stop = threading.Event()
        self.signals = 0
        self.closing: str | None = None  # what the last line says when the run ends normally
        self._signals_at_drain = 0
        self._previous: list[Any] = []

    def __enter__(self) -> SignalGuard:
        self._previous = [signal.signal(s, self._handle) for s in SIGNALS]
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in zip(SIGNALS, self._previous, strict=True):
            signal.signal(s, handler)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.signals += 1
        set_from_handler(self.stop)
        if self.phase is Phase.STARTING or (self.phase is Phase.DRAINING and self.signals > self._signals_at_drain):
            raise Interrupted(self.phase, signum)

    def enter(self, phase: Phase) -> None:
        """Move to ``phase``. While draining, any signal after the one that ended the take aborts."""
        if phase is Phase.DRAINING:
            self._signals_at_drain = self.signals
        self.phase = phase
