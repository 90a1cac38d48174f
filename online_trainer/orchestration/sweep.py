"""Hyperparameter sweeps: every configuration over the same seeds, one worker pool, resumable.

Layout of a sweep directory::

    exp_dir/
      sweep.json                      base seed and budget, shared by every configuration
      sweep_results.csv               the ranking of every configuration in the directory
      lr=0.001,gamma=0.99/            one experiment directory per configuration
        hyperparameters.yaml  manifest.json  metrics_run{i}.pkl ...

Every configuration runs the same seeds (common random numbers), so differences between
configurations are not differences between seeds. A configuration's runs that finished
are never run again: calling the sweep again runs only what is missing (new
configurations, more seeds, runs that failed or were interrupted).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from online_trainer.errors import ExperimentExistsError, RunsFailedError, value_error
from online_trainer.experiment import ownership
from online_trainer.experiment.lock import LOCK_FILE, hold_lock
from online_trainer.experiment.manifest import Experiment
from online_trainer.experiment.resuming import (
    CALL_KEY,
    check_checkpoints,
    check_same_call,
    cut_back_outputs,
    env_description,
    runs_left,
)
from online_trainer.loop import seeding
from online_trainer.options import validation
from online_trainer.options.derived import call_record
from online_trainer.options.groups import RunPlan
from online_trainer.options.typed import did_you_mean
from online_trainer.orchestration.planning import RunnerParts, base_seed, plan_runs, run_experiments
from online_trainer.parallel.execution import ExecutionOptions, refuse_while_importing_main
from online_trainer.records import storage

if TYPE_CHECKING:
    import pandas as pd

    from online_trainer.orchestration.trainer import OnlineTrainer

logger = logging.getLogger(__name__)

SWEEP_FILE = "sweep.json"
RESULTS_FILE = "sweep_results.csv"
METRICS = ("iqm", "mean", "median")


def expand_grid(configurations: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The configurations of a grid (``{"lr": [1e-3, 1e-4], "gamma": [0.9]}``) or a list of dicts.

    Raises:
        ValueError: an empty grid, a grid value that is not a list, or a configuration that is
            not a dict of hyperparameters.
    """
    if isinstance(configurations, Mapping):
        for key, values in configurations.items():
            if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or len(values) == 0:
                fix = (
                    f"give the values to try, e.g. {key}=[0.001, 0.0003], or leave {key} out of the grid (its default)"
                    if isinstance(values, Sequence) and not isinstance(values, (str, bytes))
                    else f"write {key}=[{values!r}] for a single value"
                )  # an empty list was told to be written [[]] (tester O15)
                raise ValueError(f"Each grid value must be a non-empty list, but got {key}={values!r}: {fix}.")
        keys = list(configurations)
        grid = [dict(zip(keys, values)) for values in itertools.product(*configurations.values())]  # {}: [{}]
    elif isinstance(configurations, (str, bytes)) or not isinstance(configurations, Sequence):
        raise ValueError(
            "configurations must be a grid (a dict of hyperparameter name to the values to try, e.g. "
            f"{{'lr': [0.001, 0.0003]}}) or a list of dicts of hyperparameters, but got configurations={configurations!r}."
        )
    else:
        grid = []
        for i, config in enumerate(configurations):
            if not isinstance(config, Mapping) or not all(isinstance(key, str) for key in config):
                raise ValueError(  # M22: named tuning_hp, which the user never passed
                    f"configurations[{i}] must be a dict of hyperparameter name to value, but got "
                    f"configurations[{i}]={config!r}: pass e.g. [{{'lr': 0.001}}, {{'lr': 0.0003}}], or a grid "
                    "{'lr': [0.001, 0.0003]}."
                )
            grid.append(dict(config))
    if not grid:
        raise ValueError(  # a grid {} is one configuration, the defaults (first-sweep.md); a list [] has none
            f"The sweep has no configuration: got configurations={configurations!r}. Give the values to try, e.g. "
            "{'lr': [0.001, 0.0003]}; to run the agent's defaults as one configuration, pass {} or [{}]."
        )
    unique: list[dict[str, Any]] = []
    for config in grid:
        if config not in unique:
            unique.append(config)
    return unique


