"""The one config loader: command-line flags, each with an environment-variable equivalent.

Every long option ``--foo-bar`` of a service also reads ``MOCAPLINE_FOO_BAR`` (12-factor: compose
files set env vars, people type flags). Precedence: flag > env var > default. ``--help`` shows the
variable and the default of each option.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")

ENV_PREFIX = "MOCAPLINE_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").upper().replace("-", "_")


class EnvArgumentParser(argparse.ArgumentParser):
    """argparse with env-var defaults for every long option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        long_flags = [n for n in names if n.startswith("--")]
        if not long_flags or kwargs.get("action") in ("help", "version"):
            return super().add_argument(*names, **kwargs)
        var = env_name(long_flags[0])
        action = kwargs.get("action")
        raw = os.environ.get(var)
        if raw is not None:
            kwargs["default"] = _from_env(var, raw, action, kwargs)
            if kwargs.get("required"):
                kwargs["required"] = False
        default = kwargs.get("default")
        shown = "" if default in (None, argparse.SUPPRESS) or action == "store_true" else f", default {default}"
        kwargs["help"] = f"{kwargs.get('help', '')} [env {var}{shown}]".strip()
        return super().add_argument(*names, **kwargs)


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


def settings_from(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """A frozen settings dataclass from parsed flags: each field from the flag of the same name,
    unless ``given`` holds it (nested settings, derived values)."""
    values = {f.name: given[f.name] if f.name in given else getattr(args, f.name) for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**values)


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
