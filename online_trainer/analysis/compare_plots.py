"""Figures of a :class:`~online_trainer.analysis.compare.Comparison`: every candidate with its interval.

Each function returns a :class:`matplotlib.figure.Figure` built without ``pyplot`` (as in
:mod:`online_trainer.analysis.plotting`), titled with the confidence level, the number of
runs of each candidate and the number of tasks.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.text import Annotation
from matplotlib.ticker import EngFormatter

from online_trainer.analysis import compare_stats as cs
from online_trainer.analysis.plotting import STAT_LABELS, group_colors, notes_under_axes, spread_end_labels
from online_trainer.analysis.yaxis import set_y_axis

if TYPE_CHECKING:  # compare imports this module when its figures are asked for
    from online_trainer.analysis.compare import Comparison

__all__ = ["plot_aggregates", "plot_improvement", "plot_profiles", "plot_sample_efficiency"]

AGGREGATE_LABELS = {"iqm": "IQM", "mean": "Mean", "median": "Median", "optimality_gap": "Optimality gap"}


def _style(ax) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(True, color="0.85", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=8, length=3)


def _p(value: float) -> str:
    """A probability as comparison.md writes it: three decimals, two for 1 (``0.245``, ``1.00``)."""
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"


def _colors(comparison: Comparison, colors: Mapping[Any, Any] | None = None) -> dict[Any, Any]:
    """Each candidate's colour: ``colors[candidate]`` where given, else the palette's by its place in name order, what
    the learning-curve plots of the same experiments give them (their groups come sorted)."""
    names = sorted(comparison.info["candidates"], key=str)
    values = comparison.info.get("candidate_values") or {}  # by="lr": 0.001 names lr=0.001, as in the plots' group_by
    return dict(zip(names, group_colors(names, colors, what="candidate", aliases=[values.get(n) for n in names])))


def _runs(comparison: Comparison) -> dict[str, int]:
    return dict(zip(comparison.aggregates["candidate"], comparison.aggregates["num_runs"]))


def describe(comparison: Comparison) -> str:
    """``"95% stratified-bootstrap CIs; runs: A 5, B 1 (3 without a score); 1 task"``: what every figure states."""
    tasks = len(comparison.info["tasks"])
    aggregates = comparison.aggregates
    missing = dict(zip(aggregates["candidate"], aggregates["num_missing"])) if "num_missing" in aggregates else {}
    # a run without a score (no episode, no evaluation) is in no figure: said, as comparison.md says it
    runs = ", ".join(
        f"{c} {n}" + (f" ({missing[c]} without a score)" if missing.get(c) else "")
        for c, n in _runs(comparison).items()
    )
    scale = "normalised score" if comparison.info["normalization"] else "return"
    return (
        f"{comparison.options.ci:.0%} stratified-bootstrap CIs over runs; runs: {runs}; "
        f"{tasks} task{'s' if tasks != 1 else ''}; {scale}"
    )


def _title(fig: Figure, text: str) -> None:
    width = max(50, int(fig.get_figwidth() * 72 / 4.6))
    fig.suptitle(textwrap.fill(text, width), fontsize=8, color="0.3")


def _score_label(comparison: Comparison) -> str:
    if comparison.info["normalization"]:
        return "Normalised score"
    return (
        "Score (final evaluation return)"
        if comparison.options.source == "eval"
        else f"Score (mean return, last {comparison.options.last_k} episodes)"
    )


def plot_aggregates(
    comparison: Comparison,
    stats: Sequence[str] = ("iqm", "mean", "median", "optimality_gap"),
    colors: Mapping[Any, Any] | None = None,
) -> Figure:
    """One panel per aggregate metric, one row per candidate: point estimate and interval, values written."""
    table = comparison.aggregates
    stats = [s for s in stats if table[s].notna().any()]
    colors, runs = _colors(comparison, colors), _runs(comparison)
    fig = Figure(figsize=(2.6 * len(stats) + 1.4, 0.9 + 0.45 * len(table)), layout="constrained")
    axes = fig.subplots(1, len(stats), sharey=True, squeeze=False)[0]
    ys = np.arange(len(table))[::-1]
    for ax, stat in zip(axes, stats):
        for y, row in zip(ys, table.to_dict("records")):
            color = colors[row["candidate"]]
            ax.plot(
                [row[f"{stat}_lo"], row[f"{stat}_hi"]],
                [y, y],
                color=color,
                linewidth=6,
                alpha=0.45,
                solid_capstyle="butt",
            )
            ax.plot([row[stat]], [y], marker="|", markersize=14, color=color, markeredgewidth=2)
            ax.annotate(
                f"{row[stat]:.3g}",
                (row[stat], y),
                xytext=(0, 8),  # above the point's marker, which stands 7 points over the row
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7,
                color="0.25",
            )
        ax.set_title(AGGREGATE_LABELS[stat] + (" (lower is better)" if stat == "optimality_gap" else ""), fontsize=9)
        _style(ax)
        ax.margins(x=0.15)
    axes[0].set_yticks(ys, [f"{c} (n={runs[c]})" for c in table["candidate"]], fontsize=8)
    axes[0].set_ylim(-0.7, len(table) - 0.3)
    fig.supxlabel(_score_label(comparison), fontsize=9)
    _title(fig, describe(comparison))
    return fig


def plot_improvement(comparison: Comparison, colors: Mapping[Any, Any] | None = None) -> Figure:
    """P(X > Y) of each pair, X the first of the two in the candidates' order, with its interval."""
    order = {c: i for i, c in enumerate(comparison.info["candidates"])}
    table = comparison.improvement
    table = table[[order[a] < order[b] for a, b in zip(table["candidate"], table["versus"])]]
    colors, runs = _colors(comparison, colors), _runs(comparison)
    labels = [_pair_label(r["candidate"], r["versus"], runs) for r in table.to_dict("records")]
    longest = max((len(line) for label in labels for line in label.split("\n")), default=0)
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    # the labels' width (about 0.065 inch a character at 8 points) comes on top of the axes' 4.5 inches
    fig = Figure(
        figsize=(min(4.5 + 0.065 * longest, 16.0), 1.2 + 0.3 * (lines + 0.5) * len(table)), layout="constrained"
    )
    ax = fig.add_subplot()
    ys = np.arange(len(table))[::-1]
    notes = []
    for y, row in zip(ys, table.to_dict("records")):
        color = colors[row["candidate"]]
        lo, hi = row["probability_of_improvement_lo"], row["probability_of_improvement_hi"]
        ax.plot([lo, hi], [y, y], color=color, linewidth=6, alpha=0.45, solid_capstyle="butt")
        ax.plot([row["probability_of_improvement"]], [y], marker="|", markersize=14, color=color, markeredgewidth=2)
        text = f"{_p(row['probability_of_improvement'])} [{_p(lo)}, {_p(hi)}]"
        bound = row["separation_bound"]
        if row["degenerate"] and np.isfinite(bound):  # complete separation: the bound the seeds support, dashed
            p = row["probability_of_improvement"]
            ax.plot(sorted([bound, p]), [y, y], color=color, linewidth=1.2, linestyle=(0, (2, 1.5)))
            text = f"{p:.0f}: degenerate bootstrap;\n{'≥' if p == 1 else '≤'} {bound:.2f} for any distributions"
            hi = max(hi, bound)
        elif row["degenerate"]:
            text += " (degenerate: ties)"
        notes.append(
            ax.annotate(
                text,
                (hi, y),
                xytext=(5, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
                color="0.25",
                annotation_clip=False,
            )
        )
    ax.axvline(0.5, color="0.4", linestyle="--", linewidth=0.8)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlim(0, 1.2)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1])
    ax.set_ylim(-0.7, len(table) - 0.3)
    ax.set_xlabel("Probability of improvement (0.5: cannot be told apart)", fontsize=9)
    _style(ax)
    _title(fig, describe(comparison))
    _make_room(fig, ax, notes)
    return fig


