"""One experiment's runs: their manifest, their results as they arrive, and the outcome."""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import re
import shlex
import shutil
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from online_trainer.callbacks.csv_file import COLUMNS as CSV_COLUMNS
from online_trainer.callbacks.tb_layout import LAYOUT_FILE
from online_trainer.errors import ExperimentExistsError, RunFailure
from online_trainer.experiment import job_results, ownership
from online_trainer.experiment.job_results import (
    SLURM_JOB_KEY,
    apply_result,
    manifest_lock,
    progress_from_disk,
    read_manifest_quietly,
)
from online_trainer.experiment.lock import hold_lock
from online_trainer.loop import seeding
from online_trainer.records import storage
from online_trainer.records.episode_table import EpisodeTable, chunks_form
from online_trainer.records.record_view import RunRecords, as_records
from online_trainer.run.one_run import COMPLETED, RunResult, RunSpec

logger = logging.getLogger(__name__)

SINK_FILES_KEY = "sink_files"
#: Manifest key: the input files (``config.py``, ``args.yaml``, the command's ``config.yaml``) the experiment wrote.
INPUT_FILES_KEY = "input_files"
"""The manifest's list of the files in the experiment directory its JSONL and CSV sinks write (relative paths)."""


class Experiment:
    """The runs of one experiment directory (or of none), and how each ended.

    The manifest (``manifest.json``) lists every run (numbered from 1) with its seed and
    status: ``pending`` (not started), ``running`` (handed to an executor), then how it
    ended: ``finished``, ``failed`` or ``interrupted`` (started, then cut off by Ctrl-C, an
    error in this process, or this process's death). It is rewritten atomically as each run
    starts and as each ends, so a killed experiment's manifest says which runs were under
    way; readers report those as ``interrupted`` once the experiment's lock is free (see
    :mod:`online_trainer.experiment.ownership`), and a sweep does them again.

    Args:
        exp_dir: the directory, or None to keep everything in memory.
        manifest: the manifest; its ``runs`` entries are updated in place.
        specs: the runs to execute now (runs already finished are not among them).
    """

    def __init__(self, exp_dir: Path | None, manifest: dict[str, Any], specs: list[RunSpec]) -> None:
        self.exp_dir, self.manifest, self.specs = exp_dir, manifest, specs
        self.results: dict[int, RunResult] = {}
        self._kept_under_way: set[int] = set()
        self.setup_failed: int | None = None
        """The run of this experiment that failed before its first env step, stopping every run (None: none)."""
        # its error, for its entry in a new experiment that is kept (R16: it said only pending); a resumed experiment's
        # manifest is put back as this call found it
        self._setup_error = ""
        if exp_dir is not None and exp_dir.is_dir():
            storage.remove_abandoned_temporaries(exp_dir)
        self._earlier = (
            set(storage.existing_experiment_files(exp_dir)) if exp_dir is not None and exp_dir.is_dir() else set()
        )
        manifest_file = None if exp_dir is None else exp_dir / storage.MANIFEST_FILE
        # the manifest as this call found it (a resumed experiment's), for discard(): bytes, exactly
        self._found = manifest_file.read_bytes() if manifest_file is not None and manifest_file.is_file() else None
        # an earlier experiment's (its Slurm jobs'), left in place when overwrite=True sets that experiment aside
        self._manifest_lock_found = exp_dir is not None and (exp_dir / job_results.MANIFEST_LOCK_FILE).exists()
        self._jobs: set[str] = set()  # the Slurm jobs this call submitted: only their entries on disk are theirs
        if specs or exp_dir is None or not (exp_dir / storage.MANIFEST_FILE).is_file():
            self._write()  # with nothing to do (a finished experiment resumed), nothing is written

    @staticmethod
    def new_manifest(num_runs: int, seed_offset: int | None, base_seed: int, fields: dict[str, Any]) -> dict[str, Any]:
        """A manifest whose runs are all pending."""
        seeds = [seeding.run_seed(base_seed, run) for run in range(1, num_runs + 1)]
        return {
            "format": 2,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "created_at": time.time(),  # exactly: what a shared sink file held before it is another experiment's
            "num_runs": num_runs,
            "seed_offset": seed_offset,
            "base_seed": base_seed,
            "seed_stride": seeding.SEED_STRIDE,
            "seeds": seeds,
            **fields,
            # every key of an ended run's entry, null until the run ends, so readers of the raw JSON find them
            "runs": [
                {
                    "run": run,
                    "seed": seed,
                    "status": "pending",
                    "episodes": None,
                    "global_step": None,
                    "wall_time": None,
                    "sps": None,
                    "stop_reason": None,
                    "error": None,
                }
                for run, seed in enumerate(seeds, start=1)
            ],
        }

    def _write(self) -> None:
        if self.exp_dir is None:
            return
        if not any(SLURM_JOB_KEY in entry for entry in self.manifest["runs"]):
            storage.write_manifest(self.exp_dir, self.manifest)
            return
        with manifest_lock(self.exp_dir):  # Slurm jobs record their own runs' ends: keep what they wrote
            on_disk = read_manifest_quietly(self.exp_dir)
            for entry, written in zip(self.manifest["runs"], on_disk.get("runs", [])):
                # not (yet) in a job of this call: a job of an earlier call recorded nothing this call must take (a
                # resumed run's resumed_from, set at planning, is this call's)
                if entry.get(SLURM_JOB_KEY) not in self._jobs or written.get(SLURM_JOB_KEY) != entry[SLURM_JOB_KEY]:
                    continue
                if entry["status"] == ownership.RUNNING and written.get("status") not in (
                    None,
                    ownership.RUNNING,
                    "pending",
                ):
                    entry.update(written)  # its job recorded its end
                elif "resumed_from" in written:  # where its job continued the run after Slurm restarted it
                    entry["resumed_from"] = written["resumed_from"]
                else:  # restarted from its first step (or never restarted: then neither has it)
                    entry.pop("resumed_from", None)
            storage.write_manifest(self.exp_dir, self.manifest)

    @property
    def resumed(self) -> bool:
        """Whether this call continues an experiment it found on disk."""
        return self._found is not None

    def on_submitted(self, spec: RunSpec, job_id: str) -> None:
        """Record the Slurm job a run was handed to (``slurm_job`` in its entry); the job records how it ends."""
        self.manifest["runs"][spec.run_idx - 1][SLURM_JOB_KEY] = job_id
        self._jobs.add(job_id)
        self._write()

    def on_start(self, spec: RunSpec) -> None:
        """Record that a run is handed out, before it can write anything (a second hand-out writes nothing)."""
        entry = self.manifest["runs"][spec.run_idx - 1]
        if entry["status"] == ownership.RUNNING:
            return
        entry["status"] = ownership.RUNNING
        entry.pop(SLURM_JOB_KEY, None)  # the job of an earlier call, if any: a new one takes the run
        self._write()

    def on_result(self, result: RunResult) -> None:
        """Record how a run ended.

        Raises:
            RunSetupError: the run failed before its first env step; every run must stop.
        """
        if result.status == "setup_failed":
            self.setup_failed = result.run_idx
            self._setup_error = (
                f"before its first env step (the call stopped): {result.extra.get('exception') or result.error}"
            )
        result.raise_if_setup_failed()
        self.results[result.run_idx] = result
        for name, value in result.env_info.items():
            self.manifest.setdefault(name, value)
        apply_result(self.manifest, result, self.exp_dir)
        try:
            self._write()
        except OSError as exc:  # a full disk: the run's own failure, if any, must not hide behind it
            failure = result.extra.get("exception") or result.error
            if failure and hasattr(exc, "add_note"):  # Python 3.11+
                exc.add_note(
                    f"Run {result.run_idx} (seed {result.seed}) had failed before its end could be recorded: {failure}"
                )
            raise

    def mark_interrupted(self) -> None:
        """Mark the runs that started and did not end as interrupted (Ctrl-C, or an error in the parent).

        Runs not started yet stay ``pending``, and so does a run handed to a Slurm job that never started it (its job
        was queued: it left no progress, records or checkpoint).
        """
        for spec in self.specs:
            entry = self.manifest["runs"][spec.run_idx - 1]
            if spec.run_idx not in self.results and entry["status"] == ownership.RUNNING:
                entry["status"] = ownership.INTERRUPTED
                if self.exp_dir is not None:
                    progress_from_disk(self.exp_dir, entry)
                    if SLURM_JOB_KEY in entry and not self._left_anything(spec.run_idx):
                        entry["status"] = "pending"
                        del entry[SLURM_JOB_KEY]  # its job was cancelled before it began: no job holds it now
                if entry["status"] == ownership.INTERRUPTED and entry["global_step"] is None:
                    # it kept nothing (cut off before its first record or checkpoint): a resume starts it at step 0,
                    # which its counts say (null read as "unknown", tester O15)
                    entry.update(episodes=0, global_step=0)
        try:
            self._write()
        except OSError as exc:  # called while another exception propagates: that one is the news
            logger.error("could not record the interrupted runs in the manifest: %s", exc)

    def _left_anything(self, run: int) -> bool:
        """Whether run ``run`` left progress, records or a full checkpoint in the experiment directory."""
        assert self.exp_dir is not None  # called with an experiment directory only
        return (
            job_results.progress_path(self.exp_dir, run).exists()
            or storage.metrics_path(self.exp_dir, run).is_file()
            or storage.resume_path(self.exp_dir, run).is_file()
        )

    def failures(self) -> list[RunFailure]:
        """The runs that failed, in order, each named as the progress display names it (``lr=0.1 run 1`` in a sweep)."""
        names = {spec.run_idx: spec.name for spec in self.specs}
        return [
            RunFailure(
                r.run_idx,
                r.seed,
                r.extra.get("exception", "?"),
                r.error or "",
                names.get(r.run_idx),
                None if r.records is None else as_records(r.records),
            )
            for r in sorted(self.results.values(), key=lambda r: r.run_idx)
            if r.status == "failed"
        ]

    def kept_runs(self) -> list[int]:
        """The runs that ended in this call and whose records are kept on disk (none without an exp_dir)."""
        if self.exp_dir is None:
            return []
        return sorted(run for run, result in self.results.items() if result.status in COMPLETED)

    def interrupted_runs(self) -> list[int]:
        """After :meth:`discard`: the runs it kept as ``interrupted`` (they were under way), in order."""
        return sorted(self._kept_under_way)

    def first_exception(self) -> BaseException | None:
        """The exception object of the first failed run, when it ran in this process."""
        return next((r.extra.get("exception_object") for r in self.results.values() if r.status == "failed"), None)

    def runs(self, keep_records: bool) -> list[RunRecords | None]:
        """Records per run: from memory for runs done now, from disk for runs done before (or resumed now)."""
        runs: list[RunRecords | None] = []
        for entry in self.manifest["runs"]:
            result = self.results.get(entry["run"])
            if result is not None and result.records is not None and result.status in COMPLETED:
                runs.append(as_records(result.records))
            elif (
                not keep_records
                or result is not None
                and result.status not in COMPLETED
                or (self.manifest.get("call") or {}).get("dump_metrics", True) is False  # done earlier, kept nowhere
            ):
                runs.append(None)
            elif entry["status"] in COMPLETED and self.exp_dir is not None:  # done earlier, or resumed now
                with warnings.catch_warnings(record=True) as said:
                    warnings.simplefilter("always", storage.TruncatedMetricsWarning)
                    records = storage.load_run_metrics(self.exp_dir, entry["run"])
                expected = entry.get("episodes")
                short = isinstance(expected, int) and len(records) < expected
                for warning in said:  # "probably killed while writing" is not so of a run recorded as ended
                    if not (short and issubclass(warning.category, storage.TruncatedMetricsWarning)):
                        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
                if short:
                    logger.error(
                        "%s holds %d of the %d episodes run %d recorded when it %s: the file was cut short or damaged "
                        "since, and all_metrics.pkl and the records returned hold only those. Put back a copy of it, "
                        "remove all_metrics.pkl, and make the same call with resume=True: it writes all_metrics.pkl "
                        "anew.",
                        storage.metrics_path(self.exp_dir, entry["run"]),
                        len(records),
                        expected,
                        entry["run"],
                        entry["status"].replace("_", " "),
                    )
                runs.append(as_records(records))
            else:
                runs.append(None)
        return runs

    def discard(self) -> None:
        """Remove the experiment files this call wrote.

        Used when a run fails before its first env step: nothing was learned, and the user's
        next call, after the fix, must not find an earlier experiment in the way. Files that
        were there before this call (a sweep's finished runs) are kept, and an earlier manifest
        is put back as this call found it, with the runs that ended in this call (a resumed
        experiment's, run one after the other) recorded as they ended. Those runs keep what they
        wrote in this call (their checkpoints, and the sinks' files they share with the others).

        When some run ended in this call (or the experiment was resumed), the runs that were under way as the
        failing one started (a later seed's own error) were stopped as Ctrl-C stops them: they keep what they
        flushed and are recorded ``interrupted``, so that a resume goes on from their full checkpoints and cuts the
        sinks' files back to them (F13: their records were removed and their points left in the shared sinks'
        files, which the resume then held twice).
        """
        if self.exp_dir is None:
            return
        ended = {run for run, result in self.results.items() if result.status in COMPLETED}
        under_way = {
            spec.run_idx
            for spec in self.specs
            if spec.run_idx not in self.results
            and spec.run_idx != self.setup_failed
            and self.manifest["runs"][spec.run_idx - 1]["status"] == ownership.RUNNING
        }
        if not ended and self._found is None:  # a new experiment of which nothing ended: nothing is kept
            under_way = set()
        if self._found is not None:  # runs this call added (more seeds than the earlier calls'): the manifest put
            known = len(json.loads(self._found)["runs"])  # back has no entry for them, and they keep nothing (N19)
            ended = {run for run in ended if run <= known}
            under_way = {run for run in under_way if run <= known}
        self._kept_under_way = under_way
        for path in set(storage.existing_experiment_files(self.exp_dir)) - self._earlier:
            run = _run_of(path.name)
            if run in under_way or ended and (run is None or run in ended):  # its files, and the sinks' it shares
                continue
            if path.is_dir():  # this call's own: MLflow's artifacts, W&B's files, its Slurm jobs' scripts and logs
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        if not (self.exp_dir / storage.MANIFEST_FILE).is_file() and not self._manifest_lock_found:
            (self.exp_dir / job_results.MANIFEST_LOCK_FILE).unlink(missing_ok=True)
        if self._found is not None:  # an earlier manifest (a resumed experiment): as this call found it, but for
            found = json.loads(self._found)  # the runs that ended in this call (their outputs are those of their end)
            for run in ended:
                apply_result(found, self.results[run])
            for run in under_way:  # one that was pending and wrote now: it goes on from what it wrote
                if found["runs"][run - 1]["status"] == "pending" and self._left_anything(run):
                    found["runs"][run - 1]["status"] = ownership.INTERRUPTED
                    progress_from_disk(self.exp_dir, found["runs"][run - 1])
            storage.write_manifest(self.exp_dir, found)
        elif ended and (self.exp_dir / storage.MANIFEST_FILE).is_file():  # a new experiment that keeps those runs:
            manifest = storage.read_manifest(self.exp_dir)  # the others, stopped before their first step, are to do
            for entry in manifest["runs"]:
                if entry["run"] in under_way:
                    entry["status"] = ownership.INTERRUPTED
                    progress_from_disk(self.exp_dir, entry)
                elif entry["run"] not in ended and entry["status"] == "running":
                    entry["status"] = "pending"
                if entry["run"] == self.setup_failed:  # pending, and why: `show` lists it with its error
                    entry["error"] = self._setup_error
            storage.write_manifest(self.exp_dir, manifest)

    def evaluations(self) -> list[list[dict[str, Any]] | None]:
        """The evaluation records of every run: from memory for runs done now, from ``eval_run{i}.pkl`` for runs
        done in an earlier call (None for runs without evaluations, or that did not complete)."""
        evaluations: list[list[dict[str, Any]] | None] = []
        for entry in self.manifest["runs"]:
            result = self.results.get(entry["run"])
            kept = None if result is None else getattr(result, "evaluations", None)
            path = None if self.exp_dir is None else storage.evaluations_path(self.exp_dir, entry["run"])
            if kept is None and result is None and entry["status"] in COMPLETED and path is not None and path.is_file():
                kept = [record for chunk in storage.iter_metrics_chunks(path) for record in chunk]
            evaluations.append(kept)
        return evaluations

    def agents(self) -> list[Any]:
        """The final agent of every run done now (None for runs that failed, or ran in an earlier call: load
        one of those with :func:`online_trainer.load_agent`)."""
        return [getattr(self.results.get(entry["run"]), "agent", None) for entry in self.manifest["runs"]]

    def write_all_metrics(self, runs: list[RunRecords | None]) -> None:
        """Write ``all_metrics.pkl`` (the list of runs) atomically, unless no run was done now and it is there.

        Runs done here are written from their tables: the metrics chunks they kept, or their columns.
        """
        if self.exp_dir is None or not (self.specs or not (self.exp_dir / storage.ALL_METRICS_FILE).is_file()):
            return
        # the last of an experiment's Slurm jobs writes it too, under the manifest's lock (see record_job_result)
        lock = (self.exp_dir / job_results.MANIFEST_LOCK_FILE).exists()
        with job_results.manifest_lock(self.exp_dir) if lock else contextlib.nullcontext():
            tables = [getattr(self.results.get(entry["run"]), "records", None) for entry in self.manifest["runs"]]
            forms: list[Any] = []
            for entry, table, run in zip(self.manifest["runs"], tables, runs):
                chunks = None
                if not isinstance(table, EpisodeTable) and run is not None:  # read back from its stream: its own
                    # chunks, whole (pickled again from its dicts, it took 4 times the bytes: tester F3)
                    chunks = storage.stream_chunks(storage.metrics_path(self.exp_dir, entry["run"]), len(run))
                forms.append(
                    table if isinstance(table, EpisodeTable) else run if chunks is None else chunks_form(chunks)
                )
            storage.write_all_metrics(self.exp_dir, forms)
            for table in tables:
                if isinstance(table, EpisodeTable):
                    table.release_chunks()  # written: the memory goes back


