"""ZeroMQ links with the lossless settings (docs/architecture.md) and the MotionFrameHeader envelope.

PUSH/PULL, blocking send, SNDHWM = RCVHWM = 10000, LINGER = -1, no CONFLATE, no DONTWAIT: when a
consumer is slow the sender blocks and latency grows; nothing is dropped. ZeroMQ heartbeats on
every connection find a peer that vanished unheard (another host's reboot).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import zmq

from mocapline.core.header import (
    TOPICS,
    HeaderError,
    MessageType,
    MotionFrameHeader,
    decode_frame,
    encode_frame,
)

HWM = 10_000
# ZeroMQ heartbeats on every connection: a PING every 2 s. A connection whose far end vanished
# without a word (its machine powered off and back, or restarted while its cable was out) is found
# dead as soon as a PING is refused, and made again; without them a socket that only receives (a
# PULL) never writes, never learns, and waits for ever. A peer silent for 60 s (the cable still
# out) is disconnected too; a shorter cut is ridden out by TCP and nothing is resent.
HEARTBEAT_IVL_MS = 2_000
HEARTBEAT_TIMEOUT_MS = 60_000


def keep_alive(sock: zmq.Socket) -> None:
    """ZeroMQ heartbeats on ``sock`` (before it binds or connects); see HEARTBEAT_IVL_MS."""
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    sock.setsockopt(zmq.HEARTBEAT_TTL, HEARTBEAT_TIMEOUT_MS)


def now_us() -> int:
    return time.time_ns() // 1000


def lossless_socket(
    ctx: zmq.Context, kind: int, endpoint: str, *, bind: bool, curve: dict[str, Any] | None = None
) -> zmq.Socket:
    """A socket with the lossless options; ``curve`` socket attributes (keys) are set before it
    binds or connects. The socket is closed if binding or connecting fails."""
    sock = ctx.socket(kind)
    try:
        sock.setsockopt(zmq.SNDHWM, HWM)
        sock.setsockopt(zmq.RCVHWM, HWM)
        sock.setsockopt(zmq.LINGER, -1)
        keep_alive(sock)
        for name, value in (curve or {}).items():
            setattr(sock, name, value)
        if bind:
            sock.bind(endpoint)
        else:
            sock.connect(endpoint)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


class FrameSink(Protocol):
    """What a stage sends its frames through: a FrameSender on a plain link, or a
    ``mocapline.core.durable.DurableOutput`` that writes them to the stage's log first."""

    def send(self, payload: bytes, *, capture_timestamp_us: int) -> Any: ...

    def send_end(self, payload: bytes = b"") -> None: ...

    def writable(self, timeout_ms: int = 0) -> bool: ...

    @property
    def next_frame_id(self) -> int: ...


def _random_epoch() -> int:
    import random

    return random.randrange(1, 1 << 16)


class FrameSource(Protocol):
    """What a stage reads its input from: a plain PULL link (:class:`FrameReceiver`) or a durable
    stage's acknowledged one (``ReliableReceiver``). Rejected messages are counted in ``rejects``."""

    rejects: Counter[str]

    def recv(self, timeout_ms: int) -> Received | None: ...


_EVENTS, _POLLIN, _POLLOUT = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.POLLOUT)  # plain ints: no enum math


def ready(sock: zmq.Socket, *, out: bool = False) -> bool:
    """Whether ``sock`` can receive (or with ``out``, send) now, from ZMQ_EVENTS: pyzmq's
    ``Socket.poll`` builds a Poller per call, which costs more than a frame's checks (bench cost)."""
    return bool(int(sock.get(_EVENTS)) & (_POLLOUT if out else _POLLIN))


class SendInterrupted(Exception):
    """A plain link's send gave up: the process is stopping and no consumer takes the frame."""


