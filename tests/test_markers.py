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


def collected(*runs: tuple[str, ...]) -> list[set[str]]:
    """The test names each run's arguments collect (the runs side by side: each is a pytest process)."""
    procs = [subprocess.Popen([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args,
                               str(TESTS / "test_crash.py"), str(TESTS / "test_compose_engine.py"),
                               str(TESTS / "test_hosts.py"), __file__],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=TESTS.parent)
             for args in runs]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [{line.split("::")[-1] for line in out.splitlines() if "::" in line} for out in outs]


def test_the_quick_command_selects_no_soak_or_engine_test() -> None:
    engine, soak = "test_compose_up_runs_a_take_through_crashes_and_drains_on_down", "test_soak_rss_stays_flat"
    quick, everything, hosts = collected(("-m", "not integration"), (), ("-m", "hosts"))
    assert "test_an_expression_that_does_not_name_an_opt_in_marker_leaves_it_out" in quick  # it did collect
    assert engine not in quick  # the engine test is no integration test
    assert not HOSTS_TESTS & quick
    assert engine not in everything and soak not in everything
    assert not HOSTS_TESTS & everything
    assert hosts >= HOSTS_TESTS
    assert "test_plain_links_lose_a_hung_then_killed_viewers_backlog" in everything