def remove_created(created: Sequence[Path]) -> None:
    """Remove files and (empty) directories a call created, deepest first."""
    for path in sorted(created, key=lambda p: len(p.parts), reverse=True):
        if path.is_dir():
            with contextlib.suppress(OSError):
                path.rmdir()  # only when empty
        else:
            path.unlink(missing_ok=True)


def refuse_a_sweep(exp_dir: Path | None, what: str) -> None:
    """Refuse ``what`` (``"multi_run"``, ``"multi_run(resume=True)"``) in a sweep's directory, whatever its options: it
    would write one experiment among the sweep's configurations, or set aside part of the sweep. This only reads.

    Raises:
        ExperimentExistsError: ``exp_dir`` holds a sweep.
    """
    if exp_dir is None or not (exp_dir / storage.SWEEP_FILE).is_file():
        return
    configurations = sorted(p.name for p in exp_dir.iterdir() if (p / storage.MANIFEST_FILE).is_file())
    listed = ", ".join(configurations[:4]) + (", ..." if len(configurations) > 4 else "")
    raise ExperimentExistsError(
        f"exp_dir={os.fspath(exp_dir)!r} holds a sweep ({storage.SWEEP_FILE}; configurations: {listed or 'none yet'}), "
        f"not one experiment: {what} there would mix one experiment into it. Give {what} another exp_dir; to go on "
        "with the sweep, call sweep(..., resume=True) with its grid.",
        exp_dir,
        [exp_dir / storage.SWEEP_FILE],
        [],
    )


