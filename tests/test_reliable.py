"""Reliable links on real loopback sockets: exactly once and in order across the death of either
end, with what a dead peer's queues held recovered from the sender's log."""

from __future__ import annotations

import time

import zmq
from hypothesis import given
from hypothesis import strategies as st

from mocapline.core.control import KINDS, welcome
from mocapline.core.header import MessageType
from mocapline.core.reliable import (
    ACK,
    HELLO,
    NO_EPOCH,
    RESEND,
    RESTARTED,
    TAKEN,
    WELCOME,
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
    assert tx.receiver.cursor > 100
    b.kill()  # the receiver dies with a backlog; its durable state says it holds 0..99
    c = End()
    rx2 = make_receiver(c.ctx, ep, epoch=tx.epoch, last=got[-1])
    pump_until(tx, rx2, 300, got)
    assert got == list(range(300))
    assert tx.receiver.resent > 0
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
    assert tx.receiver.cursor - tx.receiver.acked - 1 <= 64  # the window
    assert tx.receiver.resent == 0
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
    assert tx.receiver.acked == 399
    end.kill()


def test_ack_endpoint_is_the_port_plus_1000():
    assert ack_endpoint("tcp://127.0.0.1:5556") == "tcp://127.0.0.1:6556"
    assert ack_endpoint("tcp://*:5555") == "tcp://*:6555"


def test_control_messages_round_trip_in_both_layouts():
    for version in (1, 2):
        for kind in (HELLO, ACK):
            msg = decode_control(encode_control(kind, b"e" * 16, 41, version=version))
            assert (msg.kind, msg.epoch, msg.seq, msg.name, msg.version) == (kind, b"e" * 16, 41, "", version)
        assert decode_control(encode_control(HELLO, b"e" * 16, -1, "robot-1", version=version)).name == "robot-1"
    assert decode_control(encode_control(HELLO, b"e" * 16, 3, "r", flags=RESEND)).flags == RESEND


def test_welcome_carries_the_answered_seq_as_a_field_and_as_text_for_an_old_peer():
    new = decode_control(welcome(b"e" * 16, 50, 49, version=2))
    assert (new.kind, new.seq, new.ref, new.name) == (WELCOME, 50, 49, "")
    assert len(welcome(b"e" * 16, 50, 49, version=2)) == 38
    old = welcome(b"e" * 16, 50, 49, version=1)
    assert old[:4] == b"MLAK" and old[29:] == b"49" and decode_control(old).ref == 49
    assert decode_control(encode_control(RESTARTED, b"e" * 16, 0, version=1)) is None  # v2 only


@given(st.binary(max_size=100))
def test_control_decoder_never_raises_on_arbitrary_bytes(blob):
    msg = decode_control(blob)
    assert msg is None or msg.kind in KINDS


@given(st.sampled_from(KINDS), st.integers(0, 255), st.binary(min_size=16, max_size=16), st.integers(-1, 2**62),
       st.integers(-(2**63), 2**63 - 1), st.text(max_size=16))
def test_v2_control_round_trips(kind, flags, epoch, seq, ref, name):
    msg = decode_control(encode_control(kind, epoch, seq, name, flags=flags, ref=ref))
    assert msg is not None and (msg.kind, msg.flags, msg.epoch, msg.seq, msg.name) == (kind, flags, epoch, seq, name)
    assert msg.ref == (ref if kind == WELCOME else None)
    assert msg.taken == (ref if kind in (HELLO, ACK) and flags & TAKEN and ref >= 0 else None)


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
    assert tx.receiver.resent >= 900
    a.kill()
    c.kill()
