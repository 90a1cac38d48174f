"""What :func:`online_trainer.analysis.compare.compare` compares: its options, its candidates, their per-run scores.

A *candidate* is what is compared (an agent, a configuration); a *task* is an env,
matched across candidates by its gymnasium id; a *run* (a seed) is the unit of
replication. The candidates' data end up in one table with the columns ``candidate``,
``task``, ``experiment`` and ``run`` (which identify a run) and the returns.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

from online_trainer.analysis.bootstrap import STATISTICS, Seed, check_seed
from online_trainer.analysis.dataframes import env_id_of, experiment_labels, load_episodes, load_evaluations
from online_trainer.analysis.selection import (
    RUNS_ATTR,
    check_ci,
    check_positive_int,
    describe_runs,
    runs_without_episodes,
    select_runs,
)
from online_trainer.analysis.stats import final_performance

logger = logging.getLogger(__name__)

Path_: TypeAlias = str | os.PathLike
Data: TypeAlias = pd.DataFrame | Path_ | Sequence[Path_] | Mapping[str, Path_ | Sequence[Path_]]
Normalize: TypeAlias = None | str | tuple[float, float] | Mapping[str, tuple[float, float]]

SOURCES = ("episodes", "eval")
#: The task of runs whose env id is not known.
UNKNOWN_TASK = "task"
RUN_KEYS = ["candidate", "task", "experiment", "run"]


@dataclass(frozen=True, kw_only=True)
class CompareOptions:
    """How :func:`~online_trainer.analysis.compare.compare` scores runs and draws its intervals."""

    source: str = "episodes"
    """``"episodes"``: a run's score is the mean return of its last ``last_k`` training episodes (as
    :func:`~online_trainer.analysis.stats.summarize`); ``"eval"``: the mean return of its last evaluation."""
    last_k: int = 10
    """Training episodes averaged into a run's score (``source="episodes"``) and into each point of its curve."""
    normalize: Normalize = None
    """``None``: raw returns; ``"minmax"``: per task, 0 the lowest and 1 the highest score of any run; a
    ``(random, reference)`` pair for every task, or a mapping from env id to such a pair: per task,
    ``(score - random) / (reference - random)``."""
    optimality_threshold: float | None = None
    """Score counted as optimal by the optimality gap; ``None``: 1 when scores are normalised, else the gap is NaN."""
    metric: str = "iqm"
    """``"iqm"``, ``"mean"`` or ``"median"``: the statistic whose differences decide "can be told apart"."""
    ci: float = 0.95
    """Confidence level of every interval."""
    n_resamples: int = 10_000
    """Bootstrap resamples of every interval."""
    seed: Seed = 0
    """Seed of the bootstrap: the same seed gives the same intervals."""
    num_taus: int = 101
    """Points of the performance profiles' grid of thresholds."""
    num_points: int = 50
    """Points of the sample-efficiency curves' common grid of env steps."""
    include_unfinished: bool = False
    """Keep failed, interrupted and pending runs (left out by default, with a logged warning)."""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(
                f"source must be one of {SOURCES}, got source={self.source!r}: 'episodes' scores the "
                "last training episodes, 'eval' the last evaluation of each run."
            )
        check_positive_int("last_k", self.last_k)
        check_ci(self.ci)
        if self.ci is None:
            raise ValueError(
                "ci must be a confidence level in (0, 1) such as 0.95, got ci=None: compare always reports intervals."
            )
        check_positive_int("n_resamples", self.n_resamples, minimum=100)
        check_seed(self.seed)
        check_positive_int("num_taus", self.num_taus, minimum=2)
        check_positive_int("num_points", self.num_points, minimum=2)
        if self.metric not in STATISTICS:
            raise ValueError(f"metric must be one of {sorted(STATISTICS)}, got metric={self.metric!r}.")
        threshold = self.optimality_threshold
        if threshold is not None and not (isinstance(threshold, (int, float)) and math.isfinite(threshold)):
            raise ValueError(
                f"optimality_threshold must be a finite number or None, got optimality_threshold={threshold!r}."
            )
        _check_normalize(self.normalize)