NAME_DIGITS = 4
"""Significant digits of a float in a configuration's directory name (the exact value is in its files)."""


def config_name(config: Mapping[str, Any]) -> str:
    """A directory name for a configuration: ``lr=0.001,gamma=0.99`` (hashed when long).

    Floats are written to :data:`NAME_DIGITS` significant digits (an Optuna trial's
    ``lr=0.3043617032940743`` is named ``lr=0.3044``); a float that needs no more digits is
    written as Python writes it (``0.001``, ``1.0``). Two configurations can therefore share a
    name: :func:`experiment_name` makes the names of a sweep unique.
    """
    name = ",".join(f"{_clean(key)}={_clean(_text(value))}" for key, value in config.items()) or "default"
    if len(name) > 100:
        name = f"{name[:80]}-{_digest(config, 12)}"
    return name


def experiment_name(root: Path, config: Mapping[str, Any], taken: Sequence[str] = ()) -> str:
    """The directory under the sweep ``root`` of ``config``: its :func:`config_name`, unless that
    name is in ``taken`` (names given to other configurations of this call) or its directory holds
    another configuration (other exact values in its ``hyperparameters.yaml``); then the name
    ends with a hash of the exact values (``lr=0.3044-1a2b3c4d``)."""
    name = config_name(config)
    if name in taken or _holds_other(root / name, config):
        name = f"{name}-{_digest(config, 8)}"
    return name


def _holds_other(exp_dir: Path, config: Mapping[str, Any]) -> bool:
    path = exp_dir / storage.HYPERPARAMETERS_FILE
    if not path.is_file():
        return False
    return yaml.safe_load(path.read_text()) != yaml.safe_load(yaml.safe_dump(dict(config), sort_keys=False))


def _digest(config: Mapping[str, Any], length: int) -> str:
    return hashlib.sha1(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:length]


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "-".join(_text(v) for v in value)
    if isinstance(value, float):
        short = f"{value:.{NAME_DIGITS}g}"
        return short if float(short) != value else str(value)
    return str(value)


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)


def check_ranking(num_runs: int, metric: str, last_k: int) -> tuple[int, int]:
    """``num_runs`` and ``last_k``, checked, once ``metric`` is known to be one the ranking has.

    Raises:
        ValueError: ``num_runs`` or ``last_k`` is not a positive int, or ``metric`` is not one of :data:`METRICS`.
    """
    num_runs = validation.positive_int("num_runs", num_runs)
    last_k = validation.positive_int("last_k", last_k)
    if metric not in METRICS:
        raise value_error(metric, str)(
            f"metric must be one of {METRICS}, but got metric={metric!r}{did_you_mean(str(metric), METRICS)}."
        )
    return num_runs, last_k


