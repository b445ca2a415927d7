"""`mocapline auditor`: the independent witness. Listens to the side path (UDP, posture indices
only) and to every service's heartbeats over NATS, classifies every missing index, and publishes
the conservation verdict on ``mocapline.core.verdict``. It needs only the NATS URL and its UDP port, so
it can run on another host.
"""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mocapline.core.bus import GAPS_SUBJECT, HEARTBEAT_PREFIX, VERDICT_SUBJECT, Bus, ControlRequest, performer_token
from mocapline.core.counters import (
    STAGE_TYPES,
    AuditorBeat,
    CounterSchemaError,
    SidePathCounts,
    as_published,
    decode_stage,
    from_parts,
    to_json,
)
from mocapline.core.ledger import SequenceLedger, combine
from mocapline.core.lifecycle import (
    add_service_arguments,
    setup_logging,
    stop_on_signals,
)
from mocapline.core.metrics import ServiceMetrics
from mocapline.core.metrics import add_arguments as add_metrics_arguments
from mocapline.core.metrics import start as start_metrics
from mocapline.core.options import EnvArgumentParser, argv, declared_defaults, port_number, settings_from
from mocapline.core.udp import UdpReceiver, adopt_udp, datagram_fifo, open_udp
from mocapline.formats.axis_bvh import BvhReject, parse_header
from mocapline.formats.axis_split import AxisSplitAssembler
from mocapline.services.auditor.audit import audit
from mocapline.services.auditor.discovery import DiscoveryServer

WORKER_GONE_S = 10.0  # a retarget worker's heartbeat older than this is no longer counted

log = logging.getLogger("mocapline.auditor")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline auditor", description=__doc__)
    p.add_argument("--side-port", type=port_number, default=7015,
                   help="UDP port of the side path; 0 = no side listener")
    p.add_argument("--side-host", default="0.0.0.0", help="address to bind the side port on")
    p.add_argument("--side-fd", type=int, default=None,
                   help="use this inherited, already bound UDP socket for the side path instead of binding "
                        "(a supervisor keeps it open across restarts)")
    add_service_arguments(p, nats_help="NATS server")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between verdicts")
    p.add_argument("--snapshot", type=Path, default=None, help="write the final snapshot (counters used) here on exit")
    p.add_argument("--replay", type=Path, default=None, help="recompute the verdict from a saved snapshot and exit")
    add_metrics_arguments(p, "auditor")
    p.add_argument("--sd-port", type=port_number, default=0,
                   help="serve Prometheus HTTP service discovery of the replicas' /metrics (GET /targets: "
                        "every live service whose heartbeat tells a metrics_port, e.g. retarget workers with "
                        "--metrics-port auto) on this port; 0 = off")
    p.add_argument("--sd-host", default="127.0.0.1", help="address of the service-discovery endpoint")
    return p


class SidePath:
    """Counts posture indices on the side path, one ledger per performer (avatar_index); decodes
    headers only."""

    def __init__(self, host: str, port: int, fd: int | None = None) -> None:
        sock, self.granted = open_udp(host, port) if fd is None else adopt_udp(fd)
        self.fifo = datagram_fifo()
        self.receiver = UdpReceiver(sock, self.fifo)
        self.performers: dict[int, SequenceLedger] = {}
        self.rejected = 0
        self.split = AxisSplitAssembler()  # Axis Neuron's frames split over two datagrams

    def reset(self) -> None:
        self.performers.clear()
        self.rejected = 0
        self.split = AxisSplitAssembler()

    def start(self) -> None:
        self.receiver.start()

    def drain(self) -> None:
        while True:
            try:
                dgram = self.fifo.get_nowait()
            except queue.Empty:
                return
            data = self.split.push(dgram.data, dgram.recv_ns, dgram.source)
            if data is None:
                continue
            try:
                header = parse_header(data)
            except BvhReject:
                self.rejected += 1
                continue
            if header.posture_index is not None:
                ledger = self.performers.get(header.avatar_index)
                if ledger is None:
                    ledger = self.performers[header.avatar_index] = SequenceLedger()
                ledger.observe(header.posture_index)

    def counts(self) -> SidePathCounts:
        """The side path's ledger (performers combined) and each performer's."""
        performers = {str(k): led.as_dict("source_") for k, led in self.performers.items()}
        overall = combine(list(performers.values())) if performers else SequenceLedger().as_dict("source_")
        rejected = self.rejected + sum(self.split.rejected.values())
        return from_parts(SidePathCounts, {**overall, "rejected_datagrams": rejected, "performers": performers})

    def as_dict(self) -> dict[str, Any]:
        published: dict[str, Any] = as_published(self.counts())
        return published