def _check_pair(name: str, pair: Any) -> None:
    ok = (
        isinstance(pair, (tuple, list))
        and len(pair) == 2
        and all(isinstance(v, (int, float)) and math.isfinite(v) for v in pair)
        and pair[0] != pair[1]
    )
    if not ok:
        raise ValueError(
            f"{name} must be a pair (random score, reference score) of two different finite numbers, got {pair!r}."
        )


def _check_normalize(normalize: Normalize) -> None:
    if normalize is None or normalize == "minmax":
        return
    if isinstance(normalize, Mapping):
        for task, pair in normalize.items():
            _check_pair(f"normalize[{task!r}]", pair)
        return
    if isinstance(normalize, str):
        raise ValueError(
            f"normalize must be None, 'minmax', a (random, reference) pair or a mapping from env id "
            f"to such a pair, got normalize={normalize!r}."
        )
    _check_pair("normalize", normalize)


# ----------------------------------------------------------------------------- loading
def _label(row: Mapping[str, Any], by: list[str]) -> str:
    """A candidate's name: a text value of one column as it is (``dqn``, a sweep's ``lr=0.1``), else
    ``column=value`` (``lr=0.1``: a number alone does not say what it is)."""
    if len(by) == 1 and isinstance(row[by[0]], str):
        return row[by[0]]
    return ", ".join(f"{c}={row[c]}" for c in by)


def _tasks_from_dirs(df: pd.DataFrame, paths: Sequence[Path_]) -> pd.Series:
    """The env id of each row's experiment (a column ``experiment`` or the single experiment of ``paths``)."""
    labels = experiment_labels(paths)
    ids = {label: env_id_of(path) or UNKNOWN_TASK for label, path in labels.items()}
    if "experiment" in df.columns:
        return df["experiment"].map(ids).fillna(UNKNOWN_TASK)
    return pd.Series(next(iter(ids.values())), index=df.index)


def _tasks_from_attrs(df: pd.DataFrame) -> pd.Series | str:
    """A DataFrame's tasks: its ``env_id`` column, else the ``env_id`` of its runs in ``attrs["runs"]``."""
    if "env_id" in df.columns:
        return df["env_id"].fillna(UNKNOWN_TASK)
    ident = [c for c in ("experiment", "run") if c in df.columns]
    ids = {tuple(r.get(c) for c in ident): r.get("env_id") for r in df.attrs.get(RUNS_ATTR) or []}
    if not ident or not any(ids.values()):
        return UNKNOWN_TASK
    keys = df[ident].itertuples(index=False, name=None)
    return pd.Series([ids.get(tuple(k)) or UNKNOWN_TASK for k in keys], index=df.index)


def _load_paths(paths: Sequence[Path_], source: str) -> pd.DataFrame:
    df = load_evaluations(paths) if source == "eval" else load_episodes(paths)
    runs = df.attrs.get(RUNS_ATTR)
    df = df.copy()
    df["task"] = _tasks_from_dirs(df, paths)
    if "experiment" not in df.columns:
        name = os.path.basename(os.path.normpath(os.fspath(paths[0])))
        df.insert(0, "experiment", name)
        if runs is not None:
            runs = [{**r, "experiment": name} for r in runs]
    if runs is not None:
        df.attrs[RUNS_ATTR] = runs
    return df


