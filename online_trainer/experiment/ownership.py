"""Whether an experiment directory still has a live writer, and what its "running" runs really are.

A call that writes an experiment holds an advisory ``flock`` on a lock file (see
:mod:`online_trainer.experiment.lock`): ``exp_dir/.lock``, or the sweep directory's for the
experiments of a sweep (the manifest names it, relative to the experiment, as ``"lock"``).
The kernel releases a ``flock`` when its owner dies, however it dies, so a free lock means
nobody writes there any more. The manifest marks a run ``running`` when it is handed out
and rewrites its entry when it ends; a ``running`` entry whose lock is free was therefore
cut off (its writer was killed) and is reported as ``interrupted``.

This module only reads: it never writes the lock file nor the manifest.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]  # the optional-import idiom: callers check for None

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"
#: Manifest key: the lock file of the writer, relative to the experiment directory.
LOCK_KEY = "lock"
RUNNING, INTERRUPTED = "running", "interrupted"
#: Manifest key of a run's entry: the Slurm job it was handed to.
SLURM_JOB_KEY = "slurm_job"


def lock_path(exp_dir: str | os.PathLike, manifest: Mapping[str, Any] | None = None) -> Path:
    """The lock file the writer of ``exp_dir`` holds: the manifest's ``"lock"``, else ``exp_dir/.lock``."""
    relative = (manifest or {}).get(LOCK_KEY) or LOCK_FILE
    return Path(exp_dir) / relative


def is_held(path: str | os.PathLike) -> bool:
    """Whether a live process holds the ``flock`` of the lock file ``path`` (False when there is no such file).

    The probe takes a shared lock for an instant, without writing anything: it works on a
    read-only copy of an experiment. A writer that tries to take the lock during that
    instant retries (see :meth:`online_trainer.experiment.lock.ExperimentLock.acquire`).
    Without ``flock`` (Windows) the lock file tells: its owner clears it on release, so a
    non-empty file counts as held.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError as exc:  # unreadable: say "held", so that a live run is never reported as cut off
        logger.debug("cannot probe the lock %s (%s): taken as held", path, exc)
        return True
    try:
        if fcntl is None:
            return bool(os.read(fd, 1))
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def settle_running(exp_dir: str | os.PathLike, manifest: dict[str, Any], owned: bool = False) -> list[int]:
    """Mark the ``running`` runs of ``manifest`` ``interrupted`` (in place) when nobody holds the lock.

    Args:
        exp_dir: the experiment directory.
        manifest: its manifest.
        owned: the caller holds the lock itself (it resumes the experiment), so the writer of
            the ``running`` entries is gone: no probe.

    Returns:
        The runs so marked (logged with a warning), or ``[]`` when no run is ``running`` or its
        writer is alive (those runs really are running).
    """
    # a run handed to a Slurm job is that job's: the job records how it ends (resume=True asks Slurm about it)
    entries = [
        e
        for e in manifest.get("runs", [])
        if isinstance(e, dict) and e.get("status") == RUNNING and (owned or SLURM_JOB_KEY not in e)
    ]
    if not entries or (not owned and is_held(lock_path(exp_dir, manifest))):
        return []
    for entry in entries:
        entry["status"] = INTERRUPTED
        if entry.get("global_step") is None:  # as an interrupted run that kept nothing is recorded (V16: null after
            entry.update(episodes=0, global_step=0)  # kill -9); readers take its records' counts where it kept some
    runs: list[int] = [entry["run"] for entry in entries]  # every manifest entry has its run number
    logger.warning(
        "%s: run(s) %s were running when the process writing the experiment ended without recording how they ended "
        "(killed, its machine gone down, or its disk full): they count as interrupted.",
        os.fspath(exp_dir),
        ", ".join(map(str, runs)),
    )
    return runs
