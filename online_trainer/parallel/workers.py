"""Runs in worker processes that stay warm between ``multi_run`` calls.

The pool itself is :class:`online_trainer.parallel.worker_pool.WorkerPool`: one pipe per worker, a
run in flight fails with its worker's exit code when the worker dies and a new worker takes
its place, Ctrl-C stops every worker within ``grace`` seconds with their metrics flushed,
and workers die with the parent (:mod:`online_trainer.parallel.lifeline`).

Starting a worker costs 2 to 3 s with torch (a new interpreter importing torch, then torch's
lazy ``torch._dynamo`` import at the first optimizer), so ``multi_run`` calls share one pool
(:func:`shared_pool`) whose workers wait for the next call, like joblib's reusable executor.
Workers leave after ``IDLE_TIMEOUT`` seconds without work, at :func:`shutdown_workers`, when
the parent exits, and at once when it dies. The pool is started afresh when a source file of
a module the parent loaded from outside the Python installation (the user's code, an
editable install) changed since its workers started, so they never run stale code.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing.util  # noqa: F401  (its atexit hook must be registered before shutdown_workers)
import os
import sys

from online_trainer.parallel.worker_pool import (
    IDLE_TIMEOUT,
    WorkerPool,
    installation_dirs,
    is_installed,
    preload_forkserver,
)

__all__ = ["IDLE_TIMEOUT", "WorkerPool", "preload_forkserver", "shared_pool", "shutdown_workers"]

logger = logging.getLogger(__name__)
_shared: WorkerPool | None = None


def shared_pool(num_workers: int, start_method: str, torch_threads: int | None) -> WorkerPool:
    """The pool ``multi_run`` calls share, started afresh when it cannot serve this call."""
    global _shared
    pool = _shared
    if pool is not None and (
        pool.broken
        or pool.settings != (num_workers, start_method, torch_threads)
        or _code_changed_since(pool.started_at)
    ):
        pool.close()
        pool = None
    if pool is None:
        if start_method != "fork":  # forked workers run the parent's code, whatever the files say
            _say_if_library_changed()
        pool = _shared = WorkerPool(num_workers, start_method, torch_threads, idle_timeout=IDLE_TIMEOUT)
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


_LIBRARY = ("online_trainer", "callbacks", "agents", "envs")
_said_changed: set[str] = set()


def _say_if_library_changed() -> None:
    """Warn when a source file of this library changed after this process imported it (an editable install edited
    or pulled): new workers run the edited files and this process what it imported, and the objects they exchange
    may not match."""
    package = sys.modules["online_trainer"]  # loaded: this module is part of it
    imported_at: float = package._imported_at
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(package.__file__ or ""))), "")
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.split(".")[0] not in _LIBRARY or not path or not os.path.realpath(path).startswith(root):
            continue
        try:
            changed = os.stat(path).st_mtime > imported_at
        except OSError:
            continue
        if changed and path not in _said_changed:
            _said_changed.add(path)
            logger.warning(
                "%s changed after this process imported it: the new workers run the edited library and this process "
                "the one it imported, which may not understand each other (errors such as AttributeError). Restart "
                "the kernel (or the interpreter) to run the edited library everywhere.",
                path,
            )
            return


def _code_changed_since(timestamp: float) -> bool:
    """Whether the source of a loaded module outside the Python installation changed after ``timestamp``."""
    installed = installation_dirs()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or is_installed(module, installed):
            continue
        try:
            if os.stat(path).st_mtime > timestamp:
                return True
        except OSError:
            continue
    return False
