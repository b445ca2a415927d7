"""One pipeline stage as a process: its links, bus, metrics, tracer, control commands and teardown.

A service supplies a :class:`StageHandler` (what it does with a message, its heartbeat, reset and
drain) and its own flags; :class:`Stage` does the rest the same way for every stage::

    settings = parse_settings(build_parser(), RetargetSettings, argv)
    with Stage("retarget", settings.stage, reasons=...) as stage:
        links = stage.open_links(input=..., output=...)
        return stage.run(RetargetHandler(..., links))

Everything the stage opens is closed by one ``ExitStack``, whatever the exit (an error while
opening included), in the reverse order of opening: the handler's ``finish`` and the final counts
first, then bus, metrics, tracer, links, and the ZeroMQ context last.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import zmq

from mocapline.core import durable
from mocapline.core.bus import DEFAULT_URL, Bus, ControlRequest
from mocapline.core.counters import RetargetCounts, StageCounts, StreamerCounts, durable_counts, to_json
from mocapline.core.lifecycle import add_service_arguments, setup_logging, stop_on_signals
from mocapline.core.metrics import DEFAULT_HOST as METRICS_HOST
from mocapline.core.metrics import ServiceMetrics
from mocapline.core.metrics import add_arguments as add_metrics_arguments
from mocapline.core.metrics import start as start_metrics
from mocapline.core.options import EnvArgumentParser, argv
from mocapline.core.profiling import LoopProfile
from mocapline.core.segmentlog import LogConfig
from mocapline.core.tracing import StageTracer
from mocapline.core.tracing import setup as setup_tracing
from mocapline.core.transport import (
    FrameReceiver,
    FrameSender,
    FrameSink,
    FrameSource,
    SendInterrupted,
    lossless_socket,
)

log = logging.getLogger("mocapline.core.stage")

SocketFactory = Callable[[zmq.Context], zmq.Socket]


class StageError(RuntimeError):
    """A stage cannot start (a port taken, a bad endpoint): the message is for the person."""


@dataclass(frozen=True)
class StageSettings:
    """The flags every stage shares (each with its ``MOCAPLINE_*`` variable)."""

    nats: str = DEFAULT_URL
    log_level: str = "INFO"
    metrics_port: int = 0
    metrics_host: str = METRICS_HOST
    state_dir: Path | None = None
    log: LogConfig = LogConfig()
    window: int = durable.DEFAULT_WINDOW

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> StageSettings:
        return cls(
            nats=args.nats,
            log_level=args.log_level,
            metrics_port=int(args.metrics_port),
            metrics_host=str(args.metrics_host),
            state_dir=args.state_dir,
            log=durable.log_config(args),
            window=args.window,
        )

    @property
    def durable(self) -> bool:
        return self.state_dir is not None

    def to_argv(self, parser: EnvArgumentParser) -> list[str]:
        """The shared flags that give these settings, against ``parser``'s defaults (the service's)."""
        log, mb = self.log, 1024 * 1024
        return argv(parser, {"nats": self.nats, "log_level": self.log_level, "metrics_port": self.metrics_port,
                             "metrics_host": self.metrics_host, "state_dir": self.state_dir, "fsync": log.fsync,
                             "segment_mb": log.max_segment_bytes / mb, "segment_age_s": log.max_segment_age_s,
                             "retain_mb": log.retain_bytes / mb, "window": self.window})


def add_stage_arguments(parser: Any, name: str, *, nats_help: str, retain_mb: int = 0) -> None:
    """The shared flags: --nats, --log-level, durable mode's, --metrics-port/--metrics-host."""
    add_service_arguments(parser, nats_help=nats_help)
    durable.add_arguments(parser, retain_mb=retain_mb)
    add_metrics_arguments(parser, name)


@dataclass
class Links:
    """A stage's input and output, plain or durable; ``durable`` is set in durable mode."""

    source: FrameSource | None = None
    sink: FrameSink | None = None
    durable: durable.DurableStage | None = None

    @property
    def rx(self) -> FrameSource:
        if self.source is None:
            raise RuntimeError("this stage has no input link")
        return self.source

    @property
    def tx(self) -> FrameSink:
        if self.sink is None:
            raise RuntimeError("this stage has no output link")
        return self.sink

    def done(self, in_seq: int, state: dict[str, Any]) -> None:
        """Durable mode: the input ``in_seq`` is processed and ``state`` remembered (one record)."""
        if self.durable is not None:
            self.durable.done(in_seq, state)

    def remember(self, state: dict[str, Any]) -> None:
        """Durable mode: ``state`` remembered at the current input position (after a reset)."""
        if self.durable is not None and self.durable.rx is not None:
            self.durable.done(self.durable.rx.last, state)

    @property
    def unacked(self) -> int:
        return self.durable.unacked if self.durable is not None else 0


