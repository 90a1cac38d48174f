"""Runs as Slurm jobs, submitted through submitit (``pip install -e ".[slurm]"``).

The process that submits (on a login node, in a notebook) hands each run, or each group of
``runs_per_job`` runs, to a Slurm job of one job array, ``num_workers`` of them running at once
(the array's ``%N`` throttle). A job runs in the same Python (``sys.executable``) and leaves
everything in the experiment directory itself (see :mod:`online_trainer.parallel.slurm_job`),
which must therefore be on a filesystem every node shares. The submitting process only reads:
it shows the jobs' progress, takes each result as it appears, and asks ``squeue`` how the jobs
stand, so that a job that ends without a result (cancelled, killed, out of memory, its node
lost) fails its runs, naming the seed, the job id and the end of the job's log. It may also
return at once with a :class:`~online_trainer.parallel.slurm_handle.SlurmRuns` handle, and end:
the jobs record how their runs end in the manifest themselves.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import pickle
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from online_trainer.errors import RunSetupError, SlurmSubmissionError
from online_trainer.experiment import job_results
from online_trainer.experiment.job_results import read_job_result
from online_trainer.experiment.slurm_states import (
    ENDED,
    GONE,
    LIVE,
    QUEUED,
    UNRUNNABLE,
    job_states,
    state_words,
    unrunnable,
)
from online_trainer.parallel import shipping
from online_trainer.parallel.execution import ResultHandler, SlurmOptions, StartHandler, no_start
from online_trainer.parallel.threads import thread_variables
from online_trainer.progress.display import NoProgress, ProgressDisplay
from online_trainer.run.one_run import RunResult, RunSpec

logger = logging.getLogger(__name__)

SubmitHandler = Callable[[RunSpec, str], None]
_LOG_LINES = 20


def import_submitit() -> Any:
    """submitit, or an ImportError that says how to install it."""
    try:
        import submitit
    except ImportError as exc:
        raise ImportError(
            "backend='slurm' needs submitit: pip install -e '.[slurm]' (or pip install submitit)."
        ) from exc
    return submitit


def log_tail(folder: str | os.PathLike, job_id: str, lines: int = _LOG_LINES) -> tuple[Path, str]:
    """The job's log file (submitit's stderr, else its stdout) and its last ``lines`` lines."""
    submitit = import_submitit()
    paths = submitit.core.utils.JobPaths(folder, job_id=job_id, task_id=0)
    for path in (paths.stderr, paths.stdout):
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if text.strip():
            return Path(path), "\n".join(text.rstrip().splitlines()[-lines:])
    return Path(paths.stderr), "(the log is empty or missing)"


def ended_without_result(spec_run: int, seed: int, key: int, job_id: str, state: str, folder: str) -> RunResult:
    """The failed result of a run whose job ended (``state``) before the run had a result."""
    path, tail = log_tail(folder, job_id)
    how = "is no longer known to Slurm (cancelled before it started, or ended long ago)" if state == GONE else state
    summary = f"SlurmJobEnded: run {spec_run} (seed {seed}) has no result, and its Slurm job {job_id} "
    summary += how if state == GONE else f"ended {how}"
    if path.is_file():
        summary += f"; its log: {path}"
        error = f"{summary}\nThe end of that log:\n{tail}"
    else:
        summary += "; the job wrote no log: it never started"
        error = summary
    return RunResult(
        run_idx=spec_run,
        seed=seed,
        records=None,
        key=key,
        status="failed",
        error=error,
        extra={"exception": summary, "slurm_job": job_id},
    )


class _Watch:
    """What the submitting process follows: each run's job, its progress file, and its result file."""

    def __init__(self, runs: Sequence[tuple[int, str, int, int, str]], folder: str) -> None:
        # (key, exp_dir, run, seed, job id) of every run still followed
        self.runs = {key: (exp_dir, run, seed, job_id) for key, exp_dir, run, seed, job_id in runs}
        self.folder = folder
        self.offsets: dict[int, int] = {}
        self.ended_seen: dict[str, int] = {}  # job id -> polls in a row that saw it ended

    def progress(self, display: ProgressDisplay | NoProgress) -> None:
        """Hand the progress messages written since the last call to ``display``."""
        if isinstance(display, NoProgress):
            return
        for key, (exp_dir, run, _, _) in self.runs.items():
            path = job_results.progress_path(exp_dir, run)
            offset = self.offsets.get(key, 0)
            try:
                with open(path, "rb") as file:
                    file.seek(offset)
                    while True:
                        try:
                            batch = pickle.load(file)
                        except Exception:  # the end, or a batch still being written
                            break
                        offset = file.tell()
                        for message in batch:
                            display.handle(message)
            except OSError:
                continue
            self.offsets[key] = offset

    def results(self, states: dict[str, str] | None) -> list[RunResult]:
        """The results of runs that ended since the last call: read from their files, or failed when their job
        ended without writing one (seen ended by two polls in a row: its file may lag behind on a shared fs).

        Args:
            states: the jobs' states from a fresh ``squeue``; None: none (only result files are read).
        """
        ended: list[RunResult] = []
        for job_id in list(self.ended_seen):
            if states is not None and states.get(job_id) not in ENDED and states.get(job_id) != GONE:
                del self.ended_seen[job_id]  # requeued: it runs again
        seen_now = set()
        for key, (exp_dir, run, seed, job_id) in list(self.runs.items()):
            result = read_job_result(Path(exp_dir), run)
            if result is not None:
                result.key = key
                ended.append(result)
                del self.runs[key]
                continue
            state = None if states is None else states.get(job_id)
            if state in ENDED or state == GONE:
                if job_id not in seen_now:
                    self.ended_seen[job_id] = self.ended_seen.get(job_id, 0) + 1
                    seen_now.add(job_id)
                if self.ended_seen[job_id] >= 2:
                    logger.error(
                        "run %d (seed %d) has no result, and its Slurm job %s is %s",
                        run,
                        seed,
                        job_id,
                        state_words(state),
                    )
                    ended.append(ended_without_result(run, seed, key, job_id, state, self.folder))
                    del self.runs[key]
        return ended

    def job_ids(self) -> list[str]:
        return [job_id for _, _, _, job_id in self.runs.values()]

    def jobs(self) -> dict[int, str]:
        """The job id of each run still followed, by its key."""
        return {key: job_id for key, (_, _, _, job_id) in self.runs.items()}


