"""`mocapline estop`: stop the robot now. The bridge (`mocapline robot`) damps its motors (kp 0,
kd > 0) for its --estop-damp-s, then exits. Asked over NATS (``{"cmd": "estop"}`` on
``mocapline.control.<name>``); SIGINT or SIGTERM to the bridge's process do the same."""

from __future__ import annotations

import asyncio
import json
import sys

from mocapline.core.bus import DEFAULT_URL, request
from mocapline.core.counters import RobotCounts, decode
from mocapline.core.options import EnvArgumentParser


def main(argv: list[str] | None = None) -> int:
    p = EnvArgumentParser(prog="mocapline estop", description=__doc__)
    p.add_argument("--nats", default=DEFAULT_URL, help="NATS server of the pipeline")
    p.add_argument("--service", default="robot", help="the bridge's name on NATS")
    p.add_argument("--reason", default="operator", help="said in the bridge's log")
    args = p.parse_args(argv)
    try:
        answer = asyncio.run(request(args.nats, args.service, "estop", timeout=2.0, reason=args.reason))
    except Exception as exc:  # noqa: BLE001 - said to the person, with what to do instead
        print(f"mocapline estop: no answer from {args.service} at {args.nats} ({exc}); "
              "send SIGTERM to the bridge's process", file=sys.stderr)
        return 1
    if "error" in answer:
        print(f"mocapline estop: {answer['error']}", file=sys.stderr)
        return 1
    print(json.dumps({"estop": args.service, "robot_state": decode(RobotCounts, answer).robot_state}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
