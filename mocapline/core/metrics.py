"""Prometheus metrics of every mocapline service: one catalogue, one exporter (prometheus-client).

Every service serves ``/metrics`` on its own port (``--metrics-port``, env ``MOCAPLINE_METRICS_PORT``;
defaults in ``DEFAULT_PORTS``; 0 = off). Names follow docs/operations.md: prefix ``mocapline_``, counters end
in ``_total`` and carry a ``stage`` label, latencies are histograms in seconds. ``FAMILIES`` is the
whole catalogue (name, type, labels, which services export it); the Grafana dashboard is checked
against it by tests/test_dashboard.py.

How the values get there, at no cost to the frame path:

- **Counters mirror the counts the services already keep** (capture's ledger, the stage counters:
  the same typed records the auditor judges, mocapline/core/counters; which field feeds which series
  is in the field's metadata). ``ServiceMetrics.sync(counts)`` adds to each
  counter what its source grew by since the previous sync. Services call ``maybe_sync`` from their
  loop (at most every ``SYNC_INTERVAL_S``) and ``sync`` before they answer a drain, status or reset
  request and at exit, so after a drain every scraped count equals the ledger exactly.
  The ledger is per take (``reset`` zeroes it) while a Prometheus counter is per process and never
  goes down: a source that went down was reset, and counting restarts from its new value (sync runs
  right before every reset, so nothing is lost). Per take counts are ``increase(...[$__range])``;
  the current take's ledger as judged is the auditor's ``mocapline_ledger{field}``.
- **Histograms are observed per frame** with ``FastHistogram``: a bisect and two additions, several
  times cheaper than prometheus-client's ``Histogram.observe`` (lock, per-bucket loop; ``mocapline
  bench metrics``, docs/benchmarks.md); the buckets are published to the exporter at sync time.
- **Gauges** (pending depths, last posture_index, the auditor's verdict) are set at sync time.

Every label value a service knows at start-up (its stage, directions, reject reasons, missing-index
classes, ledger fields) is created then, so its series exist at 0 before the first frame.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import threading
import time
import types
import typing
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import HistogramMetricFamily

from mocapline.core.counters import HEAD_FIELDS, STAGE_TYPES, StageCounts
from mocapline.core.counters.codec import Metric, field_metrics, fields_of
from mocapline.core.header import REJECT_REASONS as HEADER_REJECT_REASONS
from mocapline.core.options import port_number

log = logging.getLogger(__name__)
# No *_created series: creation timestamps add a series per counter and nothing reads them.
disable_created_metrics()

PREFIX = "mocapline_"
STAGES: tuple[str, ...] = ("capture", "retarget", "streamer", "viewer", "robot")
SERVICES: tuple[str, ...] = (*STAGES, "auditor")
DEFAULT_PORTS: dict[str, int] = {"capture": 9101, "retarget": 9102, "streamer": 9103, "viewer": 9104, "auditor": 9105,
                                 "robot": 9107}  # 9106: the auditor's --sd-port
# Loopback: a laptop on a studio network does not publish the pipeline's counters to everyone.
# Scraped from another host (compose's Prometheus elsewhere, a remote auditor): --metrics-host 0.0.0.0.
DEFAULT_HOST = "127.0.0.1"
DIRECTIONS = ("in", "out")
SYNC_INTERVAL_S = 0.25

# Processing latency of one stage (a frame's residence: taken in -> passed on), seconds.
STAGE_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
)
# Capture receive -> viewer apply, seconds.
E2E_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)

# What a FrameReceiver counts on every ZeroMQ link (mocapline.core.transport): the header checks and two more.
LINK_REJECT_REASONS: tuple[str, ...] = (*HEADER_REJECT_REASONS, "bad_parts", "wrong_topic")
# A valid envelope whose protobuf payload is bad (mocapline.core.frames), or is for another robot
# build than the stage's (``robot_model``).
PAYLOAD_REJECT_REASONS: tuple[str, ...] = ("protobuf", "field_length", "robot_model")

# Where the auditor places a missing index (mocapline.core.verdict).
MISSING_CLASSES: tuple[str, ...] = ("main_only", "both", "side_only", "main_no_side_data", "late")


@dataclass(frozen=True)
class Family:
    name: str  # as exported (counters with their _total)
    kind: str  # counter | gauge | histogram
    doc: str
    labels: tuple[str, ...] = ()
    services: tuple[str, ...] = STAGES
    buckets: tuple[float, ...] = ()

    @property
    def sample_names(self) -> tuple[str, ...]:
        """The series names this family puts in the exposition (what PromQL can select)."""
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_count", f"{self.name}_sum")
        return (self.name,)


FAMILIES: tuple[Family, ...] = (
    Family("mocapline_frames_total", "counter",
           "Frames per stage and direction. capture: in = valid source datagrams (all paths), out = "
           "HumanFrames sent; retarget: HumanFrames in, RobotFrames out; streamer: RobotFrames in, "
           "MocapFrames sent; viewer: MocapFrames that passed validation in, applied out.",
           ("stage", "direction")),
    Family("mocapline_rejected_total", "counter",
           "Datagrams / messages rejected by the stage, by reason (counted, dropped, never fatal).",
           ("stage", "reason")),
    Family("mocapline_source_unique_frames_total", "counter",
           "Unique posture indices released by capture's merge (ledger source_unique_frames).",
           services=("capture",)),
    Family("mocapline_source_missing_indices_total", "counter",
           "Posture indices missing on every path (ledger source_missing_indices).", services=("capture",)),
    Family("mocapline_source_duplicate_indices_total", "counter",
           "Posture indices Axis sent twice (ledger source_duplicate_indices).", services=("capture",)),
    Family("mocapline_source_backward_indices_total", "counter",
           "Backward jumps of the posture index: Axis restarted (ledger source_backward_indices).",
           services=("capture",)),
    Family("mocapline_source_cross_path_copies_total", "counter",
           "Copies of an index already taken from another path (merge).", services=("capture",)),
    Family("mocapline_source_late_frames_total", "counter",
           "Copies that arrived after their gap was declared final (merge).", services=("capture",)),
    Family("mocapline_source_connects_total", "counter",
           "Axis over TCP: connections capture made to Axis Studio's server (the first and every "
           "reconnect).", services=("capture",)),
    Family("mocapline_source_connected", "gauge",
           "Axis over TCP: 1 while capture is connected to Axis Studio's server, 0 while it reconnects.",
           services=("capture",)),
    Family("mocapline_performer_frames_total", "counter",
           "Frames per performer (Axis avatar_index / Xsens character ID) and stage: capture unique frames "
           "released, retarget frames through the IK, streamer MocapFrames sent, viewer frames applied. "
           "Performers beyond the first MAX_PERFORMER_LABELS indices are summed under performer=\"other\".",
           ("stage", "performer"),
           ("capture", "retarget", "streamer", "viewer")),  # the robot bridge follows one performer
    Family("mocapline_ik_failed_total", "counter",
           "Frames whose IK solve failed (sent with the last good pose, flagged).", services=("retarget",)),
    Family("mocapline_link_frame_id_gaps_total", "counter",
           "frame_id numbers missing on the stage's input link.", ("stage",), ("retarget", "viewer")),
    Family("mocapline_link_resent_total", "counter",
           "Durable mode: frames the stage sent again on its output link (asked for by a restarted or "
           "gap-seeing receiver).", ("stage",), ("capture", "retarget", "streamer")),
    Family("mocapline_link_duplicates_total", "counter",
           "Durable mode: frames the stage already had, dropped on arrival (resends).", ("stage",),
           ("retarget", "streamer", "viewer")),
    Family("mocapline_unacked", "gauge",
           "Durable mode: frames in the stage's log the next stage has not acknowledged yet (a consumer "
           "that is gone makes this grow, on disk).", ("stage",), ("capture", "retarget", "streamer")),
    Family("mocapline_link_in_flight", "gauge",
           "Durable mode: messages on their way to the next stage (the robot port: to its furthest-behind "
           "live consumer), first copies and resends together; never above --window for a consumer that "
           "reports its credit. Per consumer: the streamer's status, consumers.<name>.in_flight (and "
           "in_flight_max, resends_withheld).", ("stage",), ("capture", "retarget", "streamer")),
    Family("mocapline_consumer_backlog_max", "gauge",
           "Durable mode, the robot port: the largest backlog of any consumer (frames it has not "
           "acknowledged, waiting on the streamer's disk; bounded by --consumer-backlog). Per consumer: "
           "the streamer's status, consumers.<name>.backlog.", services=("streamer",)),
    Family("mocapline_consumers_evicted", "gauge",
           "Consumers beyond --consumer-backlog, no longer holding the streamer's log (alarm when > 0).",
           services=("streamer",)),
    Family("mocapline_unconfirmed", "gauge",
           "Frames handed to the robot port without an acknowledgement yet (or ever, --plain-output).",
           services=("streamer",)),
    Family("mocapline_durable_log_bytes", "gauge",
           "Durable mode: bytes of the stage's logs on disk (capture: its raw journal included).", ("stage",)),
    Family("mocapline_pending", "gauge",
           "Frames taken in by the stage and not yet passed on (queue depth).", ("stage",)),
    Family("mocapline_last_posture_index", "gauge",
           "Last posture_index the stage passed on (-1 before the first).", ("stage",)),
    Family("mocapline_stage_seconds", "histogram",
           "Time a frame spends in the stage, from taken in (capture: datagram received) to passed on "
           "(sent; viewer: applied).", ("stage",), STAGES, STAGE_BUCKETS),
    Family("mocapline_end_to_end_seconds", "histogram",
           "Capture receive of the source datagram -> viewer apply (wall clocks).", (), ("viewer",), E2E_BUCKETS),
    Family("mocapline_robot_commands_total", "counter", "LowCmd messages the robot bridge sent.",
           services=("robot",)),
    Family("mocapline_robot_deadline_misses_total", "counter",
           "Control ticks of the robot bridge that started more than half a period late.", services=("robot",)),
    Family("mocapline_robot_stalls_total", "counter",
           "Times the stream ran dry while the robot tracked it (hold, then damping).", services=("robot",)),
    Family("mocapline_robot_catchup_ticks_total", "counter",
           "Commands played faster than 1x to make up lag behind the stream.", services=("robot",)),
    Family("mocapline_robot_estops_total", "counter", "E-stops of the robot bridge (NATS, SIGINT, SIGTERM).",
           services=("robot",)),
    Family("mocapline_robot_falls_total", "counter",
           "Falls the policy controller detected from the IMU (damping, then the bridge stops).", services=("robot",)),
    Family("mocapline_unique_frames_conserved", "gauge",
           "The auditor's conservation verdict for the current take: 1 conserved, 0 not.", services=("auditor",)),
    Family("mocapline_missing_indices", "gauge",
           "Missing posture indices of the current take by where they were lost (auditor's dual-path "
           "classification).", ("classification",), ("auditor",)),
    Family("mocapline_ledger", "gauge",
           "The current take's ledger as the auditor judges it (numeric fields, docs/ledger.md names).",
           ("field",), ("auditor",)),
)
FAMILY_BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}
_Counts = TypeVar("_Counts", bound=StageCounts)

# Which count each series mirrors is in the counters' field metadata (mocapline/core/counters):
# ``series`` walks a stage's record and yields every value with its family and labels.
# Performers beyond the first MAX_PERFORMER_LABELS indices share one label (bounded cardinality).
MAX_PERFORMER_LABELS = 16


def performer_label(key: str) -> str:
    """The ``performer`` label of an avatar index: itself below MAX_PERFORMER_LABELS, else "other"."""
    return key if key.isdigit() and int(key) < MAX_PERFORMER_LABELS else "other"


# The auditor exports the ledger's head as mocapline_ledger{field} (the verdict has its own gauge).
LEDGER_GAUGE_FIELDS: tuple[str, ...] = HEAD_FIELDS


SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # (family, label pairs without the stage)


def series(counts: Any) -> dict[SeriesKey, float]:
    """Every value of a counters record that a metric mirrors, by (family, labels); the per
    performer counts summed by label."""
    out: dict[SeriesKey, float] = {}
    _collect(counts, (), out)
    return out


def _collect(counts: Any, labels: tuple[tuple[str, str], ...], out: dict[SeriesKey, float]) -> None:
    for name, metrics, per_performer, nested in _plan(type(counts)):
        value = getattr(counts, name)
        for m in metrics:
            if m.derive is not None:
                out[(m.family, (*labels, *m.labels))] = float(m.derive(value))
            elif m.key_label:
                for key, n in (value or {}).items():
                    out[(m.family, (*labels, *m.labels, (m.key_label, str(key))))] = float(n)
            elif value is not None:
                key = (m.family, (*labels, *m.labels))
                out[key] = out.get(key, 0.0) + float(value)
        if per_performer:
            for key, per in (value or {}).items():
                _collect(per, (*labels, ("performer", performer_label(str(key)))), out)
        elif nested and value is not None:
            _collect(value, labels, out)


_Plan = tuple[tuple[str, tuple[Metric, ...], bool, bool], ...]
_PLANS: dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    """Per field of a counters record: its metrics, whether it is the per-performer map, whether
    it holds a nested record (worked out once per class: sync runs several times a second)."""
    if cls in _PLANS:
        return _PLANS[cls]
    out = []
    for f, tp in fields_of(cls):
        options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        nested = any(dataclasses.is_dataclass(a) for a in options)
        per_performer = bool(f.metadata.get("per_performer"))
        if field_metrics(f) or per_performer or nested:
            out.append((f.name, field_metrics(f), per_performer, nested))
    plan = _PLANS[cls] = tuple(out)
    return plan


def static_series(cls: type, labels: tuple[tuple[str, str], ...] = ()) -> dict[SeriesKey, float | None]:
    """The series a counters record always has (created at start-up, at 0 or their initial value):
    the fixed-label ones, the first performer's, those of its nested parts."""
    out: dict[SeriesKey, float | None] = {}
    for f, tp in fields_of(cls):
        for m in field_metrics(f):
            if not m.key_label:
                out[(m.family, (*labels, *m.labels))] = m.initial
        parts = [a for a in (typing.get_args(tp) or (tp,)) if dataclasses.is_dataclass(a)]
        if f.metadata.get("per_performer"):
            parts = [a for a in typing.get_args(tp)[1:] if dataclasses.is_dataclass(a)]
            labels_in = (*labels, ("performer", "0"))  # the first performer's series exists from the start
        else:
            labels_in = labels
        for part in parts:
            out.update(static_series(typing.cast(type, part), labels_in))
    return out


