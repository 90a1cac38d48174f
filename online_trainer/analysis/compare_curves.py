"""Sample-efficiency curves of :func:`online_trainer.analysis.compare.compare`: the metric across runs against env steps.

Every candidate's runs are interpolated onto one grid of env steps shared by all
candidates (``numpy.interp``); a run is never extrapolated (it has no value before its
first or after its last point), except that a run which reached its step budget covers
the grid up to the budget (see :func:`online_trainer.analysis.curves.budget_ends`), and
every step budget of the compared runs is a point of the grid, so that each curve ends on its budget. Each point
of a training-episode curve is the trailing mean of the last ``last_k`` returns, so that
the curve ends on the runs' scores; an evaluation curve uses each evaluation's mean
return, the k-th evaluations of an experiment on a step schedule placed at their median
step. The band at each point is a stratified bootstrap over the runs that have data there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from online_trainer.analysis.bootstrap import STATISTICS, GroupStreams
from online_trainer.analysis.compare_inputs import RUN_KEYS, CompareOptions, normalized
from online_trainer.analysis.curves import budget_ends, pointwise
from online_trainer.analysis.selection import drop_nonfinite, select_runs

COLUMNS = ["candidate", "global_step", "value", "lo", "hi", "num_runs", "total_runs"]


def _series(table: pd.DataFrame, options: CompareOptions) -> pd.DataFrame:
    """Per row, the ``y`` of its run at ``global_step``: trailing mean of episodes, or the evaluation's mean."""
    if options.source == "eval":
        data = table.rename(columns={"eval_return": "y"})
        if "episodes_trained" in data.columns and "eval_index" in data.columns:
            keys = ["experiment", "eval_index"]
            by_step = not data.groupby(keys)["episodes_trained"].nunique().eq(1).all()
            if by_step:
                data = data.assign(global_step=data.groupby(keys)["global_step"].transform("median"))
        return data.sort_values(RUN_KEYS + ["global_step"], kind="stable")
    data = drop_nonfinite(table).sort_values(RUN_KEYS + ["episode_index"], kind="stable")
    y = data.groupby(RUN_KEYS, sort=False)["ep_return"].transform(
        lambda s: s.rolling(options.last_k, min_periods=1).mean()
    )
    return data.assign(y=y)


def sample_efficiency(
    table: pd.DataFrame, options: CompareOptions, candidates: Sequence[str], bounds: Mapping[str, tuple[float, float]]
) -> pd.DataFrame:
    """The curves of every candidate on a common grid of env steps (see the module docstring)."""
    kept, _ = select_runs(table, options.include_unfinished, log=False)
    ends = budget_ends(table)
    data = _series(kept, options)
    data = data[np.isfinite(data["y"].to_numpy(float)) & data["global_step"].notna()]
    runs: dict[str, list[tuple[str, np.ndarray, np.ndarray, float]]] = {c: [] for c in candidates}
    for (candidate, task, experiment, run), r in data.groupby(RUN_KEYS, sort=True):
        last = r.groupby("global_step", sort=True)["y"].last()  # episodes ending at one step: the last one
        xs, ys = last.index.to_numpy(float), normalized(last.to_numpy(float), task, bounds)
        end = ends.get((experiment, run), xs[-1])
        if end > xs[-1]:
            xs, ys = np.append(xs, end), np.append(ys, ys[-1])
        if candidate in runs:
            runs[candidate].append((task, xs, ys, min(end, xs[-1])))
    everything = [r for rs in runs.values() for r in rs]
    if not everything:
        return pd.DataFrame(columns=COLUMNS)
    first, last = min(r[1][0] for r in everything), max(r[3] for r in everything)
    grid = np.round(np.linspace(first, last, options.num_points))
    # each step budget is a point too: a shorter budget's curve ends on it, not at the grid point before (up to a
    # grid step early, which reads as runs that stopped before their budget)
    budgets = [end for end in set(ends.values()) if first <= end <= last]
    grid = np.unique(np.concatenate([grid, budgets]))
    streams = GroupStreams(options.seed)
    frames = [_curve(c, rs, grid, options, streams) for c, rs in runs.items() if rs]
    out = pd.concat(frames, ignore_index=True)
    out.attrs["stat"] = options.metric
    return out[COLUMNS]


def _curve(
    candidate: str,
    runs: list[tuple[str, np.ndarray, np.ndarray, float]],
    grid: np.ndarray,
    options: CompareOptions,
    streams: GroupStreams,
) -> pd.DataFrame:
    """One candidate's curve: the metric and its stratified band at each point, over the runs covering it."""
    values = np.stack([np.interp(grid, xs, ys, left=np.nan, right=np.nan) for _, xs, ys, _ in runs], axis=-1)
    tasks = np.array([task for task, *_ in runs])
    rng = streams({"candidate": candidate, "statistic": "curve"})
    out = pointwise(values, STATISTICS[options.metric], options.ci, options.n_resamples, rng, strata=tasks)
    covered = ~np.isnan(values)
    return pd.DataFrame(
        {
            "candidate": candidate,
            "global_step": grid,
            "value": out[0],
            "lo": out[1],
            "hi": out[2],
            "num_runs": covered.sum(axis=-1),
            "total_runs": int(covered.any(axis=0).sum()),
        }
    )
