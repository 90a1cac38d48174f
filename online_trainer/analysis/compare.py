"""Is A better than B? Compare experiments with the statistics of Agarwal et al. (2021).

:func:`compare` scores each run (the seed is the unit of replication), normalises the
scores per task if asked, and reports, each with a 95% stratified-bootstrap confidence
interval (runs resampled within each task; see :mod:`online_trainer.analysis.compare_stats`):
aggregate IQM, mean, median and optimality gap per candidate; the probability of
improvement of each candidate over each other; performance profiles; sample-efficiency
curves. The same ``seed`` gives the same intervals. Candidates, tasks and scores are
described in :mod:`online_trainer.analysis.compare_inputs`.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from online_trainer.analysis import compare_stats as cs
from online_trainer.analysis.bootstrap import STATISTICS, GroupStreams, estimate
from online_trainer.analysis.compare_curves import sample_efficiency
from online_trainer.analysis.compare_inputs import (
    CompareOptions,
    Data,
    budget_note,
    check_tasks,
    different_seeds_note,
    left_out_note,
    load_candidates,
    normalization_bounds,
    normalized,
    run_scores,
    scale_note,
    shared_seed_note,
    stopped_early_note,
    unfinished_note,
    unscored_candidates,
)
from online_trainer.analysis.stats import aggregate
from online_trainer.options.validation import suggests_keywords

if TYPE_CHECKING:
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

__all__ = ["Comparison", "CompareOptions", "compare", "compare_scores"]


@dataclass(frozen=True)
class Comparison:
    """The tables :func:`compare` returns (tidy DataFrames: one row per observation)."""

    scores: pd.DataFrame
    """One row per run: ``candidate``, ``task``, ``experiment``, ``run``, ``seed``, ``raw_score`` and
    ``score`` (normalised when asked; NaN for a run without a score, left out of the statistics)."""
    aggregates: pd.DataFrame
    """One row per candidate, in the order given: ``candidate``, ``iqm``, ``iqm_lo``, ``iqm_hi``, ``mean``,
    ``median``, ``optimality_gap`` (each with ``_lo``, ``_hi``), ``num_runs``, ``num_missing``, ``num_tasks``."""
    improvement: pd.DataFrame
    """One row per ordered pair: ``candidate``, ``versus``, ``probability_of_improvement`` (P(candidate >
    versus)) with ``_lo``/``_hi``; ``difference`` (the metric of ``candidate`` minus that of ``versus``) with
    ``_lo``/``_hi``; ``intervals_overlap`` (the two candidates' metric intervals overlap);
    ``distinguishable`` (the interval of the difference excludes zero, with enough seeds: not
    ``too_few_seeds``); ``too_few_seeds`` (with these numbers of runs no exact rank test can reach the
    level ``ci``: even a complete separation has a two-sided p-value above ``1 - ci``, see
    :func:`~online_trainer.analysis.compare_stats.smallest_p_value`; 3 seeds a side on one task at 95%);
    ``seeds_needed`` (seeds per candidate and task for the difference to be told apart, if it stays as
    observed; never fewer than were run, nor than enough seeds); ``degenerate`` (every
    bootstrap resample gave the same P: its interval is a point, a certainty the seeds cannot give, as under
    complete separation, where every run of one beats every run of the other); ``separation_bound`` (after
    complete separation, the bound on P that holds whatever the score distributions, at one-sided level
    ``(1 + ci) / 2``: a lower bound when P = 1, an upper one when P = 0, see
    :func:`~online_trainer.analysis.compare_stats.separation_bound`; else NaN); ``separation_chance`` (the
    chance of that separation if both came from one distribution: ``1 / C(n + m, n)`` per task; else NaN)."""
    profiles: pd.DataFrame
    """Performance profiles: ``candidate``, ``tau``, ``fraction`` (of runs scoring above ``tau``, averaged
    over tasks), ``fraction_lo``, ``fraction_hi``."""
    curves: pd.DataFrame
    """Sample-efficiency curves: ``candidate``, ``global_step``, ``value`` (the metric across runs), ``lo``,
    ``hi``, ``num_runs`` (runs with data there), ``total_runs``."""
    options: CompareOptions = field(default_factory=CompareOptions)
    """The options it was computed with."""
    info: dict[str, Any] = field(default_factory=dict)
    """``candidates`` (in order), ``tasks``, ``normalization`` (per task, the scores of 0 and 1),
    ``optimality_threshold``, and the notes ``budget_note``, ``shared_seed_note``, ``stopped_early_note``,
    ``unfinished_note``, ``seeds_note``, ``left_out_note`` and ``scale_note`` (None, or a warning)."""

    def figures(self, colors: Mapping[Any, Any] | None = None) -> dict[str, Figure]:
        """The four figures of the comparison, as ``online-trainer compare`` saves them: ``"aggregates"``,
        ``"improvement"``, ``"profiles"`` and ``"sample_efficiency"`` (left out when there are no curves,
        as with ``source="eval"`` runs never evaluated). In a notebook each displays as it is; save one
        with ``.savefig(path, dpi=150)``.

        Args:
            colors: A colour for some candidates, by name (``{"dqn": "tab:red"}``); the others take the palette's
                colour of their place in name order, as the learning-curve plots give the same experiments.

        Raises:
            ValueError: ``colors`` names no candidate, or holds what matplotlib takes for no colour.
        """
        from online_trainer.analysis import compare_plots  # matplotlib only when figures are asked for

        plots: dict[str, Callable[..., Figure]] = {
            "aggregates": compare_plots.plot_aggregates,
            "improvement": compare_plots.plot_improvement,
            "profiles": compare_plots.plot_profiles,
            "sample_efficiency": compare_plots.plot_sample_efficiency,
        }
        return {
            name: plot(self, colors=colors)
            for name, plot in plots.items()
            if not (name == "sample_efficiency" and self.curves.empty)
        }


@suggests_keywords
def compare(
    data: Data,
    *,
    by: str | Sequence[str] | None = None,
    source: str = "episodes",
    last_k: int = 10,
    normalize: Any = None,
    optimality_threshold: float | None = None,
    metric: str = "iqm",
    ci: float = 0.95,
    n_resamples: int = 10_000,
    seed: Any = 0,
    num_taus: int = 101,
    num_points: int = 50,
    include_unfinished: bool = False,
) -> Comparison:
    """Compare experiments: aggregate metrics, probability of improvement, profiles, sample efficiency.

    Args:
        data: Experiment directories (each a candidate, named by its directory), a sweep
            directory (each configuration a candidate), a mapping from a candidate's label
            to its directories (one per task), or a DataFrame of
            :func:`~online_trainer.analysis.dataframes.load_episodes` (``source="eval"``:
            of ``load_evaluations``) whose ``experiment`` column names the candidates.
            Tasks are matched across candidates by env id (the ``task`` or ``env_id``
            column of a DataFrame).
        by: Column(s), such as a hyperparameter, whose values are the candidates instead.
        source: ``"episodes"``: a run's score is the mean return of its last ``last_k``
            training episodes, as :func:`~online_trainer.analysis.stats.summarize`;
            ``"eval"``: the mean return of its last evaluation.
        last_k: See ``source``; also the window of the trailing mean of the curves.
        normalize: ``None``, ``"minmax"`` or ``(random, reference)`` scores (one pair, or
            a mapping from env id to a pair): see :class:`CompareOptions`.
        optimality_threshold: The optimal score of the optimality gap (default 1 on a
            normalised scale; NaN gap on raw scores unless given).
        metric: ``"iqm"``, ``"mean"`` or ``"median"``: what ``difference`` and
            ``seeds_needed`` are about.
        ci: Confidence level of the intervals.
        n_resamples: Bootstrap resamples (10,000, as :func:`~online_trainer.analysis.stats.summarize`: the same runs get
            the same intervals from both).
        seed: Seed of the bootstrap (the same seed gives the same intervals).
        num_taus: Thresholds of the performance profiles.
        num_points: Points of the sample-efficiency curves.
        include_unfinished: Keep runs that did not finish.

    Returns:
        A :class:`Comparison`.

    Raises:
        ValueError: An option is invalid, there are fewer than two candidates, or a
            candidate lacks a task another one has (all raised before any bootstrap).
    """
    options = CompareOptions(
        source=source,
        last_k=last_k,
        normalize=normalize,
        optimality_threshold=optimality_threshold,
        metric=metric,
        ci=ci,
        n_resamples=n_resamples,
        seed=seed,
        num_taus=num_taus,
        num_points=num_points,
        include_unfinished=include_unfinished,
    )
    table = load_candidates(data, by, options.source)
    note, pooled, stopped = budget_note(table), shared_seed_note(table), stopped_early_note(table)
    unfinished = unfinished_note(table, options.include_unfinished)
    seeds = different_seeds_note(table)
    scores = run_scores(table, options)
    # a candidate without any score (a sweep's configuration whose runs all failed) would refuse the comparison of
    # the others (tester O15): it is left out, named
    candidates, unscored = unscored_candidates(scores, table.attrs["candidates"])
    scores = scores[scores["candidate"].isin(candidates)].reset_index(drop=True)
    bounds = normalization_bounds(scores, options.normalize)
    scale = scale_note(scores, options.normalize)
    comparison = compare_scores(scores, options, candidates, bounds)
    # once the comparison stands: a refused one's error is the news
    for warning in (unscored, note, seeds, pooled, stopped, unfinished, scale):
        if warning is not None:
            logger.warning("compare: %s", warning)
    curves = sample_efficiency(table, options, candidates, bounds)
    return Comparison(
        comparison.scores,
        comparison.aggregates,
        comparison.improvement,
        comparison.profiles,
        curves,
        options,
        {
            **comparison.info,
            "budget_note": note,
            "shared_seed_note": pooled,
            "stopped_early_note": stopped,
            "unfinished_note": unfinished,
            "seeds_note": seeds,
            "left_out_note": left_out_note(table, options.include_unfinished),  # run_scores logs it
            "scale_note": scale,
            "unscored_note": unscored,
            "candidate_values": table.attrs.get("candidate_values", {}),
        },
    )


def compare_scores(
    scores: pd.DataFrame,
    options: CompareOptions = CompareOptions(),
    candidates: Sequence[str] | None = None,
    bounds: dict[str, tuple[float, float]] | None = None,
    against: str | None = None,
) -> Comparison:
    """The statistics of :func:`compare` on per-run scores (no curves).

    Args:
        scores: One row per run with ``candidate``, ``raw_score`` and optionally ``task``.
        options: See :class:`CompareOptions` (``source`` and ``last_k`` are not used).
        candidates: Their order (default: as they appear).
        bounds: Per task, the raw scores of 0 and 1 (default: from ``options.normalize``).
        against: compare only the pairs with this candidate in ``improvement`` (a ranking against its top: as
            many pairs as candidates, not their square). Each pair's figures are those of the full comparison.
    """
    scores = scores.copy()
    if "task" not in scores.columns:
        scores["task"] = "task"
    candidates = list(candidates or dict.fromkeys(scores["candidate"]))
    bounds = normalization_bounds(scores, options.normalize) if bounds is None else bounds
    scores["score"] = np.nan
    for task, rows in scores.groupby("task").groups.items():
        scores.loc[rows, "score"] = normalized(scores.loc[rows, "raw_score"].to_numpy(float), task, bounds)
    tasks = check_tasks(scores, candidates)
    arrays = {c: [_task_scores(scores, c, t) for t in tasks] for c in candidates}
    threshold = options.optimality_threshold
    if threshold is None and bounds:
        threshold = 1.0
    streams = GroupStreams(options.seed)
    aggregates = _aggregates(scores, arrays, candidates, threshold, options, streams)
    improvement = _improvement(arrays, aggregates, candidates, options, streams, against)
    profiles = _profiles(arrays, candidates, options, streams)
    info = {"candidates": candidates, "tasks": tasks, "normalization": bounds, "optimality_threshold": threshold}
    return Comparison(scores, aggregates, improvement, profiles, pd.DataFrame(), options, info)


def _task_scores(scores: pd.DataFrame, candidate: str, task: str) -> np.ndarray:
    values = scores.loc[(scores["candidate"] == candidate) & (scores["task"] == task), "score"].to_numpy(float)
    return values[np.isfinite(values)]


def _aggregates(
    scores: pd.DataFrame,
    arrays: dict[str, list[np.ndarray]],
    candidates: list[str],
    threshold: float | None,
    options: CompareOptions,
    streams: GroupStreams,
) -> pd.DataFrame:
    table = aggregate(
        scores,
        value="score",
        group_by="candidate",
        strata="task",
        ci=options.ci,
        n_resamples=options.n_resamples,
        seed=options.seed,
    )
    table = table.set_index("candidate").loc[candidates].reset_index().rename(columns={"num_strata": "num_tasks"})
    gaps = []
    for candidate in candidates:
        if threshold is None:
            gaps.append((np.nan, np.nan, np.nan))
            continue
        parts = [a[None] for a in arrays[candidate]]
        rng = streams.of_values(arrays[candidate])  # the same runs, the same interval, whatever their name (C13)
        gaps.append(tuple(estimate(parts, cs.gap_at(threshold), options.ci, options.n_resamples, rng)[:, 0]))
    table["optimality_gap"], table["optimality_gap_lo"], table["optimality_gap_hi"] = map(list, zip(*gaps))
    order = [
        "candidate",
        *(f"{s}{e}" for s in ("iqm", "mean", "median", "optimality_gap") for e in ("", "_lo", "_hi")),
        "num_runs",
        "num_missing",
        "num_tasks",
    ]
    return table[order]


def _improvement(
    arrays: dict[str, list[np.ndarray]],
    aggregates: pd.DataFrame,
    candidates: list[str],
    options: CompareOptions,
    streams: GroupStreams,
    against: str | None = None,
) -> pd.DataFrame:
    stat = STATISTICS[options.metric]
    bounds = aggregates.set_index("candidate")[[f"{options.metric}_lo", f"{options.metric}_hi"]]
    rows = []
    for pair in itertools.combinations(candidates, 2):
        if against is not None and against not in pair:
            continue
        # each pair computed in one orientation whatever the candidates' order (a sweep ranks them, compare lists
        # them as given): its bootstrap draws then give the same figures from both (V16: 1,053 and 1,039 seeds)
        a, b = sorted(pair, key=str)
        x, y = arrays[a], arrays[b]
        rng = streams({"pair": [a, b]})
        p = cs.probability_of_improvement(x, y)
        p_lo, p_hi = cs.improvement_interval(x, y, options.ci, options.n_resamples, rng)
        d, d_lo, d_hi = cs.difference_interval(x, y, stat, options.ci, options.n_resamples, rng)
        x_runs, y_runs = min(len(t) for t in x), min(len(t) for t in y)
        runs = min(x_runs, y_runs)
        needed = cs.seeds_needed(x_runs, d, d_lo, d_hi, other_runs=y_runs)
        # A bootstrap interval of a few seeds excludes zero too easily (2 runs a side give 3 distinct resamples);
        # a verdict also needs seeds with which an exact rank test could reach the level at all.
        too_few = cs.smallest_p_value(x, y) > 1 - options.ci
        if too_few and not math.isnan(needed):
            needed = max(needed, float(cs.seeds_for_level(len(x), options.ci)))
        separated = p in (0.0, 1.0)
        pairs = len(x) * min(min(len(xt), len(yt)) for xt, yt in zip(x, y))
        chance = cs.separation_chance(x, y) if separated else math.nan
        (a_lo, a_hi), (b_lo, b_hi) = bounds.loc[a], bounds.loc[b]
        overlap = bool(a_lo <= b_hi and b_lo <= a_hi)
        common = {
            "intervals_overlap": overlap,
            "distinguishable": bool((d_lo > 0 or d_hi < 0) and not too_few),
            "too_few_seeds": bool(too_few),
            "seeds_needed": needed,
            "num_runs": runs,
            "degenerate": bool(p_lo == p_hi),
            "separation_chance": chance,
        }
        rows.append(
            {
                "candidate": a,
                "versus": b,
                "probability_of_improvement": p,
                "probability_of_improvement_lo": p_lo,
                "probability_of_improvement_hi": p_hi,
                "separation_bound": cs.separation_bound(p, pairs, options.ci),
                "difference": d,
                "difference_lo": d_lo,
                "difference_hi": d_hi,
                **common,
            }
        )
        rows.append(
            {
                "candidate": b,
                "versus": a,
                "probability_of_improvement": 1 - p,
                "probability_of_improvement_lo": 1 - p_hi,
                "probability_of_improvement_hi": 1 - p_lo,
                "separation_bound": cs.separation_bound(1 - p, pairs, options.ci),
                "difference": -d,
                "difference_lo": -d_hi,
                "difference_hi": -d_lo,
                **common,
            }
        )
    table = pd.DataFrame(rows)
    position = {c: i for i, c in enumerate(candidates)}
    table = table.sort_values(["candidate", "versus"], key=lambda s: s.map(position), kind="stable")
    table.attrs["metric"] = options.metric
    return table.reset_index(drop=True)


def _profiles(
    arrays: dict[str, list[np.ndarray]], candidates: list[str], options: CompareOptions, streams: GroupStreams
) -> pd.DataFrame:
    pooled = np.concatenate([t for c in candidates for t in arrays[c]])
    taus = np.linspace(pooled.min(), pooled.max(), options.num_taus)
    frames = []
    for candidate in candidates:
        rng = streams.of_values(arrays[candidate])
        low, high = cs.profile_band(arrays[candidate], taus, options.ci, options.n_resamples, rng)
        frames.append(
            pd.DataFrame(
                {
                    "candidate": candidate,
                    "tau": taus,
                    "fraction": cs.profile(arrays[candidate], taus),
                    "fraction_lo": low,
                    "fraction_hi": high,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
