"""The experiment config of the ``online-trainer`` command: a frozen dataclass tree read from YAML.

A config file names the env, the agent and how to run them::

    env:
      id: CartPole-v1
      num_envs: 4
    agent:
      name: ppo
      hyperparameters: {lr: 0.0003}
    num_runs: 5
    total_steps: 150_000

:func:`~online_trainer.config.loading.load_experiment_config` reads such a file, applies dotted ``key=value`` overrides
(values parsed as YAML: ``agent.hyperparameters.lr=1e-3``, ``num_runs=3``) and returns an
:class:`ExperimentConfig`. Every check runs before anything is built: keys and types (the agent's
hyperparameters against its ``Config`` included) in :func:`online_trainer.core.typed.build`, the one
checker of the package; values (agent and env names, budget, ranges) in the dataclasses' ``__post_init__``.
Problems raise :class:`ConfigError` with a message that names the key, the value and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from online_trainer.callbacks import (BasicCallBack, CallBack, CSVCallback, EmptyCallBack, JsonlCallback,
                                     MLflowCallback, TBCallBack, WandbCallback)
from online_trainer.core.raw_scores import SCORES
from online_trainer.core.typed import build, did_you_mean

__all__ = [
    "CALLBACKS",
    "CSV_FILE",
    "JSONL_FILE",
    "AgentConfig",
    "ConfigError",
    "EnvConfig",
    "ExecutionConfig",
    "ExperimentConfig",
]

JSONL_FILE = "callback.jsonl"
"""File written by the ``jsonl`` callback inside the experiment directory."""
CSV_FILE = "scalars.csv"
"""File written by the ``csv`` callback inside the experiment directory."""

CALLBACKS: dict[str, Callable[[Path], CallBack]] = {
    "tb": lambda exp_dir: TBCallBack(log_dir=exp_dir),
    "jsonl": lambda exp_dir: JsonlCallback(Path(exp_dir) / JSONL_FILE),
    "basic": lambda exp_dir: BasicCallBack(log_dir=exp_dir),
    "empty": lambda exp_dir: EmptyCallBack(),
    "csv": lambda exp_dir: CSVCallback(Path(exp_dir) / CSV_FILE),
    "mlflow": lambda exp_dir: MLflowCallback(),
    "wandb": lambda exp_dir: WandbCallback(),
}
"""Callback factories ``factory(exp_dir) -> callback`` by the name the ``callback`` key takes."""

VECTORIZATIONS = ("sync", "async")


class ConfigError(ValueError):
    """A config file or an override is invalid; the message says which key and how to fix it."""


# ----------------------------------------------------------------------------- schema


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnvConfig:
    """The env of every run, built with :func:`online_trainer.envs.make_env`."""

    id: str
    """A registered gymnasium id (``CartPole-v1``), or ``module:Env-v0`` to import ``module`` first."""
    num_envs: int = 1
    """Number of sub-envs stepped together in one vector env."""
    vectorization: str = "sync"
    """``sync`` (all sub-envs in the run's process) or ``async`` (one process per sub-env)."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the env's constructor (``gymnasium.make(id, **kwargs)``)."""
    wrappers: list[Any] = dataclasses.field(default_factory=list)
    """Single-env wrappers applied to each sub-env, in order: import paths (``minigrid.wrappers:ImgObsWrapper``)
    or one-key mappings of an import path to its keyword arguments
    (``{gymnasium.wrappers:ClipReward: {min_reward: -1, max_reward: 1}}``)."""
    vector_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the vector env class, not of the env (``{shared_memory: false}`` with ``async``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kwargs", dict(self.kwargs))
        object.__setattr__(self, "wrappers", list(self.wrappers))
        object.__setattr__(self, "vector_kwargs", dict(self.vector_kwargs))
        _check_positive("env.num_envs", self.num_envs)
        _check_choice("env.vectorization", self.vectorization, VECTORIZATIONS)
        _check_env_id(self.id)
        _check_wrappers(self.wrappers)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """The agent of every run: ``online_trainer.agents.AGENTS[name](env, **hyperparameters)``."""

    name: str
    """A key of ``online_trainer.agents.AGENTS``: ``dqn``, ``ppo``, ``q_learning`` or ``random``."""
    hyperparameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the agent's constructor (fields of its ``Config``); missing ones keep their defaults."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hyperparameters", dict(self.hyperparameters))
        from online_trainer.agents import AGENTS

        if self.name not in AGENTS:
            raise ConfigError(f"unknown agent agent.name={self.name!r}{did_you_mean(self.name, AGENTS)}; "
                              f"known agents: {', '.join(sorted(AGENTS))}.")
        config_cls = getattr(AGENTS[self.name], "Config", None)
        if dataclasses.is_dataclass(config_cls):
            build(config_cls, self.hyperparameters, "agent.hyperparameters.", ConfigError, owner=f"agent {self.name!r}")


BACKENDS = ("local", "slurm")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExecutionConfig:
    """Where the runs execute (``execution.backend=slurm execution.slurm.partition=gpu``)."""

    backend: str = "local"
    """``local`` (this process, or ``num_workers`` worker processes) or ``slurm`` (a Slurm job per run, at most
    ``num_workers`` running at once; needs ``pip install -e ".[slurm]"``)."""
    slurm: dict[str, Any] = dataclasses.field(default_factory=dict)
    """With ``backend: slurm``, the fields of ``online_trainer.SlurmOptions``: ``partition``, ``time`` (minutes),
    ``cpus_per_task``, ``mem``, ``gres``, ``account``, ``qos``, ``additional_parameters``, ``runs_per_job``,
    ``max_requeues``, ``wait``...; missing ones take the cluster's defaults."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "slurm", dict(self.slurm))
        _check_choice("execution.backend", self.backend, BACKENDS)
        if self.slurm and self.backend != "slurm":
            raise ConfigError(f"execution.slurm={self.slurm!r} applies to execution.backend=slurm only, but got "
                              f"execution.backend={self.backend!r}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """One experiment: ``num_runs`` seeds of ``agent`` on ``env``, each for the same budget."""

    env: EnvConfig
    """The env (section)."""
    agent: AgentConfig
    """The agent (section)."""
    num_runs: int = 5
    """Number of seeds; run ``i`` (from 1) uses seed ``seed_offset + (i - 1) * 10000``."""
    num_episodes: int | None = None
    """Budget: finished episodes per run. Give exactly one of num_episodes and total_steps."""
    total_steps: int | None = None
    """Budget: env steps (real transitions of all sub-envs) per run."""
    seed_offset: int | None = 0
    """Base seed of the runs; null draws one at random (it is recorded in manifest.json)."""
    num_workers: int = 1
    """Worker processes running seeds in parallel (Slurm jobs with ``execution.backend=slurm``); 1 runs them one
    after another in this process."""
    execution: ExecutionConfig = dataclasses.field(default_factory=ExecutionConfig)
    """Where the runs execute (section)."""
    callback: str = "tb"
    """Logging sink: ``tb`` (TensorBoard, buffered), ``jsonl``, ``basic`` (TensorBoard, unbuffered), ``empty``,
    ``csv`` (``scalars.csv``), ``mlflow`` (SQLite store in the experiment) or ``wandb`` (``WANDB_MODE`` applies)."""
    checkpoint_freq: int | None = None
    """Save the agent every this many episodes (episode budget) or env steps (step budget); null: never."""
    keep_checkpoints: int | None = None
    """Keep only the last this many periodic checkpoints of each run (``Last`` and ``Best`` stay); null: all."""
    checkpoint_buffers: bool = False
    """Put the agent's replay buffer into its checkpoints (DQN, SAC); false: as the agent's ``save_buffer`` says."""
    eval_freq: int | None = None
    """Evaluate greedily every this many env steps (step budget) or episodes, and at the end; null: never."""
    eval_episodes: int = 10
    """Complete episodes per evaluation."""
    exp_dir: str | None = None
    """Experiment directory (relative to the working directory); null: ``runs/<config file stem>``."""
    train: bool = True
    """False runs the agent in eval mode, without learning."""
    overwrite: bool = False
    """Replace an earlier experiment in exp_dir instead of refusing to run."""
    last_k: int = 10
    """Episodes per run averaged into its final return in the printed table."""
    torch_threads: int | None = 1
    """Threads of every pool (torch, BLAS, OpenMP) of each process running seeds, this one included while its runs
    go (null: as the environment and the libraries set them, one per core by default)."""
    score: str = "return"
    """What evaluations, the progress display and the printed table report: ``return`` (sums of the rewards the
    agent learns from) or ``raw`` (the scores of a ``gymnasium.wrappers:RecordEpisodeStatistics`` in env.wrappers)."""

    def __post_init__(self) -> None:
        for name in ("num_runs", "num_workers", "last_k", "eval_episodes"):
            _check_positive(name, getattr(self, name))
        for name in ("num_episodes", "total_steps", "checkpoint_freq", "keep_checkpoints", "torch_threads",
                     "eval_freq"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name))
        if (self.num_episodes is None) == (self.total_steps is None):
            raise ConfigError("give exactly one budget, num_episodes or total_steps, but got "
                              f"num_episodes={_yaml_value(self.num_episodes)}, "
                              f"total_steps={_yaml_value(self.total_steps)}.")
        if self.seed_offset is not None and self.seed_offset < 0:
            raise ConfigError(f"seed_offset must be a non-negative int or null, but got seed_offset={self.seed_offset}.")
        _check_choice("callback", self.callback, tuple(CALLBACKS))
        _check_choice("score", self.score, SCORES)
        if self.exp_dir is not None and not self.exp_dir.strip():
            raise ConfigError("exp_dir must be a path or null, but got an empty string.")

    def to_dict(self) -> dict[str, Any]:
        """The fully expanded config (defaults included) as plain YAML-able values."""
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------- checks


def _yaml_value(value: Any) -> str:
    return "null" if value is None else repr(value)


def _check_positive(name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{name} must be a positive int, but got {name}={value}.")


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}"
                          f"{did_you_mean(value, choices)}.")


def _check_env_id(env_id: str) -> None:
    """Raise ConfigError unless ``env_id`` is registered with gymnasium (listing close matches)."""
    import gymnasium as gym

    import online_trainer.envs  # noqa: F401  (registers Corridor-v0)

    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(f"env.id={env_id!r}: cannot import module {module!r} ({exc}).") from exc
    if name in gym.registry:
        return
    close = difflib.get_close_matches(name, list(gym.registry), n=5, cutoff=0.6)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    from online_trainer.envs._wrappers import env_id_hint

    package_hint = env_id_hint(env_id)
    if package_hint:
        raise ConfigError(f"unknown env env.id={env_id!r}: it is not in gymnasium.registry.{package_hint}")
    raise ConfigError(f"unknown env env.id={env_id!r}: it is not in gymnasium.registry{hint}. "
                      "List the registered ids with python -c 'import gymnasium; gymnasium.pprint_registry()'; "
                      "ids of other packages need their module first: 'module:Env-v0'.")


def _check_wrappers(wrappers: list[Any]) -> None:
    """Raise ConfigError naming the first entry of ``env.wrappers`` that cannot be imported or called so."""
    from online_trainer.envs._wrappers import resolve_wrappers

    try:
        resolve_wrappers(wrappers)
    except ValueError as exc:
        raise ConfigError(f"env.{exc}") from exc
