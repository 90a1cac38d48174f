"""Runs in worker processes: a small pool that survives crashes, stops cleanly on Ctrl-C and
stays warm between calls.

The parent puts cloudpickled :class:`RunSpec` s on a task queue; each worker takes one at a
time, runs it and sends ``("start" | "progress" | "result", key, ...)`` messages back on
one event queue, which the parent drains to drive the progress display and collect
results. A worker that dies (killed, out of memory, segfault) fails only the run it had,
and a new worker takes its place. On KeyboardInterrupt (or any error in the parent) every
worker gets SIGINT, so each run flushes its metrics; stragglers are terminated after
``grace`` seconds and no process is left behind.

Starting a worker costs 2 to 3 s with torch (a new interpreter importing torch, then torch's
lazy ``torch._dynamo`` import at the first optimizer), so ``multi_run`` calls share one pool
(:func:`shared_pool`) whose workers wait for the next call, like joblib's reusable executor.
Workers leave after ``idle_timeout`` seconds without work, when the parent exits or dies,
and at :func:`shutdown_workers`. The pool is started afresh when a source file of a module
the parent loaded from outside the Python installation (the user's code, an editable
install) changed since its workers started, so they never run stale code.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util  # noqa: F401  (its atexit hook must be registered before shutdown_workers)
import os
import queue as queue_module
import signal
import site
import sys
import time
from typing import Any, Sequence

import cloudpickle

from online_trainer.executors import ResultHandler, failed_result
from online_trainer.progress import NoProgress, ProgressDisplay, QueueProgress
from online_trainer.run import RunSpec, execute_run

logger = logging.getLogger(__name__)

IDLE_TIMEOUT = 120.0  # seconds a worker waits for the next call before it exits
_POLL = 1.0  # seconds between an idle worker's checks of its parent and its idle time
# Installed libraries a forkserver imports once for all its workers, when this process uses them:
# torch (1.7 s) and torch._dynamo (1.5 s, imported by the first optimizer) are most of a worker's start-up.
FORKSERVER_PRELOAD = ("numpy", "gymnasium", "torch", "torch._dynamo")


def limit_torch_threads(torch_threads: int) -> None:
    """Make torch (imported now or later in this process) use ``torch_threads`` threads."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(torch_threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(torch_threads)


def _exit_without_teardown(events: Any) -> None:
    """End a worker, skipping the interpreter's teardown.

    Tearing down the modules of a process that has loaded torch takes about a second.
    Results already put on ``events`` are written to the pipe first, and the ``atexit``
    handlers (open writers, logging) still run.
    """
    events.close()
    events.join_thread()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def _next_task(tasks: Any, events: Any, idle_timeout: float) -> bytes:
    """The next payload; leaves the process on a stop sentinel, when idle too long, or orphaned."""
    parent = multiprocessing.parent_process()
    idle_since = time.monotonic()
    while True:
        try:
            payload = tasks.get(timeout=_POLL)
        except queue_module.Empty:
            orphaned = parent is not None and not parent.is_alive()
            if orphaned or time.monotonic() - idle_since > idle_timeout:
                _exit_without_teardown(events)
            continue
        if payload is None:
            _exit_without_teardown(events)
        return payload


def _worker_main(tasks: Any, events: Any, slots: Any, slot: int, torch_threads: int, idle_timeout: float) -> None:
    limit_torch_threads(torch_threads)
    progress = QueueProgress(events)
    try:
        while True:
            spec: RunSpec = cloudpickle.loads(_next_task(tasks, events, idle_timeout))
            slots[slot] = spec.key  # shared memory: the parent sees it even if this process dies at once
            try:
                result = execute_run(spec, progress)
            except Exception as exc:
                result = failed_result(spec, exc)
            finally:
                spec.callback.close()
            events.put(("result", spec.key, result))
            slots[slot] = -1
    except KeyboardInterrupt:
        return  # execute_run flushed the run's metrics on its way out


