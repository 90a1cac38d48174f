"""OnlineTrainer: the public entry point."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import inspect
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from online_trainer.callbacks import EmptyCallBack, MultiCallback, TBCallBack
from online_trainer.callbacks.multi import check_callback
from online_trainer.errors import RunsFailedError
from online_trainer.experiment.manifest import Experiment, hold_exp_dir
from online_trainer.experiment.resuming import hold_resumable
from online_trainer.loop.factories import AgentFactory, EnvFactory
from online_trainer.loop.protocol import AgentLike, EnvLike
from online_trainer.options import validation
from online_trainer.options.derived import LEGACY_NAMES, fold_legacy
from online_trainer.options.groups import CheckpointOptions, EvaluationOptions, RecordOptions, RunPlan
from online_trainer.orchestration.planning import (
    RunnerParts,
    live_jobs_check,
    overwrite_check,
    plan_runs,
    resume_check,
    run_experiments,
    start_manifest,
)
from online_trainer.parallel.execution import ExecutionOptions, refuse_while_importing_main, resolve_execution
from online_trainer.records import storage
from online_trainer.records.record_view import RunRecords

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])


def legacy_keywords(method: F) -> F:
    """Let ``method`` take the previous release's flat keywords (:data:`~online_trainer.options.groups.LEGACY_NAMES`)
    for one release: each is folded into its option group with a ``DeprecationWarning`` that gives the new
    spelling. The signature shown (``help``, ``inspect.signature``) is ``method``'s own."""
    order = [name for name in inspect.signature(method).parameters if name != "self"]
    own = set(order)
    sections = [name for name in own if name in ("evaluation", "checkpoints", "records", "execution")]

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        legacy = {name: kwargs.pop(name) for name in list(kwargs) if name in LEGACY_NAMES and name not in own}
        validation.keywords(method.__name__, kwargs, order)
        if legacy:
            kwargs.update(fold_legacy(method.__name__, legacy, {name: kwargs.get(name) for name in sections}))
        return method(self, *args, **kwargs)

    return call  # type: ignore[return-value]


