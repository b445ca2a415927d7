"""The one config loader: command-line flags, each with an environment-variable equivalent.

Every long option ``--foo-bar`` of a service also reads ``MOCAPLINE_FOO_BAR`` (12-factor: compose
files set env vars, people type flags). Precedence: flag > env var > default. ``--help`` shows the
variable and the default of each option.

The way back: the parser keeps each long option's declared default (``flags``), so a service's
settings render their own command line (``argv``: the flags whose value is not the default), and a
supervisor plans a process from a settings object instead of a string per flag.
"""

from __future__ import annotations

import argparse
import enum
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from typing import Any, Literal, TypeVar, get_args, get_type_hints

T = TypeVar("T")

ENV_PREFIX = "MOCAPLINE_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


def choices(mode: Any) -> tuple[str, ...]:
    """The values of a mode (a ``Literal`` of strings, or a ``StrEnum``), as argparse choices."""
    if isinstance(mode, type) and issubclass(mode, enum.Enum):
        return tuple(str(m.value) for m in mode)
    return tuple(get_args(mode))


@dataclass(frozen=True)
class Flag:
    """A long option as declared: how to write a value of ``dest`` back on a command line."""

    option: str
    default: Any  # the declared one, whatever the environment says
    form: Literal["value", "list", "repeat", "switch", "off_switch"]  # off_switch: store_false
    convert: Callable[[str], Any] | None = None  # the flag's ``type``


class EnvArgumentParser(argparse.ArgumentParser):
    """argparse with env-var defaults for every long option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.flags: dict[str, Flag] = {}  # by dest

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        long_flags = [n for n in names if n.startswith("--")]
        if not long_flags or kwargs.get("action") in ("help", "version"):
            return super().add_argument(*names, **kwargs)
        var = env_name(long_flags[0])
        action = kwargs.get("action")
        form: Literal["value", "list", "repeat", "switch", "off_switch"] = (
            "switch" if action == "store_true" else "off_switch" if action == "store_false"
            else "repeat" if action == "append" else "list" if kwargs.get("nargs") in ("*", "+") else "value")
        dest = kwargs.get("dest") or long_flags[0][2:].replace("-", "_")
        self.flags[dest] = Flag(long_flags[0], kwargs.get("default", _SWITCH_DEFAULTS.get(form)), form,
                                kwargs.get("type"))
        raw = os.environ.get(var)
        if raw is not None:
            kwargs["default"] = _from_env(var, raw, action, kwargs)
            if kwargs.get("required"):
                kwargs["required"] = False
        default = kwargs.get("default")
        shown = "" if default in (None, argparse.SUPPRESS) or action == "store_true" else f", default {default}"
        kwargs["help"] = f"{kwargs.get('help', '')} [env {var}{shown}]".strip()
        return super().add_argument(*names, **kwargs)


_SWITCH_DEFAULTS: dict[str, bool] = {"switch": False, "off_switch": True}


def _from_env(var: str, raw: str, action: str | None, kwargs: dict[str, Any]) -> Any:
    if action in ("store_true", "store_false"):
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise SystemExit(f"{var}={raw!r}: expected one of {sorted(_TRUE | _FALSE)}")
    if kwargs.get("nargs") in ("*", "+"):
        conv = kwargs.get("type", str)
        return [conv(item) for item in raw.replace(",", " ").split()]
    conv = kwargs.get("type", str)
    try:
        value = conv(raw)
    except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
        raise SystemExit(f"{var}={raw!r}: {exc}") from None
    choices = kwargs.get("choices")
    if choices is not None and value not in choices:
        raise SystemExit(f"{var}={raw!r}: choose from {list(choices)}")
    return value


def parse_index_list(text: str) -> list[int]:
    """'5,9-12' -> [5, 9, 10, 11, 12]; used by flags that name posture indices."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else (part, part)
                a, b = int(lo), int(hi)
                if b < a:
                    raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a posture index or a range of them (examples: 5 or 100-103 or 5,9-12)") from None
    if any(i < 0 for i in out):
        raise argparse.ArgumentTypeError(f"{text!r}: posture indices are not negative")
    return out