class SlurmExecutor:
    """Submits runs as the tasks of one Slurm job array, at most ``max_running`` running at once.

    Args:
        options: the jobs' Slurm parameters and how many runs go in each job.
        max_running: jobs running at once (the ``num_workers`` of ``multi_run``).
        torch_threads: threads of every pool (torch, BLAS, OpenMP) in each job (None: as the node sets them).
    """

    def __init__(self, options: SlurmOptions, max_running: int = 1, torch_threads: int | None = 1) -> None:
        self.submitit = import_submitit()
        self.options, self.max_running, self.torch_threads = options, max_running, torch_threads

    def folder(self, specs: Sequence[RunSpec]) -> Path:
        """Where job scripts and logs go: ``options.folder``, else ``slurm/`` beside the experiments."""
        if self.options.folder is not None:
            return Path(self.options.folder)
        return Path(os.path.commonpath([os.path.abspath(str(spec.exp_dir)) for spec in specs])) / job_results.SLURM_DIR

    def submit(
        self, specs: Sequence[RunSpec], on_start: StartHandler = no_start, on_submitted: SubmitHandler | None = None
    ) -> list[tuple[RunSpec, str]]:
        """Submit ``specs``; return each with its job id.

        ``on_start(spec)`` is called before the jobs are submitted, ``on_submitted(spec, job_id)`` after.

        Raises:
            ValueError: a spec has no experiment directory.
            FailedSubmissionError (submitit's): ``sbatch`` refused the jobs (its message says why).
        """
        missing = [spec.run_idx for spec in specs if spec.exp_dir is None]
        if missing:
            raise ValueError(
                "backend='slurm' needs an exp_dir on a filesystem the nodes share (jobs write their "
                f"results there), but got exp_dir=None for run(s) {missing}: pass exp_dir=..."
            )
        folder = self.folder(specs)
        folder.mkdir(parents=True, exist_ok=True)
        for spec in specs:  # what an earlier call's jobs left for the runs done now
            exp_dir = str(spec.exp_dir)  # checked above
            Path(exp_dir, job_results.SLURM_DIR).mkdir(exist_ok=True)
            job_results.result_path(exp_dir, spec.run_idx).unlink(missing_ok=True)
            job_results.progress_path(exp_dir, spec.run_idx).unlink(missing_ok=True)
        executor = self.submitit.SlurmExecutor(folder=folder, max_num_timeout=self.options.max_requeues)
        # time=None: no --time, the partition's limit (submitit would otherwise ask for 5 minutes)
        # the thread variables in the job script: numpy's BLAS reads them when the job unpickles its runs
        setup = [f"export {name}={value}" for name, value in thread_variables(self.torch_threads).items()]
        executor.update_parameters(
            **{"time": None, **self.options.sbatch_parameters()},
            job_name="online_trainer",
            signal_delay_s=self.options.signal_delay_s,
            array_parallelism=self.max_running,
            setup=setup,
        )
        size = self.options.runs_per_job
        groups = [list(specs[i : i + size]) for i in range(0, len(specs), size)]
        for spec in specs:
            on_start(spec)
        import_path = [os.path.abspath(entry or os.curdir) for entry in sys.path]  # "" is this process's directory
        jobs = []
        from online_trainer.parallel.slurm_job import SlurmRunJob

        utils = self.submitit.core.utils
        sbatch_err = io.StringIO()  # submitit prints sbatch's stderr before it raises it: the refusal quotes it once
        try:
            with contextlib.redirect_stderr(sbatch_err), executor.batch():
                for group in groups:
                    payloads = [shipping.dumps(spec) for spec in group]
                    job = SlurmRunJob(payloads, self.torch_threads, self.options.max_requeues, import_path)
                    jobs.append(executor.submit(job))
        except (utils.FailedJobError, utils.FailedSubmissionError) as exc:
            # sbatch checks what no option check here can (the cluster's partitions, limits, resources): a refusal is
            # bad input, found before any run started, so the call stops and keeps nothing, as for a bad agent
            said = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip().startswith("sbatch"))
            refusal = SlurmSubmissionError(
                f"Slurm refused the jobs ({said or str(exc).strip()}): check execution.slurm's options (partition, "
                "time in minutes, mem, gres, cpus_per_task, additional_parameters) against the cluster's (sinfo, "
                "scontrol show partition). Nothing was submitted."
                + sbatch_options_said(self.options.additional_parameters)
            )
            raise RunSetupError(specs[0].run_idx, specs[0].seed, refusal) from exc
        if sbatch_err.getvalue().strip():  # what sbatch said of jobs it took (a warning of the cluster's)
            logger.warning("sbatch: %s", sbatch_err.getvalue().strip())
        submitted = [(spec, str(job.job_id)) for group, job in zip(groups, jobs) for spec in group]
        logger.info(
            "submitted %d runs as %d Slurm jobs (%s), at most %d running at once; logs in %s",
            len(specs),
            len(jobs),
            ", ".join(str(job.job_id) for job in jobs[:3]) + (", ..." if len(jobs) > 3 else ""),
            self.max_running,
            folder,
        )
        if on_submitted is not None:
            for spec, job_id in submitted:
                on_submitted(spec, job_id)
        return submitted

    def run(
        self,
        specs: Sequence[RunSpec],
        show: Callable[[], ProgressDisplay | NoProgress],
        on_result: ResultHandler,
        on_start: StartHandler = no_start,
        on_submitted: SubmitHandler | None = None,
    ) -> None:
        """Submit every spec; return once each has a result.

        ``show()`` makes the progress display, once sbatch has taken every job (a call it refuses draws no bars).
        An exception here (Ctrl-C, ``on_result`` raising) cancels the jobs still queued or running:
        each run in progress writes a full checkpoint first (SIGTERM), for ``resume=True``.
        """
        submitted = self.submit(specs, on_start, on_submitted)
        display = show()
        watch = _Watch(
            [(spec.key, str(spec.exp_dir), spec.run_idx, spec.seed, job_id) for spec, job_id in submitted],
            str(self.folder(specs)),
        )
        try:
            follow(watch, display, self.options.poll_interval, on_result)
        except BaseException:
            cancel(watch.job_ids())
            raise


