"""Durable mode over TCP: capture, the client of Axis' TCP server, is hung and killed with SIGKILL
in the middle of a two-performer take and restarted. The server does not wait (as Axis does not):
what it sends while capture is down is lost on the TCP path, and the UDP side path, whose socket
the stack holds across the restart, fills exactly that gap. Every frame of every performer is
applied once, in order, and every performer's ledger is conserved."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers import wait_until

from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.emitter.tcp_server import AxisTcpServer
from mocapline.tools.pipeline.stack import Stack, local_config

pytestmark = pytest.mark.integration

RATE = 120.0
FRAMES = 600
FIRST = 3000


def capture_status(stack: Stack) -> dict:
    try:
        return stack.ask("capture", "status", timeout=1.0)
    except Exception:  # noqa: BLE001 - not answering yet: ask again
        return {}


def test_capture_killed_over_tcp_loses_nothing_with_a_side_path(tmp_path: Path) -> None:
    config = local_config(merge=True, transport="tcp", viewer=True, input_fps=RATE, output_fps=RATE,
                          log_dir=tmp_path / "logs", state_dir=tmp_path / "state", fsync="never",
                          # the merge waits long enough for the side path's backlog after the restart
                          extra_env={"MOCAPLINE_CHECKPOINT_S": "0.5", "MOCAPLINE_MERGE_WINDOW_MS": "500"})
    server = AxisTcpServer("127.0.0.1", config.axis_port)
    stack = Stack(config)
    try:
        stack.start()
        stack.wait_ready()
        wait_until(lambda: (capture_status(stack).get("tcp") or {}).get("connected"), 30, what="capture connected")
        plan = TakePlan(frames=FRAMES, first_index=FIRST, performers=2)
        emitter = threading.Thread(
            target=emit_take, args=(plan, [("127.0.0.1", config.side_port)]),
            kwargs={"rate_hz": RATE, "tcp": server, "tcp_hold_s": 0.0}, daemon=True,
        )
        emitter.start()
        wait_until(lambda: capture_status(stack).get("source_unique_frames", 0) >= 2 * 2 * RATE, 30,
                   what="the take under way")
        proc = stack.services["capture"].proc
        assert proc is not None
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.5)  # hung: the kernel buffers fill on both paths
        stack.services["capture"].kill()
        time.sleep(0.3)  # down: the TCP path loses what Axis sends now
        stack.restart("capture")
        emitter.join(timeout=60)
        v = stack.verdict(stack.drain(timeout=60))
    finally:
        stack.stop()
        server.close()
    assert v["source_unique_frames"] == 2 * FRAMES, v
    assert v["unique_frames_conserved"] == 1, v
    for key in ("0", "1"):
        per = v["performers"][key]
        assert per["unique_frames_conserved"] == 1, (key, per)
        assert per["source_unique_frames"] == per["viewer_applied"] == FRAMES
    assert stack.restarts == {"capture": 1}
