"""Across-seed statistics: final performance, IQM, stratified bootstrap CIs (learning curves: :mod:`~online_trainer.analysis.curves`).

The functions take the episode table of :func:`online_trainer.analysis.dataframes.load_episodes`:
one row per episode with columns ``run``, ``seed``, ``status``, ``episode_index``,
``global_step``, ``ep_return``, ``ep_length``, ``wall_time``, hyperparameter columns and,
when several experiments are loaded together, ``experiment``. Tables built by hand
need only the columns a function names.

Conventions shared by every function:

* ``group_by`` separates configurations. ``None`` (the default) groups by
  ``experiment`` when that column exists and does not group otherwise; ``[]`` never
  groups; a column name or a list of names groups by those columns, which must be
  constant within each run. A run is identified by its group, its ``experiment`` (when
  the column exists) and its ``run`` number.
* Runs that did not finish (``status`` failed, interrupted, pending) are left out with a
  logged warning naming them; ``include_unfinished=True`` keeps them (see
  :mod:`online_trainer.analysis.selection`). Runs without a finished episode are counted, never
  dropped silently: their final return is NaN and :func:`aggregate` reports them in
  ``num_missing``.
* Episodes whose return is NaN or infinite are left out of every statistic, with a
  logged warning naming their runs; the runs keep their other episodes (a run whose
  last ``last_k`` episodes include a NaN averages its last ``last_k`` finite ones).
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
* ``seed`` (a non-negative int, a ``numpy.random.Generator`` or ``None`` for fresh
  entropy) makes the intervals reproducible; the default ``0`` gives the same numbers on
  every call. Each group draws from its own stream, seeded by ``seed`` and the group's
  key, so a group's interval does not change when other groups are in the same table.

Warnings go through :mod:`logging` (logger ``online_trainer.*``); Python shows
warnings on stderr even when logging is not configured, in a notebook too.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from online_trainer.analysis.bootstrap import STATISTICS, GroupStreams, Seed, estimate, iqm
from online_trainer.analysis.curves import curves
from online_trainer.analysis.scores import score_table
from online_trainer.analysis.selection import (
    STATUS_COLUMN,
    GroupBy,
    check_ci,
    check_positive_int,
    describe_runs,
    drop_nonfinite,
    group_and_strata,
    group_columns,
    groups,
    require_columns,
    run_columns,
    runs_without_episodes,
    select_runs,
)
from online_trainer.options.validation import suggests_keywords

logger = logging.getLogger(__name__)

__all__ = ["STATISTICS", "GroupBy", "Seed", "aggregate", "curves", "final_performance", "iqm", "summarize"]


@suggests_keywords
def final_performance(
    df: pd.DataFrame,
    last_k: int | None = None,
    after_step: float | None = None,
    *,
    group_by: GroupBy = None,
    include_unfinished: bool = False,
    score: str | None = None,
) -> pd.DataFrame:
    """The final return of each run: the mean return of its last episodes.

    Args:
        df: Episode table (see the module docstring).
        last_k: Average the last ``last_k`` episodes of each run (all of them when a run
            has fewer). Used with ``last_k=10`` when neither argument is given.
        after_step: Instead, average the episodes that ended after this many environment
            steps (``global_step > after_step``).
        group_by: Columns that separate configurations (see the module docstring).
        include_unfinished: Keep failed, interrupted and pending runs (left out by
            default, with a logged warning naming them).
        score: ``"return"`` averages ``ep_return``, ``"raw"`` the raw scores (``raw_return``, see
            :func:`~online_trainer.analysis.scores.score_table`); None: ``df.attrs["score"]``, which
            ``load_episodes`` sets to ``"raw"`` for experiments run with ``score="raw"``.

    Returns:
        One row per run with the group columns, ``experiment`` (when present), ``run``,
        ``seed`` and ``status`` (when present), ``final_return`` and ``num_episodes``
        (episodes averaged). A run with no episode to average (none after
        ``after_step``, only NaN returns, or no finished episode at all, known from
        ``df.attrs["runs"]``) has a NaN ``final_return`` and ``num_episodes == 0``, with
        a logged warning.

    Raises:
        ValueError: Both ``last_k`` and ``after_step`` are given, ``last_k`` is not a
            positive int, a needed column is missing, or every run was left out.
    """
    if last_k is not None and after_step is not None:
        raise ValueError(
            f"Pass either last_k or after_step, not both; got last_k={last_k!r}, after_step={after_step!r}."
        )
    if after_step is None:
        last_k = 10 if last_k is None else last_k
        check_positive_int("last_k", last_k)
    needed = ["run", "episode_index", "ep_return"] + ([] if after_step is None else ["global_step"])
    require_columns(df, needed)
    df = score_table(df, score)
    group_cols = group_columns(df, group_by)
    run_cols = run_columns(df, group_cols)
    data, excluded = select_runs(df, include_unfinished)
    if data.empty:
        raise ValueError(
            f"Every run was left out: {describe_runs(excluded)}. Pass include_unfinished=True to analyse them anyway."
        )
    info = [c for c in ("seed", STATUS_COLUMN) if c in data.columns and c not in run_cols]  # group_by may name them
    runs = data[run_cols + info].drop_duplicates(run_cols).set_index(run_cols)
    no_episode = runs_without_episodes(data, run_cols)
    data = drop_nonfinite(data)
    data = data.sort_values(run_cols + ["episode_index"], kind="stable")
    if after_step is None:
        in_window = data.groupby(run_cols, dropna=False).cumcount(ascending=False) < last_k
    else:
        in_window = data["global_step"] > after_step
    window = pd.DataFrame({"final_return": data["ep_return"].where(in_window), "num_episodes": in_window.astype(int)})
    finals = window.groupby([data[c] for c in run_cols], dropna=False, sort=True).agg(
        {"final_return": "mean", "num_episodes": "sum"}
    )
    out = runs.join(finals, how="left").reset_index()
    if len(no_episode):
        out = pd.concat([out, no_episode[[c for c in no_episode.columns if c in out.columns]]], ignore_index=True)
    out["num_episodes"] = out["num_episodes"].fillna(0).astype(int)
    out = out.sort_values(run_cols, kind="stable").reset_index(drop=True)
    empty = out[out["num_episodes"] == 0]
    if len(empty):
        # Runs known to have no episode at all were named by load_episodes already.
        level = logging.INFO if len(empty) == len(no_episode) else logging.WARNING
        where = "finished" if after_step is None else f"that ended after step {after_step:g}"
        logger.log(
            level,
            "%d run(s) have no episode %s with a finite return: %s; their final_return is NaN.",
            len(empty),
            where,
            describe_runs(empty),
        )
    order = run_cols + info + ["final_return", "num_episodes"]
    return out[order]


@suggests_keywords
def aggregate(
    final: pd.DataFrame | Mapping[str, ArrayLike],
    *,
    value: str = "final_return",
    group_by: GroupBy = None,
    strata: GroupBy = None,
    ci: float | None = 0.95,
    n_resamples: int = 10_000,
    seed: Seed = 0,
) -> pd.DataFrame:
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
        seed: Seed or generator of the bootstrap; each group has its own stream, drawn from its values: the same
            runs get the same intervals whatever their group is called and in whatever order they come.

    Returns:
        One row per group: the group columns, ``mean``, ``mean_lo``, ``mean_hi``,
        ``median``, ``median_lo``, ``median_hi``, ``iqm``, ``iqm_lo``, ``iqm_hi``,
        ``num_runs`` (runs in the statistics), ``num_missing`` (runs left out because
        their value is NaN or infinite, such as runs without a finished episode; logged)
        and, with ``strata``, ``num_strata``. Bounds are NaN where fewer than two runs
        exist; every statistic is NaN in a group without a value.

    Raises:
        ValueError: A column is missing, ``strata`` overlaps ``group_by``, or ``ci``,
            ``n_resamples`` or ``seed`` is invalid.
    """
    if isinstance(final, Mapping):
        if group_by is not None:
            raise ValueError("group_by applies to a DataFrame; a mapping is grouped by its keys already.")
        final = pd.DataFrame(
            [(str(k), float(v)) for k, vs in final.items() for v in np.ravel(vs)], columns=["group", value]
        )
        group_by = ["group"]
    require_columns(final, [value], hint=" Pass the output of final_performance(), or use summarize().")
    check_ci(ci)
    check_positive_int("n_resamples", n_resamples)
    group_cols, strata_cols = group_and_strata(final, group_by, strata)
    streams = GroupStreams(seed)
    finite = np.isfinite(pd.to_numeric(final[value], errors="coerce").to_numpy(dtype=float))
    if not finite.all():
        named = f": {describe_runs(final[~finite])}" if "run" in final.columns else ""
        logger.warning("Leaving out %d run(s) whose %s is NaN or infinite%s.", int((~finite).sum()), value, named)
    final = final.assign(_finite=finite)
    rows = []
    for keys, sub in groups(final, group_cols):
        valid = sub[sub["_finite"].to_numpy()]
        # sorted: the statistics ignore the runs' order, and the resamples then pick the same values from the
        # same runs however they were listed
        parts = [np.sort(s[value].to_numpy(float))[None] for _, s in groups(valid, strata_cols)]
        row: dict[str, Any] = dict(keys)
        rng = streams.of_values(parts)
        for name, fn in STATISTICS.items():
            est, lo, hi = estimate(parts, fn, ci, n_resamples, rng)[:, 0] if parts else (np.nan,) * 3
            row.update({name: est, f"{name}_lo": lo, f"{name}_hi": hi})
        row["num_runs"], row["num_missing"] = len(valid), len(sub) - len(valid)
        if strata_cols:
            row["num_strata"] = len(parts)
        if not len(valid):
            logger.warning("Group %s has no run with a value: its statistics are NaN.", keys or "(all)")
        elif ci is not None and len(valid) < 2:
            logger.warning("Group %s has a single run: its confidence intervals are NaN.", keys or "(all)")
        rows.append(row)
    return pd.DataFrame(rows)


