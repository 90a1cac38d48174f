"""Worker processes die with their parent, at once, writing nothing more.

A parent killed with SIGKILL (or by the out-of-memory killer, or a crashed notebook kernel)
runs no clean-up of its own, so each worker must notice by itself. Four mechanisms, each
covering what the others miss:

- **The lifeline** (every start method): a pipe whose write end only the parent holds and
  never writes to. The worker holds the read end. On Linux the worker asks the kernel
  (``F_SETOWN``, ``F_SETSIG``, ``O_ASYNC``) to send it SIGKILL when that pipe changes state;
  the only change that can come is the parent's end closing, which the kernel does while
  the parent exits. So the worker is killed before the parent is even reaped, whatever its
  start method (a forkserver's workers are not children of the parent, so the next
  mechanism cannot cover them) and whatever thread started it.
- **PR_SET_PDEATHSIG** (Linux, spawn and fork, workers started from the main thread): the
  kernel sends SIGKILL when the parent exits.
- **A watcher thread**: ends the worker when the lifeline reaches end-of-file, when a pidfd
  of the parent becomes readable (Linux 5.3+), or when the parent pid changes (checked
  every 0.25 s): what is left on other systems.
- **A closed pipe** (:mod:`online_trainer.parallel.worker_process`): a message that cannot be sent
  or received because nobody is at the other end ends the worker.

A worker ended this way runs no ``atexit`` handler and flushes nothing: the parent is gone,
so nothing may be written into its experiment directory any more.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import signal
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any, NoReturn

WATCH_INTERVAL = 0.25  # seconds between the watcher's checks of the parent pid
_PR_SET_PDEATHSIG = 1
_held: set[int] = set()  # write ends of the lifelines this process holds for its workers


class Lifeline:
    """The parent's side of one worker's lifeline.

    Pass :attr:`reader` to the worker, call :meth:`started` once the worker process started,
    and :meth:`cut` once it has exited (cutting it earlier kills it at once on Linux).
    """

    def __init__(self) -> None:
        read_fd, self.write_fd = os.pipe()  # close-on-exec: spawned processes never inherit them
        self.reader = Connection(read_fd, writable=False)
        _held.add(self.write_fd)

    def started(self) -> None:
        """Drop this process's copy of the read end (the worker has its own)."""
        self.reader.close()

    def cut(self) -> None:
        """Close the write end."""
        if self.write_fd in _held:
            _held.discard(self.write_fd)
            os.close(self.write_fd)


def held_write_ends() -> tuple[int, ...]:
    """The write ends of every lifeline this process holds: a forked worker must close its copies."""
    return tuple(_held)


def die_orphaned() -> NoReturn:
    """End this process now: no flush, no ``atexit`` handler, nothing more written anywhere."""
    os._exit(0)


def guard(reader: Connection, owner_pid: int, death_signal: bool, inherited_write_ends: tuple[int, ...] = ()) -> None:
    """In a worker: have it die the moment its parent dies (see the module's docstring).

    Args:
        reader: the read end of this worker's lifeline.
        owner_pid: the pool's process (the parent; with forkserver, the parent's parent).
        death_signal: also ask for SIGKILL at the parent's exit (``PR_SET_PDEATHSIG``). Only
            where the parent started this process from its main thread, as the signal comes
            when the *thread* that started a process ends.
        inherited_write_ends: with the fork start method, the lifelines' write ends this
            process got by fork; closed here, or the parent's death would leave them open.
    """
    for fd in inherited_write_ends:
        try:
            os.close(fd)
        except OSError:
            pass
    _arm(reader.fileno())
    if death_signal:
        _request_parent_death_signal()
    parent = os.getppid()
    if select.select([reader], [], [], 0)[0] or not _pid_alive(owner_pid):
        die_orphaned()  # the parent died before the requests above took effect
    threading.Thread(
        target=_watch, args=(reader, owner_pid, parent), name="online_trainer-lifeline", daemon=True
    ).start()


def _arm(fd: int) -> None:
    """Linux: the kernel sends this process SIGKILL when the lifeline's write end closes."""
    if not hasattr(fcntl, "F_SETSIG"):
        return
    try:
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETSIG, int(signal.SIGKILL))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
    except OSError:
        pass  # the watcher thread still sees the end-of-file


def _request_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(reader: Connection, owner_pid: int, parent: int) -> None:
    """Watcher thread: end this process once the lifeline or the owner's pidfd is readable, or the parent changes."""
    watched: list = [reader]
    try:
        watched.append(os.pidfd_open(owner_pid))  # readable once the owner exits
    except ProcessLookupError:
        die_orphaned()
    except (AttributeError, OSError):
        pass  # not Linux, or a kernel before 5.3
    while True:
        ready, _, _ = select.select(watched, [], [], WATCH_INTERVAL)
        if ready or os.getppid() != parent:
            die_orphaned()


def has_exited(process: Any) -> bool:
    """Whether ``process`` exited, even when something else reaped it (``os.wait``, psutil, SIGCHLD ignored).

    A child reaped elsewhere looks alive to multiprocessing for ever; its pid is gone, though.
    """
    if not process.is_alive():
        return True
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def describe_exit(exitcode: int | None) -> str:
    """``exited with code 3`` or ``was killed by SIGKILL (exit code -9)``."""
    if exitcode is None:
        return "exited (its exit code is unknown: something else in this process reaped it)"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name} (exit code {exitcode})"
    return f"exited with code {exitcode}"
