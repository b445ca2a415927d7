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

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:  # type: ignore[override]
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
    except (TypeError, ValueError) as exc:
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
        if "-" in part[1:]:
            lo, hi = part.split("-", 1) if not part.startswith("-") else (part, part)
            a, b = int(lo), int(hi)
            if b < a:
                raise argparse.ArgumentTypeError(f"range {part!r} runs backwards")
            out.extend(range(a, b + 1))
        else:
            out.append(int(part))
    return out


def port_number(text: str) -> int:
    """A TCP/UDP port flag value: 0-65535."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is outside 0-65535")
    return value


def settings_from(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """A frozen settings dataclass from parsed flags: each field from the flag of the same name,
    unless ``given`` holds it (nested settings, derived values)."""
    values = {f.name: given[f.name] if f.name in given else getattr(args, f.name) for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**values)