def refuse_a_sweep_configuration(exp_dir: Path | None, what: str) -> None:
    """Refuse ``what`` (``"multi_run"``) in a configuration's directory of a sweep (its parent holds ``sweep.json``,
    it holds ``hyperparameters.yaml``), whatever its options: the experiment would be listed, and ranked, among the
    sweep's configurations under hyperparameters it did not run with. This only reads.

    Raises:
        ExperimentExistsError: ``exp_dir`` is a sweep's configuration.
    """
    if exp_dir is None or not (exp_dir.parent / storage.SWEEP_FILE).is_file():
        return
    hyperparameters = exp_dir / storage.HYPERPARAMETERS_FILE
    if not hyperparameters.is_file():
        return
    sweep = os.fspath(exp_dir.parent)
    raise ExperimentExistsError(
        f"exp_dir={os.fspath(exp_dir)!r} is configuration {exp_dir.name!r} of the sweep in {sweep!r} (its "
        f"{storage.HYPERPARAMETERS_FILE}): {what} there would put an experiment of other settings among the sweep's "
        f"configurations, under that configuration's hyperparameters. Give {what} an exp_dir outside the sweep; "
        f"to continue the sweep, call sweep(..., resume=True) on {sweep!r} with its grid (a sweep is redone in "
        "another exp_dir).",
        exp_dir,
        [hyperparameters],
        [],
    )