def run_sweep(
    trainer: OnlineTrainer,
    configurations: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Any]],
    num_runs: int,
    options: RunPlan,
    seed_offset: int | None = None,
    metric: str = "iqm",
    last_k: int = 10,
    execution: ExecutionOptions = ExecutionOptions(),
    resume: bool = False,
) -> pd.DataFrame:
    """Run every configuration over ``num_runs`` seeds and rank them; see :meth:`OnlineTrainer.sweep`."""
    refuse_while_importing_main("sweep")
    execution.check_waits("sweep")
    if trainer.exp_dir is None:
        raise ValueError(
            "A sweep writes one experiment per configuration and resumes from them, but exp_dir is "
            "None: pass OnlineTrainer(..., exp_dir='runs/my_sweep')."
        )
    resume = validation.boolean("resume", resume)
    num_runs, last_k = check_ranking(num_runs, metric, last_k)
    # a sweep that ran before checks its recorded base with the runs asked for once it has read it, saying what this
    # sweep takes (V20: the multi_run advice, a smaller seed_offset, was then refused as not the sweep's own)
    ran_before = (Path(trainer.exp_dir) / SWEEP_FILE).is_file()
    seed_offset = validation.seed_offset(seed_offset, None if ran_before else num_runs)
    grid = expand_grid(configurations)
    execution = execution.capped(len(grid) * num_runs)
    parts = trainer.parts
    parts.check_travel(execution, options)
    copy_agent = parts.copies_agent(len(grid) * num_runs, execution)
    root = Path(trainer.exp_dir)
    names: list[str] = []

    def plan(created: list[Path]) -> list[Experiment]:
        # a sweep called again: every run's agent is compared with the one its configurations trained, with or
        # without resume=True (N19: new seeds trained another network, pooled in the ranking without a word)
        called_again = (root / SWEEP_FILE).is_file()
        seed = _sweep_seed(root, seed_offset, options.budget, created, num_runs)
        if seed > seeding.highest_seed_offset(num_runs):  # the recorded base, with more seeds than it ran (V19)
            raise ValueError(
                f"The sweep in {root} runs from base seed {seed} (recorded in {SWEEP_FILE}), with which "
                f"num_runs={num_runs} would give run {num_runs} the seed {seeding.run_seed(seed, num_runs)}: training "
                f"seeds must stay below 2**31 (see docs/explanation/seeds.md). This sweep takes at most "
                f"num_runs={(seeding.SEED_LIMIT - seed) // seeding.SEED_STRIDE}; for more seeds, sweep into another "
                "exp_dir with a smaller seed_offset."
            )
        experiments, planned = _plan(
            parts,
            root,
            grid,
            num_runs,
            seed_offset,
            seed,
            parts.manifest_fields(execution),
            options,
            copy_agent,
            created,
            resume,
            called_again,
        )
        names.extend(planned)
        return experiments

    def finalize(experiments: list[Experiment]) -> pd.DataFrame:
        # each configuration is an experiment directory as multi_run's: all_metrics.pkl once its runs all finished
        if options.dump_metrics and options.records.in_memory:
            for experiment in experiments:
                if not experiment.failures():
                    experiment.write_all_metrics(experiment.runs(keep_records=True))
        try:
            ranking = rank(root, names, metric, last_k)
        except (RuntimeError, ValueError):  # R23: every run failed said "Every run was left out" (a ValueError)
            failures = [f for e in experiments for f in e.failures()]
            if failures:  # no configuration has a score because its runs failed: their errors are the news
                raise RunsFailedError(failures, None, continuing="the same sweep call with resume=True") from None
            raise
        # every configuration of the directory, not only this call's (an Optuna trial's call has one); under the
        # sweep's lock, as every file of the sweep; a call that ran nothing new leaves it alone
        everything = sorted(p.name for p in root.iterdir() if (p / storage.MANIFEST_FILE).is_file())
        whole = ranking if sorted(names) == everything else rank(root, everything, metric, last_k, log=False)
        if whole is not ranking and (uneven := uneven_seeds(whole)) is not None and uneven_seeds(ranking) is None:
            logger.warning("sweep: %s: %s", RESULTS_FILE, uneven)
        storage.write_if_changed(root / RESULTS_FILE, whole.to_csv(index=False).encode())
        return ranking

    def check() -> None:  # run by the lock before it writes anything: a call refused here changes nothing on disk
        _refuse_an_experiment(root)
        _recorded_seed(root, seed_offset, options.budget)
        _check_calls(parts, root, grid, options, resume)

    outcome = run_experiments(hold_lock(root, check), execution, len(grid) * num_runs, plan, parts.callback, finalize)
    ranking: pd.DataFrame = outcome.finalized
    failures = [f for e in outcome.experiments for f in e.failures()]
    if failures:  # the ranking of the configurations that have scores goes with the error
        raise RunsFailedError(failures, ranking, continuing="the same sweep call with resume=True")
    return ranking


