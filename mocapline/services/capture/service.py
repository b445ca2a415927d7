"""`mocapline capture`: receive Axis binary BVH (UDP, or TCP as the client of Axis Studio's
server) or Xsens MXTP02 (UDP), push HumanFrames.

One HumanFrame per unique posture_index, in order, on a lossless ZeroMQ PUSH socket (bound, so
retarget connects). The live ledger goes to stderr once a second; the final ledger is printed to
stdout as one JSON object when capture stops (Ctrl-C, SIGTERM, or --exit-on-idle).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from mocapline.core import durable
from mocapline.core.bodies import GMR_BODIES
from mocapline.core.bus import Bus, gaps_subject
from mocapline.core.counters import CaptureCounts, durable_counts, from_parts
from mocapline.core.durable import DurableStage
from mocapline.core.frames import HumanFrame
from mocapline.core.header import MessageType
from mocapline.core.metrics import ServiceMetrics
from mocapline.core.modes import SOURCE_PORTS, Source, Transport
from mocapline.core.options import (
    EnvArgumentParser,
    argv,
    choices,
    declared_defaults,
    parse_settings,
    port_number,
    settings_from,
)
from mocapline.core.stage import (
    Links,
    Stage,
    StageError,
    StageSettings,
    add_stage_arguments,
)
from mocapline.core.tracing import StageTracer
from mocapline.core.transport import FrameSink
from mocapline.formats.axis_bvh import AxisBvhConfig, HeaderFormat, add_axis_options
from mocapline.formats.mxtp02 import PositionUnitSetting
from mocapline.formats.skeleton import SkeletonKind
from mocapline.services.capture import checkpoint
from mocapline.services.capture.journal import RawJournal
from mocapline.services.capture.sources import (
    UdpMotionInput,
    axis_udp_source,
    xsens_udp_source,
)
from mocapline.services.capture.state import StateError
from mocapline.services.capture.tcp import DEFAULT_AXIS_TCP_PORT, parse_endpoint

# Where each source sends over UDP by default: Axis Studio's BVH broadcast, MVN's network streamer.

log = logging.getLogger("mocapline.capture")


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline capture", description=__doc__)
    p.add_argument("--source", choices=choices(Source), default="axis", help="what sends the stream")
    p.add_argument("--transport", choices=choices(Transport), default="udp",
                   help="Axis Studio over UDP (capture listens on --ports) or TCP (capture connects to --axis)")
    p.add_argument("--axis", default=f"127.0.0.1:{DEFAULT_AXIS_TCP_PORT}", metavar="HOST[:PORT]",
                   help="--transport tcp: Axis Studio's TCP server (the main path; reconnects with back-off)")
    p.add_argument("--ports", type=port_number, nargs="*", default=None,
                   help="UDP ports of the same source, merged by posture_index (e.g. 7014 7015); default "
                        f"{SOURCE_PORTS['axis']} for Axis, {SOURCE_PORTS['xsens']} for Xsens, none with "
                        "--transport tcp (then these are UDP side paths merged with the TCP stream)")
    p.add_argument("--host", default="0.0.0.0", help="local address to bind the UDP ports on")
    p.add_argument("--output", default="tcp://127.0.0.1:5556", help="ZeroMQ endpoint to bind the HumanFrame PUSH on")
    add_axis_options(p)
    p.add_argument("--header-format", choices=choices(HeaderFormat), default="current",
                   help="'legacy' when Axis Studio's 'use old header format' is ticked")
    p.add_argument("--position-unit", choices=choices(PositionUnitSetting), default="m",
                   help="Xsens position unit; the first frame's pelvis height is checked (a warning names the "
                        "right one); auto: that height decides")
    p.add_argument("--merge-window-ms", type=float, default=250.0,
                   help="a path with no datagram for this long is silent: gaps stop waiting for it (a live "
                        "path is waited for however far behind it is; see services/capture/merge.py)")
    p.add_argument("--allow-source", nargs="*", default=None,
                   help="only accept datagrams from these IP addresses (others are counted as rejected)")
    p.add_argument("--record", type=Path, default=None, help="write every received datagram to this .mlrec file")
    p.add_argument("--status-interval", type=float, default=1.0, help="seconds between ledger lines on stderr; 0 = off")
    p.add_argument("--exit-on-idle", type=float, default=0.0,
                   help="stop after this many seconds without datagrams once a take has started; 0 = never")
    p.add_argument("--shutdown-wait", type=float, default=30.0,
                   help="on exit, seconds to wait for the consumer to take queued frames")
    p.add_argument("--udp-fds", type=parse_fd_list, default=None,
                   help="use these inherited, already bound UDP sockets (comma-separated fds, in --ports "
                        "order) instead of binding: a supervisor that holds them keeps datagrams queued in "
                        "the kernel while capture restarts (mocapline up does this in durable mode)")
    p.add_argument("--checkpoint-s", type=float, default=30.0,
                   help="durable mode: seconds between checkpoints of capture's state, so a restart replays "
                        "at most this much of the journal instead of the whole take")
    p.add_argument("--output-fanout", action="store_true",
                   help="durable mode: the HumanFrame port is an acknowledged fan-out (every named consumer gets "
                        "every frame): several retarget workers (`mocapline retarget --worker NAME`)")
    add_stage_arguments(p, "capture", nats_help="NATS server for heartbeats, gap reports and control", retain_mb=2048)
    return p


def parse_fd_list(text: str) -> list[int]:
    try:
        fds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated file descriptor numbers") from None
    if not fds or min(fds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated file descriptor numbers")
    return fds


@dataclass(frozen=True)
class CaptureSettings:
    """`mocapline capture`'s flags."""

    source: Source
    transport: Transport
    axis: tuple[str, int] | None  # --transport tcp: Axis Studio's TCP server
    ports: list[int]
    host: str
    output: str
    rotation_order: str
    skeleton: SkeletonKind
    header_format: HeaderFormat
    position_unit: PositionUnitSetting
    merge_window_ms: float
    allow_source: list[str] | None
    record: Path | None
    status_interval: float
    exit_on_idle: float
    shutdown_wait: float
    udp_fds: list[int] | None
    checkpoint_s: float
    stage: StageSettings
    output_fanout: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> CaptureSettings:
        if args.transport == "tcp" and args.source != "axis":
            raise ValueError("--transport tcp is for Axis Studio (Xsens MVN streams over UDP)")
        axis = parse_endpoint(args.axis) if args.transport == "tcp" else None
        if args.ports is None:
            args.ports = [] if axis is not None else [SOURCE_PORTS[args.source]]
        if axis is None and not args.ports:
            raise ValueError("no UDP port to listen on (--ports)")
        if axis is not None and axis[1] in args.ports:
            raise ValueError(f"--ports {axis[1]} is also the Axis TCP port: paths are told apart by port")
        if args.source == "axis" and args.header_format == "legacy":
            if len(args.ports) + (axis is not None) > 1:
                raise ValueError("the legacy Axis header has no frame index, so paths cannot be merged; "
                                 "use one port or turn off 'use old header format' in Axis Studio")
            log.warning("legacy Axis header: no frame index in the stream; frames are numbered on "
                        "arrival and losses upstream cannot be detected")
        if args.output_fanout and args.state_dir is None:
            raise ValueError("--output-fanout needs --state-dir (the fan-out sends from the durable log)")
        if args.udp_fds is not None and len(args.udp_fds) != len(args.ports):
            raise ValueError(f"--udp-fds gives {len(args.udp_fds)} sockets for {len(args.ports)} --ports")
        return settings_from(cls, args, axis=axis, stage=StageSettings.from_args(args))

    @classmethod
    def defaults(cls) -> CaptureSettings:
        """The settings of ``mocapline capture`` with no flag (and no ``MOCAPLINE_*`` variable)."""
        return cls.from_args(declared_defaults(build_parser()))

    def to_argv(self) -> list[str]:
        """The flags that give these settings (those not at their default)."""
        parser = build_parser()
        values = {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in ("axis", "udp_fds", "stage")}
        if self.axis is not None:
            values["axis"] = f"{self.axis[0]}:{self.axis[1]}"
        values["udp_fds"] = None if self.udp_fds is None else ",".join(map(str, self.udp_fds))
        return argv(parser, values) + self.stage.to_argv(parser)