@dataclass
class FrameSender:
    """Sends one message type on a PUSH socket, numbering messages +1 each (END_OF_STREAM too).
    Its numbering starts at 0 with every process, so each instance puts a new random 16-bit
    ``epoch`` in the header: a receiver tells a restart from a jump back (docs/protocol.md)."""

    socket: zmq.Socket
    message_type: MessageType
    joint_count: int
    next_frame_id: int = 0
    epoch: int = field(default_factory=_random_epoch)
    # Set when the process is stopping (SIGTERM): a send waiting for a consumer that is gone gives
    # up (SendInterrupted) instead of holding the process until it is killed.
    stop: threading.Event | None = None

    def _send(self, parts: tuple[bytes, bytes]) -> None:
        if self.stop is not None and not ready(self.socket, out=True):
            while not self.socket.poll(100, zmq.POLLOUT):
                if self.stop.is_set():
                    raise SendInterrupted(f"no consumer took frame {self.next_frame_id}")
        self.socket.send_multipart(parts)

    def send(self, payload: bytes, *, capture_timestamp_us: int) -> int:
        frame_id = self.next_frame_id
        frame = encode_frame(
            self.message_type,
            frame_id,
            payload,
            capture_timestamp_us=capture_timestamp_us,
            send_timestamp_us=now_us(),
            joint_count=self.joint_count,
            epoch=self.epoch,
        )
        self._send((TOPICS[self.message_type], frame))
        self.next_frame_id = frame_id + 1
        return frame_id

    def writable(self, timeout_ms: int = 0) -> bool:
        """Whether a send would go through without blocking (a consumer is connected and keeping up)."""
        if ready(self.socket, out=True):  # the common case
            return True
        return bool(timeout_ms) and bool(self.socket.poll(timeout_ms, zmq.POLLOUT))

    def send_end(self, payload: bytes = b"") -> None:
        frame = encode_frame(
            MessageType.END_OF_STREAM,
            self.next_frame_id,
            payload,
            capture_timestamp_us=0,
            send_timestamp_us=now_us(),
            joint_count=0,
            epoch=self.epoch,
        )
        self._send((TOPICS[MessageType.END_OF_STREAM], frame))
        self.next_frame_id += 1  # frame_id is +1 per message, END_OF_STREAM included


@dataclass
class Received:
    header: MotionFrameHeader
    payload: memoryview


@dataclass
class FrameReceiver:
    """Validates every message on a PULL socket; rejects are counted by reason, never raised."""

    socket: zmq.Socket
    message_type: MessageType
    joint_count: int | None
    rejects: Counter[str] = field(default_factory=Counter)
    _poll: zmq.Poller | None = field(default=None, init=False, repr=False)

    def _poller(self) -> zmq.Poller:
        """One Poller for the socket's life: ``Socket.poll`` builds and registers a new one on every
        call, which is most of an idle wait's cost in a loop that waits per frame."""
        if self._poll is None:
            self._poll = zmq.Poller()
            self._poll.register(self.socket, zmq.POLLIN)
        return self._poll

    def recv(self, timeout_ms: int | None = None) -> Received | None:
        """The next valid message, or None on timeout / a counted reject / end of stream marker.

        End-of-stream messages are returned too (header.message_type tells).
        """
        if timeout_ms is not None and not self._poller().poll(timeout_ms):
            return None
        # Copying receive: for messages this small it is cheaper than zero-copy frames.
        return validate_message(self.socket.recv_multipart(), self.message_type, self.joint_count, self.rejects)


def validate_message(
    parts: list[bytes], message_type: MessageType, joint_count: int | None, rejects: Counter[str]
) -> Received | None:
    """A received (topic, frame) message checked against the link's type and joint count; a
    reject is counted in ``rejects`` by reason and gives None. END_OF_STREAM passes too."""
    if len(parts) != 2:
        rejects["bad_parts"] += 1
        return None
    topic, body = parts
    expected = None if topic == TOPICS[MessageType.END_OF_STREAM] else message_type
    try:
        header, payload = decode_frame(
            body,
            expected_type=expected,
            expected_joint_count=None if expected is None else joint_count,
        )
    except HeaderError as exc:
        rejects[exc.reason] += 1
        return None
    if topic != TOPICS[header.message_type]:
        rejects["wrong_topic"] += 1
        return None
    return Received(header, payload)


# --- CURVE: encryption and authentication for a link that crosses hosts ---------------------------
#
# Keys come from `mocapline keys DIR` (zmq.auth certificate files). The bound side (the streamer)
# holds the server secret certificate and a directory of the public certificates of the clients it
# admits; a ZAP authenticator thread rejects every other client's handshake, so a peer without an
# admitted key never becomes a PUSH destination and receives nothing (it also cannot take frames
# away from the real consumers). The connecting side (viewer, robot) holds its own secret
# certificate and the server's public one. Empty paths mean off (the default, for loopback).