class Auditor:
    """What the auditor knows: the side path, the latest heartbeat of every service, the gap
    reports; and the verdict it computes from them."""

    def __init__(self, side: SidePath | None, metrics: ServiceMetrics) -> None:
        self.side = side
        self.metrics = metrics
        self.verdict: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._services: dict[str, dict[str, Any]] = {}
        self._heard: dict[str, float] = {}
        self._gap_reports: list[dict[str, Any]] = []
        self._unreadable: set[str] = set()
        # The stages' final counts came with a drain (`up`, `demo`, `record` hand over each
        # stage's drain answer): the verdict is final, and later heartbeats do not change it.
        self.drained = False

    def snapshot(self) -> dict[str, Any]:
        """The counters the verdict is computed from (``--snapshot`` saves it, ``--replay`` reads it)."""
        with self._lock:
            services = json.loads(json.dumps(self._services))
        return {"services": services, "side": self.side.as_dict() if self.side else None}

    def readable(self, name: str, body: dict[str, Any]) -> bool:
        """A stage's counts this auditor can read (the counter contract's version and keys); what
        it cannot is said once per service and left out of the verdict."""
        if name.partition(".")[0] not in STAGE_TYPES or (name == "retarget" and "workers" in body):
            return True
        try:
            decode_stage(name, body)
        except CounterSchemaError as exc:
            if name not in self._unreadable:
                log.error("%s: its counts cannot be read, left out of the verdict: %s", name, exc)
                self._unreadable.add(name)
            return False
        return True

    def on_heartbeat(self, subject: str, body: dict[str, Any]) -> None:
        name = subject.removeprefix(HEARTBEAT_PREFIX)  # "retarget.w1" for a worker
        if name != "auditor" and not self.drained and self.readable(name, body):
            with self._lock:
                self._services[name] = body
                self._heard[name] = time.monotonic()
                # a retarget worker not heard from for a while is gone (killed, or restarted under
                # a new name): its performers are someone else's now
                for gone in [n for n, t in self._heard.items()
                             if n.startswith("retarget.") and time.monotonic() - t > WORKER_GONE_S]:
                    self._services.pop(gone, None)
                    del self._heard[gone]

    def on_gap(self, subject: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._gap_reports.append(body)
            del self._gap_reports[:-1000]

    def judge(self) -> dict[str, Any]:
        """Take in what the side path received, then compute (and export) the verdict."""
        if self.side is not None:
            self.side.drain()
        self.verdict = self.metrics.sync_verdict(audit(self.snapshot(), final=self.drained))
        return self.verdict

    def answer(self, req: ControlRequest) -> None:
        if req.cmd == "drain" and req.args.get("services"):
            with self._lock:
                self._services.update({n: b for n, b in req.args["services"].items() if self.readable(n, b)})
            self.drained = True
        verdict = self.judge()
        if req.cmd == "reset":
            self.drained = False
            if self.side is not None:
                self.side.reset()
            with self._lock:
                self._services.clear()
        req.answer({"verdict": verdict, "side": self.side.as_dict() if self.side else None,
                    "gap_reports": len(self._gap_reports)})

    def run(self, bus: Bus, stop: threading.Event, interval: float) -> None:
        next_verdict = time.monotonic()
        while not stop.is_set():
            if self.side is not None:
                self.side.drain()
            for req in bus.poll_requests():
                self.answer(req)
                if req.cmd == "shutdown":
                    stop.set()
            if time.monotonic() >= next_verdict and not self.drained:
                verdict = self.judge()
                bus.publish(VERDICT_SUBJECT, verdict)
                for key, per in (verdict.get("performers") or {}).items():
                    bus.publish(f"{VERDICT_SUBJECT}.{performer_token(key)}", {"performer": key, **per})
                next_verdict = time.monotonic() + interval
            stop.wait(0.02)


@dataclass(frozen=True)
class AuditorSettings:
    """`mocapline auditor`'s flags."""

    side_port: int
    side_host: str
    side_fd: int | None
    interval: float
    snapshot: Path | None
    replay: Path | None
    nats: str
    log_level: str
    metrics_port: int
    metrics_host: str
    sd_port: int
    sd_host: str

    @classmethod
    def defaults(cls) -> AuditorSettings:
        """The settings of ``mocapline auditor`` with no flag (and no ``MOCAPLINE_*`` variable)."""
        return settings_from(cls, declared_defaults(build_parser()))

    def to_argv(self) -> list[str]:
        """The flags that give these settings (those not at their default)."""
        return argv(build_parser(), {f: getattr(self, f) for f in self.__dataclass_fields__})


def replay(path: Path) -> int:
    """--replay: the verdict recomputed from a saved snapshot, printed as one JSON line."""
    try:
        snapshot = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"mocapline auditor: --replay {path}: not a readable snapshot ({exc})", file=sys.stderr)
        return 2
    print(json.dumps(audit(snapshot)))
    return 0