def make_source(settings: CaptureSettings, journal: RawJournal | None = None) -> UdpMotionInput:
    common: dict[str, Any] = {
        "host": settings.host,
        "merge_window_s": settings.merge_window_ms / 1000.0,
        "allowed_sources": frozenset(settings.allow_source) if settings.allow_source else None,
        "record_path": settings.record,
        "journal": journal,
        "udp_fds": settings.udp_fds,
    }
    if settings.source == "xsens":
        return xsens_udp_source(settings.ports, settings.position_unit, **common)
    config = AxisBvhConfig(
        skeleton=SkeletonKind(settings.skeleton),
        rotation_order=settings.rotation_order,
        header_format=settings.header_format,
    )
    return axis_udp_source(config, settings.ports, tcp=settings.axis, **common)


def source_reject_reasons(source: str) -> tuple[str, ...]:
    """The reasons a source's datagrams can be rejected for (pre-created as metric labels)."""
    if source == "xsens":
        from mocapline.formats.mxtp02 import FRAGMENT_INCOMPLETE
        from mocapline.formats.mxtp02 import REJECT_REASONS as XSENS_REASONS

        return (*XSENS_REASONS, FRAGMENT_INCOMPLETE)
    from mocapline.formats.axis_bvh import REJECT_REASONS as AXIS_REASONS
    from mocapline.formats.axis_split import SPLIT_REASONS

    return (*AXIS_REASONS, *SPLIT_REASONS)


