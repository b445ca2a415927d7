"""The opt-in markers (soak, engine, hosts) stay out of every run whose ``-m`` does not name them, the
README's quick command ``-m "not integration"`` included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import left_out_markers

TESTS = Path(__file__).resolve().parent
HOSTS_TESTS = {"test_the_namespaces_of_a_killed_run_are_removed_by_the_next"}


def test_an_expression_that_does_not_name_an_opt_in_marker_leaves_it_out() -> None:
    assert left_out_markers("") == {"soak", "engine", "hosts"}
    assert left_out_markers("not integration") == {"soak", "engine", "hosts"}
    assert left_out_markers("engine") == {"soak", "hosts"}
    assert left_out_markers("hosts") == {"soak", "engine"}
    assert left_out_markers("soak or integration") == {"engine", "hosts"}
    assert left_out_markers("not soak and not engine and not hosts") == set()
    assert left_out_markers("soaking") == {"soak", "engine", "hosts"}  # a word, not a substring


def collected(*args: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args,
                          str(TESTS / "test_crash.py"), str(TESTS / "test_compose_engine.py"),
                          str(TESTS / "test_hosts.py")],
                         capture_output=True, text=True, timeout=120, cwd=TESTS.parent)
    return {line.split("::")[-1] for line in out.stdout.splitlines() if "::" in line}


def test_the_quick_command_selects_no_soak_or_engine_test() -> None:
    engine, soak = "test_compose_up_runs_a_take_through_crashes_and_drains_on_down", "test_soak_rss_stays_flat"
    quick = collected("-m", "not integration")
    assert engine not in quick  # the engine test is no integration test
    assert not HOSTS_TESTS & quick
    everything = collected()
    assert engine not in everything and soak not in everything
    assert not HOSTS_TESTS & everything
    assert collected("-m", "hosts") >= HOSTS_TESTS
    assert "test_plain_links_lose_a_hung_then_killed_viewers_backlog" in everything
