"""Preemption: SIGTERM or SIGUSR1 (what Slurm sends before it preempts a job) asks every run to write a
full checkpoint at once and stop, as ``interrupted``, so that resuming loses nothing.

The handler only sets a flag. Each run looks at it about every second, at one of its step
thresholds (:class:`PreemptionWatch`, a built-in hook: no per-step cost), writes its full
checkpoint at that step boundary, and raises :class:`~online_trainer.errors.Preempted`.
The parent forwards the signal to its worker processes and hands out no new run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from online_trainer.loop.hook_protocol import Hook, RunContext

logger = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
_requested = threading.Event()
_received: list[tuple[int, float]] = []  # the first preemption signal since handling() began, and its time.monotonic()
_handling_pid: list[int] = []  # the process whose handling() installed the handlers


def requested() -> bool:
    """Whether a preemption signal came since :func:`handling` began."""
    return _requested.is_set()


def received() -> int | None:
    """The preemption signal that came first since :func:`handling` began (None: none came)."""
    return _received[0][0] if _received else None


def forget_before(moment: float) -> None:
    """Forget a preemption signal that came before ``moment`` (a ``time.monotonic()``, one clock for every process
    of the machine): in a worker, one meant for a run that had ended before the parent sent the next."""
    if _received and _received[0][1] < moment:
        _requested.clear()
        _received.clear()


def request(signum: int = signal.SIGTERM, frame: Any = None, announce: bool = True) -> None:
    """Ask every run of this process to checkpoint and stop (what the signal handler does).

    The first signal is logged once, unless ``announce`` is False: a worker process is quiet, as the
    parent announces the signal it passes on (or that reached the whole process group). So is a process forked from
    the one that installed the handlers (an ``AsyncVectorEnv``'s sub-env workers, which inherit them): a Slurm job
    signals every process of the job, and its log said it five times (tester S14).
    """
    if not _requested.is_set():
        _received.append((signum, time.monotonic()))
        if announce and (not _handling_pid or _handling_pid[0] == os.getpid()):
            logger.warning(
                "%s received: each run writes a full checkpoint (if it can) at its next step and stops; no new run "
                "starts",
                signal.Signals(signum).name,
            )
    _requested.set()


@contextlib.contextmanager
def handling(forward: Callable[[int], None] | None = None) -> Iterator[None]:
    """Handle SIGTERM and SIGUSR1 while the block runs (from the main thread only; elsewhere nothing changes).

    Args:
        forward: also called with the signal number (the worker pool passes it to its workers).
    """
    _requested.clear()
    _received.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _handling_pid[:] = [os.getpid()]

    def handler(signum: int, frame: Any) -> None:
        request(signum, frame)
        if forward is not None:
            forward(signum)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _handling_pid.clear()


@contextlib.contextmanager
def after_the_runs(restore: bool = True) -> Iterator[None]:
    """Every run has ended: while the block runs (what a call writes at its end, what the command prints), SIGTERM and
    SIGUSR1 have nothing left to stop. Each is logged and the block goes on: a signal that comes as the last runs end
    stops none (resume.md). From the main thread only; elsewhere nothing changes.

    Args:
        restore: put the earlier handlers back at the end of the block; False ignores both signals from then to the
            process's exit (the command, whose interpreter takes a while to shut down after its last line: V21).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        logger.warning("%s received after every run had ended: nothing to stop", signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            # ignored to the exit: the interpreter's shutdown resets a Python handler to the default action, not SIG_IGN
            signal.signal(sig, old if restore else signal.SIG_IGN)


class PreemptionWatch(Hook):
    """Looks at the preemption flag about every second; once it is set, asks the run for a full checkpoint and a stop."""

    every_seconds = 1.0

    def on_step(self, ctx: RunContext) -> None:
        if _requested.is_set():
            ctx.preempt = True
