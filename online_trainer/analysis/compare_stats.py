"""The statistics of :func:`online_trainer.analysis.compare.compare` on arrays of per-run scores.

A candidate's scores are a list with one 1-D array per task (its runs' scores on that
task, tasks in the same order for every candidate). Every interval is a percentile
bootstrap interval of a stratified bootstrap: the runs of each task are resampled with
replacement, independently of the other tasks and of the other candidate (the seed is
the unit of replication; evaluation episodes never are). This is what ``rliable`` does
(``StratifiedBootstrap``, ``StratifiedIndependentBootstrap``), with the same point
estimates:

* IQM: ``scipy.stats.trim_mean(scores, 0.25)`` of every run of every task pooled;
* mean: the mean of the pooled runs (rliable's mean of per-task means when every task
  has as many runs, the only case rliable takes);
* optimality gap: ``threshold - mean(min(scores, threshold))`` over the pooled runs;
* probability of improvement P(X > Y): per task, the Mann-Whitney U statistic of X's
  runs against Y's over ``n_x * n_y`` (the fraction of pairs of runs where X scores
  higher, ties counting one half), averaged over tasks;
* performance profile at ``tau``: per task, the fraction of runs scoring above ``tau``,
  averaged over tasks.

The median is not rliable's: ours is the median of the pooled runs (as
:func:`~online_trainer.analysis.stats.aggregate`), ``rliable.metrics.aggregate_median`` is
the median of the per-task means (on one task, the mean). Its interval is the same
stratified bootstrap. ``tests/online_trainer/analysis/test_compare_rliable.py`` checks all
of this against rliable's numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from online_trainer.analysis.bootstrap import iqm

Scores = Sequence[np.ndarray]
"""One array of per-run scores per task."""


def optimality_gap(values: np.ndarray, axis: int = -1, threshold: float = 1.0) -> np.ndarray:
    """``threshold - mean(min(values, threshold))``: how far the runs fall short of ``threshold`` on average."""
    return threshold - np.mean(np.minimum(values, threshold), axis=axis)


def gap_at(threshold: float) -> Callable[..., np.ndarray]:
    """The optimality gap against ``threshold``, as a statistic ``fn(values, axis=-1)``."""

    def gap(values: np.ndarray, axis: int = -1) -> np.ndarray:
        return optimality_gap(values, axis, threshold)

    return gap


def interval(samples: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of bootstrap ``samples`` (resamples on axis 0)."""
    low, high = np.percentile(samples, [50 * (1 - ci), 50 * (1 + ci)], axis=0)
    return low, high


def _counts(rng: np.random.Generator, n: int, n_resamples: int) -> np.ndarray:
    """How many times each of ``n`` runs is drawn in each resample: shape ``(n_resamples, n)``."""
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)