def _make_room(fig: Figure, ax, notes: list) -> None:
    """Extend the x axis to the right until every note, written right of a point, ends inside the axes.

    Constrained layout alone leaves a long note cut off: the margin it makes narrows the axes,
    which moves the point and its note nearer the right edge than the margin allowed for.
    Once the notes lie inside the axes, the layout at saving can only widen the axes.
    """
    fig.draw_without_rendering()  # lays the figure out, as saving it will
    axes = ax.get_window_extent()
    left, right = ax.get_xlim()
    needed = right
    for note in notes:
        x = note.xy[0]
        # the note's offset and text, in axes widths; they keep their size when the axis extends
        width = (note.get_window_extent().x1 - axes.x0) / axes.width - (x - left) / (right - left)
        needed = max(needed, left + (x - left) / max(1 - width, 0.1))
    ax.set_xlim(left, needed)


def _pair_label(candidate: str, versus: str, runs: dict[str, int]) -> str:
    """``P(a > b)  (n=5, 5)``; on two lines when the names are long (a sweep's configurations)."""
    counts = f"(n={runs[candidate]}, {runs[versus]})"
    if len(candidate) + len(versus) <= 40:
        return f"P({candidate} > {versus})  {counts}"
    return f"P({candidate}\n  > {versus})  {counts}"