def _number(text: str, kind: type, what: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def port_number(text: str) -> int:
    """A TCP/UDP port flag value: 0-65535."""
    value = _number(text, int, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 0-65535")
    return value


def declared_defaults(parser: EnvArgumentParser) -> argparse.Namespace:
    """The flags' values when none is given and no ``MOCAPLINE_*`` variable is set."""
    def value(flag: Flag) -> Any:  # as argparse does: a text default goes through the flag's type
        return flag.convert(flag.default) if isinstance(flag.default, str) and flag.convert else flag.default

    return argparse.Namespace(**{dest: value(flag) for dest, flag in parser.flags.items()})


def argv(parser: EnvArgumentParser, values: Mapping[str, Any]) -> list[str]:
    """The command line that gives ``values`` (by dest): a flag for each one that is not its
    declared default. A value is written as ``str`` would, a mode by its value, a path as text."""
    out: list[str] = []
    for dest, value in values.items():
        flag = parser.flags[dest]
        if value == flag.default:
            continue
        if flag.form == "switch":
            out += [flag.option] if value else []
        elif flag.form == "off_switch":
            out += [] if value else [flag.option]
        elif flag.form == "list":
            out += [flag.option, *map(_text, value)] if value is not None else []
        elif flag.form == "repeat":
            out += [f"{flag.option}={_text(v)}" for v in value]
        elif value is not None:
            out.append(f"{flag.option}={_text(value)}")
    return out


def _text(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    return repr(value) if isinstance(value, float) else str(value)


def settings_from(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """A frozen settings dataclass from parsed flags: each field from the flag of the same name,
    unless ``given`` holds it (derived values); a field that is itself a settings dataclass is made
    the same way from the same flags, and a field no flag sets keeps its default."""
    values = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in given:
            values[f.name] = given[f.name]
        elif not hasattr(args, f.name) and is_dataclass(nested := get_type_hints(cls).get(f.name)):
            values[f.name] = settings_from(nested, args)  # type: ignore[arg-type]
        elif hasattr(args, f.name) or (f.default is MISSING and f.default_factory is MISSING):
            values[f.name] = getattr(args, f.name)
    return cls(**values)


def flag_values(parser: EnvArgumentParser, settings: Any, *, skip: Iterable[str] = ()) -> dict[str, Any]:
    """The values of a settings dataclass by flag (dest), nested settings flattened: the inverse of
    :func:`settings_from` for :func:`argv` (fields no flag sets are left out)."""
    out: dict[str, Any] = {}
    for f in fields(settings):
        if f.name in skip:
            continue
        value = getattr(settings, f.name)
        if is_dataclass(value) and f.name not in parser.flags:
            out |= flag_values(parser, value)
        elif f.name in parser.flags:
            out[f.name] = value
    return out


def parse_settings(make: Callable[[argparse.Namespace], T], parser: argparse.ArgumentParser,
                   args: list[str] | None) -> T | None:
    """A service's settings from its command line, or None once it has said on stderr why they are
    not valid (a flag argparse accepted that the settings refuse): the service then exits with 2."""
    try:
        return make(parser.parse_args(args))
    except ValueError as exc:
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        return None


def flags_given(parser: EnvArgumentParser, args: argparse.Namespace, names: Iterable[str]) -> list[str]:
    """The options among ``names`` (dests) whose value is not their declared default: given on the
    command line or by their MOCAPLINE_* variable (to refuse the flags of another mode)."""
    defaults = declared_defaults(parser)
    return [parser.flags[n].option for n in names if getattr(args, n) != getattr(defaults, n)]


def positive_int(text: str) -> int:
    """A count that must be at least 1 (frames in a take...)."""
    value = _number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: must be 1 or more")
    return value


def non_negative_int(text: str) -> int:
    """A count or index that may be 0 but not negative."""
    value = _number(text, int, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is not allowed: must be 0 or more")
    return value


def positive_float(text: str) -> float:
    """A rate, a height, a duration that must be above 0 (and finite)."""
    value = _number(text, float, "a number")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not allowed: must be a number above 0")
    return value


def non_negative_float(text: str) -> float:
    """A rate or duration where 0 means 'off' or 'as fast as possible', never negative."""
    value = _number(text, float, "a number")
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not allowed: must be 0 or a number above 0")
    return value
