"""Who retargets which performer: the assignment of performers to retarget workers, held in NATS
JetStream key-value buckets (the nats-server runs with ``-js``), read and written synchronously
from a stage loop.

Two buckets:

- ``mocapline_workers`` (entries expire after ``WORKER_TTL_S``): one key per live worker, put
  every second by the worker itself, ``{"endpoint": "tcp://host:port"}`` (its RobotFrame port,
  where the streamer connects). A worker killed with -9 disappears from it within the TTL.
- ``mocapline_performers`` (kept): ``w.<name>`` per worker that ever joined (until the others have
  taken over its performers and told capture to forget it: a worker that died is known here after
  its announcement expired), and one key per performer, ``p<avatar_index>`` =
  :class:`Claim` - its owner, and its *resume position*: the capture epoch and log position
  (frame_id) through which every frame of the performer has reached the streamer, and the last
  pose (the IK's warm start for whoever continues). Writes are compare-and-set on the key's
  revision, so exactly one worker wins a claim, and a worker that lost a performer (it hung, the
  others took over) finds out at its next write instead of overwriting the new owner.

A worker acknowledges capture only up to the positions it has written here, so capture's log
still holds everything after any performer's stored position; the worker that takes over rewinds
to it (``ReliableReceiver.rewind``). The data path never blocks for long on NATS: each call has a
short timeout, and while NATS is away acknowledgements wait (frames wait on capture's disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Coroutine
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

log = logging.getLogger("mocapline.core.assign")

WORKERS_BUCKET = "mocapline_workers"
PERFORMERS_BUCKET = "mocapline_performers"
WORKER_TTL_S = 3.0
RETRY_S = 2.0
T = TypeVar("T")


@dataclass
class Claim:
    """One performer's owner and resume position (the value of key ``p<avatar_index>``)."""

    owner: str
    epoch: str = ""  # capture's log epoch (hex) the position belongs to; "" = none yet
    seq: int = -1  # every frame of the performer with frame_id <= seq is at the streamer
    qpos: list[float] | None = None  # the last pose solved (warm start for the next owner)
    frames: int = 0  # the performer's frames retargeted through seq, by every owner so far (the ledger)
    name: str = ""  # its avatar name (the height configured for it)
    branches: list[float] | None = None  # its shoulders' branches at the gimbal pole (retarget's shoulder_pole)

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Claim:
        d = json.loads(data)
        return cls(str(d["owner"]), str(d.get("epoch", "")), int(d.get("seq", -1)), d.get("qpos"),
                   int(d.get("frames", 0)), str(d.get("name", "")), d.get("branches"))


def performer_key(avatar_index: int) -> str:
    return f"p{avatar_index}"


MEMBER_PREFIX = "w."


def member_key(worker: str) -> str:
    return MEMBER_PREFIX + worker


class Registry:
    """A synchronous face over the two buckets (its own NATS connection on a background asyncio
    loop). Every call returns None / an empty result when NATS does not answer in ``timeout_s``."""

    def __init__(self, url: str, *, timeout_s: float = 1.0, worker_ttl_s: float = WORKER_TTL_S) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.worker_ttl_s = worker_ttl_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nats-kv", daemon=True)
        self._thread.start()
        self._nc: Any = None
        self._workers: Any = None
        self._performers: Any = None
        self._retry_at = 0.0

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T | None:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout_s or self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - NATS away or slow: the caller retries later
            fut.cancel()
            log.debug("nats kv: %s: %s", type(exc).__name__, exc)
            return None

    async def _open(self) -> bool:
        import nats

        if self._nc is None or not self._nc.is_connected:  # (re)connect here: one connection at a time
            if self._nc is not None and not self._nc.is_closed:
                with contextlib.suppress(Exception):
                    await self._nc.close()
            self._nc = await nats.connect(self.url, name="mocapline-assign", allow_reconnect=False,
                                          connect_timeout=1)
        js = self._nc.jetstream()
        self._workers = await js.create_key_value(bucket=WORKERS_BUCKET, ttl=self.worker_ttl_s, history=1)
        self._performers = await js.create_key_value(bucket=PERFORMERS_BUCKET, history=1)
        return True

    def ready(self) -> bool:
        """Connected and both buckets open (connects on the first call; while NATS is away, tries
        again at most every ``RETRY_S`` and answers False at once in between)."""
        if self._performers is not None and self._nc is not None and self._nc.is_connected:
            return True
        now = time.monotonic()
        if now < self._retry_at:
            return False
        if self._call(self._open(), 3.0):
            return True
        self._retry_at = now + RETRY_S
        return False

    def close(self) -> None:
        if self._nc is not None:
            self._call(self._nc.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(2)

    # --- workers ---

    def announce(self, worker: str, info: dict[str, Any]) -> bool:
        if not self.ready():
            return False
        return self._call(self._workers.put(worker, json.dumps(info).encode())) is not None

    def withdraw(self, worker: str) -> None:
        if self.ready():
            self._call(self._workers.delete(worker))

    async def _entries(self, kv: Any) -> dict[str, tuple[bytes, int]]:
        from nats.js.errors import KeyNotFoundError, NoKeysError

        try:
            keys = await kv.keys()
        except NoKeysError:
            return {}
        out: dict[str, tuple[bytes, int]] = {}
        for key in keys:
            with contextlib.suppress(KeyNotFoundError):
                entry = await kv.get(key)
                if entry.value:
                    out[key] = (entry.value, entry.revision)
        return out

    def workers(self) -> dict[str, dict[str, Any]] | None:
        """The live workers and what they announced; None when NATS does not answer."""
        if not self.ready():
            return None
        got = self._call(self._entries(self._workers))
        return None if got is None else {k: json.loads(v) for k, (v, _) in got.items()}

    # --- performers ---

    def claims(self) -> dict[int, tuple[Claim, int]] | None:
        """Every performer's claim and its revision; None when NATS does not answer."""
        if not self.ready():
            return None
        got = self._call(self._entries(self._performers))
        if got is None:
            return None
        return {int(k[1:]): (Claim.decode(v), rev) for k, (v, rev) in got.items() if k.startswith("p")}

    def write(self, avatar_index: int, claim: Claim, revision: int | None) -> int | None:
        """Compare-and-set: create the key (``revision`` None) or replace exactly ``revision``.
        Returns the new revision, or None when someone else wrote first (or NATS is away)."""
        if not self.ready():
            return None
        key = performer_key(avatar_index)
        if revision is None:
            return self._call(self._performers.create(key, claim.encode()))
        return self._call(self._performers.update(key, claim.encode(), last=revision))

    def join(self, worker: str) -> bool:
        """Record ``worker`` as a member (kept after it dies, until ``leave``)."""
        if not self.ready():
            return False
        return self._call(self._performers.put(member_key(worker), b"1")) is not None

    def leave(self, worker: str) -> None:
        if self.ready():
            self._call(self._performers.delete(member_key(worker)))

    def members(self) -> set[str] | None:
        """Every worker that joined and has not left (live or dead); None when NATS does not answer."""
        if not self.ready():
            return None
        got = self._call(self._entries(self._performers))
        return None if got is None else {k[len(MEMBER_PREFIX):] for k in got if k.startswith(MEMBER_PREFIX)}

    def clear(self) -> None:
        """Forget every claim (a fresh take on a fresh capture log: tests, `mocapline up`)."""
        if self.ready():
            for key in (self._call(self._entries(self._performers)) or {}):
                self._call(self._performers.purge(key))
