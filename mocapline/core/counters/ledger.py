"""The pipeline ledger as one typed record: what the auditor, `status` and the web viewer build from
the stages' counts (core/verdict.pipeline_counts) and judge (docs/ledger.md).

Its fields are the ledger's published keys, in the documented order: first the head (each exported
as ``mocapline_ledger{field}`` by the auditor), then the details. A field that is a *layer* names the
stage whose count it is; the verdict compares the layers in field order. A *consumer* layer (the
viewer, the robot bridge) is judged only when that consumer is part of the run (not None).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mocapline.core.counters.codec import fields_of, from_parts, published_name, wire
from mocapline.core.counters.links import ConsumerCounts
from mocapline.core.counters.stages import PropCounts, Ranges, SegmentCounts


def _entry(default: Any = None, *, head: bool = False, layer: str = "", consumer: bool = False,
           omit_none: bool = False) -> Any:
    """A ledger field: a counter field (core/counters/codec.wire) that says whether it is in the
    head and which stage's layer it is."""
    base = wire(default, omit_none=omit_none)
    meta = {**base.metadata, "head": head, "layer": layer, "consumer": consumer}
    if base.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=base.default_factory, metadata=meta)
    return dataclasses.field(default=base.default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class PipelineLedger:
    """One take's ledger (or one performer's part of it); None where a stage gave no count."""

    source_received: int | None = _entry(head=True)
    source_unique_frames: int | None = _entry(head=True, layer="capture")
    source_missing_indices: int | None = _entry(head=True)
    source_duplicate_indices: int | None = _entry(head=True)
    source_backward_indices: int | None = _entry(head=True)
    rejected_datagrams: int | None = _entry(head=True)
    first_posture_index: int | None = _entry(head=True)
    last_posture_index: int | None = _entry(head=True)
    gmr_processed: int | None = _entry(head=True, layer="retarget")
    motion_generated: int | None = _entry(head=True, layer="streamer")
    # acknowledged by a consumer (the layer compared is what went on the wire: + unconfirmed)
    zmq_sent: int | None = _entry(head=True, layer="the robot port")
    viewer_applied: int | None = _entry(head=True, layer="viewer", consumer=True)
    input_pending: int = _entry(0, head=True)  # between capture's FIFO and the IK
    robot_pending: int = _entry(0, head=True)  # robot frames produced, not yet sent on by the streamer
    robot_applied: int | None = _entry(layer="robot bridge", consumer=True, omit_none=True)
    robot: dict[str, Any] | None = _entry(omit_none=True)  # how the bridge kept up (core/robotfigures.py)
    missing_ranges: Ranges = _entry([])
    unconfirmed: int | None = _entry()  # handed to the wire, not (or never) acknowledged
    streamer_pending: int | None = _entry()  # not handed to anyone yet
    rejected_by_reason: dict[str, int] | None = _entry()
    split_frames: int | None = _entry(omit_none=True)
    props: dict[str, PropCounts] | None = _entry(omit_none=True)
    meta_datagrams: dict[str, int] | None = _entry(omit_none=True)
    link_rejected_by_reason: dict[str, dict[str, int]] = _entry({})
    link_duplicates: dict[str, int] = _entry({})  # durable: copies each stage dropped on arrival
    cross_path_copies: int | None = _entry()
    late_frames: int | None = _entry()
    late_ranges: Ranges = _entry([])
    bridged_frames: int | None = _entry()
    consumers: dict[str, ConsumerCounts] = _entry({})
    segments: int | None = _entry()
    per_segment: list[SegmentCounts] | None = _entry()
    missing_by_path: dict[str, Ranges] | None = _entry(omit_none=True)  # the dual-path classification
    merge_on: bool | None = _entry(omit_none=True)

    @property
    def on_the_wire(self) -> int | None:
        """Frames the streamer handed to the wire, acknowledged (zmq_sent) or not yet (unconfirmed).
        A consumer applies a frame before its acknowledgement reaches the streamer, so this, not
        zmq_sent alone, is the count no downstream count exceeds."""
        return None if self.zmq_sent is None else self.zmq_sent + (self.unconfirmed or 0)

    @classmethod
    def from_published(cls, data: Mapping[str, Any]) -> PipelineLedger:
        """The ledger inside a published verdict (its other keys, the verdict's own, left aside)."""
        names = {published_name(f) for f, _ in fields_of(cls)}
        return from_parts(cls, {k: v for k, v in data.items() if k in names}, "ledger")


def _names(**flags: bool) -> tuple[str, ...]:
    return tuple(published_name(f) for f, _ in fields_of(PipelineLedger)
                 if all(bool(f.metadata.get(k)) == v for k, v in flags.items()))


HEAD_FIELDS: tuple[str, ...] = _names(head=True)
LAYER_NAMES: dict[str, str] = {published_name(f): f.metadata["layer"] for f, _ in fields_of(PipelineLedger)
                               if f.metadata.get("layer")}
CONSUMER_LAYERS: tuple[str, ...] = _names(consumer=True)
