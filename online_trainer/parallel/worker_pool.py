"""The local worker pool: worker processes that survive crashes and stop cleanly on Ctrl-C.

Each worker has one duplex pipe of its own (see :mod:`online_trainer.parallel.worker_process` for
what travels on it) and a lifeline (:mod:`online_trainer.parallel.lifeline`) that kills it when the
parent dies. The parent hands each run to an idle worker itself and waits, with
:func:`multiprocessing.connection.wait`, on every pipe and every process sentinel at once.
Nothing is shared between workers, so a worker that dies, busy or idle, holds no lock
anyone needs: the run it had fails with the worker's exit code (and signal name), a run it
had not yet taken goes to another worker, and a new worker takes its place. On
KeyboardInterrupt, or any error in the parent (``on_result`` raising included), every
worker running a run gets the stop signal (SIGUSR2, a KeyboardInterrupt there), so each run flushes its metrics;
stragglers are terminated after
``grace`` seconds, the pool is marked broken and the error is raised again.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing
import os
import pickle
import re
import signal
import site
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any, cast

from online_trainer.errors import Preempted, RunSetupError
from online_trainer.parallel import shipping
from online_trainer.parallel.execution import ResultHandler, StartHandler, failed_result, no_start
from online_trainer.parallel.lifeline import Lifeline, describe_exit, has_exited, held_write_ends
from online_trainer.parallel.threads import environment, thread_variables
from online_trainer.parallel.worker_process import STOP_SIGNAL, worker_main
from online_trainer.progress.display import NoProgress, ProgressDisplay
from online_trainer.run.builtin import preemption
from online_trainer.run.interrupts import finishing_the_stop
from online_trainer.run.one_run import RunResult, RunSpec

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext, ForkServerContext, SpawnContext

logger = logging.getLogger(__name__)

IDLE_TIMEOUT = 120.0  # seconds a worker waits for the next call before it exits
_WAIT = 1.0  # seconds between the parent's checks of its workers when nothing happens
_REAP_AFTER = 3.0  # seconds past the idle timeout at which the parent collects the workers that left
_MAX_LOST = 3  # workers that may die while a run is handed to them before the run is failed
# Installed libraries a forkserver imports once for all its workers, when this process uses them:
# torch (1.7 s) and torch._dynamo (1.5 s, imported by the first optimizer) are most of a worker's start-up.
FORKSERVER_PRELOAD = ("numpy", "gymnasium", "torch", "torch._dynamo")


@dataclasses.dataclass
class _Worker:
    """The parent's view of one worker process."""

    process: Any
    conn: Connection
    lifeline: Lifeline
    ready: bool = False
    spec: RunSpec | None = None  # the run sent to it, until its result arrives
    took: bool = False  # whether it received that run (else the run can go to another worker)
    waited: set[Any] = dataclasses.field(default_factory=set)  # its pipe and sentinel, until they reach EOF

    def __post_init__(self) -> None:
        self.waited = {self.conn, self.process.sentinel}


class _Call:
    """The state of one :meth:`WorkerPool.run` call: runs waiting, runs pending, where results go."""

    def __init__(
        self,
        specs: Sequence[RunSpec],
        display: ProgressDisplay | NoProgress,
        on_result: ResultHandler,
        on_start: StartHandler = no_start,
    ):
        self.waiting = collections.deque(specs)
        self.pending = {spec.key for spec in specs}
        self.display, self.on_result, self.on_start = display, on_result, on_start
        self.start_failures: list[int | None] = []  # exit codes of workers that died before they were up
        self.lost: collections.Counter[int] = collections.Counter()  # per run: workers that died before taking it
        self.interrupted = False  # some run ended interrupted (a preemption signal stopped it)
        self.stopped: list[Preempted] = []  # what every such run raised
        self.said: set[tuple[str, int, str]] = set()  # the workers' log records handled: (logger, level, message)

    def finish(self, spec: RunSpec, result: RunResult) -> None:
        """Hand ``result`` on (once per run); ``on_result`` raising propagates."""
        if spec.key not in self.pending:
            return
        self.pending.discard(spec.key)
        self.interrupted |= result.status == "interrupted"
        stopped = result.extra.get("exception_object")
        if isinstance(stopped, Preempted):
            self.stopped.append(stopped)
        self.display.run_finished(spec.key, result.status)
        self.on_result(result)

    def raised(self, on_disk: bool) -> Preempted:
        """What the call raises for the preemption (see :meth:`Preempted.of_runs`)."""
        return Preempted.of_runs(self.stopped, on_disk)


