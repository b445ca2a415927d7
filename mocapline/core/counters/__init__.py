"""The counter contract: every stage's counts as one typed record (see codec.py for how they
are published and read back, stages.py and links.py for the records)."""

from __future__ import annotations

from typing import Any

from mocapline.core.counters.codec import (
    SCHEMA_KEY,
    SCHEMA_VERSION,
    CounterSchemaError,
    Metric,
    as_published,
    decode,
    from_parts,
    to_json,
    wire,
    zero,
)
from mocapline.core.counters.ledger import HEAD_FIELDS, PipelineLedger
from mocapline.core.counters.links import (
    ConsumerCounts,
    DurableCounts,
    FanoutCounts,
    FanoutTotals,
    LinkReceiverCounts,
    LinkSenderCounts,
    RobotConsumerCounts,
    durable_counts,
)
from mocapline.core.counters.pipeline import Stages, read_stages, sum_workers
from mocapline.core.counters.stages import (
    STAGE_TYPES,
    AuditorBeat,
    CaptureCounts,
    CapturePerformerCounts,
    FanInInfo,
    FrameIdCounts,
    HandCounts,
    PathCounts,
    PolicyCounts,
    PropCounts,
    RetargetCounts,
    RetargetPerformerCounts,
    RetargetTotals,
    RobotCounts,
    RobotHandCounts,
    SegmentCounts,
    SideLedger,
    SidePathCounts,
    StageCounts,
    StreamerCounts,
    StreamerPerformerCounts,
    TcpSourceCounts,
    TrackingError,
    UnitCheck,
    ViewerCounts,
    ViewerPerformerCounts,
    WorkerInfo,
    WorkerShare,
)


def stage_type(service: str) -> type[StageCounts]:
    """The record of a service's counts by its bus name (``retarget.w1``: a retarget worker)."""
    stage = service.partition(".")[0]
    if stage not in STAGE_TYPES:
        raise CounterSchemaError(f"{service!r} is not a stage (one of {sorted(STAGE_TYPES)})")
    return STAGE_TYPES[stage]


def decode_stage(service: str, data: Any) -> StageCounts:
    """A stage's published counts (heartbeat, control answer, final line) read back."""
    return decode(stage_type(service), data)


__all__ = [
    "SCHEMA_KEY", "SCHEMA_VERSION", "STAGE_TYPES", "AuditorBeat", "CaptureCounts", "CapturePerformerCounts",
    "ConsumerCounts", "CounterSchemaError", "DurableCounts", "FanInInfo", "FanoutCounts", "FanoutTotals",
    "FrameIdCounts", "HandCounts", "LinkReceiverCounts", "LinkSenderCounts", "Metric", "PathCounts", "RetargetCounts",
    "RetargetPerformerCounts", "RetargetTotals", "RobotConsumerCounts", "SegmentCounts", "StageCounts",
    "StreamerCounts", "StreamerPerformerCounts", "TcpSourceCounts", "UnitCheck", "ViewerCounts",
    "ViewerPerformerCounts", "WorkerInfo", "WorkerShare", "decode", "decode_stage", "durable_counts", "from_parts",
    "stage_type", "to_json", "wire", "zero", "SideLedger", "SidePathCounts", "Stages", "read_stages", "sum_workers",
    "as_published", "PolicyCounts", "PropCounts", "RobotCounts", "RobotHandCounts", "TrackingError", "HEAD_FIELDS",
    "PipelineLedger",
]
