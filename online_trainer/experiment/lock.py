"""One writer per experiment directory: an advisory lock held while a call writes there.

The lock is ``exp_dir/.lock``, locked with ``flock`` and holding its owner (pid, host, start
time) as JSON. The kernel releases a ``flock`` when its owner dies, however it dies, so a
lock left by a killed process is free: the next writer takes it over, with a logged warning
naming the dead owner. A live owner, on this host or (on a filesystem that supports
``flock``, as NFSv4 does) another, makes a second writer fail at once, naming the owner.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from online_trainer.core.errors import ExperimentInUseError

try:
    import fcntl
except ImportError:  # Windows: no flock; the lock is then only informative
    fcntl = None

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class ExperimentLock:
    """The lock of one experiment directory; use it as a context manager.

    Args:
        exp_dir: the directory (created if missing).

    Raises:
        ExperimentInUseError: on entering, when a live process holds the lock.
    """

    def __init__(self, exp_dir: str | os.PathLike) -> None:
        self.path = Path(exp_dir) / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`ExperimentInUseError` naming its owner."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise type(exc)(exc.errno, f"exp_dir={os.fspath(self.path.parent)!r} cannot be written "
                                       f"({exc.strerror}): choose a directory you can write to, or fix its "
                                       "permissions.") from exc
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    owner = _read_owner(fd)
                    raise ExperimentInUseError(
                        f"exp_dir={os.fspath(self.path.parent)!r} is being written by another call ({_describe(owner)}): "
                        "wait for it to end, stop it, or choose another exp_dir."
                    ) from None
            earlier = _read_owner(fd)
            if earlier:
                logger.warning("exp_dir %s: taking over the lock of %s, which ended without releasing it",
                               self.path.parent, _describe(earlier))
            owner = {"pid": os.getpid(), "host": socket.gethostname(),
                     "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(owner).encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Clear the owner and release the lock (the file stays: deleting it would race a waiting writer)."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
        except OSError as exc:  # a full or read-only disk must not hide the call's own outcome
            logger.warning("could not clear %s: %s", self.path, exc)
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> "ExperimentLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


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