@suggests_keywords
def summarize(
    df: pd.DataFrame,
    last_k: int | None = None,
    after_step: float | None = None,
    *,
    group_by: GroupBy = None,
    strata: GroupBy = None,
    ci: float | None = 0.95,
    n_resamples: int = 10_000,
    seed: Seed = 0,
    include_unfinished: bool = False,
    score: str | None = None,
) -> pd.DataFrame:
    """:func:`final_performance` followed by :func:`aggregate`: one row per group.

    The arguments are those of the two functions; ``strata`` columns are kept per run so
    that :func:`aggregate` can resample within them. ``score``: ``"return"`` summarises
    ``ep_return``, ``"raw"`` the raw scores (``raw_return``, see
    :func:`~online_trainer.analysis.scores.score_table`); None: ``df.attrs["score"]``, which
    ``load_episodes`` sets to ``"raw"`` for experiments run with ``score="raw"``.

    Returns:
        The table of :func:`aggregate` with one more column, ``num_excluded``: the runs
        of the group left out because they did not finish (0 with
        ``include_unfinished=True``). A group whose every run was left out has a row
        of NaN statistics.

    Raises:
        ValueError: As :func:`final_performance` and :func:`aggregate`.
    """
    require_columns(df, ["run", "ep_return"])
    df = score_table(df, score)
    group_cols, strata_cols = group_and_strata(df, group_by, strata)
    kept, excluded = select_runs(df, include_unfinished)
    if kept.empty:
        raise ValueError(
            f"Every run was left out: {describe_runs(excluded)}. Pass include_unfinished=True to analyse them anyway."
        )
    final = final_performance(
        kept, last_k, after_step, group_by=group_cols + strata_cols, include_unfinished=True, score=None
    )  # kept's ep_return is already the score asked for, and its attrs say which (raw read again is the same)
    table = aggregate(final, group_by=group_cols, strata=strata_cols or None, ci=ci, n_resamples=n_resamples, seed=seed)
    return _count_excluded(table, excluded, group_cols)


def _key(row: Mapping[str, Any], cols: list[str]) -> tuple:
    values = []
    for col in cols:
        value = row.get(col, np.nan)
        value = value.item() if isinstance(value, np.generic) else value
        values.append(None if isinstance(value, float) and np.isnan(value) else value)
    return tuple(values)


def _count_excluded(table: pd.DataFrame, excluded: pd.DataFrame, group_cols: list[str]) -> pd.DataFrame:
    """Add ``num_excluded`` per group, and a row of NaN statistics for groups whose every run was left out."""
    counts = Counter(_key(r, group_cols) for r in excluded.to_dict("records"))
    table = table.copy()
    table["num_excluded"] = [counts.pop(_key(r, group_cols), 0) for r in table.to_dict("records")]
    if counts:
        extra = pd.DataFrame(
            [
                {**dict(zip(group_cols, key)), "num_runs": 0, "num_missing": 0, "num_excluded": n}
                for key, n in counts.items()
            ]
        )
        if "num_strata" in table.columns:
            extra["num_strata"] = 0
        table = pd.concat([table, extra], ignore_index=True)[table.columns]
        table = table.sort_values(group_cols, kind="stable").reset_index(drop=True)
    return table