def load_candidates(data: Data, by: str | Sequence[str] | None, source: str) -> pd.DataFrame:
    """The table of every candidate's runs (episodes, or evaluations with ``source="eval"``).

    Columns ``candidate``, ``task``, ``experiment``, ``run`` and those of
    :func:`~online_trainer.analysis.dataframes.load_episodes` (or ``load_evaluations``);
    ``attrs["runs"]`` lists the runs; ``attrs["candidates"]`` the candidates in the order given.

    Raises:
        ValueError: the data cannot be split into candidates, or a ``by`` column is missing.
        FileNotFoundError: a directory is missing or holds no experiment.
    """
    by_cols = [by] if isinstance(by, str) else (list(by) if by is not None else [])
    if isinstance(data, Mapping):
        if by_cols:
            raise ValueError(
                "by= applies to directories or a DataFrame; a mapping {label: directories} names its "
                f"candidates already, got by={by!r}."
            )
        frames, runs = [], []
        for label, paths in data.items():
            paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
            frame = _load_paths(paths, source)
            frame["experiment"] = f"{label}/" + frame["experiment"].astype(str)
            frame.insert(0, "candidate", str(label))
            runs += [{**r, "experiment": f"{label}/{r.get('experiment')}"} for r in frame.attrs.get(RUNS_ATTR) or []]
            frames.append(frame)
        df = pd.concat(frames, ignore_index=True)
        df.attrs[RUNS_ATTR] = runs
        df.attrs["candidates"] = [str(label) for label in data]
        _place_runs(df, lambda experiment: experiment.split("/", 1)[0])
        return _checked(df, source)
    if isinstance(data, pd.DataFrame):
        df = data.copy()
        if "task" not in df.columns:
            df["task"] = _tasks_from_attrs(df)
        if not by_cols and "experiment" not in df.columns:
            raise ValueError(
                "A DataFrame to compare needs an 'experiment' column (several experiments loaded "
                "together) or by=<column> naming what tells the candidates apart; "
                f"its columns are {list(df.columns)}."
            )
    else:
        paths = [data] if isinstance(data, (str, os.PathLike)) else list(data)
        if not paths or not all(isinstance(p, (str, os.PathLike)) for p in paths):
            raise TypeError(
                "data must be a DataFrame, an experiment or sweep directory, a list of them, or a "
                f"mapping from candidate label to directories; got {type(data).__name__}: {data!r:.80}."
            )
        df = _load_paths(paths, source)
    missing = [c for c in by_cols if c not in df.columns]
    if missing:
        raise ValueError(
            f"by={by!r} names column(s) {missing} that the data does not have; available columns: {list(df.columns)}."
        )
    _refuse_missing_values(df, by_cols, by)
    cols = by_cols or ["experiment"]
    df.insert(0, "candidate", [_label(r, cols) for r in df[cols].to_dict("records")])
    if "experiment" not in df.columns:
        df["experiment"] = df["candidate"] + "/" + df["task"].astype(str)
    _place_runs(df, (lambda experiment: experiment) if not by_cols else None)
    placed = [r["candidate"] for r in df.attrs.get(RUNS_ATTR) or [] if "candidate" in r]
    df.attrs["candidates"] = list(dict.fromkeys([*df["candidate"], *placed]))
    if by_cols:  # each candidate's values of the by columns: the key the plots' group_by gives it (colors=)
        values = df.drop_duplicates("candidate").set_index("candidate")[by_cols]
        df.attrs["candidate_values"] = {
            name: row[0] if len(row) == 1 else tuple(row) for name, row in zip(values.index, values.to_numpy().tolist())
        }
    return _checked(df, source)


def _refuse_missing_values(df: pd.DataFrame, by_cols: list[str], by: Any) -> None:
    """Refuse rows without a value in a ``by`` column: experiments without that hyperparameter would be pooled as
    one candidate, ``lr=nan``, however unlike they are."""
    for col in by_cols:
        lacking = df[col].isna()
        if lacking.any():
            of = (
                f"the experiment(s) {', '.join(map(str, dict.fromkeys(df.loc[lacking, 'experiment'])))}"
                if "experiment" in df.columns
                else f"{int(lacking.sum())} row(s)"
            )
            raise ValueError(
                f"by={by!r}: {of} have no {col!r} (not among their hyperparameters), and would be pooled as one "
                f"candidate, {col}=nan, however they differ. Leave them out, or compare the experiments themselves "
                "(no by=)."
            )


