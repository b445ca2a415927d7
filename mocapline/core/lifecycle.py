"""Process lifecycle shared by every service: its common flags, logging, and stopping on signals."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
# Set by a supervisor (`mocapline up`, capture's socket holder) in the environment of each process
# it starts: its own pid. A process whose parent is that pid stops when the parent is gone.
SUPERVISOR_ENV = "MOCAPLINE_SUPERVISOR_PID"
SUPERVISOR_POLL_S = 0.5
# The exit status of a process that stopped on purpose and must stay stopped: the robot bridge
# after an e-stop or a fall. A supervisor (`mocapline up`) does not start it again.
EXIT_STOPPED = 3

log = logging.getLogger("mocapline.lifecycle")


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
    """An Event that SIGTERM, SIGINT or SIGHUP sets, and the end of the supervisor that started this
    process (``watch_supervisor``): a service loops ``while not stop.is_set()`` and then shuts
    down cleanly (final flush, END_OF_STREAM, final counts) instead of dying mid-frame."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGHUP: its terminal closed
        signal.signal(signum, lambda *_: set_from_handler(stop))
    watch_supervisor(stop.set)
    return stop


def supervised_env() -> dict[str, str]:
    """What a supervisor adds to the environment of a process it starts (see ``watch_supervisor``)."""
    return {SUPERVISOR_ENV: str(os.getpid())}


def watch_supervisor(on_gone: Callable[[], None], poll_s: float = SUPERVISOR_POLL_S) -> bool:
    """Call ``on_gone`` once the supervisor that started this process is gone (killed with -9,
    say): services run in sessions of their own, so nothing else would end them and they would
    hold their ports. The parent's pid is watched (the process is handed to another parent when it
    dies) rather than asking the kernel for a signal, which would follow the thread that started
    the process, not the process. Only a process whose parent is the one named in its
    environment watches: what a service starts inherits the variable but not the parent."""
    named = os.environ.get(SUPERVISOR_ENV, "")
    if not named.isdigit() or int(named) != os.getppid():
        return False
    supervisor = int(named)

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(poll_s)
        log.warning("the supervisor (pid %d) is gone: stopping", supervisor)
        on_gone()

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()
    return True


def interrupt_self() -> None:
    """What Ctrl-C does, from any thread: KeyboardInterrupt in the main thread."""
    os.kill(os.getpid(), signal.SIGINT)


def ending_with_parent(command: list[str]) -> list[str]:
    """``command`` so that the kernel sends it SIGTERM when the thread that starts it ends, for a
    program that cannot watch its parent itself (nats-server): util-linux's ``setpriv
    --pdeathsig`` (in every Debian) sets that up and runs it; without setpriv, ``command`` as it is.
    Start it from the main thread, whose end is the process's. (Not ``Popen(preexec_fn=...)``:
    that runs the interpreter's fork hooks, inside which a Ctrl-C's exception is swallowed.)"""
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", *command] if setpriv else command
