"""Flow control on the robot port (docs/protocol.md, "Flow control" and "The resend storm"): a
consumer that reports its credit (TAKEN) never has more than the window on its way, copies
included, and a RESEND HELLO resends only what it took and lacks; a receiver counts a duplicate
as an arrival and takes the next message at once. The sender is pumped by the test itself, the
consumer is a raw DEALER, so each step is the test's to order."""

from __future__ import annotations

import time
from pathlib import Path

import zmq

from mocapline.core.control import ACK, HELLO, NO_EPOCH, RESEND, TAKEN, WELCOME, decode_control, encode_control
from mocapline.core.fanout import FanoutSender
from mocapline.core.header import MessageType, decode_frame
from mocapline.core.reliable import ReliableReceiver
from mocapline.core.segmentlog import LogConfig
from mocapline.core.stagelog import Output, StageLog, StageRecord
from mocapline.core.transport import lossless_socket
from mocapline.tools.pipeline.procs import free_tcp_port

TYPE = MessageType.HUMAN_FRAME
WINDOW = 64


class Port:
    """A FanoutSender on a ROUTER, pumped only when the test says."""

    def __init__(self, ctx: zmq.Context, state: Path, hwm: int | None = None) -> None:
        self.endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
        if hwm is None:
            self.sock = lossless_socket(ctx, zmq.ROUTER, self.endpoint, bind=True)
        else:  # a queue of ``hwm`` messages and a small kernel buffer (set before the bind: its connections take them)
            self.sock = ctx.socket(zmq.ROUTER)
            self.sock.setsockopt(zmq.SNDHWM, hwm)
            self.sock.setsockopt(zmq.SNDBUF, 4096)
            self.sock.bind(self.endpoint)
        self.log = StageLog(state, "stage", LogConfig(fsync="never"))
        self.sender = FanoutSender(self.sock, self.log, 3, window=WINDOW)

    def produce(self, values: range, size: int = 4) -> None:
        for v in values:
            payload = v.to_bytes(4, "little") + bytes(size - 4)
            self.sender.commit(StageRecord(NO_EPOCH, v, b"", [Output(TYPE, payload, v)]))

    def pump(self, seconds: float = 0.3) -> None:
        """Pump for a while: every control message that came is read, what the window allows sent."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sender.pump()
            self.sock.poll(5)

    def consumer(self, name: str) -> dict:
        return self.sender.snapshot()["consumers"][name]

    def close(self) -> None:
        self.sender.close()
        self.sock.close(linger=0)
        self.log.close()


class Raw:
    """A consumer speaking the protocol by hand: it takes messages when told and reports ``taken``
    when asked to (``credit=False``: a consumer written before TAKEN)."""

    def __init__(self, ctx: zmq.Context, endpoint: str, name: str, credit: bool = True,
                 routing_id: bytes = b"", small: bool = False) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        if small:  # a queue of one message and a small kernel buffer: a consumer that stops reading fills it at once
            self.sock.setsockopt(zmq.RCVHWM, 1)
            self.sock.setsockopt(zmq.RCVBUF, 4096)
        if routing_id:
            self.sock.setsockopt(zmq.ROUTING_ID, routing_id)
        self.sock.connect(endpoint)
        self.name, self.credit = name, credit
        self.epoch = NO_EPOCH
        self.taken = 0
        self.welcomes: list[int] = []

    def _send(self, kind: int, seq: int, flags: int = 0, name: str = "") -> None:
        flags |= TAKEN if self.credit else 0
        self.sock.send(encode_control(kind, self.epoch, seq, name, flags=flags, ref=self.taken if self.credit else 0))

    def hello(self, seq: int, resend: bool = True) -> None:
        self._send(HELLO, seq, RESEND if resend else 0, self.name)

    def ack(self, seq: int) -> None:
        self._send(ACK, seq)

    def take(self, n: int, timeout_s: float = 5.0) -> list[int]:
        """The frame_ids of the next ``n`` data messages (WELCOMEs noted on the way)."""
        out: list[int] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            if not self.sock.poll(20):
                continue
            parts = self.sock.recv_multipart()
            if len(parts) == 1:
                msg = decode_control(parts[0])
                if msg is not None and msg.kind == WELCOME:
                    self.epoch = msg.epoch
                    self.welcomes.append(msg.seq)
                continue
            self.taken += 1
            out.append(decode_frame(parts[1])[0].frame_id)
        return out

    def drain(self, port: Port, n: int) -> list[int]:
        """The next ``n`` frame_ids, acknowledging (and so reporting its credit) as it goes."""
        out: list[int] = []
        deadline = time.monotonic() + 10
        while len(out) < n and time.monotonic() < deadline:
            out += self.take(min(16, n - len(out)), timeout_s=0.2)
            if out:
                self.ack(out[-1])
            port.pump(0.02)
        return out

    def close(self) -> None:
        self.sock.close(linger=0)


def test_a_resend_hello_for_frames_on_their_way_resends_nothing(tmp_path) -> None:
    """The incident's trigger: a consumer's RESEND HELLO crosses frames already on their way to it
    (its idle timer fired just before a burst reached it). They are not sent again."""
    ctx = zmq.Context()
    port, raw = Port(ctx, tmp_path), None
    try:
        port.produce(range(200))
        raw = Raw(ctx, port.endpoint, "c")
        raw.hello(-1)
        port.pump()
        assert port.consumer("c")["in_flight"] == WINDOW  # the window is on its way, nothing taken yet
        got = raw.take(10)
        assert got == list(range(10))
        raw.hello(9)  # RESEND, though 10..63 are on their way behind what it took
        port.pump()
        c = port.consumer("c")
        assert c["resent"] == 0 and c["resends_withheld"] == 1
        got += raw.drain(port, 200 - 10)
        assert got == list(range(200))  # each once, in order
        assert raw.take(1, timeout_s=0.3) == []  # and no second copy behind
        assert port.consumer("c")["resent"] == 0
    finally:
        if raw is not None:
            raw.close()
        port.close()
        ctx.term()


def test_however_often_a_slow_consumer_says_resend_no_more_than_the_window_is_on_its_way(tmp_path) -> None:
    """A consumer that says RESEND after every message it takes (what the viewer did, in effect,
    while it chewed through duplicates) gets nothing twice, and what is on its way never exceeds
    the window, however far behind it is."""
    ctx = zmq.Context()
    port, raw = Port(ctx, tmp_path), None
    try:
        port.produce(range(300))
        raw = Raw(ctx, port.endpoint, "slow")
        raw.hello(-1)
        port.pump()
        got: list[int] = []
        while len(got) < 300:
            taken = raw.take(1)
            assert taken, f"nothing came after {len(got)} frames"
            got += taken
            raw.hello(got[-1])  # RESEND, every time
            if len(got) % 50 == 0:
                raw.ack(got[-1])
            port.pump(0.01)
            assert port.consumer("slow")["in_flight"] <= WINDOW
        assert got == list(range(300))
        c = port.consumer("slow")
        assert c["resent"] == 0 and c["resends_withheld"] > 0 and c["in_flight_max"] <= WINDOW, c
    finally:
        if raw is not None:
            raw.close()
        port.close()
        ctx.term()


def test_a_frame_the_consumer_took_and_rejected_is_resent(tmp_path) -> None:
    """A frame it took and could not use (a CRC reject, a gap before it) is what it lacks: sent
    again from there, once."""
    ctx = zmq.Context()
    port, raw = Port(ctx, tmp_path), None
    try:
        port.produce(range(50))
        raw = Raw(ctx, port.endpoint, "c")
        raw.hello(-1)
        port.pump()
        assert raw.take(12) == list(range(12))  # 10 is "rejected", 11 is beyond the gap
        raw.hello(9)
        port.pump()
        rest = raw.drain(port, 38 + 40)  # 12..49 of the first copies, then 10..49 again
        assert rest == list(range(12, 50)) + list(range(10, 50))
        assert port.consumer("c")["resent"] == 40
    finally:
        if raw is not None:
            raw.close()
        port.close()
        ctx.term()


def test_what_was_on_its_way_and_never_came_is_sent_again(tmp_path) -> None:
    """A connection ZeroMQ re-made under the same routing id drops what was queued on it; the
    consumer's idle HELLOs say it took nothing more (a keep-alive, then RESEND twice): sent again."""
    ctx = zmq.Context()
    port, first, second = Port(ctx, tmp_path), None, None
    try:
        port.produce(range(WINDOW))  # all of it on its way at once: nothing new to send after
        first = Raw(ctx, port.endpoint, "c", routing_id=b"c")
        first.hello(-1)
        port.pump()
        assert first.take(10) == list(range(10))
        second = Raw(ctx, port.endpoint, "c", routing_id=b"c")  # the same consumer, its queue gone
        second.epoch, second.taken = first.epoch, first.taken
        first.close()
        first = None
        time.sleep(0.2)
        second.hello(9, resend=False)  # its idle timer: a keep-alive...
        port.pump()
        assert second.take(1, timeout_s=0.3) == []
        second.hello(9)  # ...then RESEND, still nothing taken since: it may yet come (a starved consumer)...
        port.pump()
        assert second.take(1, timeout_s=0.3) == [] and port.consumer("c")["resent"] == 0
        second.hello(9)  # ...and RESEND again, nothing taken: lost
        port.pump()
        assert second.take(WINDOW - 10) == list(range(10, WINDOW))
        assert port.consumer("c")["resent"] == WINDOW - 10
    finally:
        for raw in (first, second):
            if raw is not None:
                raw.close()
        port.close()
        ctx.term()