def _place_runs(df: pd.DataFrame, candidate_of: Callable[[str], str] | None) -> None:
    """Give every run of ``df.attrs["runs"]`` its candidate and task, so that runs without a finished episode (no row
    of ``df``) count as runs without a score, and a task none of whose runs finished one is not silently dropped.

    A run takes the candidate and task of its experiment's rows; an experiment without rows, its candidate from
    ``candidate_of(experiment)`` (None: unknown, as for ``by=`` a hyperparameter) and its task from its env id.
    """
    runs = df.attrs.get(RUNS_ATTR)
    if not runs:
        return
    experiments = df["experiment"].astype(str)
    candidates, tasks = dict(zip(experiments, df["candidate"])), dict(zip(experiments, df["task"]))
    placed = []
    for run in runs:
        experiment = str(run.get("experiment"))
        candidate = candidates.get(experiment) or (candidate_of(experiment) if candidate_of else None)
        task = tasks.get(experiment) or run.get("env_id") or UNKNOWN_TASK
        placed.append({**run, "task": task, **({"candidate": candidate} if candidate is not None else {})})
    df.attrs[RUNS_ATTR] = placed


def _checked(df: pd.DataFrame, source: str) -> pd.DataFrame:
    value = "eval_return" if source == "eval" else "ep_return"
    if value not in df.columns:
        other = "source='episodes'" if source == "eval" else "source='eval'"
        raise ValueError(
            f"source={source!r} reads the column {value!r}, which the data lacks (columns: "
            f"{list(df.columns)}); pass {other}, or data that has it."
        )
    if source == "eval":  # before the empty data's message: it names the candidates without evaluations
        unevaluated = [c for c in df.attrs["candidates"] if c not in set(df["candidate"])]
        if unevaluated:
            several = len(unevaluated) > 1
            raise ValueError(
                f"source='eval' compares evaluations, but {', '.join(unevaluated)} {'have' if several else 'has'} "
                f"none on record: {'their' if several else 'its'} runs ran none (training with "
                "evaluation=EvaluationOptions(freq=...) schedules them), or all ended before their first. Compare on "
                f"training episodes (source='episodes'), or evaluate {'their' if several else 'its'} checkpoints "
                "(OnlineTrainer.evaluate)."
            )
    if df.empty:
        raise ValueError(
            f"There is nothing to compare: no {'evaluation' if source == 'eval' else 'episode'} in the data."
        )
    if len(df.attrs["candidates"]) < 2:
        raise ValueError(
            f"compare needs at least two candidates, got {df.attrs['candidates']}: pass several "
            "directories, a sweep directory, or by=<hyperparameter column>."
        )
    return df


# ----------------------------------------------------------------------------- per-run scores
def run_scores(df: pd.DataFrame, options: CompareOptions) -> pd.DataFrame:
    """One row per run: ``candidate``, ``task``, ``experiment``, ``run``, ``seed``, ``raw_score`` (NaN: no score)."""
    if options.source == "eval":
        kept, _ = select_runs(df, options.include_unfinished)
        order = [c for c in ("global_step", "eval_index") if c in kept.columns]
        last = kept.sort_values(RUN_KEYS + order, kind="stable").groupby(RUN_KEYS, dropna=False).tail(1)
        # the runs kept that were never evaluated (failed before their first evaluation): runs without a score
        unevaluated = runs_without_episodes(kept, RUN_KEYS)
        scores = pd.concat([last, unevaluated], ignore_index=True) if len(unevaluated) else last
        scores = scores.rename(columns={"eval_return": "raw_score"})
    else:
        scores = final_performance(
            df, options.last_k, group_by=["candidate", "task"], include_unfinished=options.include_unfinished
        )
        scores = scores.rename(columns={"final_return": "raw_score"})
    columns = RUN_KEYS + [c for c in ("seed",) if c in scores.columns] + ["raw_score"]
    return scores[columns].reset_index(drop=True)