class OnlineTrainer:
    """Runs an agent on an env over many seeds, with exact episode accounting.

    Args:
        env: a gymnasium ``VectorEnv``, a single ``Env`` (wrapped into a vector env of one),
            a zero-argument factory returning either, called once per run, or a registered gymnasium
            id (``"Pendulum-v1"``: ``online_trainer.envs.make_env(id)``, one sub-env). An env instance
            is used in place (each run resets it with its own seed); with worker processes
            it travels as a copy, so pass a factory for envs that cannot (``AsyncVectorEnv``).
        agent: an agent following the protocol of :mod:`online_trainer.loop.protocol`, or a
            factory ``agent_factory(env) -> agent``, called once per run. An instance is
            trained in place when it is the only run in this process (``num_runs=1``, no
            workers), as in the original OnlineTrainer; otherwise every run starts from a
            copy of it and the instance stays as given. Either way :attr:`agents` holds
            each run's final agent.
        exp_dir: experiment directory for metrics, checkpoints and logs (created if
            missing). None keeps everything in memory.
        train: True calls ``reset(seed)`` and ``train()`` on each run's agent and ``update``
            at every step. False uses the agent as given: ``eval()``, never ``reset`` nor
            ``update`` (to evaluate a trained agent or a loaded checkpoint).
        config: path of a ``.py`` file, copied to ``exp_dir/config.py``.
        args: an ``argparse.Namespace`` (or a dict), written to ``exp_dir/args.yaml``.

    Attributes:
        call_back: the logging callback; ``TBCallBack(log_dir=exp_dir, flush_every=1)`` by
            default (``EmptyCallBack()`` without an exp_dir). Reassign it freely; a list of
            callbacks logs to each (a :class:`~online_trainer.callbacks.MultiCallback`).
        agents: after :meth:`multi_run`, the final agent of each run (``agents[0]`` is run 1;
            None for a failed run, or with ``keep_agents=False``).
        evaluations: after a :meth:`multi_run` that evaluated, the evaluation records of each run.
    """

    @validation.suggests_keywords
    def __init__(
        self,
        env: EnvLike,
        agent: AgentLike,
        exp_dir: str | os.PathLike | None = None,
        train: bool = True,
        config: str | os.PathLike | None = None,
        args: argparse.Namespace | Mapping[str, Any] | None = None,
    ) -> None:
        self.env_factory = EnvFactory(env)
        self.agent_factory = AgentFactory(agent)
        if exp_dir is not None and not isinstance(exp_dir, (str, os.PathLike)):  # M22: pathlib's TypeError
            raise TypeError(
                f"exp_dir must be a path (a str or a pathlib.Path), but got exp_dir={exp_dir!r}: pass e.g. "
                "exp_dir='runs/my_experiment', or None to keep nothing on disk."
            )
        self.exp_dir = None if exp_dir is None else Path(exp_dir)
        if exp_dir is not None and self.exp_dir is not None and self.exp_dir.exists() and not self.exp_dir.is_dir():
            raise ValueError(f"exp_dir={os.fspath(exp_dir)!r} exists and is not a directory: choose another path.")
        self.train = validation.boolean("train", train)
        self.config = None
        if config is not None:
            validation.needs_exp_dir(exp_dir, config=os.fspath(config))
            if not Path(config).is_file():
                raise FileNotFoundError(f"config={os.fspath(config)!r} does not exist: give the path of a .py file.")
            if Path(config).suffix != ".py":  # M22: a YAML file became exp_dir/config.py without a word
                raise ValueError(
                    f"config={os.fspath(config)!r} is not a .py file: config= copies a Python config file into exp_dir "
                    "as config.py. Keep other settings with args= (written as args.yaml), or run a YAML config with "
                    "online-trainer run."
                )
            self.config = Path(config)
        self.args_yaml = None
        if args is not None:
            validation.needs_exp_dir(exp_dir, args=args)
            if not isinstance(args, (argparse.Namespace, Mapping)):
                raise TypeError(f"args must be an argparse.Namespace or a dict, but got args={args!r}.")
            self.args_yaml = storage.dump_args(args)
        self.call_back = EmptyCallBack() if self.exp_dir is None else TBCallBack(log_dir=self.exp_dir, flush_every=1)
        # The eval env of the last multi_run into exp_dir: what evaluate() repeats the final evaluations on.
        self._eval_env_factory: EnvFactory | None = None
        self.agents: list[Any] = []
        self.evaluations: list[list[dict[str, Any]] | None] = []

    @property
    def call_back(self) -> Any:
        """The logging callback every run writes to (see :mod:`callbacks`)."""
        return self._call_back

    @call_back.setter
    def call_back(self, value: Any) -> None:
        if isinstance(value, (list, tuple)):  # several sinks at once
            for index, callback in enumerate(value):
                check_callback(callback, f"trainer.call_back[{index}]")
            value = MultiCallback(value) if value else EmptyCallBack()
        check_callback(value, "trainer.call_back")
        self._call_back = value

    @legacy_keywords
    def multi_run(
        self,
        num_runs: int,
        num_episodes: int | None = None,
        total_steps: int | None = None,
        seed_offset: int | None = None,
        dump_metrics: bool | None = None,
        checkpoint_freq: int | None = None,
        dump_transitions: bool = False,
        num_workers: int | None = None,
        tuning_hp: dict[str, Any] | None = None,
        *,
        evaluation: EvaluationOptions | None = None,
        checkpoints: CheckpointOptions | None = None,
        records: RecordOptions | None = None,
        execution: ExecutionOptions | None = None,
        hooks: Sequence[Any] | None = None,
        resume: bool = False,
        overwrite: bool = False,
    ) -> list[RunRecords | None]:
        """Run ``num_runs`` seeds, each for ``num_episodes`` episodes or ``total_steps`` env steps.

        The nine first parameters are the original OnlineTrainer's, positional and in their order; the
        rest is keyword-only: four option objects (each field documented in
        ``docs/reference/trainer-options.md``), ``hooks``, ``resume`` and ``overwrite``. The previous
        release's flat keywords (``eval_freq=``, ``keep_checkpoints=``, ``progress=``, ...) still work, with
        a ``DeprecationWarning`` that gives the new spelling.

        Args:
            num_runs: number of seeds.
            num_episodes: stop each run after exactly this many finished episodes (of all
                its sub-envs together).
            total_steps: stop each run after this many env steps (real transitions of all
                sub-envs together; overshoot is below ``num_envs``). Give exactly one budget.
            seed_offset: run ``i`` (numbered from 1) uses seed ``seed_offset + 10000 * (i - 1)``; None draws a random
                base once. Seeds are in ``manifest.json`` and in every record.
            dump_metrics: stream records to ``exp_dir/metrics_run{i}.pkl``; None means "when
                an exp_dir is set".
            checkpoint_freq: save the agent every this many episodes (episode budget) or env
                steps (step budget), plus ``Run{i}_Last`` and ``Run{i}_Best_agent.t``.
            dump_transitions: keep ``(obs, action, reward, terminated, truncated)`` per step in
                the records (slow and large: for debugging and offline datasets).
            num_workers: runs going at once (``execution.num_workers`` says the same; giving both,
                they must agree).
            tuning_hp: hyperparameters given to every agent through ``set_hp``.
            evaluation: greedy evaluation on a separate env: ``EvaluationOptions(env=..., freq=...,
                episodes=..., record_video=...)``; None: no evaluation.
            checkpoints: what the checkpoints keep: ``CheckpointOptions(keep=..., buffers=...)``.
            records: what the runs keep and log: ``RecordOptions(in_memory=..., keep_agents=...,
                flush_every=..., frames_trigger=..., stats_window=..., stats_every_steps=..., score=...)``.
            execution: how the runs execute: ``ExecutionOptions(num_workers=..., backend=...,
                start_method=..., torch_threads=..., ray_address=..., ray_resources=..., slurm=..., progress=...)``
                (``backend="slurm"``: a Slurm job per run).
            hooks: objects with any of ``on_run_start(ctx)``, ``on_step(ctx)`` (every ``every_steps`` env
                steps or ``every_seconds`` seconds, as the hook declares), ``on_episode_end(ctx, record)``,
                ``on_eval(ctx, result)``, ``on_checkpoint(ctx, path)``, ``on_run_end(ctx)``; ``ctx.stop(reason)``
                ends the run (status ``stopped_early``). Each run gets its own copy of each hook. See
                :mod:`online_trainer.hooks` (``StopOnReturn``, ``StopOnNoImprovement``, ``StopOnPlateau``).
            resume: continue the experiment in ``exp_dir`` (the same call): unfinished runs go on from their full
                checkpoint (``checkpoint_freq``, SIGTERM, SIGUSR1); see the docs' "Resume and crashes". Every
                option that changes what runs record must be the experiment's, or the call is refused.
            overwrite: replace the outputs of an earlier experiment in ``exp_dir``. It is set aside, put back
                when no run gets past its first env step, and removed when the call ends otherwise (even if
                runs failed later: see ``docs/explanation/experiment-directory.md``).

        Returns:
            The episode records of each run (``None`` per run when ``records.in_memory`` is False, and for a
            run a resumed call found done with ``dump_metrics=False``: its records are nowhere), as a
            :class:`~online_trainer.records.record_view.RunRecords`: a read-only sequence of record dicts,
            built as they are read (``list(run)`` for a list of your own); with ``SlurmOptions(wait=False)``
            a :class:`~online_trainer.parallel.slurm_handle.SlurmRuns` handle, as soon as the jobs are submitted.

        Raises:
            ValueError, TypeError, FileNotFoundError, FileExistsError: bad input, before any env step.
            RunsFailedError: some runs raised; the others completed.
        """
        num_runs = validation.positive_int("num_runs", num_runs)
        refuse_while_importing_main("multi_run")
        resume, overwrite = validation.resume_or_overwrite(resume, overwrite)
        options = RunPlan(
            num_episodes=num_episodes,
            total_steps=total_steps,
            checkpoint_freq=checkpoint_freq,
            dump_metrics=self.exp_dir is not None if dump_metrics is None else dump_metrics,
            dump_transitions=dump_transitions,
            evaluation=evaluation,
            checkpoints=CheckpointOptions() if checkpoints is None else checkpoints,
            records=RecordOptions() if records is None else records,
            hooks=() if hooks is None else hooks,
            has_exp_dir=self.exp_dir is not None,
        )
        execution = resolve_execution(execution, num_workers=num_workers).capped(num_runs)
        seed_offset = validation.seed_offset(seed_offset, num_runs)
        tuning_hp = validation.tuning_hp(tuning_hp)
        eval_env = None if evaluation is None else evaluation.env
        parts = dataclasses.replace(
            self.parts, eval_env_factory=None if eval_env is None else EnvFactory(eval_env, "evaluation.env")
        )
        parts.check_travel(execution, options)
        copy_agent = parts.copies_agent(num_runs, execution)
        if resume:
            check = resume_check(self.exp_dir, num_runs, seed_offset, tuning_hp, options, parts)
            hold = hold_resumable(self.exp_dir, check)
        else:
            refuse = overwrite_check(self.exp_dir, parts.callback) if overwrite else live_jobs_check(self.exp_dir)
            hold = hold_exp_dir(self.exp_dir, overwrite, self.input_files(), refuse)
        keep_records = options.records.in_memory

        def plan(created: list[Path]) -> list[Experiment]:
            self._on_exp_dir_held()
            written = [name for name, text in self.input_files().items() if text is not None]
            manifest, seeds = start_manifest(
                self.exp_dir, num_runs, seed_offset, tuning_hp, options, parts, execution, resume, written
            )
            specs = plan_runs(parts, options, seeds, self.exp_dir, tuning_hp, copy_agent, resume=resume)
            if resume and not specs:  # a notebook cell run again: said, not a silent return of the records (U17)
                logger.warning(
                    "resume: every run of %s ended in an earlier call (%d runs): nothing runs.",
                    self.exp_dir,
                    len(manifest["runs"]),
                )
            return [Experiment(self.exp_dir, manifest, specs)]

        def finalize(experiments: list[Experiment]) -> tuple[list[Any], list[Any]]:
            (experiment,) = experiments
            runs, failures = experiment.runs(keep_records), experiment.failures()
            if not failures and self.exp_dir is not None and options.dump_metrics and keep_records:
                experiment.write_all_metrics(runs)  # under the lock: no other writer is in the directory yet
            return runs, failures

        outcome = run_experiments(hold, execution, num_runs, plan, parts.callback, finalize)
        if outcome.handle is not None:
            return outcome.handle  # submitted to Slurm without waiting: the jobs record their results
        (experiment,), (runs, failures) = outcome.experiments, outcome.finalized
        self.agents, self.evaluations = experiment.agents(), experiment.evaluations()
        self._eval_env_factory = parts.eval_env_factory
        if failures:
            raise RunsFailedError(
                failures, runs, on_disk=self.exp_dir is not None, continuing="the same call with resume=True"
            ) from experiment.first_exception()
        return runs

    def input_files(self) -> dict[str, str | None]:
        """The files that say what produced an experiment, by name: their text (None: not given).

        :meth:`multi_run` writes them into ``exp_dir`` under the experiment's lock, through
        :func:`~online_trainer.experiment.manifest.hold_exp_dir`: one that is there with other content is
        refused unless ``overwrite``; with ``overwrite`` an earlier experiment's are set aside with it and put
        back byte for byte if no run gets past its first env step; and they are removed when the call ends
        with no experiment in ``exp_dir``. A subclass adds its own (the command ``online-trainer run`` adds
        its resolved ``config.yaml``).

        Returns:
            ``config.py`` (a copy of ``config``) and ``args.yaml`` (``args``), by file name.
        """
        return {
            storage.CONFIG_FILE: None if self.config is None else self.config.read_text(),
            storage.ARGS_FILE: self.args_yaml,
        }

    def _on_exp_dir_held(self) -> None:
        """Called by :meth:`multi_run` once it holds ``exp_dir`` (checked, and the input files written), before
        any env is made; does nothing. A subclass says what is about to run here: a call refused for another
        writer or an earlier experiment never gets this far."""

    @property
    def parts(self) -> RunnerParts:
        """What this trainer contributes to every run (for :mod:`online_trainer.orchestration.planning`)."""
        return RunnerParts(self.env_factory, self.agent_factory, self.call_back, self.train)

    @legacy_keywords
    def sweep(
        self,
        configurations: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]],
        num_runs: int,
        *,
        num_episodes: int | None = None,
        total_steps: int | None = None,
        seed_offset: int | None = None,
        metric: str = "iqm",
        last_k: int = 10,
        checkpoint_freq: int | None = None,
        dump_transitions: bool = False,
        evaluation: EvaluationOptions | None = None,
        checkpoints: CheckpointOptions | None = None,
        records: RecordOptions | None = None,
        execution: ExecutionOptions | None = None,
        hooks: Sequence[Any] | None = None,
        resume: bool = False,
    ) -> pd.DataFrame:
        """Run every configuration over ``num_runs`` seeds and rank the configurations.

        Each configuration gets its own experiment directory under ``exp_dir`` (named after
        its hyperparameters, which are also written to its ``hyperparameters.yaml``) and
        receives them through ``agent.set_hp``. All (configuration x seed) runs share one
        pool of ``num_workers``. Every configuration runs the same seeds. Calling the sweep
        again runs only what is missing: runs that finished are kept, new configurations and
        seeds are added.

        Args:
            configurations: a grid ``{"lr": [1e-3, 1e-4], "gamma": [0.9, 0.99]}`` (every
                combination) or a list of hyperparameter dicts.
            num_runs: seeds per configuration.
            num_episodes: episode budget of each run (exactly one budget).
            total_steps: env-step budget of each run.
            seed_offset: base seed shared by all configurations; None draws one, recorded in
                ``exp_dir/sweep.json`` and reused when the sweep is called again.
            metric: ``"iqm"``, ``"mean"`` or ``"median"`` of the runs' final returns, to rank by.
            last_k: a run's final return (what is ranked) is the mean of its last ``last_k`` training
                episodes; with evaluations, ``compare(exp_dir, source="eval")`` ranks on them.
            checkpoint_freq: as in :meth:`multi_run`, like ``dump_transitions``.
            evaluation: as in :meth:`multi_run`; with it, ``compare(exp_dir, source="eval")`` ranks on evaluations.
            checkpoints: as in :meth:`multi_run`.
            records: as in :meth:`multi_run` (a sweep keeps no agents: ``records.keep_agents`` is ignored).
            hooks: as in :meth:`multi_run`; each (configuration x seed) run gets its own copy.
            execution: as in :meth:`multi_run`; all (configuration x seed) runs share the pool.
            resume: runs cut off continue from their full checkpoints (else they start again).

        Returns:
            One row per configuration, best first: ``rank``, its hyperparameters, ``experiment``
            (its directory name), mean/median/IQM with 95% bootstrap CIs, ``num_runs``, and
            against the top configuration ``probability_of_improvement`` (P(top > this one),
            with ``_lo``/``_hi``) and ``told_apart`` (the interval of the ``metric``
            difference excludes zero, with seeds enough for a verdict: 4 per configuration at 95%,
            see :func:`~online_trainer.analysis.compare.compare`). ``attrs["note"]`` says whether the top configurations
            can be told apart (logged as a warning when they cannot: the order among them is
            noise). It is also written to ``exp_dir/sweep_results.csv``.

        Raises:
            RunsFailedError: some runs failed (after the ranking of the others is written).
        """
        from online_trainer.orchestration.sweep import run_sweep

        options = RunPlan(
            num_episodes=num_episodes,
            total_steps=total_steps,
            checkpoint_freq=checkpoint_freq,
            dump_transitions=dump_transitions,
            evaluation=evaluation,
            checkpoints=CheckpointOptions() if checkpoints is None else checkpoints,
            records=dataclasses.replace(RecordOptions() if records is None else records, keep_agents=False),
            hooks=() if hooks is None else hooks,
        )
        return run_sweep(
            self, configurations, num_runs, options, seed_offset, metric, last_k, resolve_execution(execution), resume
        )

    @legacy_keywords
    def evaluate(
        self,
        which: str = "last",
        *,
        exp_dir: str | os.PathLike | None = None,
        evaluation: EvaluationOptions | None = None,
        execution: ExecutionOptions | None = None,
        overwrite: bool = False,
    ) -> pd.DataFrame:
        """Evaluate the saved checkpoints of every run that ended (finished, or stopped early by a hook) greedily, all
        runs at once; runs that did not end are left out, with a warning.

        Each run's agent is rebuilt with this trainer's agent factory and its checkpoint
        loaded (``agent.load``), switched to ``eval()``, and plays ``evaluation.episodes`` complete
        episodes on an env seeded with the run's eval seed, exactly as evaluations during
        training do: evaluating ``"last"`` with the experiment's ``evaluation.episodes`` repeats the run's final
        evaluation, episode for episode (another number of episodes spreads them over the sub-envs otherwise).

        Args:
            which: ``"last"`` (``Run{i}_Last``), ``"best"`` (``Run{i}_Best_agent.t``) or ``"all"``
                (every checkpoint, the periodic ones included).
            exp_dir: the experiment to evaluate (default: this trainer's).
            evaluation: ``EvaluationOptions(episodes=...)`` (episodes per checkpoint, 10 by default) and
                ``env=`` (default: the eval env of this trainer's last :meth:`multi_run`, when ``exp_dir`` is
                that run's; else the training env's factory). ``freq`` and ``record_video`` do not apply.
            execution: as in :meth:`multi_run` (``num_workers``: checkpoints evaluated at once).
            overwrite: replace an earlier ``evaluation_{which}.csv``.

        Returns:
            One row per episode: ``run``, ``seed``, ``checkpoint``, ``episode``, ``ep_return``,
            ``ep_length``; also written to ``exp_dir/evaluation_{which}.csv``.

        Raises:
            FileExistsError: an earlier evaluation of ``which`` is there and ``overwrite`` is false.
            FileNotFoundError: no manifest, no run that ended, or a run without such a checkpoint.
        """
        from online_trainer.orchestration.checkpoint_eval import evaluate_checkpoints

        target = exp_dir if exp_dir is not None else self.exp_dir
        if target is None:
            raise ValueError("evaluate needs an experiment directory: pass exp_dir=... or make the trainer with one.")
        evaluation = EvaluationOptions() if evaluation is None else evaluation
        unused = [f"{name}={value!r}" for name in ("freq", "record_video") if (value := getattr(evaluation, name))]
        if unused:  # the training call's options, passed as they are: said, not refused
            logger.warning(
                "evaluate() plays every checkpoint once and films nothing: evaluation.%s %s not apply "
                "(evaluation.episodes and evaluation.env do).",
                " and evaluation.".join(unused),
                "do" if len(unused) > 1 else "does",
            )
        if evaluation.env is not None:
            factory: EnvFactory | None = EnvFactory(evaluation.env, "evaluation.env")
        else:  # the last multi_run's, to repeat its final evaluations
            factory = self._eval_env_factory if Path(target) == self.exp_dir else None
        parts = dataclasses.replace(self.parts, eval_env_factory=factory)
        options = resolve_execution(execution)
        parts.check_travel(options)
        return evaluate_checkpoints(parts, target, which, evaluation.episodes, options, overwrite)

    load_run_metrics = staticmethod(storage.load_run_metrics)
    load_all_run_metrics = staticmethod(storage.load_all_run_metrics)
    load_transitions = staticmethod(storage.load_transitions)
    load_agent_logs = staticmethod(storage.load_agent_logs)
    load_args = staticmethod(storage.load_args)
    load_config = staticmethod(storage.load_config)
