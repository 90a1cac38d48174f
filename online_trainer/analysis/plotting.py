"""Figures fit for a paper draft: learning curves and final performance with bootstrap CIs.

The functions build a :class:`matplotlib.figure.Figure` directly (or draw into the ``ax``
they are given) and never touch ``pyplot``'s state or the global backend: a figure is
not registered with ``pyplot``, so it does not leak memory in loops and is not shown
twice in notebooks (it is displayed once, as the value of the cell). Save one with
``fig.savefig("curves.pdf")``.

The statistics come from :mod:`online_trainer.analysis.stats` and :mod:`online_trainer.analysis.curves`:
see there for the IQM, the percentile stratified bootstrap, the grid of the learning
curves, which runs are left out and how NaN returns are handled. What a figure leaves
out is written on it: runs left out for their status, runs without a finished episode,
a y axis cut short; thin stretches of a curve stand on fewer runs than the legend counts.
"""

from __future__ import annotations

import logging
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import is_color_like
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation
from matplotlib.ticker import EngFormatter

from online_trainer.analysis.bootstrap import Seed, stat_fn
from online_trainer.analysis.curves import curves
from online_trainer.analysis.scores import SCORE_ATTR, score_table, unread_raw_note
from online_trainer.analysis.selection import GroupBy, group_and_strata, groups, select_runs
from online_trainer.analysis.stats import aggregate, final_performance
from online_trainer.analysis.yaxis import YLim, check_axis_options, late_returns, robust_ylim, set_y_axis
from online_trainer.options.validation import suggests_keywords

logger = logging.getLogger(__name__)

Data: TypeAlias = pd.DataFrame | str | os.PathLike | Sequence[str | os.PathLike]

__all__ = ["plot_final_performance", "plot_learning_curves", "robust_ylim"]

X_LABELS = {"global_step": "Environment steps", "episode_index": "Episodes", "wall_time": "Wall-clock time (s)"}
STAT_LABELS = {"iqm": "IQM", "mean": "mean", "median": "median"}
# Okabe & Ito's palette, distinguishable with every common colour-vision deficiency.
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")


def _load(data: Data) -> pd.DataFrame:
    """The episode table: ``data`` itself, or the experiment directories it names, loaded."""
    if isinstance(data, pd.DataFrame):
        return data
    if isinstance(data, (str, os.PathLike)) or (
        isinstance(data, Sequence) and data and all(isinstance(d, (str, os.PathLike)) for d in data)
    ):
        from online_trainer.analysis.dataframes import load_episodes

        return load_episodes(data)
    raise TypeError(
        "data must be a DataFrame of episodes, an experiment directory or a list of them, "
        f"got {type(data).__name__}: {data!r:.80}."
    )


def directory_label(data: Any) -> str | None:
    """The label one experiment directory has among others (its name: a sweep's ``lr=0.01``), when ``data`` is one
    directory, whose table then has no ``experiment`` column: the name ``colors=`` may give its runs (V19)."""
    return Path(data).resolve().name if isinstance(data, (str, os.PathLike)) else None


