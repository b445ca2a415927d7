"""A service's durable mode (``--state-dir``): its reliable input and output links and the one
record per input that makes "processed" and "remembered" a single step.

Loop of a stage in durable mode::

    msg = stage.rx.recv(timeout_ms)          # each input frame once, in order
    ... process; outputs go to stage.out.send(...) / stage.out.send_end() ...
    stage.done(msg.header.frame_id, counters)  # one append: input position + outputs + counters
    stage.pump()                              # send what the window allows, read ACKs/HELLOs

After a kill -9 the stage reopens its log: ``restored`` holds the counters of the last record,
the input link resumes after its input position, and the outputs nobody acknowledged are resent.
Both ends of a link must run in durable mode (the receiver asks the sender with HELLO; a sender
without ``--state-dir`` never answers, and the receiver says so in its log).

An output is one of (``LinkSpec.kind``): ``link``, one acknowledged receiver (between stages,
``ReliableSender``); ``fanout``, any number of named consumers on one ROUTER (the robot port,
``FanoutSender``, docs/protocol.md); ``push``, a PUSH fed from the log for consumers that cannot
acknowledge. In every kind the outputs are in the log before the input is acknowledged.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import zmq

from mocapline.core.consumer import ClientSettings, MocapClient
from mocapline.core.fanout import DEFAULT_MAX_BACKLOG, FanoutSender
from mocapline.core.header import MessageType
from mocapline.core.reliable import (
    DEFAULT_WINDOW,
    NO_EPOCH,
    ReliableReceiver,
    ReliableSender,
    receiver_sockets,
    sender_sockets,
)
from mocapline.core.segmentlog import FSYNC_POLICIES, LogConfig
from mocapline.core.stagelog import Output, StageLog, StageRecord
from mocapline.core.transport import server_link

log = logging.getLogger("mocapline.core.durable")


def add_arguments(parser: Any, *, retain_mb: int = 0) -> None:
    """--state-dir and the log settings (env MOCAPLINE_STATE_DIR, MOCAPLINE_FSYNC, ...)."""
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="durable mode: keep this service's logs here and run its links with ACKs and "
                             "resends, so a kill -9 and restart loses and doubles nothing (both ends of a "
                             "link need it); unset = plain PUSH/PULL")
    parser.add_argument("--fsync", choices=FSYNC_POLICIES, default="interval",
                        help="when logs are flushed to the disk: never (a killed process still loses "
                             "nothing; a power cut loses what the kernel held), interval (every 0.2 s), "
                             "always (every record; slowest); see mocapline/core/segmentlog.py")
    parser.add_argument("--segment-mb", type=float, default=64.0, help="start a new log segment past this size")
    parser.add_argument("--segment-age-s", type=float, default=600.0, help="start a new log segment past this age")
    parser.add_argument("--retain-mb", type=float, default=float(retain_mb),
                        help="remove the oldest log segments beyond this total; 0 = only when acknowledged")
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW,
                        help="frames sent and not yet acknowledged at most (the rest wait on disk)")


def log_config(args: Any) -> LogConfig:
    return LogConfig(
        max_segment_bytes=int(args.segment_mb * 1024 * 1024),
        max_segment_age_s=args.segment_age_s,
        fsync=args.fsync,
        retain_bytes=int(args.retain_mb * 1024 * 1024),
    )


class DurableOutput:
    """FrameSender's ``send``/``send_end``, gathering the outputs of the input being processed;
    they are written with it by ``DurableStage.done`` and sent by the stage's OutputLink."""

    def __init__(self, message_type: MessageType, stage_log: StageLog | None = None) -> None:
        self.message_type = message_type
        self.stage_log = stage_log
        self.pending: list[Output] = []

    @property
    def next_frame_id(self) -> int:
        """The frame_id the next output will have on the link (its position in the log)."""
        return (self.stage_log.next_seq if self.stage_log is not None else 0) + len(self.pending)

    def send(self, payload: bytes, *, capture_timestamp_us: int) -> None:
        self.pending.append(Output(self.message_type, payload, capture_timestamp_us))

    def send_end(self, payload: bytes = b"") -> None:
        self.pending.append(Output(MessageType.END_OF_STREAM, payload, 0))

    def writable(self, timeout_ms: int = 0) -> bool:
        return True

    def take(self) -> list[Output]:
        out, self.pending = self.pending, []
        return out


@dataclass
class LinkSpec:
    endpoint: str
    message_type: MessageType
    joint_count: int | None
    # "link": one acknowledged receiver (PUSH + ROUTER on port + 1000, between stages);
    # "fanout": any number of named acknowledged consumers on one ROUTER (the robot port,
    # mocapline/core/fanout.py; as an input: a named consumer of it, through mocapline.client);
    # "push" (output only): a plain PUSH fed from the log, for consumers that cannot acknowledge
    # (what they are handed is counted unconfirmed).
    kind: str = "link"
    curve_server_key: str = ""  # fanout / push output: CURVE server
    curve_clients: str = ""
    max_backlog: int = DEFAULT_MAX_BACKLOG
    name: str = ""  # fanout input: this consumer's name
    curve_client_key: str = ""  # fanout input: CURVE client
    curve_server_public: str = ""


class StagePosition:
    """A consumer's position kept in the stage's own log: each record holds its input's (epoch,
    seq), written before the input is acknowledged; nothing else to save."""

    def __init__(self, stage_log: StageLog) -> None:
        self.stage_log = stage_log

    def load(self) -> tuple[bytes, int] | None:
        last = self.stage_log.last
        return None if last is None else (last.in_epoch, last.in_seq)

    def save(self, epoch: bytes, frame_id: int) -> None:
        pass


