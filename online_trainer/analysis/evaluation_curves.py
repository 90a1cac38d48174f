"""Evaluation curves: the statistic across runs of each evaluation's mean return, at the evaluations themselves.

What ``online-trainer report`` draws as ``eval_curves.png``, for a notebook: the evaluations of
``eval_run{i}.pkl`` (see :func:`~online_trainer.analysis.dataframes.load_evaluations`), each run's k-th scheduled
evaluation placed at the median x of the k-th ones of its experiment, and nothing interpolated.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from online_trainer.analysis.dataframes import load_evaluations
from online_trainer.analysis.plotting import STAT_LABELS, directory_label, group_colors, plot_learning_curves
from online_trainer.analysis.selection import describe_runs, ident_columns, select_runs
from online_trainer.analysis.yaxis import YLim
from online_trainer.options.validation import suggests_keywords

logger = logging.getLogger(__name__)

MAX_MARKED_POINTS = 200
"""Evaluation curves with at most this many evaluation steps are drawn at them, with a marker each."""
X_AXES = ("global_step", "episodes_trained")


def finite_evaluations(evals: pd.DataFrame) -> pd.DataFrame:
    """``evals`` without the evaluations whose mean return is NaN or infinite, with a warning that names their runs.

    With ``score="raw"`` an evaluation episode cut before it ended (an eval env without a time limit, cut after
    10,000 steps) has no return: ``RecordEpisodeStatistics`` never reported one. Such evaluations stay in
    ``eval_run{i}.pkl`` and out of the statistics and curves.
    """
    if evals.empty:
        return evals
    bad = ~np.isfinite(pd.to_numeric(evals["eval_return"], errors="coerce").to_numpy(dtype=float))
    if not bad.any():
        return evals
    ident = ident_columns(evals)
    logger.warning(
        "Leaving out %d of %d evaluation(s) whose mean return is NaN or infinite (%s): with score='raw' an "
        "evaluation episode cut before it ended has no return (give the eval env a time limit, "
        "gym.make(..., max_episode_steps=...)).",
        int(bad.sum()),
        len(evals),
        describe_runs(evals[bad][ident].drop_duplicates()),
    )
    return evals[~bad].reset_index(drop=True)


def aligned_evaluations(evals: pd.DataFrame, x: str) -> pd.DataFrame:
    """The scheduled evaluations of ``evals``, each run's k-th at the median ``x`` of the k-th ones of its experiment.

    The curves align the runs on the schedule. On a step schedule (``evaluation.freq`` in env
    steps) the runs of an experiment evaluate at the same thresholds, but each at the first step
    past one, up to ``num_envs`` apart, and after numbers of episodes that differ from run to run;
    on an episode schedule they evaluate after the same number of episodes, at steps that differ.
    Curves do not extrapolate a run past its last point, so without this the curve would stand
    on fewer runs than were evaluated (on disjoint points of one run each). The final evaluation
    of a run stopped early (``scheduled`` False) is left out: at its own step it would be a point
    of that run alone; the run's curve ends at its last scheduled evaluation.
    """
    scheduled = evals["scheduled"].astype(bool) if "scheduled" in evals.columns else pd.Series(True, evals.index)
    evals = evals[scheduled]
    runs = [column for column in ("experiment",) if column in evals.columns] + ["run"]
    slot = evals.groupby([evals[c] for c in runs]).cumcount()  # k for the k-th scheduled one
    aligned = evals.copy()
    aligned[x] = evals.groupby([evals[c] for c in runs[:-1]] + [slot])[x].transform("median")
    return aligned


@suggests_keywords
def plot_evaluation_curves(
    data: pd.DataFrame | str | os.PathLike | Sequence[str | os.PathLike],
    x: Literal["global_step", "episodes_trained"] = "global_step",
    *,
    stat: str = "iqm",
    ci: float | None = 0.95,
    span: Literal["all", "common"] = "all",
    ylim: YLim = "auto",
    yscale: str = "auto",
    include_unfinished: bool = False,
    title: str | None = None,
    n_resamples: int = 2_000,
    colors: Mapping[Any, Any] | None = None,
) -> Figure:
    """One line per experiment: the statistic across runs of each evaluation's mean return, with a CI band.

    Each run's k-th scheduled evaluation stands at the median ``x`` of the k-th evaluations of its experiment (runs
    evaluate up to ``num_envs`` steps apart on a step schedule), so every point stands on every run evaluated there
    and nothing is interpolated. Evaluations whose mean is not finite (``score="raw"`` with an episode cut before
    it ended) are left out with a warning; so is the final evaluation of a run a hook stopped early (off the
    schedule: its curve ends at its last scheduled one).

    Args:
        data: The table of :func:`~online_trainer.analysis.dataframes.load_evaluations`, or experiment directories
            (one, a sweep's, or a list) it loads.
        x: ``"global_step"`` (environment steps) or ``"episodes_trained"``.
        stat: ``"iqm"``, ``"mean"`` or ``"median"`` across runs.
        ci: Confidence level of the band; ``None`` draws no band.
        span: ``"all"``: each curve over the evaluations some run has; ``"common"``: those every run has.
        ylim: As :func:`~online_trainer.analysis.plotting.plot_learning_curves`'s.
        yscale: As :func:`~online_trainer.analysis.plotting.plot_learning_curves`'s.
        include_unfinished: Keep failed, interrupted and pending runs (left out by default, with a warning).
        title: The figure's title.
        n_resamples: Bootstrap resamples of the band.
        colors: A colour for some experiments, by label, as in
            :func:`~online_trainer.analysis.plotting.plot_learning_curves`.

    Returns:
        The figure (``eval_curves.png`` of ``online-trainer report`` is this figure at its defaults).

    Raises:
        ValueError: ``x`` is not one of :data:`X_AXES`, or the data has no evaluation.
    """
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: evaluation curves are drawn against {' or '.join(map(repr, X_AXES))}.")
    evals = data if isinstance(data, pd.DataFrame) else load_evaluations(data)
    evals = finite_evaluations(evals)
    if evals.empty:
        raise ValueError(
            "There is no evaluation to draw: the runs ran none (training with evaluation=EvaluationOptions(freq=...) "
            "schedules them), or none has a finite mean."
        )
    if "scheduled" not in evals.columns:
        evals = evals.assign(scheduled=True)
    if (
        x == "global_step"
        and evals[evals["scheduled"]]
        .groupby([c for c in ("experiment",) if c in evals.columns] + ["eval_index"])["episodes_trained"]
        .nunique()
        .eq(1)
        .all()
    ):
        logger.info(
            "The evaluations follow an episode schedule: each curve point is the k-th evaluation of every "
            "run, at the median env step of those evaluations."
        )
    stopped = evals[~evals["scheduled"].astype(bool)]
    if len(stopped):
        logger.info(
            "The evaluation curves leave out the final evaluation of %d run(s) stopped early (%s): each curve "
            "stops at its run's last scheduled evaluation.",
            len(stopped),
            describe_runs(stopped),
        )
    table = aligned_evaluations(evals, x).rename(columns={"eval_return": "ep_return", "eval_index": "episode_index"})
    points = np.unique(table[x].to_numpy(float))
    # a run stopped early before its first scheduled evaluation has no point: the legend cannot count it (tester H5)
    kept, _ = select_runs(evals, include_unfinished, log=False)
    ident = ident_columns(kept)
    drawn = table[ident].drop_duplicates()
    undrawn = kept[ident].drop_duplicates().merge(drawn, how="left", indicator=True)
    undrawn = undrawn[undrawn["_merge"] == "left_only"].drop(columns="_merge")
    notes = (
        [
            f"Not drawn: {describe_runs(undrawn)}, stopped before a scheduled evaluation (its final evaluation is in "
            "the report's table and load_evaluations)."
        ]
        if len(undrawn)
        else []
    )
    label = directory_label(data)  # one directory: its runs pooled, which colors may name by it
    if colors is not None and label is not None and "experiment" not in table.columns:
        group_colors([None], colors, aliases=[label])  # refused naming the directory, as the other plots do (V20)
        colors = {None if key == label else key: value for key, value in colors.items()}
    figure = plot_learning_curves(
        table,
        x=x,
        grid="observed",  # at the evaluations, each standing on the runs evaluated there: nothing interpolated
        stat=stat,
        ci=ci,
        title=title,
        span=span,
        ylim=ylim,
        yscale=yscale,
        include_unfinished=include_unfinished,
        n_resamples=n_resamples,
        notes=notes,
        colors=colors,
    )
    ax = figure.axes[0]
    if len(points) <= MAX_MARKED_POINTS:  # few evaluations: each one a marker, so a reader sees where they are
        for line in ax.get_lines():
            line.set_marker("o")
            line.set_markersize(3.5)
        # the limits end at the first and last evaluation: room for their markers (a curve of one evaluation
        # at the axes' edge read as a mark of the frame: tester H5)
        low, high = ax.get_xlim()
        pad = 0.03 * (high - low) if high > low else max(abs(low) * 0.05, 1.0)
        ax.set_xlim(low - pad, high + pad)
    band = f", {ci:.0%} CI across runs" if ci is not None else ""
    ax.set_ylabel(f"Evaluation return, mean per evaluation\n({STAT_LABELS[stat]}{band})")
    ax.set_xlabel("Episodes trained" if x == "episodes_trained" else ax.get_xlabel())
    return figure
