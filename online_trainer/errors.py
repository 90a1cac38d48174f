"""Errors the trainer raises besides the built-in ValueError, TypeError and FileExistsError."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ValueTypeError(TypeError, ValueError):
    """A value of the wrong type for its argument (``num_runs="3"``, ``resume="yes"``): a ``TypeError``, as Python's
    convention has it, and a ``ValueError``, as the first releases raised for every bad value, so that code catching
    either keeps working. A value of the right type out of its range (``num_runs=0``) raises a plain ``ValueError``."""


def value_error(value: Any, expected: type | tuple[type, ...]) -> type[ValueError]:
    """The error to raise for a refused ``value``: :class:`ValueTypeError` when it is not an ``expected`` type (a
    bool never counts as an int), else ``ValueError`` (the right type, out of range or not among the choices)."""
    if isinstance(value, bool) and bool not in (expected if isinstance(expected, tuple) else (expected,)):
        return ValueTypeError
    return ValueError if isinstance(value, expected) else ValueTypeError


class RunFailure:
    """How one run failed: its index, seed, exception and the end of its traceback.

    Attributes:
        name: how messages name the run: ``run 1``, or ``lr=0.1 run 1`` in a sweep (where every
            configuration has a run 1).
        records: with ``exp_dir=None``, the run's episode records up to its failure (a
            :class:`~online_trainer.records.record_view.RunRecords`, as ``multi_run`` returns for a
            run that completed); None otherwise: with an ``exp_dir`` they are on disk.
    """

    def __init__(
        self, run_idx: int, seed: int, exception: str, traceback: str, name: str | None = None, records: Any = None
    ) -> None:
        """``run_idx`` is the run's number, from 1; ``name`` defaults to ``run {run_idx}``."""
        self.run_idx, self.seed, self.exception, self.traceback = run_idx, seed, exception, traceback
        self.name = name or f"run {run_idx}"
        self.records = records

    def tail(self, lines: int = 6) -> str:
        """The end of the traceback: its last ``lines`` lines, and the lines before them back to the start of the frame
        they begin in (cut at a fixed count, it began mid-frame, with a bare ``^^^^`` marker line)."""
        kept = self.traceback.rstrip().splitlines()
        start = max(len(kept) - lines, 0)
        while start > 0 and not kept[start].lstrip().startswith('File "'):  # back to the frame's first line
            start -= 1
        return "\n".join(kept[start:])

    def __repr__(self) -> str:
        return f"RunFailure(run_idx={self.run_idx}, seed={self.seed}, exception={self.exception!r})"


class RunsFailedError(RuntimeError):
    """One or more runs of a ``multi_run`` raised; the other runs completed.

    Attributes:
        failures: one :class:`RunFailure` per failed run.
        results: from ``multi_run``, the records of every run that completed, ``None`` for the failed ones;
            from ``sweep``, its ranking of the configurations that have a score (as it returns; ``None`` when
            none has), the failed runs left out of it.
    """

    def __init__(
        self,
        failures: Sequence[RunFailure],
        results: Any = None,
        on_disk: bool = True,
        continuing: str | None = None,
    ) -> None:
        """``on_disk``: the runs wrote their records into an experiment directory (False: ``exp_dir`` None).
        ``continuing``: the call that runs the failed runs again once their cause is fixed (``"the same call with
        resume=True"``), said after them; None when there is none (the command says its own)."""
        self.failures = list(failures)
        self.results = results
        kept = (
            "the records of each up to its failure are on disk."
            if on_disk
            else "with exp_dir=None the records of each up to its failure are in this error's failures[k].records, "
            "those of the runs that completed in its results."
        )
        parts = [f"{len(self.failures)} run(s) failed; {kept}"]
        for failure in self.failures:
            line = f"  {failure.name} (seed {failure.seed}): {failure.exception}"
            more = failure.traceback.strip()
            if more.startswith(failure.exception):  # a summary, then what it adds (a Slurm job's log): not twice
                more = more[len(failure.exception) :].strip()
            if more:
                line += "\n" + "\n".join("    " + text for text in RunFailure(0, 0, "", more).tail().splitlines())
            parts.append(line)
        self.summary = "\n".join(parts)
        """The message without the call that continues: the failed runs and their errors."""
        then = ""
        if on_disk and continuing:
            then = (
                f"\nOnce the cause is fixed, {continuing} runs the failed runs again (each from its latest full "
                "checkpoint, or from its first step) and keeps the runs that ended."
            )
        super().__init__(self.summary + then)


class SlurmSubmissionError(ValueError):
    """``sbatch`` refused a call's jobs (a partition, a time limit, a resource or an option the cluster does not
    take): nothing was submitted, and the call keeps nothing on disk."""


class RunSetupError(Exception):
    """A run failed before its first env step: building, checking or seeding its env and agent.

    Executors stop every run at the first such error, and ``multi_run`` raises the original
    exception (``cause``), not one copy of it per run.

    Attributes:
        run_idx: the run's number (from 1).
        seed: the run's seed.
        cause: the exception raised.
    """

    def __init__(self, run_idx: int, seed: int, cause: BaseException) -> None:
        super().__init__(run_idx, seed, cause)
        self.run_idx, self.seed, self.cause = run_idx, seed, cause

    def __str__(self) -> str:
        return (
            f"run {self.run_idx} (seed {self.seed}) failed before its first env step: "
            f"{type(self.cause).__name__}: {self.cause}"
        )


