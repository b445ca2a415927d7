"""Per-call timing shared by the micro-benchmarks."""

from __future__ import annotations

import timeit
from collections.abc import Callable


def per_call_us(stmt: Callable[[], object], number: int, repeat: int = 5) -> float:
    """Microseconds per call: the best of ``repeat`` runs of ``number`` calls (the least disturbed
    by the rest of the machine)."""
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e6
