"""Imported in the forkserver only (as a preload): it outlives the signals meant for the runs.

A cluster that preempts a job, or a user who stops a script's process group, sends SIGTERM (or
SIGUSR1) to every process of the group: the caller, its workers and, with
``start_method="forkserver"``, the forkserver they were forked from. The workers checkpoint
their runs and report them as interrupted, over pipes of their own to the caller. But the
caller learns each worker's exit code from the forkserver: had the forkserver died of the
signal (its default action), every worker would read as dead with code 255 at once, and its
run be recorded as failed. So the forkserver ignores both signals, as multiprocessing already
has it ignore SIGINT. It still ends when the caller does (its pipe to the caller closes), and
each worker sets its own handlers as it starts (:func:`online_trainer.parallel.worker_process.worker_main`).

Importing this module anywhere but in the forkserver changes nothing.
"""

from __future__ import annotations

import multiprocessing.forkserver
import signal
import sys
from types import FrameType

IGNORED = (signal.SIGTERM, signal.SIGUSR1)


def in_forkserver() -> bool:
    """Whether this module is being imported by the forkserver's ``main`` (its preloads)."""
    frame: FrameType | None = sys._getframe()
    code = multiprocessing.forkserver.main.__code__
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


if in_forkserver():
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_IGN)
