"""Optuna integration: each trial runs several seeds and reports their aggregate.

A trial's value is the IQM (or mean, or median) of the final returns of ``num_runs`` seeds,
so the search ranks configurations, not lucky seeds. Trials are configurations of one sweep
(:meth:`OnlineTrainer.sweep`): they share its seeds and directory, and a configuration that
was already run is not run again.

Example::

    import optuna

    def space(trial):
        return {"lr": trial.suggest_float("lr", 1e-4, 1.0, log=True)}

    study = optuna.create_study(direction="maximize")
    study.optimize(optuna_objective(trainer, space, num_runs=5, num_episodes=200), n_trials=20)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from online_trainer.errors import RunsFailedError, ValueTypeError
from online_trainer.options import validation
from online_trainer.options.derived import LEGACY_NAMES

if TYPE_CHECKING:
    import optuna

    from online_trainer.orchestration.trainer import OnlineTrainer


def optuna_objective(
    trainer: OnlineTrainer,
    search_space: Callable[[optuna.Trial], dict[str, Any]],
    num_runs: int,
    num_episodes: int | None = None,
    total_steps: int | None = None,
    metric: str = "iqm",
    last_k: int = 10,
    seed_offset: int | None = 0,
    **sweep_options: Any,
) -> Callable[[optuna.Trial], float]:
    """An Optuna objective that runs ``num_runs`` seeds per trial and returns their aggregate.

    Args:
        trainer: a trainer with an ``exp_dir`` (the sweep directory of the study).
        search_space: a function of an Optuna trial that returns the trial's hyperparameters
            as a dict, drawing them with the trial's ``suggest_*`` methods, for example
            ``lambda trial: {"lr": trial.suggest_float("lr", 1e-5, 1e-2, log=True)}``. The
            dict goes to ``agent.set_hp``, as a configuration of :meth:`OnlineTrainer.sweep`
            does.
        num_runs: seeds per trial.
        num_episodes: episode budget of each run (exactly one of ``num_episodes`` and
            ``total_steps``).
        total_steps: env-step budget of each run.
        metric: ``"iqm"``, ``"mean"`` or ``"median"`` of the runs' final returns.
        last_k: a run's final return is the mean of its last ``last_k`` episode returns.
        seed_offset: base seed shared by every trial.
        **sweep_options: passed to :meth:`OnlineTrainer.sweep` (``execution=ExecutionOptions(...)``, ``checkpoints=...``).

    Returns:
        ``objective(trial) -> float``, to maximise. The trial's user attributes hold the
        experiment directory name (``experiment``), the 95% CI of the value (``ci_low``,
        ``ci_high``) and ``num_runs``. The directory is named after the hyperparameters, floats
        to 4 significant digits (``lr=0.3044``; a hash of the exact values is appended when
        another configuration already has that name); its ``hyperparameters.yaml`` and
        manifest hold the exact values.

    Raises:
        ImportError: Optuna is not installed.
        ValueError: the budget is not exactly one positive int, ``num_runs`` or ``last_k`` is not a positive int,
            ``metric`` is not one of the above, or ``exp_dir`` already holds a sweep run with another budget or
            ``seed_offset`` (its ``sweep.json``): every trial would fail, so the objective is refused before the
            first.
    """
    try:
        import optuna  # noqa: F401  (fail now, not in the first trial)
    except ImportError as exc:
        raise ImportError("optuna_objective needs Optuna: pip install -e '.[optuna]' (or pip install optuna).") from exc
    from online_trainer.orchestration.sweep import (  # as OnlineTrainer.sweep: not at import
        SWEEP_FILE,
        _recorded_seed,
        check_ranking,
    )

    check_ranking(num_runs, metric, last_k)  # a trial that raises is recorded in the study, as failed
    # what would fail every trial, refused before the first (R23: each trial failed, some without naming the argument)
    if not callable(search_space):
        raise ValueTypeError(
            f"search_space must be a function of an Optuna trial that returns its hyperparameters, but got "
            f"search_space={search_space!r}: pass e.g. lambda trial: {{'lr': trial.suggest_float('lr', 1e-5, 1e-2, "
            "log=True)} (for a fixed grid, use trainer.sweep)."
        )
    if trainer.exp_dir is None:
        raise ValueError(
            "optuna_objective needs a trainer with an exp_dir, the study's sweep directory (each trial is a "
            "configuration in it): make it with OnlineTrainer(..., exp_dir='runs/my_study')."
        )
    own = {"configurations", "num_runs", "num_episodes", "total_steps", "seed_offset", "metric", "last_k"}
    takes = [name for name in inspect.signature(trainer.sweep).parameters if name not in own]
    validation.keywords("optuna_objective", [k for k in sweep_options if k not in LEGACY_NAMES], takes)
    if trainer.exp_dir is not None:
        root = Path(trainer.exp_dir)  # a study that ran before: its trials' sweep checks the recorded base seed
        _recorded_seed(
            root,
            validation.seed_offset(seed_offset, None if (root / SWEEP_FILE).is_file() else num_runs),
            validation.budget(num_episodes, total_steps),
        )

    def objective(trial: optuna.Trial) -> float:
        hp = search_space(trial)
        if not isinstance(hp, dict) or not all(isinstance(key, str) for key in hp):
            raise ValueTypeError(  # R23: named configurations[0], a sweep's argument the study never passed
                f"search_space(trial) must return a dict of hyperparameter name to value, but it returned {hp!r}: "
                "return e.g. {'lr': trial.suggest_float('lr', 1e-5, 1e-2, log=True)}."
            )
        try:
            ranking = trainer.sweep(
                [hp],
                num_runs,
                num_episodes=num_episodes,
                total_steps=total_steps,
                seed_offset=seed_offset,
                metric=metric,
                last_k=last_k,
                **sweep_options,
            )
        except RunsFailedError as failed:  # V24: said "the same sweep call", which a study's user never made
            raise RunsFailedError(
                failed.failures,
                failed.results,
                continuing="the objective made again with resume=True and this trial's parameters enqueued "
                "(study.enqueue_trial(trial.params), first-sweep.md: An interrupted study)",
            ) from None
        row = ranking.iloc[0]
        trial.set_user_attr("experiment", str(row["experiment"]))
        trial.set_user_attr("ci_low", float(row[f"{metric}_lo"]))
        trial.set_user_attr("ci_high", float(row[f"{metric}_hi"]))
        trial.set_user_attr("num_runs", int(row["num_runs"]))
        return float(row[metric])

    return objective
