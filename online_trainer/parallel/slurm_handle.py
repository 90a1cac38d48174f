"""The handle of runs submitted to Slurm without waiting, and the check that a resume finds no live job."""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from online_trainer.errors import ExperimentInUseError, RunFailure, RunsFailedError
from online_trainer.experiment.job_results import SLURM_DIR, SLURM_JOB_KEY, apply_result, manifest_lock, read_job_result
from online_trainer.experiment.manifest import how_to_continue
from online_trainer.experiment.slurm_states import LIVE, job_states
from online_trainer.parallel.slurm import _Watch, follow
from online_trainer.progress.display import NoProgress, ProgressDisplay
from online_trainer.records import storage
from online_trainer.records.record_view import RunRecords, as_records
from online_trainer.run.one_run import COMPLETED, RunResult

logger = logging.getLogger(__name__)

UNFINISHED = ("interrupted", "pending")
"""Statuses of runs that may go on with ``resume=True``."""


def unfinished_note(exp_dir: str | os.PathLike, runs: Sequence[int]) -> str:
    """What to say of runs of ``exp_dir`` that are interrupted or still pending and no job holds: how to go on."""
    listed = ", ".join(str(run) for run in runs)
    how = how_to_continue(exp_dir)
    return (
        f"{exp_dir}: run{'s' if len(runs) != 1 else ''} {listed} did not finish and no Slurm job holds "
        f"{'them' if len(runs) != 1 else 'it'} (interrupted, or never started: the jobs were cancelled). "
        f"Continue with: {how}"
    )


def unfinished_notes(exp_dirs: Iterable[str | os.PathLike]) -> list[str]:
    """For each experiment with runs interrupted or not started that no job holds (their jobs cancelled, or never
    handed to one), which runs and how to continue them (:func:`unfinished_note`)."""
    notes = []
    for exp_dir in exp_dirs:
        entries = storage.read_manifest(exp_dir)["runs"]
        queued = ("pending", True)  # a pending run in a job: it is followed, not left
        unended = [
            e["run"] for e in entries if e["status"] in UNFINISHED and (e["status"], SLURM_JOB_KEY in e) != queued
        ]
        if unended:
            notes.append(unfinished_note(exp_dir, unended))
    return notes


