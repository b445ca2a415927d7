"""Reliable links on real loopback sockets: exactly once and in order across the death of either
end, with what a dead peer's queues held recovered from the sender's log."""

from __future__ import annotations

import time

import zmq
from hypothesis import given
from hypothesis import strategies as st

from mocapline.core.header import MessageType
from mocapline.core.reliable import (
    ACK,
    HELLO,
    NO_EPOCH,
    ReliableReceiver,
    ReliableSender,
    ack_endpoint,
    decode_control,
    encode_control,
    receiver_sockets,
    sender_sockets,
)
from mocapline.core.segmentlog import LogConfig
from mocapline.core.stagelog import Output, StageLog, StageRecord
from mocapline.tools.pipeline.procs import free_tcp_port

TYPE = MessageType.HUMAN_FRAME


def _endpoint() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port()}"


class End:
    """One end of a link with its own context, closable as abruptly as a killed process."""

    def __init__(self) -> None:
        self.ctx = zmq.Context()

    def kill(self) -> None:
        self.ctx.destroy(linger=0)


def make_sender(ctx, endpoint, state) -> ReliableSender:
    data, control = sender_sockets(ctx, endpoint)
    return ReliableSender(data, control, StageLog(state, "out", LogConfig(fsync="never")), 3, window=64)


def make_receiver(ctx, endpoint, epoch=NO_EPOCH, last=-1) -> ReliableReceiver:
    data, control = receiver_sockets(ctx, endpoint)
    return ReliableReceiver(data, control, TYPE, 3, epoch=epoch, last=last)


def commit(sender: ReliableSender, values) -> None:
    for v in values:
        sender.commit(StageRecord(NO_EPOCH, v, b"", [Output(TYPE, v.to_bytes(4, "little"), v)]))


