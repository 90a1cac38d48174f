"""The job side of the Slurm backend: what one Slurm job runs (see :mod:`online_trainer.parallel.slurm`).

A job runs its runs one after another, in the job's own process, and leaves everything in the
experiment directory, so that nothing depends on the process that submitted it:

- each run's streams, checkpoints and callback files, as a run anywhere does;
- its progress, appended to ``slurm/progress_run{i}.pkl`` about every second;
- its result, ``slurm/result_run{i}.pkl`` (the pickled ``RunResult``), and its end in the manifest.

Signals. SIGTERM (Slurm requeues, preempts or cancels the job) and SIGUSR1/SIGUSR2 (the job's
time limit is near: ``--signal``) make the run in progress write a full checkpoint at its next
step boundary and stop. After SIGUSR1/SIGUSR2 the job requeues itself (``scontrol requeue``);
after SIGTERM Slurm requeues it, or it was cancelled. A requeued job starts again from the
same submission: runs with a result are skipped, the run that stopped continues from its
checkpoint (every output cut back to it, as ``resume=True`` does), and the records equal an
uninterrupted run's when the env pickles. After ``max_requeues`` requeues its runs fail
with a message that says so; their checkpoints stay for ``resume=True``. A run that cannot
write a full checkpoint (its agent has no ``save()`` and ``load()``) stops all the same: on
SIGTERM its restart starts it again from step 0; at the time limit it fails (started again, it
would meet the same limit), and the job requeues itself for its other runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cloudpickle
import submitit

from online_trainer.callbacks.rewind import rewind_run
from online_trainer.errors import Preempted
from online_trainer.experiment import job_results
from online_trainer.experiment.job_results import record_job_result
from online_trainer.experiment.manifest import created_at
from online_trainer.parallel.execution import failed_result
from online_trainer.parallel.threads import limit_threads
from online_trainer.parallel.worker_process import pack_result
from online_trainer.progress.display import QueueProgress
from online_trainer.records import storage
from online_trainer.run.builtin import preemption
from online_trainer.run.full_checkpoint import restart_point
from online_trainer.run.one_run import RunResult, RunSpec, execute_run

logger = logging.getLogger(__name__)

TIME_LIMIT_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
EXIT_PREEMPTED = 3  # the exit status of a job whose run checkpointed and stopped on a signal


class FileChannel:
    """The ``put`` of a queue for :class:`QueueProgress`: appends messages to a file at most every ``interval`` s."""

    def __init__(self, path: Path, interval: float = 1.0) -> None:
        self.path, self.interval = path, interval
        self.buffer: list[tuple] = []
        self.last = 0.0

    def put(self, message: tuple) -> None:
        self.buffer.append(message)
        if message[0] == "start" or time.monotonic() - self.last >= self.interval:
            self.flush()

    def flush(self) -> None:
        """Append what is buffered (one pickle per batch; a reader stops at a batch cut off mid-way)."""
        if not self.buffer:
            return
        try:
            with open(self.path, "ab") as file:
                pickle.dump(self.buffer, file, protocol=pickle.HIGHEST_PROTOCOL)
        except OSError as exc:  # progress is a display: the run goes on
            logger.debug("could not write progress to %s: %s", self.path, exc)
        self.buffer = []
        self.last = time.monotonic()


class SlurmRunJob(submitit.helpers.Checkpointable):
    """One Slurm job: the runs it was given, each continued from its checkpoint on a restart.

    It is a submitit ``Checkpointable``: should submitit's own handler of the time-limit signal
    run (before this job installs its own), its ``checkpoint()`` resubmits this same job, which
    continues its runs from their last full checkpoints.

    Args:
        payloads: the cloudpickled :class:`RunSpec` of each run, in order.
        torch_threads: threads of every pool (torch, BLAS, OpenMP) of the job's process (None: as they are).
        max_requeues: requeues after which the job's runs fail.
        sys_path: the submitting process's ``sys.path`` (absolute), put before the job's own entries it lacks.
    """

    def __init__(
        self,
        payloads: list[bytes],
        torch_threads: int | None,
        max_requeues: int,
        sys_path: Sequence[str] = (),
    ) -> None:
        self.payloads, self.torch_threads, self.max_requeues = payloads, torch_threads, max_requeues
        self.sys_path = list(sys_path)

    def __call__(self) -> list[int]:
        """Run every run that has no result yet; return their numbers."""
        limit_threads(self.torch_threads)
        # the submitting process's import path, as spawned workers get it: a module beside the user's script (or
        # one a notebook put on sys.path) is imported by name when the runs are unpickled
        sys.path[:0] = [entry for entry in self.sys_path if entry not in sys.path]
        restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        time_limit = threading.Event()

        def near_time_limit(signum: int, frame: Any) -> None:
            time_limit.set()
            preemption.request(signum, frame)

        done = []
        try:
            with preemption.handling():
                for sig in TIME_LIMIT_SIGNALS:
                    signal.signal(sig, near_time_limit)
                for position, payload in enumerate(self.payloads, start=1):
                    spec: RunSpec = cloudpickle.loads(payload)
                    if job_results.result_path(str(spec.exp_dir), spec.run_idx).is_file():
                        continue  # it ended during an earlier start of this job
                    self._run(spec, restarts, time_limit)
                    done.append(spec.run_idx)
                    if time_limit.is_set() and position < len(self.payloads):
                        # the run ended at the time limit without a checkpoint: the job's other runs get a new start
                        _requeue(_job_id(), f"run {spec.run_idx} ended at the time limit")
                        raise SystemExit(EXIT_PREEMPTED)
        finally:
            # ignored from now to the process's end: the job's work is done, or it asked for its requeue. Slurm's
            # time-limit signal can come (again) in that window, and its default action killed the job: FAILED,
            # status 140, though its run had checkpointed or finished
            for sig in TIME_LIMIT_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        return done

    def _run(self, spec: RunSpec, restarts: int, time_limit: threading.Event) -> None:
        job_id = _job_id()
        if restarts > self.max_requeues:
            result = failed_result(
                spec,
                f"RequeueLimit: Slurm job {job_id} was requeued {restarts} time{'s' if restarts != 1 else ''}, more than "
                f"max_requeues={self.max_requeues}, so run {spec.run_idx} (seed {spec.seed}) "
                "stops here. Its full checkpoint is kept: continue it with resume=True, or "
                "allow more requeues with SlurmOptions(max_requeues=...).",
            )
            logger.error("%s", result.error)
            self._finish(spec, result)
            return
        if restarts:
            spec = self._continued(spec)
        channel = FileChannel(job_results.progress_path(str(spec.exp_dir), spec.run_idx))
        try:
            result = execute_run(spec, QueueProgress(channel, interval=1.0))
        except Preempted as stop:
            channel.flush()
            if stop.checkpointed or not time_limit.is_set():  # a requeued job continues it (or starts it again)
                if time_limit.is_set():
                    _requeue(job_id, f"run {spec.run_idx} checkpointed before the time limit")
                raise SystemExit(EXIT_PREEMPTED) from None
            # started again, it would meet the same limit
            result = failed_result(
                spec,
                f"TimeLimit: run {spec.run_idx} (seed {spec.seed}) reached the time limit of Slurm job {job_id} at "
                f"step {stop.global_step} without a full checkpoint ({stop.why}), so it cannot be continued: give the "
                "jobs more time (SlurmOptions(time=...)), or the agent save() and load().",
                stopped_by=stop,
            )
            logger.error("%s", result.error)
        except Exception as exc:  # isolated: the job goes on with its next run
            result = failed_result(spec, exc)
            logger.error("%s (seed %d) failed: %s", spec.name, spec.seed, result.extra["exception"], exc_info=exc)
            result.extra["exception"] += f" (in Slurm job {job_id}; its log: {_log_path()})"
        finally:
            channel.flush()
            try:
                spec.callback.close()
            except Exception as exc:
                logger.error("run %d: closing the callback raised: %s", spec.run_idx, exc)
        self._finish(spec, result)

    @staticmethod
    def _continued(spec: RunSpec) -> RunSpec:
        """``spec`` on a restart of its job: every output cut back to its full checkpoint (or removed, without one)."""
        header = restart_point(str(spec.exp_dir), spec.run_idx)
        since = created_at(job_results.read_manifest_quietly(Path(str(spec.exp_dir))))
        position = None if header is None else header.callback_position
        rewind_run(spec.callback, f"{spec.tag_prefix}run_{spec.run_idx}", position, since)
        job_results.record_restart(Path(str(spec.exp_dir)), spec.run_idx, header)
        where = f"from its checkpoint at step {header.global_step}" if header is not None else "from its start"
        logger.warning("Slurm restarted this job: run %d continues %s", spec.run_idx, where)
        return dataclasses.replace(spec, resume=True)

    def _finish(self, spec: RunSpec, result: RunResult) -> None:
        """Leave the result in the experiment directory, then record the run's end in the manifest."""
        storage.write_atomic(job_results.result_path(str(spec.exp_dir), spec.run_idx), pack_result(spec, result))
        # the job that records an experiment's last run writes all_metrics.pkl, whether or not the submitting
        # process waits: a notebook killed while it waited left none (tester S7)
        record_job_result(Path(str(spec.exp_dir)), result, spec.options.dump_metrics)


def _requeue(job_id: str, why: str) -> None:
    logger.warning("%s: requeueing Slurm job %s", why, job_id)
    subprocess.run(["scontrol", "requeue", job_id], check=False, timeout=60)


def _log_path() -> str:
    """This job's log of the runs' messages (submitit's stderr file)."""
    try:
        return str(submitit.JobEnvironment().paths.stderr)
    except (RuntimeError, KeyError):  # not in a submitit job
        return "?"


def _job_id() -> str:
    """This job's id as ``scontrol`` takes it: ``123``, or ``123_4`` for a task of an array."""
    try:
        return str(submitit.JobEnvironment().job_id)
    except RuntimeError:  # not in a submitit job
        return os.environ.get("SLURM_JOB_ID", "?")