def normalization_bounds(scores: pd.DataFrame, normalize: Normalize) -> dict[str, tuple[float, float]]:
    """Per task, the ``(score of 0, score of 1)`` of the normalisation (empty: none).

    Raises:
        ValueError: a mapping lacks a task of the data, or the runs of a task all score the same under ``"minmax"``.
    """
    tasks = list(dict.fromkeys(scores["task"]))
    if normalize is None:
        return {}
    if normalize == "minmax":
        bounds = {}
        for task in tasks:
            values = scores.loc[scores["task"] == task, "raw_score"].to_numpy(float)
            values = values[np.isfinite(values)]
            if values.size == 0 or values.min() == values.max():
                raise ValueError(
                    f"normalize='minmax' needs runs that score differently on task {task!r}; give "
                    "(random, reference) scores instead."
                )
            bounds[task] = (float(values.min()), float(values.max()))
        return bounds
    if isinstance(normalize, Mapping):
        missing = [t for t in tasks if t not in normalize]
        if missing:
            raise ValueError(
                f"normalize has no (random, reference) scores for task(s) {missing}; the tasks are {tasks}."
            )
        return {t: (float(normalize[t][0]), float(normalize[t][1])) for t in tasks}
    return {t: (float(normalize[0]), float(normalize[1])) for t in tasks}


def normalized(values: np.ndarray, task: str, bounds: Mapping[str, tuple[float, float]]) -> np.ndarray:
    """``values`` of ``task`` on the normalised scale (unchanged without normalisation)."""
    if task not in bounds:
        return values
    low, high = bounds[task]
    return (values - low) / (high - low)


def check_tasks(scores: pd.DataFrame, candidates: Sequence[str]) -> list[str]:
    """The tasks, each of which every candidate must have runs with a score on.

    Raises:
        ValueError: a candidate has no scored run on a task another candidate has.
    """
    tasks = list(dict.fromkeys(scores["task"]))
    valid = scores[np.isfinite(scores["score"].to_numpy(float))]
    have = valid.groupby("candidate")["task"].agg(set).to_dict()
    gaps = {c: sorted(set(tasks) - have.get(c, set())) for c in candidates}
    gaps = {c: t for c, t in gaps.items() if t}
    if gaps:
        unknown = ""
        if UNKNOWN_TASK in tasks and len(tasks) > 1:  # some env ids known, others not
            of = sorted(set(scores.loc[scores["task"] == UNKNOWN_TASK, "candidate"]))
            unknown = (
                f" The runs of {', '.join(of)} have no env id on record (task {UNKNOWN_TASK!r}: an experiment written "
                "by an earlier version, or a DataFrame without a 'task' column): name their task yourself, e.g. "
                "df = load_episodes(dirs); df['task'] = 'CartPole-v1'; compare(df, by=...)."
            )
        raise ValueError(
            f"Every candidate must have scored runs on every task (tasks are matched by env id): "
            f"missing {gaps}. Compare on the tasks they share, or run the missing ones (a run that finished no "
            "episode, or has not run yet, has no score: resume an experiment cut off; runs that did not finish are "
            f"left out unless include_unfinished=True).{unknown}"
        )
    return tasks


def budget_note(df: pd.DataFrame) -> str | None:
    """A warning when the candidates of a task ran on different budgets (``None`` when they did not, or the data
    does not say: a DataFrame without the runs' manifests).

    Final scores of runs trained for 20,000 and 30,000 env steps rank the budgets as much as the agents.
    """
    runs = df.attrs.get(RUNS_ATTR) or []
    if not runs or "experiment" not in df.columns:
        return None
    candidate_of = dict(zip(df["experiment"].astype(str), df["candidate"]))
    task_of = dict(zip(df["experiment"].astype(str), df["task"].astype(str)))
    budgets: dict[str, dict[str, set[str]]] = {}
    for run in runs:
        experiment = str(run.get("experiment", next(iter(candidate_of), "")))
        if experiment not in candidate_of or run.get("budget") is None:
            continue
        budget = f"{run['budget']:,} {'env steps' if run.get('budget_unit') == 'steps' else 'episodes'}"
        of_task = budgets.setdefault(task_of[experiment], {})
        of_task.setdefault(candidate_of[experiment], set()).add(budget)
    notes = []
    for task, by_candidate in budgets.items():
        if len({budget for kept in by_candidate.values() for budget in kept}) > 1:
            listed = "; ".join(f"{c}: {', '.join(sorted(b))}" for c, b in by_candidate.items())
            notes.append(f"{task} ({listed})")
    if not notes:
        return None
    return (
        "The candidates ran on different budgets, so their final scores also compare the budgets: "
        + "; ".join(notes)
        + ". Compare runs of one budget, or read the sample-efficiency curves at a step they all reached."
    )