def _plan(
    parts: RunnerParts,
    root: Path,
    grid: list[dict[str, Any]],
    num_runs: int,
    seed_offset: int | None,
    seed: int,
    fields: dict[str, Any],
    options: RunPlan,
    copy_agent: bool,
    created: list[Path],
    resume: bool = False,
    called_again: bool = False,
) -> tuple[list[Experiment], list[str]]:
    """One experiment per configuration, holding the specs of the runs still to do, and their names.

    Directories and files made here are appended to ``created``. ``called_again``: the sweep ran before (its runs'
    agents are checked against the configurations' records).
    """
    experiments: list[Experiment] = []
    if root.is_dir():  # sweep_results.csv or sweep.json of a killed call
        storage.remove_abandoned_temporaries(root)
    names = _names(root, grid)
    task_id = 0
    more: dict[str, int] = {}  # configurations with more runs than this call asks for
    for config, name in zip(grid, names):
        exp_dir = root / name
        if not exp_dir.exists():
            created += [exp_dir, exp_dir / storage.HYPERPARAMETERS_FILE]
        manifest, todo = _resume(
            exp_dir,
            config,
            num_runs,
            seed_offset,
            seed,
            {**fields, CALL_KEY: call_record(options, config, parts.train)},
            parts.callback,
            name,
            resume,
            options.hooks,
        )
        if manifest["num_runs"] > num_runs:
            more[name] = manifest["num_runs"]
        seeds = {run: manifest["seeds"][run - 1] for run in todo}
        specs = plan_runs(
            parts,
            options,
            seeds,
            exp_dir,
            config,
            copy_agent,
            label=name,
            tag_prefix=f"{name}/",
            first_task_id=task_id,
            resume=resume,
            continuing=called_again,
        )
        task_id += len(specs)
        manifest[ownership.LOCK_KEY] = os.path.relpath(root / LOCK_FILE, exp_dir)  # the sweep's lock covers it
        experiments.append(Experiment(exp_dir, manifest, specs))
    skipped = sum(len(e.manifest["runs"]) - len(e.specs) for e in experiments)
    if task_id == 0:  # a notebook cell run again: said, not a silent return of the ranking (U17)
        logger.warning(
            "sweep: every run of its %d configurations x %d seeds ended in an earlier call (%d runs): nothing runs; "
            "the ranking is read from %s.",
            len(grid),
            num_runs,
            skipped,
            root,
        )
    else:
        logger.info(
            "sweep: %d configurations x %d seeds; %d runs to do, %d done earlier", len(grid), num_runs, task_id, skipped
        )
    if more:  # it returned the ranking of every seed without a word (tester O15)
        logger.warning(
            "sweep: num_runs=%d, but %s ran more seeds earlier; a sweep grows and never drops runs: the ranking "
            "counts all of them.",
            num_runs,
            ", ".join(f"{name} ({count})" for name, count in more.items()),
        )
    return experiments, names


def _names(root: Path, grid: list[dict[str, Any]]) -> list[str]:
    """The experiment directory names of the configurations of ``grid``, in order (see :func:`experiment_name`)."""
    names: list[str] = []
    for config in grid:
        names.append(experiment_name(root, config, names))
    return names


def _refuse_an_experiment(root: Path) -> None:
    """Refuse a sweep in a directory that holds one experiment (``multi_run``'s): its configurations would sit
    beside that experiment's runs, and readers of the directory would see the experiment alone.

    Raises:
        ExperimentExistsError: ``root`` holds an experiment's manifest.
    """
    if (root / storage.MANIFEST_FILE).is_file():
        raise ExperimentExistsError(
            f"exp_dir={os.fspath(root)!r} holds an experiment made by multi_run ({storage.MANIFEST_FILE}), not a "
            "sweep: a sweep writes one experiment per configuration in sub-directories, and would mix them with "
            "its runs. Give the sweep another exp_dir.",
            root,
            [root / storage.MANIFEST_FILE],
            [],
        )