def check_exp_dir(exp_dir: Path, overwrite: bool, inputs: Mapping[str, str | None]) -> None:
    """Refuse an earlier experiment in ``exp_dir`` (unless ``overwrite``); this only reads.

    Args:
        exp_dir: the experiment directory (it may not exist yet).
        overwrite: an earlier experiment will be replaced: nothing is refused.
        inputs: file name -> text of the files that say what produced the experiment
            (``config.py``, ``args.yaml``, the command's ``config.yaml``; None: not given).

    Raises:
        ExperimentExistsError: (a FileExistsError) an earlier experiment is there, or an input file
            is there with other content, and ``overwrite`` is false; it lists both, for callers
            that say it in their own terms (the command's ``overwrite=true``).
    """
    if overwrite:
        return
    earlier, differing = earlier_experiment(exp_dir, inputs)
    if earlier:
        shown = sorted(earlier, key=lambda p: (p.name != storage.MANIFEST_FILE, p.name))  # the telling one first
        names = ", ".join(p.name for p in shown[:4]) + (", ..." if len(shown) > 4 else "")
        unfinished = unfinished_runs(exp_dir)
        raise ExperimentExistsError(
            f"exp_dir={os.fspath(exp_dir)!r} already holds an earlier experiment ({names}): pass "
            "overwrite=True to replace it, or choose another exp_dir."
            if unfinished is None
            else f"exp_dir={os.fspath(exp_dir)!r} already holds an experiment whose runs did not all end "
            f"({unfinished[0]} of {unfinished[1]} did; {names}): make the same call with resume=True to continue it, "
            "or pass overwrite=True to replace it (its records and checkpoints are deleted), or choose another "
            "exp_dir.",
            exp_dir,
            earlier,
            differing,
        )
    if differing:
        raise ExperimentExistsError(
            f"{differing[0]} already exists with other content: pass overwrite=True or another exp_dir.",
            exp_dir,
            earlier,
            differing,
        )


