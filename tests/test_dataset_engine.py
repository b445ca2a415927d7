"""The local pool engine when workers die: every take comes back once, whatever the timing."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from mocapline.tools.dataset.engine import ALONE_TRIES, run_pool
from mocapline.tools.dataset.manifest import DONE, FAILED
from mocapline.tools.dataset.task import TakeResult, TakeTask
from mocapline.tools.retarget_file import FileSettings


def _task(take: str, source: str = "") -> TakeTask:
    return TakeTask(take=take, source=source, kind="bvh", source_sha256="0", settings_hash="0",
                    settings=FileSettings(), formats=())


def quick_or_dying(task: TakeTask) -> TakeResult:
    """Runs in a spawned worker: a take named ``die*`` kills its worker every time, one named
    ``once*`` the first time only (its source is the marker file that remembers)."""
    if task.take.startswith("die"):
        os._exit(9)
    if task.take.startswith("once") and not os.path.exists(task.source):
        Path(task.source).touch()
        os._exit(9)
    time.sleep(0.002)
    return TakeResult({"take": task.take, "status": DONE})


@pytest.mark.parametrize("round_", range(3))
def test_every_take_comes_back_once_when_workers_die(tmp_path, round_) -> None:
    """Dying workers break the pool while other tasks finish: the broken pool is noticed whether
    a future or the next submit tells first, and no take is lost, doubled or sent to it again."""
    tasks = [_task(f"ok{i:03d}") for i in range(60)]
    tasks.insert(7 + round_, _task("die"))
    tasks.insert(30, _task("once", str(tmp_path / "marker")))
    results = list(run_pool(tasks, workers=2, work=quick_or_dying))
    takes = [r.record["take"] for r in results]
    assert sorted(takes) == sorted(t.take for t in tasks)
    status = {r.record["take"]: r.record["status"] for r in results}
    assert status.pop("die") == FAILED and status.pop("once") == DONE
    assert set(status.values()) == {DONE}
    lost = next(r for r in results if r.record["take"] == "die")
    assert f"alone, {ALONE_TRIES} tries" in lost.record["reason"]
