"""What a run executed elsewhere (a Slurm job) leaves in the experiment directory: its result file and its
manifest entry, written under a lock that orders the jobs of one experiment and the process that submitted them."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from online_trainer.experiment import ownership
from online_trainer.records import storage
from online_trainer.run import full_checkpoint
from online_trainer.run.one_run import COMPLETED, RunResult

logger = logging.getLogger(__name__)

SLURM_JOB_KEY = ownership.SLURM_JOB_KEY
"""Key of a run's manifest entry: the Slurm job it was handed to (its id, ``123`` or ``123_4`` in an array)."""
MANIFEST_LOCK_FILE = ".manifest.lock"
SLURM_DIR = "slurm"
"""Folder of an experiment where the Slurm backend's jobs leave each run's result and progress."""


def result_path(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Path of the result a Slurm job (or a Ray task) writes when run ``run_idx`` has ended (a pickled ``RunResult``)."""
    return Path(exp_dir) / SLURM_DIR / f"result_run{run_idx}.pkl"


def progress_path(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Path of the progress messages a Slurm job appends while run ``run_idx`` goes on."""
    return Path(exp_dir) / SLURM_DIR / f"progress_run{run_idx}.pkl"


def run_sps(result: RunResult) -> float | None:
    """The run's env steps per second of its wall time less this call's set-up (a worker's first run imports torch
    and the env's libraries: counted, run 1 of the quickstart showed 962 SPS against run 5's 4,428, D11)."""
    seconds = result.wall_time - result.setup_time
    return round(result.global_step / seconds, 1) if seconds > 0 else None


def apply_result(manifest: dict[str, Any], result: RunResult, exp_dir: str | os.PathLike | None = None) -> None:
    """Write how a run ended into its entry of ``manifest`` (in place), and the env's facts when missing.

    A run that ended without finishing (failed, interrupted, its job cancelled) often tells nothing of how far it
    got: with ``exp_dir``, its counts are those its records and full checkpoint show (:func:`progress_from_disk`).
    """
    for name, value in result.env_info.items():
        manifest.setdefault(name, value)
    entry = manifest["runs"][result.run_idx - 1]
    entry.update(
        status=result.status,
        episodes=result.episodes,
        global_step=result.global_step,
        wall_time=round(result.wall_time, 3),
        sps=run_sps(result),
        error=result.error,
    )
    entry["stop_reason"] = result.extra.get("stop_reason")
    if exp_dir is not None and result.status not in COMPLETED:
        progress_from_disk(Path(exp_dir), entry)


def progress_from_disk(exp_dir: Path, entry: dict[str, Any]) -> None:
    """Set the counts of a run that ended without finishing as its records and its full checkpoint say, where
    they say more than the run told (a run that raised, was preempted, or whose job was cancelled tells nothing)."""
    try:
        progress = full_checkpoint.run_progress(exp_dir, entry["run"])
    except OSError as exc:  # the run's own outcome is the news: its counts stay as they were
        logger.error("could not read how far run %d got: %s", entry["run"], exc)
        return
    if progress["global_step"] is None or progress["global_step"] < (entry.get("global_step") or 0):
        return
    entry.update(
        episodes=max(progress["episodes"] or 0, entry.get("episodes") or 0),
        global_step=progress["global_step"],
        wall_time=progress["wall_time"],
    )
    if entry["wall_time"]:  # the speed from the time before rounding: a fast run's rounds to 0.0
        entry["sps"] = round(entry["global_step"] / entry["wall_time"], 1)
        entry["wall_time"] = round(entry["wall_time"], 3)


@contextlib.contextmanager
def manifest_lock(exp_dir: Path) -> Iterator[None]:
    """Hold ``exp_dir/.manifest.lock`` (``flock``) while the manifest is read, changed and written.

    The writers it orders are the Slurm jobs of one experiment, each recording its own run's end,
    and the process that submitted them.
    """
    try:
        import fcntl
    except ImportError:  # Windows: no Slurm there either
        yield
        return
    fd = os.open(exp_dir / MANIFEST_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_manifest_quietly(exp_dir: Path) -> dict[str, Any]:
    """The manifest of ``exp_dir``, or {} when it cannot be read."""
    try:
        return storage.read_manifest(exp_dir)
    except (OSError, ValueError):
        return {}


def record_restart(exp_dir: Path, run_idx: int, header: full_checkpoint.CheckpointHeader | None) -> None:
    """Record in run ``run_idx``'s manifest entry where a Slurm job that restarted (requeued, preempted) continues it,
    as ``resume=True`` records it (``resumed_from``; none when it starts again from its first step)."""
    with manifest_lock(exp_dir):
        manifest = storage.read_manifest(exp_dir)
        entry = manifest["runs"][run_idx - 1]
        if header is None:
            entry.pop("resumed_from", None)
        else:
            entry["resumed_from"] = header.resume_point
        storage.write_manifest(exp_dir, manifest)


def record_job_result(exp_dir: Path, result: RunResult, write_all_metrics: bool) -> None:
    """Record the end of a run in the manifest, from the Slurm job that ran it.

    Once every run of the experiment has completed, the job that records the last one writes
    ``all_metrics.pkl`` (with ``write_all_metrics``) from the metrics streams.
    """
    with manifest_lock(exp_dir):
        manifest = storage.read_manifest(exp_dir)
        apply_result(manifest, result, exp_dir)
        storage.write_manifest(exp_dir, manifest)
        if write_all_metrics and all(entry["status"] in COMPLETED for entry in manifest["runs"]):
            storage.write_all_metrics(
                exp_dir, [storage.load_run_metrics(exp_dir, entry["run"]) for entry in manifest["runs"]]
            )


def read_job_result(exp_dir: Path, run_idx: int) -> RunResult | None:
    """The result a Slurm job (or a Ray task) wrote for run ``run_idx`` (None when there is none, or it cannot be read).

    A result whose agent (or error) is of a class this process cannot import (``online-trainer wait`` run
    away from the user's code) is read without it: the run's status, counts and records are what the
    manifest needs; its ``agent`` is then None and ``extra["agent_not_loaded"]`` says why.
    """
    path = result_path(exp_dir, run_idx)
    try:
        with open(path, "rb") as file:
            return pickle.load(file)
    except FileNotFoundError:
        return None
    except (ImportError, AttributeError) as exc:  # a class of the user's code, not importable here
        missing = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # cut off, or written by another version
        logger.warning("could not read %s (%s: %s)", path, type(exc).__name__, exc)
        return None
    try:
        with open(path, "rb") as file:
            result = _UserClassesLeftOut(file).load()
    except Exception as exc:
        logger.warning("could not read %s (%s: %s; then %s: %s)", path, missing, type(exc).__name__, exc)
        return None
    if not isinstance(result, RunResult):
        logger.warning("could not read %s (%s)", path, missing)
        return None
    logger.debug("read %s without the classes this process cannot import (%s)", path, missing)
    if isinstance(result.agent, _LeftOut):
        result.agent = None
        result.extra["agent_not_loaded"] = missing
    if isinstance(result.extra.get("exception_object"), _LeftOut):  # the run's error is named by extra["exception"]
        del result.extra["exception_object"]
    return result


class _LeftOut:
    """Stands for an object of a class that could not be imported: it takes any arguments and state, and keeps none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


class _UserClassesLeftOut(pickle.Unpickler):
    """Unpickles with :class:`_LeftOut` in place of every global that cannot be imported."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except (ImportError, AttributeError):
            return type(name, (_LeftOut,), {"__module__": module})
