"""Where the tasks run: a local process pool (default) or a Ray cluster, the same ``run_task``.

Both yield ``TakeResult`` as tasks finish, in any order, with a few tasks a worker in flight (a
finished take's outputs wait only for the driver to commit them). A pool worker that dies
(killed, out of memory) breaks the pool: the takes then in flight run again one at a time, one
whose worker dies while it runs alone, twice, is recorded as failed, and a new pool takes the
rest. Pool workers die with the driver (``PR_SET_PDEATHSIG``), so a driver killed -9 leaves no
worker converting behind it.

A pool worker hands its result back through a file (``_staged``), and the pool's pipe carries only
that file's name. A worker killed while it wrote a result of megabytes into the pipe left half a
message there, and the pool, which still waits for the rest while another worker keeps the pipe
open, hung for good (CI's kill -9 test did, once). A name is a single write under ``PIPE_BUF``,
which a pipe takes whole or not at all. Ray retries a task whose worker or node died (its own
``max_retries``, 3), then the take is recorded as failed ("ray task lost"); tested with a worker
and with a whole second node killed -9 mid-take (tests/test_dataset.py), Ray's retries were
enough there, so none are added here.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import itertools
import multiprocessing
import os
import pickle
import signal
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from mocapline.tools.dataset.manifest import FAILED, TMP_MARK
from mocapline.tools.dataset.task import TakeResult, TakeTask, run_task

ALONE_TRIES = 2
STAGING_PREFIX = f"results{TMP_MARK}"  # a folder a driver killed -9 left: the next run's clean_temporaries
IN_FLIGHT_PER_WORKER = 4
PR_SET_PDEATHSIG = 1
Work = Callable[[TakeTask], TakeResult]
_staged_count = itertools.count()


def _die_with_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _staged(work: Work, task: TakeTask, folder: str) -> str:
    """Runs in a pool worker: ``work(task)`` pickled into a file of ``folder``; its name is the reply."""
    path = Path(folder) / f"{os.getpid()}-{next(_staged_count)}.result"
    with open(path, "wb") as fh:
        pickle.dump(work(task), fh, protocol=pickle.HIGHEST_PROTOCOL)
    return str(path)


def _unstaged(name: str) -> TakeResult:
    """A staged result read back (a file of this run's own workers) and removed."""
    path = Path(name)
    with open(path, "rb") as fh:
        result = pickle.load(fh)
    path.unlink()
    if not isinstance(result, TakeResult):
        raise TypeError(f"{path}: not a TakeResult")
    return result


def _lost(task: TakeTask, why: str) -> TakeResult:
    return TakeResult({"take": task.take, "source": task.source, "source_sha256": task.source_sha256,
                       "settings_hash": task.settings_hash, "kind": task.kind, "status": FAILED, "reason": why})


def _until_broken(queue: deque[TakeTask], workers: int, work: Work, ctx: BaseContext,
                  folder: str) -> Generator[TakeResult, None, list[TakeTask]]:
    """Run the queue in one pool until it is done or broken; returns the takes that were in flight
    when it broke. A broken pool shows itself as a future's ``BrokenProcessPool`` or at the next
    ``submit``, whichever comes first; futures that had finished keep their results."""
    limit = workers * IN_FLIGHT_PER_WORKER
    broken, suspects = False, []
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent) as pool:
        running: dict[cf.Future[str], TakeTask] = {}
        try:
            while running or (queue and not broken):
                while queue and not broken and len(running) < limit:
                    task = queue.popleft()
                    try:
                        running[pool.submit(_staged, work, task, folder)] = task
                    except BrokenProcessPool:
                        queue.appendleft(task)
                        broken = True
                if not running:
                    break
                done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                for future in done:
                    task = running.pop(future)
                    try:
                        name = future.result()
                    except BrokenProcessPool:
                        broken = True
                        suspects.append(task)
                        continue
                    yield _unstaged(name)
        finally:
            for f in running:
                f.cancel()
    return suspects


def _alone(suspects: list[TakeTask], work: Work, ctx: BaseContext, folder: str) -> Iterator[TakeResult]:
    """Each take runs by itself in a one-worker pool, so a worker that dies now died of that take
    (or of something outside, such as a kill -9: hence ``ALONE_TRIES``)."""
    pending = deque(suspects)
    deaths = dict.fromkeys((t.take for t in suspects), 0)
    while pending:
        with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_die_with_parent) as pool:
            while pending:
                task = pending[0]
                try:
                    name = pool.submit(_staged, work, task, folder).result()
                except BrokenProcessPool:
                    deaths[task.take] += 1
                    if deaths[task.take] >= ALONE_TRIES:
                        pending.popleft()
                        yield _lost(task, f"worker died converting it (alone, {ALONE_TRIES} tries)")
                    break
                pending.popleft()
                yield _unstaged(name)


def run_pool(tasks: Sequence[TakeTask], workers: int, work: Work = run_task,
             staging: Path | None = None) -> Iterator[TakeResult]:
    """At most ``IN_FLIGHT_PER_WORKER`` tasks a worker are submitted at a time: a finished take's
    outputs are held only until the driver has committed them, whatever the dataset's size. They
    wait in a folder of their own made under ``staging`` (the system's temporary folder when None),
    removed when the run ends.

    When a worker dies, every take then in flight is a suspect (the pool cannot tell which one its
    dead worker held): they run again one at a time before the rest goes on in a new pool, so a
    take that kills its worker is recorded as failed and its neighbours are not."""
    queue = deque(tasks)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix=STAGING_PREFIX, dir=staging) as folder:
        while queue:
            suspects = yield from _until_broken(queue, workers, work, ctx, folder)
            if suspects:
                print(f"retarget-dataset: a worker died; the {len(suspects)} take(s) then in flight run again "
                      f"one at a time, {len(queue)} more go to new workers", file=sys.stderr)
                yield from _alone(suspects, work, ctx, folder)


def run_ray(tasks: Sequence[TakeTask], address: str) -> Iterator[TakeResult]:
    """``address``: a cluster's (HOST:PORT, ``ray://HOST:PORT``), ``auto`` (the one this machine
    belongs to) or ``local`` (start one here for this run)."""
    try:
        import ray
    except ImportError:
        raise RuntimeError("--ray needs Ray: pip install 'mocapline[cluster]'") from None
    # "local": a one-machine cluster started (and stopped) here; else ADDRESS or "auto"
    try:
        ray.init(address=None if address == "local" else address, log_to_driver=False, ignore_reinit_error=True)
    except (ConnectionError, ValueError) as exc:
        raise RuntimeError(f"--ray {address}: {exc}") from None
    try:
        remote = ray.remote(num_cpus=1)(run_task)
        queue = deque(tasks)
        limit = max(2, int(ray.cluster_resources().get("CPU", 1))) * IN_FLIGHT_PER_WORKER
        running: dict[Any, TakeTask] = {}
        while queue or running:
            while queue and len(running) < limit:
                task = queue.popleft()
                running[remote.remote(task)] = task
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                task = running.pop(ref)
                try:
                    yield ray.get(ref)
                except (ray.exceptions.RayError, OSError) as exc:
                    yield _lost(task, f"ray: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    finally:
        ray.shutdown()
