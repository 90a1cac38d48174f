"""Across-seed statistics: final performance, IQM, stratified bootstrap CIs, learning curves.

The functions take the episode table of :func:`online_trainer.storage.load_episodes`:
one row per episode with columns ``run``, ``seed``, ``episode_index``, ``global_step``,
``ep_return``, ``ep_length``, ``wall_time``, hyperparameter columns and, when several
experiments are loaded together, ``experiment``.

Conventions shared by every function:

* ``group_by`` separates configurations. ``None`` (the default) groups by
  ``experiment`` when that column exists and does not group otherwise; ``[]`` never
  groups; a column name or a list of names groups by those columns, which must be
  constant within each run. A run is identified by its group, its ``experiment`` (when
  the column exists) and its ``run`` index.
* The IQM is the 25% trimmed mean of Agarwal et al. (2021), exactly as ``rliable``
  computes it: ``scipy.stats.trim_mean(x, 0.25)``, which drops ``int(0.25 * n)``
  values at each end (IQM of 1..8 is the mean of 3, 4, 5, 6).
* Confidence intervals are percentile bootstrap intervals over runs
  (``scipy.stats.bootstrap(method="percentile")``, the default of ``rliable``). Runs are
  resampled within each stratum independently (stratified bootstrap); without
  ``strata`` a group is a single stratum. Percentile intervals stay defined when the
  data are degenerate, where BCa intervals are not. With fewer than two runs the
  interval is undefined and reported as NaN; when every run has the same value it is
  ``(value, value)``.
* ``seed`` (an int, a ``numpy.random.Generator`` or ``None`` for fresh entropy) makes
  the intervals reproducible; the default ``0`` gives the same numbers on every call.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Union

import numpy as np
import pandas as pd
import scipy.stats
from numpy.typing import ArrayLike

logger = logging.getLogger(__name__)

GroupBy = Union[str, Sequence[str], None]
Seed = Union[int, np.random.Generator, None]

__all__ = ["STATISTICS", "aggregate", "curves", "final_performance", "iqm", "summarize"]

# scipy >= 1.15 names the generator ``rng``; older releases call it ``random_state``.
_RNG_KEYWORD = "rng" if "rng" in inspect.signature(scipy.stats.bootstrap).parameters else "random_state"
# Upper bound on the number of floats one bootstrap batch holds (about 160 MB).
_MAX_BATCH_FLOATS = 20_000_000


def iqm(values: ArrayLike, axis: int | None = -1) -> float | np.ndarray:
    """Interquartile mean, as ``rliable.metrics.aggregate_iqm``: ``trim_mean(values, 0.25)``.

    ``int(0.25 * n)`` values are dropped at each end (of 1..8, the mean of 3..6); ``axis``
    is the axis to reduce (``None`` flattens first).
    """
    return scipy.stats.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


#: The across-run statistics, by the name that ``stat`` arguments accept.
STATISTICS: dict[str, Callable[..., np.ndarray]] = {"mean": np.mean, "median": np.median, "iqm": iqm}


def _stat_fn(stat: str) -> Callable[..., np.ndarray]:
    try:
        return STATISTICS[stat]
    except (KeyError, TypeError):
        raise ValueError(f"stat must be one of {sorted(STATISTICS)}, got stat={stat!r}.") from None


def _check_ci(ci: float | None) -> None:
    if ci is not None and not (isinstance(ci, (float, int)) and not isinstance(ci, bool) and 0 < ci < 1):
        raise ValueError(f"ci must be a confidence level in (0, 1) such as 0.95, or None, got ci={ci!r}.")


def _check_positive_int(name: str, value: object, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {name}={value!r}.")


def _require_columns(df: pd.DataFrame, columns: Sequence[str], hint: str = "") -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"Expected a pandas DataFrame of episodes, got {type(df).__name__}.")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"The data has no column(s) {missing}; available columns: {list(df.columns)}.{hint}")
    if df.empty:
        raise ValueError("The data is empty: there is no episode to analyse.")


def _group_columns(df: pd.DataFrame, group_by: GroupBy) -> list[str]:
    if group_by is None:
        return ["experiment"] if "experiment" in df.columns else []
    cols = [group_by] if isinstance(group_by, str) else list(group_by)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"group_by={group_by!r} names column(s) {missing} that the data does not have; "
                         f"available columns: {list(df.columns)}.")
    return cols


def _group_and_strata(df: pd.DataFrame, group_by: GroupBy, strata: GroupBy) -> tuple[list[str], list[str]]:
    """Resolve ``group_by`` and ``strata``; ``experiment`` as a stratum is not also a group."""
    strata_cols = [] if strata is None else _group_columns(df, strata)
    group_cols = [] if group_by is None and "experiment" in strata_cols else _group_columns(df, group_by)
    if set(strata_cols) & set(group_cols):
        raise ValueError(f"strata={strata!r} and group_by={group_by!r} must not share columns.")
    return group_cols, strata_cols


def _run_columns(df: pd.DataFrame, group_cols: list[str]) -> list[str]:
    """The columns that identify one run: its group, its experiment, its run index."""
    ident = ["experiment"] if "experiment" in df.columns else []
    extra = [c for c in group_cols if c not in ident and c != "run"]
    if extra:
        per_run = df.groupby(ident + ["run"], dropna=False)[extra].nunique(dropna=False)
        varying = [c for c in extra if (per_run[c] > 1).any()]
        if varying:
            raise ValueError(f"group_by column(s) {varying} change value within a run; group by columns "
                             "that are constant per run, such as hyperparameters or 'experiment'.")
    return list(dict.fromkeys(group_cols + ident + ["run"]))


def _groups(df: pd.DataFrame, group_cols: list[str]):
    """Yield ``(dict of group values, sub-frame)`` for each group, in sorted order."""
    if not group_cols:
        yield {}, df
        return
    for key, sub in df.groupby(group_cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        yield dict(zip(group_cols, key)), sub


def _bootstrap_interval(strata: list[np.ndarray], stat: Callable, ci: float, n_resamples: int,
                        rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap CI of ``stat`` over the pooled runs of every stratum.

    Each array holds one stratum, runs on the last axis (leading axes, such as grid
    points, are computed in one vectorised pass). Runs are resampled within each stratum
    independently. A stratum with one run is kept as is: resampling it always returns it,
    and ``scipy.stats.bootstrap`` refuses samples of one observation.
    """
    resampled = [s for s in strata if s.shape[-1] >= 2]
    fixed = [s for s in strata if s.shape[-1] < 2]
    fixed_values = np.concatenate(fixed, axis=-1) if fixed else None

    def pooled(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        parts = list(samples)
        if fixed_values is not None:
            shape = samples[0].shape[:-1] + (fixed_values.shape[-1],)
            parts.append(np.broadcast_to(np.expand_dims(fixed_values, -2), shape))
        return stat(parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1), axis=-1)

    per_resample = max(1, int(np.prod(strata[0].shape[:-1])) * sum(s.shape[-1] for s in strata))
    batch = max(1, min(n_resamples, _MAX_BATCH_FLOATS // per_resample))
    result = scipy.stats.bootstrap(resampled, pooled, n_resamples=n_resamples, batch=batch, vectorized=True,
                                   axis=-1, confidence_level=ci, method="percentile", **{_RNG_KEYWORD: rng})
    return np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)


def _estimate(strata: list[np.ndarray], stat: Callable, ci: float | None, n_resamples: int,
              rng: np.random.Generator) -> np.ndarray:
    """Rows value, lo, hi of ``stat`` over the pooled runs (last axis) of the strata (2-D)."""
    pooled = np.concatenate(strata, axis=-1)
    out = np.full((3, pooled.shape[0]), np.nan)
    out[0] = stat(pooled, axis=-1)
    if ci is None or all(s.shape[-1] < 2 for s in strata):
        return out
    constant = np.ptp(pooled, axis=-1) == 0
    out[1:, constant] = out[0, constant]
    if not constant.all():
        out[1:, ~constant] = _bootstrap_interval([s[~constant] for s in strata], stat, ci, n_resamples, rng)
    return out


def final_performance(df: pd.DataFrame, last_k: int | None = None, after_step: float | None = None, *,
                      group_by: GroupBy = None) -> pd.DataFrame:
    """The final return of each run: the mean return of its last episodes.

    Args:
        df: Episode table (see the module docstring).
        last_k: Average the last ``last_k`` episodes of each run (all of them when a run
            has fewer). Used with ``last_k=10`` when neither argument is given.
        after_step: Instead, average the episodes that ended after this many environment
            steps (``global_step > after_step``). A run with no such episode gets a NaN
            final return and ``num_episodes == 0``.
        group_by: Columns that separate configurations (see the module docstring).

    Returns:
        One row per run with the group columns, ``experiment`` (when present), ``run``,
        ``seed`` (when present), ``final_return`` and ``num_episodes`` (episodes averaged).

    Raises:
        ValueError: Both ``last_k`` and ``after_step`` are given, ``last_k`` is not a
            positive int, or a needed column is missing.
    """
    if last_k is not None and after_step is not None:
        raise ValueError(f"Pass either last_k or after_step, not both; got last_k={last_k!r}, "
                         f"after_step={after_step!r}.")
    if after_step is None:
        last_k = 10 if last_k is None else last_k
        _check_positive_int("last_k", last_k)
    needed = ["run", "episode_index", "ep_return"] + ([] if after_step is None else ["global_step"])
    _require_columns(df, needed)
    group_cols = _group_columns(df, group_by)
    run_cols = _run_columns(df, group_cols)
    data = df.sort_values(run_cols + ["episode_index"], kind="stable")
    if after_step is None:
        in_window = data.groupby(run_cols, dropna=False).cumcount(ascending=False) < last_k
    else:
        in_window = data["global_step"] > after_step
    columns = {"final_return": data["ep_return"].where(in_window), "num_episodes": in_window.astype(int)}
    aggregations = {"final_return": "mean", "num_episodes": "sum"}
    if "seed" in data.columns:
        columns["seed"], aggregations["seed"] = data["seed"], "first"
    grouped = pd.DataFrame(columns).groupby([data[c] for c in run_cols], dropna=False, sort=True)
    out = grouped.agg(aggregations).reset_index()
    empty = int((out["num_episodes"] == 0).sum())
    if empty:
        logger.warning("%d run(s) have no episode that ended after step %s: their final_return is NaN.",
                       empty, after_step)
    order = run_cols + (["seed"] if "seed" in out.columns else []) + ["final_return", "num_episodes"]
    return out[order]


def aggregate(final: pd.DataFrame | Mapping[str, ArrayLike], *, value: str = "final_return",
              group_by: GroupBy = None, strata: GroupBy = None, ci: float | None = 0.95,
              n_resamples: int = 10_000, seed: Seed = 0) -> pd.DataFrame:
    """Mean, median and IQM across runs, each with a stratified bootstrap CI.

    Args:
        final: One value per run, such as the output of :func:`final_performance`, or a
            mapping from a group label to the values of its runs (then the output has a
            ``group`` column).
        value: The column that holds the per-run value.
        group_by: Columns that separate configurations (see the module docstring).
        strata: Columns that split a group into strata (e.g. tasks) whose runs are
            resampled independently, as ``rliable``'s stratified bootstrap does. The
            statistics pool the runs of all strata (for the IQM exactly as ``rliable``;
            ``rliable``'s median is instead the median of per-task means). Put scores of
            different tasks on a common scale before pooling them.
        ci: Confidence level of the intervals; ``None`` skips the bootstrap (NaN bounds).
        n_resamples: Number of bootstrap resamples.
        seed: Seed or generator of the bootstrap.

    Returns:
        One row per group: the group columns, ``mean``, ``mean_lo``, ``mean_hi``,
        ``median``, ``median_lo``, ``median_hi``, ``iqm``, ``iqm_lo``, ``iqm_hi``,
        ``num_runs`` and, with ``strata``, ``num_strata``. Runs whose value is NaN are
        left out (with a logged warning). Bounds are NaN where fewer than two runs exist.

    Raises:
        ValueError: A column is missing, ``strata`` overlaps ``group_by``, or ``ci`` or
            ``n_resamples`` is invalid.
    """
    if isinstance(final, Mapping):
        if group_by is not None:
            raise ValueError("group_by applies to a DataFrame; a mapping is grouped by its keys already.")
        final = pd.DataFrame([(str(k), float(v)) for k, vs in final.items() for v in np.ravel(vs)],
                             columns=["group", value])
        group_by = ["group"]
    _require_columns(final, [value], hint=" Pass the output of final_performance(), or use summarize().")
    _check_ci(ci)
    _check_positive_int("n_resamples", n_resamples)
    group_cols, strata_cols = _group_and_strata(final, group_by, strata)
    missing = final[value].isna()
    if missing.any():
        logger.warning("Leaving out %d run(s) whose %s is NaN.", int(missing.sum()), value)
        final = final[~missing]
    rng = np.random.default_rng(seed)
    rows = []
    for keys, sub in _groups(final, group_cols):
        parts = [s[value].to_numpy(float)[None] for _, s in _groups(sub, strata_cols)]
        row = dict(keys)
        for name, fn in STATISTICS.items():
            est, lo, hi = _estimate(parts, fn, ci, n_resamples, rng)[:, 0]
            row.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
        row["num_runs"] = len(sub)
        if strata_cols:
            row["num_strata"] = len(parts)
        if ci is not None and len(sub) < 2:
            logger.warning("Group %s has a single run: its confidence intervals are NaN.", keys or "(all)")
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame, last_k: int | None = None, after_step: float | None = None, *,
              group_by: GroupBy = None, strata: GroupBy = None, ci: float | None = 0.95,
              n_resamples: int = 10_000, seed: Seed = 0) -> pd.DataFrame:
    """:func:`final_performance` followed by :func:`aggregate`: one row per group.

    The arguments are those of the two functions; ``strata`` columns are kept per run so
    that :func:`aggregate` can resample within them.

    Returns:
        The table of :func:`aggregate`.
    """
    group_cols, strata_cols = _group_and_strata(df, group_by, strata)
    final = final_performance(df, last_k, after_step, group_by=group_cols + strata_cols)
    return aggregate(final, group_by=group_cols, strata=strata_cols or None, ci=ci,
                     n_resamples=n_resamples, seed=seed)


