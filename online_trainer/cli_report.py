"""``online-trainer show`` and ``report``: final-performance tables and learning curves of experiments on disk."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import yaml

from online_trainer.dataframes import experiment_dirs, load_episodes
from online_trainer.experiment_config import ConfigError
from online_trainer.plotting import plot_learning_curves
from online_trainer.stats import aggregate, final_performance

CI = 0.95
"""Confidence level of every interval the CLI prints."""
DEFAULT_LAST_K = 10
CURVES_FILE = "learning_curves.png"
SUMMARY_FILE = "summary.md"
STATS = (("mean", "mean"), ("median", "median"), ("iqm", "IQM"))
"""Columns of :func:`online_trainer.stats.aggregate` shown, with their labels."""


def _num(value: float) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2f}"


def _ci(row: dict, stat: str) -> str:
    lo, hi = row[f"{stat}_lo"], row[f"{stat}_hi"]
    return "n/a" if math.isnan(lo) else f"[{_num(lo)}, {_num(hi)}]"


def _render(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Plain-text table, columns padded to their widest cell."""
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    lines = []
    for cells in [headers, *rows]:
        padded = [str(c).rjust(w) if r else str(c).ljust(w) for c, w, r in zip(cells, widths, right)]
        lines.append("  ".join(padded).rstrip())
    return lines


def _run_columns(df: pd.DataFrame) -> list[str]:
    return (["experiment"] if "experiment" in df.columns else []) + ["run"]


def final_results(df: pd.DataFrame, last_k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per run (with its episodes and env steps) and per experiment, the final return and its statistics."""
    final = final_performance(df, last_k=last_k)
    sizes = df.groupby(_run_columns(df)).agg(episodes=("episode_index", "size"), env_steps=("global_step", "max"))
    runs = final.merge(sizes.reset_index(), on=_run_columns(df), how="left")
    return runs, aggregate(final, ci=CI)


def final_table(df: pd.DataFrame, last_k: int) -> str:
    """The text table of ``run`` and ``show``: each seed's final return, then mean, median and IQM with CIs."""
    if df.empty:
        return "No episode has finished yet: there is no final return to show."
    runs, summary = final_results(df, last_k)
    several = "experiment" in runs.columns
    lead = ["experiment"] if several else []
    lines = [f"Final return of each run: mean return of its last {last_k} episodes"]
    rows = [[*(str(r[c]) for c in lead), str(r["run"]), str(r.get("seed", "")), str(r["episodes"]),
             str(r["env_steps"]), _num(r["final_return"])] for r in runs.to_dict("records")]
    lines += _render([*lead, "run", "seed", "episodes", "env steps", "final return"], rows,
                     [False] * len(lead) + [True] * 5)
    lines += ["", f"Across runs, with {CI:.0%} percentile-bootstrap confidence intervals:"]
    rows = [[*(str(r[c]) for c in lead), str(r["num_runs"]), *(part for stat, _ in STATS
                                                                 for part in (_num(r[stat]), _ci(r, stat)))]
            for r in summary.to_dict("records")]
    headers = [*lead, "runs", *(part for _, label in STATS for part in (label, f"{CI:.0%} CI"))]
    lines += _render(headers, rows, [False] * len(lead) + [True] * 7)
    return "\n".join(lines)


def configured_last_k(paths: Sequence[str | os.PathLike]) -> int:
    """The ``last_k`` of the ``config.yaml`` files of the experiments under ``paths`` (10 without one).

    Raises:
        ConfigError: when the experiments were configured with different values.
    """
    values: dict[str, int] = {}
    for path in paths:
        for exp_dir in experiment_dirs(path):
            config_file = exp_dir / "config.yaml"
            data = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
            value = data.get("last_k") if isinstance(data, dict) else None
            values[os.fspath(exp_dir)] = value if isinstance(value, int) and value > 0 else DEFAULT_LAST_K
    distinct = sorted(set(values.values()))
    if len(distinct) > 1:
        listed = ", ".join(f"{d}: {k}" for d, k in values.items())
        raise ConfigError(f"the experiments were configured with different last_k ({listed}): pass --last-k K.")
    return distinct[0] if distinct else DEFAULT_LAST_K


def show_command(args: argparse.Namespace) -> int:
    """Print the final-performance table of the experiment (or sweep) in ``args.exp_dir``."""
    last_k = args.last_k or configured_last_k([args.exp_dir])
    print(final_table(load_episodes(args.exp_dir), last_k))
    return 0


def summary_markdown(df: pd.DataFrame, last_k: int, names: Sequence[str], curves_file: str | None) -> str:
    """Markdown of ``report``: one row per experiment with mean, median and IQM and their CIs."""
    runs, summary = final_results(df, last_k)
    if "experiment" not in summary.columns:
        summary.insert(0, "experiment", names[0])
        runs.insert(0, "experiment", names[0])
    labels = " | ".join(f"{label} [{CI:.0%} CI]" for _, label in STATS)
    lines = [
        "# Final performance", "",
        f"Final return of a run: the mean return of its last {last_k} episodes. Across runs: mean, median and "
        f"IQM (25% trimmed mean) with {CI:.0%} percentile-bootstrap confidence intervals over runs.", "",
        f"| experiment | runs | {labels} | final return per run |",
        "|---|---:|" + "---:|" * len(STATS) + "---|",
    ]
    for row in summary.to_dict("records"):
        cells = " | ".join(f"{_num(row[stat])} {_ci(row, stat)}" for stat, _ in STATS)
        per_run = ", ".join(_num(v) for v in runs.loc[runs["experiment"] == row["experiment"], "final_return"])
        lines.append(f"| {row['experiment']} | {row['num_runs']} | {cells} | {per_run} |")
    if curves_file:
        lines += ["", "## Learning curves", "", f"![Learning curves (IQM, {CI:.0%} CI)]({curves_file})"]
    return "\n".join(lines) + "\n"


def default_out_dir(paths: Sequence[str | os.PathLike]) -> Path:
    """The first experiment directory, or the common parent of several."""
    if len(paths) == 1:
        return Path(paths[0])
    return Path(os.path.commonpath([os.path.abspath(p) for p in paths]))


def report_command(args: argparse.Namespace) -> int:
    """Write the learning curves (PNG) and the final-performance summary (Markdown) of the experiments."""
    paths = list(args.exp_dirs)
    last_k = args.last_k or configured_last_k(paths)
    df = load_episodes(paths)
    if df.empty:
        raise ConfigError(f"{', '.join(map(str, paths))}: no episode has finished yet, there is nothing to report.")
    out = Path(args.out) if args.out else default_out_dir(paths)
    out.mkdir(parents=True, exist_ok=True)
    names = [Path(p).resolve().name for p in paths]
    title = names[0] if len(names) == 1 and "experiment" not in df.columns else None
    figure = plot_learning_curves(df, x=args.x, title=title, smooth=args.smooth)
    figure.savefig(out / CURVES_FILE, dpi=150)
    (out / SUMMARY_FILE).write_text(summary_markdown(df, last_k, names, CURVES_FILE))
    print(final_table(df, last_k))
    print(f"\nWrote {out / CURVES_FILE}")
    print(f"Wrote {out / SUMMARY_FILE}")
    return 0