class SlurmRuns:
    """The handle of runs submitted to Slurm without waiting (``SlurmOptions(wait=False)``).

    It reads only the experiment directory and ``squeue``, so it can also be made later, in
    another process: ``SlurmRuns.of(exp_dir)``.

    Args:
        runs: ``(exp_dir, run)`` of each run followed.
        folder: where the jobs' logs are.
    """

    def __init__(self, runs: Sequence[tuple[str, int]], folder: str) -> None:
        self.runs, self.folder = [(os.fspath(exp_dir), run) for exp_dir, run in runs], folder

    @classmethod
    def of(cls, exp_dir: str | os.PathLike, folder: str | os.PathLike | None = None) -> SlurmRuns:
        """The handle of the runs of ``exp_dir`` handed to Slurm jobs (logs in ``folder``, else ``exp_dir/slurm``)."""
        manifest = storage.read_manifest(exp_dir)
        runs = [(os.fspath(exp_dir), entry["run"]) for entry in manifest["runs"] if SLURM_JOB_KEY in entry]
        return cls(runs, os.fspath(folder or Path(exp_dir) / SLURM_DIR))

    def _entries(self) -> list[dict[str, Any]]:
        manifests = {exp_dir: storage.read_manifest(exp_dir) for exp_dir in dict.fromkeys(d for d, _ in self.runs)}
        return [manifests[exp_dir]["runs"][run - 1] for exp_dir, run in self.runs]

    @property
    def job_ids(self) -> list[str | None]:
        """The Slurm job of each run, in order (runs sharing a job repeat its id)."""
        return [entry.get(SLURM_JOB_KEY) for entry in self._entries()]

    def unended_job_ids(self) -> list[str]:
        """The Slurm jobs of the runs the manifest says are pending or running in one, in order (nothing settled)."""
        return [job for *_, job in self._watch_unended_entries()]

    def done(self) -> bool:
        """Whether every run has ended (finished, failed, or its job gone without a result, then recorded as failed)."""
        self._settle(self._watch_unended())
        return not self._watch_unended().runs

    def wait(self, progress: bool = True, poll_interval: float = 2.0) -> list[RunRecords | None]:
        """Wait until every run has ended; return the records of each run of the experiment(s), read from disk.

        Raises:
            RunsFailedError: some runs failed (their jobs' errors, or jobs that ended without a result).
        """
        watch = self._watch_unended()
        display: ProgressDisplay | NoProgress = NoProgress()
        if progress and watch.runs:
            # the call's budget: written when the runs were planned (the manifest's "budget" comes with a first run)
            call = storage.read_manifest(self.runs[0][0]).get("call") or {}
            total = call.get("total_steps") or call.get("num_episodes") or 0
            unit = "steps" if call.get("total_steps") else "episodes"
            if total:  # every run of the handle: those that ended before are counted as such (S18)
                display = ProgressDisplay(len(self.runs), total, unit)
                followed = set(watch.runs)  # by key
                for key, entry in enumerate(self._entries(), start=1):
                    if key not in followed:
                        made = entry.get("global_step" if unit == "steps" else "episodes") or 0
                        display.ended_before(entry["status"], made)
        try:
            follow(watch, display, poll_interval, lambda result: self._record(result), attached=True)
        finally:
            display.close_all()
        failures: list[RunFailure] = []
        runs: list[RunRecords | None] = []
        for (exp_dir, run), entry in zip(self.runs, self._entries()):
            if entry["status"] in COMPLETED:
                runs.append(as_records(storage.load_run_metrics(exp_dir, run)))
                continue
            runs.append(None)
            if entry["status"] not in UNFINISHED:  # interrupted: a Ctrl-C of the call that waited cancelled its job
                error = entry.get("error") or f"its run ended {entry['status']}"
                failures.append(RunFailure(run, entry["seed"], error.splitlines()[0], error))
        for note in self.unfinished_notes():
            logger.warning("%s", note)
        if failures:
            raise RunsFailedError(failures, runs, continuing="the same call with resume=True")
        return runs

    def unfinished_notes(self) -> list[str]:
        """For each experiment of these runs with runs interrupted or not started (their jobs cancelled, or never
        handed to one), which runs and how to continue them."""
        return unfinished_notes(dict.fromkeys(d for d, _ in self.runs))

    def _watch_unended_entries(self) -> list[tuple[int, str, int, int, str]]:
        followed = []
        for key, ((exp_dir, run), entry) in enumerate(zip(self.runs, self._entries()), start=1):
            if entry["status"] in ("pending", "running") and SLURM_JOB_KEY in entry:
                followed.append((key, exp_dir, run, entry["seed"], entry[SLURM_JOB_KEY]))
        return followed

    def _watch_unended(self) -> _Watch:
        return _Watch(self._watch_unended_entries(), self.folder)

    def _settle(self, watch: _Watch) -> None:
        """Record the runs whose jobs ended without a result (the jobs record the others themselves)."""
        states = job_states(watch.job_ids())
        for _ in range(2):  # two looks: a result file may lag behind its job's end
            for result in watch.results(states):
                self._record(result)

    def _record(self, result: RunResult) -> None:
        """Write ``result`` into its run's manifest entry unless the entry has ended already.

        A job writes its run's result file, then its manifest entry: a result read in between (the
        job's own, or one made here for a job that ended without one) is applied here, or the entry
        would still say ``running`` when :meth:`wait` reads it (the same result, applied twice, is
        the same entry).
        """
        exp_dir = next(Path(d) for d, run in self.runs if run == result.run_idx)
        with manifest_lock(exp_dir):
            manifest = storage.read_manifest(exp_dir)
            if manifest["runs"][result.run_idx - 1]["status"] in ("pending", "running"):
                apply_result(manifest, result, exp_dir)
                storage.write_manifest(exp_dir, manifest)


def refuse_live_jobs(exp_dir: Path, call: str = "resume=True") -> None:
    """Raise when runs of the experiment in ``exp_dir`` are still in Slurm jobs that may run (before a resume, or
    before ``overwrite=True`` sets the experiment aside: its jobs would go on writing into the new one).

    Args:
        exp_dir: the experiment directory.
        call: what the refused call asked, as its message names it (``resume=True``, ``overwrite=True``).

    Raises:
        ExperimentInUseError: naming the runs, their jobs and their states, and what to do.
    """
    try:
        manifest = storage.read_manifest(exp_dir)
    except (OSError, ValueError):
        return
    # an interrupted run's job may still be writing its checkpoint (cancelled, within the cluster's KillWait)
    entries = [
        e
        for e in manifest.get("runs", [])
        if e.get("status") in ("running", "interrupted")
        and SLURM_JOB_KEY in e
        and read_job_result(exp_dir, e["run"]) is None
    ]
    if not entries:
        return
    states = job_states(e[SLURM_JOB_KEY] for e in entries)
    if states is None:
        live = {
            e["run"]: (e[SLURM_JOB_KEY], "state unknown: squeue cannot be run here")
            for e in entries
            if e["status"] == "running"
        }
    else:
        live = {
            e["run"]: (e[SLURM_JOB_KEY], states[e[SLURM_JOB_KEY]]) for e in entries if states[e[SLURM_JOB_KEY]] in LIVE
        }
    if live:
        described = ", ".join(f"run {run} in job {job} ({state})" for run, (job, state) in live.items())
        then = "resume" if call.startswith("resume") else "overwrite once they have ended"
        raise ExperimentInUseError(
            f"{call}, but {os.fspath(exp_dir)!r} has runs still in Slurm jobs: {described}. Wait "
            f"for them (online-trainer wait {shlex.quote(os.fspath(exp_dir))}, or SlurmRuns.of(exp_dir).wait() from Python; "
            f"online-trainer show says how they stand), or cancel them (scancel) and {then}."
        )