def _check_calls(parts: RunnerParts, root: Path, grid: list[dict[str, Any]], options: RunPlan, resume: bool) -> None:
    """Raise unless the call agrees with every configuration's experiment run earlier, and (with ``resume``) its
    hooks and callback fit their full checkpoints: every configuration is checked before any is cut back.

    The refusal is the first configuration's (in grid order) that differs, naming every other one that differs too:
    a configuration that finished is as much the sweep's as one still running.
    """
    refused: list[tuple[str, ValueError]] = []
    for config, name in zip(grid, _names(root, grid)):
        exp_dir = root / name
        if not (exp_dir / storage.MANIFEST_FILE).is_file():
            continue
        manifest = storage.read_manifest(exp_dir)
        try:
            check_same_call(
                exp_dir,
                manifest,
                manifest["num_runs"],  # a sweep may add seeds to its configurations
                None,  # the sweep's seed is checked against sweep.json
                call_record(options, config, parts.train),
                lambda: env_description(parts.env_factory),
                continuing="resume=True" if resume else "A sweep called again",
                anew="sweep into another exp_dir (a sweep has no overwrite; deleting a configuration's directory runs "
                "it anew, and loses its results)",
            )
            if resume:
                check_checkpoints(exp_dir, manifest, options.hooks, parts.callback, label=name)
        except ValueError as exc:
            refused.append((name, exc))
    if not refused:
        return
    first = refused[0][1]
    if len(refused) == 1 or type(first) is not ValueError:
        raise first
    others = ", ".join(repr(name) for name, _ in refused[1:])
    # from None: the message holds the first refusal whole; chained, it was printed twice
    raise ValueError(f"{first} The call differs from configuration(s) {others} of this sweep too.") from None


def _recorded_seed(root: Path, seed_offset: int | None, budget: Any) -> int | None:
    """The base seed recorded for the sweep at ``root`` (None when none is).

    Raises:
        ValueError: ``seed_offset`` or ``budget`` differ from those recorded.
    """
    path = root / SWEEP_FILE
    if not path.is_file():
        return None
    recorded = json.loads(path.read_text())
    if seed_offset is not None and seed_offset != recorded["base_seed"]:
        raise ValueError(
            f"The sweep in {root} ran with seed_offset={recorded['base_seed']}, but got "
            f"seed_offset={seed_offset}: pass the same seed_offset (or None), or another exp_dir."
        )
    if recorded["budget"] != _budget_record(budget):
        given = ", ".join(f"{name}={value}" for name, value in recorded["budget"].items() if value is not None)
        raise ValueError(
            f"The sweep in {root} ran with {recorded['budget']}, but got {_budget_record(budget)}: a sweep "
            f"compares configurations on one budget. To go on with it, pass {given}; for another budget, use "
            "another exp_dir."
        )
    return int(recorded["base_seed"])


def _budget_record(budget: Any) -> dict[str, int | None]:
    return {"num_episodes": budget.num_episodes, "total_steps": budget.total_steps}


def _sweep_seed(root: Path, seed_offset: int | None, budget: Any, created: list[Path], num_runs: int) -> int:
    """The base seed of the sweep at ``root``: recorded there, or ``seed_offset``, or drawn now (and recorded:
    what this writes is appended to ``created``)."""
    recorded = _recorded_seed(root, seed_offset, budget)
    if recorded is not None:
        return recorded
    seed = base_seed(seed_offset, num_runs)
    path = root / SWEEP_FILE
    created.append(path)
    root.mkdir(parents=True, exist_ok=True)
    storage.write_atomic(path, json.dumps({"base_seed": seed, "budget": _budget_record(budget)}, indent=2).encode())
    return seed


def _resume(
    exp_dir: Path,
    config: dict[str, Any],
    num_runs: int,
    seed_offset: int | None,
    seed: int,
    fields: dict[str, Any],
    callback: Any,
    name: str,
    resume: bool,
    hooks: Sequence[Any] = (),
) -> tuple[dict[str, Any], list[int]]:
    """The manifest of the experiment of the configuration ``name`` and the runs still to do (with ``resume``, runs
    cut off continue from their full checkpoints; else they start again); the callback's files are cut back."""
    if (exp_dir / storage.MANIFEST_FILE).is_file():
        manifest = storage.read_manifest(exp_dir)
        left = runs_left(manifest, exp_dir, continue_runs=resume, hooks=hooks, callback=callback, label=name)
        cut_back_outputs(exp_dir, callback, manifest, left, f"{name}/")
        todo = list(left)
        extra = Experiment.new_manifest(num_runs, seed_offset, seed, {})
        for entry in extra["runs"][len(manifest["runs"]) :]:
            manifest["runs"].append(entry)
            manifest["seeds"].append(entry["seed"])
            todo.append(entry["run"])
        manifest["num_runs"] = len(manifest["runs"])
        return manifest, todo
    exp_dir.mkdir(parents=True, exist_ok=True)
    storage.write_text_once(exp_dir / storage.HYPERPARAMETERS_FILE, yaml.safe_dump(config, sort_keys=False))
    manifest = Experiment.new_manifest(num_runs, seed_offset, seed, {**fields, "tuning_hp": config})
    return manifest, list(range(1, num_runs + 1))


