"""What goes into an analysis: checks of an episode table, its groups and runs, run status, non-finite returns.

Shared by :mod:`online_trainer.analysis.stats`, :mod:`online_trainer.analysis.curves`,
:mod:`online_trainer.analysis.plotting` and the ``show``/``report`` commands, so that they leave
out the same runs and say so in the same words.

Run status (the ``status`` column of :func:`online_trainer.analysis.dataframes.load_episodes`):
runs whose status is in :data:`KEPT_STATUSES` (``finished``, ``stopped_early``,
``unknown``) are analysed; the others (``failed``, ``interrupted``, ``pending``,
``running``, or any status this version does not know) are left out, with a logged
warning naming them, unless ``include_unfinished=True``. A table without a ``status``
column is analysed whole.

Runs without a finished episode have no row in an episode table.
:func:`~online_trainer.analysis.dataframes.load_episodes` lists every run, those included, in
``df.attrs["runs"]`` (a list of dicts); the analysis uses that list while the table still
holds exactly the episodes it was loaded with, so that such runs are counted (a NaN
final return, ``num_missing`` in :func:`~online_trainer.analysis.stats.aggregate`) instead of
vanishing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np
import pandas as pd

logger = logging.getLogger(__name__)

GroupBy: TypeAlias = str | Sequence[str] | None

STATUS_COLUMN = "status"
RUNS_ATTR = "runs"
EVALUATIONS_COUNT = "num_evaluations"
"""What counts a run's rows in an evaluation table's ``attrs["runs"]`` (``num_episodes`` in an episode table's)."""
#: Statuses of runs that are analysed by default. ``stopped_early`` ended by design (an
#: early-stopping rule), ``unknown`` is the status of experiments without a manifest
#: (written by the original OnlineTrainer), whose runs cannot be told apart.
KEPT_STATUSES = frozenset({"finished", "stopped_early", "unknown"})
_MAX_NAMED = 10


# ----------------------------------------------------------------------------- checks
def check_ci(ci: float | None) -> None:
    """Refuse a ``ci`` that is not None or a level in (0, 1)."""
    if ci is not None and not (isinstance(ci, (float, int)) and not isinstance(ci, bool) and 0 < ci < 1):
        raise ValueError(f"ci must be a confidence level in (0, 1) such as 0.95, or None, got ci={ci!r}.")


def check_positive_int(name: str, value: object, minimum: int = 1) -> None:
    """Refuse a ``value`` of argument ``name`` that is not an int of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {name}={value!r}.")


def require_columns(df: pd.DataFrame, columns: Sequence[str], hint: str = "") -> None:
    """Refuse anything but a non-empty DataFrame holding ``columns``."""
    if not isinstance(df, pd.DataFrame):
        shown = repr(df) if len(repr(df)) <= 80 else type(df).__name__
        fix = f": pass load_episodes({os.fspath(df)!r}) instead" if isinstance(df, (str, os.PathLike)) else ""
        raise TypeError(  # M22: a path, as the plotting functions take, was told only "got str"
            f"Expected a pandas DataFrame of episodes, as load_episodes(exp_dir) returns, but got {shown}{fix}."
        )
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"The data has no column(s) {missing}; available columns: {list(df.columns)}.{hint}")
    if df.empty:
        records = df.attrs.get(RUNS_ATTR) or []
        if any(r.get("unrecorded_episodes") for r in records):
            raise ValueError(
                f"No run recorded its episodes, so there is no return to analyse: {describe_runs(pd.DataFrame(records))}"
                " ran with dump_metrics=False, which keeps no metrics_run{i}.pkl. Run them again without it."
            )
        if records:  # an experiment's runs, none of which finished an episode
            raise ValueError(
                f"No run finished an episode, so there is no return to analyse: {describe_runs(pd.DataFrame(records))}."
                " A step budget shorter than the env's episodes ends runs before any episode does: give more steps, "
                "an episode budget, or a time limit on the env."
            )
        raise ValueError("The data is empty: there is no episode to analyse.")


# ----------------------------------------------------------------------------- groups and runs
def group_columns(df: pd.DataFrame, group_by: GroupBy) -> list[str]:
    """The columns of ``group_by``; ``None`` means ``experiment`` when the column exists."""
    if group_by is None:
        return ["experiment"] if "experiment" in df.columns else []
    cols = [group_by] if isinstance(group_by, str) else list(group_by)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(
            f"group_by={group_by!r} names column(s) {missing} that the data does not have; "
            f"available columns: {list(df.columns)}."
        )
    return cols


def group_and_strata(df: pd.DataFrame, group_by: GroupBy, strata: GroupBy) -> tuple[list[str], list[str]]:
    """Resolve ``group_by`` and ``strata``; ``experiment`` as a stratum is not also a group."""
    strata_cols = [] if strata is None else group_columns(df, strata)
    group_cols = [] if group_by is None and "experiment" in strata_cols else group_columns(df, group_by)
    if set(strata_cols) & set(group_cols):
        raise ValueError(f"strata={strata!r} and group_by={group_by!r} must not share columns.")
    return group_cols, strata_cols


def ident_columns(df: pd.DataFrame) -> list[str]:
    """The columns that name a run whatever the grouping: ``experiment`` (when present) and ``run``."""
    return (["experiment"] if "experiment" in df.columns else []) + ["run"]


def run_columns(df: pd.DataFrame, group_cols: list[str]) -> list[str]:
    """The columns that identify one run: its group, its experiment, its run index."""
    ident = ident_columns(df)[:-1]
    extra = [c for c in group_cols if c not in ident and c != "run"]
    if extra:
        per_run = df.groupby(ident + ["run"], dropna=False)[extra].nunique(dropna=False)
        varying = [c for c in extra if (per_run[c] > 1).any()]
        if varying:
            raise ValueError(
                f"group_by column(s) {varying} change value within a run; group by columns "
                "that are constant per run, such as hyperparameters or 'experiment'."
            )
    return list(dict.fromkeys(group_cols + ident + ["run"]))


def groups(df: pd.DataFrame, group_cols: list[str]) -> Iterator[tuple[dict[str, Any], pd.DataFrame]]:
    """Yield ``(dict of group values, sub-frame)`` for each group, in sorted order."""
    if not group_cols:
        yield {}, df
        return
    for key, sub in df.groupby(group_cols, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        yield dict(zip(group_cols, key)), sub


def describe_runs(runs: pd.DataFrame, limit: int = _MAX_NAMED) -> str:
    """``"a/run 3 (failed), run 5 (interrupted)"``: the runs of a table with ``run`` and maybe ``status``."""
    names = []
    for row in runs.head(limit).to_dict("records"):
        run = row["run"]
        run = int(run) if isinstance(run, float) and run.is_integer() else run  # a column with NaN reads as floats
        name = f"{row['experiment']}/run {run}" if "experiment" in row else f"run {run}"
        status = row.get(STATUS_COLUMN)
        names.append(f"{name} ({status})" if isinstance(status, str) else name)
    more = f" and {len(runs) - limit} more" if len(runs) > limit else ""
    return ", ".join(names) + more


# ----------------------------------------------------------------------------- runs without episodes
def run_records(df: pd.DataFrame) -> list[dict[str, Any]] | None:
    """The runs listed in ``df.attrs["runs"]``, while ``df`` holds exactly the episodes they count.

    Returns None when there is no such list, or when rows were added or removed since
    (the list then no longer describes the table).
    """
    records = df.attrs.get(RUNS_ATTR)
    if not isinstance(records, list):
        return None
    rows = rows_key(df)
    if sum(int(r.get(rows) or 0) for r in records) != len(df):
        logger.debug("df.attrs['runs'] counts other episodes than the table holds: not used.")
        return None
    return records


def rows_key(df: pd.DataFrame) -> str:
    """The field of ``df.attrs["runs"]`` that counts a run's rows: its evaluations in an evaluation table, else its
    episodes."""
    return EVALUATIONS_COUNT if "eval_return" in df.columns else "num_episodes"


def runs_without_episodes(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """The runs of ``df.attrs["runs"]`` with no episode, as rows holding ``columns`` (and status, seed).

    A column a record lacks is filled with the table's value when the table holds a
    single one (e.g. an ``experiment`` column added to one experiment's table); a run that
    cannot be placed in a group this way is left out with a warning.
    """
    records = run_records(df)
    if not records:
        return pd.DataFrame(columns=list(columns))
    rows, unplaced, count = [], 0, rows_key(df)
    for record in records:
        if int(record.get(count) or 0) > 0:
            continue
        row = {k: v for k, v in record.items() if k in set(columns) | {STATUS_COLUMN, "seed"}}
        for col in columns:
            if col not in row and col in df.columns and df[col].nunique(dropna=False) == 1:
                row[col] = df[col].iloc[0]
        if all(col in row for col in columns):
            rows.append(row)
        else:
            unplaced += 1
    if unplaced:
        logger.warning(
            "%d run(s) without a finished episode lack a value of %s and are not counted.", unplaced, list(columns)
        )
    return pd.DataFrame(rows, columns=list(dict.fromkeys([*columns, "seed", STATUS_COLUMN])))


# ----------------------------------------------------------------------------- status
def _kept(values: pd.Series) -> pd.Series:
    """True where a status is in :data:`KEPT_STATUSES` (after normalising its spelling)."""
    kept = {v for v in values.dropna().unique() if normalize_status(v) in KEPT_STATUSES}
    return values.isin(kept) | values.isna()


def normalize_status(value: Any) -> str:
    """``"Stopped early"`` and ``"stopped-early"`` as ``"stopped_early"``; None as ``"unknown"``."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "unknown"
    return str(value).strip().lower().replace(" ", "_").replace("-", "_")


def select_runs(
    df: pd.DataFrame, include_unfinished: bool = False, *, log: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leave out the runs that did not finish, logging a warning that names them.

    Args:
        df: Episode table; without a ``status`` column nothing is left out.
        include_unfinished: Keep every run (nothing is logged).
        log: Log the warning (callers that report the left-out runs themselves pass False).

    Returns:
        The kept episodes (``attrs["runs"]`` trimmed to the kept runs) and one row per
        left-out run: its ``experiment`` (when present), ``run``, ``seed``, ``status``,
        ``num_episodes`` and the columns constant within it (such as hyperparameters).
    """
    records = run_records(df)
    ident = ident_columns(df)
    empty = pd.DataFrame(columns=[*ident, "seed", STATUS_COLUMN, "num_episodes"])
    if include_unfinished or STATUS_COLUMN not in df.columns:
        return df, empty
    keep = _kept(df[STATUS_COLUMN])
    dropped = df[~keep]
    parts = []
    if len(dropped):
        first = dropped.groupby(ident, dropna=False, sort=True).first().reset_index()
        first["num_episodes"] = dropped.groupby(ident, dropna=False, sort=True).size().to_numpy()
        parts.append(
            first.drop(
                columns=[
                    c
                    for c in ("episode_index", "global_step", "ep_return", "ep_length", "wall_time")
                    if c in first.columns
                ]
            )
        )
    if records is not None:
        count = rows_key(df)
        silent = [
            r
            for r in records
            if int(r.get(count) or 0) == 0 and normalize_status(r.get(STATUS_COLUMN)) not in KEPT_STATUSES
        ]
        if silent:
            parts.append(pd.DataFrame(silent))
    if not parts:
        return df, empty
    excluded = pd.concat(parts, ignore_index=True).sort_values(ident, kind="stable").reset_index(drop=True)
    kept = df[keep].copy()
    if records is not None:
        gone = set(map(tuple, excluded[ident].astype(object).itertuples(index=False)))
        kept.attrs[RUNS_ATTR] = [r for r in records if tuple(r.get(c) for c in ident) not in gone]
    if log:
        logger.warning(
            "Leaving out %d run(s) that did not finish: %s. Pass include_unfinished=True "
            "(--include-unfinished on the command line) to include them.",
            len(excluded),
            describe_runs(excluded),
        )
    return kept, excluded


# ----------------------------------------------------------------------------- non-finite returns
def drop_nonfinite(df: pd.DataFrame, column: str = "ep_return") -> pd.DataFrame:
    """Leave out the episodes whose ``column`` is NaN or infinite, logging a warning that names their runs.

    The runs keep their other episodes. The returned table has no ``attrs["runs"]``
    when rows were left out (the list no longer counts its episodes).
    """
    values = pd.to_numeric(df[column], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if not bad.any():
        return df
    ident = ident_columns(df)
    counts = df[bad].groupby(ident, dropna=False, sort=True).size().reset_index(name="n")
    named = ", ".join(
        f"{describe_runs(pd.DataFrame([row])[ident])}: {row['n']}" for row in counts.head(_MAX_NAMED).to_dict("records")
    )
    more = f" and {len(counts) - _MAX_NAMED} more run(s)" if len(counts) > _MAX_NAMED else ""
    raw = column == "ep_return" and df.attrs.get("score") == "raw"  # a score_table of raw scores
    logger.warning(
        "Leaving out %d episode(s) whose %s is NaN or infinite (%s%s); their runs keep their other episodes.%s",
        int(bad.sum()),
        "raw score (raw_return)" if raw else column,
        named,
        more,
        " A raw score is NaN for an episode its RecordEpisodeStatistics did not see end (cut by a wrapper outside "
        "it, such as a TimeLimit listed after it)."
        if raw
        else "",
    )
    out = df[~bad].copy()
    out.attrs.pop(RUNS_ATTR, None)
    return out
