"""The local pool engine when workers die: every take comes back once, whatever the timing."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


def dies_between_writes(task: TakeTask) -> TakeResult:
    """Runs in a spawned worker, its result a megabyte as a clip's is. A take named ``cut`` arms
    it: from then on the worker is killed -9 at its second write to a pipe, where a kill at a
    random moment can land (between the two writes of a reply over 16 KiB, its length and its
    bytes, or between two replies)."""
    if task.take == "cut":
        from multiprocessing import connection

        send = connection.Connection._send
        writes = itertools.count()

        def _send(self: connection.Connection, buf: Any, *rest: Any) -> None:
            if next(writes) >= 1:
                os.kill(os.getpid(), signal.SIGKILL)
            send(self, buf, *rest)

        connection.Connection._send = _send  # type: ignore[method-assign]
    return TakeResult({"take": task.take, "status": DONE}, {"clip.npz": bytes(1 << 20)})


_CUT_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_dataset_engine import _task, dies_between_writes
from mocapline.tools.dataset.engine import run_pool
tasks = [_task(f"ok{i:02d}") for i in range(20)]
tasks.insert(3, _task("cut"))
results = list(run_pool(tasks, workers=2, work=dies_between_writes, staging=sys.argv[2]))
print(json.dumps({r.record["take"]: [r.record["status"], len(r.outputs.get("clip.npz", b""))] for r in results}))
"""


def test_a_worker_killed_while_it_replies_does_not_hang_the_pool(tmp_path) -> None:
    """A worker killed part-way through handing back a large result: the pool still notices it
    died (it hung for good when the result went through the pipe), and every take comes back once
    with its outputs; the folder the results waited in is gone."""
    try:
        run = subprocess.run([sys.executable, "-c", _CUT_RUN, str(Path(__file__).parent), str(tmp_path)],
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the pool hung after a worker was killed while it replied")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "a worker died" in run.stderr
    takes = json.loads(run.stdout)
    assert sorted(takes) == sorted(["cut", *(f"ok{i:02d}" for i in range(20))])
    assert all(v == [DONE, 1 << 20] for v in takes.values()), takes
    assert list(tmp_path.iterdir()) == []
