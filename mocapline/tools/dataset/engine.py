"""Where the tasks run: a local process pool (default) or a Ray cluster, the same ``run_task``.

Both yield ``TakeResult`` as tasks finish, in any order. A pool worker that dies (killed, out of
memory) breaks the pool: a new one takes the takes still pending, and a take that was in flight
in ``MAX_ATTEMPTS`` broken pools is recorded as failed. Pool workers die with the driver
(``PR_SET_PDEATHSIG``), so a driver killed -9 leaves no worker converting behind it. Ray retries a
task whose worker or node died (its own ``max_retries``), then the take is recorded as failed.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool

from mocapline.tools.dataset.manifest import FAILED
from mocapline.tools.dataset.task import TakeResult, TakeTask, run_task

MAX_ATTEMPTS = 3
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _lost(task: TakeTask, why: str) -> TakeResult:
    return TakeResult({"take": task.take, "source": task.source, "source_sha256": task.source_sha256,
                       "settings_hash": task.settings_hash, "kind": task.kind, "status": FAILED, "reason": why})


def run_pool(tasks: Sequence[TakeTask], workers: int) -> Iterator[TakeResult]:
    pending = list(tasks)
    attempts = dict.fromkeys((t.take for t in tasks), 0)
    ctx = multiprocessing.get_context("spawn")
    while pending:
        with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with_parent) as pool:
            futures = {pool.submit(run_task, t): t for t in pending}
            pending = []
            try:
                for future in cf.as_completed(futures):
                    task = futures[future]
                    try:
                        yield future.result()
                    except BrokenProcessPool:
                        attempts[task.take] += 1
                        if attempts[task.take] >= MAX_ATTEMPTS:
                            yield _lost(task, f"worker died converting it ({MAX_ATTEMPTS} tries)")
                        else:
                            pending.append(task)
            finally:
                for f in futures:
                    f.cancel()
        if pending:
            print(f"retarget-dataset: a worker died; {len(pending)} take(s) it left go to new workers",
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
        refs = {remote.remote(t): t for t in tasks}
        waiting = list(refs)
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            for ref in ready:
                try:
                    yield ray.get(ref)
                except (ray.exceptions.RayError, OSError) as exc:
                    yield _lost(refs[ref], f"ray: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    finally:
        ray.shutdown()