def stopped_early_note(df: pd.DataFrame) -> str | None:
    """A warning when some compared runs were stopped early by a hook (None when none was, or the data does not say).

    Their final scores are of the episodes before they stopped, compared with runs that used their whole budget:
    a run a stopper ends once it reaches a return threshold scores that threshold, whatever it would have reached.
    """
    runs = df.attrs.get(RUNS_ATTR) or []
    if not runs or "experiment" not in df.columns:
        return None
    candidate_of = dict(zip(df["experiment"].astype(str), df["candidate"]))
    stopped: dict[str, list[str]] = {}
    for run in runs:
        experiment = str(run.get("experiment", next(iter(candidate_of), "")))
        if experiment not in candidate_of or run.get("status") != "stopped_early":
            continue
        at = ""
        if run.get("budget") and run.get("budget_unit") == "steps" and run.get("env_steps") is not None:
            at = f" at {int(run['env_steps']):,} of {int(run['budget']):,} env steps"
        elif run.get("budget"):
            at = f" after {run.get('num_episodes', 0):,} of {int(run['budget']):,} episodes"
        why = f" ({run['stop_reason']})" if run.get("stop_reason") else ""
        stopped.setdefault(candidate_of[experiment], []).append(f"run {run['run']}{at}{why}")
    if not stopped:
        return None
    listed = "; ".join(f"{candidate}: {', '.join(runs_of)}" for candidate, runs_of in stopped.items())
    scored = "last evaluation" if "eval_return" in df.columns else "last episodes"
    return (
        f"Some runs were stopped early by a hook, so their scores are of their {scored} before they stopped, "
        f"not at the end of the budget the other runs used: {listed}."
    )


def scale_note(scores: pd.DataFrame, normalize: Normalize) -> str | None:
    """A warning when the scores of several tasks are pooled as they are: raw returns of tasks on other scales
    (CartPole's 0-500 beside Acrobot's -500-0) make every aggregate across tasks a sum of scales. None with one
    task, or with ``normalize``."""
    tasks = list(dict.fromkeys(scores["task"]))
    if normalize is not None or len(tasks) < 2:
        return None
    return (
        f"The scores of {len(tasks)} tasks ({', '.join(map(str, tasks))}) are pooled as raw returns: each "
        "aggregate across tasks mixes their scales. Pass normalize=(random, reference) per task, or "
        "normalize='minmax' (--normalize on the command line), to compare them on one scale."
    )


def unscored_candidates(scores: pd.DataFrame, candidates: Sequence[str]) -> tuple[list[str], str | None]:
    """The candidates that have a scored run on some task, and a note naming the others (None when there is none).

    A candidate none of whose runs has a score (a sweep's configuration whose runs all failed, or were cut off before
    their first episode, or finished no episode) is left out of the comparison of the others, as the sweep's ranking
    leaves it out. When fewer than two candidates have a score, all are kept: :func:`check_tasks` then says what is
    missing.
    """
    valid = scores[np.isfinite(scores["raw_score"].to_numpy(float))]
    have = set(valid["candidate"])
    scored = [c for c in candidates if c in have]
    apart = [c for c in candidates if c not in have]
    if not apart or len(scored) < 2:
        return list(candidates), None
    return scored, (
        f"Not compared: {', '.join(map(str, apart))} (no run of it has a score: its runs failed or were cut off, "
        "and are left out unless include_unfinished=True, or finished no episode; `online-trainer show` says which)."
    )