def _lines(
    ax, frame: pd.DataFrame, x: str, y: str, comparison: Comparison, colors: Mapping[Any, Any] | None
) -> list[Annotation]:
    """Draw each candidate's curve with its band; return the ``n=`` labels at the ends of curves that end on fewer
    runs (for :func:`~online_trainer.analysis.plotting.spread_end_labels`, once the limits are set)."""
    colors, runs = _colors(comparison, colors), _runs(comparison)
    end_labels: list[Annotation] = []
    for candidate in comparison.info["candidates"]:
        rows = frame[frame["candidate"] == candidate]
        if rows.empty:
            continue
        lo, hi = (f"{y}_lo", f"{y}_hi") if f"{y}_lo" in rows else ("lo", "hi")
        xs, ys = rows[x].to_numpy(float), rows[y].to_numpy(float)
        full = np.ones(len(rows), bool)
        if "num_runs" in rows:
            full = (rows["num_runs"] == rows["total_runs"]).to_numpy()
            ax.plot(xs, ys, color=colors[candidate], linewidth=0.8)
            last = np.flatnonzero(np.isfinite(ys))
            if len(last) and not full[last[-1]]:
                end_labels.append(
                    ax.annotate(
                        f"n={int(rows['num_runs'].iloc[last[-1]])}",
                        (xs[last[-1]], ys[last[-1]]),
                        xytext=(3, 0),
                        textcoords="offset points",
                        fontsize=7,
                        color=colors[candidate],
                        va="center",
                    )
                )
        ax.plot(
            xs,
            np.where(full, ys, np.nan),
            color=colors[candidate],
            linewidth=1.8,
            label=f"{candidate} (n={runs[candidate]})",
        )
        ax.fill_between(rows[x], rows[lo], rows[hi], color=colors[candidate], alpha=0.2, linewidth=0)
    ax.legend(frameon=False, fontsize=8)
    _style(ax)
    return end_labels


