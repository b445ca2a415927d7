"""The stages' counts read together: what a tool asks every stage for (`mocapline up`'s table,
`status`, the web viewer's ledger), as one typed picture."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mocapline.core.counters.codec import decode
from mocapline.core.counters.stages import (
    CaptureCounts,
    RetargetCounts,
    RetargetPerformerCounts,
    RetargetTotals,
    RobotCounts,
    StreamerCounts,
    ViewerCounts,
    WorkerShare,
)


@dataclass(frozen=True)
class Stages:
    """Each stage's counts (None: it did not answer, or is not part of the run); retarget as
    workers: ``workers`` by name and ``retarget`` their sum."""

    capture: CaptureCounts | None = None
    retarget: RetargetCounts | RetargetTotals | None = None
    streamer: StreamerCounts | None = None
    viewer: ViewerCounts | None = None
    robot: RobotCounts | None = None  # the robot bridge, where it runs (`mocapline up --robot`)
    workers: dict[str, RetargetCounts] = field(default_factory=dict)


def sum_workers(workers: Mapping[str, RetargetCounts]) -> RetargetTotals:
    """Retarget as workers (``retarget.<name>``): the ledger's retarget line is the sum of their
    per-performer counts (a worker reports the performers it owns; their counts go with the claim
    from owner to owner, so a takeover's resends are not counted twice), and ``workers`` says who
    owns which performers and how many frames each retargeted itself."""
    performers: dict[str, RetargetPerformerCounts] = {}
    for w in workers.values():
        for key, p in w.performers.items():
            into = performers.get(key, RetargetPerformerCounts())
            performers[key] = RetargetPerformerCounts(
                human_height_m=p.human_height_m if p.human_height_m is not None else into.human_height_m,
                frames_in=into.frames_in + p.frames_in, gmr_processed=into.gmr_processed + p.gmr_processed,
                robot_frames_sent=into.robot_frames_sent + p.robot_frames_sent, pending=into.pending + p.pending)
    return RetargetTotals(
        frames_in=sum(p.frames_in for p in performers.values()),
        gmr_processed=sum(p.gmr_processed for p in performers.values()),
        robot_frames_sent=sum(p.robot_frames_sent for p in performers.values()),
        ik_failed=sum(w.ik_failed for w in workers.values()),
        pending=sum(w.pending for w in workers.values()),
        performers=performers,
        workers={name.partition(".")[2]: WorkerShare(owned=list(w.worker.owned) if w.worker else [],
                                                     frames=w.gmr_processed,
                                                     takeovers=w.worker.takeovers if w.worker else 0)
                 for name, w in sorted(workers.items())},
    )


def read_stages(answers: Mapping[str, Any]) -> Stages:
    """The stages' published answers (by bus name) as one typed picture. A service that did not
    answer (an ``error``), the auditor and an already summed ``retarget`` line are left aside:
    the workers' sum is made here from their own answers."""
    found: dict[str, Any] = {}
    workers: dict[str, RetargetCounts] = {}
    summed = answers.get("retarget")
    # A summed line names the workers it was made of (the live ones at a drain): a worker's older
    # heartbeat beside it (one lost for good, its performers taken over with their counts) is left out.
    chosen = set(summed["workers"]) if isinstance(summed, dict) and isinstance(summed.get("workers"), dict) else None
    for name, body in answers.items():
        if not body or "error" in body or name == "auditor" or (name == "retarget" and "workers" in body):
            continue
        stage = name.partition(".")[0]
        if name.startswith("retarget."):
            if chosen is None or name.partition(".")[2] in chosen:
                workers[name] = decode(RetargetCounts, body)
        elif stage in ("capture", "retarget", "streamer", "viewer", "robot"):
            found[stage] = body
    return Stages(
        capture=decode(CaptureCounts, found["capture"]) if "capture" in found else None,
        retarget=(decode(RetargetCounts, found["retarget"]) if "retarget" in found
                  else sum_workers(workers) if workers else None),
        streamer=decode(StreamerCounts, found["streamer"]) if "streamer" in found else None,
        viewer=decode(ViewerCounts, found["viewer"]) if "viewer" in found else None,
        robot=decode(RobotCounts, found["robot"]) if "robot" in found else None,
        workers=workers,
    )
