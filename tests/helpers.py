"""Helpers shared by the tests (importable as ``helpers``: pytest puts tests/ on sys.path)."""

from __future__ import annotations

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
