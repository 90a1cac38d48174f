"""``online-trainer resume EXP_DIR``: continue an experiment of ``online-trainer run`` that was cut off."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from online_trainer.cli.run_command import (
    PATH_ERRORS,
    disk_error,
    failed,
    interrupted,
    multi_run_kwargs,
    print_outcome,
    runs_ended,
)
from online_trainer.config.builders import CONFIG_YAML, factories_from_config
from online_trainer.config.loading import dump_yaml, load_experiment_config
from online_trainer.config.schema import ConfigError, ExperimentConfig, make_callback
from online_trainer.errors import RunsFailedError
from online_trainer.experiment.manifest import ended_runs
from online_trainer.orchestration.trainer import OnlineTrainer
from online_trainer.records import storage

BUILT_FROM = ("env", "agent", "train", "evaluation.env")
"""The sections of ``config.yaml`` that build a run's envs and agent: ``multi_run`` cannot see them, since it gets the
factories they make, so a resumed command compares them with the config the experiment ran with (its ``args.yaml``).
The other sections reach ``multi_run`` as options, which it compares with the manifest itself."""


def resume_command(args: argparse.Namespace) -> int:
    """Continue the experiment in ``args.exp_dir`` as its ``config.yaml`` says; print the final table.

    Finished runs are kept; the others continue from their full checkpoints, or start again
    (see :mod:`online_trainer.experiment.resuming`).

    Returns:
        0 when every run completed, 1 when some failed (their error is printed).

    Raises:
        ConfigError: the directory holds no experiment of ``online-trainer run``, or its config is invalid.
    """
    exp_dir = Path(args.exp_dir)
    if exp_dir.exists() and not exp_dir.is_dir():  # C17: a config file was said not to exist
        raise ConfigError(
            f"{exp_dir} is a file, not an experiment directory: give the directory 'online-trainer run' wrote (its "
            f"exp_dir); to run a config, use: online-trainer run {exp_dir}"
        )
    if not exp_dir.is_dir():
        raise ConfigError(f"{exp_dir} does not exist: give the experiment directory 'online-trainer run' wrote.")
    if not (exp_dir / CONFIG_YAML).is_file():
        # a sweep made from Python is resumed by its own call (F17: it was told to call multi_run)
        root = next((d for d in (exp_dir, exp_dir.parent) if (d / storage.SWEEP_FILE).is_file()), None)
        call = "multi_run(..., resume=True)" if root is None else f"sweep(..., resume=True) on {root} with its grid"
        raise ConfigError(
            f"{exp_dir} has no {CONFIG_YAML}: 'online-trainer resume' continues experiments made by "
            f"'online-trainer run'. For one made from Python, call {call} as it was called."
        )
    try:
        config = load_experiment_config(exp_dir / CONFIG_YAML, [])
    except ConfigError as exc:  # the file was edited (its execution section may be): say which file holds the mistake
        raise ConfigError(f"{exp_dir / CONFIG_YAML}: {exc}") from exc
    if not (exp_dir / storage.MANIFEST_FILE).is_file():  # a config.yaml alone: refused by multi_run in Python's words
        raise ConfigError(
            f"{exp_dir} holds {CONFIG_YAML} but no experiment (no {storage.MANIFEST_FILE}): nothing was run there to "
            f"resume. Run it with: online-trainer run {shlex.quote(os.fspath(exp_dir / CONFIG_YAML))} "
            f"exp_dir={shlex.quote(os.fspath(exp_dir))}"
        )
    refuse_edits(exp_dir, config)
    make_env, make_agent = factories_from_config(exp_dir)
    trainer = OnlineTrainer(make_env, make_agent, exp_dir=exp_dir, train=config.train)
    trainer.call_back = make_callback(config.callback, exp_dir)
    counts = ended_runs(exp_dir)
    ended = counts is not None and counts[0] == counts[1]
    if not ended:  # with every run ended it said "Resuming" and printed the table (tester D14): said once checked
        print(f"Resuming {exp_dir}", flush=True)
    handle, failure = None, None
    try:
        handle = trainer.multi_run(
            config.num_runs, resume=True, **multi_run_kwargs(config, progress=not args.no_progress)
        )
    except RunsFailedError as exc:
        failure = exc
    except KeyboardInterrupt:  # Ctrl-C, or a preemption signal (Preempted): resumed again by the same command
        return interrupted(exp_dir)
    except (TypeError, ValueError, FileNotFoundError) as exc:
        if str(exc).startswith("resume=True continues"):  # the call config.yaml makes differs from the experiment's
            if "'s agent differs: " in str(
                exc
            ):  # built from config.yaml's agent section (checked) and the agent's code
                raise ConfigError(
                    f"{exc} Here the agent is the one {exp_dir / CONFIG_YAML}'s agent section builds, which is as the "
                    "experiment ran: if the agent's code changed since, put it back."
                ) from exc
            edited = re.search(r"which ran with (.+?), but this call has (.+?): call it as it was called", str(exc))
            if edited:  # in the command's words (V21: `resume=True`, `call it as it was called`, `overwrite=True`)
                raise ConfigError(
                    f"{exp_dir / CONFIG_YAML} was edited since the experiment ran: it ran with {edited[1]}, the file "
                    f"now says {edited[2]}. Put the value back to resume, or run the edited config as a new "
                    f"experiment: online-trainer run {exp_dir / CONFIG_YAML} exp_dir=<another path>."
                ) from exc
            said = (  # the command's spelling (C21, C24)
                str(exc)
                .replace("overwrite=True", "overwrite=true")
                .replace("resume=True continues", "online-trainer resume continues")
            )
            raise ConfigError(
                f"{said} Here the call is the one {exp_dir / CONFIG_YAML} describes: if it was edited since the "
                "experiment ran, put the value back there."
            ) from exc
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        if isinstance(exc, PATH_ERRORS):
            raise
        return disk_error(exc, exp_dir)
    with runs_ended(args):
        if ended and counts is not None:
            print(f"Every run of {exp_dir} had ended ({counts[1]} of {counts[1]}): nothing to resume.", flush=True)
        status = 0 if failure is None else failed(failure, exp_dir)
        print_outcome(handle, exp_dir, config.last_k)
    return status


def refuse_edits(exp_dir: Path, config: ExperimentConfig) -> None:
    """Raise ConfigError when ``config`` (``exp_dir/config.yaml`` as it is now) builds other envs or agents than the
    experiment's runs were built with, as its ``args.yaml`` (written by ``online-trainer run``) records them.

    An edited ``agent.hyperparameters.lr`` was taken silently: the runs that started again were trained at the new
    rate and those continued from a checkpoint at the old one, in one experiment whose ``config.yaml`` then named
    only the new one. An experiment without ``args.yaml`` (made before it was written) is not compared.
    """
    recorded_path = exp_dir / storage.ARGS_FILE
    if not recorded_path.is_file():
        return
    recorded = yaml.safe_load(recorded_path.read_text(encoding="utf-8")) or {}
    current = yaml.safe_load(dump_yaml(config.to_dict()))
    edits = [
        (key, before, now)
        for section in BUILT_FROM
        for key, before, now in _differences(section, _at(recorded, section), _at(current, section))
    ]
    # the sinks, which multi_run checks against the checkpoints' positions in Python's words (C24): said as an edit
    sinks_before, sinks_now = (_sinks(_at(config_, "callback")) for config_ in (recorded, current))
    if sinks_before is not None and sinks_now != sinks_before:
        edits.append(("callback", _at(recorded, "callback"), _at(current, "callback")))
    if edits:
        listed = "; ".join(_edit(key, before, now) for key, before, now in edits)
        raise ConfigError(
            f"{exp_dir / CONFIG_YAML} was edited since the experiment ran: {listed} ({storage.ARGS_FILE}). Its runs "
            "that start again would be built otherwise than those that go on from their checkpoints. Put the "
            "values back to resume, or run the edited config as a new experiment: online-trainer run "
            f"{exp_dir / CONFIG_YAML} exp_dir=<another path>."
        )


def _sinks(value: Any) -> list[Any] | None:
    """A config's ``callback`` as a list of sinks (``tb`` and ``[tb]`` are one sink); None when it is not set."""
    if value is _NOT_SET or value is None:
        return None
    return list(value) if isinstance(value, (list, tuple)) else [value]


