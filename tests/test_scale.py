"""Retarget scale-out (issue 16 part 3): the deal of performers over workers, the assignment bucket
in a real JetStream, and with real processes on loopback three workers sharing six performers at
120 Hz, one killed with SIGKILL in the middle of the take and not restarted: every performer's
frames still reach a consumer of the robot port exactly once and in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import wait_until

from mocapline.client import ClientSettings, MocapClient
from mocapline.core.assign import Claim, Registry
from mocapline.services.retarget.worker import deal
from mocapline.tools.emitter.emitter import TakePlan, emit_take
from mocapline.tools.pipeline.stack import Stack, local_config

RATE = 120.0
FRAMES = 840  # 7 s at 120 Hz
FIRST = 5000
PERFORMERS = 6


def test_the_deal_is_balanced_and_the_same_for_every_worker() -> None:
    load = {"w1": 0, "w2": 0, "w3": 0}
    dealt = deal(list(range(6)), [], load)
    assert sorted(dealt.values()) == ["w1", "w1", "w2", "w2", "w3", "w3"]
    # whatever a worker's view of the claims so far, a new performer goes to the same worker
    assert deal([4], [], {"w3": 1, "w2": 0, "w1": 2}) == {4: dealt[4]}
    # an orphan goes to the least loaded
    assert deal([], [4], {"w1": 2, "w2": 1, "w3": 2}) == {4: "w2"}
    assert deal([1], [], {}) == {}


def test_a_claim_is_won_once_and_a_stale_owner_cannot_overwrite(jetstream_nats) -> None:
    a, b = Registry(jetstream_nats.url), Registry(jetstream_nats.url)
    try:
        rev = a.write(0, Claim("w1", "ab", 10), None)
        assert rev is not None
        assert b.write(0, Claim("w2", "ab", 10), None) is None  # already claimed
        taken = b.write(0, Claim("w2", "ab", 10), rev)  # takeover: compare-and-set on the revision
        assert taken is not None
        assert a.write(0, Claim("w1", "ab", 20), rev) is None  # w1 is stale: refused
        claims = wait_until(lambda: (a.claims() or {}).get(0), 5, what="the claim in the view")
        assert claims[0].owner == "w2" and claims[0].seq == 10
        assert a.announce("w1", {"endpoint": "tcp://127.0.0.1:1"})
        wait_until(lambda: set(b.workers() or {}) == {"w1"}, 5, what="w1 announced")
    finally:
        a.close()
        b.close()


def test_the_scale_override_makes_retarget_scalable() -> None:
    """deploy/compose.scale.yml over docker-compose.yml: valid Compose, nothing fixed on retarget
    (name, port, metrics port), and every service's flags parse into scale-out mode. (No Docker
    engine run here: `docker compose ... config` accepts it too.)"""
    import json as _json

    from test_compose import COMPOSE, ROOT, command_of, load_compose, parse_with_env, service_env

    jsonschema = pytest.importorskip("jsonschema")
    model, unset = load_compose(COMPOSE, None, [ROOT / "deploy/compose.scale.yml"])
    assert not unset
    validator = jsonschema.Draft7Validator(_json.loads((ROOT / "tests/data/compose-spec.json").read_text()))
    assert not list(validator.iter_errors(model))
    svcs = model["services"]
    retarget = svcs["retarget"]
    assert "container_name" not in retarget and "ports" not in retarget
    parsed = {name: parse_with_env(command_of(svcs[name])[1], service_env(svcs[name]), command_of(svcs[name])[2:])
              for name in ("capture", "retarget", "streamer")}
    assert parsed["retarget"].worker == "auto" and parsed["retarget"].output.endswith(":*")
    assert parsed["retarget"].metrics_port == 0 and parsed["retarget"].state_dir is not None
    assert parsed["capture"].output_fanout and parsed["streamer"].fan_in
    assert "-js" in svcs["nats"]["command"]


def collect(port: int, emitter: threading.Thread, on_progress: Callable[[int], None],
            timeout_s: float = 120.0) -> dict[int, list[tuple[int, bool]]]:
    """Every frame of the robot port per performer, (posture_index, bridged), until the take has
    been sent and nothing arrived for 8 s (a takeover waits out the dead worker's 3 s TTL)."""
    got: dict[int, list[tuple[int, bool]]] = {}
    with MocapClient(ClientSettings(f"tcp://127.0.0.1:{port}", name="probe")) as client:
        deadline = last = time.monotonic()
        deadline += timeout_s
        while time.monotonic() < deadline:
            on_progress(sum(map(len, got.values())))
            frame = client.recv(200)
            if frame is None:
                if not emitter.is_alive() and time.monotonic() - last > 8:
                    break
                continue
            last = time.monotonic()
            if frame.mocap is not None:
                got.setdefault(frame.mocap.avatar_index, []).append((frame.mocap.posture_index, frame.mocap.bridged))
    return got


@pytest.mark.integration
def test_a_worker_killed_mid_take_loses_nothing_and_keeps_each_performer_in_order(tmp_path: Path) -> None:
    config = local_config(viewer=False, input_fps=RATE, output_fps=RATE, log_dir=tmp_path / "logs",
                          state_dir=tmp_path / "state", fsync="never", retarget_workers=3)
    stack = Stack(config)
    stack.start()
    try:
        stack.wait_ready(60)
        plan = TakePlan(frames=FRAMES, first_index=FIRST, performers=PERFORMERS)
        emitter = threading.Thread(target=emit_take, args=(plan, [("127.0.0.1", config.main_port)]),
                                   kwargs={"rate_hz": RATE}, daemon=True)
        emitter.start()
        killed: list[int] = []

        def kill_at_two_seconds(received: int) -> None:
            if not killed and received >= int(2 * RATE) * PERFORMERS:
                owned = stack.ask("retarget.w2", "status", timeout=2.0)["worker"]["owned"]
                assert owned, "w2 owns no performer: nothing to take over"
                stack.services["retarget.w2"].kill()
                killed.append(received)

        got = collect(config.output_port, emitter, kill_at_two_seconds)
        assert killed, "the take ended before the kill"
        assert sorted(got) == list(range(PERFORMERS))
        for k, frames in got.items():
            assert [p for p, _ in frames] == list(range(FIRST, FIRST + FRAMES)), f"performer {k}"
            assert not any(b for _, b in frames), f"performer {k}: a frame was bridged (lost upstream)"
        takeovers = sum(stack.ask(f"retarget.{w}", "status")["worker"]["takeovers"] for w in ("w1", "w3"))
        assert takeovers >= 1
        fan_in = stack.ask("streamer", "status")["fan_in"]
        assert fan_in["live"] == ["w1", "w3"]
    finally:
        stack.stop()