_REASONS_EVERY_S = 30.0
"""Seconds between two looks at why queued jobs wait."""


def follow(
    watch: _Watch,
    display: ProgressDisplay | NoProgress,
    poll_interval: float,
    on_result: Callable[[RunResult], None],
    attached: bool = False,
) -> None:
    """Follow the runs of ``watch`` until each has a result, handing each to ``on_result``.

    A job queued for a reason that keeps it from ever starting as asked (:data:`UNRUNNABLE`: more CPUs than the
    partition has...) is named in a warning, once: the wait would otherwise be silent until Ctrl-C.
    ``attached``: the runs were under way before this process followed them (a handle's ``wait()``); the progress
    they made before is shown as done before, not as made in no time (a rate of millions of steps a second).
    """
    with display.done_before() if attached else contextlib.nullcontext():
        watch.progress(display)
    last_poll, last_reasons, warned = 0.0, -math.inf, set()
    while watch.runs:
        watch.progress(display)
        states = None  # results only: a job is judged ended on a fresh squeue
        if time.monotonic() - last_poll >= poll_interval:
            states = job_states(watch.job_ids())
            last_poll = time.monotonic()
            for key, job_id in watch.jobs().items():  # back in the queue after its run started: not running
                if (states or {}).get(job_id) in QUEUED:
                    display.run_requeued(key)
            queued = [job for job, state in (states or {}).items() if state == "PENDING" and job not in warned]
            if queued and time.monotonic() - last_reasons >= _REASONS_EVERY_S:  # one more squeue: not at every poll
                last_reasons = time.monotonic()
                stuck = unrunnable(queued)
            else:
                stuck = {}
            for job, reason in stuck.items():
                warned.add(job)
                logger.warning(
                    "Slurm job %s is queued and will not start as asked (%s: %s): stop this call (Ctrl-C cancels its "
                    "jobs) and change execution.slurm's options",
                    job,
                    reason,
                    UNRUNNABLE[reason],
                )
        for result in watch.results(states):
            watch.progress(display)
            display.run_finished(result.key, result.status)
            on_result(result)
        if watch.runs:
            time.sleep(min(0.5, poll_interval))