def _wins(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``K[i, j]``: 1 where run i of X beats run j of Y, 1/2 on a tie, else 0."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def probability_of_improvement(x: Scores, y: Scores) -> float:
    """P(X > Y): the fraction of pairs of runs (one of each, same task) where X scores higher, ties one half."""
    return float(np.mean([_wins(xt, yt).mean() for xt, yt in zip(x, y)]))


def improvement_interval(
    x: Scores, y: Scores, ci: float, n_resamples: int, rng: np.random.Generator
) -> tuple[float, float]:
    """Stratified independent bootstrap interval of P(X > Y): X's and Y's runs resampled within each task."""
    total = np.zeros(n_resamples)
    for xt, yt in zip(x, y):
        wins = _wins(xt, yt)
        cx, cy = _counts(rng, len(xt), n_resamples), _counts(rng, len(yt), n_resamples)
        total += ((cx @ wins) * cy).sum(axis=1) / (len(xt) * len(yt))
    low, high = interval(total / len(x), ci)
    return float(low), float(high)


def _resample(scores: Scores, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(n_resamples, runs)``: each task's runs drawn with replacement, the tasks side by side."""
    return np.concatenate([t[rng.integers(0, len(t), size=(n_resamples, len(t)))] for t in scores], axis=1)


def difference_interval(
    x: Scores, y: Scores, stat: Callable[..., float | np.ndarray], ci: float, n_resamples: int, rng: np.random.Generator
) -> tuple[float, float, float]:
    """``stat(X) - stat(Y)`` over the pooled runs, and its stratified independent bootstrap interval."""
    value = float(stat(np.concatenate(list(x))) - stat(np.concatenate(list(y))))
    samples = np.asarray(stat(_resample(x, n_resamples, rng), axis=-1) - stat(_resample(y, n_resamples, rng), axis=-1))
    low, high = interval(samples, ci)
    return value, float(low), float(high)


def seeds_needed(runs: int, difference: float, low: float, high: float, other_runs: int | None = None) -> float:
    """Seeds per candidate (and task) for the interval of ``difference`` to exclude zero, as Colas et al. (2018).

    The half-width of a bootstrap interval shrinks as ``1 / sqrt(n)``: with ``runs`` seeds it
    is ``(high - low) / 2``, so ``n = runs * (half_width / |difference|) ** 2`` seeds make it
    smaller than the difference, assuming the difference stays as observed. Never fewer than
    were run: ``runs`` when the interval already excludes zero (fewer seeds were not tried, and
    the estimate is least reliable below what was measured), else at least ``runs + 1``;
    ``inf`` when the observed difference is zero (no number of seeds separates them).

    ``other_runs``: the other candidate's seeds when they differ from ``runs``. The interval's width is then that of
    ``2 n m / (n + m)`` seeds a side (its variance goes as ``1/n + 1/m``), and the answer is never fewer than the
    larger of the two (C17: 4 seeds needed, beside a candidate that had run 5).
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return math.nan
    if difference == 0:
        return math.inf
    most = runs if other_runs is None else max(runs, other_runs)
    fewest = runs if other_runs is None else min(runs, other_runs)
    equivalent = runs if other_runs is None else 2 * runs * other_runs / (runs + other_runs)
    half = (high - low) / 2
    estimate = math.ceil(equivalent * (half / abs(difference)) ** 2)
    separated = low > 0 or high < 0
    return float(most if separated else max(most, fewest + 1, estimate))


def separation_bound(p: float, pairs: int, ci: float) -> float:
    """A one-sided bound on P(X > Y) that holds whatever the score distributions, after complete separation.

    When every run of X beats every run of Y on every task (``p == 1``), every one of
    ``k = min(n, m)`` disjoint pairs of runs of a task (one of X, one of Y) was won, each
    independently with probability P(X > Y) on that task: complete separation has probability
    at most ``P ** k``. Over tasks (``pairs`` = the number of tasks times the smallest such ``k``)
    the product of the tasks' probabilities is at most the mean ``P ** pairs`` (the means
    inequality). So, at one-sided level ``(1 + ci) / 2``, ``P >= ((1 - ci) / 2) ** (1 / pairs)``.
    On one task the bound is sharp: Y always scoring the (1 - P)-quantile of X's scores (or X
    always the P-quantile of Y's) separates with probability exactly ``P ** k``. ``p == 0`` gives
    the mirror upper bound; any other ``p`` gives NaN (no complete separation).
    """
    alpha = (1 - ci) / 2
    if p == 1:
        return float(alpha ** (1 / pairs))
    if p == 0:
        return float(1 - alpha ** (1 / pairs))
    return math.nan


def separation_chance(x: Scores, y: Scores) -> float:
    """The chance of a separation as complete as observed if X and Y came from one distribution per task.

    Every ordering of the pooled runs of a task is then equally likely, and only one of the
    ``C(n + m, n)`` choices of X's ranks puts all of them above Y's (the exact one-sided
    Mann-Whitney test at U = n * m); tasks are independent.
    """
    return float(np.prod([1 / math.comb(len(xt) + len(yt), len(xt)) for xt, yt in zip(x, y)]))


def smallest_p_value(x: Scores, y: Scores) -> float:
    """The smallest two-sided p-value an exact rank test can give with these numbers of runs (at most 1).

    That of a complete separation on every task: twice :func:`separation_chance`. Above
    ``1 - ci``, no result of these seeds, however lopsided, tells X and Y apart at level ``ci``
    (2 seeds a side on one task: 1/3; 3 seeds: 1/10; 4 seeds: 1/35).
    """
    return min(1.0, 2 * float(np.prod([1 / math.comb(len(xt) + len(yt), len(xt)) for xt, yt in zip(x, y)])))


def seeds_for_level(tasks: int, ci: float) -> int:
    """The fewest seeds per candidate and task with which :func:`smallest_p_value` is at most ``1 - ci``
    (4 on one task at ``ci=0.95``, 5 at 0.99; 3 on two tasks at 0.95)."""
    seeds = 1
    while 2 / math.comb(2 * seeds, seeds) ** tasks > 1 - ci:
        seeds += 1
    return seeds


def profile(scores: Scores, taus: np.ndarray) -> np.ndarray:
    """The fraction of runs scoring above each ``tau``, per task, averaged over tasks."""
    return np.mean([(t[:, None] > taus[None, :]).mean(axis=0) for t in scores], axis=0)


def profile_band(
    scores: Scores, taus: np.ndarray, ci: float, n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise stratified bootstrap band of :func:`profile`."""
    total = np.zeros((n_resamples, len(taus)))
    for t in scores:
        above = (t[:, None] > taus[None, :]).astype(float)
        total += _counts(rng, len(t), n_resamples) @ above / len(t)
    return interval(total / len(scores), ci)


__all__ = [
    "Scores",
    "difference_interval",
    "gap_at",
    "improvement_interval",
    "interval",
    "iqm",
    "optimality_gap",
    "probability_of_improvement",
    "profile",
    "profile_band",
    "seeds_needed",
    "separation_bound",
    "separation_chance",
]
