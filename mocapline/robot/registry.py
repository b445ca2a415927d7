"""The robot builds mocapline knows, by name: one TOML file each in ``builds/`` (or a path to a file
of the same form), and the ``--robot-model`` flag every command that touches a robot declares
through :func:`add_robot_model_argument`.

Adding a robot is adding its file (and its IK configs in ``assets/ik_configs``): see
docs/architecture.md, "Adding a robot".
"""

from __future__ import annotations

import argparse
import functools
import tomllib
from pathlib import Path
from typing import Any

from .description import RobotDescription, RobotDescriptionError, parse_description

BUILDS_DIR = Path(__file__).with_name("builds")
DEFAULT_ROBOT = "g1"


def robot_names() -> tuple[str, ...]:
    """The shipped builds, by name (the default first)."""
    names = sorted(p.stem for p in BUILDS_DIR.glob("*.toml"))
    return (DEFAULT_ROBOT, *(n for n in names if n != DEFAULT_ROBOT))


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise RobotDescriptionError(f"{path}: not valid TOML: {exc}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over``'s tables merged into ``base``'s, key by key; anything else in ``over`` replaces."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _resolve(name_or_path: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    path = Path(name_or_path) if name_or_path.endswith(".toml") else BUILDS_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise RobotDescriptionError(f"robot model {name_or_path!r}: not a shipped build ({', '.join(robot_names())}) "
                                    "and no such .toml file")
    raw = _read(path)
    parent = raw.get("extends")
    if parent is None:
        return raw
    if parent in seen:
        raise RobotDescriptionError(f"{path}: extends {parent!r} in a cycle ({' -> '.join((*seen, parent))})")
    return _merge(_resolve(str(parent), (*seen, str(parent))), raw)


@functools.cache
def get_robot(name: str = DEFAULT_ROBOT) -> RobotDescription:
    """The description of a shipped build (``g1``, ``g1_23``, ``g1_dex3``, ``h1``) or of a TOML file."""
    return parse_description(_resolve(name, (name,)))


def add_robot_model_argument(parser: argparse.ArgumentParser, default: str | None = DEFAULT_ROBOT,
                              what: str = "") -> None:
    """``--robot-model NAME`` (``MOCAPLINE_ROBOT_MODEL`` through the env-aware parser); ``default``
    None for the commands that read a take, whose own config says (``what`` describes that)."""
    parser.add_argument("--robot-model", default=default, type=_robot_model,
                        help=f"the robot build: {', '.join(robot_names())} (docs/robot.md), or a description "
                             f"file NAME.toml{what}")


def _robot_model(value: str) -> str:
    try:
        get_robot(value)
    except RobotDescriptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value
