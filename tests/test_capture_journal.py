"""Capture's raw journal and resume: a capture killed after journaling datagrams it had not yet
processed sends them, and only them, when it starts again; the ledger is rebuilt exactly."""

from __future__ import annotations

import time

import zmq

from mocapline.core.bodies import GMR_BODIES
from mocapline.core.durable import DurableStage, LinkSpec
from mocapline.core.frames import HumanFrame
from mocapline.core.header import MessageType
from mocapline.core.segmentlog import LogConfig
from mocapline.core.udp import Datagram
from mocapline.formats.axis_bvh import AxisBvhConfig, encode_datagram
from mocapline.formats.skeleton import get_skeleton
from mocapline.services.capture.journal import RawJournal
from mocapline.services.capture.service import CaptureService
from mocapline.services.capture.sources import axis_udp_source
from mocapline.tools.emitter.motion import pose_channels
from mocapline.tools.pipeline.procs import free_tcp_port

PORT = 7014
FIRST = 300


def datagrams(n: int, duplicate: int | None = None) -> list[Datagram]:
    config = AxisBvhConfig()
    skeleton = get_skeleton(config.skeleton)
    indices = list(range(FIRST, FIRST + n))
    if duplicate is not None:
        indices.insert(indices.index(duplicate) + 1, duplicate)
    now = time.time_ns()
    return [Datagram(now + k * 8_333_333, PORT, "127.0.0.1",
                     encode_datagram(i, pose_channels(skeleton, config.rotation_order, k / 120, 1.0), config=config))
            for k, i in enumerate(indices)]


def open_capture(ctx: zmq.Context, state, endpoint: str) -> CaptureService:
    config = LogConfig(fsync="never")
    journal = RawJournal(state, config)
    stage = DurableStage(ctx, state, config, output=LinkSpec(endpoint, MessageType.HUMAN_FRAME, len(GMR_BODIES)))
    service = CaptureService(axis_udp_source(AxisBvhConfig(), [PORT], journal=journal), stage.out)
    service.stage = stage
    return service


def sent_indices(service: CaptureService) -> list[int]:
    return [HumanFrame.from_bytes(out.payload).posture_index
            for _, out in service.stage.stage_log.outputs_from(0) if out.message_type is MessageType.HUMAN_FRAME]


def test_journaled_but_unprocessed_datagrams_are_sent_after_a_restart(tmp_path) -> None:
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    take = datagrams(200, duplicate=350)
    ctx = zmq.Context()
    first = open_capture(ctx, tmp_path, endpoint)
    assert first.resume() == 0  # nothing journaled: a new take starts
    journaled = [first.source.journal.record(d) for d in take]  # the receive threads' part
    for d in journaled[:120]:  # only these were processed when capture died
        first.source.fifo.put(d)
    first.send_ready()
    assert first.frames_sent == 119  # 120 datagrams, one of them the repeat of 350
    session = first.source.core.session_id
    ctx.destroy(linger=0)  # killed: nothing closed, nothing flushed

    ctx = zmq.Context()
    second = open_capture(ctx, tmp_path, endpoint)
    assert second.resume() == len(take)
    ledger = second.ledger()
    assert second.frames_sent == 200
    assert ledger.session_id == session
    assert ledger.source_received == 201 and ledger.source_unique_frames == 200
    assert ledger.source_duplicate_indices == 1 and ledger.source_missing_indices == 0
    assert sent_indices(second) == list(range(FIRST, FIRST + 200))
    ctx.destroy(linger=0)


def test_a_reset_starts_a_new_take_in_the_journal(tmp_path) -> None:
    journal = RawJournal(tmp_path, LogConfig(fsync="never"))
    assert journal.last_take() is None
    first = journal.mark_take("a" * 32)
    journal.record(datagrams(1)[0])
    second = journal.mark_take("a" * 32)
    assert journal.last_take() == (second, "a" * 32) and second > first
    journal.close()
    again = RawJournal(tmp_path)
    assert again.next_seq == second + 1
    assert [d.seq for d in again.datagrams_from(0)] == [first + 1]


def test_a_datagram_journaled_but_still_in_the_socket_is_not_journaled_twice(tmp_path) -> None:
    """Killed between journaling a datagram and taking it off the socket: the restarted capture
    finds it at the head of the (supervisor-held) socket and skips it; everything else is journaled
    once and only leaves the socket after it is on disk."""
    import queue
    import socket

    from mocapline.core.udp import UdpReceiver, open_udp

    sock, _ = open_udp("127.0.0.1", 0)
    port = sock.getsockname()[1]
    payloads = [d.data for d in datagrams(3)]
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for data in payloads:
        out.sendto(data, ("127.0.0.1", port))
    journal = RawJournal(tmp_path, LogConfig(fsync="never"))
    fifo: queue.SimpleQueue = queue.SimpleQueue()
    receiver = UdpReceiver(sock, fifo, journal.record, journaled_head=payloads[0])
    receiver.start()
    got = [fifo.get(timeout=5) for _ in range(2)]
    receiver.stop()
    out.close()
    assert [d.data for d in got] == payloads[1:]
    assert [d.seq for d in got] == [0, 1]
    assert [d.data for d in journal.datagrams_from(0)] == payloads[1:]
    assert RawJournal(tmp_path).last_by_port == {port: payloads[2]}


def test_a_restart_from_a_checkpoint_replays_only_what_came_after_it(tmp_path) -> None:
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    take = datagrams(300, duplicate=380)
    ctx = zmq.Context()
    first = open_capture(ctx, tmp_path, endpoint)
    first.checkpoint_dir, first.checkpoint_interval_s = tmp_path, 0.0
    first.resume()
    journaled = [first.source.journal.record(d) for d in take[:150]]
    for d in journaled:
        first.source.fifo.put(d)
    first.send_ready()
    assert first.maybe_checkpoint(time.monotonic())  # quiet: everything journaled went through
    position = first.source.journal.next_seq
    more = [first.source.journal.record(d) for d in take[150:]]
    assert not first.maybe_checkpoint(time.monotonic())  # 151 journaled datagrams not through the core
    for d in more[:60]:
        first.source.fifo.put(d)
    first.send_ready()
    ctx.destroy(linger=0)  # killed

    ctx = zmq.Context()
    second = open_capture(ctx, tmp_path, endpoint)
    second.checkpoint_dir = tmp_path
    assert second.resume() == len(take) - 150  # only the journal after the checkpoint
    assert position == 151  # the take marker and 150 datagrams
    ledger = second.ledger()
    assert ledger.source_received == 301 and ledger.source_unique_frames == 300
    assert ledger.source_duplicate_indices == 1 and ledger.source_missing_indices == 0
    assert sent_indices(second) == list(range(FIRST, FIRST + 300))
    ctx.destroy(linger=0)
