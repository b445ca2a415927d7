"""Capture judges a path silent only once nothing of it waits unread: a side path whose receive
thread has not run yet (a loaded host) still fills main's gaps, however long ago it was heard."""

from __future__ import annotations

import threading
import time

from mocapline.core.udp import UdpReceiver
from mocapline.formats.axis_bvh import AxisBvhConfig
from mocapline.services.capture.sources import axis_udp_source
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.procs import free_udp_port


def poll_for(source, seconds: float) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        frame = source.poll_frame(0.02)
        if frame is not None:
            got.append(frame.posture_index)
    return got


def test_copies_waiting_in_a_sleeping_threads_socket_are_waited_for_not_made_late(monkeypatch) -> None:
    main, side = free_udp_port(), free_udp_port()
    gate = threading.Event()
    run = UdpReceiver._run

    def side_thread_not_scheduled_yet(self: UdpReceiver) -> None:
        if self.port == side:
            gate.wait(10)
        run(self)

    monkeypatch.setattr(UdpReceiver, "_run", side_thread_not_scheduled_yet)
    source = axis_udp_source(AxisBvhConfig(), [main, side], host="127.0.0.1", merge_window_s=0.05,
                             idle_flush_s=0.2)
    source.open()
    try:
        emit_take(TakePlan(frames=60, first_index=100, skip_main={110, 111, 112}),
                  [("127.0.0.1", main), ("127.0.0.1", side)], rate_hz=0)
        # 0.6 s: twelve merge windows and three idle flushes by the clock, with side never heard
        before = poll_for(source, 0.6)
        assert before == list(range(100, 110)), "the gap was given up while side's copies sat in its socket"
        gate.set()
        after = poll_for(source, 1.0)
    finally:
        gate.set()
        source.close()
    assert before + after == list(range(100, 160))
    ledger = source.ledger()
    assert ledger["source_missing_indices"] == 0 and ledger["late_frames"] == 0, ledger
