"""OnlineTrainer: the public entry point."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from callbacks import EmptyCallBack, TBCallBack
from online_trainer import executors, seeding, storage, validation
from online_trainer.errors import RunsFailedError
from online_trainer.executors import ExecutionOptions
from online_trainer.experiment import Experiment
from online_trainer.factories import AgentFactory, EnvFactory, autoreset_mode, check_agent
from online_trainer.run import RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from online_trainer.workers import WorkerPool

logger = logging.getLogger(__name__)


class OnlineTrainer:
    """Runs an agent on an env over many seeds, with exact episode accounting.

    Args:
        env: a gymnasium ``VectorEnv``, a single ``Env`` (wrapped into a vector env of one),
            or a zero-argument factory returning either. Every run gets a fresh env.
        agent: an agent following the protocol of :mod:`online_trainer.protocol`, or a
            factory ``agent_factory(env) -> agent``. Every run gets a fresh agent.
        exp_dir: experiment directory for metrics, checkpoints and logs (created if
            missing). None keeps everything in memory.
        train: False calls the agent's ``eval()`` and never calls ``update``.
        config: path of a ``.py`` file, copied to ``exp_dir/config.py``.
        args: an ``argparse.Namespace`` (or a dict), written to ``exp_dir/args.yaml``.

    Attributes:
        call_back: the logging callback; ``TBCallBack(log_dir=exp_dir, flush_every=1)``
            by default (``EmptyCallBack()`` without an exp_dir). Reassign it freely.
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

    def multi_run(
        self,
        num_runs: int,
        num_episodes: int | None = None,
        total_steps: int | None = None,
        seed_offset: int | None = None,
        dump_metrics: bool | None = None,
        checkpoint_freq: int | None = None,
        dump_transitions: bool = False,
        num_workers: int = 1,
        tuning_hp: dict[str, Any] | None = None,
        keep_records: bool = True,
        overwrite: bool = False,
        progress: bool = True,
        start_method: str = "spawn",
        torch_threads: int = 1,
        backend: str = "local",
        ray_address: str | None = None,
        ray_resources: Mapping[str, Any] | None = None,
        metrics_flush_every: int = 10,
    ) -> list[list[dict[str, Any]] | None]:
        """Run ``num_runs`` seeds, each for ``num_episodes`` episodes or ``total_steps`` env steps.

        Args:
            num_runs: number of seeds.
            num_episodes: stop each run after exactly this many finished episodes (of all
                its sub-envs together).
            total_steps: stop each run after this many env steps (real transitions of all
                sub-envs together; overshoot is below ``num_envs``). Give exactly one budget.
            seed_offset: run ``i`` uses seed ``seed_offset + i * 10000``; None draws a random
                base once. Seeds are in ``manifest.json`` and in every record.
            dump_metrics: stream records to ``exp_dir/metrics_run{i}.pkl``; None means "when
                an exp_dir is set".
            checkpoint_freq: save the agent every this many episodes (episode budget) or env
                steps (step budget), plus ``Run{i}_Last`` and ``Run{i}_Best_agent.t``.
            dump_transitions: keep ``(obs, action, reward, terminated, truncated)`` per step in
                the records (slow and large: for debugging and offline datasets).
            num_workers: runs going at once: worker processes (``backend="local"``; 1 runs
                in this process) or Ray tasks in flight (``backend="ray"``).
            tuning_hp: hyperparameters given to every agent through ``set_hp``.
            keep_records: False keeps records out of memory (they are on disk): memory stays
                flat and ``None`` stands for each run in the result.
            overwrite: replace the outputs of an earlier experiment in ``exp_dir``.
            progress: show an overall bar and a bar per active run.
            start_method: multiprocessing start method of the worker processes; ``"forkserver"``
                starts new workers in about 0.2 s after the session's first call (the server
                imports torch once).
            torch_threads: torch threads in each worker process or Ray task, so that workers
                do not fight over cores (runs in this process keep the current setting).
            backend: ``"local"`` (this process or worker processes) or ``"ray"`` (Ray tasks,
                on a local Ray or the cluster at ``ray_address``/``RAY_ADDRESS``; the
                experiment directory must be on a filesystem all nodes share).
            ray_address: address of a Ray cluster; None uses ``RAY_ADDRESS`` or a local Ray.
            ray_resources: Ray options per run, e.g. ``{"num_cpus": 2, "num_gpus": 0.5}``.
            metrics_flush_every: records per chunk of the metrics streams.

        Returns:
            One list of episode records per run (``None`` per run when ``keep_records`` is False).

        Raises:
            ValueError, TypeError, FileNotFoundError, FileExistsError: bad input, before any env step.
            RunsFailedError: some runs raised; the others completed.
        """
        budget = validation.budget(num_episodes, total_steps)
        num_runs = validation.positive_int("num_runs", num_runs)
        execution = ExecutionOptions(num_workers, backend, start_method, torch_threads, ray_address, ray_resources,
                                     progress).check()
        seed_offset = validation.seed_offset(seed_offset)
        tuning_hp = validation.tuning_hp(tuning_hp)
        options = self._run_options(budget, dump_metrics, checkpoint_freq, dump_transitions, keep_records,
                                    metrics_flush_every)
        with executors.early_workers(execution, num_runs) as pool:
            probe = self._probe([tuning_hp], checkpoint_freq, execution)
            if self.exp_dir is not None:
                self._prepare_exp_dir(overwrite)
            base_seed = self._base_seed(seed_offset)
            manifest = Experiment.new_manifest(num_runs, seed_offset, base_seed, {**probe, "tuning_hp": tuning_hp})
            specs = [self._spec(i, seed, options, tuning_hp, self.exp_dir) for i, seed in enumerate(manifest["seeds"])]
            experiment = Experiment(self.exp_dir, manifest, specs)
            self._execute([experiment], execution, pool)
        runs = experiment.runs(keep_records)
        failures = experiment.failures()
        if failures:
            raise RunsFailedError(failures, runs) from experiment.first_exception()
        if self.exp_dir is not None and options["dump_metrics"] and keep_records:
            experiment.write_all_metrics(runs)
        return runs

    def _run_options(self, budget, dump_metrics, checkpoint_freq, dump_transitions, keep_records,
                     metrics_flush_every) -> dict[str, Any]:
        """Validate the options every run of a call shares; return them as RunSpec fields."""
        checkpoint_freq = validation.optional_positive_int("checkpoint_freq", checkpoint_freq)
        metrics_flush_every = validation.positive_int("metrics_flush_every", metrics_flush_every)
        validation.needs_exp_dir(self.exp_dir, dump_metrics=dump_metrics, checkpoint_freq=checkpoint_freq)
        dump_metrics = self.exp_dir is not None if dump_metrics is None else bool(dump_metrics)
        if not keep_records and not dump_metrics:
            raise ValueError("keep_records=False needs dump_metrics=True and an exp_dir, or the records would be lost.")
        return {"budget": budget, "train": self.train, "dump_metrics": dump_metrics, "checkpoint_freq": checkpoint_freq,
                "dump_transitions": bool(dump_transitions), "keep_records": bool(keep_records),
                "metrics_flush_every": metrics_flush_every, "callback": self.call_back}

    def _spec(self, run_idx: int, seed: int, options: dict[str, Any], tuning_hp: dict[str, Any] | None,
              exp_dir: Path | None, **naming: Any) -> RunSpec:
        """The spec of one run; ``naming`` sets ``task_id``, ``label`` and ``tag_prefix`` in sweeps."""
        return RunSpec(run_idx=run_idx, seed=seed, env_factory=self.env_factory, agent_factory=self.agent_factory,
                       tuning_hp=tuning_hp, exp_dir=None if exp_dir is None else os.fspath(exp_dir), **naming,
                       **options)

    @staticmethod
    def _base_seed(seed_offset: int | None) -> int:
        if seed_offset is not None:
            return seed_offset
        base_seed = seeding.draw_base_seed()
        logger.info("seed_offset=None: drew base seed %d (pass seed_offset=%d to repeat)", base_seed, base_seed)
        return base_seed

    def _execute(self, experiments: list[Experiment], execution: ExecutionOptions,
                 pool: WorkerPool | None = None) -> None:
        """Run the specs of every experiment together (in ``pool`` if started); route each result to its experiment."""
        owners = {spec.key: experiment for experiment in experiments for spec in experiment.specs}
        specs = [spec for experiment in experiments for spec in experiment.specs]
        try:
            executors.execute(specs, execution, lambda result: owners[result.key].on_result(result), pool)
        except BaseException:
            for experiment in experiments:
                experiment.mark_interrupted()
            raise
        finally:
            self.call_back.close()

    def _probe(self, hp_sets: list[dict[str, Any] | None], checkpoint_freq: int | None,
               execution: ExecutionOptions) -> dict[str, Any]:
        """Build one env and agent to check them, and each set of hyperparameters, before any run starts."""
        env = self.env_factory()
        try:
            agent = self.agent_factory(env)
            check_agent(agent, self.agent_factory.source)
            for hp in hp_sets:
                if hp is None:
                    continue
                if not callable(getattr(agent, "set_hp", None)):
                    raise TypeError(f"tuning_hp={hp!r} was given, but the agent {agent!r} has no set_hp method.")
                agent.set_hp(dict(hp))
            if checkpoint_freq is not None and not callable(getattr(agent, "save", None)):
                raise TypeError(
                    f"checkpoint_freq={checkpoint_freq} needs agent.save(path=None), which the agent {agent!r} lacks."
                )
            if env.num_envs > seeding.SEED_STRIDE:
                raise ValueError(f"num_envs={env.num_envs} exceeds {seeding.SEED_STRIDE}: runs would share env seeds.")
            num_envs, mode = env.num_envs, autoreset_mode(env).name
        finally:
            self.env_factory.release(env)
        if execution.in_workers:
            executors.check_picklable({"env": self.env_factory.source, "agent": self.agent_factory.source,
                                       "trainer.call_back": self.call_back})
        return {
            "num_envs": num_envs,
            "autoreset_mode": mode,
            "train": self.train,
            "backend": execution.backend,
            "num_workers": execution.num_workers,
            "torch_threads": execution.torch_threads if execution.in_workers else _current_torch_threads(),
        }

    def _prepare_exp_dir(self, overwrite: bool) -> None:
        """Refuse an earlier experiment (unless ``overwrite``), then write config.py and args.yaml."""
        earlier = storage.existing_experiment_files(self.exp_dir) if self.exp_dir.is_dir() else []
        if earlier and not overwrite:
            names = ", ".join(p.name for p in earlier[:4]) + (", ..." if len(earlier) > 4 else "")
            raise FileExistsError(
                f"exp_dir={os.fspath(self.exp_dir)!r} already holds an earlier experiment ({names}): pass "
                "overwrite=True to replace it, or choose another exp_dir."
            )
        inputs = {storage.CONFIG_FILE: self.config.read_text() if self.config is not None else None,
                  storage.ARGS_FILE: self.args_yaml}
        if overwrite and self.exp_dir.is_dir():
            storage.remove_experiment_files(self.exp_dir)
            for name in inputs:
                (self.exp_dir / name).unlink(missing_ok=True)
        for name, text in inputs.items():  # check both before writing either
            if text is not None and (self.exp_dir / name).exists():
                storage.write_text_once(self.exp_dir / name, text)
        self.exp_dir.mkdir(parents=True, exist_ok=True)
        for name, text in inputs.items():
            if text is not None:
                storage.write_text_once(self.exp_dir / name, text)

    def sweep(
        self,
        configurations: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]],
        num_runs: int,
        num_episodes: int | None = None,
        total_steps: int | None = None,
        seed_offset: int | None = None,
        metric: str = "iqm",
        last_k: int = 10,
        checkpoint_freq: int | None = None,
        num_workers: int = 1,
        backend: str = "local",
        progress: bool = True,
        start_method: str = "spawn",
        torch_threads: int = 1,
        ray_address: str | None = None,
        ray_resources: Mapping[str, Any] | None = None,
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
            last_k: a run's final return is the mean return of its last ``last_k`` episodes.
            checkpoint_freq, num_workers, backend, progress, start_method, torch_threads,
                ray_address, ray_resources: as in :meth:`multi_run`.

        Returns:
            One row per configuration, best first: ``rank``, its hyperparameters, ``experiment``
            (its directory name), mean/median/IQM with 95% bootstrap CIs, ``num_runs``. It is
            also written to ``exp_dir/sweep_results.csv``.

        Raises:
            RunsFailedError: some runs failed (after the ranking of the others is written).
        """
        from online_trainer.sweep import run_sweep

        execution = ExecutionOptions(num_workers, backend, start_method, torch_threads, ray_address, ray_resources,
                                     progress)
        return run_sweep(self, configurations, num_runs, num_episodes, total_steps, seed_offset, metric, last_k,
                         checkpoint_freq, execution)

    load_run_metrics = staticmethod(storage.load_run_metrics)
    load_all_run_metrics = staticmethod(storage.load_all_run_metrics)
    load_transitions = staticmethod(storage.load_transitions)
    load_agent_logs = staticmethod(storage.load_agent_logs)
    load_args = staticmethod(storage.load_args)
    load_config = staticmethod(storage.load_config)


def _current_torch_threads() -> int | None:
    """Threads torch uses in this process (None when torch is not imported: it was not used)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None
