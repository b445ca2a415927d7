"""Process lifecycle shared by every service: its common flags, logging, and stopping on signals."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{text!r}: choose from {', '.join(LOG_LEVELS)}")
    return level


def add_service_arguments(parser: Any, *, nats_help: str) -> None:
    """--nats and --log-level, as every service has them (env MOCAPLINE_NATS, MOCAPLINE_LOG_LEVEL)."""
    from mocapline.core.bus import DEFAULT_URL

    parser.add_argument("--nats", default=DEFAULT_URL, help=nats_help)
    parser.add_argument("--log-level", type=_log_level, default="INFO", help=f"logging level: {', '.join(LOG_LEVELS)}")


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level, format=LOG_FORMAT)


def set_from_handler(event: threading.Event) -> None:
    """Set ``event`` from a signal handler. A handler runs in the main thread between two
    bytecodes, possibly inside that thread's own ``event.wait()`` just after a timeout, where it
    holds the event's lock: ``event.set()`` there waits for itself forever (`mocapline up` hung
    after a Ctrl-C so, now and then). Another thread sets it once the lock is free."""
    threading.Thread(target=event.set, name="set-from-signal", daemon=True).start()


def stop_on_signals() -> threading.Event:
    """An Event that SIGTERM, SIGINT or SIGHUP sets: a service loops ``while not stop.is_set()`` and then
    shuts down cleanly (final flush, END_OF_STREAM, final counts) instead of dying mid-frame."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: its terminal closed
        signal.signal(signum, lambda *_: set_from_handler(stop))
    return stop
