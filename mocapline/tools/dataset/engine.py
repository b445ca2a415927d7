"""Where the tasks run: a local process pool (default) or a Ray cluster, the same ``run_task``.

Both yield ``TakeResult`` as tasks finish, in any order, with a few tasks a worker in flight (a
finished take's outputs wait only for the driver to commit them). A pool worker that dies
(killed, out of memory) breaks the pool: a new one takes the takes still pending, and a take that
was in flight in ``MAX_ATTEMPTS`` broken pools is recorded as failed. Pool workers die with the
driver (``PR_SET_PDEATHSIG``), so a driver killed -9 leaves no worker converting behind it. Ray retries a
task whose worker or node died (its own ``max_retries``), then the take is recorded as failed.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import multiprocessing
import signal
import sys
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from mocapline.tools.dataset.manifest import FAILED
from mocapline.tools.dataset.task import TakeResult, TakeTask, run_task

MAX_ATTEMPTS = 3
IN_FLIGHT_PER_WORKER = 4
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _lost(task: TakeTask, why: str) -> TakeResult:
    return TakeResult({"take": task.take, "source": task.source, "source_sha256": task.source_sha256,
                       "settings_hash": task.settings_hash, "kind": task.kind, "status": FAILED, "reason": why})


def run_pool(tasks: Sequence[TakeTask], workers: int) -> Iterator[TakeResult]:
    """At most ``IN_FLIGHT_PER_WORKER`` tasks a worker are submitted at a time: a finished take's
    outputs are held only until the driver has committed them, whatever the dataset's size."""
    queue = deque(tasks)
    attempts = dict.fromkeys((t.take for t in tasks), 0)
    ctx = multiprocessing.get_context("spawn")
    limit = workers * IN_FLIGHT_PER_WORKER
    while queue:
        retry: list[TakeTask] = []
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent) as pool:
            running: dict[cf.Future[TakeResult], TakeTask] = {}
            try:
                while queue or running:
                    while queue and len(running) < limit and not retry:
                        task = queue.popleft()
                        running[pool.submit(run_task, task)] = task
                    if not running:
                        break
                    done, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
                    for future in done:
                        task = running.pop(future)
                        try:
                            result = future.result()
                        except BrokenProcessPool:
                            attempts[task.take] += 1
                            if attempts[task.take] >= MAX_ATTEMPTS:
                                yield _lost(task, f"worker died converting it ({MAX_ATTEMPTS} tries)")
                            else:
                                retry.append(task)
                            continue
                        yield result
                    if retry and not running:
                        break
            finally:
                for f in running:
                    f.cancel()
        if retry:
            queue.extendleft(reversed(retry))
            print(f"retarget-dataset: a worker died; {len(retry)} take(s) it left go to new workers",
                  file=sys.stderr)


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