def _run_series(df: pd.DataFrame, run_cols: list[str], x: str, smooth: int | None) -> pd.Series:
    """Return per (run, x) the (smoothed) return, duplicates of x averaged, sorted by x."""
    order = [c for c in ("episode_index",) if c in df.columns and c != x] + [x]
    data = df.sort_values(run_cols + order, kind="stable")
    returns = data["ep_return"].astype(float)
    if smooth is not None and smooth > 1:
        returns = returns.groupby([data[c] for c in run_cols], dropna=False, sort=False).transform(
            lambda s: s.rolling(smooth, min_periods=1).mean()
        )
    keep = data[x].notna()
    keys = [data.loc[keep, c] for c in run_cols + [x]]
    return returns[keep].groupby(keys, dropna=False, sort=True).mean()


def _default_grid(firsts: np.ndarray, lasts: np.ndarray, num_points: int, integer: bool) -> np.ndarray:
    lo, hi = firsts.max(), lasts.min()
    if lo > hi:
        logger.warning("The runs of a group do not overlap in x (latest start %s > earliest end %s); "
                       "the grid spans all runs and each point uses the runs that cover it.", lo, hi)
        lo, hi = firsts.min(), lasts.max()
    grid = np.linspace(lo, hi, num_points)
    return np.unique(np.round(grid)).astype(np.int64) if integer else np.unique(grid)