def _figure_of(ax: Axes) -> Figure:
    """The figure ``ax`` is drawn in (the top-level one when ``ax`` is in a subfigure)."""
    if not isinstance(ax, Axes):  # M22: ax="ax" raised "'str' object has no attribute 'get_figure'"
        raise TypeError(
            f"ax must be a matplotlib Axes to draw in (fig, ax = plt.subplots()), or None for a new figure, but got "
            f"ax={ax!r}."
        )
    fig = ax.get_figure(root=True)
    if fig is None:
        raise ValueError(f"ax must belong to a figure (e.g. made by fig.add_subplot()), but ax={ax!r} has none.")
    return fig


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return _figure_of(ax), ax
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _style(ax: Axes) -> None:
    """No top/right spines, a light grid behind the data, readable tick labels."""
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(True, color="0.85", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.tick_params(labelsize=9, length=3)


def group_colors(
    names: Sequence[Any],
    colors: Mapping[Any, Any] | None,
    what: str = "group",
    aliases: Sequence[Any] | None = None,
) -> list[Any]:
    """The colour of each of ``names`` (in sorted order): ``colors[name]`` (or ``colors[alias]``, its other name: a
    sweep's ``lr=0.001`` for the group of ``group_by="lr"`` valued 0.001, and the other way round) where given, else
    the palette's colour of its place, so that a group keeps its colour from figure to figure only as long as the same
    groups are drawn.

    Raises:
        ValueError: ``colors`` is not a mapping, names a group not drawn, or holds what matplotlib takes for no colour.
    """
    aliases = list(aliases) if aliases is not None else [None] * len(names)
    palette = [COLORS[i % len(COLORS)] for i in range(len(names))]
    if colors is None:
        return palette
    if not isinstance(colors, Mapping):
        raise ValueError(
            f"colors={colors!r}: give a dict from each {what} to a matplotlib colour, e.g. "
            f"colors={{{names[0] if names else 'name'!r}: 'tab:blue'}}."
        )
    drawn = list(names)
    known = [*drawn, *(alias for alias in aliases if alias is not None)]
    unknown = [key for key in colors if key not in known]
    if unknown:
        raise ValueError(
            f"colors names {', '.join(map(repr, unknown))}, not a {what} of the data: its {what}s are "
            f"{', '.join(_with_alias(name, alias) for name, alias in zip(drawn, aliases))} (a group of several columns "
            "is a tuple of their values, in their order)."
        )
    bad = {key: value for key, value in colors.items() if not is_color_like(value)}
    if bad:
        raise ValueError(
            f"colors has {bad!r}: not a colour matplotlib knows; use a name ('tab:blue'), a hex string ('#0072B2') "
            "or an RGB tuple of values from 0 to 1."
        )
    return [
        colors.get(name, colors.get(alias, default) if alias is not None else default)
        for name, alias, default in zip(drawn, aliases, palette)
    ]


def _with_alias(name: Any, alias: Any) -> str:
    if name is None:  # no group column: every run pooled in one
        return f"{alias!r}" if alias is not None else "None (every run pooled: give colors={None: ...})"
    return repr(name) if alias is None or alias == name else f"{name!r} (or {alias!r})"


def _palette(groups_drawn: Sequence[dict], colors: Mapping[Any, Any] | None, data: Any) -> list[Any]:
    """The colours of the groups of a figure (their keys, in sorted order), as :func:`group_colors` gives them; the one
    group of a single directory's runs is named by the directory too."""
    pooled = directory_label(data)
    return group_colors(
        [group_name(keys) for keys in groups_drawn],
        colors,
        aliases=[group_label(keys) or (pooled if not keys else None) for keys in groups_drawn],
    )


def group_label(keys: dict) -> str | None:
    """The group's name as its legend writes it (``lr=0.001``, an experiment's label): the other key of ``colors=``."""
    return _label(keys, 0).rpartition(" (")[0] or None


def group_name(keys: dict) -> Any:
    """The key of a group in ``colors=``: its value for one group column, the tuple of its values for several, and
    None for the one group of everything pooled."""
    values = tuple(keys.values())
    return values[0] if len(values) == 1 else values if values else None


def _runs(n: int) -> str:
    return f"{n} run{'' if n == 1 else 's'}"


def _label(keys: dict, num_runs: int, missing: int = 0) -> str:
    """``"lr=0.001 (5 runs)"``; an experiment is named by its label alone."""
    name = ", ".join(
        str(v) if k == "experiment" else f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in keys.items()
    )
    runs = _runs(num_runs) + (f"; {missing} without a return" if missing else "")
    return f"{name} ({runs})" if name else runs


def _rows_of(df: pd.DataFrame, keys: dict) -> pd.DataFrame:
    """The rows of ``df`` in the group ``keys`` (a NaN key matches NaN)."""
    mask = np.ones(len(df), dtype=bool)
    for col, value in keys.items():
        mask &= (df[col] == value).to_numpy() | (df[col].isna().to_numpy() & pd.isna(value))
    return df[mask]


def _stat_text(stat: str, ci: float | None) -> str:
    return STAT_LABELS[stat] if ci is None else f"{STAT_LABELS[stat]}, {ci * 100:g}% CI"


def y_label(stat: str, ci: float | None, smooth: int | None, what: str = "Episode return") -> str:
    """``"Episode return (IQM, 95% CI)"``, with the smoothing window on a first line when there is one."""
    if smooth is not None and smooth > 1:
        return f"{what}, mean of last {smooth} episodes\n({_stat_text(stat, ci)} across runs)"
    return f"{what} ({_stat_text(stat, ci)})"


def _excluded_note(excluded: Sequence[dict]) -> str | None:
    """``Left out: 2 runs that did not finish (1 failed, 1 interrupted)``, and which they are when the runs are of
    several experiments (V15: a two-experiment report did not say whose they were)."""
    if not excluded:
        return None
    statuses = pd.Series([str(r.get("status")) for r in excluded]).value_counts()
    counts = ", ".join(f"{n} {status}" for status, n in statuses.items())
    named = ""
    if any("experiment" in r for r in excluded):
        names = [f"{r.get('experiment')} run {r.get('run')}" for r in excluded[:4]]
        named = f": {', '.join(names)}{', ...' if len(excluded) > 4 else ''}"
    return f"Left out: {_runs(len(excluded))} that did not finish ({counts}){named}."


@suggests_keywords
def plot_learning_curves(
    data: Data,
    x: str = "global_step",
    *,
    stat: str = "iqm",
    ci: float | None = 0.95,
    group_by: GroupBy = None,
    num_points: int = 100,
    grid: Sequence[float] | Literal["observed"] | None = None,
    span: Literal["all", "common"] = "all",
    smooth: int | None = None,
    ylim: YLim = "auto",
    yscale: str = "auto",
    include_unfinished: bool = False,
    ax: Axes | None = None,
    title: str | None = None,
    n_resamples: int = 2_000,
    seed: Seed = 0,
    notes: str | Sequence[str] = (),
    score: str | None = None,
    colors: Mapping[Any, Any] | None = None,
) -> Figure:
    """One line per group, the statistic across runs, with a shaded pointwise CI band.

    A curve is drawn thick where every run of its group (the number in the legend) has
    data and thin where fewer do (runs end, or start, at different x); where its last
    point stands on fewer runs, that number is written at its end (``n=2``). Runs are
    never extrapolated. Notes under the axes say which runs were left out and whether
    the y axis was cut.

    Args:
        data: Episode table (see :mod:`online_trainer.analysis.stats`), or an experiment directory
            or a list of them, loaded with :func:`online_trainer.analysis.dataframes.load_episodes`.
        x: The x column: ``"global_step"`` (environment steps), ``"episode_index"`` or any
            numeric column.
        stat: ``"iqm"``, ``"mean"`` or ``"median"`` across runs.
        ci: Confidence level of the band; ``None`` draws no band.
        group_by: Columns that separate configurations; by default ``experiment`` when
            present. ``[]`` pools every run into one curve.
        num_points: Number of points of each curve's grid.
        grid: Explicit x values shared by every curve, or ``"observed"`` (each curve at the x
            values its runs have, nothing interpolated; see :func:`~online_trainer.analysis.curves.curves`).
        span: ``"all"`` (default): each curve covers the whole x range some run of its
            group covers; ``"common"``: only the range all its runs cover.
        smooth: Trailing moving average over this many episodes of each run, before the
            runs are aggregated (written in the y label and the legend's title).
        ylim: ``"auto"`` (default): the full range, unless early values are extreme
            (see :func:`robust_ylim`), then cut with a note; ``None``: matplotlib's
            range of everything drawn; ``(low, high)``: those limits.
        yscale: ``"auto"`` (default): linear, unless the ``"auto"`` y range would hide
            more than half of the curve points, then symlog (with a note); ``"linear"``;
            or ``"symlog"`` (linear within the magnitude of the returns of the last half
            of training, logarithmic beyond; nothing is cut with ``ylim="auto"``).
        include_unfinished: Draw failed, interrupted and pending runs too (left out by
            default, with a logged warning and a note on the figure).
        ax: Axes to draw into; by default a new figure is made.
        title: Title of the axes.
        n_resamples: Number of bootstrap resamples.
        seed: Seed of the bootstrap (the same seed draws the same band).
        notes: More lines for under the axes, after the figure's own (say what the data
            leaves out that the figure cannot know); a str is one line.
        score: ``"return"`` (the sums of the rewards the agent learned from) or ``"raw"`` (the env's raw
            scores, recorded by a ``RecordEpisodeStatistics`` in its wrappers); None: ``df.attrs["score"]``, as
            :func:`~online_trainer.analysis.curves.curves` (see :mod:`online_trainer.analysis.scores`).
        colors: A colour for some groups, by the group's name: an experiment's label (a sweep's configuration,
            ``"lr=0.001"``), the value of a one-column ``group_by``, the tuple of the values of several. The
            others take the palette's colour of their place in sorted order, which changes with the groups drawn:
            give every group its colour to keep it from figure to figure.

    Returns:
        The figure (the one holding ``ax`` when given).

    Raises:
        ValueError: ``x`` or a ``group_by`` column is not in the data, ``colors`` names a group not drawn or
            holds no colour, or an argument is invalid (see :func:`online_trainer.analysis.curves.curves`).
    """
    stat_fn(stat)
    check_axis_options(ylim, yscale)
    df = score_table(_load(data), score)  # the y axis is fitted to the returns the curves read
    table = curves(
        df,
        x,
        num_points=num_points,
        grid=grid,
        span=span,
        group_by=group_by,
        stat=stat,
        ci=ci,
        smooth=smooth,
        n_resamples=n_resamples,
        seed=seed,
        include_unfinished=include_unfinished,
        score=df.attrs.get(SCORE_ATTR, "return"),
    )
    group_cols = [c for c in table.columns if c not in (x, "value", "lo", "hi", "num_runs", "total_runs")]
    made = ax is None
    fig, ax = _axes(ax, (5.5, 3.6))
    lines: list[tuple[float, int, Line2D]] = []  # (last value, order, line) of each curve
    thin, end_labels = 0.0, False
    labels: list[Annotation] = []
    drawn = list(groups(table, group_cols))
    palette = _palette([keys for keys, _ in drawn], colors, data)
    for i, ((keys, curve), color) in enumerate(zip(drawn, palette)):
        stretch, labelled = _draw_curve(ax, curve, x, keys, color, ci, lines, i, labels)
        thin, end_labels = max(thin, stretch), end_labels or labelled
    ax.set_xlabel(X_LABELS.get(x, x), fontsize=10)
    raw = df.attrs.get(SCORE_ATTR) == "raw"
    ax.set_ylabel(y_label(stat, ci, smooth, "Episode raw score" if raw else "Episode return"), fontsize=10)
    if x == "global_step":
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    low, high = table[x].min(), table[x].max()
    if high > low:  # else a single x: matplotlib's own margins
        ax.set_xlim(0 if 0 <= low <= 0.05 * high else low, high)
    late = late_returns(df, include_unfinished)
    under: list[str | None] = [
        set_y_axis(ax, table, late, ylim, yscale),
        _excluded_note(table.attrs.get("excluded", [])),
        f"Not drawn: {_runs(table.attrs['no_episode'])} without a finished episode."
        if table.attrs.get("no_episode")
        else None,
        unread_raw_note(df),
        *([notes] if isinstance(notes, str) else notes),  # M22: a str was drawn a character a line
    ]
    _style(ax)
    spread_end_labels(ax, labels)
    # Legend entries top to bottom in the order of the curves' last values.
    handles = [line for *_, line in sorted(lines, key=lambda t: (-t[0], t[1]))]
    # named when a thin stretch shows: the first grid point, before the other runs' first episodes end, is thin
    # too, and a legend entry for what no one can see was taken for a mistake (an outside tester's find)
    if thin > 0.03 * (high - low):
        handles.append(Line2D([], [], color="0.35", linewidth=0.9, label="thin: fewer runs have data"))
    legend_title = f"each run: trailing mean of {smooth} episodes" if smooth is not None and smooth > 1 else None
    lines_under = notes_under_axes(ax, [n for n in under if n])
    if made and lines_under:  # the figure grows by the notes, so that the axes (and their label) keep their height
        fig.set_figheight(fig.get_figheight() + lines_under * 7 * 1.25 / 72)
    legend = {"handles": handles, "frameon": False, "fontsize": 9, "title": legend_title, "title_fontsize": 8}
    if made:  # beside the axes, where no curve or end label runs (inside them, "best" sat on a curve's tail)
        # 8-point title characters are about 0.9 of a 9-point label's (0.8 cut the title's last letter, X14)
        longest = max([len(str(h.get_label())) for h in handles] + [0.9 * len(legend_title or "")])
        gap = 0.35 if end_labels else 0.0  # inches: the "n=3" labels past the axes' right edge keep their room
        axes_width = ax.get_position().width * fig.get_figwidth()
        fig.set_figwidth(
            fig.get_figwidth() + 0.4 + gap + 0.07 * longest
        )  # 9-point characters; the axes keep their width
        ax.legend(loc="upper left", bbox_to_anchor=(1.02 + gap / axes_width, 1.0), borderaxespad=0, **legend)
    else:  # the caller's axes, maybe one of several: the legend stays inside them
        ax.legend(**legend)
    if title:
        ax.set_title(title, fontsize=11)
    return fig


def _draw_curve(
    ax: Axes,
    curve: pd.DataFrame,
    x: str,
    keys: dict,
    color: str,
    ci: float | None,
    lines: list[tuple[float, int, Line2D]],
    order: int,
    end_labels: list[Annotation],
) -> tuple[float, bool]:
    """Draw one group's curve; return the length along x of its thin stretches (standing on fewer runs than the
    group has), and whether its end has an ``n=`` label (its last point stands on fewer; added to ``end_labels``)."""
    total = int(curve["total_runs"].iloc[0])
    full = curve["num_runs"].to_numpy() == total
    xs, ys = curve[x].to_numpy(dtype=float), curve["value"].to_numpy(dtype=float)
    label = _label(keys, total)
    if full.all():
        (line,) = ax.plot(xs, ys, color=color, linewidth=1.8, zorder=3, label=label)
    else:
        ax.plot(xs, ys, color=color, linewidth=0.9, zorder=3)
        (line,) = ax.plot(xs, np.where(full, ys, np.nan), color=color, linewidth=1.8, zorder=3, label=label)
    if ci is not None:
        ax.fill_between(xs, curve["lo"], curve["hi"], color=color, alpha=0.2, linewidth=0, zorder=2)
        if len(xs) == 1:  # a band of one point has no width: its interval as a bar (one evaluation: H12)
            ax.plot([xs[0], xs[0]], [curve["lo"].iloc[0], curve["hi"].iloc[0]], color=color, alpha=0.45, linewidth=5)
    last = np.flatnonzero(np.isfinite(ys))
    labelled = bool(len(last)) and not full[last[-1]]
    if labelled:
        end_labels.append(
            ax.annotate(
                f"n={int(curve['num_runs'].iloc[last[-1]])}",
                (xs[last[-1]], ys[last[-1]]),
                xytext=(3, 0),
                textcoords="offset points",
                fontsize=7,
                color=color,
                va="center",
                annotation_clip=False,
            )
        )
    lines.append((ys[last[-1]] if len(last) else -np.inf, order, line))
    thin = ~(full[:-1] & full[1:])  # the segments drawn thin: one of their ends stands on fewer runs
    return float(np.diff(xs)[thin].sum()), labelled


def spread_end_labels(ax: Axes, labels: Sequence[Annotation], gap: float = 9.0, reach: float = 40.0) -> None:
    """Move the ``n=`` labels at the ends of curves apart, upwards, so that no two touch.

    Labels whose points are within ``reach`` points of each other across and ``gap`` points
    up or down (curves that end close together) are set ``gap`` points apart, in the order of
    their points, bottom up. Call it once the axes' limits are set.
    """
    if len(labels) < 2:
        return
    ax.get_xlim(), ax.get_ylim()  # autoscaled limits are computed when read: transData must use them
    to_points = 72 / _figure_of(ax).dpi
    at = sorted(((*(ax.transData.transform(label.xy) * to_points), label) for label in labels), key=lambda p: p[1])
    placed: list[tuple[float, float]] = []
    for x, y, label in at:
        shifted = y
        for px, py in sorted(placed, key=lambda p: p[1]):
            if abs(px - x) < reach and abs(shifted - py) < gap:
                shifted = py + gap
        placed.append((x, shifted))
        label.xyann = (label.xyann[0], label.xyann[1] + shifted - y)


def notes_under_axes(ax: Axes, notes: list[str], from_figure_edge: bool = False) -> int:
    """Small grey lines of text under the axes (inside the figure's constrained layout), wrapped to its width;
    return how many lines.

    ``from_figure_edge``: the lines start at the figure's left edge, not the axes' (whose left edge long tick
    labels push right: lines as wide as the figure ran past its right edge).
    """
    if not notes:
        return 0
    width = max(40, int((_figure_of(ax).get_figwidth() - 0.9) * 72 / 4.4))  # 7-point characters
    text = "\n".join(textwrap.fill(note, width) for note in notes)
    ax.annotate(
        text,
        xy=(0.02, 0) if from_figure_edge else (0, 0),
        xycoords=("figure fraction", "axes fraction") if from_figure_edge else "axes fraction",
        xytext=(0, -30),
        textcoords="offset points",
        va="top",
        ha="left",
        fontsize=7,
        color="0.3",
    )
    return text.count("\n") + 1


@suggests_keywords
def plot_final_performance(
    data: Data,
    *,
    stat: str = "iqm",
    last_k: int | None = None,
    after_step: float | None = None,
    group_by: GroupBy = None,
    strata: GroupBy = None,
    ci: float | None = 0.95,
    show_runs: bool = True,
    include_unfinished: bool = False,
    ax: Axes | None = None,
    title: str | None = None,
    n_resamples: int = 10_000,
    seed: Seed = 0,
    colors: Mapping[Any, Any] | None = None,
) -> Figure:
    """One row per group: the statistic of the runs' final returns with its CI.

    Experiments (the default grouping; a sweep's configurations) are drawn best first, as a sweep ranks them;
    the groups of ``group_by`` in their sorted order (``lr`` from the lowest).

    The final return of a run is the mean return of its last ``last_k`` episodes, or of
    the episodes that ended after ``after_step`` (see
    :func:`online_trainer.analysis.stats.final_performance`).

    Args:
        data: Episode table, or an experiment directory or a list of them.
        stat: ``"iqm"``, ``"mean"`` or ``"median"`` across runs.
        last_k: Episodes averaged per run (10 when neither this nor ``after_step`` is set).
        after_step: Average the episodes that ended after this step instead.
        group_by: Columns that separate configurations (default: ``experiment``).
        strata: Columns of strata resampled independently (see
            :func:`online_trainer.analysis.stats.aggregate`).
        ci: Confidence level of the intervals; ``None`` draws none.
        show_runs: Draw each run's final return as a faint dot.
        include_unfinished: Include failed, interrupted and pending runs (left out by
            default, with a logged warning and a note on the figure).
        ax: Axes to draw into; by default a new figure is made.
        title: Title of the axes.
        n_resamples: Number of bootstrap resamples.
        seed: Seed of the bootstrap.
        colors: A colour for some groups, by the group's name, as in :func:`plot_learning_curves`.

    Returns:
        The figure (the one holding ``ax`` when given).
    """
    stat_fn(stat)
    df = _load(data)
    group_cols, strata_cols = group_and_strata(df, group_by, strata)
    kept, excluded = select_runs(df, include_unfinished)
    finals = final_performance(kept, last_k, after_step, group_by=group_cols + strata_cols, include_unfinished=True)
    summary = aggregate(
        finals, group_by=group_cols, strata=strata_cols or None, ci=ci, n_resamples=n_resamples, seed=seed
    )
    made = ax is None
    fig, ax = _axes(ax, (5.0, 1.0 + 0.45 * len(summary)))
    rng = np.random.default_rng(0)
    labels = []
    rows = list(groups(summary, group_cols))
    # each group's colour is its learning curve's (the groups in sorted order), whatever the order drawn (R11)
    palette = _palette([keys for keys, _ in rows], colors, data)
    if group_by is None:  # experiments, or a sweep's configurations: best first, as a sweep ranks them
        order = sorted(range(len(rows)), key=lambda i: -np.nan_to_num(float(rows[i][1][stat].iloc[0]), nan=-np.inf))
        rows, palette = [rows[i] for i in order], [palette[i] for i in order]
    for i, ((keys, row), color) in enumerate(zip(rows, palette)):
        y = len(summary) - 1 - i
        if show_runs:
            values = _rows_of(finals, keys)["final_return"].dropna()
            ax.scatter(values, y + rng.uniform(-0.15, 0.15, len(values)), s=10, color=color, alpha=0.35, linewidths=0)
        est, lo, hi = row[stat].iloc[0], row[f"{stat}_lo"].iloc[0], row[f"{stat}_hi"].iloc[0]
        if ci is not None and np.isfinite(lo):
            ax.plot([lo, hi], [y, y], color=color, linewidth=5, alpha=0.45, solid_capstyle="butt")
        ax.plot([est], [y], marker="o", markersize=6, color=color, markeredgecolor="white", linestyle="none")
        labels.append((y, _label(keys, int(row["num_runs"].iloc[0]), int(row["num_missing"].iloc[0]))))
    ax.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize=9)
    ax.set_ylim(-0.6, len(summary) - 0.4)
    window = f"after step {after_step:,g}" if after_step is not None else f"of the last {last_k or 10} episodes"
    xlabel = f"Return {window} ({_stat_text(stat, ci)})"
    ax.set_xlabel(xlabel, fontsize=10)
    ax.margins(x=0.06)  # the dots of runs at the extremes stay whole
    if made:  # wide enough for the group labels beside an axes as wide as its label (about 0.07 in a character)
        longest = max((len(text) for _, text in labels), default=0)
        fig.set_size_inches(max(5.0, 0.07 * longest + 0.08 * len(xlabel) + 0.5), fig.get_figheight())
    _style(ax)
    ax.grid(False, axis="y")
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)
    key = f"Solid dot: the {STAT_LABELS[stat]} across runs" + ("" if ci is None else f"; bar: its {ci * 100:g}% CI")
    key += "; faint dots: each run's final return." if show_runs else "."
    notes_under_axes(ax, [n for n in [key, _excluded_note(excluded.to_dict("records"))] if n], from_figure_edge=made)
    if title:
        ax.set_title(title, fontsize=11)
    return fig