def _log_levels() -> dict[str, int]:
    """The levels of this process's loggers that have one (``""``: the root's), for a worker to log at."""
    levels = {"": logging.getLogger().level}
    for name, logger in logging.Logger.manager.loggerDict.items():
        if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
            levels[name] = logger.level
    return levels


class WorkerPool:
    """Runs specs in up to ``num_workers`` processes started with ``start_method``.

    Workers stay after :meth:`run` for the next one, until :meth:`close`, ``idle_timeout``
    seconds without work (a timer thread then collects their exit status, so that they do not
    stay ``<defunct>``), or the parent's exit or death. After an interrupted run, or one
    whose ``on_result`` raised, the pool is ``broken`` (its workers are stopped) and must
    not be used again.

    Args:
        num_workers: worker processes at most.
        start_method: ``"spawn"``, ``"forkserver"`` or ``"fork"``.
        torch_threads: threads of every pool (torch, BLAS, OpenMP) in each worker (None: as the environment says);
            see :mod:`online_trainer.parallel.threads`.
        grace: seconds interrupted workers get to flush and leave before they are terminated.
        idle_timeout: seconds a worker waits for work before it leaves (None: :data:`IDLE_TIMEOUT`).
    """

    def __init__(
        self,
        num_workers: int,
        start_method: str = "spawn",
        torch_threads: int | None = 1,
        grace: float = 5.0,
        idle_timeout: float | None = None,
    ) -> None:
        # get_context(str) is typed BaseContext, which has no Process; each start method's own context has one
        self.context = cast("SpawnContext | ForkServerContext | ForkContext", multiprocessing.get_context(start_method))
        if start_method == "forkserver":
            preload_forkserver(self.context)
        self.start_method = start_method
        self.num_workers, self.torch_threads, self.grace = num_workers, torch_threads, grace
        self.idle_timeout = IDLE_TIMEOUT if idle_timeout is None else idle_timeout
        self.settings = (num_workers, start_method, torch_threads)
        self.owner_pid = os.getpid()  # a forked child inherits this object but must not drive it
        self.started_at = time.time()
        self.broken = False
        self.workers: dict[int, _Worker] = {}  # slot -> worker
        # held while this process's thread drives the workers; the idle reaper (a timer thread) only tries it
        self._driving = threading.RLock()
        self._reaper: threading.Timer | None = None

    @property
    def processes(self) -> dict[int, Any]:
        """The process of each slot."""
        return {slot: worker.process for slot, worker in self.workers.items()}

    def _spawn(self, slot: int) -> _Worker:
        """Start the worker of ``slot``, with its pipe and its lifeline."""
        parent_end, child_end = self.context.Pipe(duplex=True)
        lifeline = Lifeline()
        # PR_SET_PDEATHSIG fires when the thread that started the worker ends: only from the main thread. A forkserver's
        # worker would get it at the forkserver's exit, not this process's: its lifeline serves.
        death_signal = self.start_method != "forkserver" and threading.current_thread() is threading.main_thread()
        inherited = held_write_ends() if self.start_method == "fork" else ()
        args = (
            child_end,
            lifeline.reader,
            self.owner_pid,
            death_signal,
            self.torch_threads,
            self.idle_timeout,
            inherited,
            multiprocessing.get_start_method(allow_none=True),
        )
        process = self.context.Process(target=worker_main, args=args, name=f"online_trainer-worker-{slot}")
        try:
            # in the environment it starts with, so that numpy's BLAS, loaded before worker_main runs, reads the limit
            with environment(thread_variables(self.torch_threads)):
                process.start()
        except BaseException:
            lifeline.cut()
            parent_end.close()
            raise
        finally:
            child_end.close()  # the child has its copy: end-of-file here means the worker is gone
            lifeline.started()
        worker = self.workers[slot] = _Worker(process, parent_end, lifeline)
        return worker

    def start(self, count: int) -> None:
        """Have ``count`` workers (at most ``num_workers``) alive, starting those missing.

        Starting them before the checks that precede the runs lets their start-up overlap
        those checks. A worker that died since the last call (killed while idle) is replaced.
        """
        with self._driving:
            self._cancel_reaper()
            self._start(count)
            self._schedule_reaper()  # a call that runs nothing leaves them idle

    def _start(self, count: int) -> None:
        for slot in range(min(self.num_workers, count)):
            worker = self.workers.get(slot)
            if worker is not None and not has_exited(worker.process):
                continue
            if worker is not None:
                self._discard(slot)
            self._spawn(slot)

    def run(
        self,
        specs: Sequence[RunSpec],
        display: ProgressDisplay | NoProgress,
        on_result: ResultHandler,
        on_start: StartHandler = no_start,
    ) -> None:
        """Run every spec; return when each has a result (a failed one when its worker died).

        ``on_start(spec)`` is called as a run is sent to a worker, before the worker can begin it.
        """
        with self._driving:
            self._cancel_reaper()
            try:
                self._run(specs, display, on_result, on_start)
            finally:
                if not self.broken:
                    self._schedule_reaper()

    def _run(
        self,
        specs: Sequence[RunSpec],
        display: ProgressDisplay | NoProgress,
        on_result: ResultHandler,
        on_start: StartHandler,
    ) -> None:
        if self.broken:
            raise RuntimeError("This worker pool was stopped; use shared_pool() for a new one.")
        call = _Call(specs, display, on_result, on_start)
        on_disk = any(spec.exp_dir is not None for spec in specs)
        try:
            self._start(len(specs))
            while call.pending:
                if preemption.requested() and not self._busy():  # every run out checkpointed and stopped
                    raise call.raised(on_disk)
                self._dispatch(call)
                if not self.workers:
                    self._fail_unstarted(call)
                    break
                ready = set(wait([x for w in self.workers.values() for x in w.waited], timeout=_WAIT))
                for slot, worker in list(self.workers.items()):
                    if worker.conn in ready:
                        self._receive(worker, call)
                    if worker.process.sentinel in ready or has_exited(worker.process):
                        self._bury(slot, call)
            if call.interrupted:  # a signal that came as the last runs ended stopped none: the call returns
                raise call.raised(on_disk)
        except BaseException as exc:
            self.broken = True
            with finishing_the_stop(exc):  # the workers flush their runs' records
                if isinstance(
                    exc, KeyboardInterrupt
                ):  # Ctrl-C, the notebook's stop button: the bar says how runs ended
                    for worker in self.workers.values():
                        if worker.spec is not None and worker.spec.key in call.pending:
                            display.run_finished(worker.spec.key, "interrupted")
                self.stop()
            raise

    def _schedule_reaper(self) -> None:
        """Collect the workers once they have left idle: until then each stays ``<defunct>`` in ``ps``."""
        self._reaper = threading.Timer(self.idle_timeout + _REAP_AFTER, self._reap_idle)
        self._reaper.daemon = True
        self._reaper.start()

    def _cancel_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    def _reap_idle(self) -> None:
        if not self._driving.acquire(blocking=False):  # a call drives the workers: it collects those that left
            return
        try:
            if self.broken or os.getpid() != self.owner_pid:
                return
            # is_alive() collects the exit status of a worker that left; one still there (its idle clock started
            # after this timer's) is looked at again after another idle timeout
            if any([worker.process.is_alive() for worker in self.workers.values()]):
                self._schedule_reaper()
        finally:
            self._driving.release()

    def signal_running(self, signum: int) -> None:
        """Pass a preemption signal on to the workers with a run (as SIGUSR1: each checkpoints its run and stops it)."""
        for worker in list(self.workers.values()):
            if worker.spec is not None:
                try:
                    os.kill(worker.process.pid, signal.SIGUSR1)
                except (ProcessLookupError, TypeError):
                    pass

    def _dispatch(self, call: _Call) -> None:
        """Send waiting runs to idle workers (none once a preemption signal came); start workers for empty slots."""
        if preemption.requested():
            return
        for slot in range(min(self.num_workers, len(call.waiting) + self._busy())):
            if slot not in self.workers and call.waiting and not call.start_failures:
                self._spawn(slot)
        for worker in list(self.workers.values()):
            if not call.waiting:
                return
            if worker.spec is not None:
                continue
            spec = call.waiting.popleft()
            worker.spec, worker.took = spec, False
            call.on_start(spec)  # before the send: a run that may have begun is never recorded as not started
            try:
                # the worker logs at this process's levels, to its handlers
                sent = dataclasses.replace(spec, log_levels=_log_levels())
                # when it was sent: a preemption signal the worker got before is not for this run (time.monotonic()
                # is one clock for every process of the machine)
                worker.conn.send((time.monotonic(), shipping.dumps(sent)))
            except OSError:  # it died: its sentinel tells the rest
                call.waiting.appendleft(spec)
                worker.spec = None

    def _busy(self) -> int:
        """Workers with a run."""
        return sum(w.spec is not None for w in self.workers.values())

    def _receive(self, worker: _Worker, call: _Call) -> None:
        """Handle every message ``worker`` has sent so far."""
        while True:
            try:
                if not worker.conn.poll():
                    return
                message = worker.conn.recv()
            except (EOFError, OSError):
                worker.waited.discard(worker.conn)  # it exited: the sentinel is (or will be) ready
                return
            except Exception as exc:  # a message cut off mid-way (the worker was interrupted while sending)
                logger.error("worker %d sent an unreadable message (%s); stopping it", worker.process.pid, exc)
                worker.process.kill()
                return
            kind = message[0]
            if kind == "ready":
                worker.ready = True
            elif kind == "took":
                worker.took = True
            elif kind in ("result", "error") and worker.spec is not None:
                spec, worker.spec, worker.took = worker.spec, None, False
                result = self._result(spec, *message)
                if result.status == "failed":  # as it happens, as in-process runs say it (the summary comes at the end)
                    logger.error("%s (seed %d) failed: %s", spec.name, spec.seed, result.extra.get("exception"))
                call.finish(spec, result)
            elif kind in ("start", "progress", "resumed"):
                call.display.handle(message)
            elif kind == "log":  # a worker's record, written by this process's handlers (above the bars)
                record = message[1]
                named = logging.getLogger(record.name)
                said = (record.name, record.levelno, _said(record))
                # a warning each worker gives once (of a setting every run shares) is said once in the call (N16)
                if named.isEnabledFor(record.levelno) and said not in call.said:
                    call.said.add(said)
                    named.handle(record)

    @staticmethod
    def _result(spec: RunSpec, kind: str, payload: Any) -> RunResult:
        """The result a ``("result", bytes)`` or ``("error", text)`` message stands for."""
        if kind == "error":
            return failed_result(spec, payload)
        try:
            result = pickle.loads(payload)
        except Exception as exc:
            return failed_result(
                spec, f"ResultNotRead: the run's result could not be unpickled here ({type(exc).__name__}: {exc})"
            )
        if "agent_not_sent" in result.extra:
            logger.warning(
                "run %d: its trained agent could not be sent back from the worker (%s), so none is kept "
                "for it; pass records=RecordOptions(keep_agents=False) to skip sending agents",
                spec.run_idx,
                result.extra["agent_not_sent"],
            )
        return result

    def _bury(self, slot: int, call: _Call) -> None:
        """A worker exited: read what it sent before, fail or hand on its run, free its slot."""
        worker = self.workers[slot]
        self._receive(worker, call)
        worker.process.join(1.0)
        code = worker.process.exitcode
        if not has_exited(worker.process):
            worker.waited.discard(worker.process.sentinel)  # closed, yet the process lives: checked every _WAIT s
            return
        self._discard(slot)
        if not worker.ready and preemption.requested():  # the signal reached it before its handlers: no run began
            logger.info("worker %d was stopped by the preemption signal before it was ready", worker.process.pid)
        elif not worker.ready:
            call.start_failures.append(code)
            logger.error("worker %d %s before it was ready", worker.process.pid, describe_exit(code))
        spec = worker.spec
        if spec is None:
            return
        if worker.took:
            reason = f"WorkerDied: the worker process {describe_exit(code)} during this run"
            logger.error("%s (seed %d): %s", spec.name, spec.seed, reason)
            call.finish(spec, failed_result(spec, reason))
            return
        call.lost[spec.key] += 1
        if call.lost[spec.key] < _MAX_LOST:
            call.waiting.appendleft(spec)  # it never received the run: another worker runs it
        else:
            reason = (
                f"WorkerDied: {_MAX_LOST} worker processes died as they were given this run (the last "
                f"{describe_exit(code)})"
            )
            call.finish(spec, failed_result(spec, reason))

    def _fail_unstarted(self, call: _Call) -> None:
        codes = sorted({c for c in call.start_failures}, key=str)
        reason = f"WorkerDied: every worker process exited (exit codes {codes}) before running it. " + _start_hint(
            self.start_method
        )
        for spec in list(call.waiting):  # no worker could start: as a setup error, it stops the call, keeping nothing
            call.finish(spec, failed_result(spec, RunSetupError(spec.run_idx, spec.seed, RuntimeError(reason))))
        call.waiting.clear()
        self.broken = True

    def _discard(self, slot: int) -> None:
        """Forget the worker of ``slot``, which has exited."""
        worker = self.workers.pop(slot)
        worker.process.join(0.1)
        worker.conn.close()
        worker.lifeline.cut()

    def stop(self) -> None:
        """Interrupt the workers running a run (they flush its metrics), end the others at once,
        then terminate those still alive after ``grace`` seconds.

        A worker that may be running a run (it took one, or it is ready and one was sent) gets
        :data:`~online_trainer.parallel.worker_process.STOP_SIGNAL`; the others (still starting, or idle)
        get SIGTERM: a KeyboardInterrupt there would print a traceback from wherever they stand (an
        import, the lifeline's start) for a Ctrl-C the user never pressed.
        """
        with self._driving:
            self._cancel_reaper()
            self._stop()

    def _stop(self) -> None:
        alive = [w for w in self.workers.values() if not has_exited(w.process)]
        for worker in alive:
            try:
                running = worker.took or (worker.ready and worker.spec is not None)
                os.kill(worker.process.pid, STOP_SIGNAL if running else signal.SIGTERM)
            except ProcessLookupError:
                pass
        self._reap([w.process for w in alive])
        self._close_pipes()

    def close(self) -> None:
        """Let every worker leave (they are idle between runs), then close the pipes.

        A worker still starting (importing its libraries: seconds with torch) is ended with SIGTERM: it
        holds nothing, and waiting for it to read its pipe held up the end of a script whose call ran
        nothing (a resume of a finished experiment), then logged that it "did not stop".
        """
        if os.getpid() != self.owner_pid:
            return
        with self._driving:
            self._cancel_reaper()
            self._close()

    def _close(self) -> None:
        alive = [w for w in self.workers.values() if not has_exited(w.process)]
        for worker in alive:
            self._note_ready(worker)
            try:
                if worker.ready:
                    worker.conn.send(None)
                else:
                    os.kill(worker.process.pid, signal.SIGTERM)
            except (OSError, ProcessLookupError):
                pass
        self._reap([w.process for w in alive])
        self._close_pipes()
        self.broken = True

    @staticmethod
    def _note_ready(worker: _Worker) -> None:
        """Read what ``worker`` sent between calls: its "ready" once it has started (no call was reading)."""
        try:
            while worker.conn.poll():
                if worker.conn.recv()[0] == "ready":
                    worker.ready = True
        except (EOFError, OSError, pickle.UnpicklingError, IndexError, TypeError):
            pass

    def _reap(self, processes: list[Any]) -> None:
        deadline = time.monotonic() + self.grace
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if not has_exited(process):
                logger.warning("worker %d did not stop within %.0f s; terminating it", process.pid, self.grace)
                process.terminate()
                process.join(1.0)
            if not has_exited(process):
                process.kill()
                process.join(1.0)

    def _close_pipes(self) -> None:
        """Close the pipes and lifelines of the workers, which have exited."""
        for worker in self.workers.values():
            worker.conn.close()
            worker.lifeline.cut()


