"""OnlineTrainer: the public entry point."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from online_trainer.callbacks import EmptyCallBack, MultiCallback, TBCallBack
from online_trainer.callbacks.multi import check_callback
from online_trainer.core import storage, validation
from online_trainer.core.errors import RunsFailedError
from online_trainer.core.factories import AgentFactory, EnvFactory
from online_trainer.core.run_records import RunRecords
from online_trainer.experiment.manifest import Experiment, hold_exp_dir
from online_trainer.experiment.resuming import hold_resumable
from online_trainer.orchestration.planning import RunnerParts, RunOptions, execute_experiments, plan_runs, start_manifest
from online_trainer.parallel import executors
from online_trainer.parallel.base import ExecutionOptions, resolve_execution

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)


class OnlineTrainer:
    """Runs an agent on an env over many seeds, with exact episode accounting.

    Args:
        env: a gymnasium ``VectorEnv``, a single ``Env`` (wrapped into a vector env of one),
            a zero-argument factory returning either, called once per run, or a registered gymnasium
            id (``"Pendulum-v1"``: ``online_trainer.envs.make_env(id)``, one sub-env). An env instance
            is used in place (each run resets it with its own seed); with worker processes
            it travels as a copy, so pass a factory for envs that cannot (``AsyncVectorEnv``).
        agent: an agent following the protocol of :mod:`online_trainer.core.protocol`, or a
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

    def __init__(
        self,
        env: Any,
        agent: Any,
        exp_dir: str | os.PathLike | None = None,
        train: bool = True,
        config: str | os.PathLike | None = None,
        args: argparse.Namespace | Mapping[str, Any] | None = None,
    ) -> None:
        self.env_factory = EnvFactory(env)
        self.agent_factory = AgentFactory(agent)
        self.exp_dir = None if exp_dir is None else Path(exp_dir)
        if self.exp_dir is not None and self.exp_dir.exists() and not self.exp_dir.is_dir():
            raise ValueError(f"exp_dir={os.fspath(exp_dir)!r} exists and is not a directory: choose another path.")
        self.train = bool(train)
        self.config = None
        if config is not None:
            validation.needs_exp_dir(exp_dir, config=os.fspath(config))
            if not Path(config).is_file():
                raise FileNotFoundError(f"config={os.fspath(config)!r} does not exist: give the path of a .py file.")
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
        keep_records: bool = True,
        keep_agents: bool = True,
        overwrite: bool = False,
        execution: ExecutionOptions | None = None,
        progress: bool | None = None,
        start_method: str | None = None,
        torch_threads: int | None = None,
        backend: str | None = None,
        ray_address: str | None = None,
        ray_resources: Mapping[str, Any] | None = None,
        metrics_flush_every: int | None = None,
        eval_env: Any = None,
        eval_freq: int | None = None,
        eval_episodes: int = 10,
        record_video: int | None = None,
        frames_trigger: int | Callable[[int], bool] | None = None,
        hooks: Sequence[Any] | None = None,
        stats_window: int = 100,
        stats_every_steps: int | None = None,
        resume: bool = False,
        keep_checkpoints: int | None = None,
        checkpoint_buffers: bool = False,
        score: str = "return",
    ) -> list[RunRecords | list[dict[str, Any]] | None]:
        """Run ``num_runs`` seeds, each for ``num_episodes`` episodes or ``total_steps`` env steps.

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
            num_workers: runs going at once: worker processes (``backend="local"``; 1, the default,
                runs them in this process) or Ray tasks in flight (``backend="ray"``).
            tuning_hp: hyperparameters given to every agent through ``set_hp``.
            keep_records: False keeps records out of memory (they are on disk): memory stays
                flat and ``None`` stands for each run in the result.
            keep_agents: keep each run's final agent in :attr:`agents` (with workers they are
                sent back to this process); False for agents too big to keep (large replay buffers).
            overwrite: replace the outputs of an earlier experiment in ``exp_dir`` (they are set aside, and put
                back when no run gets past its first env step).
            execution: how the runs execute, as one object shared by :meth:`multi_run`, :meth:`sweep`
                and :meth:`evaluate`: ``ExecutionOptions(num_workers=..., backend=..., start_method=...,
                torch_threads=..., ray_address=..., ray_resources=..., progress=...)``. The flat keywords
                (``num_workers``, ``progress``, ``start_method``, ``torch_threads``, ``backend``,
                ``ray_address``, ``ray_resources``) say the same; a keyword that disagrees with
                ``execution`` is an error. Every parameter after ``tuning_hp`` is keyword-only.
            progress: show an overall bar and a bar per active run (default True).
            start_method: see :class:`~online_trainer.parallel.base.ExecutionOptions`.
            torch_threads: see :class:`~online_trainer.parallel.base.ExecutionOptions`.
            backend: ``"local"``, ``"ray"`` or ``"slurm"`` (a Slurm job per run; see ExecutionOptions).
            ray_address: see :class:`~online_trainer.parallel.base.ExecutionOptions`, as for ``ray_resources``.
            metrics_flush_every: episode records per chunk of the metrics streams; None: 100 per
                sub-env. Whatever this says, records reach the disk at least every second while
                episodes end, at once for an episode that keeps its frames, and when the run ends.
            eval_env: evaluate each run's agent greedily on this env (an env or a zero-argument
                factory; with ``eval_freq`` alone, the training env's factory is called once more).
                The agent is switched to ``eval()``, plays ``eval_episodes`` complete episodes,
                and goes back to ``train()``; the training env and episode are untouched. Records:
                ``exp_dir/eval_run{i}.pkl``, :attr:`evaluations`, ``eval/ep_return/run_{i}``.
                With evaluation, ``Run{i}_Best_agent.t`` is the state at the best eval mean.
            eval_freq: evaluate every this many env steps (step budget) or finished episodes
                (episode budget), and once at the end; None with an ``eval_env``: at the end only.
            eval_episodes: complete episodes per evaluation, spread evenly over the eval env's sub-envs.
            record_video: film the first episode (of sub-env 0) of every this-many-th evaluation into
                ``exp_dir/videos/run{i}/eval{k}_step{n}.mp4`` (the eval env must be made with
                ``render_mode="rgb_array"``; needs ``pip install -e ".[video]"``). The callback gets each
                video too, when it has a ``video`` method (``TBCallBack``: an animated GIF in TensorBoard).
            frames_trigger: when the training env renders frames (``render_mode="rgb_array"``,
                ``"rgb_array_list"`` or ``"ansi"``), the episodes whose records keep them: ``k`` keeps
                episodes ``k, 2k, ...``, a callable ``episode_index -> bool`` (as gymnasium's
                ``RecordVideo(episode_trigger=...)``, indices from 1) those it accepts; None: every
                episode. With a metrics stream the frames are in ``metrics_run{i}.pkl`` only: the
                records returned and ``all_metrics.pkl`` hold ``frames=[]`` (read them back with
                :meth:`load_run_metrics`).
            hooks: objects with any of ``on_run_start(ctx)``, ``on_step(ctx)`` (every ``every_steps`` env
                steps or ``every_seconds`` seconds, as the hook declares), ``on_episode_end(ctx, record)``,
                ``on_eval(ctx, result)``, ``on_checkpoint(ctx, path)``, ``on_run_end(ctx)``; ``ctx.stop(reason)``
                ends the run (status ``stopped_early``). Each run gets its own copy of each hook. See
                :mod:`online_trainer.hooks` (``StopOnReturn``, ``StopOnNoImprovement``, ``StopOnPlateau``).
            stats_window: episodes in the rolling means logged under ``stats/run_{i}`` (see RunOptions).
            stats_every_steps: period of the ``stats/`` and ``timing/`` logs; None: about 10 seconds.
            resume: continue the experiment in ``exp_dir`` (the same call): unfinished runs go on from their full
                checkpoint (``checkpoint_freq``, SIGTERM, SIGUSR1); see the docs' "Resume and crashes".
            keep_checkpoints: keep the last this many periodic checkpoints of each run (see RunOptions).
            checkpoint_buffers: full checkpoints hold the replay buffer: exact off-policy resume.
            score: what evaluations, progress and analysis report: ``"return"`` (sums of the rewards the agent
                learns from) or ``"raw"`` (game scores of a ``RecordEpisodeStatistics`` in the env; see RunOptions).

        Returns:
            The episode records of each run (``None`` per run when ``keep_records`` is False), as a
            :class:`~online_trainer.core.run_records.RunRecords`: a read-only sequence of record dicts,
            built as they are read (``list(run)`` for a list of your own); with ``SlurmOptions(wait=False)``
            a :class:`~online_trainer.parallel.slurm_handle.SlurmRuns` handle, as soon as the jobs are submitted.

        Raises:
            ValueError, TypeError, FileNotFoundError, FileExistsError: bad input, before any env step.
            RunsFailedError: some runs raised; the others completed.
        """
        num_runs = validation.positive_int("num_runs", num_runs)
        resume, overwrite = validation.resume_or_overwrite(resume, overwrite)
        options = RunOptions(
            num_episodes=num_episodes, total_steps=total_steps, checkpoint_freq=checkpoint_freq,
            keep_checkpoints=keep_checkpoints, checkpoint_buffers=checkpoint_buffers, dump_metrics=self.exp_dir is not
            None if dump_metrics is None else bool(dump_metrics), dump_transitions=bool(dump_transitions),
            keep_records=bool(keep_records), keep_agents=bool(keep_agents), metrics_flush_every=metrics_flush_every,
            has_exp_dir=self.exp_dir is not None, evaluate=eval_env is not None or eval_freq is not None,
            eval_freq=eval_freq, eval_episodes=eval_episodes, record_video=record_video, frames_trigger=frames_trigger,
            hooks=hooks, stats_window=stats_window, stats_every_steps=stats_every_steps, score=score)
        execution = resolve_execution(execution, num_workers=num_workers, backend=backend, start_method=start_method,
                                      torch_threads=torch_threads, ray_address=ray_address,
                                      ray_resources=ray_resources, progress=progress).capped(num_runs)
        seed_offset = validation.seed_offset(seed_offset)
        tuning_hp = validation.tuning_hp(tuning_hp)
        parts = dataclasses.replace(self.parts, eval_env_factory=None if eval_env is None else EnvFactory(eval_env))
        parts.check_travel(execution, options)
        copy_agent = parts.copies_agent(num_runs, execution)
        inputs = {storage.CONFIG_FILE: self.config and self.config.read_text(), storage.ARGS_FILE: self.args_yaml}
        hold = hold_resumable(self.exp_dir) if resume else hold_exp_dir(self.exp_dir, overwrite, inputs)
        with hold as created, executors.early_workers(execution, num_runs) as pool:
            manifest, seeds = start_manifest(self.exp_dir, num_runs, seed_offset, tuning_hp, options, parts, execution, resume)
            specs = plan_runs(parts, options, seeds, self.exp_dir, tuning_hp, copy_agent, resume=resume)
            experiment = Experiment(self.exp_dir, manifest, specs)
            if (handle := execute_experiments([experiment], execution, parts.callback, pool, created)) is not None:
                return handle  # submitted to Slurm without waiting: the jobs record their results
            runs = experiment.runs(keep_records)
            failures = experiment.failures()
            if not failures and self.exp_dir is not None and options.dump_metrics and keep_records:
                experiment.write_all_metrics(runs)  # under the lock: no other writer is in the directory yet
        self.agents, self.evaluations = experiment.agents(), experiment.evaluations()
        self._eval_env_factory = parts.eval_env_factory
        if failures:
            raise RunsFailedError(failures, runs) from experiment.first_exception()
        return runs

    @property
    def parts(self) -> RunnerParts:
        """What this trainer contributes to every run (for :mod:`online_trainer.orchestration.planning`)."""
        return RunnerParts(self.env_factory, self.agent_factory, self.call_back, self.train)

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
        keep_checkpoints: int | None = None,
        checkpoint_buffers: bool = False,
        hooks: Sequence[Any] | None = None,
        execution: ExecutionOptions | None = None,
        num_workers: int | None = None,
        backend: str | None = None,
        progress: bool | None = None,
        start_method: str | None = None,
        torch_threads: int | None = None,
        ray_address: str | None = None,
        ray_resources: Mapping[str, Any] | None = None,
        resume: bool = False,
    ) -> "pd.DataFrame":
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
            checkpoint_freq: as in :meth:`multi_run`, like ``keep_checkpoints`` and ``checkpoint_buffers``.
            hooks: as in :meth:`multi_run`; each (configuration x seed) run gets its own copy.
            execution: as in :meth:`multi_run`, like the flat keywords ``num_workers``, ``backend``,
                ``progress``, ...; all (configuration x seed) runs share the pool.
            resume: runs cut off continue from their full checkpoints (else they start again).

        Returns:
            One row per configuration, best first: ``rank``, its hyperparameters, ``experiment``
            (its directory name), mean/median/IQM with 95% bootstrap CIs, ``num_runs``, and
            against the top configuration ``probability_of_improvement`` (P(top > this one),
            with ``_lo``/``_hi``) and ``told_apart`` (the interval of the ``metric``
            difference excludes zero). ``attrs["note"]`` says whether the top configurations
            can be told apart (logged as a warning when they cannot: the order among them is
            noise). It is also written to ``exp_dir/sweep_results.csv``.

        Raises:
            RunsFailedError: some runs failed (after the ranking of the others is written).
        """
        from online_trainer.orchestration.sweep import run_sweep

        execution = resolve_execution(execution, num_workers=num_workers, backend=backend, start_method=start_method,
                                      torch_threads=torch_threads, ray_address=ray_address,
                                      ray_resources=ray_resources, progress=progress)
        return run_sweep(self, configurations, num_runs, num_episodes, total_steps, seed_offset, metric, last_k,
                         checkpoint_freq, execution, hooks, resume, keep_checkpoints, checkpoint_buffers)

    def evaluate(
        self,
        which: str = "last",
        *,
        num_episodes: int = 10,
        exp_dir: str | os.PathLike | None = None,
        eval_env: Any = None,
        overwrite: bool = False,
        execution: ExecutionOptions | None = None,
        num_workers: int | None = None,
        progress: bool | None = None,
        backend: str | None = None,
        start_method: str | None = None,
        torch_threads: int | None = None,
        ray_address: str | None = None,
        ray_resources: Mapping[str, Any] | None = None,
    ) -> "pd.DataFrame":
        """Evaluate the saved checkpoints of every finished run greedily, all runs at once.

        Each run's agent is rebuilt with this trainer's agent factory and its checkpoint
        loaded (``agent.load``), switched to ``eval()``, and plays ``num_episodes`` complete
        episodes on an env seeded with the run's eval seed, exactly as evaluations during
        training do: evaluating ``"last"`` repeats the run's final evaluation.

        Args:
            which: ``"last"`` (``Run{i}_Last``), ``"best"`` (``Run{i}_Best_agent.t``) or ``"all"``
                (every checkpoint, the periodic ones included).
            num_episodes: episodes per checkpoint.
            exp_dir: the experiment to evaluate (default: this trainer's).
            eval_env: the env to evaluate on (default: the ``eval_env`` of this trainer's last
                :meth:`multi_run`, when ``exp_dir`` is that run's; else the training env's factory).
            overwrite: replace an earlier ``evaluation_{which}.csv``.
            execution: as in :meth:`multi_run`, like the flat keywords ``num_workers`` (runs evaluated
                at once), ``progress``, ``backend``, ...

        Returns:
            One row per episode: ``run``, ``seed``, ``checkpoint``, ``episode``, ``ep_return``,
            ``ep_length``; also written to ``exp_dir/evaluation_{which}.csv``.

        Raises:
            FileExistsError: an earlier evaluation of ``which`` is there and ``overwrite`` is false.
            FileNotFoundError: no manifest, or a run without such a checkpoint.
        """
        from online_trainer.orchestration.checkpoint_eval import evaluate_checkpoints

        target = exp_dir if exp_dir is not None else self.exp_dir
        if target is None:
            raise ValueError("evaluate needs an experiment directory: pass exp_dir=... or make the trainer with one.")
        if eval_env is not None:
            factory = EnvFactory(eval_env)
        else:  # the last multi_run's, to repeat its final evaluations
            factory = self._eval_env_factory if Path(target) == self.exp_dir else None
        parts = dataclasses.replace(self.parts, eval_env_factory=factory)
        options = resolve_execution(execution, num_workers=num_workers, progress=progress, backend=backend,
                                    start_method=start_method, torch_threads=torch_threads, ray_address=ray_address,
                                    ray_resources=ray_resources)
        parts.check_travel(options)
        return evaluate_checkpoints(parts, target, which, num_episodes, options, overwrite)

    load_run_metrics = staticmethod(storage.load_run_metrics)
    load_all_run_metrics = staticmethod(storage.load_all_run_metrics)
    load_transitions = staticmethod(storage.load_transitions)
    load_agent_logs = staticmethod(storage.load_agent_logs)
    load_args = staticmethod(storage.load_args)
    load_config = staticmethod(storage.load_config)
