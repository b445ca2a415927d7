"""Capture as the client of an Axis Studio TCP server: reconnects with back-off, cut datagrams and
garbage rejected and counted, every frame of the take through the same core and ledger, merged
with a UDP side path."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from mocapline.formats.axis_bvh import AxisBvhConfig
from mocapline.services.capture.sources import axis_udp_source
from mocapline.services.capture.tcp import Backoff, parse_endpoint
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.emitter.tcp_server import AxisTcpServer
from mocapline.tools.pipeline.procs import free_tcp_port, free_udp_port

FAST = Backoff(initial_s=0.05, maximum_s=0.2, connect_timeout_s=1.0)


def collect(source, expected: int, timeout_s: float = 30.0) -> list:
    """Poll frames until ``expected`` came or the stream was quiet for a second (bounded)."""
    frames = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        frame = source.poll_frame(0.05)
        if frame is not None:
            frames.append(frame)
        elif len(frames) >= expected and source.settled:
            break
    source.flush()
    while (frame := source.poll_frame(0.0)) is not None:
        frames.append(frame)
    return frames


def test_parse_endpoint():
    assert parse_endpoint("10.0.0.2:7001") == ("10.0.0.2", 7001)
    assert parse_endpoint("studio") == ("studio", 7001)
    assert parse_endpoint(":7100") == ("127.0.0.1", 7100)
    with pytest.raises(ValueError):
        parse_endpoint("studio:x")


def test_take_over_tcp_with_cuts_and_garbage_loses_nothing():
    server = AxisTcpServer("127.0.0.1", 0)
    source = axis_udp_source(AxisBvhConfig(), [], tcp=("127.0.0.1", server.port), tcp_backoff=FAST)
    source.open()
    try:
        plan = TakePlan(frames=400, first_index=500, tcp_cut={600, 750}, garbage=20, seed=5)
        stats = emit_take(plan, [], rate_hz=0, tcp=server, tcp_hold_s=10.0)
        frames = collect(source, 400)
    finally:
        source.close()
        server.close()
    assert stats.tcp_cuts == 2
    assert [f.posture_index for f in frames] == list(range(500, 900))
    led = source.ledger()
    assert led["source_unique_frames"] == 400 and led["source_missing_indices"] == 0
    assert led["rejected_datagrams"] >= 2  # the two cut datagrams at least; garbage runs too
    assert led["rejected_by_reason"].get("truncated", 0) >= 2
    assert led["tcp"]["connects"] == 3 and led["tcp"]["disconnects"] >= 2
    assert led["paths"][str(server.port)]["role"] == "main"


def test_capture_waits_for_a_server_that_comes_later():
    port = free_tcp_port()
    source = axis_udp_source(AxisBvhConfig(), [], tcp=("127.0.0.1", port), tcp_backoff=FAST)
    source.open()
    try:
        deadline = time.monotonic() + 10
        while source.ledger()["tcp"]["failed_attempts"] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert source.ledger()["tcp"]["connected"] is False
        server = AxisTcpServer("127.0.0.1", port)
        try:
            emit_take(TakePlan(frames=50, first_index=0), [], rate_hz=0, tcp=server)
            frames = collect(source, 50)
        finally:
            server.close()
    finally:
        source.close()
    assert len(frames) == 50
    assert source.ledger()["tcp"]["failed_attempts"] >= 2


def test_tcp_main_path_merged_with_a_udp_side_path():
    server = AxisTcpServer("127.0.0.1", 0)
    side = free_udp_port()
    source = axis_udp_source(AxisBvhConfig(), [side], tcp=("127.0.0.1", server.port), tcp_backoff=FAST,
                             merge_window_s=0.2)
    source.open()
    try:
        # the TCP server never sends 120-122 (Axis dropped them there); the side path has them
        plan = TakePlan(frames=300, first_index=0, skip_main={120, 121, 122}, skip_side={200})
        emit_take(plan, [("127.0.0.1", side)], rate_hz=600, tcp=server)
        frames = collect(source, 300)
    finally:
        source.close()
        server.close()
    assert [f.posture_index for f in frames] == list(range(300))
    led = source.ledger()
    assert led["source_missing_indices"] == 0
    main, side_path = led["paths"][str(server.port)], led["paths"][str(side)]
    assert main["source_missing_ranges"] == [[120, 122]] and side_path["source_missing_ranges"] == [[200, 200]]


def test_a_server_that_sends_nothing_but_garbage_does_not_stall_capture():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"\xff\xdd" + bytes(range(256)) * 40)
            time.sleep(0.3)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    source = axis_udp_source(AxisBvhConfig(), [], tcp=("127.0.0.1", port), tcp_backoff=FAST)
    source.open()
    try:
        deadline = time.monotonic() + 10
        while source.ledger()["rejected_datagrams"] == 0 and time.monotonic() < deadline:
            source.poll_frame(0.05)
    finally:
        source.close()
        listener.close()
    led = source.ledger()
    assert led["rejected_datagrams"] >= 1 and led["source_received"] == 0