def ended_runs(exp_dir: Path) -> tuple[int, int] | None:
    """``(runs that ended, runs)`` of the experiment in ``exp_dir``; None when none is there or its manifest cannot
    be read."""
    try:
        runs = storage.read_manifest(exp_dir)["runs"]
        return sum(run["status"] in COMPLETED for run in runs), len(runs)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unfinished_runs(exp_dir: Path) -> tuple[int, int] | None:
    """``(runs that ended, runs)`` of the experiment in ``exp_dir`` when some did not end (cut off: killed,
    preempted, Ctrl-C); None when none is there, its manifest cannot be read, or every run ended."""
    counts = ended_runs(exp_dir)
    return counts if counts is not None and counts[0] < counts[1] else None


def how_to_continue(exp_dir: str | os.PathLike) -> str:
    """How to continue the experiment in ``exp_dir``: the command for one ``online-trainer run`` made (it has a
    ``config.yaml``), else the Python call (the command cannot rebuild an env or agent made in code)."""
    if (Path(exp_dir) / storage.CONFIG_YAML).is_file():
        return f"online-trainer resume {shlex.quote(os.fspath(exp_dir))}"
    return "the call that made it again, with resume=True (it was made from Python, not by `online-trainer run`)"


def earlier_experiment(exp_dir: Path, inputs: Mapping[str, str | None]) -> tuple[list[Path], list[Path]]:
    """What a new experiment in ``exp_dir`` would replace: the files of an earlier experiment, and the input
    files (name -> text, as in :func:`check_exp_dir`) there with other content. This only reads."""
    if not exp_dir.is_dir():
        return [], []
    differing = [
        exp_dir / name
        for name, text in inputs.items()
        if text is not None and (exp_dir / name).is_file() and (exp_dir / name).read_text(encoding="utf-8") != text
    ]
    return storage.existing_experiment_files(exp_dir), differing