class OutputLink(Protocol):
    """What a durable stage sends through: ReliableSender (one receiver) or FanoutSender."""

    def commit(self, record: StageRecord) -> None: ...

    def pump(self, timeout_ms: int = 0) -> int: ...

    def snapshot(self) -> dict[str, Any]: ...

    @property
    def unacked(self) -> int: ...

    @property
    def wake_socket(self) -> zmq.Socket | None:
        """The socket ACKs and HELLOs arrive on (a stage loop wakes on it), or None."""
        ...

    def close(self) -> None:
        """Write down what must survive (the sockets are the stage's to close)."""
        ...


class DurableStage:
    """One service's state directory, its reliable links and its record per input."""

    def __init__(
        self,
        ctx: zmq.Context,
        state_dir: Path,
        config: LogConfig,
        *,
        input: LinkSpec | None = None,
        output: LinkSpec | None = None,
        window: int = DEFAULT_WINDOW,
    ) -> None:
        self.stage_log = StageLog(state_dir, "stage", config, key_by_input=output is None)
        last = self.stage_log.last
        self.restored: dict[str, Any] | None = self.stage_log.state
        if self.stage_log.log.torn_bytes:
            log.warning("%s: cut %d bytes of a record torn by a crash", state_dir, self.stage_log.log.torn_bytes)
        self.sender: OutputLink | None = None
        self.out: DurableOutput | None = None
        self.rx: ReliableReceiver | None = None
        self.curve_auth: Any = None
        self._sockets_owned: list[zmq.Socket] = []
        if output is not None and output.kind == "link":
            data, control = sender_sockets(ctx, output.endpoint)
            self._sockets_owned += [data, control]
            self.sender = ReliableSender(data, control, self.stage_log, output.joint_count or 0, window=window)
        elif output is not None:
            sock, self.curve_auth = server_link(
                ctx, zmq.PUSH if output.kind == "push" else zmq.ROUTER, output.endpoint,
                curve_server_key=output.curve_server_key, curve_clients=output.curve_clients)
            self._sockets_owned.append(sock)
            self.sender = FanoutSender(sock, self.stage_log, output.joint_count or 0, window=window,
                                       max_backlog=output.max_backlog, push=output.kind == "push")
        if output is not None:
            self.out = DurableOutput(output.message_type, self.stage_log)
        self.client: Any = None
        if input is not None and input.kind == "fanout":
            self.client = MocapClient(
                ClientSettings(input.endpoint, name=input.name, joint_count=input.joint_count or 0,
                               message_type=input.message_type,
                               curve_client_key=input.curve_client_key,
                               curve_server_public=input.curve_server_public),
                store=StagePosition(self.stage_log), ctx=ctx)
            self.rx = self.client.rx
        elif input is not None:
            data, control = receiver_sockets(ctx, input.endpoint)
            self.rx = ReliableReceiver(
                data, control, input.message_type, input.joint_count,
                epoch=last.in_epoch if last is not None else NO_EPOCH,
                last=last.in_seq if last is not None else -1,
            )
            self._sockets_owned += [data, control]
            if self.wake_socket is not None:
                self.rx.wake_on(self.wake_socket)
        if last is not None:
            log.info("resuming from %s: input through %d, %d outputs written", state_dir, last.in_seq,
                     self.stage_log.next_seq)

    @property
    def wake_socket(self) -> zmq.Socket | None:
        """The output's socket that receives ACKs and HELLOs (None for a push output)."""
        return self.sender.wake_socket if self.sender is not None else None

    @property
    def in_epoch(self) -> bytes:
        return self.rx.epoch if self.rx is not None else NO_EPOCH

    def done(self, in_seq: int, state: dict[str, Any]) -> None:
        """The durable step for one input: its position, its outputs and the counters after it."""
        outputs = self.out.take() if self.out is not None else []
        record = StageRecord(self.in_epoch, in_seq, json.dumps(state, separators=(",", ":")).encode(), outputs)
        if self.sender is not None:
            self.sender.commit(record)
        else:
            self.stage_log.append(record)

    def pump(self, timeout_ms: int = 0) -> int:
        return self.sender.pump(timeout_ms) if self.sender is not None else 0

    def wait_delivered(self, timeout_s: float) -> bool:
        """Pump until every output is acknowledged (sleeping on the control socket, not spinning)
        or ``timeout_s`` passes; True when all were."""
        if self.sender is None:
            return True
        deadline = time.monotonic() + timeout_s
        wake = self.wake_socket
        while self.sender.unacked and time.monotonic() < deadline:
            if wake is not None:
                wake.poll(10)
            else:
                time.sleep(0.01)
            self.sender.pump()
        return self.sender.unacked == 0

    @property
    def unacked(self) -> int:
        return self.sender.unacked if self.sender is not None else 0

    def snapshot(self) -> dict[str, Any]:
        out: dict[str, Any] = {"log_bytes": self.stage_log.log.disk_bytes()}
        if self.rx is not None:
            out["input_link"] = self.rx.snapshot()
        if self.sender is not None:
            out["output_link"] = self.sender.snapshot()
        return out

    def close(self) -> None:
        if self.sender is not None:
            self.sender.close()
        if self.client is not None:
            self.client.close()
        for sock in self._sockets_owned:
            sock.close(linger=0)
        if self.curve_auth is not None:
            self.curve_auth.stop()
        self.stage_log.close()
