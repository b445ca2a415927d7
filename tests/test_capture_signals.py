"""Capture's wait for datagrams ends at its timeout even when a signal handler runs in it until
after the deadline. With CPython 3.11's ``queue.SimpleQueue`` as the FIFO, such a wait went on
until the next datagram came: between takes, a SIGTERM's handler ran, set the stop, and capture
never got back to its loop to see it (a durable stack's teardown waited 10 s, then killed it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_WAIT = """
import signal, threading, time
from mocapline.formats.axis_bvh import AxisBvhConfig
from mocapline.services.capture.sources import axis_udp_source
from mocapline.tools.pipeline.procs import free_udp_port

source = axis_udp_source(AxisBvhConfig(), [free_udp_port()], host="127.0.0.1")
source.open()
signal.signal(signal.SIGUSR1, lambda *_: time.sleep(0.2))  # ends 0.17 s after the wait's deadline
threading.Timer(0.02, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1)).start()
print("returned", source.poll_frame(0.05), flush=True)
source.close()
"""


def test_a_signal_handled_in_captures_wait_does_not_make_it_wait_for_the_next_datagram() -> None:
    try:
        run = subprocess.run([sys.executable, "-c", _WAIT], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("capture's poll_frame(0.05) waited on after a signal was handled in it: no datagram came")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "returned None"
