"""``<prog> <name> [options]``: commands whose modules load only when asked for (so that
`mocapline emit` does not load MuJoCo)."""

from __future__ import annotations

import importlib
import sys


def dispatch(prog: str, commands: dict[str, tuple[str, str]], argv: list[str] | None) -> int:
    """Run ``<prog> <name> [options]``: import the named module and call its ``main``."""
    args = sys.argv[1:] if argv is None else list(argv)
    width = max(len(n) for n in commands)
    usage = "\n".join(
        [f"usage: {prog} <command> [options]   ({prog} <command> --help for its options)", ""]
        + [f"  {name:<{width}}  {summary}" for name, (_, summary) in commands.items()]
    )
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage)
        return 0
    name, rest = args[0], args[1:]
    if name not in commands:
        print(f"{prog}: unknown command {name!r}\n\n{usage}", file=sys.stderr)
        return 2
    module = importlib.import_module(commands[name][0])
    return int(module.main(rest) or 0)
