"""The worker side of the local pool: one process that runs the runs its parent sends it.

Each worker talks to its parent over one duplex pipe of its own, and nothing else: no lock
or queue is shared with the other workers, so a worker that dies at any moment (killed,
out of memory, segfault) cannot block the others or the parent.

Parent -> worker: a cloudpickled :class:`RunSpec` (bytes), or ``None`` to leave.
Worker -> parent, in this order for each run::

    ("ready", pid)                  once, when the process is up
    ("took",)                       the payload was received: from now on the run is this worker's
    ("start", key, name)            the run's display opens      } through QueueProgress
    ("progress", key, n, return)    at most every 0.2 s          }
    ("resumed", key, n)             a resumed run starts n in     }
    ("result", bytes)               the pickled RunResult (a failed one when the run raised)
    ("error", text)                 the payload could not even be unpickled

and, at any time during a run, ``("log", record)``: what the run logged (its hooks, its agent, the library), a
:class:`logging.LogRecord` with its message formatted, for the parent's handlers (see :class:`ToParent`).

A worker dies with its parent, at once and without writing anything more (see
:mod:`online_trainer.parallel.lifeline`); a message that cannot be sent or received because nobody is
at the other end ends it too.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import NoReturn

import cloudpickle

from online_trainer.errors import Preempted
from online_trainer.parallel import shipping
from online_trainer.parallel.execution import failed_result
from online_trainer.parallel.lifeline import die_orphaned, guard
from online_trainer.parallel.threads import limit_threads
from online_trainer.progress.display import QueueProgress
from online_trainer.run.builtin import preemption
from online_trainer.run.one_run import COMPLETED, RunResult, RunSpec, execute_run

logger = logging.getLogger(__name__)

_POLL = 1.0  # seconds between an idle worker's checks of its idle time
STOP_SIGNAL = signal.SIGUSR2
"""What the pool sends a worker to stop its run (KeyboardInterrupt in the worker); not SIGINT, which Ctrl-C also sends."""
_PARENT_GONE = (BrokenPipeError, ConnectionResetError, EOFError)


def leave(code: int = 0) -> NoReturn:
    """End this process, skipping the interpreter's teardown (about a second with torch loaded).

    The ``atexit`` handlers (open writers, logging) still run, once: a SIGTERM or SIGINT that comes
    meanwhile (a notebook kernel's process group stopped as the pool sends its workers away) is
    ignored, instead of raising inside a handler ("Exception ignored in atexit callback").
    """
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, STOP_SIGNAL):
        signal.signal(signum, signal.SIG_IGN)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


class PipeChannel:
    """Sends messages to the parent; a send that finds nobody reading ends this process.

    It has the ``put`` of a queue, so :class:`QueueProgress` reports over it. One message is sent at a time:
    a run's threads may log while the main thread reports its progress.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    def put(self, message: tuple) -> None:
        """Send ``message``; end this process at once when the parent is gone."""
        try:
            with self.lock:
                self.conn.send(message)
        except _PARENT_GONE:
            die_orphaned()


class ToParent(logging.Handler):
    """The worker's one root handler: every record, its message formatted (arguments and traceback folded in, as
    :class:`logging.handlers.QueueHandler` does), goes to the parent, whose handlers write it as their own.

    With the ``spawn`` start method a worker's logging is not the parent's (a ``basicConfig`` under the main guard
    never runs there), and with ``fork`` it writes through the parent's handlers beside the parent: either way the
    lines went nowhere, twice, or through the progress bars.
    """

    _PLAIN = (
        "name",
        "levelno",
        "levelname",
        "pathname",
        "filename",
        "module",
        "lineno",
        "funcName",
        "created",
        "msecs",
        "relativeCreated",
        "thread",
        "threadName",
        "processName",
        "process",
    )
    """What a record keeps when an ``extra=`` value of it cannot be pickled."""

    def __init__(self, channel: PipeChannel) -> None:
        super().__init__()
        self.channel = channel

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sent = copy.copy(record)
            sent.msg = sent.message = self.format(record)
            sent.args, sent.exc_info, sent.exc_text, sent.stack_info = None, None, None, None
            try:
                self.channel.put(("log", sent))
            except (pickle.PicklingError, TypeError, AttributeError):  # an extra= value that cannot travel: the rest
                plain = {name: getattr(sent, name, None) for name in self._PLAIN}
                self.channel.put(("log", logging.makeLogRecord({**plain, "msg": sent.msg, "args": None})))
        except Exception:
            self.handleError(record)


def log_to_parent(channel: PipeChannel) -> None:
    """Make :class:`ToParent` the root logger's only handler, and every logger there is so far propagate to it with
    none of its own: the parent's loggers, handlers and ``propagate`` write the record (a run's ``log_levels`` set the
    levels). Handlers copied by ``fork``, or made by the main script's import under ``spawn``, would write it twice.

    Python warnings (``warnings.warn``: gymnasium's, the agent's) become records of the ``py.warnings`` logger, so
    that one every worker gives is said once in the call, as the parent's pool says a record once, not once per
    worker process on its stderr."""
    for logger in logging.Logger.manager.loggerDict.values():
        if isinstance(logger, logging.Logger):
            logger.handlers, logger.propagate = [], True
    logging.getLogger().handlers = [ToParent(channel)]
    logging.captureWarnings(True)


def _set_levels(levels: dict[str, int]) -> None:
    """The parent's levels (``""``: the root's), on the same loggers here."""
    for name, level in levels.items():
        logging.getLogger(name or None).setLevel(level)


def _next_payload(conn: Connection, idle_timeout: float) -> tuple[float, bytes]:
    """The next run's payload and when it was sent; leaves the process on the stop message, when idle too long, or on
    EOF."""
    idle_since = time.monotonic()
    while not conn.poll(_POLL):
        if time.monotonic() - idle_since > idle_timeout:
            leave()
    try:
        payload = conn.recv()
    except _PARENT_GONE:
        die_orphaned()  # the parent died, or dropped this pipe: nobody will read what this process would write
    if payload is None:
        leave()
    return payload


def pack_result(spec: RunSpec, result: RunResult) -> bytes:
    """The pickled result, sent back to the parent.

    When the trained agent cannot be pickled (it holds a lock, a file, a process), the result
    goes without it and says why in ``extra["agent_not_sent"]``; when the result cannot be
    pickled even so, a failed result that says why goes instead.
    """
    # shipped as specs are, keeping code's file names: unpickled in the parent, a class of the main script takes the
    # methods the result carries, and with cloudpickle's "<dynamic-code>" names the next runs' warnings and
    # tracebacks lost their file and line (V18)
    try:
        return shipping.dumps(result)
    except Exception as exc:  # an unpicklable agent or record, or no memory left for a huge one
        error = exc
    if result.agent is not None:
        reason = f"{type(error).__name__}: {error}"
        without_agent = dataclasses.replace(result, agent=None, extra={**result.extra, "agent_not_sent": reason})
        try:
            return shipping.dumps(without_agent)
        except Exception as exc:
            error = exc
    logger.error("run %d: its result cannot be sent to the parent: %s: %s", spec.run_idx, type(error).__name__, error)
    reason = (
        f"ResultNotSent: the run ended ({result.status}) but its result could not be sent to the parent "
        f"({type(error).__name__}: {error}); its records up to the last flush are on disk."
    )
    if result.status not in COMPLETED:
        reason += f" The run's own error: {result.extra.get('exception', result.error)}"
    return pickle.dumps(failed_result(spec, reason), protocol=pickle.HIGHEST_PROTOCOL)


def _execute(spec: RunSpec, progress: QueueProgress) -> RunResult:
    """Run ``spec``; an exception (a full disk included) becomes a failed result naming it."""
    if spec.log_levels is not None:
        _set_levels(spec.log_levels)
    try:
        result = execute_run(spec, progress)
    except Preempted as exc:  # it stopped at a preemption signal (with a full checkpoint if it can): the worker stays
        result = failed_result(spec, exc, keep_exception=True)  # the parent raises it: it says what was kept
        result.status = "interrupted"
    except Exception as exc:
        result = failed_result(spec, exc)
    except SystemExit as exc:
        result = failed_result(spec, f"SystemExit: the run called sys.exit({exc.code!r})")
    finally:
        close_error = _close_callback(spec)
    if close_error is not None:
        if result.status not in COMPLETED:
            result.error = f"{result.error}\nThen closing the callback raised: {close_error}"
        else:  # its end_run wrote what it held: as in this process's runs and an env's close() (W19: 2 workers failed
            # finished runs, which a resume did again from step 0, while 1 worker kept them)
            logger.error(
                "%s: the callback's close() raised after the run %s: %s: %s (the run's records are whole; the sink's "
                "last points may be missing from its files)",
                spec.name,
                result.status,
                type(close_error).__name__,
                close_error,
            )
    return result


def _close_callback(spec: RunSpec) -> BaseException | None:
    try:
        spec.callback.close()
    except Exception as exc:  # a full disk while flushing logs: the run's failure, not the worker's
        return exc
    return None


def _send_result(channel: PipeChannel, spec: RunSpec, result: RunResult) -> None:
    data = pack_result(spec, result)
    try:
        with channel.lock:
            channel.conn.send(("result", data))
    except _PARENT_GONE:
        die_orphaned()
    except (OSError, ValueError, MemoryError) as exc:  # too large for the pipe, or no memory for the copy
        reason = (
            f"ResultNotSent: the run ended ({result.status}) but sending its result failed "
            f"({type(exc).__name__}: {exc})"
        )
        logger.error("run %d: %s", spec.run_idx, reason)
        channel.put(("result", pickle.dumps(failed_result(spec, reason))))


_RUNNING = [False]  # whether this worker is executing a run


def _interrupt_once(signum: int, frame: object) -> None:
    """The pool's stop signal, or SIGINT, during a run: a KeyboardInterrupt, once.

    The run flushes its records on the way out, and the worker then leaves. A second signal meanwhile (Ctrl-C
    pressed again, the pool's stop after the terminal's own SIGINT) is ignored: it would break off that flush, or
    raise as the worker leaves and print a traceback from its exit. The pool ends a worker that does not leave.
    """
    for stopping in (STOP_SIGNAL, signal.SIGINT):  # not SIG_IGN: Python says "Signal 12 ignored due to race
        signal.signal(stopping, _stopping_already)  # condition" of one that came before and is handled after it
    raise KeyboardInterrupt


def _stopping_already(signum: int, frame: object) -> None:
    """A stop signal or SIGINT after the first (see :func:`_interrupt_once`): nothing to do."""


def _on_preemption(signum: int, frame: object) -> None:
    """SIGUSR1 (the pool passing a preemption signal on) checkpoints the run; the parent has announced it."""
    preemption.request(signum, frame, announce=False)


def _on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM during a run (a cluster preempting the whole job) checkpoints it, as SIGUSR1 does; else the
    worker leaves at once: it has nothing to flush."""
    if _RUNNING[0]:
        preemption.request(signum, frame, announce=False)
    else:
        leave(128 + signum)


def worker_main(
    conn: Connection,
    lifeline: Connection,
    owner_pid: int,
    death_signal: bool,
    torch_threads: int | None,
    idle_timeout: float,
    inherited_write_ends: tuple[int, ...] = (),
    default_start_method: str | None = None,
) -> None:
    """The body of a worker process: run what the parent sends until told to leave.

    Args:
        conn: this worker's end of its pipe to the parent.
        lifeline: the read end of its lifeline; see :func:`online_trainer.parallel.lifeline.guard`
            for this and the next two arguments.
        owner_pid: the pool's process, whose death ends this one.
        death_signal: ask for SIGKILL at the parent's death.
        torch_threads: threads of every pool (torch, BLAS, OpenMP) of this process (None: as they are).
        idle_timeout: seconds without work after which the worker leaves.
        inherited_write_ends: lifeline write ends copied into this process by fork.
        default_start_method: the parent's default start method of ``multiprocessing`` (None: the platform's).
    """
    guard(lifeline, owner_pid, death_signal, inherited_write_ends)
    # A spawned (or forkserver) worker takes its own start method as multiprocessing's default, so an env factory's
    # AsyncVectorEnv spawned every sub-env, each importing everything again: 5-50x slower runs than in the parent
    # (tester A7). The user's code gets the default it has in its own process.
    multiprocessing.set_start_method(default_start_method, force=True)
    # The pool stops a run with a signal of its own, which raises KeyboardInterrupt so that the run flushes its records.
    # SIGINT keeps the disposition the parent passed on: a Ctrl-C reaches the terminal's whole process group, and a
    # parent started with SIGINT ignored (under nohup, a background job of a script) goes on, so its runs must too.
    signal.signal(STOP_SIGNAL, _interrupt_once)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # a forked worker may hold its parent's own handler
        signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGUSR1, _on_preemption)
    signal.signal(signal.SIGTERM, _on_sigterm)
    running_sigint = signal.getsignal(signal.SIGINT)
    limit_threads(torch_threads)
    channel = PipeChannel(conn)
    log_to_parent(channel)
    progress = QueueProgress(channel)
    spec: RunSpec | None = None
    # Out of a run, a worker ignores SIGINT: a Ctrl-C (a notebook's stop button) of the parent's other work reaches
    # the whole process group, and killed the warm workers. In a call, the pool stops them itself. SIGINT is ignored
    # again before the result goes out: the parent's call may return, and its caller press Ctrl-C, at once.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        channel.put(("ready", os.getpid()))
        while True:
            sent_at, payload = _next_payload(conn, idle_timeout)
            channel.put(("took",))
            preemption.forget_before(sent_at)  # a signal that came after the last run ended, for that run
            try:
                spec = cloudpickle.loads(payload)
            except Exception as exc:
                channel.put(("error", f"{type(exc).__name__}: the run could not be unpickled in the worker: {exc}"))
                continue
            _RUNNING[0] = True
            signal.signal(signal.SIGINT, running_sigint)
            try:
                result = _execute(spec, progress)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                _RUNNING[0] = False
            _send_result(channel, spec, result)
            spec = None
    except KeyboardInterrupt:
        # execute_run flushed the run's metrics on its way out; tell the parent, if it still listens
        if spec is not None:
            try:
                interrupted = failed_result(spec, "KeyboardInterrupt: the worker was interrupted")
                conn.send(("result", pickle.dumps(interrupted)))
            except (OSError, ValueError, KeyboardInterrupt):
                pass
        leave()