def status_line(ledger: CaptureCounts) -> str:
    extra = ""
    if len(ledger.performers) > 1:
        extra += f" performers={len(ledger.performers)}"
    if ledger.split_frames:
        extra += f" split_frames={ledger.split_frames}"
    if ledger.props:
        extra += f" props={sum(p.samples for p in ledger.props.values())}"
    tcp = ledger.tcp
    if tcp is not None:
        extra += f" tcp={'connected' if tcp.connected else 'reconnecting'} connects={tcp.connects}"
    return (
        f"capture received={ledger.source_received} unique={ledger.source_unique_frames} "
        f"missing={ledger.source_missing_indices} dup={ledger.source_duplicate_indices} "
        f"backward={ledger.source_backward_indices} rejected={ledger.rejected_datagrams} "
        f"last={ledger.last_posture_index} pending={ledger.input_pending}{extra}"
    )


@dataclass(frozen=True)
class Durability:
    """Durable mode (--state-dir): the stage log the frames go through, and where and how often
    capture checkpoints its state (None: no checkpoints, a restart replays the whole take)."""

    stage: DurableStage
    checkpoint_dir: Path | None = None
    checkpoint_interval_s: float = 30.0


class CaptureService:
    """The capture loop's state: the source, the HumanFrame sender, per-take counts."""

    def __init__(
        self,
        source: UdpMotionInput,
        sender: FrameSink,
        *,
        metrics: ServiceMetrics | None = None,
        tracer: StageTracer | None = None,
        durability: Durability | None = None,
    ) -> None:
        self.source = source
        self.sender = sender
        self.tracer = tracer
        self.stage_seconds = metrics.stage_seconds if metrics is not None else None
        self.frames_sent = 0
        self.started = False
        self._gaps_reported: dict[str, int] = {}
        # Durable mode (--state-dir): the stage log, the journal number of this take's start
        # marker, and how many of the take's frames an earlier run of capture already sent.
        self.stage: DurableStage | None = durability.stage if durability is not None else None
        self.take_start = -1
        self.produced = 0
        self.already_sent = 0
        self.restarts = 0
        self.checkpoint_dir: Path | None = durability.checkpoint_dir if durability is not None else None
        self.checkpoint_interval_s = durability.checkpoint_interval_s if durability is not None else 30.0
        self.checkpoints = 0
        self._next_checkpoint = 0.0  # the first at the first quiet moment

    def step(self, timeout_s: float) -> None:
        frame = self.source.poll_frame(timeout_s)
        if frame is not None:
            self.started = True
            self._send(frame)
            self.send_ready()

    def send_ready(self) -> None:
        while (frame := self.source.poll_frame(0.0)) is not None:
            self._send(frame)

    def _send(self, frame: HumanFrame) -> None:
        self.produced += 1
        if self.produced <= self.already_sent:
            return  # replayed from the journal and already in the stage log: sent before the restart
        # the trace of this posture_index starts at the datagram's arrival
        span = self.tracer.carry(frame, frame.capture_timestamp_us * 1000) if self.tracer is not None else None
        self.sender.send(frame.to_bytes(), capture_timestamp_us=frame.capture_timestamp_us)
        self.frames_sent += 1
        self._remember()
        if span is not None:
            span.end()
        if self.stage_seconds is not None:  # datagram received -> HumanFrame sent
            self.stage_seconds.observe((time.time_ns() // 1000 - frame.capture_timestamp_us) / 1e6)

    def drain(self, quiet_s: float) -> None:
        """Wait until no datagram arrived for quiet_s, flush the merge, send everything, then
        END_OF_STREAM so the next stage knows the take is complete."""
        while time.monotonic() - self.source.last_datagram < quiet_s:
            self.step(0.02)
        self.source.flush()
        self.send_ready()
        self.sender.send_end()
        self._remember()
        if self.stage is not None:  # the take's frames are acknowledged before its ledger is final
            self.stage.wait_delivered(quiet_s + 30)

    def _remember(self) -> None:
        if self.stage is not None:
            journal = self.source.journal
            self.stage.done(journal.next_seq - 1 if journal is not None else -1, self.durable_state())

    def durable_state(self) -> dict[str, Any]:
        return {"session_id": self.source.core.session_id, "take_start": self.take_start,
                "take_outputs": self.frames_sent}

    def start_take(self) -> None:
        """Durable mode: mark a new take in the journal (a restart replays from the newest mark)."""
        if self.source.journal is not None:
            self.take_start = self.source.journal.mark_take(self.source.core.session_id)
        self.produced = self.already_sent = 0

    def resume(self) -> int:
        """Durable mode, at start: continue the journal's newest take, or start one. The take is
        replayed through the core (ledger and merge state rebuilt exactly); the frames the stage log
        shows as sent are not sent again, the rest are. Returns the datagrams replayed."""
        journal = self.source.journal
        assert journal is not None
        take = journal.last_take()
        if take is None:
            self.start_take()
            return 0
        self.take_start, session_id = take
        self.source.core.session_id = session_id
        state = self.stage.restored if self.stage is not None else None
        if state is not None and state.get("take_start") == self.take_start:
            self.already_sent = int(state.get("take_outputs", 0))
        self.frames_sent = self.already_sent
        self.restarts += 1
        start = self.take_start + 1
        ckpt = checkpoint.load(self.checkpoint_dir) if self.checkpoint_dir else None
        if ckpt is not None and ckpt.take_start == self.take_start and ckpt.produced <= self.already_sent:
            try:
                self.source.restore(ckpt.capture)
                self.produced = ckpt.produced
                start = ckpt.position
            except StateError as exc:
                log.warning("capture: checkpoint not used (%s): the take is replayed from the start of the journal",
                            exc)
        replayed = self.source.replay(journal.datagrams_from(start))
        self.send_ready()
        log.info("resumed take %s from the journal%s: %d datagrams replayed, %d frames had been sent, %d sent now",
                 session_id[:8], f" (checkpoint at record {start})" if start > self.take_start + 1 else "",
                 replayed, self.already_sent, self.frames_sent - self.already_sent)
        return replayed

    def maybe_checkpoint(self, now: float) -> bool:
        """Durable mode: every ``checkpoint_interval_s``, save the core's state at a quiet moment
        (everything journaled went through the core, everything released was sent)."""
        journal = self.source.journal
        if self.checkpoint_dir is None or journal is None or now < self._next_checkpoint:
            return False
        if not self.source.settled:
            return False
        with journal.lock:
            if self.source.fed_live != journal.recorded:
                return False  # a datagram is between the journal and the core
            position = journal.next_seq
        checkpoint.save(self.checkpoint_dir, checkpoint.Checkpoint(
            self.take_start, position, self.produced, self.source.core.state()))
        self.checkpoints += 1
        self._next_checkpoint = now + self.checkpoint_interval_s
        return True

    def reset(self) -> None:
        self.source.reset()
        self.frames_sent = 0
        self._gaps_reported.clear()
        if self.stage is not None:
            self.start_take()
            self._remember()

    def ledger(self) -> CaptureCounts:
        led = from_parts(CaptureCounts, self.source.ledger())
        led = replace(led, human_frames_sent=self.frames_sent, session_id=self.source.core.session_id)
        if self.stage is not None:
            journal = self.source.journal
            assert journal is not None
            snapshot = durable_counts(self.stage.snapshot())
            led = replace(led, input_pending=led.input_pending + self.stage.unacked, durable=replace(
                snapshot, log_bytes=snapshot.log_bytes + journal.log.disk_bytes(), journal_next=journal.next_seq,
                take_start=self.take_start, resumed=self.restarts, checkpoints=self.checkpoints))
        return led

    def report_gaps(self, bus: Bus) -> None:
        """Publish each newly recorded missing range once, per performer, per path and merged."""
        for performer in self.source.core.performers.values():
            merger = performer.merger
            ledgers = {"merged": merger.merged, **{str(p): s.ledger for p, s in merger.paths.items()}}
            for path, ledger in ledgers.items():
                key = f"{performer.index}:{path}"
                done = self._gaps_reported.get(key, 0)
                for lo, hi in ledger.missing_ranges[done:]:
                    bus.publish(gaps_subject(performer.index), {"service": "capture", "path": path, "range": [lo, hi],
                                               "performer": performer.index})
                self._gaps_reported[key] = len(ledger.missing_ranges)


@dataclass
class CaptureLoop:
    """Capture's part of the stage loop: datagrams in, frames out, gap reports, checkpoints."""

    service: CaptureService
    links: Links
    bus: Callable[[], Bus | None]
    exit_on_idle: float = 0.0

    def step(self) -> bool:
        service = self.service
        if self.links.durable is not None:  # after the last pump: what was released is sent
            service.maybe_checkpoint(time.monotonic())
        service.step(0.05)  # durable: ACKs and HELLOs are read at least every 50 ms
        bus = self.bus()
        if bus is not None:
            service.report_gaps(bus)
        idle = time.monotonic() - service.source.last_datagram
        return not (self.exit_on_idle > 0 and service.started and idle > self.exit_on_idle)

    def heartbeat(self) -> CaptureCounts:
        return self.service.ledger()

    def reset(self) -> None:
        self.service.reset()

    def begin_drain(self, args: dict[str, Any]) -> None:
        self.service.drain(float(args.get("quiet_s", 0.3)))
        bus = self.bus()
        if bus is not None:
            self.service.report_gaps(bus)

    def drained(self) -> bool:
        """begin_drain returns once the take's END_OF_STREAM is sent; durable, the drain answers
        once retarget has acknowledged all of it too (its input_pending counted what it had not:
        a starved retarget made a drained take "not conserved: frames still pending")."""
        return self.links.unacked == 0

    def finish(self) -> None:
        service = self.service
        service.source.close()
        service.send_ready()
        if self.links.durable is None:
            service.sender.send_end()
        else:  # the take goes on when capture is back: a restart resumes it from the journal
            self.links.durable.pump()


def main(argv: list[str] | None = None) -> int:
    settings = parse_settings(CaptureSettings.from_args, build_parser(), argv)
    if settings is None:
        return 2
    with Stage("capture", settings.stage, reasons=(*source_reject_reasons(settings.source), "source_not_allowed"),
               status_interval=settings.status_interval, status_line=status_line) as stage:
        journal = None
        if settings.stage.state_dir is not None:
            journal = RawJournal(settings.stage.state_dir, settings.stage.log)
            stage.exits.callback(journal.close)
        try:
            links = stage.open_links(output=durable.LinkSpec(settings.output, MessageType.HUMAN_FRAME, len(GMR_BODIES),
                                                             kind="fanout" if settings.output_fanout else "link"),
                                     log_config=replace(settings.stage.log, retain_bytes=0),
                                     output_linger_ms=int(settings.shutdown_wait * 1000))
        except StageError as exc:
            return stage.fail(str(exc))
        source = make_source(settings, journal)
        durability = (Durability(links.durable, settings.stage.state_dir, settings.checkpoint_s)
                      if links.durable is not None else None)
        service = CaptureService(source, links.tx, metrics=stage.metrics, tracer=stage.tracer, durability=durability)
        if durability is not None:
            service.resume()  # before the sockets are read: the journal's take first, in order
        try:
            source.open()
        except OSError as exc:
            return stage.fail(f"cannot bind UDP {settings.host}:{settings.ports}: {exc}")
        inputs = [f"tcp client of {settings.axis[0]}:{settings.axis[1]}"] if settings.axis else []
        inputs += [f"udp {settings.ports}"] if settings.ports else []
        log.info("capture %s on %s -> %s%s", source.name, " + ".join(inputs), settings.output,
                 f" (durable, state in {settings.stage.state_dir})" if links.durable is not None else "")
        return stage.run(CaptureLoop(service, links, lambda: stage.bus, settings.exit_on_idle))


if __name__ == "__main__":
    sys.exit(main())
