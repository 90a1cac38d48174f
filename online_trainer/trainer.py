"""OnlineTrainer: the public entry point."""

from __future__ import annotations

import argparse
import datetime
import logging
import multiprocessing
import os
import pickle
import shutil
import sys
from pathlib import Path
from typing import Any, Mapping

from callbacks import EmptyCallBack, TBCallBack
from online_trainer import executors, seeding, storage, validation
from online_trainer.errors import RunFailure, RunsFailedError
from online_trainer.factories import AgentFactory, EnvFactory, autoreset_mode, check_agent
from online_trainer.progress import NoProgress, ProgressDisplay
from online_trainer.ray_backend import RayExecutor
from online_trainer.run import RunResult, RunSpec
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
            start_method: multiprocessing start method of the worker processes.
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
        num_workers = validation.positive_int("num_workers", num_workers, "Use 1 to run in this process.")
        torch_threads = validation.positive_int("torch_threads", torch_threads)
        if backend not in executors.BACKENDS:
            raise ValueError(f"backend must be one of {executors.BACKENDS}, but got backend={backend!r}.")
        if ray_resources is not None and backend != "ray":
            raise ValueError(f"ray_resources={ray_resources!r} applies to backend='ray' only, but got backend={backend!r}.")
        if start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(f"start_method must be one of {multiprocessing.get_all_start_methods()}, but got "
                             f"start_method={start_method!r}.")
        seed_offset = validation.seed_offset(seed_offset)
        checkpoint_freq = validation.optional_positive_int("checkpoint_freq", checkpoint_freq)
        metrics_flush_every = validation.positive_int("metrics_flush_every", metrics_flush_every)
        tuning_hp = validation.tuning_hp(tuning_hp)
        validation.needs_exp_dir(self.exp_dir, dump_metrics=dump_metrics, checkpoint_freq=checkpoint_freq)
        dump_metrics = self.exp_dir is not None if dump_metrics is None else bool(dump_metrics)
        if not keep_records and not dump_metrics:
            raise ValueError("keep_records=False needs dump_metrics=True and an exp_dir, or the records would be lost.")
        probe = self._probe(tuning_hp, checkpoint_freq)
        in_workers = backend == "ray" or num_workers > 1
        if in_workers:
            executors.check_picklable({"env": self.env_factory.source, "agent": self.agent_factory.source,
                                       "trainer.call_back": self.call_back, "tuning_hp": tuning_hp})
        probe["torch_threads"] = torch_threads if in_workers else _current_torch_threads()
        probe["backend"] = backend
        if self.exp_dir is not None:
            self._prepare_exp_dir(overwrite)

        base_seed = seed_offset if seed_offset is not None else seeding.draw_base_seed()
        if seed_offset is None:
            logger.info("seed_offset=None: drew base seed %d (pass seed_offset=%d to repeat)", base_seed, base_seed)
        specs = [
            RunSpec(
                run_idx=i,
                seed=seeding.run_seed(base_seed, i),
                env_factory=self.env_factory,
                agent_factory=self.agent_factory,
                budget=budget,
                callback=self.call_back,
                train=self.train,
                tuning_hp=tuning_hp,
                exp_dir=None if self.exp_dir is None else os.fspath(self.exp_dir),
                dump_metrics=dump_metrics,
                checkpoint_freq=checkpoint_freq,
                dump_transitions=dump_transitions,
                keep_records=keep_records,
                metrics_flush_every=metrics_flush_every,
            )
            for i in range(num_runs)
        ]
        manifest = self._manifest(specs, seed_offset, base_seed, budget, probe, num_workers, tuning_hp)
        results: dict[int, RunResult] = {}

        def on_result(result: RunResult) -> None:
            results[result.run_idx] = result
            entry = manifest["runs"][result.run_idx]
            entry.update(status=result.status, episodes=result.episodes, global_step=result.global_step,
                         wall_time=round(result.wall_time, 3), error=result.error)
            if self.exp_dir is not None:
                storage.write_manifest(self.exp_dir, manifest)

        display = ProgressDisplay(num_runs, budget.total, budget.unit) if progress else NoProgress()
        try:
            if backend == "ray":
                RayExecutor(ray_address, ray_resources, num_workers, torch_threads).run(specs, display, on_result)
            elif num_workers > 1:
                WorkerPool(num_workers, start_method, torch_threads).run(specs, display, on_result)
            else:
                executors.run_serial(specs, display, on_result)
        except BaseException:
            for entry in manifest["runs"]:
                if entry["status"] == "pending":
                    entry["status"] = "interrupted"
            if self.exp_dir is not None:
                storage.write_manifest(self.exp_dir, manifest)
            raise
        finally:
            display.close_all()
            self.call_back.close()
        return self._collect(specs, results, dump_metrics, keep_records)

    def _probe(self, tuning_hp: dict[str, Any] | None, checkpoint_freq: int | None) -> dict[str, Any]:
        """Build one env and agent to check them before any run starts."""
        env = self.env_factory()
        try:
            agent = self.agent_factory(env)
            check_agent(agent, self.agent_factory.source)
            if tuning_hp is not None:
                if not callable(getattr(agent, "set_hp", None)):
                    raise TypeError(f"tuning_hp={tuning_hp!r} was given, but the agent {agent!r} has no set_hp method.")
                agent.set_hp(dict(tuning_hp))
            if checkpoint_freq is not None and not callable(getattr(agent, "save", None)):
                raise TypeError(
                    f"checkpoint_freq={checkpoint_freq} needs agent.save(path=None), which the agent {agent!r} lacks."
                )
            if env.num_envs > seeding.SEED_STRIDE:
                raise ValueError(f"num_envs={env.num_envs} exceeds {seeding.SEED_STRIDE}: runs would share env seeds.")
            return {"num_envs": env.num_envs, "autoreset_mode": autoreset_mode(env).name}
        finally:
            self.env_factory.release(env)

    def _prepare_exp_dir(self, overwrite: bool) -> None:
        earlier = storage.existing_experiment_files(self.exp_dir) if self.exp_dir.is_dir() else []
        if earlier and not overwrite:
            names = ", ".join(p.name for p in earlier[:4]) + (", ..." if len(earlier) > 4 else "")
            raise FileExistsError(
                f"exp_dir={os.fspath(self.exp_dir)!r} already holds an earlier experiment ({names}): pass "
                "overwrite=True to replace it, or choose another exp_dir."
            )
        if overwrite:
            if self.exp_dir.is_dir():
                storage.remove_experiment_files(self.exp_dir)
            for name in (storage.CONFIG_FILE, storage.ARGS_FILE):
                (self.exp_dir / name).unlink(missing_ok=True)
        if self.config is not None and (self.exp_dir / storage.CONFIG_FILE).exists():
            storage.write_text_once(self.exp_dir / storage.CONFIG_FILE, self.config.read_text())
        if self.args_yaml is not None and (self.exp_dir / storage.ARGS_FILE).exists():
            storage.write_text_once(self.exp_dir / storage.ARGS_FILE, self.args_yaml)
        self.exp_dir.mkdir(parents=True, exist_ok=True)
        if self.config is not None:
            if not (self.exp_dir / storage.CONFIG_FILE).exists():
                shutil.copyfile(self.config, self.exp_dir / storage.CONFIG_FILE)
        if self.args_yaml is not None:
            storage.write_text_once(self.exp_dir / storage.ARGS_FILE, self.args_yaml)

    def _manifest(self, specs, seed_offset, base_seed, budget, probe, num_workers, tuning_hp) -> dict[str, Any]:
        manifest = {
            "format": 1,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "num_runs": len(specs),
            "seed_offset": seed_offset,
            "base_seed": base_seed,
            "seed_stride": seeding.SEED_STRIDE,
            "seeds": [spec.seed for spec in specs],
            "budget": {"num_episodes": budget.num_episodes, "total_steps": budget.total_steps},
            "train": self.train,
            "tuning_hp": tuning_hp,
            "num_workers": num_workers,
            **probe,
            "runs": [{"run": s.run_idx, "seed": s.seed, "status": "pending"} for s in specs],
        }
        if self.exp_dir is not None:
            storage.write_manifest(self.exp_dir, manifest)
        return manifest

    def _collect(self, specs, results, dump_metrics, keep_records) -> list[list[dict[str, Any]] | None]:
        failures = [
            RunFailure(r.run_idx, r.seed, r.extra.get("exception", "?"), r.error or "")
            for r in sorted(results.values(), key=lambda r: r.run_idx)
            if r.status == "failed"
        ]
        runs = [results[s.run_idx].records if s.run_idx in results else None for s in specs]
        if self.exp_dir is not None and dump_metrics and keep_records and not failures:
            storage.write_atomic(self.exp_dir / storage.ALL_METRICS_FILE, pickle.dumps(runs, pickle.HIGHEST_PROTOCOL))
        if failures:
            error = RunsFailedError(failures, runs)
            first = next((r.extra.get("exception_object") for r in results.values() if r.status == "failed"), None)
            raise error from first
        return runs

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