def preload_forkserver(context: Any) -> None:
    """Have the forkserver (once it starts) import the installed libraries of :data:`FORKSERVER_PRELOAD`
    that this process has loaded, so workers fork with them loaded instead of importing them each.

    Only modules of the Python installation are preloaded: user code (which may be edited
    between calls) is imported by each worker, as with spawn. ``__main__`` stays preloaded,
    as by default. The forkserver also ignores the signals meant for the runs
    (:mod:`online_trainer.parallel.forkserver_signals`).
    """
    installed = installation_dirs()
    names = [name for name in FORKSERVER_PRELOAD if is_installed(sys.modules.get(name), installed)]
    context.set_forkserver_preload(["__main__", *names, "online_trainer.parallel.forkserver_signals"])


def installation_dirs() -> tuple[str, ...]:
    """The directories of the Python installation: the prefixes and the site-packages."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), site.getusersitepackages()}
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def is_installed(module: Any, installed: tuple[str, ...]) -> bool:
    """Whether ``module`` (None: not loaded) was loaded from a file under one of the ``installed`` dirs."""
    path = getattr(module, "__file__", None)
    if not path:
        return False
    return os.path.realpath(path).startswith(installed)


def _start_hint(start_method: str) -> str:
    """Why workers of ``start_method`` may exit before they are ready, for the main script at hand."""
    if start_method == "fork":
        return "Their errors are in the log above."
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) is None:  # not `python -m`: imported by its path
        path = getattr(main, "__file__", None)
        if path is not None:
            full = os.path.join(getattr(multiprocessing.process, "ORIGINAL_DIR", None) or "", path)
            if not os.path.isfile(full):
                return (
                    f"With start_method='{start_method}' workers import the main script again, but it was read "
                    f"from {path!r}, which they cannot read: save the script to a file and run that, or pass "
                    "execution=ExecutionOptions(start_method='fork') (Linux), or num_workers=1."
                )
    return (
        f"With start_method='{start_method}' workers import the main script again: put the script's code under "
        "`if __name__ == '__main__':`."
    )


_WARNING_LOCATION = re.compile(r"^.*?:\d+: (?=\w+: )")


def _said(record: logging.LogRecord) -> str:
    """What a worker's record says, for saying it once a call: a Python warning (``py.warnings``) by its category and
    text, without its location and source line, which differ between workers for the same line of a class defined
    in the main script (V18: its file's name in one, ``<dynamic-code>`` in another)."""
    text = record.getMessage()
    if record.name != "py.warnings":
        return text
    return _WARNING_LOCATION.sub("", text.split("\n", 1)[0], count=1)
