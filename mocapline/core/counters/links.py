"""The counts of a link's two ends, of a robot-port consumer, and of a stage's durable part.

Their keys are the ones core/reliable.py, core/fanout.py and core/consumer.py report
(``snapshot()`` / ``counts()``): the senders build their dicts, :func:`~.codec.from_parts` checks
them into these records, so a key renamed there fails the unit tests that take a snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mocapline.core.counters.codec import Metric, from_parts, wire


@dataclass(frozen=True)
class LinkSenderCounts:
    """A point-to-point acknowledged sender (ReliableSender.snapshot)."""

    sent: int = wire()
    resent: int = wire(metric=Metric("mocapline_link_resent_total"))
    hellos: int = wire()
    acked: int = wire()
    unacked: int = wire(metric=Metric("mocapline_unacked"))
    in_flight: int = wire(metric=Metric("mocapline_link_in_flight"))
    unrecoverable: int = wire()


@dataclass(frozen=True)
class ConsumerCounts:
    """One named consumer of a fan-out (FanoutSender.snapshot()["consumers"][name])."""

    connected: bool = wire()
    acknowledges: bool = wire()
    frames_acked: int = wire()  # MocapFrames acknowledged (END_OF_STREAM excluded)
    frames_sent: int = wire()  # MocapFrames handed to it
    sent: int = wire()  # messages, END_OF_STREAM included
    resent: int = wire()
    hellos: int = wire()
    backlog: int = wire()
    evicted: bool = wire()
    evictions: int = wire()
    next_frame_id: int = wire()
    # flow control (issue 36): messages on their way to it now (copies included, by its TAKEN
    # reports; else sent and not acknowledged), the most at once, and RESEND HELLOs answered without
    # a resend because what it asked for was still on its way
    in_flight: int = wire(0)
    in_flight_max: int = wire(0)
    resends_withheld: int = wire(0)
    frames_to_apply: int = wire(0)  # MocapFrames after its acknowledged position (issue 36: what a drain waits for)


@dataclass(frozen=True)
class FanoutCounts:
    """An acknowledged fan-out (FanoutSender.snapshot)."""

    consumers: dict[str, ConsumerCounts] = wire()
    sent: int = wire()
    resent: int = wire(metric=Metric("mocapline_link_resent_total"))
    unrecoverable: int = wire()
    unacked: int = wire(metric=Metric("mocapline_unacked"))
    in_flight: int = wire(metric=Metric("mocapline_link_in_flight"))


@dataclass(frozen=True)
class FanoutTotals:
    """Where a fan-out's frames since a take's start are (FanoutSender.counts): delivered +
    unconfirmed + pending == frames produced."""

    delivered: int = wire()
    unconfirmed: int = wire()
    pending: int = wire()


@dataclass(frozen=True, kw_only=True)
class LinkReceiverCounts:
    """The receiving end of an acknowledged link (ReliableReceiver.snapshot)."""

    accepted: int = wire()
    duplicates: int = wire(metric=Metric("mocapline_link_duplicates_total"))
    out_of_order: int = wire()
    welcomed: bool = wire()
    before_welcome: int = wire()
    lost: int = wire()
    hellos: int = wire()
    epoch_changes: int = wire()
    restarts_heard: int = wire(0)  # RESTARTED announcements from a restarted sender (issue 26)
    taken: int = wire(0)  # data messages taken off the socket, duplicates included: the credit reported (issue 36)
    last: int = wire()


@dataclass(frozen=True, kw_only=True)
class RobotConsumerCounts:
    """A robot-port consumer's own counts (mocapline.client MocapClient.snapshot)."""

    accepted: int = wire()
    duplicates: int = wire()
    out_of_order: int = wire()
    welcomed: bool = wire()
    before_welcome: int = wire()
    lost: int = wire()
    hellos: int = wire()
    epoch_changes: int = wire()
    restarts_heard: int = wire(0)  # RESTARTED announcements from a restarted sender (issue 26)
    taken: int = wire(0)  # data messages taken off the socket, duplicates included: the credit reported (issue 36)
    last: int = wire()
    delivered: int = wire()
    rejected_by_reason: dict[str, int] = wire()
    epoch: str = wire()


@dataclass(frozen=True)
class DurableCounts:
    """A stage's durable part (DurableStage.snapshot; capture adds its journal's)."""

    log_bytes: int = wire(metric=Metric("mocapline_durable_log_bytes"))
    input_link: LinkReceiverCounts | None = wire(None, omit_none=True)
    output_link: LinkSenderCounts | FanoutCounts | None = wire(None, omit_none=True)
    journal_next: int | None = wire(None, omit_none=True)
    take_start: int | None = wire(None, omit_none=True)
    resumed: int | None = wire(None, omit_none=True)
    checkpoints: int | None = wire(None, omit_none=True)


def durable_counts(snapshot: dict[str, Any]) -> DurableCounts:
    """DurableStage.snapshot() as its record."""
    return from_parts(DurableCounts, snapshot)
