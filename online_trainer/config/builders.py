"""Picklable env and agent factories built from an experiment config (the reference ``agents`` and ``envs``)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from online_trainer.config.loading import load_experiment_config
from online_trainer.config.schema import EVAL_ENV, AgentConfig, ConfigError, EnvConfig, ExperimentConfig, agent_factory
from online_trainer.options.groups import EvaluationOptions
from online_trainer.records.storage import CONFIG_YAML


class AgentBuilder:
    """A picklable agent factory: ``AgentBuilder(config)(env)`` is ``agent_factory(name)(env, **hyperparameters)``.

    It holds the names, not the class: an agent of the user's own module is imported where the run builds it.
    An agent that rejects its hyperparameters or the env raises :class:`ConfigError` naming both config keys; the
    run that builds the agent raises it before its first env step, which stops every run.
    """

    def __init__(self, config: AgentConfig) -> None:
        self.name = config.name
        self.hyperparameters = dict(config.hyperparameters)
        self.description = f"agent.name={self.name!r}"
        """What messages about the agents it makes call it (``made by agent.name='pkg.module:Class'``)."""

    def __call__(self, env: Any) -> Any:
        factory = agent_factory(self.name)
        try:
            return factory(env, **self.hyperparameters)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"could not build agent.name={self.name!r} with agent.hyperparameters={self.hyperparameters!r} on "
                f"this env (env.id, env.wrappers): {exc}"
            ) from exc

    def __repr__(self) -> str:
        return f"AgentBuilder({self.name!r}, {self.hyperparameters!r})"


class EnvBuilder:
    """A picklable env factory wrapping ``online_trainer.envs.make_env``'s, whose failures name the config section
    (``env``, or ``evaluation.env``)."""

    def __init__(self, make_env: Any, section: str = "env") -> None:
        self.make_env = make_env
        self.section = section

    def __call__(self) -> Any:
        from online_trainer.envs._wrappers import WrapperError

        section = self.section
        try:
            return self.make_env()
        except WrapperError as exc:
            raise ConfigError(f"{section}.{exc}") from exc
        except (TypeError, ValueError, LookupError) as exc:
            # the env's own keywords, its wrappers' and the vector env's all meet here: the section is what is known.
            # A value the env looks up (FrozenLake's map_name: '9x9') raises KeyError, whose text is the key alone (C17)
            said = f"{type(exc).__name__}: {exc}" if isinstance(exc, LookupError) else str(exc)
            hint = (
                f" In a config: {section}.vector_kwargs: {{shared_memory: false}}."
                if "shared_memory" in str(exc)
                else f" Check {section}.id, {section}.kwargs and {section}.vector_kwargs."
            )
            said = said if said.rstrip().endswith(".") else f"{said}."  # V18: "KeyError: '9x9' Check env.id"
            raise ConfigError(f"{section}: could not build the env {self.make_env!r}: {said}{hint}") from exc

    def __repr__(self) -> str:
        return repr(self.make_env)


def env_factory(config: EnvConfig, section: str = "env") -> EnvBuilder:
    """A picklable zero-argument factory of the vector env that ``config`` describes.

    Args:
        config: the env section.
        section: its key in the config, named by errors (``env``, or ``evaluation.env``).

    Raises:
        ConfigError: when ``online_trainer.envs.make_env`` rejects the settings.
    """
    from online_trainer.envs import make_env

    try:
        return EnvBuilder(
            make_env(
                config.id,
                num_envs=config.num_envs,
                vectorization=config.vectorization,
                wrappers=config.wrappers,
                vector_kwargs=config.vector_kwargs or None,
                **config.kwargs,
            ),
            section,
        )
    except ValueError as exc:
        raise ConfigError(f"{section}: {exc}") from exc


def evaluation_options(config: ExperimentConfig) -> EvaluationOptions | None:
    """The config's ``evaluation`` section as ``multi_run`` takes it: its ``evaluation.env`` section (if any) made
    into a factory of that env."""
    evaluation = config.evaluation
    if evaluation is None or not isinstance(evaluation.env, EnvConfig):
        return evaluation
    return dataclasses.replace(evaluation, env=env_factory(evaluation.env, EVAL_ENV))


def eval_env_factory(config: ExperimentConfig) -> EnvBuilder | None:
    """A factory of the env the config's runs are evaluated on when it names one (``evaluation.env``); else None."""
    evaluation = evaluation_options(config)
    return None if evaluation is None else evaluation.env


def factories_from_config(exp_dir: str | os.PathLike) -> tuple[EnvBuilder, AgentBuilder]:
    """The env and agent factories of an experiment made by ``online-trainer run`` (its ``config.yaml``).

    Raises:
        ValueError: the experiment has no ``config.yaml`` (it was made from Python: pass the factories).
    """
    path = Path(exp_dir) / CONFIG_YAML
    if not path.is_file():
        raise ValueError(
            f"{exp_dir} has no {CONFIG_YAML} (it was not made by 'online-trainer run'): pass "
            "agent_factory=... and env=... to say how to build the agent."
        )
    config = load_experiment_config(path)
    return env_factory(config.env), AgentBuilder(config.agent)
