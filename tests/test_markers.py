"""The opt-in markers (soak, engine, hosts) stay out of every run whose ``-m`` does not name them, the
README's quick command ``-m "not integration"`` included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
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


class FakeItem:
    """What the conftest hook reads of a collected test."""

    def __init__(self, name: str, markers: tuple[str, ...] = (), fixturenames: tuple[str, ...] = ()) -> None:
        self.name = name
        self.fixturenames = list(fixturenames)
        self.markers = [getattr(pytest.mark, m).mark for m in markers]

    def iter_markers(self) -> list[pytest.Mark]:
        return self.markers

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker.mark)


def hook_keeps(markexpr: str) -> tuple[list[str], list[str], set[str]]:
    """The conftest hook over one test of each kind: the names it keeps, those it reports deselected,
    and those it marks integration."""
    import conftest

    items = [FakeItem("plain"), FakeItem("soak", ("soak",)), FakeItem("engine", ("engine",)),
             FakeItem("hosts", ("hosts", "integration")), FakeItem("process", fixturenames=("capture_factory",))]
    deselected: list[FakeItem] = []
    config = SimpleNamespace(getoption=lambda name: markexpr if name == "markexpr" else None,
                             hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    kept = list(items)
    conftest.pytest_collection_modifyitems(config, kept)  # type: ignore[arg-type]
    marked = {i.name for i in items if any(m.name == "integration" for m in i.iter_markers())}
    return [i.name for i in kept], [i.name for i in deselected], marked


def test_the_conftest_hook_leaves_out_the_opt_in_tests_and_marks_process_tests_integration() -> None:
    kept, deselected, marked = hook_keeps("not integration")
    assert kept == ["plain", "process"] and deselected == ["soak", "engine", "hosts"]
    assert marked == {"hosts", "process"}  # pytest's own -m then drops the integration ones
    assert hook_keeps("")[0] == ["plain", "process"]
    assert hook_keeps("hosts")[:2] == (["plain", "hosts", "process"], ["soak", "engine"])
    assert hook_keeps("soak or engine")[0] == ["plain", "soak", "engine", "process"]


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


@pytest.mark.integration  # three pytest processes (up to a minute under load); the hook's logic: above
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
