"""The y axis of the learning curves: a range that stays readable when early returns are extreme, or symlog.

See :func:`online_trainer.analysis.plotting.plot_learning_curves` (``ylim``, ``yscale``).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, SymmetricalLogLocator

from online_trainer.analysis.selection import ident_columns, select_runs

YLim: TypeAlias = Literal["auto"] | tuple[float, float] | None
YSCALES = ("auto", "linear", "symlog")
#: ``ylim="auto"`` cuts the y axis when the curves span more than this many times the
#: scale of the returns of the last half of training (see :func:`robust_ylim`).
EXTREME_FACTOR = 10.0
#: With ``yscale="auto"``, a linear axis cut to the end of training may hide at most this
#: share of the curve points; beyond it the axis is symlog.
MAX_HIDDEN = 0.5

__all__ = ["EXTREME_FACTOR", "MAX_HIDDEN", "YSCALES", "check_axis_options", "late_returns", "robust_ylim", "set_y_axis"]


def robust_ylim(
    plotted: np.ndarray, late_returns: np.ndarray, factor: float = EXTREME_FACTOR
) -> tuple[float, float] | None:
    """y limits that keep the end of training readable when early values are extreme.

    The *core* is the 5th to 95th percentile of ``late_returns`` (the returns of the
    last half of each run's episodes); its *scale* is the larger of its width and its
    largest absolute value. When the plotted values span at most ``factor`` times that
    scale, nothing is cut (None). Otherwise each side that reaches beyond one scale past
    the core is cut there: on CliffWalking, early returns of -120k would otherwise
    flatten a converged -30 to a line at 0.

    Args:
        plotted: Everything drawn (curve values and CI bounds), any shape, NaN ignored.
        late_returns: Returns of the last half of each run's episodes.
        factor: How many times the core's scale the plotted values may span before a cut.

    Returns:
        ``(low, high)`` limits, or None when the full range is fine.
    """
    plotted, late = np.asarray(plotted, dtype=float), np.asarray(late_returns, dtype=float)
    plotted, late = plotted[np.isfinite(plotted)], late[np.isfinite(late)]
    if plotted.size == 0 or late.size == 0:
        return None
    a, b = np.percentile(late, [5, 95])
    scale = max(b - a, abs(a), abs(b))
    low, high = plotted.min(), plotted.max()
    if scale <= 0 or high - low <= factor * scale:
        return None
    low, high = max(low, a - scale), min(high, b + scale)
    pad = 0.05 * (high - low)
    return low - pad, high + pad


def late_returns(df: pd.DataFrame, include_unfinished: bool) -> np.ndarray:
    """The finite returns of the last half of each analysed run's episodes."""
    data, _ = select_runs(df, include_unfinished, log=False)
    ident = ident_columns(data)
    order = data.sort_values([*ident, "episode_index"] if "episode_index" in data else ident, kind="stable")
    position = order.groupby(ident, dropna=False).cumcount(ascending=False)
    size = order.groupby(ident, dropna=False)["ep_return"].transform("size")
    returns = order["ep_return"].to_numpy(dtype=float)[(position < (size + 1) // 2).to_numpy()]
    return returns[np.isfinite(returns)]


def check_axis_options(ylim: YLim, yscale: str) -> None:
    if yscale not in YSCALES:
        raise ValueError(f"yscale must be one of {YSCALES}, got yscale={yscale!r}.")
    if ylim is None or (isinstance(ylim, str) and ylim == "auto"):
        return
    try:
        low, high = (float(v) for v in ylim)
    except (TypeError, ValueError):
        raise ValueError(f"ylim must be 'auto', None or a pair (low, high), got ylim={ylim!r}.") from None
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
        raise ValueError(f"ylim must be finite with low < high, got ylim={ylim!r}.")


def _symlog(ax: Axes, values: np.ndarray, late: np.ndarray) -> float:
    """A symlog y axis, linear within the magnitude of the late returns, fitted to ``values``; its linthresh."""
    magnitude = np.percentile(np.abs(late), 95) if late.size else np.nanmax(np.abs(values))
    linthresh = 10.0 ** np.floor(np.log10(max(magnitude, 1e-12)))
    ax.set_yscale("symlog", linthresh=linthresh)
    finite = values[np.isfinite(values)]
    if finite.size:
        transform = ax.yaxis.get_transform()
        # reach 0 when the values end within the linear part, so that it has a labelled tick
        low = 0.0 if 0 < finite.min() < linthresh else finite.min()
        high = 0.0 if -linthresh < finite.max() < 0 else finite.max()
        low, high = transform.transform([low, high])
        pad = 0.05 * (high - low) if high > low else 0.5
        ax.set_ylim(*transform.inverted().transform([low - pad, high + pad]))
    # ticks at 0, ±linthresh / 2 and every decade beyond; a grid line at each
    ax.yaxis.set_major_locator(_SymlogTicks(linthresh))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _symlog_label(v, linthresh)))
    return linthresh


def _symlog_label(value: float, linthresh: float) -> str:
    """``-10^3`` for a decade beyond the linear part (``2×10^2`` between decades, as the ticks of
    :class:`_SymlogTicks` are: one notation on the side), the plain number inside it."""
    if abs(value) >= linthresh and value != 0:
        power = int(np.floor(np.log10(abs(value)) + 1e-9))
        mantissa = abs(value) / 10.0**power
        sign = "-" if value < 0 else ""
        if np.isclose(mantissa, 1.0):
            return f"${sign}10^{{{power}}}$"
        if np.isclose(mantissa, round(mantissa)):
            return f"${sign}{int(round(mantissa))}\\times10^{{{power}}}$"
    return f"{value:g}"


class _SymlogTicks(SymmetricalLogLocator):
    """Decade ticks of a symlog axis plus ``±linthresh / 2`` inside its linear part, and ``2·10^k`` and ``5·10^k``
    beyond it on a side whose only decade tick is linthresh (returns up to 500 with a linear
    part within ±100 had no label above 10^2)."""

    def __init__(self, linthresh: float) -> None:
        super().__init__(linthresh=linthresh, base=10)
        self.linthresh, self.half = linthresh, linthresh / 2

    # matplotlib's stub says Sequence[float]; its own locators return arrays, as this one does
    def tick_values(self, vmin: float, vmax: float) -> np.ndarray:  # type: ignore[override]
        low, high = min(vmin, vmax), max(vmin, vmax)
        ticks = [np.asarray(super().tick_values(vmin, vmax)), np.array([-self.half, self.half])]
        for sign, reach in ((1.0, high), (-1.0, -low)):
            if reach <= self.linthresh:
                continue
            decades = np.arange(np.floor(np.log10(self.linthresh)), np.floor(np.log10(reach)) + 1)
            if len(decades) == 1:  # one decade tick on this side: too few to read it by
                ticks.append(sign * np.outer([2.0, 5.0], 10.0**decades).ravel())
        every = np.concatenate(ticks)
        return np.unique(every[(every >= low) & (every <= high)])


def set_y_axis(
    ax: Axes, table: pd.DataFrame, late: np.ndarray, ylim: YLim, yscale: str, options: bool = True
) -> str | None:
    """Apply ``ylim`` and ``yscale``; the note to write when the axis hides part of the curves or is symlog by choice.

    ``options``: the note says how ``ylim`` and ``yscale`` choose otherwise (False for a figure that takes none).
    """
    values = table[["value", "lo", "hi"]].to_numpy(dtype=float)
    if ylim is not None and ylim != "auto":
        if yscale == "symlog":
            _symlog(ax, values, late)
        ax.set_ylim(*(float(v) for v in ylim))
        return None
    if yscale == "symlog":
        _symlog(ax, values, late)
        return None
    if ylim is None:
        return None
    limits = robust_ylim(values, late)
    if limits is None:
        return None
    curve = table["value"].to_numpy(dtype=float)
    hidden = float(np.mean(np.isfinite(curve) & ((curve < limits[0]) | (curve > limits[1]))))
    if yscale == "auto" and hidden > MAX_HIDDEN:
        linthresh = _symlog(ax, values, late)
        return (
            f"y axis symlog (linear within ±{linthresh:g}): the curves span {np.nanmin(values):.4g} to "
            f"{np.nanmax(values):.4g}, and a linear axis fitted to the end of training would hide "
            f"{hidden:.0%} of their points" + (" (set yscale or ylim to choose)." if options else ".")
        )
    ax.set_ylim(*limits)
    return f"y axis cut to [{limits[0]:.4g}, {limits[1]:.4g}], the range of the end of training: {hidden:.0%} " + (
        "of the curve points lie outside (set ylim, or yscale='symlog', to see them)."
        if options
        else "of the curve points lie outside."
    )
