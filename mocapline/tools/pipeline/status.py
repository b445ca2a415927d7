"""`mocapline status`: the ledger and verdict of a running pipeline.

The stages are asked for their counts over NATS downstream first (viewer, streamer, retarget,
capture), so the counts are one consistent picture (no stage above the one that feeds it); the
auditor adds its side path. Mid-take the verdict says ``running, N in flight``, not a loss.

The streamer's ``zmq_sent`` counts acknowledged frames, and a consumer applies a frame before its
acknowledgement arrives: the ledger shown says how many are on the wire, acknowledged or not, so
``viewer_applied`` is never above the count beside ``zmq_sent`` (``--json`` keeps the raw fields,
``zmq_sent`` and ``unconfirmed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from mocapline.core.bus import DEFAULT_URL, request
from mocapline.core.counters import PipelineLedger, read_stages
from mocapline.core.options import EnvArgumentParser
from mocapline.services.auditor.audit import audit
from mocapline.tools.pipeline.console import print_ledger, snapshot


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline status", description=__doc__)
    p.add_argument("--nats", default=DEFAULT_URL, help="NATS server of the pipeline")
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p


def readable(ledger: dict[str, Any]) -> dict[str, Any]:
    """The ledger as printed: zmq_sent with the frames whose acknowledgement is still on its way."""
    unconfirmed = ledger.get("unconfirmed") or 0
    if not unconfirmed or ledger.get("zmq_sent") is None:
        return ledger
    wire = PipelineLedger.from_published(ledger).on_the_wire
    return {**ledger, "zmq_sent": f"{wire} on the wire ({ledger['zmq_sent']} acknowledged, "
                                  f"{unconfirmed} not yet)"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stages = snapshot(args.nats, timeout=3.0)  # downstream first: one consistent picture
    if not stages:
        print(f"mocapline status: no pipeline answered at {args.nats}; is `mocapline up` running?", file=sys.stderr)
        return 2
    side = None
    # The auditor's side path, for the classification of missing indices by path; without the
    # auditor the stages' counts still stand.
    with contextlib.suppress(Exception):
        side = asyncio.run(request(args.nats, "auditor", "status", timeout=3.0)).get("side")
    sim = None  # `mocapline sim` beside the bridge: what it takes of the bridge's commands
    if read_stages(stages).robot is not None:
        with contextlib.suppress(Exception):
            sim = asyncio.run(request(args.nats, "sim", "status", timeout=1.0))
    # Mid-take unequal counts are frames in flight; once the viewer has seen the end of the take, final.
    viewer = read_stages(stages).viewer
    ended = viewer is not None and viewer.ended
    verdict = audit({"services": stages, "side": side}, final=ended)
    if sim:
        verdict["sim"] = sim
    if args.json:
        print(json.dumps(verdict))
    else:
        print_ledger(readable(verdict))
    return 0