class FastHistogram:
    """One histogram series: observe() in the frame path, publish() at sync time."""

    __slots__ = ("_bounds", "_counts", "_published", "_sum")

    def __init__(self, buckets: Iterable[float]) -> None:
        self._bounds = tuple(sorted(float(b) for b in buckets))
        self._counts = [0] * (len(self._bounds) + 1)  # last: above the largest bound (+Inf only)
        self._sum = 0.0
        self._published: tuple[tuple[int, ...], float] = (tuple(self._counts), 0.0)

    def observe(self, value: float) -> None:
        self._counts[bisect_left(self._bounds, value)] += 1  # bucket i: bounds[i-1] < value <= bounds[i]
        self._sum += value

    def publish(self) -> None:
        self._published = (tuple(self._counts), self._sum)

    @property
    def count(self) -> int:
        return sum(self._counts)

    def exposition(self) -> tuple[list[tuple[str, float]], float]:
        counts, total = self._published
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self._bounds, counts[:-1], strict=True):
            running += n
            buckets.append((repr(bound), running))
        buckets.append(("+Inf", running + counts[-1]))
        return buckets, total


class _HistogramCollector:
    """A histogram family whose series are FastHistograms (read from their last publish())."""

    def __init__(self, family: Family) -> None:
        self.family = family
        self.children: dict[tuple[str, ...], FastHistogram] = {}

    def child(self, *labels: str) -> FastHistogram:
        key = tuple(labels)
        if key not in self.children:
            self.children[key] = FastHistogram(self.family.buckets)
        return self.children[key]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        fam = HistogramMetricFamily(self.family.name, self.family.doc, labels=list(self.family.labels))
        for labels, hist in list(self.children.items()):
            buckets, total = hist.exposition()
            fam.add_metric(list(labels), buckets, total)
        yield fam

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.family.name, self.family.doc, labels=list(self.family.labels))


