"""The robot port's contract where docs/protocol.md settles it (issue 26): a keep-alive HELLO does
not resend what is in flight, the per-consumer ledger is exact across a kill -9 of the port, and a
port that comes back tells the consumers it remembers."""

from __future__ import annotations

import time

import pytest
import zmq
from helpers import wait_until
from test_fanout import Port, collect

from mocapline.client import ClientSettings, MocapClient
from mocapline.core.control import ACK, HELLO, NO_EPOCH, RESEND, WELCOME, decode_control, encode_control
from mocapline.tools.pipeline.procs import free_tcp_port


@pytest.fixture
def endpoint() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port()}"


def _kill(port: Port) -> None:
    """The port gone as with kill -9: no last save of its consumer table."""
    port.halt.set()
    port.thread.join(5)
    port.sender.sock.close(linger=0)
    port.log.close()
    port.ctx.term()


class RawConsumer:
    """A DEALER speaking the control messages by hand (to send exactly the HELLO a test needs)."""

    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.connect(endpoint)
        self.epoch = NO_EPOCH

    def hello(self, seq: int, flags: int) -> None:
        self.sock.send(encode_control(HELLO, self.epoch, seq, "raw", flags=flags))

    def frame_ids(self, n: int, timeout_s: float = 10.0) -> list[int]:
        """frame_ids of the next ``n`` data messages (WELCOMEs noted, other control skipped)."""
        out: list[int] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            if not self.sock.poll(100):
                continue
            parts = self.sock.recv_multipart()
            if len(parts) == 1:
                msg = decode_control(parts[0])
                if msg is not None and msg.kind == WELCOME:
                    self.epoch = msg.epoch
                continue
            out.append(int.from_bytes(parts[1][8:16], "little"))
        return out

    def take_first(self, port: Port, n: int) -> None:
        """Join (HELLO -1), receive frames 0..n-1 and acknowledge them, as the port has recorded."""
        self.hello(-1, RESEND)
        assert self.frame_ids(n) == list(range(n))
        self.sock.send(encode_control(ACK, self.epoch, n - 1))
        wait_until(lambda: port.sender.consumers["raw"].acked == n - 1, 5)

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


@pytest.mark.parametrize("flags", [0, RESEND])
def test_a_keep_alive_hello_at_the_last_ack_resends_nothing_in_flight(tmp_path, endpoint, flags) -> None:
    port = Port(tmp_path / "port", endpoint)  # window 64
    raw = RawConsumer(endpoint)
    try:
        port.produce(range(300))
        raw.take_first(port, 10)
        raw.hello(9, flags)  # what an idle timer says after a pause, frames 10.. queued behind it
        got = raw.frame_ids(300 - 10, timeout_s=3)
        c = port.sender.snapshot()["consumers"]["raw"]
        if flags:  # RESEND: what was in flight comes again
            assert c["resent"] > 0 and len(got) > len(set(got))
        else:
            assert c["resent"] == 0
            assert got[:54] == list(range(10, 64))  # the window in flight arrives once, in order
    finally:
        raw.close()
        port.close()


def test_per_consumer_counts_are_exact_across_a_kill_of_the_port(tmp_path, endpoint) -> None:
    port = Port(tmp_path / "port", endpoint)
    client = MocapClient(ClientSettings(endpoint, name="robot"))
    try:
        port.produce(range(400), end=True)
        assert len(collect(client, 100)) == 100
        time.sleep(1.2)  # the port writes its consumer table down (once a second)
        assert len(collect(client, 150)) == 150
        client.commit()
        _kill(port)  # its table on disk is up to a second old: behind what the client holds
        port = Port(tmp_path / "port", endpoint)
        got = collect(client, 150)
        end = client.recv(2000)
        assert len(got) == 150 and end is not None and end.is_end
        client.commit()
        wait_until(lambda: port.sender.consumers["robot"].acked == 400, 5)
        c = port.sender.snapshot()["consumers"]["robot"]
        assert (c["frames_sent"], c["frames_acked"], c["sent"]) == (400, 400, 401)  # sent: frames + END
        assert client.rx.counters.duplicates == c["resent"]  # a resend is what the client dropped
    finally:
        client.close()
        port.close()


