"""The NATS bus against a real nats-server: heartbeats, control, and surviving a server restart."""

import asyncio
import json
import threading
import time

import nats
from helpers import wait_until

from mocapline.core.bus import Bus, gaps_subject, performer_subject, request


def collect(url: str, subject: str, seconds: float) -> list[dict]:
    async def run() -> list[dict]:
        nc = await nats.connect(url)
        got: list[dict] = []

        async def cb(msg) -> None:
            got.append(json.loads(msg.data))

        await nc.subscribe(subject, cb=cb)
        await asyncio.sleep(seconds)
        await nc.close()
        return got

    return asyncio.run(run())


def test_heartbeats_and_control(nats_server) -> None:
    counter = {"n": 0}
    bus = Bus(nats_server.url, "unit", lambda: {"frames": counter["n"]}, interval_s=0.1).start()
    try:
        assert bus.connected.wait(5)
        counter["n"] = 7
        beats = collect(nats_server.url, "mocapline.heartbeat.unit", 0.5)
        assert beats and beats[-1]["frames"] == 7 and beats[-1]["service"] == "unit"

        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                for req in bus.poll_requests():
                    req.answer({"cmd_seen": req.cmd, "frames": counter["n"]})
                time.sleep(0.01)

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        reply = asyncio.run(request(nats_server.url, "unit", "drain", timeout=5))
        assert reply == {"service": "unit", "cmd_seen": "drain", "frames": 7}
        bad = asyncio.run(request(nats_server.url, "unit", "explode", timeout=5))
        assert "unknown command" in bad["error"]
        stop.set()
    finally:
        bus.stop()


def test_per_performer_parts_go_on_subjects_that_carry_the_performer(nats_server) -> None:
    """A heartbeat's ``performers`` entries are also published one per performer, on a bounded set
    of subjects (indices beyond the metrics' label bound share ``other``)."""
    performers = {"0": {"frames": 5}, "2": {"frames": 7}, "40": {"frames": 1}}
    bus = Bus(nats_server.url, "retarget.w1", lambda: {"frames": 13, "performers": performers},
              interval_s=0.1).start()
    try:
        assert bus.connected.wait(5)
        two = collect(nats_server.url, "mocapline.performer.p2.>", 0.5)
        assert two and all(b == {"service": "retarget.w1", "ts": b["ts"], "performer": "2", "frames": 7} for b in two)
        other = collect(nats_server.url, "mocapline.performer.other.retarget.w1", 0.5)
        assert other and other[-1]["performer"] == "40"
    finally:
        bus.stop()
    assert performer_subject(3, "capture") == "mocapline.performer.p3.capture"
    assert gaps_subject(3) == "mocapline.gaps.p3" and gaps_subject(99) == "mocapline.gaps.other"


def test_heartbeats_resume_after_nats_restart(nats_server) -> None:
    bus = Bus(nats_server.url, "unit", lambda: {"ok": True}, interval_s=0.1).start()
    try:
        assert bus.connected.wait(5)
        nats_server.stop()
        wait_until(lambda: not bus.connected.is_set(), 5, what="the bus to notice NATS is gone")
        nats_server.start()
        assert bus.connected.wait(10)
        assert collect(nats_server.url, "mocapline.heartbeat.unit", 0.5)
    finally:
        bus.stop()


def test_bus_without_server_keeps_a_bounded_backlog() -> None:
    bus = Bus("nats://127.0.0.1:1", "unit", lambda: {}).start()
    for i in range(5000):
        bus.publish(gaps_subject(0), {"x": i})
    assert not bus.connected.is_set()
    assert len(bus._outbox) == 1000
    assert json.loads(bus._outbox[-1][1]) == {"x": 4999}  # the newest are kept
    bus.stop()
