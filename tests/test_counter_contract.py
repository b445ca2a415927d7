"""The counter contract (mocapline/core/counters): every published field keeps its name and
meaning (compared with takes recorded before the typed records, tests/data/counters_golden.json),
the one reader refuses what it does not know, and every metric is fed by a field."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from mocapline.core.counters import (
    SCHEMA_VERSION,
    STAGE_TYPES,
    CaptureCounts,
    CounterSchemaError,
    FrameIdCounts,
    RetargetTotals,
    SidePathCounts,
    ViewerCounts,
    as_published,
    decode,
    decode_stage,
    from_parts,
    to_json,
    zero,
)
from mocapline.core.counters.codec import field_metrics, fields_of
from mocapline.core.ledger import SequenceLedger
from mocapline.core.metrics import FAMILIES, FAMILY_BY_NAME, ServiceMetrics
from mocapline.core.verdict import LEDGER_FIELDS

DATA = Path(__file__).parent / "data"
GOLDEN: dict[str, Any] = json.loads((DATA / "counters_golden.json").read_text())
# Ledger values that do not depend on timing or ports (layer counts, verdict, classification).
DETERMINISTIC = (*LEDGER_FIELDS, "missing_by_path", "segments", "merge_on", "rejected_by_reason", "late_ranges")
PER_PERFORMER = (*LEDGER_FIELDS, "avatar_name", "missing_by_path", "segments", "per_segment", "missing_ranges")
# Keys published since the takes were recorded, by stage and key path (as ``shape`` writes it), each
# with the issue that added it. Only these may be new: any other key, a renamed one included, fails.
# a fan-out's consumers' flow control (issue 36), wherever a stage's output is one
FANOUT_ADDED = {f".durable.output_link.consumers.*.{key}": "issue 36: flow control"
                for key in ("in_flight", "in_flight_max", "resends_withheld", "frames_to_apply")}
ADDED_SINCE_RECORDING: dict[str, dict[str, str]] = {
    "capture": {
        ".split_frames": "issue 23: Axis frames joined from several datagrams",
        ".props": "issue 23: Xsens props-only characters", ".props.*": "issue 23",
        ".props.*.samples": "issue 23", ".props.*.segments": "issue 23",
        ".props.*.name": "issue 23: a props-only character's MXTP12 name",
        ".meta_datagrams": "issue 23: Xsens MXTP12 / MXTP13 taken in",
        ".meta_datagrams.MXTP12": "issue 23", ".meta_datagrams.MXTP13": "issue 23",
        ".performers.*.human_height_m": "issue 23: the height Xsens MXTP13 scaling gave",
        ".metrics_host": "issue 24: the host of an automatic /metrics port",
        ".durable.input_link.restarts_heard": "issue 26: RESTARTED heard from the sender",
        ".durable.input_link.taken": "issue 36: messages taken off the socket, the credit reported",
        **FANOUT_ADDED,
    },
    "retarget": {
        **FANOUT_ADDED,
        ".performers.*.human_height_m": "issue 23: the height a performer is retargeted at",
        ".metrics_host": "issue 24: the host of an automatic /metrics port",
        ".durable.input_link.restarts_heard": "issue 26: RESTARTED heard from the sender",
        ".durable.input_link.taken": "issue 36: messages taken off the socket, the credit reported",
    },
    "streamer": {
        ".metrics_host": "issue 24: the host of an automatic /metrics port",
        ".consumers.*.in_flight": "issue 36: messages on their way to a consumer",
        ".consumers.*.in_flight_max": "issue 36", ".consumers.*.resends_withheld": "issue 36",
        ".consumers.*.frames_to_apply": "issue 36: what a drain waits for",
        **FANOUT_ADDED,
        ".durable.input_link.restarts_heard": "issue 26: RESTARTED heard from the sender",
        ".durable.input_link.taken": "issue 36: messages taken off the socket, the credit reported",
    },
    "viewer": {
        ".metrics_host": "issue 24: the host of an automatic /metrics port",
        ".durable.input_link.restarts_heard": "issue 26: RESTARTED heard from the sender",
        ".durable.input_link.taken": "issue 36: messages taken off the socket, the credit reported",
    },
    "auditor": {  # its drain answer: the ledger `up` and `demo` print
        ".verdict.split_frames": "issue 23: capture's split_frames in the printed ledger",
        ".verdict.props": "issue 23", ".verdict.props.*": "issue 23", ".verdict.props.*.samples": "issue 23",
        ".verdict.props.*.segments": "issue 23", ".verdict.props.*.name": "issue 23",
        ".verdict.meta_datagrams": "issue 23", ".verdict.meta_datagrams.MXTP12": "issue 23",
        ".verdict.meta_datagrams.MXTP13": "issue 23", ".verdict.performers.*.human_height_m": "issue 23",
        ".verdict.verdict_covers": "issue 34: what the verdict judges, in words",
        ".verdict.performers.*.verdict_covers": "issue 34",
        ".verdict.consumers.*.in_flight": "issue 36: messages on their way to a consumer",
        ".verdict.consumers.*.in_flight_max": "issue 36", ".verdict.consumers.*.resends_withheld": "issue 36",
        ".verdict.consumers.*.frames_to_apply": "issue 36",
        ".verdict.link_duplicates": "issue 36: copies each stage dropped on arrival",
        ".verdict.link_duplicates.*": "issue 36", ".verdict.performers.*.link_duplicates": "issue 36",
        ".verdict.performers.*.link_duplicates.*": "issue 36",
    },
}


def recorded_stage_answers() -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for take, record in GOLDEN.items():
        for part in ("finals", "status"):
            for name, body in record[part].items():
                if name != "auditor" and not (name == "retarget" and "workers" in body):
                    out.append((f"{take}:{part}:{name}", name, body))
    return out


@pytest.mark.parametrize(("label", "service", "body"), recorded_stage_answers(), ids=lambda v: v if
                         isinstance(v, str) and ":" in v else "")
def test_every_recorded_answer_reads_back_and_publishes_the_same_json(label, service, body) -> None:
    counts = decode_stage(service, {**body, "schema": SCHEMA_VERSION})
    assert isinstance(counts, STAGE_TYPES[service.partition(".")[0]])
    published = to_json(counts)
    assert published.pop("schema") == SCHEMA_VERSION
    published = without_added(published, ADDED_SINCE_RECORDING[service.partition(".")[0]])
    assert published == {k: v for k, v in body.items() if k != "service"}
    assert list(published) == [k for k in body if k != "service"]  # the order too


@pytest.mark.parametrize("take", sorted(GOLDEN))
def test_the_recorded_side_path_reads_back(take) -> None:
    side = GOLDEN[take]["auditor_drain"]["side"]
    if side is not None:
        assert as_published(from_parts(SidePathCounts, side)) == side


def test_the_workers_sum_reads_back() -> None:
    body = GOLDEN["workers"]["finals"]["retarget"]
    published = without_added(to_json(from_parts(RetargetTotals, body)), ADDED_SINCE_RECORDING["retarget"])
    assert published == {"schema": SCHEMA_VERSION, **body}


def test_a_key_added_without_being_listed_still_fails() -> None:
    body = {"performers": {"0": {"gmr_processed": 3, "human_height_m": None, "renamed": 1}}}
    assert without_added(body, ADDED_SINCE_RECORDING["retarget"]) == \
        {"performers": {"0": {"gmr_processed": 3, "renamed": 1}}}
    assert without_added({"split_frames": 0}, ADDED_SINCE_RECORDING["retarget"]) == {"split_frames": 0}


def test_the_reader_refuses_another_version_unknown_and_missing_keys() -> None:
    body = to_json(zero(ViewerCounts, viewer_applied=3))
    assert decode(ViewerCounts, body).viewer_applied == 3
    assert decode(ViewerCounts, {**body, "service": "viewer", "ts": 1.0}).viewer_applied == 3  # the bus envelope
    with pytest.raises(CounterSchemaError, match="no schema version"):
        decode(ViewerCounts, {k: v for k, v in body.items() if k != "schema"})
    with pytest.raises(CounterSchemaError, match="schema version 2"):
        decode(ViewerCounts, {**body, "schema": 2})
    with pytest.raises(CounterSchemaError, match="unknown key.*viewer_aplied"):
        decode(ViewerCounts, {**{k: v for k, v in body.items() if k != "viewer_applied"}, "viewer_aplied": 3})
    with pytest.raises(CounterSchemaError, match="missing key 'viewer_applied'"):
        decode(ViewerCounts, {k: v for k, v in body.items() if k != "viewer_applied"})
    with pytest.raises(CounterSchemaError, match="viewer_applied: expected int, got str"):
        decode(ViewerCounts, {**body, "viewer_applied": "3"})
    with pytest.raises(CounterSchemaError, match="not a stage"):
        decode_stage("auditor", body)


def test_a_counter_renamed_by_its_producer_fails_where_it_is_read() -> None:
    led = SequenceLedger()
    led.observe(1)
    assert from_parts(FrameIdCounts, led.as_dict("frame_id_")).received == 1
    with pytest.raises(CounterSchemaError, match="unknown key"):  # e.g. a prefix changed on one side
        from_parts(FrameIdCounts, led.as_dict("frame_"))


def test_published_names_are_unique_and_attributes_keep_the_ledger_names() -> None:
    for cls in STAGE_TYPES.values():
        names = [str(f.metadata.get("wire") or f.name) for f, _ in fields_of(cls)]
        assert len(names) == len(set(names)), cls
    # the ledger's own names are attributes of the records they come from (mypy checks the readers)
    for name in ("source_received", "source_unique_frames", "human_frames_sent", "input_pending"):
        assert name in CaptureCounts.__dataclass_fields__
    assert {"gmr_processed"} <= STAGE_TYPES["retarget"].__dataclass_fields__.keys()
    assert {"motion_generated", "zmq_sent", "unconfirmed"} <= STAGE_TYPES["streamer"].__dataclass_fields__.keys()
    assert "viewer_applied" in ViewerCounts.__dataclass_fields__


def _families_fed(cls: type) -> set[str]:
    out: set[str] = set()
    for f, tp in fields_of(cls):
        out.update(m.family for m in field_metrics(f))
        for arg in (tp, *getattr(tp, "__args__", ())):
            for inner in (arg, *getattr(arg, "__args__", ())):
                if dataclasses.is_dataclass(inner):
                    out |= _families_fed(inner)  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize("stage", sorted(STAGE_TYPES))
def test_every_metric_of_a_stage_resolves_to_a_field_and_back(stage) -> None:
    fed = _families_fed(STAGE_TYPES[stage])
    assert fed <= set(FAMILY_BY_NAME), fed - set(FAMILY_BY_NAME)
    exported = {f.name for f in FAMILIES if stage in f.services and f.kind != "histogram"}
    assert exported <= fed, f"{stage} exports {sorted(exported - fed)} which no counter field feeds"
    ServiceMetrics(stage).sync(zero(STAGE_TYPES[stage]))  # every series a record feeds is bound


@pytest.mark.integration
@pytest.mark.parametrize("take", sorted(GOLDEN))
def test_a_take_publishes_what_was_recorded_before_the_typed_counters(take) -> None:
    sys.path.insert(0, str(DATA))
    try:
        from record_counters import SCENARIOS
        from record_counters import take as make_take
    finally:
        sys.path.remove(str(DATA))
    now, then = make_take(SCENARIOS[take]), GOLDEN[take]
    for part in ("finals", "status"):
        assert set(now[part]) == set(then[part])
        for name in then[part]:
            added = set(ADDED_SINCE_RECORDING.get(name.partition(".")[0], {}))
            if part == "status":  # mid-take, which performers and consumers are there yet depends on timing
                assert {f".{k}" for k in now[part][name]} - {".schema"} - added == \
                    {f".{k}" for k in then[part][name]}, f"{part} {name}"
                continue
            assert shape(now[part][name]) - {".schema"} - added == shape(then[part][name]), f"{part} {name}"
    assert shape(now["auditor_drain"]) - set(ADDED_SINCE_RECORDING["auditor"]) == shape(then["auditor_drain"])
    assert {k: now["ledger"].get(k) for k in DETERMINISTIC} == {k: then["ledger"].get(k) for k in DETERMINISTIC}
    for key, per in then["ledger"].get("performers", {}).items():  # each performer judged as before
        assert {k: now["ledger"]["performers"][key].get(k) for k in PER_PERFORMER} == \
            {k: per.get(k) for k in PER_PERFORMER}, key


def shape(value: Any, path: str = "") -> set[str]:
    """Every key path in a JSON value; keys that are data (ports, avatar indices) as ``*``."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            k = "*" if key.isdigit() or path.rsplit(".", 1)[-1] in DATA_KEYED else key
            out.add(f"{path}.{k}")
            out |= shape(inner, f"{path}.{k}")
    elif isinstance(value, list):
        for inner in value:
            out |= shape(inner, f"{path}[]")
    return out


