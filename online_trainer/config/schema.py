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
    evaluation: {freq: 10_000}
    execution: {num_workers: 2}

:func:`~online_trainer.config.loading.load_experiment_config` reads such a file, applies dotted ``key=value`` overrides
(values parsed as YAML: ``agent.hyperparameters.lr=1e-3``, ``evaluation.freq=5000``, ``num_runs=3``) and returns an
:class:`ExperimentConfig`. Every check runs before anything is built: keys and types (the agent's
hyperparameters against its ``Config`` included) in :func:`online_trainer.options.typed.build`, the one
checker of types and keys; values (agent and env names, budget, ranges) in the dataclasses' ``__post_init__``,
with the checks of :mod:`online_trainer.options.validation` (the option groups' own).
Problems raise :class:`ConfigError` with a message that names the key, the value and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from online_trainer.callbacks import (
    BasicCallBack,
    CallBack,
    CSVCallback,
    EmptyCallBack,
    JsonlCallback,
    MLflowCallback,
    MultiCallback,
    TBCallBack,
    WandbCallback,
)
from online_trainer.loop.hook_protocol import check_hooks
from online_trainer.options import validation
from online_trainer.options.groups import CheckpointOptions, EvaluationOptions, ExecutionOptions, RecordOptions
from online_trainer.options.typed import build, did_you_mean

__all__ = [
    "CALLBACKS",
    "CSV_FILE",
    "JSONL_FILE",
    "AgentConfig",
    "ConfigError",
    "EnvConfig",
    "HookConfig",
    "ExperimentConfig",
    "eval_env_config",
    "make_callback",
    "make_hooks",
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
CALLBACK_ALIASES = {
    "tensorboard": "tb",
    "tbcallback": "tb",
    "json": "jsonl",
    "json_lines": "jsonl",
    "none": "empty",
    "weights_and_biases": "wandb",
    "basiccallback": "basic",
}
"""Other names users give the callbacks (lowercase): a ``callback`` near one of them is answered with its name."""

_one_sink = validation.choice(tuple(CALLBACKS), aliases=CALLBACK_ALIASES)


def _check_sinks(name: str, value: str | list[str]) -> str | list[str]:
    """One sink's name, or a list of them (each once): ``callback: [tb, jsonl]`` logs to both."""
    if isinstance(value, str):
        return _one_sink(name, value)
    if not value:
        raise ValueError(
            f"{name}=[] names no sink: give one ({', '.join(CALLBACKS)}) or a list of them ('empty' logs nothing)."
        )
    for index, item in enumerate(value):
        _one_sink(f"{name}[{index}]", item)
    twice = sorted({item for item in value if value.count(item) > 1})
    if twice:
        raise ValueError(f"{name}={value!r} names {', '.join(twice)} more than once: list each sink once.")
    if {"tb", "basic"} <= set(value):  # V21: both write TensorBoard files into the experiment: every point twice
        raise ValueError(
            f"{name}={value!r} names tb and basic, which both write TensorBoard files into the experiment directory "
            "(each point would be there twice): keep one."
        )
    return value


def make_callback(names: str | Sequence[str], exp_dir: Path) -> CallBack:
    """The sink a config's ``callback`` names, writing into ``exp_dir``: one, or a :class:`MultiCallback` of several."""
    if isinstance(names, str):
        return CALLBACKS[names](exp_dir)
    sinks = [CALLBACKS[name](exp_dir) for name in names]
    return sinks[0] if len(sinks) == 1 else MultiCallback(sinks)


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
        _as_config_error(validation.positive_int, "env.num_envs", self.num_envs)
        _check_choice("env.vectorization", self.vectorization, VECTORIZATIONS)
        _check_env_id(self.id)
        _check_wrappers(self.wrappers)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """The agent of every run: ``agent_factory(name)(env, **hyperparameters)``."""

    name: str
    """A reference agent, a key of ``online_trainer.agents.AGENTS`` (``dqn``, ``ppo``, ``sac``, ``q_learning``,
    ``random``), or the import path of your own agent class or factory, ``package.module:Name``."""
    hyperparameters: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the agent's constructor (fields of its ``Config``); missing ones keep their defaults."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hyperparameters", dict(self.hyperparameters))
        factory = agent_factory(self.name)
        config_cls = getattr(factory, "Config", None)
        if isinstance(config_cls, type) and dataclasses.is_dataclass(config_cls):
            build(config_cls, self.hyperparameters, "agent.hyperparameters.", ConfigError, owner=f"agent {self.name!r}")
            return
        try:
            signature = inspect.signature(factory)
        except (TypeError, ValueError):  # nothing to inspect: the agent's constructor judges them
            return
        try:
            signature.bind(None, **self.hyperparameters)
        except TypeError as exc:
            takes = [
                name
                for name, p in list(signature.parameters.items())[1:]
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
            ]
            raise ConfigError(
                f"agent.hyperparameters={self.hyperparameters!r}: {self.name}(env, **hyperparameters) cannot be "
                f"called ({exc}); it takes {', '.join(takes) or 'only env'}."
            ) from exc


@dataclasses.dataclass(frozen=True, kw_only=True)
class HookConfig:
    """A hook of every run: ``hook_class(name)(**kwargs)``, made afresh by each call (docs/how-to/hooks.md)."""

    name: str
    """A hook of ``online_trainer.hooks`` (``StopOnReturn``, ``StopOnNoImprovement``, ``StopOnPlateau``), or the
    import path of your own hook class, ``package.module:Name``."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of its constructor."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kwargs", dict(self.kwargs))


def hook_class(key: str, name: str) -> Callable[..., Any]:
    """The hook class ``name`` (the config key ``key``) names: a hook of ``online_trainer.hooks`` by its class name,
    or ``package.module:Name``.

    Raises:
        ConfigError: naming ``key``: an unknown name, a module that does not import, a missing name, or an object that
            cannot be called.
    """
    from online_trainer.hooks.stoppers import StopOnNoImprovement, StopOnPlateau, StopOnReturn

    shipped = {cls.__name__: cls for cls in (StopOnNoImprovement, StopOnPlateau, StopOnReturn)}
    if name in shipped:
        return shipped[name]
    if ":" not in name:
        raise ConfigError(
            f"unknown hook {key}={name!r}{did_you_mean(name, shipped)}; the hooks of online_trainer.hooks: "
            f"{', '.join(shipped)}, or your own as 'package.module:ClassName' (its module importable: installed, or "
            "under the directory the command runs in)."
        )
    from online_trainer.envs._wrappers import import_object

    try:
        cls = import_object(key, name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not callable(cls):
        raise ConfigError(f"{key}={name!r} is a {type(cls).__name__}, not a hook class: name a class.")
    return cls


def make_hooks(configs: Sequence[HookConfig], eval_freq: int | None = None) -> list[Any]:
    """The hooks of a config's ``hooks`` section, in order, each made from its ``name`` and ``kwargs`` and checked as
    ``multi_run`` checks hooks (``eval_freq``: the config's ``evaluation.freq``).

    Raises:
        ConfigError: naming ``hooks[i]``: not a class, a class that does not take its ``kwargs`` or refuses them, or
            a hook ``multi_run`` would refuse.
    """
    made = []
    for index, config in enumerate(configs):
        cls = hook_class(f"hooks[{index}].name", config.name)
        if not isinstance(cls, type):  # V21: a function was called with the kwargs, and its error said nothing of hooks
            raise ConfigError(
                f"hooks[{index}].name={config.name!r} is a {type(cls).__name__}, not a hook class: name a class (a "
                "subclass of online_trainer.hooks.Hook)."
            )
        _check_hook_keywords(index, config, cls)
        try:
            made.append(cls(**config.kwargs))
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"could not make hooks[{index}] ({config.name}) with hooks[{index}].kwargs={config.kwargs!r}: {exc}"
            ) from exc
    try:
        check_hooks(made, eval_freq)
    except (TypeError, ValueError) as exc:  # in the config's words: its keys, not Python's call
        said = str(exc)
        # multi_run's words name hooks[i] by its repr or class (hooks[0]=OrderedDict() has none..., hooks[1], a
        # Every, has...): the config names it by its name
        shown = re.match(r"hooks\[(\d+)\](?:=.*? (?=has none)|, an? \w+, )", said)
        if shown is not None and int(shown[1]) < len(configs):
            said = f"hooks[{shown[1]}] ({configs[int(shown[1])].name}) {said[shown.end() :]}"
        raise ConfigError(said.replace("Pass evaluation=EvaluationOptions(freq=...)", "Set evaluation.freq")) from exc
    return made


def _check_hook_keywords(index: int, config: HookConfig, cls: type) -> None:
    """Refuse a key of ``hooks[index].kwargs`` that ``cls`` does not take, with the nearest it takes (V23: Python's
    "unexpected keyword argument 'thresh'" named neither ``threshold`` nor what the class takes)."""
    try:
        parameters = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):  # nothing to inspect: the class's own call judges them
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return
    takes = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for key in config.kwargs:
        if key not in takes:
            raise ConfigError(
                f"hooks[{index}].kwargs has {key!r}, which {config.name} does not take{did_you_mean(key, takes)}; "
                f"it takes: {', '.join(takes) or 'no keyword'}."
            )


def agent_factory(name: str) -> Callable[..., Any]:
    """The agent class (or factory) ``agent.name`` names: a reference agent's key, or ``package.module:Name``.

    Raises:
        ConfigError: naming ``agent.name``: an unknown key, a module that does not import, a missing name, or an
            object that cannot be called.
    """
    from online_trainer.agents import AGENTS

    if name in AGENTS:
        return AGENTS[name]
    if ":" not in name:
        raise ConfigError(
            f"unknown agent agent.name={name!r}{did_you_mean(name, AGENTS)}; known agents: {', '.join(sorted(AGENTS))}, "
            "or your own as 'package.module:ClassName' (its module importable: installed, or under the directory "
            "the command runs in)."
        )
    from online_trainer.envs._wrappers import import_object

    try:
        factory = import_object("agent.name", name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not callable(factory):
        raise ConfigError(
            f"agent.name={name!r} is a {type(factory).__name__}, not an agent class: name a class (or a function) "
            "called as Name(env, **hyperparameters)."
        )
    return factory


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """One experiment: ``num_runs`` seeds of ``agent`` on ``env``, each for the same budget.

    The sections ``evaluation``, ``checkpoints``, ``records`` and ``execution`` are the option groups of
    ``multi_run`` themselves (:mod:`online_trainer.options.groups`): their keys, defaults, checks and docs are
    declared there once (``evaluation.freq=5000``). ``evaluation.env`` is a section like ``env`` (an
    :class:`EnvConfig`): the env the runs are evaluated on; without it, the ``env`` section's.
    """

    env: EnvConfig
    """The env (section)."""
    agent: AgentConfig
    """The agent (section)."""
    num_runs: int = dataclasses.field(default=5, metadata={"check": validation.positive_int})
    """Number of seeds; run ``i`` (from 1) uses seed ``seed_offset + (i - 1) * 10000``."""
    num_episodes: int | None = None
    """Budget: finished episodes per run. Give exactly one of num_episodes and total_steps."""
    total_steps: int | None = None
    """Budget: env steps (real transitions of all sub-envs) per run."""
    seed_offset: int | None = 0
    """Base seed of the runs; null draws one at random (it is recorded in manifest.json)."""
    checkpoint_freq: int | None = dataclasses.field(default=None, metadata={"check": validation.optional_positive_int})
    """Save the agent every this many episodes (episode budget) or env steps (step budget); null: never."""
    dump_transitions: bool = False
    """Keep ``(obs, action, reward, terminated, truncated)`` per step in the records."""
    evaluation: EvaluationOptions | None = None
    """Greedy evaluation (section; null: none): ``freq``, ``episodes``, ``record_video``."""
    checkpoints: CheckpointOptions = dataclasses.field(default_factory=CheckpointOptions)
    """What the checkpoints keep (section): ``keep``, ``buffers``."""
    records: RecordOptions = dataclasses.field(default_factory=RecordOptions)
    """What the runs keep and log (section): ``stats_window``, ``score``, ..."""
    execution: ExecutionOptions = dataclasses.field(default_factory=ExecutionOptions)
    """How the runs execute (section): ``num_workers``, ``torch_threads``, ``start_method``, ..."""
    callback: str | list[str] = dataclasses.field(default="tb", metadata={"check": _check_sinks})
    """Logging sink: ``tb`` (TensorBoard, buffered), ``jsonl``, ``basic`` (TensorBoard, unbuffered), ``empty``,
    ``csv`` (``scalars.csv``), ``mlflow`` (SQLite store in the experiment) or ``wandb`` (``WANDB_MODE`` applies); or a
    list of them, each logging every value (``[tb, jsonl]``)."""
    hooks: list[HookConfig] = dataclasses.field(default_factory=list)
    """Hooks of every run, in order, each ``{name: ..., kwargs: {...}}``: a hook of ``online_trainer.hooks``
    (``{name: StopOnReturn, kwargs: {threshold: 475}}``) or your own, ``package.module:Name``."""
    exp_dir: str | None = None
    """Experiment directory (relative to the working directory); null: ``runs/<config file stem>``."""
    train: bool = True
    """False runs the agent in eval mode, without learning."""
    overwrite: bool = False
    """Replace an earlier experiment in exp_dir instead of refusing to run."""
    last_k: int = dataclasses.field(default=10, metadata={"check": validation.positive_int})
    """Episodes per run averaged into its final return in the printed table."""

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            check = spec.metadata.get("check")
            if check is not None:
                _as_config_error(check, spec.name, getattr(self, spec.name))
        _as_config_error(validation.budget, self.num_episodes, self.total_steps)
        _as_config_error(validation.seed_offset, self.seed_offset, self.num_runs)
        if self.evaluation is not None and self.evaluation.env is not None:
            evaluation = dataclasses.replace(self.evaluation, env=eval_env_config(self.evaluation.env))
            object.__setattr__(self, "evaluation", evaluation)
        if self.checkpoints.keep and self.checkpoint_freq is None:
            raise ConfigError(
                f"checkpoints.keep={self.checkpoints.keep!r} applies to periodic checkpoints, but "
                "checkpoint_freq is null: set checkpoint_freq too, or drop checkpoints.keep."
            )
        object.__setattr__(self, "hooks", list(self.hooks))
        # every hook made once, so that a name or a keyword is refused before anything runs
        make_hooks(self.hooks, None if self.evaluation is None else self.evaluation.freq)
        if self.exp_dir is not None and not self.exp_dir.strip():
            raise ConfigError("exp_dir must be a path or null, but got an empty string.")

    def to_dict(self) -> dict[str, Any]:
        """The fully expanded config (defaults included) as plain YAML-able values."""
        return dataclasses.asdict(self)


EVAL_ENV = "evaluation.env"
"""The config key of the env the runs are evaluated on, a section like ``env``."""


def eval_env_config(value: Any) -> EnvConfig:
    """The :class:`EnvConfig` of the ``evaluation.env`` section ``value`` (a mapping, or one already built).

    Raises:
        ConfigError: ``value`` is not a mapping, or the section is invalid (its keys named ``evaluation.env.*``).
    """
    if isinstance(value, EnvConfig):
        return value
    if not isinstance(value, dict):
        raise ConfigError(
            f"{EVAL_ENV}={value!r}: give the eval env as a section like env's, e.g. "
            f"{EVAL_ENV}: {{id: CartPole-v1, kwargs: {{max_episode_steps: 1000}}}}; or drop it to evaluate on env's."
        )
    try:
        return build(EnvConfig, value, f"{EVAL_ENV}.", ConfigError)
    except ConfigError as exc:  # EnvConfig's own checks name the env section's keys
        raise ConfigError(re.sub(r"(?<![\w.])env\.", f"{EVAL_ENV}.", str(exc))) from exc


def _as_config_error(check: Callable[..., Any], *args: Any) -> None:
    try:
        check(*args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


# ------------------------------------------------------------------------- checks


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(
            f"{name}={value!r} is not one of {', '.join(map(repr, choices))}{did_you_mean(value, choices)}."
        )


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
    raise ConfigError(
        f"unknown env env.id={env_id!r}: it is not in gymnasium.registry{hint}. "
        "List the registered ids with python -c 'import gymnasium; gymnasium.pprint_registry()'; "
        "ids of other packages need their module first: 'module:Env-v0'."
    )


def _check_wrappers(wrappers: list[Any]) -> None:
    """Raise ConfigError naming the first entry of ``env.wrappers`` that cannot be imported or called so."""
    from online_trainer.envs._wrappers import resolve_wrappers

    try:
        resolve_wrappers(wrappers)
    except ValueError as exc:
        raise ConfigError(f"env.{exc}") from exc
