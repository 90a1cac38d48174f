"""``online-trainer resume EXP_DIR``: continue an experiment of ``online-trainer run`` that was cut off."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from online_trainer.analysis.dataframes import load_episodes
from online_trainer.cli.report import final_table
from online_trainer.cli.run import interrupted, multi_run_kwargs, submitted
from online_trainer.config.builders import CONFIG_YAML, factories_from_config
from online_trainer.config.loading import load_experiment_config
from online_trainer.config.schema import CALLBACKS, ConfigError
from online_trainer.errors import RunsFailedError
from online_trainer.orchestration.trainer import OnlineTrainer
from online_trainer.parallel.slurm_handle import SlurmRuns


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
    if not exp_dir.is_dir():
        raise ConfigError(f"{exp_dir} does not exist: give the experiment directory 'online-trainer run' wrote.")
    if not (exp_dir / CONFIG_YAML).is_file():
        raise ConfigError(
            f"{exp_dir} has no {CONFIG_YAML}: 'online-trainer resume' continues experiments made by "
            "'online-trainer run'. For one made from Python, call multi_run(..., resume=True) "
            "as it was called."
        )
    config = load_experiment_config(exp_dir / CONFIG_YAML, [])
    make_env, make_agent = factories_from_config(exp_dir)
    trainer = OnlineTrainer(make_env, make_agent, exp_dir=exp_dir, train=config.train)
    trainer.call_back = CALLBACKS[config.callback](exp_dir)
    print(f"Resuming {exp_dir}", flush=True)
    status, handle = 0, None
    try:
        handle = trainer.multi_run(
            config.num_runs, resume=True, **multi_run_kwargs(config, progress=not args.no_progress)
        )
    except RunsFailedError as exc:
        print(f"online-trainer: {exc}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:  # Ctrl-C, or a preemption signal (Preempted): resumed again by the same command
        return interrupted(exp_dir)
    except (TypeError, ValueError, FileNotFoundError) as exc:
        raise ConfigError(str(exc)) from exc
    if isinstance(handle, SlurmRuns):  # execution.slurm.wait=false: the jobs finish the experiment
        print(submitted(handle, exp_dir))
        return status
    print()
    print(final_table(load_episodes(exp_dir), config.last_k))
    print(f"\nExperiment directory: {exp_dir}")
    return status
