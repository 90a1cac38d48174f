"""From what the user asked to what executes: typed run options, run specs, and their execution.

``multi_run``, ``sweep`` (and through it the Optuna objective), ``evaluate`` and the command
(through ``multi_run``) all go through one path, :func:`run_experiments`; each caller validates
its own input first and adds only what is its own (the plan of its experiments, what it does
with their results)::

    options = RunPlan(total_steps=50_000, checkpoint_freq=10_000)        # validated once

    def plan(created):                                                   # under the lock, workers starting
        manifest, seeds = start_manifest(exp_dir, ..., resume=resume)    # new, or resumed
        specs = plan_runs(parts, options, seeds, exp_dir)
        return [Experiment(exp_dir, manifest, specs)]                    # manifest + results

    outcome = run_experiments(hold_exp_dir(exp_dir, ...), execution, num_runs, plan, parts.callback,
                              finalize=lambda experiments: ...)          # still under the lock

The lock (the ``hold`` context), the worker pool (:func:`~online_trainer.parallel.executors.early_workers`),
the manifests (:class:`~online_trainer.experiment.manifest.Experiment`, which routes each result to
its own), the callback's setup and close, the progress display (inside
:func:`~online_trainer.parallel.executors.execute`) and the clean-up of a call that ran nothing each
live in one place. An *experiment* is one directory's runs; a sweep executes several experiments
(one per configuration) together, in one pool.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from online_trainer.errors import RunSetupError
from online_trainer.experiment import resuming
from online_trainer.experiment.manifest import INPUT_FILES_KEY, SINK_FILES_KEY, Experiment, remove_created
from online_trainer.loop import seeding
from online_trainer.loop.factories import AgentFactory, EnvFactory
from online_trainer.loop.steps import failed_at
from online_trainer.options.derived import call_record
from online_trainer.options.groups import RunPlan
from online_trainer.parallel import execution as base
from online_trainer.parallel import executors
from online_trainer.parallel.execution import ExecutionOptions
from online_trainer.records import storage
from online_trainer.run.builtin import preemption
from online_trainer.run.interrupts import finishing_the_stop, one_stop_per_press
from online_trainer.run.one_run import RunSpec

if TYPE_CHECKING:
    from online_trainer.parallel.workers import WorkerPool

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerParts:
    """What a trainer contributes to every run: its factories, its callback and its mode."""

    env_factory: EnvFactory
    agent_factory: AgentFactory
    callback: Any
    train: bool = True
    eval_env_factory: EnvFactory | None = None
    """The eval env (None: the training env's factory, called once more per run)."""

    def check_travel(self, execution: ExecutionOptions, options: RunPlan | None = None) -> None:
        """Check, without calling anything, that what runs need can be sent to worker processes (with
        ``options``, their callable ``frames_trigger`` and their hooks too)."""
        if execution.in_workers:
            objects = {
                "env": self.env_factory.source,
                "agent": self.agent_factory.source,
                "trainer.call_back": self.callback,
                "eval_env": getattr(self.eval_env_factory, "source", None),
            }
            if options is not None:
                trigger = options.records.frames_trigger
                objects.update({"records.frames_trigger": trigger} if callable(trigger) else {})
                objects.update({"hooks": options.hooks} if options.hooks else {})
            base.check_picklable(objects, execution.backend)

    def copies_agent(self, num_runs: int, execution: ExecutionOptions) -> bool:
        """Whether each run takes a copy of the agent instance (several runs in this process)."""
        if not self.agent_factory.is_instance or execution.in_workers or num_runs == 1:
            return False
        if self.train:
            logger.warning(
                "The agent instance you passed is copied for each of the %d runs and stays as it was: "
                "the trained agents are trainer.agents after multi_run.",
                num_runs,
            )
        return True

    def manifest_fields(self, execution: ExecutionOptions) -> dict[str, Any]:
        """How the runs execute, for the manifest (``num_envs`` and the autoreset mode come from the runs)."""
        return {
            "train": self.train,
            "backend": execution.backend,
            "num_workers": execution.num_workers,
            "torch_threads": execution.torch_threads,
        }


def new_manifest(
    parts: RunnerParts,
    options: RunPlan,
    execution: ExecutionOptions,
    num_runs: int,
    seed_offset: int | None,
    tuning_hp: dict[str, Any] | None,
    exp_dir: Path | None = None,
    input_files: Sequence[str] = (),
) -> dict[str, Any]:
    """The manifest of a new experiment of ``num_runs`` runs (see :meth:`Experiment.new_manifest`).

    Besides how the runs execute and ``tuning_hp``, it records ``score`` when it is not ``"return"``: the
    analysis of the experiment then reads the raw scores (see :mod:`online_trainer.analysis.scores`); and
    ``sink_files``, the files in ``exp_dir`` its line sinks (JSONL, CSV) write: ``overwrite=True`` takes those for
    the experiment's, and no other file of theirs (a user's copy, ``backup_log.jsonl``: F17); and ``input_files``,
    the names of the files in ``input_files`` the call writes (``config.py``, ``args.yaml``): ``overwrite=True``
    keeps a user's own file of such a name beside an experiment that wrote none (M22).
    """
    fields = {
        **parts.manifest_fields(execution),
        "tuning_hp": tuning_hp,
        resuming.CALL_KEY: call_record(options, tuning_hp, parts.train),
    }
    if exp_dir is not None:
        fields[SINK_FILES_KEY] = sink_files(parts.callback, exp_dir)
        fields[INPUT_FILES_KEY] = sorted(input_files)
    if options.records.score != "return":
        fields["score"] = options.records.score
    return Experiment.new_manifest(num_runs, seed_offset, base_seed(seed_offset, num_runs), fields)


def sink_files(callback: Any, exp_dir: Path) -> list[str]:
    """The names, relative to ``exp_dir``, of the files in it that ``callback``'s line sinks (JSONL, CSV: a
    ``log_path``) write, its own or those of the sinks it holds (``MultiCallBack``)."""
    names = []
    for sink in (callback, *getattr(callback, "callbacks", ())):
        path = getattr(sink, "log_path", None)
        if isinstance(path, (str, os.PathLike)):
            resolved, root = Path(path).resolve(), exp_dir.resolve()
            if resolved.is_relative_to(root):
                names.append(resolved.relative_to(root).as_posix())
    return sorted(set(names))


def plan_runs(
    parts: RunnerParts,
    options: RunPlan,
    seeds: Mapping[int, int],
    exp_dir: Path | None,
    tuning_hp: dict[str, Any] | None = None,
    copy_agent: bool = False,
    label: str = "",
    tag_prefix: str = "",
    first_task_id: int = -1,
    resume: bool = False,
    continuing: bool = False,
) -> list[RunSpec]:
    """The specs of the runs ``seeds`` (run number -> seed) of one experiment.

    Args:
        parts: the trainer's factories, callback and mode.
        options: what the runs share.
        seeds: the runs to do, by number (from 1), with their seeds.
        exp_dir: the experiment directory, or None.
        tuning_hp: hyperparameters for ``agent.set_hp``.
        copy_agent: each run takes a deep copy of the agent instance.
        label: put before ``run {i}`` on the progress display (a sweep's configuration).
        tag_prefix: put before ``run_{i}`` in callback tags.
        first_task_id: ids for the executors when several experiments run together (-1: the run number).
        resume: each run continues from its full checkpoint when it has one.
        continuing: the experiment was made by an earlier call (a sweep called again): each run's agent is compared
            with the one it trained, as with ``resume``.
    """
    specs = []
    for offset, (run, seed) in enumerate(seeds.items()):
        specs.append(
            RunSpec(
                run_idx=run,
                seed=seed,
                env_factory=parts.env_factory,
                agent_factory=parts.agent_factory,
                options=options,
                callback=parts.callback,
                train=parts.train,
                copy_agent=copy_agent,
                tuning_hp=tuning_hp,
                exp_dir=None if exp_dir is None else os.fspath(exp_dir),
                eval_env_factory=parts.eval_env_factory,
                task_id=first_task_id + offset if first_task_id >= 0 else -1,
                label=f"{label} run {run}" if label else "",
                tag_prefix=tag_prefix,
                resume=resume,
                continuing=continuing or resume,
            )
        )
    return specs


def start_manifest(
    exp_dir: Path | None,
    num_runs: int,
    seed_offset: int | None,
    tuning_hp: dict[str, Any] | None,
    options: RunPlan,
    parts: RunnerParts,
    execution: ExecutionOptions,
    resume: bool = False,
    input_files: Sequence[str] = (),
) -> tuple[dict[str, Any], dict[int, int]]:
    """The manifest of a ``multi_run`` and the runs to do (number -> seed), the caller holding the lock.

    A new experiment has every run pending; with ``resume``, the experiment's own manifest and the
    runs left (see :mod:`online_trainer.experiment.resuming`); the lock's check, :func:`resume_check`, has
    compared the call with it. ``input_files``: the names of the input files a new experiment's call wrote.
    """
    if resume:
        assert exp_dir is not None  # resume needs an exp_dir (hold_resumable checked it)
        return resuming.resumed_manifest(exp_dir, parts.callback, options.hooks)
    manifest = new_manifest(parts, options, execution, num_runs, seed_offset, tuning_hp, exp_dir, input_files)
    return manifest, dict(enumerate(manifest["seeds"], start=1))


def resume_check(
    exp_dir: Path | None,
    num_runs: int,
    seed_offset: int | None,
    tuning_hp: dict[str, Any] | None,
    options: RunPlan,
    parts: RunnerParts,
) -> Callable[[], None]:
    """What refuses a resumed ``multi_run``, run by the experiment's lock once taken and before it writes its owner
    line, so that a refused call changes nothing on disk: runs still in live Slurm jobs, or a call that differs
    from the experiment's (:func:`~online_trainer.experiment.resuming.check_same_call`), or checkpoints it cannot
    continue (:func:`~online_trainer.experiment.resuming.check_checkpoints`)."""

    def check() -> None:
        from online_trainer.parallel.slurm_handle import refuse_live_jobs

        assert exp_dir is not None  # resume needs an exp_dir (hold_resumable checked it)
        refuse_live_jobs(exp_dir)
        manifest = resuming.read_manifest(exp_dir)
        resuming.check_same_call(
            exp_dir,
            manifest,
            num_runs,
            seed_offset,
            call_record(options, tuning_hp, parts.train),
            lambda: resuming.env_description(parts.env_factory),
        )
        resuming.check_checkpoints(exp_dir, manifest, options.hooks, parts.callback)

    return check


def live_jobs_check(exp_dir: Path | None) -> Callable[[], None]:
    """What refuses a new experiment where the earlier one's runs are still in live Slurm jobs: the refusal of an
    earlier experiment would advise ``overwrite=True``, which refuses them too; this one says to wait or cancel."""

    def check() -> None:
        from online_trainer.parallel.slurm_handle import refuse_live_jobs

        if exp_dir is not None and (exp_dir / storage.MANIFEST_FILE).is_file():
            refuse_live_jobs(exp_dir, "A new experiment in this exp_dir")

    return check


def overwrite_check(exp_dir: Path | None, callback: Any = None) -> Callable[[], None]:
    """What refuses ``overwrite=True`` under the experiment's lock: runs of the earlier experiment still in live
    Slurm jobs, which would go on writing their checkpoints and results into the new experiment. It also warns
    when ``callback`` writes files outside ``exp_dir`` that hold values: they are not the experiment's to replace,
    and the new runs' values join the earlier ones there (``run_1`` twice)."""

    def check() -> None:
        from online_trainer.parallel.slurm_handle import refuse_live_jobs

        if exp_dir is not None and (exp_dir / storage.MANIFEST_FILE).is_file():
            refuse_live_jobs(exp_dir, "overwrite=True")
            outside = [
                path
                for path in getattr(callback, "written_files", list)()
                if not Path(path).resolve().is_relative_to(exp_dir.resolve())
            ]
            if outside:
                listed = ", ".join(outside[:3]) + (f" and {len(outside) - 3} more" if len(outside) > 3 else "")
                logger.warning(
                    "overwrite=True replaces the experiment in %s, but the callback writes to %s, outside it: those "
                    "files stay as they are, and this call's runs add their values beside the earlier experiment's "
                    "(its run_1 and this call's run_1 both). Remove them first, or give this experiment files of "
                    "its own.",
                    exp_dir,
                    listed,
                )

    return check


def base_seed(seed_offset: int | None, num_runs: int = 1) -> int:
    """``seed_offset``, or a random base seed with room for ``num_runs`` runs (logged, so the experiment can be
    repeated)."""
    if seed_offset is not None:
        return seed_offset
    drawn = seeding.draw_base_seed(num_runs)
    logger.info("seed_offset=None: drew base seed %d (pass seed_offset=%d to repeat)", drawn, drawn)
    return drawn


class RunGroup(Protocol):
    """What :func:`execute_experiments` routes runs to: an :class:`~online_trainer.experiment.manifest.Experiment`,
    or the checkpoints of one evaluated experiment (:mod:`online_trainer.orchestration.checkpoint_eval`)."""

    exp_dir: Path | None
    specs: list[RunSpec]

    def on_start(self, spec: RunSpec) -> None: ...
    def on_result(self, result: Any) -> None: ...
    def on_submitted(self, spec: RunSpec, job_id: str) -> None: ...
    def discard(self) -> None: ...
    def mark_interrupted(self) -> None: ...
    def kept_runs(self) -> list[int]: ...


@dataclass
class Outcome:
    """What :func:`run_experiments` did: the experiments it planned, the Slurm handle of runs submitted without
    waiting (else None), and what ``finalize`` returned (None when it was not called)."""

    experiments: list[Any] = field(default_factory=list)
    handle: Any = None
    finalized: Any = None


def run_experiments(
    hold: AbstractContextManager[list[Path]],
    execution: ExecutionOptions,
    max_runs: int,
    plan: Callable[[list[Path]], Sequence[RunGroup]],
    callback: Any,
    finalize: Callable[[list[Any]], Any] | None = None,
) -> Outcome:
    """The one path from a validated call to its results: lock, workers, manifests, plan, execute, finalize.

    Args:
        hold: the lock of the call's directory, as a context that yields the paths taking it created
            (:func:`~online_trainer.experiment.manifest.hold_exp_dir` for a new experiment,
            :func:`~online_trainer.experiment.resuming.hold_resumable` to resume one,
            :func:`~online_trainer.experiment.lock.hold_lock` for a sweep or an evaluation).
        execution: how the runs execute (already capped to the number of runs).
        max_runs: the most runs this call may do (how many workers are worth starting).
        plan: ``plan(created) -> experiments``, called under the lock while the workers start: it
            prepares each experiment's manifest (new or resumed) and the specs of its runs to do, and
            appends what it creates on disk to ``created`` (removed if no run starts).
        callback: the trainer's callback (set up before the first run, closed after the last), or
            None when the runs log nowhere.
        finalize: ``finalize(experiments)``, called under the lock once every run has ended (not when
            the runs were submitted to Slurm without waiting); what it returns is ``Outcome.finalized``.

    Raises:
        What a run raised before its first env step (nothing of the call is kept on disk), or what
        interrupted the runs (KeyboardInterrupt, a preemption signal: the manifests say so).
    """
    with one_stop_per_press(), hold as created, executors.early_workers(execution, max_runs) as pool:
        experiments = list(plan(created))
        handle = execute_experiments(experiments, execution, callback, pool, created)
        finalized = None
        if finalize is not None and handle is None:
            with preemption.after_the_runs():  # a SIGTERM now ended the call by its default action (V21)
                finalized = finalize(experiments)
    return Outcome(experiments, handle, finalized)


def execute_experiments(
    experiments: Sequence[RunGroup],
    execution: ExecutionOptions,
    callback: Any,
    pool: WorkerPool | None = None,
    created: Sequence[Path] = (),
) -> Any:
    """Run the specs of every experiment together (in ``pool`` if started); route each result to its experiment.

    Returns what :func:`~online_trainer.parallel.executors.execute` returns: None, or the handle of
    runs submitted to Slurm without waiting.

    A run that fails before its first env step stops every run: the files of this call
    (``created`` and the experiments' outputs) are removed, as nothing was learned, and
    the run's own exception is raised. A ``callback`` of None is neither set up nor closed.
    """
    owners = {spec.key: experiment for experiment in experiments for spec in experiment.specs}
    specs = [spec for experiment in experiments for spec in experiment.specs]
    try:
        _setup_callback(callback, experiments)
    except Exception:  # bad sink settings: no run started, nothing is kept
        for experiment in experiments:
            experiment.discard()
        remove_created(created)
        raise
    try:
        handle = executors.execute(
            specs,
            execution,
            lambda result: owners[result.key].on_result(result),
            pool,
            on_start=lambda spec: owners[spec.key].on_start(spec),
            on_submitted=lambda spec, job_id: owners[spec.key].on_submitted(spec, job_id),
        )
    except RunSetupError as error:
        _close_quietly(callback)
        for experiment in experiments:
            experiment.discard()
        remove_created(created)
        # a resumed call refused before any run went on: the sinks' files it cut back go back as it found them
        resuming.settle_rewound(refused=not any(experiment.kept_runs() for experiment in experiments))
        if hasattr(error.cause, "add_note"):  # Python 3.11+
            resumed = any(getattr(experiment, "resumed", False) for experiment in experiments)
            replacing = any(  # overwrite=True: the earlier experiment is set aside until the call ends
                e.exp_dir is not None and (e.exp_dir / storage.SET_ASIDE_DIR).is_dir() for e in experiments
            )
            ended = sorted(run for experiment in experiments for run in experiment.kept_runs())
            under_way = sorted(
                run for experiment in experiments for run in getattr(experiment, "interrupted_runs", list)()
            )
            kept_too = (
                f", and run(s) {', '.join(map(str, under_way))}, under way, stopped as Ctrl-C stops them "
                "(interrupted, with what they flushed)"
                if under_way
                else ""
            )
            when = "at" if failed_at(error.cause) is not None else "before"  # the loop marks what its steps raise
            # a checkpoint's evaluation plays with the evaluation seed of its run, not the run's (tester D15)
            seed = "evaluation seed" if any(getattr(e, "evaluates", False) for e in experiments) else "seed"
            error.cause.add_note(
                f"(raised by run {error.run_idx}, {seed} {error.seed}, {when} its first env step; every run was stopped, "
                + (
                    "and the manifest is as this call found it but for runs that ended in this call: the others go "
                    "on from their last full checkpoint when the experiment is resumed with the right inputs)"
                    if resumed
                    else f"and what the run(s) {', '.join(map(str, ended))} that ended in this call wrote is kept"
                    f"{kept_too}: once it is fixed, make the same call with resume=True to do the others, or with "
                    "overwrite=True to start again)"
                    if ended and not replacing
                    else "and nothing of this call was kept on disk: the earlier experiment it would have replaced "
                    "is put back as it was)"
                    if replacing
                    else "and nothing was kept on disk)"
                )
            )
        raise error.cause from None
    except BaseException as error:
        resuming.settle_rewound(refused=False)  # runs went on: the cut stands
        with finishing_the_stop(error):
            for experiment in experiments:
                experiment.mark_interrupted()
            _close_quietly(callback)
        interrupted = isinstance(error, KeyboardInterrupt) and any(e.exp_dir is not None for e in experiments)
        if interrupted and hasattr(error, "add_note"):  # Python 3.11+
            checkpointed = any(
                storage.resume_path(e.exp_dir, spec.run_idx).is_file()
                for e in experiments
                if e.exp_dir is not None
                for spec in e.specs
            )
            kept = "their flushed records and full checkpoints are" if checkpointed else "their flushed records are"
            periodic = any(spec.options.checkpoint_freq for e in experiments for spec in e.specs)
            then = (
                ""
                if checkpointed
                else " (runs start again: none had reached its first full checkpoint yet)"
                if periodic
                else " (runs without a full checkpoint start again; checkpoint_freq writes them)"
            )
            error.add_note(  # a bare KeyboardInterrupt said nothing of what is on disk or how to go on
                f"online_trainer: the runs were stopped; {kept} on disk. To go on, make the same call with "
                f"resume=True{then}."
            )
        raise
    resuming.settle_rewound(refused=False)  # the runs went on (or their jobs will): the cut stands
    if callback is not None:
        try:
            callback.close()
        except Exception as exc:  # the runs ended as recorded: as a worker's close() after its run (W19)
            logger.error(
                "the callback's close() raised after the runs ended: %s: %s (the runs' records are whole; the "
                "sink's last points may be missing from its files)",
                type(exc).__name__,
                exc,
            )
    return handle


def _setup_callback(callback: Any, experiments: Sequence[RunGroup]) -> None:
    """``callback.setup(exp_dir, {run: seed})`` for each experiment with runs to do, before any run starts.

    Sinks create what runs share here, once, in this process (an MLflow store created by two
    workers at once races inside MLflow); what they set travels with the callback to workers.
    """
    setup = getattr(callback, "setup", None)
    if callable(setup):
        for experiment in experiments:
            if experiment.specs:
                setup(experiment.exp_dir, {spec.run_idx: spec.seed for spec in experiment.specs})


def _close_quietly(callback: Any) -> None:
    """Close ``callback`` while another exception propagates: its own error must not hide that one."""
    if callback is None:
        return
    try:
        callback.close()
    except Exception as exc:
        logger.error("could not close the callback %r: %s", callback, exc)