@contextlib.contextmanager
def hold_exp_dir(
    exp_dir: Path | None,
    overwrite: bool,
    inputs: Mapping[str, str | None],
    refuse: Callable[[], object] | None = None,
) -> Iterator[list[Path]]:
    """Hold the lock of ``exp_dir`` and prepare it (:func:`prepare_exp_dir`); yield the paths this call created.

    This is the one place where a new experiment's directory is taken, checked, prepared and given
    back (``multi_run``, and through it the command ``online-trainer run``). An earlier experiment
    is refused (:func:`check_exp_dir`) under the lock and before anything is written, so a refused
    call changes nothing on disk, the earlier experiment's ``.lock`` included. When the call ends
    in an error while ``exp_dir`` holds no experiment (the inputs could not be written, a run failed
    before its first env step, Ctrl-C before any run started), what the call created is removed,
    the input files and the directories included. With ``overwrite``, the earlier experiment and
    its input files are only set aside (:func:`set_aside`) until the call ends: they are removed
    then, unless the call left no experiment in ``exp_dir`` (a run failed before its first env step,
    as with actions of the wrong shape, and every output of the call was removed), in which case
    they are put back byte for byte (:func:`settle_set_aside`).
    Without an ``exp_dir`` there is nothing to lock or write. ``refuse``: called under the lock
    before anything else, what it raises refuses the call (the caller's own conditions: an
    earlier experiment's live Slurm jobs, before ``overwrite``).
    """
    if exp_dir is None:
        yield []
        return

    # a sweep's folders, read before the lock: a configuration's folder has no .lock of its own, and taking the
    # lock there to refuse would create one and remove it, changing the folder's modification time (H12)
    refuse_a_sweep(exp_dir, "multi_run")
    refuse_a_sweep_configuration(exp_dir, "multi_run")

    def check() -> None:
        if refuse is not None:
            refuse()
        settle_set_aside(
            exp_dir, cut_off=True
        )  # left by a call that was killed: put back, unless its runs left results
        check_exp_dir(exp_dir, overwrite, inputs)

    with hold_lock(exp_dir, check=check) as created:
        try:
            created += prepare_exp_dir(exp_dir, overwrite, inputs)
            yield created
        except BaseException:
            if not storage.existing_experiment_files(exp_dir):
                remove_created(created)  # no run started: leave no trace for the corrected call
            raise
        finally:
            settle_set_aside(exp_dir)


def prepare_exp_dir(exp_dir: Path, overwrite: bool, inputs: Mapping[str, str | None]) -> list[Path]:
    """Refuse an earlier experiment in ``exp_dir`` (unless ``overwrite``), then write ``inputs``.

    Args:
        exp_dir: the experiment directory (created if missing).
        overwrite: set the files of an earlier experiment aside (:func:`set_aside`) instead of refusing.
        inputs: file name -> text of the files that say what produced the experiment
            (``config.py``, ``args.yaml``, the command's ``config.yaml``; None: not given).

    Returns:
        The files this call created, so that they can be removed if no run starts.

    Raises:
        FileExistsError: an earlier experiment is there and ``overwrite`` is false, or an
            input file is there with other content.
        OSError: naming the input file that could not be written (a full disk); the inputs
            this call wrote before it are removed, and what was set aside is put back.
    """
    check_exp_dir(exp_dir, overwrite, inputs)  # every input checked before any is written
    if overwrite and exp_dir.is_dir():
        set_aside(
            exp_dir,
            [
                *storage.existing_experiment_files(exp_dir),
                # the command's config.yaml too when a Python call replaces its experiment (it stayed, S14)
                *(
                    exp_dir / name
                    for name in dict.fromkeys([*inputs, *storage.INPUT_FILES])
                    if (exp_dir / name).is_file()
                ),
                *storage.sink_lock_files(exp_dir),  # hidden, and of the earlier experiment's sinks (V15)
            ],
        )
    created: list[Path] = []
    exp_dir.mkdir(parents=True, exist_ok=True)
    try:
        for name, text in inputs.items():
            if text is not None and not (exp_dir / name).exists():
                storage.write_text_once(exp_dir / name, text)
                created.append(exp_dir / name)
    except BaseException:
        remove_created(created)  # a full disk at args.yaml leaves no config.py of a call that did not run
        settle_set_aside(exp_dir)
        raise
    return created


