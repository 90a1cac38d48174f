"""``online-trainer run``: build the env and agent of a config and run every seed."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from online_trainer.analysis.dataframes import load_episodes
from online_trainer.cli.report import final_table
from online_trainer.config.builders import (
    CONFIG_YAML,
    AgentBuilder,
    env_factory,
    eval_env_factory,
    evaluation_options,
    factories_from_config,
)
from online_trainer.config.loading import dump_yaml, load_experiment_config
from online_trainer.config.schema import (
    ConfigError,
    ExperimentConfig,
    make_callback,
    make_hooks,
)
from online_trainer.errors import ExperimentExistsError, RunsFailedError
from online_trainer.experiment.manifest import how_to_continue, unfinished_runs
from online_trainer.options.groups import EvaluationOptions, ExecutionOptions
from online_trainer.orchestration.trainer import OnlineTrainer
from online_trainer.parallel.slurm_handle import SlurmRuns
from online_trainer.records import storage
from online_trainer.run.builtin import preemption


class CommandTrainer(OnlineTrainer):
    """The trainer of ``online-trainer run`` for ``config``: its resolved ``config.yaml`` is one more input file
    of the experiment (:meth:`OnlineTrainer.input_files`), so that it is checked, set aside, put back and
    removed with the experiment by the one path; and it says what it runs once the directory is its own.

    Args:
        config: the experiment's config (its ``exp_dir`` set).
        config_yaml: the text of ``config.yaml``.

    Raises:
        TypeError, ValueError: as :class:`OnlineTrainer` (``exp_dir`` is a file).
    """

    def __init__(self, config: ExperimentConfig, config_yaml: str) -> None:
        assert config.exp_dir is not None  # load_experiment_config defaults it to runs/<stem>
        super().__init__(
            env_factory(config.env),
            AgentBuilder(config.agent),
            exp_dir=config.exp_dir,
            train=config.train,
            args=config.to_dict(),
        )
        self.call_back = make_callback(config.callback, Path(config.exp_dir))
        self.config_yaml, self.description = config_yaml, _describe(config)

    def input_files(self) -> dict[str, str | None]:
        """``config.py`` and ``args.yaml`` as :meth:`OnlineTrainer.input_files` says, and ``config.yaml``."""
        return {**super().input_files(), CONFIG_YAML: self.config_yaml}

    def _on_exp_dir_held(self) -> None:
        print(f"Running {self.description} into {self.exp_dir}", flush=True)


def refusal(config: ExperimentConfig, exc: ExperimentExistsError) -> ConfigError:
    """The command's words for an experiment directory that ``multi_run`` refused to replace."""
    shown = sorted(exc.earlier, key=lambda p: (p.name != storage.MANIFEST_FILE, p.name))  # the telling one first
    earlier = [p.name for p in shown] or [f"{p.name} of another config" for p in exc.differing]
    names = ", ".join(earlier[:3]) + (", ..." if len(earlier) > 3 else "")
    unfinished = unfinished_runs(Path(config.exp_dir)) if config.exp_dir is not None else None
    if unfinished and config.exp_dir is not None:  # cut off (killed, preempted, Ctrl-C): most likely means to go on
        done, total = unfinished
        # resume continues with the experiment's own config.yaml: settings changed here would not apply
        changed = _changed_settings(config)
        as_made = ""
        if changed is not None:
            named = f": {', '.join(changed)}" if changed else ""
            as_made = f" as it was made (not with this command's changed settings{named})"
        where = shlex.quote(os.fspath(config.exp_dir))
        lines = [
            f"exp_dir={config.exp_dir!r} already holds an experiment whose runs did not all end ({done} of {total} "
            f"did): continue it{as_made} with",
            f"  online-trainer resume {where}",
        ]
        if changed and all(key.startswith("execution.") for key in changed):  # resume takes an edited execution
            lines.append(f"(to resume with these execution settings, set them in {where}/{CONFIG_YAML} first)")
        lines.append(
            "or add overwrite=true to replace it (its records and checkpoints are deleted), or exp_dir=<another path>."
        )
        return ConfigError("\n".join(lines))
    if not exc.earlier:  # input files alone (a config.yaml put there by hand): no experiment (C21)
        return ConfigError(
            f"exp_dir={config.exp_dir!r} holds no experiment but input files of another config ({names}): move them "
            "out, add overwrite=true to replace them, or exp_dir=<another path>."
        )
    return ConfigError(
        f"exp_dir={config.exp_dir!r} already holds an experiment ({names}): add overwrite=true "
        "to replace it, or exp_dir=<another path>."
    )


