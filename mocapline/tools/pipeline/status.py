"""`mocapline status`: the ledger and verdict of a running pipeline, from its auditor over NATS."""

from __future__ import annotations

import asyncio
import json
import sys

from mocapline.core.bus import DEFAULT_URL, request
from mocapline.core.options import EnvArgumentParser
from mocapline.tools.pipeline.stack import print_ledger


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline status", description=__doc__)
    p.add_argument("--nats", default=DEFAULT_URL, help="NATS server of the pipeline")
    p.add_argument("--json", action="store_true", help="one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        reply = asyncio.run(request(args.nats, "auditor", "status", timeout=5.0))
    except Exception as exc:  # noqa: BLE001 - any failure here means: no pipeline answering
        print(f"mocapline status: no auditor answered at {args.nats} ({exc.__class__.__name__}); "
              "is `mocapline up` running?", file=sys.stderr)
        return 2
    verdict = reply.get("verdict", reply)
    if args.json:
        print(json.dumps(verdict))
    else:
        print_ledger(verdict)
    return 0
