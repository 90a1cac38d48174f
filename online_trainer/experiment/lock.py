"""One writer per experiment directory: an advisory lock held while a call writes there.

The lock is ``exp_dir/.lock``, locked with ``flock`` and holding its owner (pid, host, start
time) as JSON. The kernel releases a ``flock`` when its owner dies, however it dies, so a
lock left by a killed process is free: the next writer takes it over, with a logged warning
naming the dead owner. A live owner, on this host or (on a filesystem that supports
``flock``, as NFSv4 does) another, makes a second writer fail within 0.2 s, naming the owner.
A call refused under the lock (its ``check`` raises: an earlier experiment is in the way) is
refused before the owner is written, and removes the lock file and directories it created:
it changes nothing on disk, the earlier experiment's ``.lock`` included.
Readers tell from the same ``flock`` whether the runs a manifest says are ``running`` still
are (see :mod:`online_trainer.experiment.ownership`).

A ``flock`` belongs to the open file, which a forked process shares: a child forked while the
lock is held (a worker of ``start_method="fork"``, which may wait for the next call long after
this one ended) would keep the experiment locked. So a forked child closes its copies at once.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from online_trainer.errors import ExperimentInUseError
from online_trainer.experiment.ownership import LOCK_FILE
from online_trainer.records import storage

try:
    import fcntl
except ImportError:  # Windows: no flock; the lock is then only informative
    fcntl = None  # type: ignore[assignment]  # the optional-import idiom: callers check for None

logger = logging.getLogger(__name__)

# A reader probing whether the lock is held (online_trainer.experiment.ownership.is_held) holds it for an
# instant: a writer that finds it taken tries again for this long before it refuses.
_RETRY_FOR = 0.2
_held: weakref.WeakSet[ExperimentLock] = weakref.WeakSet()  # the locks this process holds


class ExperimentLock:
    """The lock of one experiment directory; use it as a context manager.

    Args:
        exp_dir: the directory (created if missing).
        check: called once the lock is held and before anything is written: what it
            raises refuses the call, and the disk is left as it was (the lock file and the
            directories this acquisition created are removed, an existing lock file is untouched).

    Raises:
        ExperimentInUseError: on entering, when a live process holds the lock.
        Exception: on entering, what ``check`` raises.
    """

    def __init__(self, exp_dir: str | os.PathLike, check: Callable[[], object] | None = None) -> None:
        self.path = Path(exp_dir) / LOCK_FILE
        self.check = check
        self._fd: int | None = None
        self._times: tuple[int, int] | None = None  # an existing lock file's (atime, mtime), put back on release

    def acquire(self) -> None:
        """Take the lock, or raise :class:`ExperimentInUseError` naming its owner (or what ``check`` raises)."""
        new_dirs = missing_dirs(self.path.parent)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, created = _open_lock_file(self.path)
        except OSError as exc:
            _remove_empty(new_dirs)
            raise type(exc)(
                exc.errno,
                f"exp_dir={os.fspath(self.path.parent)!r} cannot be written "
                f"({exc.strerror}): choose a directory you can write to, or fix its "
                "permissions.",
            ) from exc
        try:
            if fcntl is not None and not _flock_soon(fd):
                owner = _read_owner(fd)
                raise ExperimentInUseError(
                    f"exp_dir={os.fspath(self.path.parent)!r} is being written by another call ({_describe(owner)}): "
                    "wait for it to end, stop it, or choose another exp_dir."
                )
            if self.check is not None:
                self.check()  # refused here, the call has written nothing: not even its owner line
        except BaseException:
            os.close(fd)
            if created:
                self.path.unlink(missing_ok=True)
            _remove_empty(new_dirs)
            raise
        try:
            found = None if created else os.fstat(fd)  # before the owner line changes it
            times = None if found is None or found.st_size else (found.st_atime_ns, found.st_mtime_ns)
            earlier = _read_owner(fd)
            if earlier:
                logger.warning(
                    "exp_dir %s: taking over the lock of %s, which ended without releasing it",
                    self.path.parent,
                    _describe(earlier),
                )
            owner = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            }
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(owner).encode(), 0)
        except BaseException as exc:
            os.close(fd)
            if created:  # a full disk: the call leaves nothing behind
                self.path.unlink(missing_ok=True)
                _remove_empty(new_dirs)
            if isinstance(exc, OSError):
                raise storage.write_error(exc, self.path) from exc
            raise
        self._fd = fd
        _held.add(self)
        self._times = times

    def release(self) -> None:
        """Clear the owner and release the lock (the file stays: deleting it would race a waiting writer)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        _held.discard(self)
        try:
            os.ftruncate(fd, 0)
            if self._times is not None:  # the owner line came and went: the file is as the call found it (R11)
                os.utime(fd, ns=self._times)
        except OSError as exc:  # a full or read-only disk must not hide the call's own outcome
            logger.warning("could not clear %s: %s", self.path, exc)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> ExperimentLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def _let_go_in_child() -> None:
    """In a process just forked: close the copies of the parent's locks (the parent still holds them)."""
    for lock in list(_held):
        fd, lock._fd = lock._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_let_go_in_child)


def missing_dirs(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist yet, deepest first: what ``mkdir(parents=True)`` would create."""
    return [p for p in (path, *path.parents) if not p.exists()]


def new_paths(exp_dir: Path, *names: str) -> list[Path]:
    """What a call writing ``exp_dir/<name>`` for each of ``names`` would create: the directories
    (``exp_dir`` and its missing ancestors, ``runs/`` of ``runs/exp`` say), then the files not there yet.

    A call that ends up running nothing removes them (see
    :func:`online_trainer.experiment.manifest.remove_created`), leaving the disk as it found it.
    """
    return [*reversed(missing_dirs(exp_dir)), *(exp_dir / name for name in names if not (exp_dir / name).exists())]


def _remove_empty(dirs: list[Path]) -> None:
    """Remove the directories ``dirs`` (deepest first) that are empty; leave the others."""
    for path in dirs:
        with contextlib.suppress(OSError):
            path.rmdir()


def _open_lock_file(path: Path) -> tuple[int, bool]:
    """A read-write descriptor of the lock file ``path``, and whether this call created it."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666), True
    except FileExistsError:
        return os.open(path, os.O_RDWR), False


def _flock_soon(fd: int) -> bool:
    """Take the exclusive ``flock`` of ``fd``, trying for :data:`_RETRY_FOR` seconds; False if it stays taken."""
    end = time.monotonic() + _RETRY_FOR
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)


def _read_owner(fd: int) -> dict[str, Any] | None:
    text = os.pread(fd, 4096, 0)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"unreadable": text[:80].decode(errors="replace")}


def _describe(owner: dict[str, Any] | None) -> str:
    if not owner:
        return "owner unknown"
    if "pid" not in owner:
        return f"owner {owner}"
    return f"pid {owner['pid']} on {owner.get('host', '?')}, started {owner.get('started', '?')}"


@contextlib.contextmanager
def hold_lock(exp_dir: Path | None, check: Callable[[], object] | None = None) -> Iterator[list[Path]]:
    """Hold the lock of ``exp_dir`` (if any) for the duration; yield what taking it created.

    ``check`` is the lock's (see :class:`ExperimentLock`): a call it refuses changes nothing on disk.
    """
    if exp_dir is None:
        yield []
        return
    created = new_paths(exp_dir, LOCK_FILE)
    with ExperimentLock(exp_dir, check=check):
        yield created
