"""Helpers shared by the tests (importable as ``helpers``: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, *, interval: float = 0.05, what: str = "") -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail the test after
    ``timeout`` seconds. Tests synchronise with this, never with a bare sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            waited_for = what or getattr(predicate, "__name__", "a condition")
            raise AssertionError(f"timed out after {timeout} s waiting for {waited_for}")
        time.sleep(interval)


# Markers a run leaves out unless its ``-m`` names them: a command-line ``-m`` replaces any other
# (an ``addopts`` one included), so ``-m "not integration"`` would select these too if pyproject left them out.
OPT_IN_MARKERS = frozenset({"soak", "engine", "hosts"})


def left_out_markers(markexpr: str) -> frozenset[str]:
    """The opt-in markers that ``markexpr`` does not name (those it names, it selects or rejects)."""
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", markexpr))
    return frozenset(OPT_IN_MARKERS - named)


def published(record: type, **values: object) -> dict[str, object]:
    """A counters record as a stage publishes it (mocapline/core/counters), every count zero but
    ``values`` (a ``dict`` of per-performer values: ``{"0": {"gmr_processed": 6}}``, made into
    the record's per-performer type)."""
    import dataclasses
    import typing

    from mocapline.core.counters import to_json, zero
    from mocapline.core.counters.codec import fields_of

    for f, tp in fields_of(record):
        if f.name in values and f.metadata.get("per_performer"):
            per_type = typing.get_args(tp)[1]
            values[f.name] = {k: zero(per_type, **v) if not dataclasses.is_dataclass(v) else v
                              for k, v in values[f.name].items()}  # type: ignore[attr-defined]
    return to_json(zero(record, **values))