def load_curve_keypair(path: str) -> tuple[bytes, bytes]:
    """(public, secret) Z85 keys from a ``.key_secret`` certificate; raises if it has no secret."""
    import zmq.auth

    public, secret = zmq.auth.load_certificate(path)
    if not secret:
        raise ValueError(f"{path}: no secret key in this certificate (pass the .key_secret file)")
    return public, secret


def load_curve_public(path: str) -> bytes:
    """The Z85 public key from a ``.key`` (or ``.key_secret``) certificate."""
    import zmq.auth

    public, _ = zmq.auth.load_certificate(path)
    return public


def add_curve_server_options(parser: Any) -> None:
    """The flags of a service that binds a CURVE link (env vars MOCAPLINE_CURVE_...)."""
    parser.add_argument("--curve-server-key", default="",
                        help="CURVE on the output link: this server's secret certificate (.key_secret from "
                             "`mocapline keys`); '' = off")
    parser.add_argument("--curve-clients", default="",
                        help="with --curve-server-key: directory of the public certificates (*.key) of the "
                             "clients admitted; any other client receives nothing")


def add_curve_client_options(parser: Any) -> None:
    """The flags of a service that connects to a CURVE link."""
    parser.add_argument("--curve-client-key", default="",
                        help="CURVE on the input link: this client's secret certificate (.key_secret); '' = off")
    parser.add_argument("--curve-server-public", default="",
                        help="with --curve-client-key: the server's public certificate (server.key)")


def start_curve_authenticator(ctx: zmq.Context, clients_dir: str) -> Any:
    """A running ZAP authenticator admitting the CURVE clients whose public certificates are in
    ``clients_dir`` (read once: restart the service after adding a client)."""
    import logging
    import os

    from zmq.auth.thread import ThreadAuthenticator

    if not os.path.isdir(clients_dir):
        raise ValueError(f"--curve-clients {clients_dir!r} is not a directory")
    if not any(name.endswith(".key") for name in os.listdir(clients_dir)):
        raise ValueError(f"--curve-clients {clients_dir!r} holds no client certificate (*.key): nobody could connect")
    auth = ThreadAuthenticator(ctx, log=logging.getLogger("mocapline.curve"))
    auth.start()
    auth.configure_curve(domain="*", location=clients_dir)
    return auth


def server_link(
    ctx: zmq.Context, kind: int, endpoint: str, *, curve_server_key: str = "", curve_clients: str = ""
) -> tuple[zmq.Socket, Any]:
    """A bound lossless socket, with CURVE when ``curve_server_key`` is set.

    Returns (socket, authenticator or None); stop the authenticator (``.stop()``) before
    terminating the context. Raises ValueError for an incomplete or unreadable configuration and
    zmq.ZMQError when the endpoint cannot be bound.
    """
    if not curve_server_key:
        if curve_clients:
            raise ValueError("--curve-clients needs --curve-server-key")
        return lossless_socket(ctx, kind, endpoint, bind=True), None
    if not curve_clients:
        raise ValueError("--curve-server-key needs --curve-clients (the admitted clients' public certificates)")
    public, secret = load_curve_keypair(curve_server_key)
    auth = start_curve_authenticator(ctx, curve_clients)  # before bind: no handshake without ZAP
    try:
        sock = lossless_socket(
            ctx, kind, endpoint, bind=True,
            curve={"curve_publickey": public, "curve_secretkey": secret, "curve_server": True},
        )
    except BaseException:
        auth.stop()
        raise
    return sock, auth


def client_link(
    ctx: zmq.Context, kind: int, endpoint: str, *, curve_client_key: str = "", curve_server_public: str = "",
    routing_id: bytes = b"",
) -> zmq.Socket:
    """A connected lossless socket, with CURVE when ``curve_client_key`` is set (and ``routing_id``
    as its ZeroMQ identity when given)."""
    options: dict[str, Any] = {"routing_id": routing_id} if routing_id else {}
    if not curve_client_key:
        if curve_server_public:
            raise ValueError("--curve-server-public needs --curve-client-key")
        return lossless_socket(ctx, kind, endpoint, bind=False, curve=options)
    if not curve_server_public:
        raise ValueError("--curve-client-key needs --curve-server-public (the server's public certificate)")
    public, secret = load_curve_keypair(curve_client_key)
    server = load_curve_public(curve_server_public)
    return lossless_socket(
        ctx, kind, endpoint, bind=False,
        curve={**options, "curve_publickey": public, "curve_secretkey": secret, "curve_serverkey": server},
    )