class WorkerPool:
    """Runs specs in up to ``num_workers`` processes started with ``start_method``.

    Workers stay after :meth:`run` for the next one, until :meth:`close`, ``idle_timeout``
    seconds without work, or the parent's exit. After an interrupted run the pool is
    ``broken`` (its workers are stopped) and must not be used again.
    """

    def __init__(self, num_workers: int, start_method: str = "spawn", torch_threads: int = 1, grace: float = 5.0,
                 idle_timeout: float | None = None) -> None:
        self.context = multiprocessing.get_context(start_method)
        if start_method == "forkserver":
            preload_forkserver(self.context)
        self.num_workers, self.torch_threads, self.grace = num_workers, torch_threads, grace
        self.idle_timeout = IDLE_TIMEOUT if idle_timeout is None else idle_timeout
        self.settings = (num_workers, start_method, torch_threads)
        self.owner_pid = os.getpid()  # a forked child inherits this object but must not drive it
        self.started_at = time.time()
        self.broken = False
        self.tasks = self.context.Queue()
        self.events = self.context.Queue()
        self.slots = self.context.Array("q", [-1] * num_workers, lock=False)  # key of each worker's run
        self.processes: dict[int, Any] = {}  # slot -> process

    def _spawn(self, slot: int) -> None:
        self.slots[slot] = -1
        args = (self.tasks, self.events, self.slots, slot, self.torch_threads, self.idle_timeout)
        process = self.context.Process(target=_worker_main, args=args, name=f"online_trainer-worker-{slot}")
        process.start()
        self.processes[slot] = process

    def start(self, count: int) -> None:
        """Have ``count`` workers (at most ``num_workers``) alive, starting those missing.

        Starting them before the checks that precede the runs lets their start-up overlap
        those checks.
        """
        for slot in range(min(self.num_workers, count)):
            process = self.processes.get(slot)
            if process is None or not process.is_alive():
                self._spawn(slot)

    def run(self, specs: Sequence[RunSpec], display: ProgressDisplay | NoProgress, on_result: ResultHandler) -> None:
        """Run every spec; return when all have a result."""
        by_index = {spec.key: spec for spec in specs}
        self.start(len(specs))
        for spec in specs:
            self.tasks.put(cloudpickle.dumps(spec))
        pending = set(by_index)
        try:
            while pending:
                try:
                    message = self.events.get(timeout=0.2)
                except queue_module.Empty:
                    self._replace_dead_workers(by_index, pending, display, on_result)
                    continue
                kind, key, *payload = message
                if kind == "result":
                    result = payload[0]
                    pending.discard(key)
                    display.run_finished(key, result.status == "failed")
                    on_result(result)
                else:
                    display.handle(message)
        except BaseException:
            self.broken = True
            self.stop()
            self._close_queues()
            raise

    def _replace_dead_workers(self, by_index, pending, display, on_result) -> None:
        for slot, process in list(self.processes.items()):
            key = self.slots[slot]
            if process.is_alive():
                continue
            if key in pending:
                logger.error("worker %d died with exit code %s during run %d", process.pid, process.exitcode, key)
                reason = f"WorkerDied: the worker process exited with code {process.exitcode}"
                result = failed_result(by_index[key], reason)
                pending.discard(key)
                display.run_finished(key, True)
                on_result(result)
                if pending:
                    self._spawn(slot)
            elif process.exitcode == 0 and pending:
                self._spawn(slot)  # it left, idle, just as this call began
        if pending and not any(p.is_alive() for p in self.processes.values()):
            codes = sorted({p.exitcode for p in self.processes.values()})
            reason = (f"WorkerDied: every worker process exited (exit codes {codes}) before running it. With "
                      f"start_method='{self.context.get_start_method()}' workers import the main script again: "
                      "put the script's code under `if __name__ == '__main__':`.")
            for key in sorted(pending):
                display.run_finished(key, True)
                on_result(failed_result(by_index[key], reason))
            pending.clear()
            self.broken = True

    def stop(self) -> None:
        """Interrupt every worker, then terminate those still alive after ``grace`` seconds."""
        alive = [p for p in self.processes.values() if p.is_alive()]
        for process in alive:
            try:
                os.kill(process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        self._reap(alive)

    def close(self) -> None:
        """Let every worker leave (they are idle between runs), then release the queues."""
        if os.getpid() != self.owner_pid:
            return
        alive = [p for p in self.processes.values() if p.is_alive()]
        if not self.broken:
            for _ in alive:
                self.tasks.put(None)
        self._reap(alive)
        self._close_queues()
        self.broken = True

    def _reap(self, processes: list[Any]) -> None:
        for process in processes:
            process.join(self.grace)
        for process in processes:
            if process.is_alive():
                logger.warning("worker %d did not stop within %.0f s; terminating it", process.pid, self.grace)
                process.terminate()
                process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join(1.0)

    def _close_queues(self) -> None:
        for q in (self.tasks, self.events):
            q.cancel_join_thread()
            q.close()


def preload_forkserver(context: Any) -> None:
    """Have the forkserver (once it starts) import the installed libraries of :data:`FORKSERVER_PRELOAD`
    that this process has loaded, so workers fork with them loaded instead of importing them each.

    Only modules of the Python installation are preloaded: user code (which may be edited
    between calls) is imported by each worker, as with spawn. ``__main__`` stays preloaded,
    as by default.
    """
    installed = _installation_dirs()
    names = [name for name in FORKSERVER_PRELOAD if _is_installed(sys.modules.get(name), installed)]
    context.set_forkserver_preload(["__main__", *names])


_shared: WorkerPool | None = None


def shared_pool(num_workers: int, start_method: str, torch_threads: int) -> WorkerPool:
    """The pool ``multi_run`` calls share, started afresh when it cannot serve this call."""
    global _shared
    pool = _shared
    if pool is not None and (pool.broken or pool.settings != (num_workers, start_method, torch_threads)
                             or _code_changed_since(pool.started_at)):
        pool.close()
        pool = None
    if pool is None:
        pool = _shared = WorkerPool(num_workers, start_method, torch_threads)
    return pool


def shutdown_workers() -> None:
    """Stop the worker processes kept for the next ``multi_run`` call.

    They also leave by themselves after two idle minutes and when this process exits; call
    this to free their memory at once.
    """
    global _shared
    if _shared is not None and _shared.owner_pid == os.getpid():
        _shared.close()
        _shared = None


atexit.register(shutdown_workers)


def _installation_dirs() -> tuple[str, ...]:
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _is_installed(module: Any, installed: tuple[str, ...]) -> bool:
    """Whether ``module`` (None: not loaded) was loaded from a file under one of the ``installed`` dirs."""
    path = getattr(module, "__file__", None)
    return bool(path) and os.path.realpath(path).startswith(installed)


def _code_changed_since(timestamp: float) -> bool:
    """Whether the source of a loaded module outside the Python installation changed after ``timestamp``."""
    installed = _installation_dirs()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or _is_installed(module, installed):
            continue
        try:
            if os.stat(path).st_mtime > timestamp:
                return True
        except OSError:
            continue
    return False
