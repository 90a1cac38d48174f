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
:class:`ExperimentConfig`. Every check (unknown keys, types, agent and env names,
budget) runs in the dataclasses, before anything is built; problems raise :class:`ConfigError` with a
message that names the key, the value and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

from online_trainer.callbacks import BasicCallBack, CallBack, EmptyCallBack, JsonlCallback, TBCallBack

__all__ = [
    "CALLBACKS",
    "JSONL_FILE",
    "AgentConfig",
    "ConfigError",
    "EnvConfig",
    "ExperimentConfig",
]

JSONL_FILE = "callback.jsonl"
"""File written by the ``jsonl`` callback inside the experiment directory."""

CALLBACKS: dict[str, Callable[[Path], CallBack]] = {
    "tb": lambda exp_dir: TBCallBack(log_dir=exp_dir),
    "jsonl": lambda exp_dir: JsonlCallback(Path(exp_dir) / JSONL_FILE),
    "basic": lambda exp_dir: BasicCallBack(log_dir=exp_dir),
    "empty": lambda exp_dir: EmptyCallBack(),
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
        _check_types(self, "env.")
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
        _check_types(self, "agent.")
        object.__setattr__(self, "hyperparameters", dict(self.hyperparameters))
        from online_trainer.agents import AGENTS

        if self.name not in AGENTS:
            raise ConfigError(f"unknown agent agent.name={self.name!r}{did_you_mean(self.name, AGENTS)}; "
                              f"known agents: {', '.join(sorted(AGENTS))}.")
        config_cls = getattr(AGENTS[self.name], "Config", None)
        if dataclasses.is_dataclass(config_cls):
            valid = [f.name for f in dataclasses.fields(config_cls)]
            for key in self.hyperparameters:
                if key not in valid:
                    listed = ", ".join(valid) if valid else f"none: {self.name} has no hyperparameters"
                    raise ConfigError(f"unknown key 'agent.hyperparameters.{key}': agent {self.name!r} has no "
                                      f"hyperparameter {key!r}{did_you_mean(key, valid)}; valid ones: {listed}.")
            from online_trainer.agents._base import check_keys

            try:
                check_keys(config_cls, self.hyperparameters, self.name)
            except TypeError as exc:
                raise ConfigError(f"agent.hyperparameters: {exc}") from exc


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
    """Worker processes running seeds in parallel; 1 runs them one after another in this process."""
    callback: str = "tb"
    """Logging sink: ``tb`` (TensorBoard, buffered), ``jsonl``, ``basic`` (TensorBoard, unbuffered) or ``empty``."""
    checkpoint_freq: int | None = None
    """Save the agent every this many episodes (episode budget) or env steps (step budget); null: never."""
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
    """Torch threads of every process running seeds (null: torch's default, one per core)."""
    score: str = "return"
    """What evaluations, the progress display and the printed table report: ``return`` (sums of the rewards the
    agent learns from) or ``raw`` (the scores of a ``gymnasium.wrappers:RecordEpisodeStatistics`` in env.wrappers)."""

    def __post_init__(self) -> None:
        _check_types(self, "")
        for name in ("num_runs", "num_workers", "last_k", "eval_episodes"):
            _check_positive(name, getattr(self, name))
        for name in ("num_episodes", "total_steps", "checkpoint_freq", "torch_threads", "eval_freq"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name))
        if (self.num_episodes is None) == (self.total_steps is None):
            raise ConfigError("give exactly one budget, num_episodes or total_steps, but got "
                              f"num_episodes={_yaml_value(self.num_episodes)}, "
                              f"total_steps={_yaml_value(self.total_steps)}.")
        if self.seed_offset is not None and self.seed_offset < 0:
            raise ConfigError(f"seed_offset must be a non-negative int or null, but got seed_offset={self.seed_offset}.")
        _check_choice("callback", self.callback, tuple(CALLBACKS))
        _check_choice("score", self.score, ("return", "raw"))
        if self.exp_dir is not None and not self.exp_dir.strip():
            raise ConfigError("exp_dir must be a path or null, but got an empty string.")

    def to_dict(self) -> dict[str, Any]:
        """The fully expanded config (defaults included) as plain YAML-able values."""
        return dataclasses.asdict(self)


# ------------------------------------------------------------------------- checks


def did_you_mean(word: str, choices: Sequence[str] | Mapping[str, Any], prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` (difflib), or an empty string."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""


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


def _union_args(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return None


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` has the type ``hint`` (``bool`` is not an int; an int is a float)."""
    options = _union_args(hint)
    if options is not None:
        return any(_matches(value, option) for option in options)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if typing.get_origin(hint) is dict or hint is dict:
        return isinstance(value, dict) and all(isinstance(key, str) for key in value)
    if typing.get_origin(hint) is list or hint is list:
        return isinstance(value, list)
    return isinstance(value, hint)


_TYPE_NAMES = {int: "an int", float: "a number", bool: "a bool (true or false)", str: "a string",
               type(None): "null"}


def type_name(hint: Any) -> str:
    options = _union_args(hint)
    if options is not None:
        return " or ".join(type_name(option) for option in options)
    if typing.get_origin(hint) is dict or hint is dict:
        return "a mapping with string keys"
    if typing.get_origin(hint) is list or hint is list:
        return "a list"
    if dataclasses.is_dataclass(hint):
        return f"a mapping with keys {', '.join(f.name for f in dataclasses.fields(hint))}"
    return _TYPE_NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def _check_types(obj: Any, prefix: str) -> None:
    """Raise ConfigError naming the first field of the dataclass ``obj`` whose value has the wrong type."""
    hints = typing.get_type_hints(type(obj))
    for field in dataclasses.fields(obj):
        value, hint = getattr(obj, field.name), hints[field.name]
        if not _matches(value, hint):
            hint_text = ""
            if isinstance(value, float) and value.is_integer() and _matches(1, hint):
                written = f"{int(value)} or {int(value):_}" if abs(value) >= 10_000 else f"{int(value)}"
                hint_text = f" (write {written}, without a decimal point or exponent)"
            raise ConfigError(f"{prefix}{field.name}={value!r} has the wrong type: expected {type_name(hint)}, "
                              f"got {type(value).__name__}{hint_text}.")