def curves(df: pd.DataFrame, x: str = "global_step", *, num_points: int = 100, grid: ArrayLike | None = None,
           group_by: GroupBy = None, stat: str = "iqm", ci: float | None = 0.95, smooth: int | None = None,
           n_resamples: int = 2_000, seed: Seed = 0) -> pd.DataFrame:
    """Learning curves: a statistic across runs of the return on a common x grid.

    Each run's returns (optionally smoothed by a trailing moving average over ``smooth``
    episodes; returns of episodes that end at the same x are averaged) are linearly
    interpolated onto the grid with ``numpy.interp``. A run is never extrapolated: at
    grid points before its first or after its last episode it has no value and is left
    out of that point. The default grid has ``num_points`` evenly spaced points from the
    latest first x to the earliest last x of the runs of a group, so every point uses
    every run (when the runs do not overlap at all it spans all of them instead).

    Args:
        df: Episode table (see the module docstring).
        x: The x column, typically ``"global_step"`` or ``"episode_index"``.
        num_points: Number of points of the default grid (fewer when ``x`` holds
            integers and the span is short: the grid is rounded to unique integers).
        grid: Explicit x values, shared by every group; ``num_points`` is then ignored.
        group_by: Columns that separate configurations (see the module docstring).
        stat: ``"iqm"``, ``"mean"`` or ``"median"`` across runs.
        ci: Confidence level of the pointwise bootstrap band; ``None`` skips it.
        smooth: Window, in episodes, of a trailing moving average applied per run
            before interpolation; ``None`` or 1 for none.
        n_resamples: Number of bootstrap resamples (of whole runs).
        seed: Seed or generator of the bootstrap.

    Returns:
        Long table with the group columns, ``x``, ``value`` (the statistic), ``lo`` and
        ``hi`` (the CI; NaN where fewer than two runs have data) and ``num_runs`` (runs
        with data at that point), sorted by group and x.

    Raises:
        ValueError: ``x`` is not a numeric column, or an argument is invalid.
    """
    _require_columns(df, ["run", "ep_return"])
    if not isinstance(x, str) or x not in df.columns:
        raise ValueError(f"x={x!r} is not a column of the data; available columns: {list(df.columns)}.")
    if not pd.api.types.is_numeric_dtype(df[x]):
        raise ValueError(f"x={x!r} must be a numeric column, got dtype {df[x].dtype}.")
    stat_fn = _stat_fn(stat)
    _check_ci(ci)
    _check_positive_int("n_resamples", n_resamples)
    if smooth is not None:
        _check_positive_int("smooth", smooth)
    if grid is None:
        _check_positive_int("num_points", num_points, minimum=2)
    else:
        grid = np.asarray(grid, dtype=float)
        if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(np.diff(grid) <= 0):
            raise ValueError(f"grid must be a non-empty 1-D array of finite increasing values, got {grid!r}.")
    group_cols = _group_columns(df, group_by)
    run_cols = _run_columns(df, group_cols)
    series = _run_series(df, run_cols, x, smooth)
    integer_x = pd.api.types.is_integer_dtype(df[x])
    rng = np.random.default_rng(seed)
    frames = []
    for keys, sub in _groups(series.reset_index(), group_cols):
        runs = [(r[x].to_numpy(float), r["ep_return"].to_numpy(float))
                for _, r in sub.groupby(run_cols, dropna=False, sort=True)]
        points = grid if grid is not None else _default_grid(
            np.array([xs[0] for xs, _ in runs]), np.array([xs[-1] for xs, _ in runs]), num_points, integer_x)
        values = np.stack([np.interp(points, xs, ys, left=np.nan, right=np.nan) for xs, ys in runs], axis=-1)
        frame = pd.DataFrame({**keys, x: points}, index=range(len(points)))
        frame["value"], frame["lo"], frame["hi"] = _pointwise(values, stat_fn, ci, n_resamples, rng)
        frame["num_runs"] = (~np.isnan(values)).sum(axis=-1)
        if ci is not None and len(runs) < 2:
            logger.warning("Group %s has 1 run: its confidence band is NaN.", keys or "(all)")
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True)
    out.attrs.update(stat=stat, ci=ci, x=x)
    return out


def _pointwise(values: np.ndarray, stat: Callable, ci: float | None, n_resamples: int,
               rng: np.random.Generator) -> np.ndarray:
    """The statistic and CI at each point (row) over the runs (columns) that have data there.

    Points are batched by the set of runs that cover them, so each batch is one
    vectorised bootstrap; with the default grid every point uses every run: one batch.
    """
    out = np.full((3, values.shape[0]), np.nan)
    patterns, inverse = np.unique(~np.isnan(values), axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    for k, pattern in enumerate(patterns):
        if not pattern.any():
            continue
        rows = inverse == k
        out[:, rows] = _estimate([values[rows][:, pattern]], stat, ci, n_resamples, rng)
    return out
