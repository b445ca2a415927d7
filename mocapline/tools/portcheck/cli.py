"""`mocapline port-check`: the robot port's conformance kit.

    mocapline port-check --consumer "my-robot --endpoint {endpoint} --name {name} --state {state}/pos"
    mocapline port-check --port tcp://127.0.0.1:5555

``--consumer CMD`` plays a scripted robot port through the contract's hard cases against the
consumer that CMD starts (``{endpoint}``, ``{name}`` and ``{state}``, a directory kept across the
consumer's restarts within a case, are filled in; also in the environment as
MOCAPLINE_PORT_CHECK_ENDPOINT, _NAME, _STATE). The consumer reports each frame it applies as one
JSON line on stdout: ``{"frame_id": 12, "posture_index": 10012}``, and END_OF_STREAM as
``{"frame_id": 13, "end": true}`` (``mocapline tap`` prints these; other lines are ignored).

``--port ENDPOINT`` connects to a running port as a consumer (it needs frames flowing, e.g.
``mocapline up --demo``) and checks its side: the handshake, the frames, the hands, a resume, a keep-alive,
a rewind and an older peer. One line per case, PASS or FAIL with what was seen; exit status 1 if
any failed. docs/protocol.md, "Conformance kit".
"""

from __future__ import annotations

import shlex
import shutil
import sys

from mocapline.core.options import EnvArgumentParser
from mocapline.tools.portcheck.consumer_cases import CASES, CaseResult, run_cases


def build_parser() -> EnvArgumentParser:
    p = EnvArgumentParser(prog="mocapline port-check", description=__doc__)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--consumer", metavar="CMD", help="the command that starts the consumer under test")
    which.add_argument("--port", metavar="ENDPOINT", help="a running robot port to check")
    p.add_argument("--case", action="append", default=None, choices=[c.name for c in CASES], metavar="CASE",
                   help="only this case (repeatable): " + ", ".join(c.name for c in CASES))
    p.add_argument("--name", default="port-check", help="--port: the consumer name to use there")
    return p


def print_result(result: CaseResult) -> None:
    print(f"{'PASS' if result.passed else 'FAIL'}  {result.name:<16} {result.detail}", flush=True)
    if not result.passed and result.what:
        print(f"      {'':<16} (the case: {result.what})", flush=True)


def command_problem(template: str) -> str:
    """Why the ``--consumer`` template cannot start a consumer ("" when it can), said before any
    case runs rather than as a traceback or nine failed cases."""
    try:
        argv = shlex.split(template.format(endpoint="tcp://127.0.0.1:5555", name="port-check", state="/tmp/state"))
    except (KeyError, IndexError, ValueError) as exc:
        return (f"{template!r}: {exc!r}; the command may name {{endpoint}}, {{name}} and {{state}} (a literal "
                "brace is written {{ or }})")
    if not argv:
        return "the command is empty"
    if shutil.which(argv[0]) is None:
        return f"{argv[0]!r}: no such program (or not executable)"
    return ""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.consumer is not None and (problem := command_problem(args.consumer)):
        print(f"mocapline port-check --consumer: {problem}", file=sys.stderr)
        return 2
    if args.consumer is not None:
        results = run_cases(args.consumer, args.case, report=print_result)
    else:
        from mocapline.tools.portcheck.port_checks import check_port

        results = check_port(args.port, args.name, report=print_result)
    failed = [r.name for r in results if not r.passed]
    print(f"{len(results) - len(failed)} of {len(results)} cases passed" + (f"; failed: {', '.join(failed)}"
                                                                           if failed else ""))
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