_NOT_SET = object()
"""A key a config does not have (``null`` is a value: a key set to None)."""


def _at(config: Any, key: str) -> Any:
    """The value at the dotted ``key`` of a config's mapping; :data:`_NOT_SET` where a key on the way is not there."""
    for name in key.split("."):
        config = config.get(name, _NOT_SET) if isinstance(config, dict) else _NOT_SET
    return config


def _differences(key: str, before: Any, now: Any) -> list[tuple[str, Any, Any]]:
    """The dotted keys under ``key`` whose values differ between ``before`` and ``now`` (nested dicts), in order."""
    if isinstance(before, dict) and isinstance(now, dict):
        return [
            difference
            for name in [*before, *(name for name in now if name not in before)]
            for difference in _differences(f"{key}.{name}", before.get(name, _NOT_SET), now.get(name, _NOT_SET))
        ]
    unset = (None, _NOT_SET)  # null and a key left out are alike (files written before a key existed lack it)
    return [] if before == now or (before in unset and now in unset) else [(key, before, now)]


def _edit(key: str, before: Any, now: Any) -> str:
    """One edit, in words: a key added or removed is "not set" on one side (its default); null is said as null."""
    if before is _NOT_SET:
        return f"{key} is {_yaml(now)} there, but the runs were built without it (its default)"
    if now is _NOT_SET:
        return f"{key} is not set there (its default), but the runs were built with {_yaml(before)}"
    return f"{key} is {_yaml(now)} there, but the runs were built with {_yaml(before)}"


def _yaml(value: Any) -> str:
    """A value as the message shows it: its repr, and None as YAML's null (what the file says)."""
    return "null" if value is None else repr(value)
