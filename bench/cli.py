"""``mocapline bench <name>``: capture (parse + FK), retarget, e2e.

Each benchmark is a module with ``main(argv) -> int``, imported only when asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

BENCHMARKS: dict[str, tuple[str, str]] = {
    "capture": ("bench.capture", "parse + forward kinematics frames/s vs a bare struct.unpack"),
    "retarget": ("bench.retarget", "IK onto the G1 frames/s"),
    "e2e": ("bench.e2e", "end-to-end through every service"),
}


def _usage() -> str:
    lines = ["usage: mocapline bench <name> [options]", ""]
    lines += [f"  {name:<9} {summary}" for name, (_, summary) in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in BENCHMARKS:
        print(f"mocapline bench: unknown benchmark {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name = BENCHMARKS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        print(
            f"mocapline bench: benchmark {name!r} is not available ({module_name} is missing)",
            file=sys.stderr,
        )
        return 2
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
