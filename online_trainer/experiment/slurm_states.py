"""What Slurm says of an experiment's jobs (``squeue``), and what readers make of runs whose jobs ended.

A run handed to a Slurm job stays ``running`` in the manifest until its job records how it ended
(:mod:`online_trainer.experiment.job_results`). A job cancelled (``scancel``: SIGTERM, then
SIGKILL) writes its run's checkpoint but no result, since it cannot tell a cancellation from a
requeue; and when the process that submitted it has exited, nobody records the end either.
Readers (:func:`settle_ended_jobs`) therefore ask ``squeue``: a run whose job runs no more and
left no result is reported ``interrupted``, as ``resume=True`` will treat it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from online_trainer.experiment.job_results import SLURM_JOB_KEY, apply_result, progress_path, read_job_result
from online_trainer.experiment.ownership import INTERRUPTED, RUNNING
from online_trainer.records import storage

PENDING = "pending"
"""A run's status before it starts (the manifest's, and what readers say of a run whose job is still queued)."""

logger = logging.getLogger(__name__)

# squeue states after which a job runs no more (a PREEMPTED or REQUEUED job may come back: PENDING again)
ENDED = frozenset(
    {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)
LIVE = frozenset(
    {
        "PENDING",
        "RUNNING",
        "CONFIGURING",
        "COMPLETING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SUSPENDED",
        "STOPPED",
        "SIGNALING",
        "STAGE_OUT",
        "RESV_DEL_HOLD",
        "POWER_UP_NODE",
    }
)
GONE = "GONE"  # not known to squeue (any more)
QUEUED = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
"""States of a job waiting to start (again)."""


def job_states(job_ids: Iterable[str]) -> dict[str, str] | None:
    """The ``squeue`` state of each job (``GONE`` when squeue knows it no more); None when squeue cannot be asked.

    Args:
        job_ids: ids as the manifest holds them: ``123`` or ``123_4`` (a task of an array).
    """
    job_ids = list(dict.fromkeys(job_ids))
    if not job_ids:
        return {}
    if shutil.which("squeue") is None:
        return None
    bases = sorted({job_id.split("_")[0] for job_id in job_ids})
    states = _squeue(bases)
    if states is None:  # one purged id fails the whole query: ask for each
        states = {}
        for base in bases:
            one = _squeue([base])
            if one is None:
                return None
            states.update(one)
    return {job_id: states.get(job_id, GONE) for job_id in job_ids}


def _squeue(bases: list[str]) -> dict[str, str] | None:
    try:
        done = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T", "-j", ",".join(bases)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("squeue failed (%s): trying again", exc)
        return None
    if done.returncode != 0:
        if "Invalid job id" in done.stderr:
            return {} if len(bases) == 1 else None
        logger.warning("squeue failed (%s): trying again", done.stderr.strip())
        return None
    states = {}
    for line in done.stdout.splitlines():
        job_id, _, state = line.strip().partition("|")
        states[job_id] = state.split()[0] if state else "?"
    return states


UNRUNNABLE = {
    "PartitionConfig": "it asks for more than the partition has (cpus_per_task, mem, gres)",
    "PartitionNodeLimit": "it asks for more nodes than the partition has",
    "PartitionTimeLimit": "its time is over the partition's limit",
    "BadConstraints": "no node has what it asks for (constraint, gres)",
    "InvalidAccount": "its account is not one it may use",
    "InvalidQOS": "its qos is not one it may use",
}
"""Reasons ``squeue`` gives for a pending job that will not start as it was asked, and what they mean."""


def unrunnable(job_ids: Iterable[str]) -> dict[str, str]:
    """The jobs of ``job_ids`` that are queued for a reason of :data:`UNRUNNABLE`, with that reason (empty when
    ``squeue`` cannot be asked)."""
    bases = sorted({job_id.split("_")[0] for job_id in job_ids})
    if not bases or shutil.which("squeue") is None:
        return {}
    try:
        done = subprocess.run(
            ["squeue", "-h", "-r", "-t", "PENDING", "-o", "%i|%r", "-j", ",".join(bases)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    reasons = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        job_id, _, reason = line.strip().partition("|")
        if reason in UNRUNNABLE:
            reasons[job_id] = reason
    return reasons


REQUEUED = "requeued"
"""What readers say of a run that started in a Slurm job now waiting in the queue again (``scontrol requeue``, a
preemption, a time limit): it goes on from its checkpoint when the job starts again. Never written to a manifest."""


def settle_ended_jobs(exp_dir: str | os.PathLike, manifest: dict[str, Any], name_requeued: bool = False) -> list[int]:
    """Report the ``running`` runs of ``manifest`` whose Slurm jobs ended as they ended (in place; nothing is written).

    A run whose job left a result gets that result's status. One whose job runs no more (ended, or
    unknown to ``squeue``) without a result is ``interrupted`` when it had started (it wrote
    progress, records or a checkpoint), else ``pending``; either with a warning. A run that has not
    started in a job still queued, or running the job's earlier runs (``runs_per_job``), is ``pending`` too. With
    ``name_requeued`` (readers), one that started in a job that waits in the queue again is :data:`REQUEUED`. When
    ``squeue`` cannot be asked, the runs stay ``running``.

    Returns:
        The runs marked ``interrupted`` or ``pending``.
    """
    entries = [
        e for e in manifest.get("runs", []) if isinstance(e, dict) and e.get("status") == RUNNING and SLURM_JOB_KEY in e
    ]
    if not entries:
        return []
    left = []
    for entry in entries:
        result = read_job_result(Path(exp_dir), entry["run"])
        if result is not None:
            apply_result(manifest, result, exp_dir)
        else:
            left.append(entry)
    states = job_states(e[SLURM_JOB_KEY] for e in left)
    if not states:
        return []
    cut: list[dict[str, Any]] = []  # started, then cut off
    never: list[dict[str, Any]] = []  # their jobs ended before they started
    queued: list[dict[str, Any]] = []  # their jobs wait in the queue
    for entry in left:
        state, started = states[entry[SLURM_JOB_KEY]], _started(Path(exp_dir), entry["run"])
        if state not in LIVE:
            (cut if started else never).append(entry)
        elif not started:  # its job is queued, or runs the job's earlier runs first (runs_per_job)
            queued.append(entry)
        elif name_requeued and state in QUEUED:  # S14, S17: `show` said running while its job waited again
            entry["status"] = REQUEUED
    for entry in cut:
        entry["status"] = INTERRUPTED
    for entry in never + queued:
        entry["status"] = PENDING
    if cut:
        logger.warning(
            "%s: %s ended before recording how run(s) %s ended (cancelled, or a node went down): they count as "
            "interrupted; resume=True continues them (from their checkpoints, if they wrote any).",
            os.fspath(exp_dir),
            _jobs(cut, states),
            ", ".join(str(e["run"]) for e in cut),
        )
    if never:
        logger.warning(
            "%s: %s ended before run(s) %s started in them: they count as pending; resume=True runs them.",
            os.fspath(exp_dir),
            _jobs(never, states),
            ", ".join(str(e["run"]) for e in never),
        )
    return [e["run"] for e in cut + never + queued]


def _started(exp_dir: Path, run: int) -> bool:
    """Whether run ``run`` began in some job: it wrote progress, records or a full checkpoint."""
    return any(
        path.exists()
        for path in (progress_path(exp_dir, run), storage.metrics_path(exp_dir, run), storage.resume_path(exp_dir, run))
    )


def _jobs(entries: list[dict[str, Any]], states: dict[str, str]) -> str:
    return ", ".join(f"Slurm job {e[SLURM_JOB_KEY]} ({state_words(states[e[SLURM_JOB_KEY]])})" for e in entries)


def state_words(state: str) -> str:
    """A job state as a message says it: ``cancelled``; ``no longer known to Slurm`` for :data:`GONE`."""
    return "no longer known to Slurm" if state == GONE else state.lower()
