"""Learning curves: a statistic across runs of the return, with a pointwise bootstrap CI, on an x grid.

See :mod:`online_trainer.analysis.stats` for the conventions (groups, run status, NaN returns,
IQM, bootstrap, seeds).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from online_trainer.analysis.bootstrap import GroupStreams, Seed, estimate, stat_fn
from online_trainer.analysis.scores import score_table
from online_trainer.analysis.selection import (
    RUNS_ATTR,
    STATUS_COLUMN,
    GroupBy,
    check_ci,
    check_positive_int,
    drop_nonfinite,
    group_columns,
    groups,
    ident_columns,
    require_columns,
    run_columns,
    runs_without_episodes,
    select_runs,
)
from online_trainer.options.validation import suggests_keywords

logger = logging.getLogger(__name__)

__all__ = ["SPANS", "curves"]

#: The ranges of x that ``span`` accepts.
SPANS = ("all", "common")


def _run_series(df: pd.DataFrame, run_cols: list[str], x: str, smooth: int | None) -> pd.Series:
    """Return per (run, x) the (smoothed) return, sorted by x.

    Episodes that end at one x (several sub-envs) are averaged; smoothed, the value at x is the trailing mean after
    the last of them, which already counts the others (as ``compare``'s sample-efficiency curves take it)."""
    order = [c for c in ("episode_index",) if c in df.columns and c != x] + [x]
    data = df.sort_values(run_cols + order, kind="stable")
    returns = data["ep_return"].astype(float)
    if smooth is not None and smooth > 1:
        returns = returns.groupby([data[c] for c in run_cols], dropna=False, sort=False).transform(
            lambda s: s.rolling(smooth, min_periods=1).mean()
        )
    keep = data[x].notna()
    keys = [data.loc[keep, c] for c in run_cols + [x]]
    grouped = returns[keep].groupby(keys, dropna=False, sort=True)
    return grouped.last() if smooth is not None and smooth > 1 else grouped.mean()


def _default_grid(
    firsts: np.ndarray, lasts: np.ndarray, num_points: int, integer: bool, span: str, keys: dict
) -> np.ndarray:
    """``num_points`` evenly spaced x values over the runs' union (``all``) or intersection (``common``)."""
    lo, hi = firsts.min(), lasts.max()
    if span == "common":
        lo, hi = firsts.max(), lasts.min()
        if lo > hi:
            logger.warning(
                "The runs of group %s do not overlap in x (latest start %s > earliest end %s): "
                "span='common' is empty, the curve spans all runs instead.",
                keys or "(all)",
                lo,
                hi,
            )
            lo, hi = firsts.min(), lasts.max()
    grid = np.linspace(lo, hi, num_points)
    return np.unique(np.round(grid)).astype(np.int64) if integer else np.unique(grid)


def budget_ends(df: pd.DataFrame) -> dict[tuple, float]:
    """The step budget of each run that reached it, by its ``experiment`` (when present) and ``run``.

    Read from ``df.attrs["runs"]`` (see :func:`online_trainer.analysis.dataframes.load_runs`):
    a finished run whose budget counts env steps and whose ``env_steps`` reached it. Such a
    run stops within ``num_envs`` steps of its budget, usually mid-episode; its curve is held
    at the return of its last finished episode up to the budget, so that the curves of a
    step budget end on every run instead of on the one whose last episode ended last.
    """
    records = df.attrs.get(RUNS_ATTR)
    if not isinstance(records, list):
        return {}
    ident = ident_columns(df)
    ends = {}
    for record in records:
        budget, steps = record.get("budget"), record.get("env_steps")
        if (
            record.get("budget_unit") == "steps"
            and record.get(STATUS_COLUMN) == "finished"
            and isinstance(budget, (int, float))
            and isinstance(steps, (int, float))
            and steps >= budget
            and all(c in record for c in ident)
        ):
            ends[tuple(record[c] for c in ident)] = float(budget)
    return ends


OBSERVED = "observed"
"""``grid=OBSERVED``: each group's points are the x values its runs have, nothing interpolated."""


def _check_grid(grid: ArrayLike | str | None, num_points: int, span: str) -> np.ndarray | str | None:
    if span not in SPANS:
        raise ValueError(
            f"span must be one of {SPANS}, got span={span!r}: 'all' covers every x some run "
            "reaches, 'common' only the x every run reaches."
        )
    if grid is None:
        check_positive_int("num_points", num_points, minimum=2)
        return None
    if isinstance(grid, str):
        if grid != OBSERVED:
            raise ValueError(f"grid must be x values or {OBSERVED!r}, got grid={grid!r}.")
        return grid
    grid = np.asarray(grid, dtype=float)
    if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(np.diff(grid) <= 0):
        raise ValueError(f"grid must be a non-empty 1-D array of finite increasing values, got {grid!r}.")
    return grid


@suggests_keywords
def curves(
    df: pd.DataFrame,
    x: str = "global_step",
    *,
    num_points: int = 100,
    grid: ArrayLike | Literal["observed"] | None = None,
    span: Literal["all", "common"] = "all",
    group_by: GroupBy = None,
    stat: str = "iqm",
    ci: float | None = 0.95,
    smooth: int | None = None,
    n_resamples: int = 2_000,
    seed: Seed = 0,
    include_unfinished: bool = False,
    score: str | None = None,
) -> pd.DataFrame:
    """Learning curves: a statistic across runs of the return on an x grid.

    Each run's returns (optionally smoothed by a trailing moving average over ``smooth``
    episodes; returns of episodes that end at the same x are averaged, or, smoothed, the
    trailing mean after the last of them is the value at that x) are linearly
    interpolated onto the grid with ``numpy.interp``. A run is never extrapolated: at
    grid points before its first or after its last episode it has no value and is left
    out of that point, so ``num_runs`` tells how many runs each point stands on. One
    exception, on ``x="global_step"``: a run that reached its step budget (known from
    ``df.attrs["runs"]``, see :func:`budget_ends`) covers the grid up to the budget, held
    at the return of its last finished episode, and the grid ends at the budget. By
    default (``span="all"``) a group's grid has ``num_points`` evenly spaced points from
    the earliest first x to the latest last x of its runs: the whole range some run
    covers, where the ends may stand on fewer runs than the middle. ``span="common"``
    cuts it to the range every run covers (latest first x to earliest last x), so every
    point uses every run; when the runs do not overlap it spans all of them (logged).

    Args:
        df: Episode table (see :mod:`online_trainer.analysis.stats`).
        x: The x column, typically ``"global_step"`` or ``"episode_index"``.
        num_points: Number of points of the default grid (fewer when ``x`` holds
            integers and the range is short: the grid is rounded to unique integers).
        grid: Explicit x values, shared by every group; or ``"observed"``: each group's
            points are the x values where its runs have a return, and a point stands on the
            runs with a return at exactly that x (nothing is interpolated: evaluations made at
            points every run shares, where a run's extra point must not pull the others'
            values). ``num_points`` and ``span`` are then ignored.
        span: ``"all"`` or ``"common"``, the x range of the default grid (see above).
        group_by: Columns that separate configurations.
        stat: ``"iqm"``, ``"mean"`` or ``"median"`` across runs.
        ci: Confidence level of the pointwise bootstrap band; ``None`` skips it.
        smooth: Window, in episodes, of a trailing moving average applied per run
            before interpolation; ``None`` or 1 for none.
        n_resamples: Number of bootstrap resamples (of whole runs).
        seed: Seed or generator of the bootstrap; each group has its own stream.
        include_unfinished: Keep failed, interrupted and pending runs (left out by
            default, with a logged warning naming them).
        score: ``"return"`` (``ep_return``) or ``"raw"`` (``raw_return``, the raw scores:
            see :func:`~online_trainer.analysis.scores.score_table`); None: ``df.attrs["score"]``,
            which ``load_episodes`` sets to ``"raw"`` for experiments run with ``score="raw"``.

    Returns:
        Long table with the group columns, the x column (named as ``x``, e.g. ``global_step``),
        ``value`` (the statistic), ``lo`` and
        ``hi`` (the CI; NaN where fewer than two runs have data), ``num_runs`` (runs with
        data at that point) and ``total_runs`` (runs of the group with data at some
        point of its grid), sorted by group and x. ``attrs`` holds ``stat``, ``ci``,
        ``x``, ``smooth``, ``span``, ``excluded`` (the runs left out for their status:
        a list of dicts) and ``no_episode`` (the number of runs without a finished
        episode, which cannot be drawn).

    Raises:
        ValueError: ``x`` is not a numeric column, an argument is invalid, or every run
            was left out.
    """
    require_columns(df, ["run", "ep_return"])
    df = score_table(df, score)
    if not isinstance(x, str) or x not in df.columns:
        raise ValueError(f"x={x!r} is not a column of the data; available columns: {list(df.columns)}.")
    if not pd.api.types.is_numeric_dtype(df[x]):
        raise ValueError(f"x={x!r} must be a numeric column, got dtype {df[x].dtype}.")
    fn = stat_fn(stat)
    check_ci(ci)
    check_positive_int("n_resamples", n_resamples)
    if smooth is not None:
        check_positive_int("smooth", smooth)
    grid = _check_grid(grid, num_points, span)
    streams = GroupStreams(seed)
    group_cols = group_columns(df, group_by)
    run_cols = run_columns(df, group_cols)
    data, excluded = select_runs(df, include_unfinished)
    if data.empty:
        raise ValueError(
            f"Every run was left out ({len(excluded)} did not finish). Pass include_unfinished=True "
            "to plot them anyway."
        )
    no_episode = runs_without_episodes(data, run_cols)
    if len(no_episode):
        logger.info("%d run(s) have no finished episode and are not drawn.", len(no_episode))
    ends = budget_ends(df) if x == "global_step" else {}
    ident = [run_cols.index(c) for c in ident_columns(df)]
    series = _run_series(drop_nonfinite(data), run_cols, x, smooth)
    integer_x = pd.api.types.is_integer_dtype(df[x])
    frames = []
    for keys, sub in groups(series.reset_index(), group_cols):
        runs = []
        for key, r in sub.groupby(run_cols, dropna=False, sort=True):
            xs, ys = r[x].to_numpy(float), r["ep_return"].to_numpy(float)
            key = key if isinstance(key, tuple) else (key,)
            end = ends.get(tuple(key[i] for i in ident), xs[-1])
            if end > xs[-1]:
                xs, ys = np.append(xs, end), np.append(ys, ys[-1])
            runs.append((xs, ys, min(end, xs[-1])))
        frames.append(_group_curve(runs, keys, x, grid, num_points, integer_x, span, fn, ci, n_resamples, streams))
    out = pd.concat(frames, ignore_index=True)
    out.attrs.update(
        stat=stat,
        ci=ci,
        x=x,
        smooth=smooth,
        span=span,
        excluded=excluded.to_dict("records"),
        no_episode=len(no_episode),
    )
    return out


def _group_curve(
    runs: list[tuple[np.ndarray, np.ndarray, float]],
    keys: dict,
    x: str,
    grid: np.ndarray | str | None,
    num_points: int,
    integer_x: bool,
    span: str,
    fn: Callable,
    ci: float | None,
    n_resamples: int,
    streams: GroupStreams,
) -> pd.DataFrame:
    """The curve of one group: its runs (x, returns, end of the grid for it) interpolated onto its grid."""
    if isinstance(grid, str):  # OBSERVED: each run's own returns at the x values some run has
        points = np.unique(np.concatenate([xs for xs, _, _ in runs]))
        values = np.stack([_at(points, xs, ys) for xs, ys, _ in runs], axis=-1)
        return _curve_frame(values, points, runs, keys, x, fn, ci, n_resamples, streams)
    points = (
        grid
        if grid is not None
        else _default_grid(
            np.array([xs[0] for xs, _, _ in runs]),
            np.array([end for *_, end in runs]),
            num_points,
            integer_x,
            span,
            keys,
        )
    )
    values = np.stack([np.interp(points, xs, ys, left=np.nan, right=np.nan) for xs, ys, _ in runs], axis=-1)
    return _curve_frame(values, points, runs, keys, x, fn, ci, n_resamples, streams)


def _at(points: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``ys`` where ``xs`` (increasing) holds the point, NaN elsewhere."""
    index = np.minimum(np.searchsorted(xs, points), len(xs) - 1)
    return np.where(xs[index] == points, ys[index], np.nan)


def _curve_frame(
    values: np.ndarray,
    points: np.ndarray,
    runs: list[tuple[np.ndarray, np.ndarray, float]],
    keys: dict,
    x: str,
    fn: Callable,
    ci: float | None,
    n_resamples: int,
    streams: GroupStreams,
) -> pd.DataFrame:
    """The curve's table from ``values`` (points x runs, NaN where a run has no value)."""
    covered = ~np.isnan(values)
    frame = pd.DataFrame({**keys, x: points}, index=range(len(points)))
    frame["value"], frame["lo"], frame["hi"] = pointwise(values, fn, ci, n_resamples, streams(keys))
    frame["num_runs"] = covered.sum(axis=-1)
    frame["total_runs"] = int(covered.any(axis=0).sum())
    missed = len(runs) - frame["total_runs"].iloc[0]
    if missed:
        logger.warning(
            "%d run(s) of group %s have no data at any grid point (their episodes fall between "
            "points or outside the grid) and are not drawn.",
            missed,
            keys or "(all)",
        )
    if ci is not None and frame["num_runs"].max() < 2:
        logger.warning("Group %s has 1 run: its confidence band is NaN.", keys or "(all)")
    return frame


def pointwise(
    values: np.ndarray,
    stat: Callable,
    ci: float | None,
    n_resamples: int,
    rng: np.random.Generator,
    strata: np.ndarray | None = None,
) -> np.ndarray:
    """The statistic and CI at each point (row) over the runs (columns) that have data there.

    Points are batched by the set of runs that cover them, so each batch is one
    vectorised bootstrap; where every point uses every run there is one batch. With
    ``strata`` (a label per run, e.g. its task), runs are resampled within their stratum.
    """
    out = np.full((3, values.shape[0]), np.nan)
    patterns, inverse = np.unique(~np.isnan(values), axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    for k, pattern in enumerate(patterns):
        if not pattern.any():
            continue
        rows = inverse == k
        if strata is None:
            groups = [values[rows][:, pattern]]
        else:
            groups = [values[rows][:, pattern & (strata == label)] for label in dict.fromkeys(strata[pattern])]
        out[:, rows] = estimate(groups, stat, ci, n_resamples, rng)
    return out