def test_a_port_that_comes_back_tells_its_consumers(tmp_path, endpoint, monkeypatch) -> None:
    from mocapline.core.reliable import ReliableReceiver

    monkeypatch.setattr(ReliableReceiver, "IDLE_HELLO_S", 60.0)  # no timer: only RESTARTED can wake it
    monkeypatch.setattr(ReliableReceiver, "MAX_BACKOFF_S", 60.0)
    port = Port(tmp_path / "port", endpoint)
    client = MocapClient(ClientSettings(endpoint, name="robot"))
    try:
        port.produce(range(50))
        assert len(collect(client, 50)) == 50
        client.commit()
        port.close()  # its table saved: it knows "robot"
        hellos = client.rx.counters.hellos
        port = Port(tmp_path / "port", endpoint)
        port.produce(range(50, 60))
        deadline = time.monotonic() + 5
        got: list[int] = []
        while len(got) < 10 and time.monotonic() < deadline:
            f = client.recv(50)
            if f is not None:
                got.append(f.mocap.posture_index)
        assert got == [1000 + i for i in range(50, 60)]
        assert client.rx.counters.restarts_heard == 1
        assert client.rx.counters.hellos == hellos + 1  # its HELLO answered RESTARTED, no timer needed
    finally:
        client.close()
        port.close()


@pytest.mark.parametrize("killed", [False, True])
def test_a_consumer_without_routing_id_finds_a_restarted_port_by_its_idle_hello(tmp_path, endpoint, killed) -> None:
    """docs/protocol.md: the routing id is optional; without it no RESTARTED comes, and the idle
    timer's first HELLO (a keep-alive, no RESEND) on the new connection gets the frames, since a
    new connection is never a keep-alive."""
    port = Port(tmp_path / "port", endpoint)
    raw = RawConsumer(endpoint)  # a DEALER with ZeroMQ's own random routing id
    try:
        port.produce(range(20))
        raw.take_first(port, 20)
        time.sleep(1.2)  # its table written down with the ACK
        if killed:
            _kill(port)
        else:
            port.close()
        port = Port(tmp_path / "port", endpoint)
        port.produce(range(20, 30))
        raw.hello(19, 0)
        assert raw.frame_ids(10) == list(range(20, 30))
        assert port.sender.snapshot()["consumers"]["raw"]["resent"] == 0
    finally:
        raw.close()
        port.close()


def test_the_client_asks_again_for_a_gap_at_most_once_per_100ms(endpoint) -> None:
    """docs/protocol.md: a gap HELLO at most once per 100 ms while frames beyond the gap keep
    coming (each one would make the port send the window again); the client's first HELLO was
    just sent, so the gap HELLO waits for the 100 ms to be up, then goes with no frame arriving."""
    import secrets

    from mocapline.core.control import welcome
    from mocapline.tools.portcheck.scripted import data_message

    ctx = zmq.Context()
    port = ctx.socket(zmq.ROUTER)
    port.setsockopt(zmq.LINGER, 0)
    port.bind(endpoint)
    epoch = secrets.token_bytes(16)
    client = MocapClient(ClientSettings(endpoint, name="robot"))
    try:
        route = b""
        while not route:  # its first HELLO
            client.recv(50)
            if port.poll(50):
                route, body = port.recv_multipart()
                port.send_multipart([route, welcome(epoch, 0, decode_control(body).seq, 2)])
        for f in (0, *range(2, 400)):  # frame 1 lost: 398 frames beyond the gap
            port.send_multipart([route, *data_message(epoch, f, 1000 + f)])
        started, got = time.monotonic(), []
        while client.rx.counters.out_of_order < 398 and time.monotonic() - started < 10:
            got.append(client.recv(0))
        got.append(client.recv(120))  # the gap at the burst's end: asked for once the 100 ms are up
        elapsed = time.monotonic() - started
        gap_hellos = 0
        while port.poll(100):
            msg = decode_control(port.recv_multipart()[1])
            gap_hellos += msg is not None and msg.kind == HELLO and msg.seq == 0 and bool(msg.flags & RESEND)
        assert [f.frame_id for f in got if f is not None] == [0]
        assert client.rx.counters.out_of_order == 398
        assert 1 <= gap_hellos <= 2 + elapsed / 0.1, (gap_hellos, elapsed)
    finally:
        client.close()
        port.close()
        ctx.term()


JOURNALED_CONSUMER = """
import sys, time
from mocapline.client import ClientSettings, Journal, MocapClient

endpoint, journal = sys.argv[1], sys.argv[2]

def apply(frame):
    if frame.is_end:
        return b"end"
    time.sleep(0.002)  # a robot's work on the frame
    print(frame.mocap.posture_index, frame.frame_id, flush=True)
    return str(frame.mocap.posture_index).encode()

with MocapClient(ClientSettings(endpoint, name="g1"), store=Journal(journal)) as client:
    client.run(apply, until_end=True, idle_s=20)
"""


@pytest.mark.integration
def test_a_consumer_killed_mid_take_and_restarted_stores_each_frame_once(tmp_path, endpoint) -> None:
    import signal
    import subprocess
    import sys

    from mocapline.client import Journal

    port = Port(tmp_path / "port", endpoint)
    journal = tmp_path / "journal"
    cmd = [sys.executable, "-c", JOURNALED_CONSUMER, endpoint, str(journal)]
    try:
        port.produce(range(1500), end=True)
        for kill_after in (300, 500):  # killed twice mid-take, at any point of its step
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            for _ in range(kill_after):
                assert proc.stdout.readline()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        stored = Journal(journal)
        results = [e.result for e in stored.entries()]
        stored.close()
        assert results == [str(1000 + i).encode() for i in range(1500)] + [b"end"]  # each once, in order
    finally:
        port.close()


def test_a_handler_that_raises_leaves_its_frame_to_the_next_run(tmp_path, endpoint) -> None:
    """run(handler) with a Journal: a handler that raises (a motor fault) has stored nothing for
    its frame, so neither the position nor the ACK may cover it; the next run applies it."""
    from mocapline.client import Journal

    def handler(fail_at: int | None):
        def apply(frame):
            if frame.is_end:
                return b"end"
            if frame.mocap.posture_index == fail_at:
                raise RuntimeError("motor fault")
            return str(frame.mocap.posture_index).encode()
        return apply

    port = Port(tmp_path / "port", endpoint)
    path = tmp_path / "journal"
    try:
        port.produce(range(100), end=True)
        journal = Journal(path)
        with pytest.raises(RuntimeError), MocapClient(ClientSettings(endpoint, name="g1"), store=journal) as client:
            client.run(handler(1050), until_end=True, idle_s=20)
        journal.close()
        time.sleep(1.2)  # the port writes down what it was told (an ACK past 1050 would let it trim)
        journal = Journal(path)
        with MocapClient(ClientSettings(endpoint, name="g1"), store=journal) as client:
            client.run(handler(None), until_end=True, idle_s=20)
        results = [e.result for e in journal.entries()]
        journal.close()
        assert results == [str(1000 + i).encode() for i in range(100)] + [b"end"]
    finally:
        port.close()


def test_hellos_queued_while_the_port_was_down_get_identical_welcomes(tmp_path, endpoint) -> None:
    """docs/protocol.md: HELLOs ZeroMQ queued during an outage are all answered, alike (acting on
    each is harmless); frames follow once, after them."""
    raw = RawConsumer(endpoint)  # connects before anything is bound: its HELLOs wait in its queue
    try:
        for _ in range(3):
            raw.hello(-1, RESEND)
        port = Port(tmp_path / "port", endpoint)
        try:
            welcomes = []
            deadline = time.monotonic() + 10
            while len(welcomes) < 3 and time.monotonic() < deadline:
                msg = decode_control(raw.sock.recv_multipart()[0]) if raw.sock.poll(100) else None
                if msg is not None:
                    welcomes.append((msg.kind, msg.seq, msg.ref))
            assert welcomes == [(WELCOME, 0, -1)] * 3
            port.produce(range(5))
            assert raw.frame_ids(6, timeout_s=1.0) == [0, 1, 2, 3, 4]  # once
        finally:
            port.close()
    finally:
        raw.close()