def plot_profiles(comparison: Comparison, colors: Mapping[Any, Any] | None = None) -> Figure:
    """Performance profiles: the fraction of runs scoring above ``tau``, with pointwise bands."""
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    colors, runs = _colors(comparison, colors), _runs(comparison)
    scores = comparison.scores
    grid = comparison.profiles["tau"].to_numpy(float)
    # the axis starts a little left of the lowest score, where every curve is at 1: the candidate holding that
    # score started at (n-1)/n, as if some of its runs scored below every threshold (tester A7)
    # and ends as far right of the highest, where every curve is at 0: the drop of the candidate holding it was
    # drawn on the axis' right edge, where it did not show (an outside tester's find)
    margin = 0.03 * ((grid.max() - grid.min()) or max(abs(grid.min()), 1.0)) if len(grid) else 0.0
    before, after = (grid.min() - margin, grid.max() + margin) if len(grid) else (0.0, 0.0)
    for candidate in comparison.info["candidates"]:
        rows = comparison.profiles[comparison.profiles["candidate"] == candidate]
        if rows.empty:
            continue
        own = scores[scores["candidate"] == candidate]
        per_task = [
            values[np.isfinite(values)] for values in (g["score"].to_numpy(float) for _, g in own.groupby("task"))
        ]
        # a step function, drawn as one: the table's grid of taus would slope its drops and skip the levels
        # between two grid points, so it is drawn at every run's score too
        taus = np.union1d(rows["tau"].to_numpy(float), np.concatenate(per_task))
        taus = np.concatenate([[before], taus[(taus >= rows["tau"].min()) & (taus <= rows["tau"].max())], [after]])
        ax.plot(
            taus,
            cs.profile(per_task, taus),
            drawstyle="steps-post",
            color=colors[candidate],
            linewidth=1.8,
            label=f"{candidate} (n={runs[candidate]})",
        )
        ax.fill_between(
            rows["tau"],
            rows["fraction_lo"],
            rows["fraction_hi"],
            step="post",
            color=colors[candidate],
            alpha=0.2,
            linewidth=0,
        )
    ax.legend(frameon=False, fontsize=8, loc="lower left")  # the curves fall from the upper left: this corner is free
    _style(ax)
    if len(grid):
        ax.set_xlim(before, after)
    ax.set_xlabel(f"{_score_label(comparison)} threshold \u03c4", fontsize=9)
    ax.set_ylabel("Fraction of runs with score > \u03c4", fontsize=9)
    ax.set_ylim(-0.02, 1.02)
    _title(fig, describe(comparison))
    return fig


def plot_sample_efficiency(comparison: Comparison, colors: Mapping[Any, Any] | None = None) -> Figure:
    """The metric across runs against env steps, with pointwise bands, on a grid common to all candidates."""
    fig = Figure(figsize=(5.5, 3.6), layout="constrained")
    ax = fig.add_subplot()
    frame = comparison.curves
    end_labels = _lines(ax, frame, "global_step", "value", comparison, colors)
    if not frame.empty:
        # the y axis plot_learning_curves gives the same runs: cut to the end of training, or symlog, when early
        # values would flatten it (U17: CliffWalking's -95,000 drew IQMs of -78 and -54 as one line at 0)
        lo, hi = ("value_lo", "value_hi") if "value_lo" in frame else ("lo", "hi")
        bands = pd.DataFrame({"value": frame["value"], "lo": frame[lo], "hi": frame[hi]})
        final = comparison.scores["score"].to_numpy(float)  # what the table reports: the end of training
        note = set_y_axis(ax, bands, final[np.isfinite(final)], "auto", "auto", options=False)
        lines_under = notes_under_axes(ax, [note] if note else [])
        if lines_under:  # the figure grows by the note, so that the axes keep their height
            fig.set_figheight(fig.get_figheight() + lines_under * 7 * 1.25 / 72)
    spread_end_labels(ax, end_labels)
    ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    ax.set_xlabel("Environment steps", fontsize=9)
    what = (
        "evaluation return"
        if comparison.options.source == "eval"
        else f"return, trailing mean of {comparison.options.last_k} episodes"
    )
    if comparison.info["normalization"]:
        what = "normalised " + what
    ax.set_ylabel(f"{STAT_LABELS[comparison.options.metric]} of {what}", fontsize=9)
    _title(fig, describe(comparison) + "; runs never extrapolated: thin where fewer runs have data")
    return fig
