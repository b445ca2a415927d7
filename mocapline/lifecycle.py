"""Process lifecycle shared by every service."""

from __future__ import annotations

import signal
import threading


def stop_on_signals() -> threading.Event:
    """An Event that SIGTERM or SIGINT sets: a service loops ``while not stop.is_set()`` and then
    shuts down cleanly (final flush, END_OF_STREAM, final counts) instead of dying mid-frame."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop
