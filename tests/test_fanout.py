"""The robot port's fan-out on real loopback sockets, in one process: every named consumer gets
every frame once and in order at its own pace, a raw PULL gets nothing, resends go only to the
consumer that asked, a restarted consumer resumes from its stored position, and the ledger's
delivered + unconfirmed + pending always equals what was produced."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zmq

from mocapline.client import ClientSettings, MocapClient
from mocapline.core import pb
from mocapline.core.counters import FanoutCounts, RobotConsumerCounts, from_parts
from mocapline.core.header import MessageType
from mocapline.core.reliable import NO_EPOCH
from mocapline.core.stagelog import Output, StageRecord
from mocapline.tools.pipeline.procs import free_tcp_port
from mocapline.tools.port_player import PortPlayer


def mocap(i: int, avatar: int = 0) -> bytes:
    return pb.MocapFrame(index=i, body_pos_w=[0.0] * 3, body_lin_vel_w=[0.0] * 3, body_quat_w=[1.0, 0, 0, 0],
                         body_ang_vel_w=[0.0] * 3, joint_pos=[0.0] * 29, joint_vel=[0.0] * 29,
                         left_hand=[0.0] * 7, right_hand=[0.0] * 7, posture_index=1000 + i,
                         avatar_index=avatar).SerializeToString()


class Port(PortPlayer):
    """The streamer's fan-out sender pumped from a thread (``PortPlayer``), fed numbered frames."""

    def __init__(self, state: Path, endpoint: str, push: bool = False, max_backlog: int = 10_000,
                 curve: dict[str, str] | None = None, segment_bytes: int = 64 << 20) -> None:
        super().__init__(state, endpoint, window=64, push=push, max_backlog=max_backlog, curve=curve,
                         segment_bytes=segment_bytes)

    def produce(self, values: range, end: bool = False, performers: int = 1) -> None:
        with self.lock:
            for v in values:
                outputs = [Output(MessageType.MOTION_FRAME, mocap(v, k), v) for k in range(performers)]
                self.sender.commit(StageRecord(NO_EPOCH, v, b"", outputs))
        if end:
            self.end()


def collect(client: MocapClient, n: int, timeout_s: float = 20.0) -> list[int]:
    """Posture indices of the next ``n`` frames (bounded in time)."""
    out: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        f = client.recv(100)
        if f is not None and not f.is_end:
            out.append(f.mocap.posture_index)
    return out


@pytest.fixture
def endpoint() -> str:
    return f"tcp://127.0.0.1:{free_tcp_port()}"


def test_two_consumers_each_get_every_frame_and_a_raw_pull_gets_nothing(tmp_path, endpoint) -> None:
    port = Port(tmp_path / "port", endpoint)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(endpoint)
    a = MocapClient(ClientSettings(endpoint, name="a"))
    b = MocapClient(ClientSettings(endpoint, name="b"))
    try:
        port.produce(range(500))
        got_a, got_b = collect(a, 500), collect(b, 500)
        assert got_a == got_b == [1000 + i for i in range(500)]
        assert pull.poll(200) == 0  # PULL cannot talk to a ROUTER: no frame, nothing taken
        snap = port.sender.snapshot()
        assert snap["sent"] <= 1.1 * 500 * 2
        # the counter contract reads what the fan-out and a consumer report (core/counters/links.py)
        assert from_parts(FanoutCounts, snap).consumers["a"].frames_sent == 500
        assert from_parts(RobotConsumerCounts, a.snapshot()).delivered == 500
        a.commit()
        b.commit()
        deadline = time.monotonic() + 5
        while port.counts()["delivered"] < 500 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert port.counts() == {"delivered": 500, "unconfirmed": 0, "pending": 0}
    finally:
        a.close()
        b.close()
        pull.close(0)
        ctx.term()
        port.close()


def test_a_consumer_of_one_performer_gets_that_performers_frames_and_moves_past_the_others(tmp_path, endpoint) -> None:
    port = Port(tmp_path / "port", endpoint)
    one = MocapClient(ClientSettings(endpoint, name="one", performers=frozenset({1})))
    try:
        port.produce(range(100), performers=3)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 100 and time.monotonic() < deadline:
            f = one.recv(100)
            if f is not None and not f.is_end:
                got.append((f.mocap.avatar_index, f.mocap.posture_index))
        assert got == [(1, 1000 + i) for i in range(100)]
        assert one.recv(500) is None  # the last frame (performer 2's) is taken and skipped
        assert one.skipped == 200 and one.delivered == 100
        one.commit()
        deadline = time.monotonic() + 10
        while port.counts()["delivered"] < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert port.counts()["delivered"] == 300  # the other performers' frames were acknowledged too
    finally:
        one.close()
        port.close()


def test_a_restarted_consumer_resumes_from_its_stored_position(tmp_path, endpoint) -> None:
    port = Port(tmp_path / "port", endpoint)
    state = tmp_path / "robot.pos"
    try:
        port.produce(range(300))
        with MocapClient(ClientSettings(endpoint, name="robot", state=state)) as c:
            first = collect(c, 120)
        port.produce(range(300, 400), end=True)
        other = MocapClient(ClientSettings(endpoint, name="other"))  # joins later: starts where nobody took
        with MocapClient(ClientSettings(endpoint, name="robot", state=state)) as c:
            rest = collect(c, 280)
        assert first + rest == [1000 + i for i in range(400)]
        assert port.sender.snapshot()["consumers"]["robot"]["resent"] <= 64  # the window in flight at most
        assert collect(other, 1, 2.0) == [1120]  # the oldest frame nobody had taken when it joined
        other.close()
        total = port.counts()
        assert sum(total.values()) == 400
    finally:
        port.close()


def test_first_consumer_gets_frames_made_before_it_and_across_a_port_restart(tmp_path, endpoint) -> None:
    """Frames produced while nobody is connected, then the port restarts (a kill of the streamer
    before any consumer connected): the first consumer gets them all."""
    port = Port(tmp_path / "port", endpoint)
    port.produce(range(200))
    assert port.counts() == {"delivered": 0, "unconfirmed": 0, "pending": 200}
    port.close()
    port = Port(tmp_path / "port", endpoint)
    try:
        port.produce(range(200, 250))
        with MocapClient(ClientSettings(endpoint, name="late")) as c:
            assert collect(c, 250) == [1000 + i for i in range(250)]
    finally:
        port.close()


def test_push_output_counts_what_it_hands_out_as_unconfirmed(tmp_path, endpoint) -> None:
    port = Port(tmp_path / "port", endpoint, push=True)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    try:
        port.produce(range(100))
        assert port.counts() == {"delivered": 0, "unconfirmed": 0, "pending": 100}
        pull.connect(endpoint)
        got = 0
        deadline = time.monotonic() + 10
        while got < 100 and time.monotonic() < deadline:
            if pull.poll(100):
                pull.recv_multipart()
                got += 1
        assert got == 100
        assert port.counts() == {"delivered": 0, "unconfirmed": 100, "pending": 0}
    finally:
        pull.close(0)
        ctx.term()
        port.close()


def test_curve_on_the_acknowledged_port(tmp_path, endpoint) -> None:
    """CURVE on the fan-out: an admitted client gets every frame through the handshake; a client
    with a key the port does not admit gets nothing (its HELLO never arrives)."""
    from mocapline.core.keys import generate

    generate(tmp_path / "keys", ["robot1"])
    generate(tmp_path / "theirs", ["intruder"])
    k = tmp_path / "keys"
    port = Port(tmp_path / "port", endpoint,
                curve={"curve_server_key": str(k / "server.key_secret"), "curve_clients": str(k / "clients")})
    good = MocapClient(ClientSettings(endpoint, name="robot1", curve_client_key=str(k / "robot1.key_secret"),
                                      curve_server_public=str(k / "server.key")))
    bad = MocapClient(ClientSettings(endpoint, name="intruder",
                                     curve_client_key=str(tmp_path / "theirs" / "intruder.key_secret"),
                                     curve_server_public=str(k / "server.key")))
    try:
        port.produce(range(100))
        assert collect(good, 100) == [1000 + i for i in range(100)]
        assert collect(bad, 1, 1.0) == [] and not bad.welcomed
        assert set(port.sender.snapshot()["consumers"]) == {"robot1"}
    finally:
        good.close()
        bad.close()
        port.close()


def test_a_consumer_far_behind_is_evicted_and_told_where_frames_resume(tmp_path, endpoint, monkeypatch) -> None:
    """Backlog bound: a consumer that stops acknowledging beyond ``max_backlog`` no longer holds the
    log; the others go on; when it returns, WELCOME skips it to the oldest frame kept and its
    receiver counts the rest as lost (never silently)."""
    import mocapline.core.fanout as fanout

    monkeypatch.setattr(fanout, "PERSIST_INTERVAL_S", 0.0)
    port = Port(tmp_path / "port", endpoint, max_backlog=50, segment_bytes=4096)
    state = tmp_path / "slow.pos"
    try:
        port.produce(range(10))
        with MocapClient(ClientSettings(endpoint, name="slow", state=state)) as slow:
            assert collect(slow, 10) == [1000 + i for i in range(10)]
        fast = MocapClient(ClientSettings(endpoint, name="fast"))
        port.produce(range(10, 400))
        assert collect(fast, 390)[-1] == 1399
        fast.commit()
        deadline = time.monotonic() + 10
        while not port.sender.snapshot()["consumers"]["slow"]["evicted"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert port.sender.snapshot()["consumers"]["slow"]["evicted"]
        with port.lock:  # the log was trimmed past the evicted consumer (segments permitting)
            oldest = port.log.first_seq()
        with MocapClient(ClientSettings(endpoint, name="slow", state=state)) as slow:
            got = collect(slow, 400 - max(oldest, 10), 10.0)
            assert oldest > 10 and got == [1000 + i for i in range(oldest, 400)]
            assert slow.rx.counters.lost == oldest - 10
        fast.close()
    finally:
        port.close()


def test_a_port_with_new_state_is_a_new_epoch_for_the_client(tmp_path, endpoint) -> None:
    """The streamer's state wiped (a new epoch, numbering from 0 again): a client holding a position
    of the old epoch takes the new numbering from WELCOME and misses nothing of it."""
    state = tmp_path / "robot.pos"
    port = Port(tmp_path / "old", endpoint)
    try:
        port.produce(range(50))
        with MocapClient(ClientSettings(endpoint, name="robot", state=state)) as c:
            assert collect(c, 50) == [1000 + i for i in range(50)]
            old_epoch = c.rx.epoch
    finally:
        port.close()
    port = Port(tmp_path / "new", endpoint)
    try:
        port.produce(range(20))
        with MocapClient(ClientSettings(endpoint, name="robot", state=state)) as c:
            assert collect(c, 20) == [1000 + i for i in range(20)]
            assert c.rx.epoch != old_epoch and c.rx.counters.epoch_changes == 1 and c.rx.last == 19
    finally:
        port.close()


def test_a_forgotten_consumer_no_longer_holds_the_log_and_a_rewind_keeps_what_it_asks_for(
        tmp_path, endpoint, monkeypatch) -> None:
    """FORGET(name) from another consumer (a retarget worker whose performers were taken over from
    a dead one) drops that consumer's entry: the log is trimmed past it. A consumer that rewinds
    (HELLO below its last ACK) holds the log from there again, and gets those frames again."""
    import mocapline.core.fanout as fanout

    monkeypatch.setattr(fanout, "PERSIST_INTERVAL_S", 0.0)
    port = Port(tmp_path / "port", endpoint, segment_bytes=4096)
    try:
        port.produce(range(10))
        with MocapClient(ClientSettings(endpoint, name="dead")) as dead:
            assert collect(dead, 10) == [1000 + i for i in range(10)]
        live = MocapClient(ClientSettings(endpoint, name="live"))
        try:
            port.produce(range(10, 400))
            assert collect(live, 390)[-1] == 1399
            live.commit()
            time.sleep(0.5)
            with port.lock:
                assert port.log.first_seq() <= 10  # held for "dead"
            live.rx.rewind(299)  # as a worker taking over does: rewind, then forget the dead one
            assert live.rx.forget("live") and live.rx.forget("dead")  # (itself: refused)
            deadline = time.monotonic() + 10
            while "dead" in port.sender.snapshot()["consumers"] and time.monotonic() < deadline:
                time.sleep(0.05)
            assert set(port.sender.snapshot()["consumers"]) == {"live"}
            assert collect(live, 10) == [1300 + i for i in range(10)]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with port.lock:
                    oldest = port.log.first_seq()
                if oldest > 10:
                    break
                time.sleep(0.05)
            assert 10 < oldest <= 300, oldest  # trimmed past "dead", not past the rewind
        finally:  # a failure above must not leave its socket to a context the GC then waits on
            live.close()
    finally:
        port.close()


def test_a_repeated_first_hello_gets_the_same_welcome_and_each_welcome_echoes_its_hello(tmp_path, endpoint) -> None:
    """A new consumer whose first HELLO is repeated before the WELCOME arrives (its sender was
    down, or slow) gets the same start twice, not "where the others are" the second time; every
    WELCOME names the HELLO seq it answers, so a consumer that rewound since can tell a stale one."""
    from mocapline.core.reliable import HELLO, WELCOME, decode_control, encode_control

    port = Port(tmp_path / "port", endpoint)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    ahead = MocapClient(ClientSettings(endpoint, name="ahead"))
    try:
        port.produce(range(100))
        assert collect(ahead, 100)[-1] == 1099
        ahead.commit()
        time.sleep(0.3)  # its ACK is in
        sock.connect(endpoint)

        def welcome() -> tuple[int, int | None, int]:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                msg = decode_control(sock.recv_multipart()[-1]) if sock.poll(100) else None
                if msg is not None and msg.kind == WELCOME:
                    return msg.seq, msg.ref, msg.version
            pytest.fail("no WELCOME")

        hello = encode_control(HELLO, NO_EPOCH, -1, "new")
        sock.send(hello)
        assert welcome() == (100, -1, 2)  # joins where "ahead" is
        port.produce(range(100, 200))  # "ahead" moves on meanwhile
        assert collect(ahead, 100)[-1] == 1199
        ahead.commit()
        time.sleep(0.3)
        sock.send(hello)  # its first HELLO again (as if the WELCOME had not arrived)
        assert welcome() == (100, -1, 2)  # the same start, not where "ahead" is now
        sock.send(encode_control(HELLO, port.sender.epoch, 49, "new"))  # a rewind: from 50 again
        assert welcome() == (50, 49, 2)
        sock.send(encode_control(HELLO, port.sender.epoch, 48, "new", version=1))  # an older peer: v1 answer
        assert welcome() == (49, 48, 1)
    finally:
        sock.close(linger=0)
        ahead.close()
        ctx.term()
        port.close()