def _changed_settings(config: ExperimentConfig) -> list[str] | None:
    """The settings (dotted keys, ``agent.hyperparameters.lr``) that ``config`` sets otherwise than the
    ``config.yaml`` of the experiment in its ``exp_dir``: None when there are none, ``[]`` when that file cannot be
    read (something may differ). Not a change: the spelling of the same ``exp_dir`` (``runs/x/`` for ``runs/x``),
    ``overwrite``, and the file's comments (the config file's path and the overrides that gave the settings)."""
    assert config.exp_dir is not None
    try:
        made = yaml.safe_load((Path(config.exp_dir) / CONFIG_YAML).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return []
    if not isinstance(made, dict):
        return []
    ignored = ("exp_dir", "overwrite")
    now = yaml.safe_load(dump_yaml({key: value for key, value in config.to_dict().items() if key not in ignored}))
    changed = _differing_keys({key: value for key, value in made.items() if key not in ignored}, now)
    return changed or None


def _differing_keys(before: Any, now: Any, prefix: str = "") -> list[str]:
    """The dotted keys at which two nested mappings differ (a key one of them lacks included)."""
    if not isinstance(before, dict) or not isinstance(now, dict):
        return [] if before == now else [prefix.rstrip(".") or "(the whole config)"]
    keys = list(dict.fromkeys([*before, *now]))
    return [k for key in keys for k in _differing_keys(before.get(key), now.get(key), f"{prefix}{key}.")]


def multi_run_kwargs(config: ExperimentConfig, progress: bool = True) -> dict[str, Any]:
    """The keywords of ``multi_run`` that a config sets (``run`` and ``resume`` make the same call)."""
    execution = execution_options(config, progress)
    return dict(
        num_episodes=config.num_episodes,
        total_steps=config.total_steps,
        seed_offset=config.seed_offset,
        checkpoint_freq=config.checkpoint_freq,
        dump_transitions=config.dump_transitions,
        evaluation=evaluation_options(config),
        checkpoints=config.checkpoints,
        records=config.records,
        execution=execution,
        hooks=make_hooks(config.hooks, None if config.evaluation is None else config.evaluation.freq) or None,
    )


def execution_options(config: ExperimentConfig, progress: bool = True) -> ExecutionOptions:
    """The config's ``execution`` section, with the progress display off when ``progress`` is False."""
    return dataclasses.replace(config.execution, progress=config.execution.progress and progress)


def interrupted(exp_dir: Path) -> int:
    """Say what stopped the runs and the exact command that continues them; return the exit status (128 + signal).

    A preemption signal (SIGTERM, SIGUSR1) had each run write a full checkpoint first; Ctrl-C
    flushed each run's records. Either way ``online-trainer resume`` continues the experiment.
    """
    signum = preemption.received() or signal.SIGINT
    cause = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
    if (exp_dir / storage.MANIFEST_FILE).is_file():
        print(
            f"online-trainer: {cause}; the runs' records are on disk up to where each stopped. Continue the experiment "
            f"with:\n  online-trainer resume {shlex.quote(os.fspath(exp_dir))}",
            file=sys.stderr,
        )
    else:
        print(f"online-trainer: {cause} before any run started; nothing was kept in {exp_dir}.", file=sys.stderr)
    return 128 + signum


def failed(error: RunsFailedError, exp_dir: Path) -> int:
    """Print ``error`` (the failed runs) and the command that runs them again once their cause is fixed; return 1."""
    print(
        f"online-trainer: {error.summary}\nOnce the cause is fixed, run the failed runs again (each from its latest full "
        f"checkpoint, or from its first step) with:\n  {how_to_continue(exp_dir)}",
        file=sys.stderr,
    )
    return 1


#: OSErrors of a path the config names (a missing file, a directory not writable): usage errors. The others (a full
#: disk, a failing device, as the runs write) are said by :func:`disk_error`.
PATH_ERRORS = (FileNotFoundError, PermissionError, NotADirectoryError)


def disk_error(error: OSError, exp_dir: Path) -> int:
    """Print ``error`` (a full disk as the runs wrote), its notes, and the command that continues the experiment once
    its cause is fixed; return 1. Before the experiment exists, the error alone."""
    notes = "".join(f"\n{note}" for note in getattr(error, "__notes__", []))
    then = (
        f"\nOnce the cause is fixed (free some space), continue the experiment with:\n  online-trainer resume "
        f"{shlex.quote(os.fspath(exp_dir))}"
        if (exp_dir / storage.MANIFEST_FILE).is_file()
        else ""
    )
    print(f"online-trainer: error: {error}{notes}{then}", file=sys.stderr)
    return 1


def _resolved_text(config: ExperimentConfig, source: str, overrides: list[str]) -> str:
    header = [f"# Resolved by `online-trainer run` from {source}"]
    if overrides:
        header.append(f"# with overrides: {' '.join(overrides)}")
    return "\n".join(header) + "\n" + dump_yaml(config.to_dict())


def _describe(config: ExperimentConfig) -> str:
    budget = f"{config.num_episodes} episodes" if config.num_episodes is not None else f"{config.total_steps} env steps"
    num_workers = min(config.execution.num_workers, config.num_runs)  # multi_run uses no more than num_runs
    at_once = {"slurm": "Slurm jobs at a time", "ray": "Ray tasks at a time"}.get(config.execution.backend, "workers")
    workers = f", {num_workers} {at_once}" if num_workers > 1 else ""
    return (
        f"{config.num_runs} seed(s) of {config.agent.name} on {config.env.id} "
        f"(x{config.env.num_envs}), {budget} each{workers}"
    )


def run_command(args: argparse.Namespace) -> int:
    """Run the experiment of ``args.config`` with ``args.overrides``; print the final table.

    ``multi_run`` takes the experiment's lock, refuses an earlier experiment (unless ``overwrite``) before
    anything is written or any env is made, and writes ``config.yaml`` with its own input files.

    Returns:
        0 when every run completed, 1 when some failed (their error is printed).

    Raises:
        ConfigError: for any problem with the config, before anything runs.
    """
    config = load_experiment_config(args.config, args.overrides)
    assert config.exp_dir is not None  # load_experiment_config defaults it to runs/<stem>
    exp_dir = Path(config.exp_dir)
    schedule = config.agent.hyperparameters.get("total_steps")
    if schedule is not None and config.total_steps is not None and schedule != config.total_steps:
        print(
            f"online-trainer: warning: agent.hyperparameters.total_steps={schedule} but total_steps="
            f"{config.total_steps}: the agent's schedules (anneal_lr, lin_ rates) run over {schedule} steps, not over "
            f"the run's budget. Override both (total_steps={config.total_steps} "
            f"agent.hyperparameters.total_steps={config.total_steps}) to keep them together.",
            file=sys.stderr,
        )
    try:
        trainer = CommandTrainer(config, _resolved_text(config, os.fspath(args.config), list(args.overrides)))
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    handle, failure = None, None
    try:
        handle = trainer.multi_run(
            config.num_runs, overwrite=config.overwrite, **multi_run_kwargs(config, progress=not args.no_progress)
        )
    except RunsFailedError as exc:
        failure = exc
    except ExperimentExistsError as exc:
        raise refusal(config, exc) from exc
    except KeyboardInterrupt:  # Ctrl-C, or a preemption signal (Preempted)
        return interrupted(exp_dir)
    except (TypeError, ValueError, FileExistsError) as exc:  # checked before any env step
        raise ConfigError(str(exc)) from exc
    except OSError as exc:
        if isinstance(exc, PATH_ERRORS):  # a path of the config: its usage error
            raise
        return disk_error(exc, exp_dir)
    with runs_ended(args):
        status = 0 if failure is None else failed(failure, exp_dir)
        print_outcome(handle, exp_dir, config.last_k)
    return status


def runs_ended(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """Every run has ended (or been handed to Slurm): what is left is printing, and the interpreter's exit. A preemption
    signal now has nothing to stop (resume.md), so SIGTERM and SIGUSR1 are logged and the command exits with its own
    status: by their default action they ended it with 143, the preempted status, after every run had finished (C21).
    Run as the process (``args.standalone``), the command keeps that to its exit (its interpreter's shutdown outlasts
    its last line, V21)."""
    return preemption.after_the_runs(restore=not getattr(args, "standalone", False))


def print_outcome(handle: Any, exp_dir: Path, last_k: int) -> None:
    """What ``run`` and ``resume`` print once ``multi_run`` returned ``handle``: the jobs that finish the
    experiment (``execution.slurm.wait=false``), or the final-return table and where to find the experiment."""
    if isinstance(handle, SlurmRuns):
        print(submitted(handle, exp_dir))
        return
    print()
    print(final_table(load_episodes(exp_dir), last_k))
    print(f"\nExperiment directory: {exp_dir}")
    print(f"Plot it with: online-trainer report {shlex.quote(os.fspath(exp_dir))}")


def submitted(handle: SlurmRuns, exp_dir: Path) -> str:
    """What ``run`` and ``resume`` say when their runs went to Slurm jobs they do not wait for."""
    jobs = ", ".join(str(job) for job in dict.fromkeys(handle.job_ids))
    return (
        f"Submitted {len(handle.runs)} run{'s' if len(handle.runs) != 1 else ''} as Slurm "
        f"job{'s' if len(set(handle.job_ids)) != 1 else ''} {jobs}. See how they stand with: online-trainer show "
        f"{shlex.quote(os.fspath(exp_dir))}\nWait for them with: online-trainer wait {shlex.quote(os.fspath(exp_dir))}"
    )


def eval_command(args: argparse.Namespace) -> int:
    """Evaluate the checkpoints of ``args.exp_dir``; print each run's mean and the across-run table.

    Returns:
        0 when every checkpoint was evaluated, 1 when some failed (their error is printed).
    """
    exp_dir = Path(args.exp_dir)
    if not exp_dir.is_dir():
        raise ConfigError(
            f"{exp_dir} does not exist: give the directory of an experiment made by 'online-trainer run'."
        )
    if not (exp_dir / CONFIG_YAML).is_file():
        raise ConfigError(
            f"{exp_dir} has no {CONFIG_YAML}: 'online-trainer eval' evaluates experiments made by "
            "'online-trainer run'. For one made from Python, call trainer.evaluate(...) or "
            "load_agent(exp_dir, run, agent_factory=..., env=...)."
        )
    make_env, make_agent = factories_from_config(exp_dir)
    trainer = OnlineTrainer(make_env, make_agent)
    eval_env = eval_env_factory(load_experiment_config(exp_dir / CONFIG_YAML))  # None: the env section's
    try:
        episodes = trainer.evaluate(
            args.which,
            exp_dir=exp_dir,
            overwrite=args.overwrite,
            evaluation=EvaluationOptions(env=eval_env, episodes=args.episodes),
            execution=ExecutionOptions(num_workers=args.workers, progress=not args.no_progress),
        )
    except RunsFailedError as exc:
        print(f"online-trainer: {exc}", file=sys.stderr)
        return 1
    except FileExistsError as exc:
        raise ConfigError(f"{exc.args[0].split(': pass')[0]}: add --overwrite to replace it.") from exc
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from exc
    print(evaluation_table(episodes))
    print(f"\nEpisodes written to {exp_dir / f'evaluation_{args.which}.csv'}")
    return 0


def evaluation_table(episodes: Any) -> str:
    """Each run's mean greedy return per checkpoint, then mean, median and IQM across runs with 95% CIs."""
    from online_trainer.analysis.stats import aggregate

    per_run = episodes.groupby(["checkpoint", "run", "seed"], sort=False)["ep_return"].mean().reset_index()
    per_checkpoint = episodes.groupby(["checkpoint", "run"]).size().iloc[0]
    lines = [
        f"Greedy evaluation: mean return of {per_checkpoint} episodes per run and checkpoint",
        per_run.to_string(index=False, float_format=lambda value: f"{value:.2f}"),  # as the statistics below
        "",
    ]
    summary = aggregate(per_run, value="ep_return", group_by="checkpoint")
    order = list(dict.fromkeys(per_run["checkpoint"]))  # the table's, in training order (V13: S1200 before S400)
    summary = summary.set_index("checkpoint").loc[order].reset_index()
    for row in summary.itertuples(index=False):
        stats = ", ".join(
            f"{stat} {getattr(row, stat):.2f} [{getattr(row, stat + '_lo'):.2f}, {getattr(row, stat + '_hi'):.2f}]"
            for stat in ("mean", "median", "iqm")
        )
        lines.append(f"{row.checkpoint}: {stats} (95% CI over {row.num_runs} runs)")
    return "\n".join(lines)