def rank(root: Path, names: Sequence[str], metric: str = "iqm", last_k: int = 10, log: bool = True) -> pd.DataFrame:
    """Rank the configurations ``names`` of the sweep at ``root`` by ``metric`` of their final returns.

    A ranking is only as good as the intervals under it: each configuration is compared
    with the top one (the statistics of :func:`online_trainer.analysis.compare.compare`), and a
    warning is logged when the top ones cannot be told apart (``log``: log the ranking's warnings, and the loading's
    of runs left out or with no episode; False ranks quietly).

    Returns:
        One row per configuration, best first: ``rank``, the hyperparameters, ``experiment``,
        ``mean``/``median``/``iqm`` with their 95% bootstrap CIs (``*_lo``, ``*_hi``) of the
        final returns (the mean return of each run's last ``last_k`` episodes), ``num_runs``,
        and against the top configuration: ``probability_of_improvement`` (P(top > this
        one), with ``_lo``/``_hi``; NaN for the top one) and ``told_apart`` (the interval of the
        ``metric`` difference excludes zero, with seeds enough for a verdict, see ``too_few_seeds`` in
        :class:`~online_trainer.analysis.compare.Comparison`; False for the top one), ``degenerate`` (P's interval
        is a point: every run of the top one beats every run of this one, which few seeds make likely, or all their
        scores tie)
        with ``separation_bound`` (the bound on P that holds then; see
        :func:`~online_trainer.analysis.compare_stats.separation_bound`). Configurations that finished
        no episode come last, with no score. ``attrs["note"]`` says whether the top configurations can
        be told apart, and which runs a hook stopped early (their scores are where they stopped).
    """
    with contextlib.nullcontext() if log else _quiet_analysis():
        return _rank(root, names, metric, last_k, log)


@contextlib.contextmanager
def _quiet_analysis() -> Iterator[None]:
    """Silence the analysis' warnings (runs left out, runs with no episode) for a ranking nobody reads now.

    The whole directory's ranking written to ``sweep_results.csv`` after an Optuna trial would repeat, at every
    trial, what the loading says of the other trials' runs: of a trial whose run was cut off, before the trial that
    resumes it settles it, that its run is "running".
    """
    analysis = logging.getLogger("online_trainer.analysis")
    level = analysis.level
    analysis.setLevel(max(logging.ERROR, level))
    try:
        yield
    finally:
        analysis.setLevel(level)