def without_added(value: Any, added: dict[str, str], path: str = "") -> Any:
    """A published JSON value without the keys listed as added since the recording."""
    if isinstance(value, dict):
        out = {}
        for key, inner in value.items():
            k = "*" if key.isdigit() or path.rsplit(".", 1)[-1] in DATA_KEYED else key
            if f"{path}.{k}" not in added:
                out[key] = without_added(inner, added, f"{path}.{k}")
        return out
    if isinstance(value, list):
        return [without_added(inner, added, f"{path}[]") for inner in value]
    return value


DATA_KEYED = {"rcvbuf_granted", "paths", "positions", "rejected_by_reason", "consumers", "link_duplicates"}


# The robot bridge's heartbeat as it was published before it became a typed record (issue 22).
ROBOT_KEYS = ("robot_received", "robot_applied", "rejected_by_reason", "commands_sent", "command_rate_hz",
              "command_rate_mean_hz", "period_p99_ms", "deadline_misses", "clamps_by_reason", "stalls", "damped_s",
              "catchup_ticks", "estops", "transitions", "lowstate_received", "lowstate_rejected_by_reason",
              "lowstate_unsealed",
              "tracking_error_rad", "latency_p50_ms", "latency_p99_ms", "last_posture_index", "robot_state",
              "bridge_pending", "lag_s", "ended",
              "controller", "falls")  # issue 31: which controller drives, the policy's falls


def test_the_robot_bridge_publishes_its_heartbeat_keys_and_reads_them_back() -> None:
    from g1_facts import G1

    from mocapline.services.robot.counters import RobotCounters

    counters = RobotCounters.for_robot(G1, robot_received=5, robot_applied=4, commands_sent=9)
    counters.rejected["non_finite"] += 1
    counters.errors.append([0.01] * 29)
    body = to_json(counters.record(0.0, bridge_pending=1, lag_s=0.02, ended=False))
    assert list(body) == ["schema", *ROBOT_KEYS]
    assert set(body["tracking_error_rad"]) == {"legs", "waist", "arms"}
    assert body["tracking_error_rad"]["legs"] == {"mean": 0.01, "p50": 0.01, "p99": 0.01}
    back = decode_stage("robot", body)
    assert back.robot_applied == 4 and back.rejected_by_reason == {"non_finite": 1} and back.bridge_pending == 1
    assert to_json(back) == body