class ExperimentInUseError(RuntimeError):
    """Another live call is writing into the experiment directory (it holds its lock), or Slurm jobs of the
    experiment are still queued or running (before ``resume=True`` or ``overwrite=True``)."""


class ExperimentExistsError(FileExistsError):
    """The experiment directory holds an earlier experiment, or an input file (``config.py``, ``args.yaml``)
    with other content, and ``overwrite`` is false; nothing was written.

    Attributes:
        exp_dir: the directory.
        earlier: the files of the earlier experiment (empty when only input files are in the way).
        differing: the input files there with other content.
    """

    def __init__(self, message: str, exp_dir: Path, earlier: Sequence[Path], differing: Sequence[Path]) -> None:
        super().__init__(message)
        self.exp_dir, self.earlier, self.differing = exp_dir, list(earlier), list(differing)


class Preempted(KeyboardInterrupt):
    """A run wrote a full checkpoint on a preemption signal (SIGTERM, SIGUSR1) and stopped: it is ``interrupted``,
    and resuming continues it from there.

    ``multi_run`` raises it once the other runs have stopped too (their own checkpoints written). It is a
    ``KeyboardInterrupt``, so ``except Exception`` blocks let it through; a script that does not catch it ends
    with its traceback and exit status 1 (Python gives 130 to a bare ``KeyboardInterrupt`` only). Catch it to
    leave with the status a scheduler's wrapper expects::

        try:
            trainer.multi_run(5, total_steps=1_000_000, checkpoint_freq=50_000)
        except Preempted:
            sys.exit(143)  # the scheduler requeues; the next start calls multi_run(..., resume=True)

    A run that cannot write a full checkpoint (a call without ``exp_dir``, an agent without ``save()`` and
    ``load()``, a run that does not train) stops at once too, without one (``checkpointed`` is False): a resume
    starts it again from step 0.

    Args:
        run_idx: the run that stopped (None: the call's runs; the signal came between runs).
        global_step: the run's env steps when it stopped.
        checkpointed: whether the run wrote a full checkpoint before it stopped.
        why: why it could not (when ``checkpointed`` is False).
        on_disk: whether the call has an experiment directory to resume from.
        others: the call's other runs the signal stopped, as ``(run_idx, global_step, checkpointed)``, or with the
            run's name last (``lr=0.1 run 2`` in a sweep).
        name: the run's name where ``run {run_idx}`` does not say which it is (``lr=0.1 run 2`` in a sweep).
    """

    def __init__(
        self,
        run_idx: int | None = None,
        global_step: int | None = None,
        checkpointed: bool = True,
        why: str = "",
        on_disk: bool = True,
        others: Sequence[tuple[Any, ...]] = (),
        name: str | None = None,
    ) -> None:
        self.run_idx, self.global_step, self.checkpointed, self.why = run_idx, global_step, checkpointed, why
        self.name = name or (None if run_idx is None else f"run {run_idx}")
        self.others = [tuple(other) for other in others]
        self._arguments = (run_idx, global_step, checkpointed, why, on_disk, self.others, name)
        if run_idx is None:
            where = ""
        elif checkpointed:
            where = f": {self.name} saved a full checkpoint at step {global_step}"
        else:
            where = f": {self.name} stopped at step {global_step} without a full checkpoint ({why})"
        for other in self.others:
            other_name = other[3] if len(other) > 3 and other[3] else f"run {other[0]}"
            where += f"; {other_name} {'saved one' if other[2] else 'stopped without one'} at step {other[1]}"
        if not on_disk:
            then = "; the call has no exp_dir, so nothing of it is kept"
        elif checkpointed:
            then = (
                "; continue with the same call and resume=True (an experiment made by `online-trainer run`: "
                "`online-trainer resume EXP_DIR`)"
            )
        else:
            then = (
                "; the same call with resume=True keeps the runs that finished and starts this one again from step 0 "
                "(an experiment made by `online-trainer run`: `online-trainer resume EXP_DIR`)"
            )
        super().__init__(f"preempted (SIGTERM or SIGUSR1){where}{then}")

    def __reduce__(self) -> tuple[Any, ...]:  # its message is not its arguments
        return type(self), self._arguments

    @classmethod
    def of_runs(cls, stopped: Sequence[Preempted], on_disk: bool) -> Preempted:
        """What a call raises for a preemption: one ``Preempted`` naming every run the signal stopped (``stopped``,
        what each raised), a run that could not be checkpointed first, then in the order of the runs (a sweep's
        configuration, then the run); a plain one when none was stopped (the signal came between runs)."""
        if not stopped:
            return cls(on_disk=on_disk)

        def order(p: Preempted) -> tuple[bool, str, int]:
            return (p.checkpointed, (p.name or "").rpartition("run ")[0], p.run_idx or 0)

        named = [p for p in stopped if p.run_idx is not None]
        first, *rest = sorted(named, key=order) if named else [min(stopped, key=order)]
        if not rest:
            return first
        others = [(p.run_idx, p.global_step, p.checkpointed, p.name) for p in rest]
        return cls(first.run_idx, first.global_step, first.checkpointed, first.why, on_disk, others, first.name)


class ManifestDamagedError(ValueError):
    """An experiment's ``manifest.json`` does not read as one (cut short, overwritten)."""

    def __init__(self, path: Path, cause: Exception) -> None:
        super().__init__(
            f"{path} is damaged ({cause}): it is written whole, in one swap, so something else changed it. Put back a "
            "copy of it; without one, the runs' records (metrics_run{i}.pkl) stay readable with load_run_metrics, "
            "but the experiment cannot be resumed or shown."
        )
