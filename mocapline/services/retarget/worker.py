"""`mocapline retarget --worker NAME`: one of N retarget processes, each owning some performers.

Capture runs with ``--output-fanout``: every worker is a named consumer (``retarget.<NAME>``) of
the one HumanFrame log and receives every frame; it retargets the frames of the performers it
owns (one IK state each, so a performer's frames stay in order) and passes over the others. Its
RobotFrames go out on its own acknowledged fan-out port, where the streamer connects (``mocapline
streamer --fan-in``); the port is announced in NATS (``mocapline.core.assign``).

Ownership and positions live in the NATS key-value buckets of ``mocapline.core.assign``:

- A performer nobody owns (new, or its owner's announcement expired: killed, hung, host gone) is
  claimed by compare-and-set: a new one by ``avatar_index % workers`` (sorted by name), an orphan
  by the least loaded (``deal``), so every worker computes the same deal from the same live set
  (a worker reading slowly still gets its share; one that hangs stops announcing and its
  performers become orphans).
- **Rebalancing** when a worker joins (``rebalance``): once the view is settled (every performer's
  owner live and announcing it), a worker owning more than its share hands the surplus over, one
  hand-over at a time per performer: it stops retargeting the performer, waits until the streamer
  has acknowledged every frame it made for it, then writes the claim over to the new owner with
  that resume position (compare-and-set); the new owner adopts it like a takeover (rewind, stored
  pose). One IK state at a time, nothing skipped; the old owner keeps capture's log held at that
  position until the new owner announces the performer.
- **Forgetting the dead**: every worker is a member (``w.<name>`` in the performers bucket). Once
  no claim names a dead member (its performers taken over and adopted), a worker asks capture
  to FORGET its consumer (capture's log no longer holds frames for it) and removes the member.
- **Taken for dead while alive**: a worker that did not run for longer than its announcement
  lives (a stalled machine, SIGSTOP) finds its performers taken over; at its next view of the
  claims it lets go of each one a claim gives to another owner, and a drain's final counts wait
  for such a view, so no performer is counted by two workers.
- Its resume position - the capture frame_id through which all its frames are at the streamer
  (the streamer acknowledged the RobotFrames) - is written to the claim every ``SYNC_S``, and the
  worker acknowledges capture only up to the lowest position it has written (and not past the
  first frame of a performer nobody has claimed yet). So capture's log keeps everything any
  performer may still need.
- The new owner rewinds its capture consumer to the stored position, starts the performer's IK
  from the stored pose, and sends from there on; frames the dead worker had sent already arrive
  twice at the streamer, which drops them by (segment, posture_index).
"""

from __future__ import annotations

import logging
import socket
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import zmq

from mocapline.core import durable, pb
from mocapline.core.assign import Claim, Registry
from mocapline.core.bodies import GMR_BODIES
from mocapline.core.counters import RetargetCounts, WorkerInfo
from mocapline.core.fanout import FanoutSender
from mocapline.core.frames import HumanFrame
from mocapline.core.header import MessageType
from mocapline.core.metrics import LINK_REJECT_REASONS
from mocapline.core.stage import Links, Stage, StageError

from .ik.retargeter import Retargeter
from .service import RetargetService, RetargetSettings, status_line

log = logging.getLogger("mocapline.retarget.worker")

SYNC_S = 0.2  # positions to NATS, deliveries from the streamer's ACKs
VIEW_S = 0.5  # live workers and claims read from NATS
ANNOUNCE_S = 1.0


@dataclass
class Owned:
    """A performer this worker retargets."""

    revision: int  # of its claim in NATS (compare-and-set)
    saved: int  # the resume position written there
    done: int  # the capture frame_id of its last frame retargeted here
    inflight: deque[tuple[int, int]] = field(default_factory=deque)  # (capture frame_id, output frame_id)