class _Unsaid(logging.Filter):
    """Drops the analysis's advice on runs left out, which names ``include_unfinished`` and ``df.attrs`` (V24)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        return not (
            message.startswith("Leaving out %d run(s) that did not finish") or "have no episode on disk" in message
        )


@contextlib.contextmanager
def _analysis_advice_unsaid() -> Iterator[None]:
    loggers = [logging.getLogger(f"online_trainer.analysis.{name}") for name in ("selection", "dataframes")]
    unsaid = _Unsaid()
    for each in loggers:
        each.addFilter(unsaid)
    try:
        yield
    finally:
        for each in loggers:
            each.removeFilter(unsaid)


def _rank(root: Path, names: Sequence[str], metric: str, last_k: int, log: bool) -> pd.DataFrame:
    import pandas as pd

    from online_trainer.analysis.compare_inputs import stopped_early_note
    from online_trainer.analysis.dataframes import hyperparameters, load_episodes
    from online_trainer.analysis.selection import (
        KEPT_STATUSES,
        RUNS_ATTR,
        STATUS_COLUMN,
        describe_runs,
        normalize_status,
        select_runs,
    )
    from online_trainer.analysis.stats import final_performance, summarize

    dirs = [root / name for name in names if (root / name).is_dir() and storage.run_indices(root / name)]
    with _analysis_advice_unsaid():  # said below in the sweep's words (V24: "Pass include_unfinished=True")
        episodes = load_episodes(dirs) if dirs else pd.DataFrame()
    if dirs and "experiment" not in episodes:
        episodes.insert(0, "experiment", dirs[0].name)
    scored = list(dict.fromkeys(episodes["experiment"])) if len(episodes) else []
    if not scored:
        raise RuntimeError(
            f"No configuration of the sweep in {root} finished an episode, so none has a return to rank it by: "
            "sweep again into another exp_dir with a budget of episodes (num_episodes=...) or more steps "
            "(total_steps=...). A sweep compares its configurations on one budget: this one keeps its own."
        )
    unscored = [name for name in names if name not in scored]
    if unscored and log:
        logger.warning(
            "sweep: %d configuration(s) finished no episode and are ranked last, with no score: %s",
            len(unscored),
            ", ".join(unscored),
        )
    with _analysis_advice_unsaid():
        summary = summarize(episodes, last_k=last_k, group_by="experiment")
    left = [
        r for r in episodes.attrs.get(RUNS_ATTR) or [] if normalize_status(r.get(STATUS_COLUMN)) not in KEPT_STATUSES
    ]
    if left and log:
        logger.warning(
            "sweep: %d run(s) that did not finish are left out of the ranking: %s. Once their cause is fixed, the "
            "same sweep call (or Optuna objective) with resume=True runs them again.",
            len(left),
            describe_runs(pd.DataFrame(left)),
        )
    hp_rows = [{"experiment": name, **hyperparameters(root / name)} for name in scored]
    table = pd.DataFrame(hp_rows).merge(summary, on="experiment")
    table = table.sort_values(metric, ascending=False, kind="stable").reset_index(drop=True)
    kept, _ = select_runs(episodes, log=False)  # summarize() has named the runs left out
    finals = final_performance(kept, last_k, group_by="experiment", include_unfinished=True)
    table = _against_top(table, finals, metric, log)
    uneven = uneven_seeds(table)
    if uneven is not None:
        table.attrs["note"] = f"{table.attrs['note']} {uneven}"
        if log:
            logger.warning("sweep: %s", uneven)
    stopped = stopped_early_note(episodes.assign(candidate=episodes["experiment"]))
    if stopped is not None:  # a stopper's threshold is what such a run scores: the ranking must say so
        table.attrs["note"] = f"{table.attrs['note']} {stopped}"
        if log:
            logger.warning("sweep: %s", stopped)
    if unscored:  # after the configurations with a score, in the order of the grid, with why they have none
        rest = pd.DataFrame(
            [{"experiment": name, **hyperparameters(root / name), **_unscored_counts(root / name)} for name in unscored]
        )
        table = pd.concat([table, rest.assign(num_runs=0, told_apart=False, degenerate=False)], ignore_index=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table


def uneven_seeds(table: pd.DataFrame) -> str | None:
    """What to say of a ranking whose configurations ran different numbers of seeds (configurations of earlier
    calls keep theirs when a call grows ``num_runs``, tester O15); None when they all ran as many."""
    runs = table.set_index("experiment")
    # every run of each (those left out for their status, or without an episode, are said apart)
    counts = runs["num_runs"] + runs.get("num_missing", 0) + runs.get("num_excluded", 0)
    if counts.nunique() <= 1:
        return None
    listed = ", ".join(f"{name} ({int(count)})" for name, count in counts.items())
    return f"The configurations ran different numbers of seeds: {listed}; their intervals differ in width."


def _unscored_counts(exp_dir: Path) -> dict[str, int]:
    """``num_missing`` and ``num_excluded`` of a configuration with no episode, as ``summarize`` counts them: its runs
    that completed with none, and those left out for their status (interrupted, failed, pending)."""
    from online_trainer.analysis.selection import KEPT_STATUSES

    try:
        statuses = [entry["status"] for entry in storage.read_manifest(exp_dir)["runs"]]
    except (OSError, ValueError, KeyError):  # no manifest (a configuration never started): nothing to count
        return {"num_missing": 0, "num_excluded": 0}
    kept = sum(status in KEPT_STATUSES for status in statuses)
    return {"num_missing": kept, "num_excluded": len(statuses) - kept}


def _against_top(table: pd.DataFrame, finals: pd.DataFrame, metric: str, log: bool = True) -> pd.DataFrame:
    """Add the comparison of each configuration with the top one, and the note of ``attrs`` (logged with ``log``
    when the top ones cannot be told apart)."""
    from online_trainer.analysis.compare import CompareOptions, compare_scores

    columns = [
        "probability_of_improvement",
        "probability_of_improvement_lo",
        "probability_of_improvement_hi",
        "separation_bound",
    ]
    for column in columns:
        table[column] = float("nan")
    table["told_apart"] = False
    table["degenerate"] = False
    scored = finals.dropna(subset=["final_return"])
    have = set(scored["experiment"])
    # configurations whose runs all failed (or were cut off) have no score to compare: the others are compared
    # without them (one such configuration left every configuration without a comparison, tester O15)
    comparable = [name for name in table["experiment"] if name in have]
    apart = [name for name in table["experiment"] if name not in have]
    without = f" Not compared: {', '.join(apart)} (no run of it finished; see num_excluded)." if apart else ""
    if apart and log:
        logger.warning("sweep:%s", without)
    if len(comparable) < 2:
        table.attrs["note"] = f"A single configuration with scores: nothing to tell apart.{without}"
        return table
    scores = scored[scored["experiment"].isin(comparable)].rename(
        columns={"experiment": "candidate", "final_return": "raw_score"}
    )
    top = comparable[0]
    comparison = compare_scores(scores, CompareOptions(metric=metric), candidates=comparable, against=top)
    pairs = comparison.improvement[comparison.improvement["candidate"] == top].set_index("versus")
    row = {name: i for i, name in enumerate(table["experiment"])}
    for name in comparable[1:]:
        for column in columns:
            table.loc[row[name], column] = pairs.loc[name, column]
        table.loc[row[name], "told_apart"] = bool(pairs.loc[name, "distinguishable"])
        table.loc[row[name], "degenerate"] = bool(pairs.loc[name, "degenerate"])
    second = pairs.loc[comparable[1]]
    point = table["degenerate"]  # P's interval is a point: a complete separation, or scores that all tie
    separated = table["experiment"][point & table["probability_of_improvement"].isin([0.0, 1.0])].tolist()
    tied_runs = table["experiment"][point & (table["probability_of_improvement"] == 0.5)].tolist()
    caveat = (
        # N24: "which is no verdict either" read as taking back told_apart
        f" Every run of {top} beats every run of {', '.join(separated)} (complete separation): P = 1 with a point "
        "interval says these seeds never overlapped, not that every run would beat every run; separation_bound is "
        "the bound on P that holds."
        if separated
        else ""
    )
    if tied_runs:
        caveat += (
            f" The runs of {', '.join(tied_runs)} score exactly as those of {top} (P = 0.5 with a point interval): "
            "check that the hyperparameter reaches the agent."
        )
    interval = (
        f"P({top} > {second.name}) = {second['probability_of_improvement']:.2f} "
        f"[{second['probability_of_improvement_lo']:.2f}, {second['probability_of_improvement_hi']:.2f}]"
    )
    if second["distinguishable"]:
        table.attrs["note"] = (
            f"{top} is ahead of the others, and its {metric} lead is beyond noise ({interval}).{caveat}{without}"
        )
        return table
    tied = [top] + [name for name in comparable[1:] if not table.loc[row[name], "told_apart"]]
    needed = second["seeds_needed"]
    more = (
        f"; about {int(needed)} seeds per configuration would separate {top} from {second.name} if the difference holds"
        if needed == needed and needed != float("inf")
        else ""
    )
    why = (
        f"too few seeds for a verdict at 95%, whatever the interval of the {metric} difference with {top}"
        if second["too_few_seeds"]
        else f"the interval of the {metric} difference with {top} includes zero"
    )
    table.attrs["note"] = (
        f"The top configurations cannot be told apart: {', '.join(tied)} ({why}; {interval}){more}. The ranking "
        f"among them is noise.{caveat}{without}"
    )
    if log:
        logger.warning("sweep: %s", table.attrs["note"])
    return table