def test_a_consumer_without_credit_is_resent_its_window_on_resend_as_before(tmp_path) -> None:
    """A consumer written before TAKEN (docs/protocol.md's layout v2 without it, or v1): its
    RESEND HELLO still rewinds it, whatever is on its way (the window of unacknowledged frames
    bounds each resend)."""
    ctx = zmq.Context()
    port, raw = Port(ctx, tmp_path), None
    try:
        port.produce(range(100))
        raw = Raw(ctx, port.endpoint, "old", credit=False)
        raw.hello(-1)
        port.pump()
        assert raw.take(10) == list(range(10))
        raw.hello(9)
        port.pump()
        assert raw.take(WINDOW - 10 + WINDOW) == list(range(10, WINDOW)) + list(range(10, 10 + WINDOW))
        c = port.consumer("old")
        assert c["resent"] == WINDOW - 10 and c["resends_withheld"] == 0
    finally:
        if raw is not None:
            raw.close()
        port.close()
        ctx.term()


def test_a_receiver_takes_duplicates_as_arrivals_and_the_next_frame_at_once(tmp_path) -> None:
    """Duplicates arriving are not silence: no idle HELLO while they come; and one receive takes
    the frame behind a run of them (one ignored message per wake-up was the viewer's stall)."""
    ctx = zmq.Context()
    endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
    router = lossless_socket(ctx, zmq.ROUTER, endpoint, bind=True)
    dealer = lossless_socket(ctx, zmq.DEALER, endpoint, bind=False)
    rx = ReliableReceiver(dealer, dealer, TYPE, 3, name="r")
    try:
        assert router.poll(5000)
        route, hello = router.recv_multipart()
        first = decode_control(hello)
        assert first.kind == HELLO and first.flags & TAKEN and first.taken == 0
        epoch = b"E" * 16
        router.send_multipart([route, encode_control(WELCOME, epoch, 0, ref=first.seq)])

        from mocapline.core.control import encode_output

        def frame(seq: int) -> list[bytes]:
            return [route, b"HUMAN_FRAME", encode_output(Output(TYPE, b"\x00" * 4, 1), seq, 3, epoch)]

        router.send_multipart(frame(0))
        deadline = time.monotonic() + 5
        got = None
        while got is None and time.monotonic() < deadline:
            got = rx.recv(50)
        assert got is not None and got.header.frame_id == 0
        hellos = rx.counters.hellos
        # 1.5 s of duplicates, one every 50 ms: the idle timer (0.25 s, then RESEND at 0.75 s) never fires
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            router.send_multipart(frame(0))
            assert rx.recv(50) is None
        assert rx.counters.hellos == hellos and rx.counters.duplicates >= 20
        for _ in range(100):
            router.send_multipart(frame(0))
        router.send_multipart(frame(1))
        time.sleep(0.3)  # all of them waiting in the socket
        got = rx.recv(0)
        assert got is not None and got.header.frame_id == 1  # one receive: 100 duplicates, then the frame
        rx.ack()
        deadline = time.monotonic() + 5
        last_ack = None
        while time.monotonic() < deadline and (last_ack is None or last_ack.seq < 1):
            if router.poll(50):
                msg = decode_control(router.recv_multipart()[1])
                if msg is not None and msg.kind == ACK:
                    last_ack = msg
        assert last_ack is not None and last_ack.seq == 1  # with every message it took, duplicates too
        assert last_ack.taken == rx.taken == rx.counters.duplicates + 2
    finally:
        dealer.close(linger=0)
        router.close(linger=0)
        ctx.term()


def test_a_consumer_whose_queue_is_full_is_still_there(tmp_path) -> None:
    """A WELCOME that finds the consumer's queue full (ZeroMQ's high-water mark: a consumer without
    credit behind resends, as the viewer of the incident was) is not sent, and the consumer stays
    connected: it was taken for gone, and the drain stopped waiting for it."""
    ctx = zmq.Context()
    port, raw = Port(ctx, tmp_path, hwm=1), None
    try:
        port.produce(range(WINDOW), size=64 * 1024)
        raw = Raw(ctx, port.endpoint, "full", credit=False, small=True)
        raw.hello(-1)
        port.pump()  # its queue fills: the rest of the window waits
        assert port.consumer("full")["next_frame_id"] < WINDOW
        raw.hello(-1, resend=False)
        port.pump()
        assert port.consumer("full")["connected"] and port.consumer("full")["hellos"] == 2
        got = raw.drain(port, WINDOW)
        got += raw.drain(port, WINDOW - 1 - got[-1]) if got[-1] < WINDOW - 1 else []
        assert set(got) == set(range(WINDOW))  # all of it, once it reads (its first HELLO again: from 0 again)
    finally:
        if raw is not None:
            raw.close()
        port.close()
        ctx.term()