def rebalance(owners: dict[int, str], workers: list[str]) -> dict[int, str]:
    """Moves (performer -> new owner) that even out the performers over ``workers`` with as few
    moves as possible: the most loaded keep the larger shares, each keeps its lowest indices, the
    surplus goes to the least loaded (by name on ties). Empty when balanced (counts differ by at
    most one)."""
    if not workers:
        return {}
    load = {w: sorted(k for k, o in owners.items() if o == w) for w in workers}
    base, extra = divmod(len(owners), len(workers))
    order = sorted(workers, key=lambda w: (-len(load[w]), w))
    quota = {w: base + (1 if i < extra else 0) for i, w in enumerate(order)}
    surplus = [k for w in order for k in load[w][quota[w]:]]
    moves: dict[int, str] = {}
    for w in sorted(workers, key=lambda w: (len(load[w]), w)):
        for _ in range(quota[w] - len(load[w])):
            if surplus:
                moves[surplus.pop(0)] = w
    return moves


def deal(new: list[int], orphans: list[int], load: dict[str, int]) -> dict[int, str]:
    """Performers without a live owner -> live workers. A new performer goes by its index over the
    workers sorted by name (``avatar_index % n``: balanced for indices 0..N-1, and the same answer
    in every worker whatever its view of the claims so far); an orphan (its owner died) to the
    least loaded, round-robin over (performers owned, name)."""
    if not load:
        return {}
    names = sorted(load)
    out = {k: names[k % len(names)] for k in new}
    by_load = sorted(load, key=lambda w: (load[w], w))
    out.update({k: by_load[i % len(by_load)] for i, k in enumerate(sorted(orphans))})
    return out