class StageHandler(Protocol):
    """What a service supplies to :meth:`Stage.run`."""

    def step(self) -> bool:
        """Take and process what is waiting, blocking a few ms at most; False ends the run."""
        ...

    def heartbeat(self) -> StageCounts:
        """The stage's counters (the 1 Hz heartbeat, the control answers, the final line)."""
        ...

    def reset(self) -> None:
        """Start a new take: counters back to zero."""
        ...

    def begin_drain(self, args: dict[str, Any]) -> None:
        """A drain was asked for (the end of a take); capture flushes here."""
        ...

    def drained(self) -> bool:
        """Everything of the take has passed through this stage (and been delivered)."""
        ...

    def finish(self) -> None:
        """The run is over: send or flush what is held."""
        ...


class Stage:
    """A running stage's resources; see the module docstring."""

    def __init__(self, name: str, settings: StageSettings, *, reasons: Iterable[str] = (),
                 status_interval: float = 0.0, status_line: Callable[[Any], str] | None = None,
                 bus_name: str = "", advertise_host: str = "") -> None:
        """``bus_name``: the name on NATS (heartbeat and control subjects) when it is not ``name``
        (retarget workers: ``retarget.<worker>``; the metrics keep the stage's name).
        ``advertise_host``: the address other hosts reach this stage at (a worker's
        ``--advertise-host``), told in the heartbeat beside an automatic /metrics port."""
        setup_logging(settings.log_level)
        self.name = name
        self.bus_name = bus_name or name
        self.settings = settings
        self.advertise_host = advertise_host
        self.status_interval = status_interval
        self.status_line = status_line
        self.exits = ExitStack()
        self.stop = stop_on_signals()
        self.ctx = zmq.Context()
        self.exits.callback(self.ctx.term)
        self.links = Links()
        self.metrics: ServiceMetrics = start_metrics(name, settings.metrics_port, settings.metrics_host,
                                                     reasons=reasons)
        self.exits.callback(self.metrics.close)
        self.tracer: StageTracer | None = setup_tracing(name)
        if self.tracer is not None:
            self.exits.callback(self.tracer.shutdown)
        self.bus: Bus | None = None

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.exits.close()

    def fail(self, message: str, code: int = 1) -> int:
        print(f"mocapline {self.name}: {message}", file=sys.stderr)
        return code

    # --- links ---

    def open_links(
        self,
        *,
        input: durable.LinkSpec | None = None,
        output: durable.LinkSpec | None = None,
        plain_input: SocketFactory | None = None,
        plain_output: SocketFactory | None = None,
        durable_output: bool = True,
        log_config: LogConfig | None = None,
        output_linger_ms: int = 30_000,
    ) -> Links:
        """Open the stage's links: reliable ones in durable mode, PULL (connect) / PUSH (bind)
        otherwise. ``plain_input`` / ``plain_output`` make the plain sockets instead (CURVE);
        ``durable_output=False`` keeps a plain output in durable mode (a consumer that does not
        acknowledge). Raises :class:`StageError` with the endpoint that failed."""
        links = self.links
        try:
            if self.settings.state_dir is not None and (input is not None or (output is not None and durable_output)):
                links.durable = durable.DurableStage(
                    self.ctx, self.settings.state_dir, log_config or self.settings.log,
                    input=input, output=output if durable_output else None, window=self.settings.window,
                )
                self.exits.callback(links.durable.close)
                links.source = links.durable.rx if input is not None else None
                links.sink = links.durable.out if output is not None and durable_output else None
            if input is not None and links.source is None:
                sock = plain_input(self.ctx) if plain_input else lossless_socket(self.ctx, zmq.PULL, input.endpoint,
                                                                                 bind=False)
                self.exits.callback(sock.close, 0)
                links.source = FrameReceiver(sock, input.message_type, input.joint_count)
            if output is not None and links.sink is None:
                sock = plain_output(self.ctx) if plain_output else lossless_socket(self.ctx, zmq.PUSH,
                                                                                   output.endpoint, bind=True)
                self.exits.callback(sock.close, output_linger_ms)
                links.sink = FrameSender(sock, output.message_type, output.joint_count or 0, stop=self.stop)
        except (zmq.ZMQError, ValueError, OSError) as exc:
            where = output.endpoint if output is not None else input.endpoint if input is not None else "?"
            raise StageError(f"cannot open {where}: {exc}") from exc
        return links

    # --- the loop ---

    def heartbeat(self, handler: StageHandler) -> StageCounts:
        hb = handler.heartbeat()
        if self.metrics.auto_port:  # where Prometheus finds this replica (the auditor's --sd-port)
            host = self.advertise_host or self.settings.metrics_host
            if host not in ("", "0.0.0.0", "::"):  # else the auditor's own idea (one host: loopback)
                hb = replace(hb, metrics_port=self.metrics.port, metrics_host=host)
            else:
                hb = replace(hb, metrics_port=self.metrics.port)
        stage = self.links.durable
        if stage is not None and hb.durable is None:
            hb = replace(hb, durable=durable_counts(stage.snapshot()))
            if isinstance(hb, RetargetCounts | StreamerCounts):
                hb = replace(hb, pending=hb.pending + stage.unacked)
        return hb

    def _answer(self, req: ControlRequest, handler: StageHandler, counts: Callable[[], StageCounts]) -> None:
        """A control request other than drain: do it, answer with the counts after it."""
        if req.cmd == "reset":
            self.metrics.sync(counts())  # the take's counts into the counters first
            handler.reset()
        elif req.cmd == "shutdown":
            self.stop.set()
        elif req.cmd == "estop":  # a handler that drives motors stops them (the robot bridge)
            estop = getattr(handler, "estop", None)
            if estop is None:
                req.answer({"error": f"{self.name} has nothing to e-stop"})
                return
            estop(str(req.args.get("reason", "nats")))
        req.answer(to_json(self.metrics.synced(counts())))

    def run(self, handler: StageHandler) -> int:
        """Step the handler until stopped (signal, ``shutdown``, or the handler), answering
        control requests between steps; then finish and print the final counts as one JSON line."""

        def counts() -> StageCounts:
            return self.heartbeat(handler)

        if self.settings.nats:
            self.bus = Bus(self.settings.nats, self.bus_name, lambda: to_json(counts())).start()
            self.exits.callback(self.bus.stop)
        drains: list[ControlRequest] = []
        deadline = 0.0
        next_status = time.monotonic() + self.status_interval
        # What start-up made (the robot model, the IK, imports: ~80k objects) lives as long as the
        # process: out of the collector's reach, a full collection no longer walks it (~0.2 s each,
        # a latency spike when one comes during a take).
        gc.collect()
        gc.freeze()
        profile = LoopProfile(self.bus_name).start()
        try:
            while not self.stop.is_set():
                if not handler.step():
                    break
                if self.links.durable is not None:
                    self.links.durable.pump()
                self.metrics.maybe_sync(counts)
                for req in self.bus.poll_requests() if self.bus is not None else ():
                    if req.cmd == "drain":
                        handler.begin_drain(req.args)
                        drains.append(req)
                        deadline = time.monotonic() + float(req.args.get("timeout", 30)) - 1
                    else:
                        self._answer(req, handler, counts)
                if drains and (handler.drained() or time.monotonic() > deadline):
                    final = to_json(self.metrics.synced(counts()))
                    for req in drains:
                        req.answer(final)
                    drains.clear()
                now = time.monotonic()
                if self.status_line is not None and self.status_interval > 0 and now >= next_status:
                    print(self.status_line(counts()), file=sys.stderr, flush=True)
                    next_status = now + self.status_interval
        except SendInterrupted as exc:
            log.warning("stopping while the output had no consumer (%s)", exc)
        finally:
            try:
                handler.finish()
            except SendInterrupted as exc:  # (plain link: what was not sent is not sent)
                log.warning("stopping while the output had no consumer (%s)", exc)
            print(json.dumps(to_json(self.metrics.synced(counts()))), flush=True)
            profile.stop()
        return 0
