"""Runs in worker processes: a small pool that survives crashes and stops cleanly on Ctrl-C.

The parent puts cloudpickled :class:`RunSpec` s on a task queue; each worker takes one at a
time, runs it and sends ``("begin" | "start" | "progress" | "result", key, ...)``
messages back on one event queue, which the parent drains to drive the progress display
and collect results. A worker that dies (killed, out of memory, segfault) fails only the
run it had, and a new worker takes its place. On KeyboardInterrupt (or any error in the
parent) every worker gets SIGINT, so each run flushes its metrics; stragglers are
terminated after ``grace`` seconds and no process is left behind.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import queue as queue_module
import signal
import sys
from typing import Any, Sequence

import cloudpickle

from online_trainer.executors import ResultHandler, failed_result
from online_trainer.progress import NoProgress, ProgressDisplay, QueueProgress
from online_trainer.run import RunSpec, execute_run

logger = logging.getLogger(__name__)


def limit_torch_threads(torch_threads: int) -> None:
    """Make torch (imported now or later in this process) use ``torch_threads`` threads."""
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(torch_threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(torch_threads)


def _exit_without_teardown(events: Any) -> None:
    """End a worker that has finished its runs, skipping the interpreter's teardown.

    Tearing down the modules of a process that has loaded torch takes about a second, which
    every ``multi_run`` call would wait for. Results already put on ``events`` are written
    to the pipe first, and the ``atexit`` handlers (open writers, logging) still run.
    """
    events.close()
    events.join_thread()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def _worker_main(tasks: Any, events: Any, slots: Any, slot: int, torch_threads: int) -> None:
    limit_torch_threads(torch_threads)
    progress = QueueProgress(events)
    try:
        while True:
            payload = tasks.get()
            if payload is None:
                _exit_without_teardown(events)
            spec: RunSpec = cloudpickle.loads(payload)
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
    """Runs specs in ``num_workers`` processes started with ``start_method``."""

    def __init__(self, num_workers: int, start_method: str = "spawn", torch_threads: int = 1, grace: float = 5.0) -> None:
        self.context = multiprocessing.get_context(start_method)
        self.num_workers, self.torch_threads, self.grace = num_workers, torch_threads, grace
        self.tasks = self.context.Queue()
        self.events = self.context.Queue()
        self.slots = self.context.Array("q", [-1] * num_workers, lock=False)  # key of each worker's run
        self.processes: dict[int, Any] = {}  # slot -> process

    def _spawn(self, slot: int) -> None:
        self.slots[slot] = -1
        args = (self.tasks, self.events, self.slots, slot, self.torch_threads)
        process = self.context.Process(target=_worker_main, args=args, name=f"online_trainer-worker-{slot}")
        process.start()
        self.processes[slot] = process

    def start(self, count: int) -> None:
        """Start ``count`` workers (at most ``num_workers``) now; they wait for :meth:`run`.

        Starting them before the checks that precede the runs lets their start-up (a new
        interpreter importing the main script and torch, 1 to 2 s) overlap those checks.
        """
        for slot in range(len(self.processes), min(self.num_workers, count)):
            self._spawn(slot)

    def run(self, specs: Sequence[RunSpec], display: ProgressDisplay | NoProgress, on_result: ResultHandler) -> None:
        """Run every spec; return when all have a result."""
        by_index = {spec.key: spec for spec in specs}
        for spec in specs:
            self.tasks.put(cloudpickle.dumps(spec))
        self.start(len(specs))
        for _ in self.processes:
            self.tasks.put(None)
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
            for process in self.processes.values():
                process.join(self.grace)
        except BaseException:
            self.stop()
            raise
        finally:
            self._close_queues()

    def shutdown(self) -> None:
        """Terminate workers that never got to run (the checks before the runs failed)."""
        idle = [p for p in self.processes.values() if p.is_alive()]
        for process in idle:
            process.terminate()  # nothing of a run is in flight: they wait on the task queue or still import
        for process in idle:
            process.join(self.grace)
        self._close_queues()

    def _replace_dead_workers(self, by_index, pending, display, on_result) -> None:
        for slot, process in list(self.processes.items()):
            key = self.slots[slot]
            if process.is_alive() or key not in pending:
                continue
            logger.error("worker %d died with exit code %s during run %d", process.pid, process.exitcode, key)
            result = failed_result(by_index[key], f"WorkerDied: the worker process exited with code {process.exitcode}")
            pending.discard(key)
            display.run_finished(key, True)
            on_result(result)
            if pending:
                self._spawn(slot)  # takes the dead worker's unused stop sentinel
        if pending and not any(p.is_alive() for p in self.processes.values()):
            codes = sorted({p.exitcode for p in self.processes.values()})
            reason = (f"WorkerDied: every worker process exited (exit codes {codes}) before running it. With "
                      f"start_method='{self.context.get_start_method()}' workers import the main script again: "
                      "put the script's code under `if __name__ == '__main__':`.")
            for key in sorted(pending):
                display.run_finished(key, True)
                on_result(failed_result(by_index[key], reason))
            pending.clear()

    def stop(self) -> None:
        """Interrupt every worker, then terminate those still alive after ``grace`` seconds."""
        alive = [p for p in self.processes.values() if p.is_alive()]
        for process in alive:
            try:
                os.kill(process.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        for process in alive:
            process.join(self.grace)
        for process in alive:
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