def set_aside(exp_dir: Path, paths: Sequence[Path]) -> None:
    """Move ``paths`` (files and directories of ``exp_dir``) into ``exp_dir/.replaced/`` (``overwrite=True``).

    Nothing is deleted before the call that replaces them has passed every check its runs make
    before their first env step: :func:`settle_set_aside` removes them, or puts them back.
    """
    if not paths:
        return
    moving = exp_dir / storage.SETTING_ASIDE_DIR
    moving.mkdir()
    for path in paths:
        os.replace(path, moving / path.name)
    os.replace(moving, exp_dir / storage.SET_ASIDE_DIR)  # all there: from now on, what exp_dir holds is the call's
    logger.info(
        "overwrite=True: set aside %d files of an earlier experiment in %s (removed when this call ends, "
        "put back if no run gets past its first env step)",
        len(paths),
        exp_dir,
    )


def set_aside_here(exp_dir: Path) -> Path | None:
    """The folder in which an ``overwrite=True`` call that was cut off left an earlier experiment (``.replacing/``
    while it moved its files, ``.replaced/`` once it had), or None."""
    for name in (storage.SETTING_ASIDE_DIR, storage.SET_ASIDE_DIR):
        if (exp_dir / name).is_dir():
            return exp_dir / name
    return None


def settle_set_aside(exp_dir: Path, cut_off: bool = False) -> None:
    """Remove what :func:`set_aside` moved, or put it back when ``exp_dir`` holds no experiment (no run started).

    The caller holds the experiment's lock.

    Args:
        exp_dir: the experiment directory.
        cut_off: the call that set the files aside was killed (a later call finds them): it may have left its
            manifest, and streams or sink files with nothing in them, but no run of it left a record, an
            evaluation or a checkpoint. Then nothing of it is worth keeping: its files are removed and the
            earlier experiment is put back.
    """
    moving = exp_dir / storage.SETTING_ASIDE_DIR
    if moving.is_dir():  # killed while it moved them: what it moved and what it had not are the earlier experiment
        for path in moving.iterdir():
            os.replace(path, exp_dir / path.name)
        moving.rmdir()
        logger.warning(
            "exp_dir %s: a call that was to replace the experiment (overwrite) was killed as it set it aside: put back",
            exp_dir,
        )
    aside = exp_dir / storage.SET_ASIDE_DIR
    if not aside.is_dir():
        return
    left = storage.existing_experiment_files(exp_dir)
    if left and not (cut_off and not _left_results(left)):
        kept = _put_back_foreign(aside, exp_dir)
        shutil.rmtree(aside)
        if cut_off:  # a later call finishing what a killed one began: said (F21)
            logger.warning(
                "exp_dir %s: removed the earlier experiment, set aside by a call with overwrite that was killed after "
                "its runs started",
                exp_dir,
            )
        else:  # the end of a call with overwrite=True
            logger.info("overwrite=True: removed the earlier experiment in %s", exp_dir)
        if kept:
            logger.warning(
                "overwrite=True: %d file(s) in %s have the names of an experiment's files but the earlier "
                "experiment's manifest does not show it wrote them: kept (%s). Move them out of the experiment "
                "directory if they are not part of it.",
                len(kept),
                exp_dir,
                ", ".join(kept),
            )
        return
    for path in left:  # the cut-off call's own (its manifest, empty streams): the earlier experiment's are aside
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    for path in aside.iterdir():
        os.replace(path, exp_dir / path.name)  # over an input file the call wrote, if any
    aside.rmdir()
    if cut_off:  # a later call puts back what a killed one had set aside: said, not only logged at info (F21)
        logger.warning(
            "exp_dir %s: a call with overwrite was killed before any of its runs started: the earlier experiment it "
            "had set aside is put back as it was",
            exp_dir,
        )
    else:
        logger.info("overwrite=True: no run started, so the earlier experiment in %s was put back as it was", exp_dir)


# TensorBoard's own naming of event files (events.out.tfevents.{unix time}.{host}...): the sink's, an agent's own
_EVENT_FILE = re.compile(r"events\.out\.tfevents\.\d{9,}\..+")