class _Mirror:
    """A counter series that follows a count kept elsewhere (which a reset may set back to 0)."""

    __slots__ = ("child", "last")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.last = 0

    def update(self, value: Any) -> None:
        if value is None:
            return
        value = int(value)
        if value < self.last:  # the source was reset (a new take): its count restarted from 0
            self.last = 0
        if value > self.last:
            self.child.inc(value - self.last)
            self.last = value


class ServiceMetrics:
    """The metrics of one service, bound once: counters and gauges mirror its typed counts
    (``sync``), ``stage_seconds`` / ``end_to_end_seconds`` are observed per frame."""

    def __init__(
        self,
        service: str,
        *,
        reasons: Iterable[str] = (),
        registry: CollectorRegistry | None = None,
        process_metrics: bool = False,
    ) -> None:
        if service not in SERVICES:
            raise ValueError(f"unknown service {service!r}: one of {SERVICES}")
        self.service = service
        self.registry = registry if registry is not None else CollectorRegistry()
        if process_metrics:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
        self._families: dict[str, Any] = {}
        for fam in FAMILIES:
            if service not in fam.services:
                continue
            if fam.kind == "histogram":
                collector = _HistogramCollector(fam)
                self.registry.register(collector)
                self._families[fam.name] = collector
            else:
                cls = Counter if fam.kind == "counter" else Gauge
                self._families[fam.name] = cls(fam.name, fam.doc, list(fam.labels), registry=self.registry)
        self._mirrors: dict[SeriesKey, _Mirror] = {}
        self._gauges: dict[SeriesKey, Any] = {}
        self._verdict_gauges: dict[str, Any] = {}
        self.stage_seconds: FastHistogram | None = None
        self.end_to_end_seconds: FastHistogram | None = None
        self._histograms: list[FastHistogram] = []
        self._server: Any = None
        self.auto_port = False  # the port was the system's choice (the heartbeat tells it)
        self._next_sync = 0.0
        self._lock = threading.Lock()
        if service in STAGES:
            self._bind_stage(service, reasons)
        else:
            self._bind_auditor()

    # -- binding (start-up) -------------------------------------------------------------------

    def _bind_stage(self, stage: str, reasons: Iterable[str]) -> None:
        for reason in reasons:
            self._reject(reason)
        for (family, labels), initial in static_series(STAGE_TYPES[stage]).items():
            if family in self._families:
                self._series(family, labels, initial)
        self.stage_seconds = self._families["mocapline_stage_seconds"].child(stage)
        self._histograms.append(self.stage_seconds)
        if "mocapline_end_to_end_seconds" in self._families:
            self.end_to_end_seconds = self._families["mocapline_end_to_end_seconds"].child()
            self._histograms.append(self.end_to_end_seconds)

    def _series(self, family: str, labels: tuple[tuple[str, str], ...], initial: float | None = None) -> Any:
        """The mirror (counters) or the gauge child of one series, created on first use."""
        key = (family, labels)
        if key in self._mirrors:
            return self._mirrors[key]
        if key in self._gauges:
            return self._gauges[key]
        fam = self._families[family]
        names = dict(labels)
        if "stage" in FAMILY_BY_NAME[family].labels:
            names["stage"] = self.service
        child = fam.labels(**names) if names else fam
        if FAMILY_BY_NAME[family].kind == "counter":
            mirror = self._mirrors[key] = _Mirror(child)
            return mirror
        self._gauges[key] = child
        if initial is not None:
            child.set(initial)
        return child

    def _reject(self, reason: str) -> _Mirror:
        mirror: _Mirror = self._series("mocapline_rejected_total", (("reason", reason),))
        return mirror

    def _bind_auditor(self) -> None:
        self._verdict_gauges["conserved"] = self._families["mocapline_unique_frames_conserved"]
        missing = self._families["mocapline_missing_indices"]
        for cls in MISSING_CLASSES:
            self._verdict_gauges[f"missing:{cls}"] = missing.labels(classification=cls)
        ledger = self._families["mocapline_ledger"]
        for name in LEDGER_GAUGE_FIELDS:
            self._verdict_gauges[f"ledger:{name}"] = ledger.labels(field=name)

    # -- exporter -----------------------------------------------------------------------------

    def serve(self, port: int, host: str = DEFAULT_HOST) -> bool:
        """Start the /metrics HTTP server (a daemon thread); port 0 = off. A port that cannot be
        bound is logged and metrics stay off: the frame path never depends on them."""
        if not port:
            return False
        try:
            self._server, _thread = start_http_server(max(port, 0), addr=host, registry=self.registry)
        except OSError as exc:
            log.warning("metrics: cannot serve on %s:%d (%s); /metrics is off", host, port, exc)
            return False
        self.auto_port = port == AUTO_PORT
        log.info("metrics on http://%s:%d/metrics", host, self.port)
        return True

    @property
    def serving(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int | None:
        """The port /metrics is served on (None: off)."""
        return None if self._server is None else int(self._server.server_port)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- updates ------------------------------------------------------------------------------

    def maybe_sync(self, snapshot: Callable[[], StageCounts]) -> None:
        """sync(snapshot()) if SYNC_INTERVAL_S passed since the last sync (cheap to call per loop)."""
        now = time.monotonic()
        if now >= self._next_sync:
            self.sync(snapshot())

    def sync(self, counts: StageCounts) -> None:
        """Bring every counter and gauge up to the stage's counts and publish the histograms."""
        with self._lock:
            self._next_sync = time.monotonic() + SYNC_INTERVAL_S
            for (family, labels), value in series(counts).items():
                if family not in self._families:
                    continue  # a count this service does not export (FAMILIES' services)
                target = self._series(family, labels)
                if isinstance(target, _Mirror):
                    target.update(value)
                else:
                    target.set(value)
            self._publish()

    def synced(self, counts: _Counts) -> _Counts:
        """``sync(counts)`` and return them: an answer sent with them and a scrape after it agree."""
        self.sync(counts)
        return counts

    def _publish(self) -> None:
        for hist in self._histograms:
            hist.publish()

    def sync_verdict(self, verdict: dict[str, Any]) -> dict[str, Any]:
        """The auditor: its verdict's gauges (the current take's ledger, missing by class); returns it."""
        with self._lock:
            self._verdict_gauges["conserved"].set(int(verdict.get("unique_frames_conserved") or 0))
            by_class = verdict.get("missing_by_path") or {}
            for cls in MISSING_CLASSES:
                self._verdict_gauges[f"missing:{cls}"].set(sum(hi - lo + 1 for lo, hi in by_class.get(cls, [])))
            for name in LEDGER_GAUGE_FIELDS:
                value = verdict.get(name)
                self._verdict_gauges[f"ledger:{name}"].set(float("nan") if value is None else value)
            self._publish()
        return verdict


AUTO_PORT = -1  # --metrics-port auto: a free port the system picks, told in the heartbeat


def metrics_port(text: str) -> int:
    """A --metrics-port value: a port number, 0 (off) or ``auto`` (AUTO_PORT)."""
    return AUTO_PORT if text.strip().lower() == "auto" else port_number(text)


def add_arguments(parser: argparse.ArgumentParser, service: str) -> None:
    """--metrics-port / --metrics-host for a service (env MOCAPLINE_METRICS_PORT / _HOST)."""
    parser.add_argument("--metrics-port", type=metrics_port, default=DEFAULT_PORTS[service],
                        help="port of the Prometheus /metrics endpoint; 0 = off; auto = a free port the system "
                             "picks, told in the heartbeat as metrics_port (scaled replicas, which Prometheus "
                             "finds through the auditor's --sd-port)")
    parser.add_argument("--metrics-host", default=DEFAULT_HOST,
                        help="address of the /metrics endpoint: loopback unless told (0.0.0.0: every interface, "
                             "for a Prometheus on another host)")


def start(service: str, port: int, host: str = DEFAULT_HOST, *, reasons: Iterable[str] = ()) -> ServiceMetrics:
    """A service's metrics on the process registry view it serves (with process_* metrics)."""
    metrics = ServiceMetrics(service, reasons=reasons, process_metrics=True)
    metrics.serve(port, host)
    return metrics


def exported_names(services: Iterable[str] = SERVICES) -> set[str]:
    """Every series name the given services expose, from live registries built as they build
    theirs (with every label value a service pre-creates)."""
    names: set[str] = set()
    for service in services:
        metrics = ServiceMetrics(service, reasons=LINK_REJECT_REASONS, process_metrics=True)
        for fam in metrics.registry.collect():
            names.update(sample.name for sample in fam.samples)
    return names