class WorkerLoop:
    """The stage handler of a retarget worker (see the module docstring)."""

    def __init__(self, service: RetargetService, links: Links, registry: Registry, name: str,
                 endpoint: str) -> None:
        self.service = service
        self.links = links
        self.registry = registry
        self.name = name
        self.endpoint = endpoint
        self.owned: dict[int, Owned] = {}
        self.seen: dict[int, float] = {}  # performers without a claim -> when first seen
        self.first_seq: dict[int, int] = {}  # ... and the frame_id of their first frame seen here
        self.claims: dict[int, tuple[Claim, int]] = {}
        self.live: dict[str, dict[str, Any]] = {}
        self.releasing: dict[int, str] = {}  # owned performers being handed over -> to whom
        self.handed: dict[int, tuple[str, int]] = {}  # handed over, not yet adopted -> (new owner, resume)
        self.joined = False  # a member in NATS (``w.<name>``)
        self.viewed = False  # the claims read since the drain began (see drained)
        self.handovers = 0
        self.forgotten = 0
        self.last_end = -1  # frame_id of the last END_OF_STREAM forwarded
        self.takeovers = 0
        self.skipped = 0
        self._state: dict[str, Any] | None = None  # the durable state, rebuilt when it changes
        self._sync_at = self._view_at = self._announce_at = 0.0
        assert links.durable is not None and links.durable.rx is not None
        self.rx = links.durable.rx  # capture's fan-out, as the consumer retarget.<NAME>
        self.rx.ack_cap = self.ack_cap

    # --- the data path ---

    def step(self) -> bool:
        if not self.live:  # nothing before the first view of NATS: my claims first (after a restart)
            self.maintain()
            if not self.live:
                time.sleep(0.05)
                self._view_at = self._announce_at = 0.0
            return True
        msg = self.rx.recv(timeout_ms=20)
        if msg is not None:
            seq = msg.header.frame_id
            if msg.header.message_type is MessageType.END_OF_STREAM:
                if seq > self.last_end:  # (a rewind hands it out again)
                    self.service.on_end()
                    self.last_end = seq
                    self._state = None
            elif self.on_frame(seq, msg.payload):
                self._state = None
            if self._state is None:  # (unchanged by another worker's frame: not rebuilt)
                self._state = self.service.durable_state()
            # the position remembered is what may be acknowledged: a restart resumes from there
            self.links.done(min(seq, self.ack_cap()), self._state)
        self.maintain()
        return True

    def on_frame(self, seq: int, payload: bytes | memoryview) -> bool:
        """Retarget the frame if its performer is mine; True if it was."""
        try:  # the message first: a frame of another worker's performer needs no more than its avatar_index
            msg = pb.HumanFrame.FromString(bytes(payload))
            k = msg.avatar_index
            own = self.owned.get(k)
            if k in self.releasing:  # being handed over: the new owner continues after own.done
                own = None
            frame = HumanFrame.from_proto(msg) if own is not None and seq > own.done else None
        except Exception as exc:  # noqa: BLE001 - counted, never fatal
            self.service.counters.decode_errors += 1
            self.service.counters.last_error = f"decode: {exc}"
            return True
        if own is None:
            self.skipped += 1
            if k not in self.claims and k not in self.seen and k not in self.owned:
                self.seen[k] = time.monotonic()
                self.first_seq.setdefault(k, seq)
            return False
        if frame is None:  # already retargeted here (another performer's rewind)
            return False
        out = self.links.durable.out if self.links.durable is not None else None
        before = out.next_frame_id if out is not None else 0
        self.service.on_frame(frame, time.time_ns())
        own.done = seq
        if out is not None and out.next_frame_id > before:
            own.inflight.append((seq, out.next_frame_id - 1))
        return True

    def ack_cap(self) -> int:
        """The capture frame_id this worker may acknowledge: not past any owned performer's stored
        position, nor past the first frame of a performer nobody has claimed yet."""
        caps = [own.saved for own in self.owned.values()]
        caps += [resume for _, resume in self.handed.values()]
        caps += [self.first_seq[k] - 1 for k in self.seen if k in self.first_seq]
        return min(caps, default=self.rx.last)

    # --- NATS: deliveries, positions, claims ---

    def maintain(self) -> None:
        now = time.monotonic()
        if now >= self._announce_at:
            self._announce_at = now + ANNOUNCE_S
            announced = self.registry.announce(self.name, {"endpoint": self.endpoint,
                                                           "performers": sorted(self.owned)})
            if announced and not self.joined:  # (a member not announced would look dead to the others)
                self.joined = self.registry.join(self.name)
        if now >= self._sync_at:
            self._sync_at = now + SYNC_S
            self.sync_positions()
        if now >= self._view_at:
            self._view_at = now + VIEW_S
            self.refresh()

    def delivered(self) -> int:
        """The highest output frame_id a consumer (the streamer) has acknowledged."""
        sender = self.links.durable.sender if self.links.durable is not None else None
        if not isinstance(sender, FanoutSender):
            return -1
        return max([c.acked for c in sender.consumers.values() if c.acknowledges], default=-1)

    def sync_positions(self) -> None:
        delivered = self.delivered()
        epoch = self.rx.epoch.hex()
        for k, own in list(self.owned.items()):
            while own.inflight and own.inflight[0][1] <= delivered:
                own.inflight.popleft()
            if k in self.releasing:
                if not own.inflight:  # every frame made here for it is at the streamer
                    self.hand_over(k, own, epoch)
                continue
            resume = own.inflight[0][0] - 1 if own.inflight else self.rx.last
            if resume <= own.saved:
                continue
            revision = self.registry.write(k, self.claim(k, self.name, epoch, resume, len(own.inflight)),
                                           own.revision)
            if revision is None:
                if self._lost(k):
                    continue
            else:
                own.revision, own.saved = revision, resume

    def claim(self, k: int, owner: str, epoch: str, resume: int, unconfirmed: int) -> Claim:
        """Performer ``k``'s claim at ``resume``: its last pose, and its frames retargeted through
        there (those made here and not yet acknowledged by the streamer are after it)."""
        track = self.service.tracks.get(k)
        if track is None:
            return Claim(owner, epoch, resume)
        qpos = None if track.qpos is None else [float(x) for x in track.qpos]
        return Claim(owner, epoch, resume, qpos, track.gmr_processed - unconfirmed, track.name,
                     track.retargeter.pole_branches)

    def hand_over(self, k: int, own: Owned, epoch: str) -> None:
        """Write performer ``k``'s claim over to its new owner, resuming after the last frame
        retargeted here (compare-and-set: refused if the claim changed meanwhile)."""
        to = self.releasing[k]
        if self.registry.write(k, self.claim(k, to, epoch, own.done, 0), own.revision) is None:
            if self._lost(k):
                self.releasing.pop(k, None)
            return
        log.info("performer %d: handed over to %s after capture frame %d", k, to, own.done)
        self.handovers += 1
        self.handed[k] = (to, own.done)
        del self.releasing[k], self.owned[k]
        self.service.tracks.pop(k, None)
        self._state = None

    def _lost(self, k: int) -> bool:
        """A write was refused: if the claim is someone else's now, let the performer go."""
        claims = self.registry.claims()
        if claims is None or k not in claims:
            return False
        claim, revision = claims[k]
        if claim.owner == self.name:
            self.owned[k].revision = revision
            return False
        self._let_go(k, claim.owner)
        return True

    def _let_go(self, k: int, owner: str) -> None:
        log.warning("performer %d is %s's now: letting it go", k, owner)
        del self.owned[k]
        self.releasing.pop(k, None)
        self.service.tracks.pop(k, None)
        self._state = None

    def refresh(self) -> None:
        live, claims = self.registry.workers(), self.registry.claims()
        if live is None or claims is None or self.name not in live:
            return
        if not self.rx.welcomed:  # capture's epoch unknown yet: a stored position cannot be resumed from
            self.live = live
            return
        self.live, self.claims = live, claims
        self.viewed = True
        # Taken over while this worker did not run for longer than its announcement lives (a
        # stall, SIGSTOP): nothing left to write for a performer would never show it in a refused
        # write, and it would be counted here and at its new owner both.
        for k in [k for k in self.owned if k in claims and claims[k][0].owner != self.name]:
            self._let_go(k, claims[k][0].owner)
        for k in claims:
            self.seen.pop(k, None)
            self.first_seq.pop(k, None)
        for k in list(self.handed):  # held until an owner has adopted it (the new one, or a taker-over)
            owner = claims[k][0].owner if k in claims else None
            if owner is None or (owner in live and k in live[owner].get("performers", ())):
                del self.handed[k]
        for k, (claim, revision) in claims.items():  # mine in NATS, not here: after my restart
            if claim.owner == self.name and k not in self.owned:
                self.adopt(k, claim, revision)
        orphans = [k for k, (claim, _) in claims.items() if claim.owner not in live]
        if orphans or self.seen:
            self.claim_unowned(live, claims, orphans)
        else:
            self.settle(claims)

    def claim_unowned(self, live: dict[str, dict[str, Any]], claims: dict[int, tuple[Claim, int]],
                      orphans: list[int]) -> None:
        """Claim the new performers and orphans the deal gives me (compare-and-set), and adopt them."""
        load = {w: 0 for w in live}
        for claim, _ in claims.values():
            if claim.owner in load:
                load[claim.owner] += 1
        dealt = deal(sorted(self.seen), orphans, load)
        for k in sorted({*orphans, *self.seen}):
            if dealt.get(k) != self.name:  # (a dealt worker that hangs stops announcing: then an orphan)
                continue
            old = claims.get(k)
            if old is None:
                claim = Claim(self.name, self.rx.epoch.hex(), self.first_seq.get(k, 0) - 1)
            else:
                claim = replace(old[0], owner=self.name)
            won = self.registry.write(k, claim, None if old is None else old[1])
            if won is not None:
                if old is not None:
                    self.takeovers += 1
                    log.warning("performer %d: taking over from %s at capture frame %d", k, old[0].owner, claim.seq)
                self.seen.pop(k, None)
                self.first_seq.pop(k, None)
                self.adopt(k, claim, won)

    def settle(self, claims: dict[int, tuple[Claim, int]]) -> None:
        """With every performer owned by a live worker that announces it (no hand-over or takeover
        under way): forget the dead members at capture, and hand my surplus over to the workers
        below their share."""
        live = self.live
        if self.releasing or self.handed or any(k not in live[c.owner].get("performers", ())
                                                for k, (c, _) in claims.items()):
            return
        members = self.registry.members()
        named = {c.owner for c, _ in claims.values()}
        for dead in sorted((members or set()) - set(live) - named):
            if self.rx.forget(f"retarget.{dead}"):
                log.info("worker %s is gone and its performers are taken over: capture forgets it", dead)
                self.registry.leave(dead)
                self.forgotten += 1
        owners = {k: c.owner for k, (c, _) in claims.items()}
        for k, to in rebalance(owners, sorted(live)).items():
            if owners[k] == self.name and k in self.owned:
                log.info("performer %d: handing over to %s (rebalancing over %d workers)", k, to, len(live))
                self.releasing[k] = to

    def adopt(self, k: int, claim: Claim, revision: int) -> None:
        """Own performer ``k`` from its stored position: rewind capture's stream to it if needed
        and start its IK from the stored pose."""
        rx = self.rx
        same_epoch = claim.epoch == rx.epoch.hex()
        start = claim.seq if same_epoch else -1
        if same_epoch and start < rx.last:
            rx.rewind(start)
        self.owned[k] = Owned(revision, start, start)
        self._state = None
        self.service.tracks.pop(k, None)
        if claim.qpos is not None or claim.frames:  # (a new performer's track starts with its first frame)
            track = self.service.track(k, claim.name)
            # its counts go on from the stored ones: the workers' sum per performer is the ledger's
            track.frames_in = track.gmr_processed = track.robot_frames_sent = claim.frames if same_epoch else 0
            if claim.qpos is not None:
                track.qpos = np.asarray(claim.qpos, dtype=np.float64)
                track.retargeter.reset(track.qpos, claim.branches)
        log.info("performer %d: mine from capture frame %d", k, start + 1)

    # --- the rest of the StageHandler ---

    def heartbeat(self) -> RetargetCounts:
        return replace(self.service.heartbeat(self.links.rx.rejects), worker=WorkerInfo(
            name=self.name, endpoint=self.endpoint, owned=sorted(self.owned), live_workers=sorted(self.live),
            takeovers=self.takeovers, handovers=self.handovers, releasing=sorted(self.releasing),
            forgotten=self.forgotten, skipped=self.skipped))

    def reset(self) -> None:
        self._state = None
        self.service.reset()
        self.links.rx.rejects.clear()
        self.links.remember(self.service.durable_state())

    def begin_drain(self, args: dict[str, Any]) -> None:
        self.viewed = False  # the final counts wait for a view of the claims taken after this
        self._view_at = 0.0

    def drained(self) -> bool:
        return self.service.ended and self.links.unacked == 0 and self.viewed

    def finish(self) -> None:
        self.registry.withdraw(self.name)