def _put_back_foreign(aside: Path, exp_dir: Path) -> list[str]:
    """Move back into ``exp_dir`` what ``overwrite=True`` set aside that the earlier experiment did not write (a
    user's ``notes.jsonl``, ``Run5_S1.pkl`` beside an experiment of 2 runs: they were deleted with it, tester F16);
    return the names they have now (``NAME.before-overwrite`` where this call wrote a file of that name)."""
    try:
        earlier = json.loads((aside / storage.MANIFEST_FILE).read_text())
        if not isinstance(earlier, dict):
            raise ValueError
    except (OSError, ValueError):  # no manifest (a legacy experiment): what it wrote is unknown
        earlier = None
    kept = []
    for path in sorted(aside.iterdir()):
        if _written_by_experiment(path, earlier):
            continue
        target = exp_dir / path.name
        if target.exists():
            target = exp_dir / f"{path.name}.before-overwrite"
        if not target.exists():
            os.replace(path, target)
            kept.append(target.name)
    return kept


def _written_by_experiment(path: Path, manifest: dict[str, Any] | None) -> bool:
    """Whether ``path``, set aside by ``overwrite=True`` for its name, is the experiment's of ``manifest`` (None: a
    legacy experiment, which may have written any such name).

    A run's file must be of a run it had: a periodic checkpoint (``Run{i}_E{n}``, ``Run{i}_S{n}``) at a multiple of
    its ``checkpoint_freq``, an ``eval_run{i}.pkl`` of an experiment that evaluated. A sink's file is one the
    manifest names (``sink_files``); in a manifest of a version before it, one whose first line is a sink's (a JSONL
    sink's objects have a ``tag`` and a ``step``; a CSV sink's header). ``Run{i}_Last*`` and ``Run{i}_Best*`` are
    written with a ``checkpoint_freq`` only. An input file (``config.py``) is one the manifest names
    (``input_files``; kept when there is no manifest). An event file is told by TensorBoard's naming. Every other
    name is the experiment's.
    """
    name = path.name
    run = _run_of(name)
    if run is not None:
        if manifest is None:
            return True
        num_runs, call = manifest.get("num_runs"), manifest.get("call")
        call = call if isinstance(call, dict) else {}
        if not isinstance(num_runs, int) or not 1 <= run <= num_runs:
            return not isinstance(num_runs, int)
        periodic = re.match(r"Run\d+_[ES](\d+)(?![0-9])", name)
        freq = call.get("checkpoint_freq", "unknown")
        if periodic is not None and freq != "unknown":
            return isinstance(freq, int) and freq > 0 and int(periodic.group(1)) % freq == 0
        if freq is None and re.match(r"Run\d+_(?:Last|Best)", name):  # written with checkpoint_freq only (M22)
            return False
        if name.startswith("eval_run") and "evaluation" in call:
            return bool(call["evaluation"])
        return True
    if name in storage.INPUT_FILES and (manifest is None or isinstance(manifest.get(INPUT_FILES_KEY), list)):
        # a user's own config.py beside a call without config= (M22); with no manifest, nothing says it is not theirs
        return manifest is not None and name in manifest[INPUT_FILES_KEY]
    if name.startswith("events.out.tfevents."):
        return name == LAYOUT_FILE or _EVENT_FILE.fullmatch(name) is not None
    listed = manifest.get(SINK_FILES_KEY) if manifest is not None else None
    if path.suffix in (".jsonl", ".csv") and isinstance(listed, list):  # a user's copy of the sink's file is not (F17)
        return name in listed
    if path.suffix in (".jsonl", ".csv") and path.is_file():
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                first = f.readline(1 << 16).strip()
        except OSError:
            return True
        if not first:  # created empty by a sink that had nothing to write yet
            return True
        if path.suffix == ".csv":
            return first.split(",")[:7] == list(CSV_COLUMNS[:7])
        try:
            line = json.loads(first)
        except ValueError:
            return False
        return isinstance(line, dict) and "tag" in line and "step" in line
    return True


def _left_results(paths: Sequence[Path]) -> bool:
    """Whether ``paths`` (an experiment's files) hold a result of a run: records, an evaluation, a checkpoint."""
    for path in paths:
        name = path.name
        if name.startswith("metrics_run"):
            if path.stat().st_size > 0:
                return True
        elif name == storage.ALL_METRICS_FILE or name.startswith(("eval_run", "Run")):
            return True
    return False


_RUN_FILE = re.compile(r"^(?:Run(\d+)_|(?:metrics|eval)_run(\d+)\.pkl$)")


def _run_of(name: str) -> int | None:
    """The run a file of the experiment belongs to (``Run3_E10.pt``, ``metrics_run3.pkl``: 3), or None (shared)."""
    match = _RUN_FILE.match(name)
    return None if match is None else int(match.group(1) or match.group(2))


def created_at(manifest: Mapping[str, Any]) -> float | None:
    """The Unix time the experiment was created: exact in manifests of this version (``created_at``), to the second
    in earlier ones (``created``), None when neither says."""
    exact = manifest.get("created_at")
    if isinstance(exact, (int, float)) and not isinstance(exact, bool):
        return float(exact)
    try:
        return datetime.datetime.fromisoformat(str(manifest["created"])).timestamp()
    except (KeyError, ValueError):
        return None