def pump_until(sender, receiver, want: int, got: list[int], deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        sender.pump()
        msg = receiver.recv(5)
        if msg is not None:
            got.append(int.from_bytes(bytes(msg.payload), "little"))


def test_every_frame_once_in_order(tmp_path):
    end = End()
    ep = _endpoint()
    tx = make_sender(end.ctx, ep, tmp_path)
    rx = make_receiver(end.ctx, ep)
    commit(tx, range(500))
    got: list[int] = []
    pump_until(tx, rx, 500, got)
    assert got == list(range(500))
    end.kill()


def test_a_killed_receiver_gets_what_its_dead_queue_held(tmp_path):
    ep = _endpoint()
    a, b = End(), End()
    tx = make_sender(a.ctx, ep, tmp_path)
    rx = make_receiver(b.ctx, ep)
    commit(tx, range(300))
    got: list[int] = []
    pump_until(tx, rx, 100, got)
    for _ in range(20):  # frames in flight into the receiver's queues, never taken
        tx.pump()
        time.sleep(0.005)
    assert tx.cursor > 100
    b.kill()  # the receiver dies with a backlog; its durable state says it holds 0..99
    c = End()
    rx2 = make_receiver(c.ctx, ep, epoch=tx.epoch, last=got[-1])
    pump_until(tx, rx2, 300, got)
    assert got == list(range(300))
    assert tx.counters.resent > 0
    a.kill()
    c.kill()


def test_a_restarted_sender_resumes_from_its_log(tmp_path):
    ep = _endpoint()
    a, b = End(), End()
    tx = make_sender(a.ctx, ep, tmp_path)
    rx = make_receiver(b.ctx, ep)
    commit(tx, range(200))
    got: list[int] = []
    pump_until(tx, rx, 50, got)
    tx.stage_log.close()
    a.kill()
    a2 = End()
    tx2 = make_sender(a2.ctx, ep, tmp_path)  # same state directory: same epoch, same numbering
    assert tx2.stage_log.next_seq == 200
    commit(tx2, range(200, 250))
    pump_until(tx2, rx, 250, got)
    assert got == list(range(250))
    assert rx.counters.epoch_changes == 0
    a2.kill()
    b.kill()


def test_a_sender_with_a_fresh_log_is_followed_by_its_new_numbering(tmp_path):
    ep = _endpoint()
    a, b = End(), End()
    tx = make_sender(a.ctx, ep, tmp_path / "one")
    rx = make_receiver(b.ctx, ep)
    commit(tx, range(30))
    got: list[int] = []
    pump_until(tx, rx, 30, got)
    a.kill()
    a2 = End()
    tx2 = make_sender(a2.ctx, ep, tmp_path / "two")
    commit(tx2, range(100, 110))
    pump_until(tx2, rx, 40, got)
    assert got == list(range(30)) + list(range(100, 110))
    assert rx.counters.epoch_changes == 1
    a2.kill()
    b.kill()


def test_a_hung_receiver_bounds_what_is_in_flight_and_gets_no_resend_storm(tmp_path):
    ep = _endpoint()
    end = End()
    tx = make_sender(end.ctx, ep, tmp_path)
    rx = make_receiver(end.ctx, ep)
    commit(tx, range(1000))
    rx.recv(200)  # HELLO out, one frame in; then the receiver stops reading
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        tx.pump()
        time.sleep(0.01)
    assert tx.cursor - tx.counters.acked - 1 <= 64  # the window
    assert tx.counters.resent == 0
    assert tx.stage_log.log.disk_bytes() > 1000 * 4  # the rest waits on disk
    end.kill()


def test_acknowledged_segments_are_dropped(tmp_path):
    end = End()
    ep = _endpoint()
    data, control = sender_sockets(end.ctx, ep)
    tx = ReliableSender(data, control, StageLog(tmp_path, "out", LogConfig(max_segment_bytes=2000, fsync="never")), 3)
    rx = make_receiver(end.ctx, ep)
    commit(tx, range(400))
    got: list[int] = []
    pump_until(tx, rx, 400, got)
    before = len(tx.stage_log.log.segments())
    deadline = time.monotonic() + 3
    while len(tx.stage_log.log.segments()) >= before and time.monotonic() < deadline:
        rx.recv(20)
        tx.pump()
    assert len(tx.stage_log.log.segments()) < before
    assert tx.counters.acked == 399
    end.kill()


def test_ack_endpoint_is_the_port_plus_1000():
    assert ack_endpoint("tcp://127.0.0.1:5556") == "tcp://127.0.0.1:6556"
    assert ack_endpoint("tcp://*:5555") == "tcp://*:6555"


def test_control_messages_round_trip():
    for kind in (HELLO, ACK):
        assert decode_control(encode_control(kind, b"e" * 16, 41)) == (kind, b"e" * 16, 41, "")
    assert decode_control(encode_control(HELLO, b"e" * 16, -1, "robot-1")).name == "robot-1"


@given(st.binary(max_size=64))
def test_control_decoder_never_raises_on_arbitrary_bytes(blob):
    msg = decode_control(blob)
    assert msg is None or msg[0] in (1, 2, 3)


@given(st.lists(st.binary(max_size=40), max_size=5), st.integers(-1, 2**62), st.binary(max_size=30))
def test_stage_records_round_trip(payloads, seq, state):
    rec = StageRecord(b"x" * 16, seq, state, [Output(TYPE, p, len(p)) for p in payloads])
    back = StageRecord.decode(rec.encode())
    assert back == rec


def test_a_backlog_older_than_the_cache_is_resent_from_disk_across_segments(tmp_path):
    ep = _endpoint()
    a, b = End(), End()
    data, control = sender_sockets(a.ctx, ep)
    log = StageLog(tmp_path, "out", LogConfig(max_segment_bytes=3000, fsync="never"))
    tx = ReliableSender(data, control, log, 3, window=4000, cache=50)
    rx = make_receiver(b.ctx, ep)
    commit(tx, range(1000))
    got: list[int] = []
    pump_until(tx, rx, 10, got)
    for _ in range(20):  # everything else in flight, into a receiver about to die
        tx.pump()
        time.sleep(0.005)
    b.kill()
    assert len(log.log.segments()) > 10
    c = End()
    rx2 = make_receiver(c.ctx, ep, epoch=tx.epoch, last=got[-1])
    pump_until(tx, rx2, 1000, got)
    assert got == list(range(1000))
    assert tx.counters.resent >= 900
    a.kill()
    c.kill()