def cancel(job_ids: Sequence[str], wait_s: float = 90.0) -> None:
    """``scancel`` the jobs and wait (up to ``wait_s``) until they have left: each run in progress gets SIGTERM and
    checkpoints within the cluster's KillWait, so that nothing writes into the experiment afterwards."""
    job_ids = list(dict.fromkeys(job_ids))
    if not job_ids or shutil.which("scancel") is None:
        return
    logger.warning("cancelling Slurm jobs %s", ", ".join(job_ids))
    subprocess.run(["scancel", *job_ids], check=False, timeout=60)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        states = job_states(job_ids)
        if states is None or not any(state in LIVE for state in states.values()):
            return
        time.sleep(1.0)
    logger.warning("Slurm jobs %s had not ended %.0f s after scancel", ", ".join(job_ids), wait_s)


def sbatch_options_said(additional: Mapping[str, Any] | None) -> str:
    """What a refusal adds of ``additional_parameters``: sbatch takes a prefix of an option as the option, so a
    misspelt key can be refused for another option's value (S11: ``exclud`` ran as ``--exclude``)."""
    if not additional:
        return ""
    given = ", ".join(f"--{key.replace('_', '-')}={value}" for key, value in additional.items())
    return (
        f" additional_parameters went to sbatch as {given}: sbatch reads an option's unambiguous prefix as the "
        "option itself, so check each key's spelling (sbatch --help lists them)."
    )
