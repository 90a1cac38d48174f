"""``online-trainer wait EXP_DIR``: wait for the Slurm jobs an experiment's runs were handed to, then print its table."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from online_trainer.analysis.dataframes import load_episodes
from online_trainer.cli.report import configured_last_k, final_table
from online_trainer.cli.run_command import failed
from online_trainer.config.schema import ConfigError
from online_trainer.errors import RunFailure, RunsFailedError
from online_trainer.parallel.slurm_handle import SlurmRuns, unfinished_notes
from online_trainer.records import storage


def wait_command(args: argparse.Namespace) -> int:
    """Follow the runs of ``args.exp_dir`` still in Slurm jobs until each has ended; print the final table.

    What ``SlurmRuns.of(exp_dir).wait()`` does from Python, for runs submitted with
    ``execution.slurm.wait=false`` (or ``SlurmOptions(wait=False)``) by a process that has exited.
    Ctrl-C stops the waiting, not the jobs.

    Returns:
        0 when every run completed, 1 when some failed (their errors are printed) or did not finish (interrupted,
        or never started: which, and how to continue them, is logged), 130 on Ctrl-C.

    Raises:
        ConfigError: ``args.exp_dir`` holds no experiment.
    """
    exp_dir = Path(args.exp_dir)
    if not (exp_dir / storage.MANIFEST_FILE).is_file():
        raise ConfigError(
            f"{exp_dir} holds no experiment (no {storage.MANIFEST_FILE}): give the directory of an experiment "
            "whose runs went to Slurm jobs (a sweep's configurations each have their own)."
        )
    handle = SlurmRuns.of(exp_dir)
    status = 0
    said = True  # a line on stdout before the table, which a blank line then sets apart
    if not handle.runs:
        manifest = storage.read_manifest(exp_dir)
        on_slurm = manifest.get("backend") == "slurm"
        left = unfinished_notes([exp_dir]) if on_slurm else []  # runs whose jobs a Ctrl-C cancelled before they began
        print(f"No run of {exp_dir} is in a Slurm job: nothing to wait for.")
        for note in left:
            print(f"online-trainer: {note}", file=sys.stderr)
        status = 1 if left else 0
        # runs that failed, in any experiment: said and counted as `run` and `resume` say them, so that
        # `wait DIR && next-step` stops there (V18: exit 0 and no word of an experiment whose runs had all failed)
        failures = [
            RunFailure(e["run"], e["seed"], _what_failed(e.get("error") or "failed"), e.get("error") or "failed")
            for e in manifest["runs"]
            if e.get("status") == "failed"
        ]
        if failures:
            status = failed(RunsFailedError(failures, [], continuing="the same call with resume=True"), exp_dir)
    else:
        # said before anything is settled: a job cancelled while queued was recorded (its ERROR logged) first, and the
        # line after it still listed that job (S18); wait() settles it among the runs it counts
        jobs = ", ".join(str(job) for job in dict.fromkeys(handle.unended_job_ids()))
        said = bool(jobs)
        if said:
            print(f"Waiting for the Slurm jobs of {exp_dir}: {jobs}", flush=True)
        try:  # also when every job has ended: it raises for the runs that failed
            handle.wait(progress=not args.no_progress, poll_interval=args.poll)
        except RunsFailedError as exc:
            status = failed(exc, exp_dir)
        except KeyboardInterrupt:
            print(
                "online-trainer: stopped waiting; the jobs go on. Wait again with:\n"
                f"  online-trainer wait {shlex.quote(os.fspath(exp_dir))}",
                file=sys.stderr,
            )
            return 130
        if handle.unfinished_notes():  # wait() logged them: runs a resume continues, not failed ones
            status = 1
    if said:
        print()
    print(final_table(load_episodes(exp_dir), configured_last_k([exp_dir])))
    return status


def _what_failed(error: str) -> str:
    """The line of a manifest's ``error`` that says what failed: a traceback's last, else its first."""
    lines = [line for line in error.splitlines() if line.strip()] or ["failed"]
    return lines[-1].strip() if lines[0].startswith("Traceback") else lines[0]
