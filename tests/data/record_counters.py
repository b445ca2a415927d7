"""Record the published counters of a few takes (run once, before a change to the counters):
every stage's drain answer (its heartbeat at the take's end), a status answer while running, the
auditor's drain answer and the final ledger (`mocapline demo --json`).

    PYTHONPATH=. python3 tests/data/record_counters.py tests/data/counters_golden.json

tests/test_counter_contract.py compares the keys (and the values that do not depend on timing) of
a take made by the current code with this record.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from mocapline.tools.emitter.emitter import emit_take
from mocapline.tools.emitter.tcp_server import AxisTcpServer
from mocapline.tools.pipeline.demo import build_parser, demo_config, take_plan
from mocapline.tools.pipeline.stack import Stack, run_stack

SCENARIOS: dict[str, list[str]] = {
    "plain": ["--frames", "300", "--rate", "0"],
    "merge_performers": ["--frames", "300", "--rate", "0", "--performers", "2", "--merge", "--drop-main", "10-12",
                         "--duplicate-last", "--garbage", "3", "--drop-performer", "1:40-41"],
    "durable_tcp": ["--frames", "200", "--rate", "0", "--durable", "--transport", "tcp"],
    "workers": ["--frames", "200", "--rate", "0", "--retarget-workers", "2", "--performers", "2"],
}


def take(argv: list[str]) -> dict[str, Any]:
    args = build_parser().parse_args(argv)
    durable = args.durable or args.retarget_workers > 0
    state = tempfile.TemporaryDirectory(prefix="mocapline-record-") if durable else None
    config = demo_config(args)
    config.state_dir = Path(state.name) if state is not None else None
    config.retarget_workers = args.retarget_workers
    stack = Stack(config)
    server = AxisTcpServer("127.0.0.1", config.axis_port) if args.transport == "tcp" else None
    out: dict[str, Any] = {"argv": argv}

    def body(guard: Any) -> int:
        side = ("127.0.0.1", config.side_port)
        if server is not None:
            emit_take(take_plan(args), [side], rate_hz=args.rate, tcp=server, stop=guard.stop)
        else:
            emit_take(take_plan(args), [("127.0.0.1", config.main_port), side], rate_hz=args.rate, stop=guard.stop)
        out["status"] = {name: stack.ask(name, "status") for name in stack.services}
        finals = stack.drain()
        out["finals"] = finals
        out["auditor_drain"] = stack.ask("auditor", "drain", timeout=5.0, services=finals)
        out["ledger"] = out["auditor_drain"]["verdict"]
        return 0

    try:
        run_stack(stack, "record", body)
    finally:
        if server is not None:
            server.close()
        if state is not None:
            state.cleanup()
    return out


def main() -> int:
    record = {name: take(argv) for name, argv in SCENARIOS.items()}
    Path(sys.argv[1]).write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