def left_out_note(df: pd.DataFrame, include_unfinished: bool) -> str | None:
    """The runs left out of the comparison because they did not finish (None when none is, or with
    ``include_unfinished``)."""
    _, excluded = select_runs(df, include_unfinished, log=False)
    if not len(excluded):
        return None
    return (
        f"Runs that did not finish are left out of the scores: {describe_runs(excluded)}. Pass "
        "include_unfinished=True (--include-unfinished on the command line) to score them."
    )


def unfinished_note(df: pd.DataFrame, include_unfinished: bool) -> str | None:
    """With ``include_unfinished``: the runs scored though they did not finish (interrupted, failed, still running);
    None when there is none, or without it (they are left out: :func:`left_out_note`)."""
    if not include_unfinished:
        return None
    _, unfinished = select_runs(df, False, log=False)
    if not len(unfinished):
        return None
    return (
        f"Runs that did not finish are scored on the episodes they had, beside runs that used their whole budget: "
        f"{describe_runs(unfinished)}. Resume them, or leave them out (without include_unfinished), to compare "
        "runs of one budget."
    )


def different_seeds_note(df: pd.DataFrame) -> str | None:
    """A warning when the candidates of a task ran on different seeds (None when they did not, or the data has
    none): runs of one seed share the env's and the agent's random streams, so the same seeds pair the candidates'
    luck and leave their difference to the agents."""
    if "seed" not in df.columns or "experiment" not in df.columns:
        return None
    runs = df.drop_duplicates(["candidate", "task", "experiment", "run"])
    notes = []
    for task, of_task in runs.groupby("task", sort=False):
        seeds = {
            c: frozenset(rows["seed"].dropna().astype(int)) for c, rows in of_task.groupby("candidate", sort=False)
        }
        if len(set(seeds.values())) > 1:
            listed = "; ".join(f"{c}: {_some(sorted(kept))}" for c, kept in seeds.items())
            notes.append(f"{task} ({listed})")
    if not notes:
        return None
    return (
        "The candidates ran on different seeds: " + "; ".join(notes) + ". Runs of one seed share the env's and the "
        "agent's random streams, so the same seeds pair the candidates' luck; run every candidate with the same "
        "seed_offset and number of runs."
    )


def _some(values: list[int], shown: int = 4) -> str:
    """``seeds 0, 10000, 20000 and 2 more``."""
    head = ", ".join(str(v) for v in values[:shown])
    return f"seeds {head}" + (f" and {len(values) - shown} more" if len(values) > shown else "")


def shared_seed_note(df: pd.DataFrame) -> str | None:
    """A warning when a candidate pools experiments whose runs share seeds (``by="lr"`` over a sweep that also
    varies ``gamma``): its runs are counted apart, as independent, though runs of one seed are not (they share
    the env's and the agent's random streams). None when no candidate does, or the data has no seeds."""
    if "seed" not in df.columns or "experiment" not in df.columns:
        return None
    runs = df.drop_duplicates(["candidate", "task", "experiment", "run"])
    pooled = []
    for (candidate, _task), rows in runs.groupby(["candidate", "task"], sort=False):
        if rows["experiment"].nunique() > 1 and rows["seed"].duplicated().any():
            pooled.append(
                f"{candidate} ({rows['experiment'].nunique()} experiments, {len(rows)} runs of "
                f"{rows['seed'].nunique()} seeds)"
            )
    if not pooled:
        return None
    return (
        "Some candidates pool experiments that ran the same seeds: "
        + "; ".join(pooled)
        + ". Their runs are counted as independent, but runs of one seed share its random streams, so the "
        "intervals may be too narrow (and 'seeds' counts runs). Compare the configurations themselves (no by=), "
        "or give each configuration its own seeds."
    )