def start_discovery(settings: AuditorSettings, auditor: Auditor) -> DiscoveryServer | None:
    """--sd-port: Prometheus service discovery of the replicas' /metrics (off when the port is taken)."""
    if not settings.sd_port:
        return None
    try:
        return DiscoveryServer(settings.sd_host, settings.sd_port, lambda: auditor.snapshot()["services"]).start()
    except OSError as exc:  # like /metrics: the verdict never depends on it
        log.warning("service discovery: cannot serve on %s:%d (%s); it is off", settings.sd_host, settings.sd_port,
                    exc)
        return None


def main(argv: list[str] | None = None) -> int:
    settings = settings_from(AuditorSettings, build_parser().parse_args(argv))
    if settings.replay is not None:
        return replay(settings.replay)
    setup_logging(settings.log_level)
    side = SidePath(settings.side_host, settings.side_port, settings.side_fd) if settings.side_port else None
    # the verdict, the current take's ledger, missing by class
    auditor = Auditor(side, start_metrics("auditor", settings.metrics_port, settings.metrics_host))
    bus = Bus(settings.nats, "auditor", lambda: to_json(AuditorBeat(auditor.verdict.get("unique_frames_conserved"))))
    bus.subscribe(f"{HEARTBEAT_PREFIX}>", auditor.on_heartbeat)
    bus.subscribe(f"{GAPS_SUBJECT}.>", auditor.on_gap)  # every performer's
    if side is not None:
        side.start()
    bus.start()
    discovery = start_discovery(settings, auditor)
    try:
        auditor.run(bus, stop_on_signals(), settings.interval)
    finally:
        if discovery is not None:
            discovery.close()
        snap = auditor.snapshot()
        final = auditor.judge()  # as answered to the drain, when there was one (ledger.json has it too)
        if settings.snapshot is not None:
            settings.snapshot.write_text(json.dumps(snap, indent=1))
        print(json.dumps(final), flush=True)
        bus.stop()
        auditor.metrics.close()
        if side is not None:
            side.receiver.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
