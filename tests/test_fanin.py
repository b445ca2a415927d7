"""The streamer's fan-in: which workers count as live (their END_OF_STREAM is awaited)."""

from __future__ import annotations

from typing import Any

import zmq

from mocapline.services.streamer.fanin import LIVE_GRACE_S, FanIn


class Listing:
    """A registry whose worker listing the test sets (None: NATS did not answer)."""

    def __init__(self) -> None:
        self.now: dict[str, dict[str, Any]] | None = {}

    def workers(self) -> dict[str, dict[str, Any]] | None:
        return self.now

    def close(self) -> None:
        pass


def test_a_worker_missing_from_one_listing_stays_live_for_the_grace_then_leaves() -> None:
    registry, t = Listing(), [100.0]
    fanin = FanIn(zmq.Context.instance(), registry, 29, clock=lambda: t[0])  # type: ignore[arg-type]
    registry.now = {"a": {"endpoint": ""}, "b": {"endpoint": ""}}  # no endpoint yet: no consumer is made
    fanin.refresh()
    assert fanin.live == {"a", "b"}
    t[0] += 1.0
    registry.now = {"a": {"endpoint": ""}}  # b's heartbeat lapsed (a starved process, a slow NATS)
    fanin.refresh()
    assert fanin.live == {"a", "b"}
    registry.now = None  # NATS did not answer: the view stays as it was
    t[0] += LIVE_GRACE_S
    fanin.refresh()
    assert fanin.live == {"a", "b"}
    registry.now = {"a": {"endpoint": ""}, "b": {"endpoint": ""}}  # b is back: its grace starts again
    fanin.refresh()
    t[0] += LIVE_GRACE_S
    registry.now = {"a": {"endpoint": ""}}
    fanin.refresh()
    assert fanin.live == {"a", "b"}
    t[0] += 0.5
    fanin.refresh()
    assert fanin.live == {"a"}  # gone for longer than the grace: its marker is no longer awaited
    assert not fanin.inputs
    fanin.close()