def advertised_host(flag: str, output: str, nats_url: str) -> str:
    """Where the streamer reaches this worker: ``--advertise-host`` when given; else the address
    ``--output`` binds when it is a specific one; else this host's address on the route to the
    NATS server, which the streamer reaches too (a UDP socket's connect sends nothing)."""
    if flag:
        return flag
    bound = output.removeprefix("tcp://").rpartition(":")[0]
    if bound not in ("", "*", "0.0.0.0", "::", "[::]"):
        return bound
    parts = urlsplit(nats_url)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((parts.hostname or "127.0.0.1", parts.port or 4222))
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return "127.0.0.1"


def run_worker(settings: RetargetSettings, retargeter: Retargeter) -> int:
    """`mocapline retarget --worker NAME`: the stage with capture's fan-out as input, its own
    fan-out as output, and the WorkerLoop as handler."""
    name = f"retarget.{settings.worker}"
    advertise = advertised_host(settings.advertise_host, settings.output, settings.stage.nats)
    with Stage("retarget", settings.stage, reasons=(*LINK_REJECT_REASONS, "decode"), bus_name=name,
               status_interval=settings.status_interval, status_line=status_line,
               advertise_host=advertise) as stage:
        try:
            links = stage.open_links(
                input=durable.LinkSpec(settings.input, MessageType.HUMAN_FRAME, len(GMR_BODIES), kind="fanout",
                                       name=name),
                output=durable.LinkSpec(settings.output, MessageType.ROBOT_STATE, retargeter.robot.joint_count,
                                       kind="fanout"),
            )
        except StageError as exc:
            return stage.fail(str(exc))
        assert links.durable is not None and isinstance(links.durable.sender, FanoutSender)
        bound = links.durable.sender.sock.getsockopt_string(zmq.LAST_ENDPOINT)  # port * -> the real one
        endpoint = f"tcp://{advertise}:{bound.rpartition(':')[2]}"
        registry = Registry(settings.stage.nats)
        stage.exits.callback(registry.close)
        service = RetargetService(retargeter, links.tx, metrics=stage.metrics, tracer=stage.tracer,
                                  heights=settings.performer_height)
        if links.durable.restored is not None:
            service.restore(links.durable.restored)
            service.tracks.clear()  # ownership and poses come from NATS
        log.info("retarget worker %s: %s -> %s (announced as %s)", settings.worker, settings.input, bound, endpoint)
        (Path(tempfile.gettempdir()) / "mocapline-retarget-worker").write_text(settings.worker)  # for healthchecks
        return stage.run(WorkerLoop(service, links, registry, settings.worker, endpoint))
