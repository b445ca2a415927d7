"""The resend storm's trigger made to happen (``mocapline bench load --load race``): the robot port
played from this process (``PortPlayer``, the streamer's own sender) to a real `mocapline viewer`
(web display, no page: its 50 ms batches), 5 s at 60 Hz, then a burst of 30 frames at once (an
upstream stall's backlog) and, while the burst is on its way, the RESEND HELLO the viewer's idle
timer would send at that moment: HELLO(its last acknowledged frame), with the count of messages it
has taken where the code has TAKEN. Then 30 s more at 60 Hz, END_OF_STREAM, and the counts.

Run as a script with ``PYTHONPATH`` at the source tree under test (it uses only what f243c4f had
too), it prints one JSON object: the frames made, applied, resent, the viewer's duplicates and
HELLOs, resends withheld.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mocapline.core.control import HELLO, RESEND, Control
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.port_player import PortPlayer, joint_frame

try:
    from mocapline.robot.registry import get_robot

    JOINTS = get_robot().joint_count
except ImportError:  # f243c4f, before the robot descriptions
    from mocapline.core.header import G1_JOINT_COUNT as JOINTS  # type: ignore[attr-defined, no-redef]

RATE = 60.0
BURST = 30
TAKEN_FLAG = 2  # core/control.TAKEN (absent before flow control)


def _consumer(port: PortPlayer) -> dict[str, Any]:
    with port.lock:
        return dict(port.sender.snapshot()["consumers"].get("viewer", {}))


def _inject(port: PortPlayer) -> None:
    """The viewer's RESEND HELLO crossing the burst, as its receiver would send it."""
    with port.lock:
        c = port.sender.consumers["viewer"]
        assert c.route is not None
        taken = getattr(c, "taken", None)
        flags = RESEND | (TAKEN_FLAG if taken is not None else 0)
        fields: tuple[Any, ...] = (HELLO, port.sender.epoch, c.acked, "viewer", flags, None, 2)
        port.sender._hello(c.route, Control(*fields, *(() if taken is None else (taken,))), "viewer")


def run(seconds: float = 30.0) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="mocapline-race-"))
    port = PortPlayer(tmp / "port", window=2048)
    viewer = subprocess.Popen(
        [sys.executable, "-m", "mocapline.cli", "viewer", "--display", "web", "--web-port", str(free_tcp_port()),
         "--input", port.endpoint, "--state-dir", str(tmp / "viewer"), "--nats", "", "--fsync", "never",
         "--metrics-port", "0", "--log-level", "WARNING"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    q = np.zeros(JOINTS)
    frames = [joint_frame(i, q, q, i / RATE) for i in range(int(RATE * (5 + seconds)) + BURST)]
    lead = int(RATE * 5)
    try:
        deadline = time.monotonic() + 60
        while not port.connected("viewer") and time.monotonic() < deadline:
            time.sleep(0.1)
        port.play(frames[:lead], RATE)
        port.play(frames[lead:lead + BURST], 1e6, start=lead)
        while _consumer(port).get("next_frame_id", 0) < lead + BURST and time.monotonic() < deadline + 60:
            time.sleep(0.0005)  # the burst handed out, not yet taken
        _inject(port)
        port.play(frames[lead + BURST:], RATE, start=lead + BURST, end=True)
        wait_until = time.monotonic() + 30  # bounded: the viewer's chance to finish
        while _consumer(port).get("backlog", 1) and time.monotonic() < wait_until:
            time.sleep(0.1)
        c = _consumer(port)
    finally:
        viewer.terminate()
        out, _ = viewer.communicate(timeout=60)
        port.close()
    last: dict[str, Any] = next((json.loads(line) for line in reversed(out.splitlines()) if line.startswith("{")), {})
    link = (last.get("durable") or {}).get("input_link") or {}
    return {"take": len(frames), "viewer_applied": last.get("viewer_applied"), "resent": c.get("resent", 0),
            "duplicates": link.get("duplicates", 0), "hellos": c.get("hellos", 0),
            "withheld": c.get("resends_withheld", 0), "in_flight_max": c.get("in_flight_max"),
            "latency_p50_ms": last.get("latency_p50_ms")}


if __name__ == "__main__":
    os.environ.setdefault("MOCAPLINE_METRICS_PORT", "0")
    print(json.dumps(run(float(sys.argv[1]) if len(sys.argv) > 1 else 30.0)))
