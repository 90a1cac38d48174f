"""``online-trainer show`` and ``report``: final-performance tables and learning curves of experiments on disk.

``report`` also summarises the evaluations (``eval_run{i}.pkl``) when runs were evaluated.

Runs that did not finish (failed, interrupted, pending) are listed with their status but
left out of the statistics and the curves unless ``--include-unfinished`` is given; runs
without a finished episode are listed and counted. Repeated log messages are shown once.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

from online_trainer.analysis.dataframes import experiment_dirs, load_episodes, load_evaluations
from online_trainer.analysis.evaluation_curves import finite_evaluations, plot_evaluation_curves
from online_trainer.analysis.plotting import STAT_LABELS, plot_learning_curves
from online_trainer.analysis.scores import MIXED_ATTR, SCORE_ATTR, score_table, unread_raw_note
from online_trainer.analysis.selection import (
    STATUS_COLUMN,
    describe_runs,
    ident_columns,
    runs_without_episodes,
    select_runs,
)
from online_trainer.analysis.stats import aggregate, final_performance, summarize
from online_trainer.config.schema import ConfigError
from online_trainer.records import storage
from online_trainer.run.one_run import HOOK_NOTE

logger = logging.getLogger(__name__)

CI = 0.95
"""Confidence level of every interval the CLI prints."""
DEFAULT_LAST_K = 10
CURVES_FILE = "learning_curves.png"
EVAL_CURVES_FILE = "eval_curves.png"
SUMMARY_FILE = "summary.md"
CURVE_STAT = "iqm"
STATS = (("mean", "mean"), ("median", "median"), ("iqm", "IQM"))
"""Columns of :func:`online_trainer.analysis.stats.aggregate` shown, with their labels."""
Results = tuple[pd.DataFrame, "pd.DataFrame | None", pd.DataFrame]
"""What :func:`final_results` returns: every run, the statistics (None when every run was left out), the runs left out."""


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


class _Once(logging.Filter):
    """Lets each distinct message through once."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message in self.seen:
            return False
        self.seen.add(message)
        return True


@contextlib.contextmanager
def _each_message_once() -> Iterator[None]:
    """Drop repeated log messages (the table and the curves each note the runs they leave out)."""
    filters = [(handler, _Once()) for handler in logging.getLogger().handlers]  # one per handler
    for handler, once in filters:
        handler.addFilter(once)
    try:
        yield
    finally:
        for handler, once in filters:
            handler.removeFilter(once)


def final_results(
    df: pd.DataFrame, last_k: int, include_unfinished: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Every run with its final return, the statistics across the analysed runs, and the runs left out.

    Returns:
        ``runs``: one row per run, runs left out and runs without episodes included, with
        ``episodes``, ``env_steps`` (the steps the run took when the manifest says, else the
        ``global_step`` of its last episode), ``final_return``, ``status`` (when known) and
        ``left_out`` (bool); ``summary``: the table of :func:`online_trainer.analysis.stats.summarize`;
        ``excluded``: the runs left out (see :func:`online_trainer.analysis.selection.select_runs`).
    """
    kept, excluded = select_runs(df, include_unfinished, log=False)
    summary = summarize(df, last_k=last_k, ci=CI, include_unfinished=include_unfinished) if len(kept) else None
    runs = final_performance(df, last_k=last_k, include_unfinished=True)
    ident = ident_columns(df)
    sizes = df.groupby(ident).agg(episodes=("episode_index", "size"), env_steps=("global_step", "max"))
    runs = runs.merge(sizes.reset_index(), on=ident, how="left")
    runs["episodes"] = runs["episodes"].fillna(0).astype(int)
    gone = {_ident_key(r, ident) for r in excluded.to_dict("records")}
    runs["left_out"] = [_ident_key(r, ident) in gone for r in runs.to_dict("records")]
    known = {_ident_key(r, ident): r for r in df.attrs.get("runs") or []}
    entries = [known.get(_ident_key(r, ident), {}) for r in runs.to_dict("records")]
    runs["error"] = [entry.get("error") for entry in entries]
    runs["stop_reason"] = [entry.get("stop_reason") for entry in entries]
    # the steps the run took (the manifest's), not those of its last finished episode, where known
    runs["env_steps"] = [
        steps if pd.isna(entry.get("env_steps")) else entry["env_steps"]
        for steps, entry in zip(runs["env_steps"], entries)
    ]
    # the experiments in the order they were named (groupby sorted them by name, R16)
    order = {name: i for i, name in enumerate(dict.fromkeys(r.get("experiment") for r in df.attrs.get("runs") or []))}
    if order and "experiment" in runs.columns:
        runs = runs.sort_values("experiment", key=lambda s: s.map(order), kind="stable").reset_index(drop=True)
        if summary is not None and "experiment" in summary.columns:
            summary = summary.sort_values("experiment", key=lambda s: s.map(order), kind="stable")
            summary = summary.reset_index(drop=True)
    return runs, summary, excluded


def _ident_key(row: dict, ident: list[str]) -> tuple:
    return tuple(str(row.get(c)) for c in ident)


def _status_cell(row: dict) -> str:
    status = str(row.get(STATUS_COLUMN, ""))
    return f"{status}, left out" if row["left_out"] else status


def budget_note(df: pd.DataFrame) -> str | None:
    """A warning when the experiments of ``df`` ran on different budgets (None when they did not, or it is not known)."""
    budgets: dict[str, set[str]] = {}
    for run in df.attrs.get("runs") or []:
        if run.get("budget") is not None:
            unit = "env steps" if run.get("budget_unit") == "steps" else "episodes"
            budgets.setdefault(str(run.get("experiment", "")), set()).add(f"{int(run['budget']):,} {unit}")
    if len({budget for kept in budgets.values() for budget in kept}) < 2:
        return None
    listed = "; ".join(f"{name}: {', '.join(sorted(kept))}" for name, kept in budgets.items())
    return (
        f"The experiments ran on different budgets ({listed}), so their final returns also compare the budgets. "
        "Read the learning curves at a step they all reached, or report runs of one budget."
    )


def _return(df: pd.DataFrame) -> str:
    """What a run's return is: ``raw return`` when the experiments ran with ``score="raw"`` (the table's
    ``ep_return`` is then each episode's raw score), else ``return``, saying so when some experiments ran with
    ``score="raw"`` (one score for all: their returns as their agents saw them)."""
    if df.attrs.get(SCORE_ATTR) == "raw":
        return "raw return (the env's raw scores, from RecordEpisodeStatistics)"
    mixed = df.attrs.get(MIXED_ATTR)
    if mixed:
        names = ", ".join(mixed)
        return (
            f"return (the return each agent learned from, for every experiment: {names} ran with records.score=raw, "
            "the others did not; report them alone for their raw scores)"
        )
    return "return"


def _last_episodes(last_k: int, episodes: pd.Series) -> str:
    """``its last 10 episodes``, saying when some runs, or all, have fewer (their mean is over all they have)."""
    counts = pd.to_numeric(episodes, errors="coerce").dropna()
    if len(counts) and (counts < last_k).all():
        return f"all its episodes (every run has fewer than {last_k})"
    if (counts < last_k).any():
        return f"its last {last_k} episodes (all of them where a run has fewer)"
    return f"its last {last_k} episodes"


def final_table(
    df: pd.DataFrame,
    last_k: int,
    include_unfinished: bool = False,
    results: Results | None = None,
    ranked: bool = False,
) -> str:
    """The text table of ``run`` and ``show``: each run's final return, then mean, median and IQM with CIs.

    ``results`` are those of :func:`final_results` when already computed. ``ranked``: the experiments are a sweep's
    configurations, listed across runs by IQM (best first), as ``summary.md`` and ``sweep_results.csv`` rank them.
    """
    if df.empty:
        records = df.attrs.get("runs") or []
        listed = f" Runs: {describe_runs(pd.DataFrame(records))}." if records else ""
        unfinished = any(r.get(STATUS_COLUMN) in ("pending", "running") for r in records)
        said = "No episode has finished yet" if unfinished or not records else "No run finished an episode"
        if any(r.get("unrecorded_episodes") for r in records):
            said = "No run recorded its episodes (they ran with dump_metrics=False)"
        return f"{said}: there is no final return to show.{listed}"
    runs, summary, excluded = results or final_results(df, last_k, include_unfinished)
    lead = ["experiment"] if "experiment" in runs.columns else []
    status = [STATUS_COLUMN] if STATUS_COLUMN in runs.columns else []
    lines = [f"Final return of each run: mean {_return(df)} of {_last_episodes(last_k, runs['episodes'])}"]
    manifest = {(r.get("experiment"), r["run"]): r for r in df.attrs.get("runs") or []}
    entries = [manifest.get((r.get("experiment"), r["run"]), {}) for r in runs.to_dict("records")]
    rows = [
        [
            *(str(r[c]) for c in lead),
            str(r["run"]),
            str(r.get("seed", "")),
            str(r["episodes"]),
            "-" if pd.isna(r["env_steps"]) else str(int(r["env_steps"])),
            _sps(entry.get("sps")),
            _num(r["final_return"]),
            *([_status_cell(r)] if status else []),
        ]
        for r, entry in zip(runs.to_dict("records"), entries)
    ]
    lines += _render(
        [*lead, "run", "seed", "episodes", "env steps", "SPS", "final return", *status],
        rows,
        [False] * len(lead) + [True] * 6 + [False] * len(status),
    )
    lines += [
        f"Stopped early: {_run_name(entry)}: {entry['stop_reason']}"
        for entry in entries
        if isinstance(entry.get("stop_reason"), str)
    ]
    if summary is None:
        return "\n".join(
            lines
            + [
                "",
                f"Every run was left out: {describe_runs(excluded)} did not finish. "
                "Pass --include-unfinished to analyse them anyway.",
            ]
        )
    if ranked:
        summary = summary.sort_values("iqm", ascending=False, kind="stable", na_position="last")
    ranking = " (the configurations ranked by IQM, best first)" if ranked else ""
    lines += ["", f"Across runs, with {CI:.0%} percentile-bootstrap confidence intervals{ranking}:"]
    counts = [
        (c, label) for c, label in (("num_missing", "no return"), ("num_excluded", "left out")) if summary[c].any()
    ]
    rows = [
        [
            *(str(r[c]) for c in lead),
            str(r["num_runs"]),
            *(str(r[c]) for c, _ in counts),
            *(part for stat, _ in STATS for part in (_num(r[stat]), _ci(r, stat))),
        ]
        for r in summary.to_dict("records")
    ]
    headers = [
        *lead,
        "runs",
        *(label for _, label in counts),
        *(part for _, label in STATS for part in (label, f"{CI:.0%} CI")),
    ]
    lines += _render(headers, rows, [False] * len(lead) + [True] * (7 + len(counts)))
    if len(excluded):
        lines += [
            "",
            f"Left out (did not finish): {describe_runs(excluded)}. Pass --include-unfinished to include them.",
        ]
    no_return = runs[runs["final_return"].isna() & ~runs["left_out"]]
    if len(no_return):
        lines += [f"No final return (no finished episode with a finite return): {describe_runs(no_return)}."]
    return "\n".join(lines)


def _run_name(entry: dict) -> str:
    """``run 1``, or ``lr=0.1 run 1`` for a run of an experiment of a sweep (or of several directories)."""
    experiment = entry.get("experiment")
    return f"{experiment} run {entry['run']}" if experiment else f"run {entry['run']}"


def _sps(value: object) -> str:
    """Env steps per second as the table shows them ('-' when the manifest does not say)."""
    return f"{value:,.0f}" if isinstance(value, (int, float)) and not pd.isna(value) else "-"


def configured_last_k(paths: Sequence[str | os.PathLike]) -> int:
    """The ``last_k`` of the ``config.yaml`` files of the experiments under ``paths`` (10 without one).

    Raises:
        ConfigError: when the experiments were configured with different values.
    """
    values: dict[str, int] = {}
    for path in paths:
        for exp_dir in experiment_dirs(path):
            config_file = exp_dir / storage.CONFIG_YAML
            data = yaml.safe_load(config_file.read_text()) if config_file.is_file() else None
            value = data.get("last_k") if isinstance(data, dict) else None
            values[os.fspath(exp_dir)] = value if isinstance(value, int) and value > 0 else DEFAULT_LAST_K
    distinct = sorted(set(values.values()))
    if len(distinct) > 1:
        listed = ", ".join(f"{d}: {k}" for d, k in values.items())
        raise ConfigError(f"the experiments were configured with different last_k ({listed}): pass --last-k K.")
    return distinct[0] if distinct else DEFAULT_LAST_K


def _scored(df: pd.DataFrame, score: str | None) -> pd.DataFrame:
    """``df`` with the returns ``--score`` asks for (see :func:`online_trainer.analysis.scores.score_table`)."""
    try:
        return score_table(df, score)
    except ValueError:
        raise ConfigError(
            "--score raw: these runs recorded no raw scores (their envs have no gymnasium.wrappers:"
            "RecordEpisodeStatistics inside their wrappers): leave --score out, or run them with it."
        ) from None


def show_command(args: argparse.Namespace) -> int:
    """Print the final-performance table of the experiment (or sweep) in ``args.exp_dir``."""
    with _each_message_once():
        last_k = args.last_k or configured_last_k([args.exp_dir])
        ranked = len(experiment_dirs(args.exp_dir)) > 1  # a sweep's configurations
        df = _scored(load_episodes(args.exp_dir), args.score)
        print(final_table(df, last_k, args.include_unfinished, ranked=ranked))
        if (budgets := budget_note(df)) is not None:  # as report and compare say it
            logger.warning("show: %s", budgets)
        if (raw := unread_raw_note(df)) is not None:  # N16: normalised returns under a plain "return"
            logger.warning("show: %s", raw)
    return 0


def _cell(value: object) -> str:
    """A Markdown table cell: one line, no pipes. Of a traceback, its exception's line, with the note that names the
    hook it was raised in (the traceback's last line then: the cell said only "(raised in hook ...)")."""
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    notes: list[str] = []
    while len(lines) > 1 and lines[-1].startswith(HOOK_NOTE):
        notes.insert(0, lines.pop())
    return " ".join(lines[-1:] + notes).replace("|", "\\|")


def summary_markdown(
    df: pd.DataFrame,
    last_k: int,
    names: Sequence[str],
    curves_file: str | None,
    include_unfinished: bool = False,
    curves_caption: str = "",
    evaluations: pd.DataFrame | None = None,
    results: Results | None = None,
    eval_curves_file: str | None = None,
    ranked: bool = False,
) -> str:
    """Markdown of ``report``: one row per experiment with mean, median and IQM and their CIs, and the runs left out.

    ``results`` are those of :func:`final_results` when already computed. ``ranked``: the rows are the
    configurations of a sweep, listed by IQM (best first), as ``sweep_results.csv`` ranks them; else in the
    order of the experiments.
    """
    runs, summary, excluded = results or final_results(df, last_k, include_unfinished)
    if summary is None:
        raise ConfigError(
            f"every run was left out: {describe_runs(excluded)} did not finish; "
            "pass --include-unfinished to report them anyway."
        )
    runs, summary = runs.copy(), summary.copy()
    if "experiment" not in summary.columns:
        summary.insert(0, "experiment", names[0])
        runs.insert(0, "experiment", names[0])
    if ranked:
        summary = summary.sort_values("iqm", ascending=False, kind="stable", na_position="last")
    labels = " | ".join(f"{label} [{CI:.0%} CI]" for _, label in STATS)
    lines = [
        "# Final performance",
        "",
        f"Final return of a run: the mean {_return(df)} of {_last_episodes(last_k, runs['episodes'])}. Across runs: mean, "
        "median and "
        f"IQM (25% trimmed mean) with {CI:.0%} percentile-bootstrap confidence intervals over runs. "
        "`runs` counts the runs in the statistics; `no return` the runs without a finished episode; "
        "`left out` the runs that did not finish."
        + (" The configurations are ranked by IQM, best first." if ranked else ""),
        "",
        *([f"**Budgets differ.** {budgets}", ""] if (budgets := budget_note(df)) else []),
        *([f"**Raw scores differ.** {raw}", ""] if (raw := unread_raw_note(df)) else []),
        f"| experiment | runs | no return | left out | {labels} | final return per run |",
        "|---|---:|---:|---:|" + "---:|" * len(STATS) + "---|",
    ]
    for row in summary.to_dict("records"):
        cells = " | ".join(f"{_num(row[stat])} {_ci(row, stat)}" for stat, _ in STATS)
        mine = runs[(runs["experiment"] == row["experiment"]) & ~runs["left_out"]]
        per_run = ", ".join(_num(r["final_return"]) + _unfinished_mark(r) for r in mine.to_dict("records"))
        lines.append(
            f"| {row['experiment']} | {row['num_runs']} | {row['num_missing']} | {row['num_excluded']} "
            f"| {cells} | {per_run} |"
        )
    if len(excluded):
        lines += [
            "",
            "## Runs left out",
            "",
            "These runs did not finish; they are in neither the statistics nor the learning curves "
            "(`online-trainer report --include-unfinished` includes them).",
            "",
            "| experiment | run | seed | status | episodes | error |",
            "|---|---:|---:|---|---:|---|",
        ]
        for r in runs[runs["left_out"]].to_dict("records"):
            lines.append(
                f"| {r['experiment']} | {r['run']} | {_cell(r.get('seed'))} | {_cell(r.get(STATUS_COLUMN))} "
                f"| {r['episodes']} | {_cell(r['error'])} |"
            )
    unfinished = runs[STATUS_COLUMN].map(_unfinished_status) if STATUS_COLUMN in runs.columns else None
    short = runs[~runs["left_out"] & unfinished.astype(bool)] if unfinished is not None else runs.iloc[:0]
    if len(short):
        lines += [
            "",
            "## Runs in the statistics that did not use their whole budget",
            "",
            "Their final returns are of their last episodes before they ended, beside runs that used the whole "
            "budget (marked in `final return per run`).",
            "",
            "| experiment | run | seed | status | episodes | env steps | why |",
            "|---|---:|---:|---|---:|---:|---|",
        ]
        for r in short.to_dict("records"):
            why = r.get("stop_reason") if r.get(STATUS_COLUMN) == "stopped_early" else r.get("error")
            steps = "-" if pd.isna(r["env_steps"]) else str(int(r["env_steps"]))
            lines.append(
                f"| {r['experiment']} | {r['run']} | {_cell(r.get('seed'))} | {_cell(r.get(STATUS_COLUMN))} "
                f"| {r['episodes']} | {steps} | {_cell(why)} |"
            )
    no_return = runs[runs["final_return"].isna() & ~runs["left_out"]]
    if len(no_return):
        lines += [
            "",
            "## Runs without a final return",
            "",
            f"No finished episode with a finite return; counted under `no return`: {describe_runs(no_return)}.",
        ]
    if evaluations is not None:
        lines += _evaluation_section(evaluations, include_unfinished, names, eval_curves_file)
    if curves_file:
        lines += ["", "## Learning curves", "", f"![Learning curves]({curves_file})", "", curves_caption]
    return "\n".join(lines).rstrip() + "\n"


def _unfinished_status(status: object) -> str:
    """``status`` when it says the run did not use its whole budget (stopped early, failed, cut off), else ``""``."""
    return "" if not isinstance(status, str) or status in ("finished", "unknown") else status.replace("_", " ")


def _unfinished_mark(run: dict) -> str:
    """`` (stopped early)``, `` (failed)``...: what a run's final return in ``final return per run`` is marked with."""
    status = _unfinished_status(run.get(STATUS_COLUMN))
    return f" ({status})" if status else ""


def evaluation_results(evals: pd.DataFrame, include_unfinished: bool) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The last evaluation of each analysed run, and the statistics of their mean returns; None without any."""
    kept, _ = select_runs(evals, include_unfinished, log=False)
    if kept.empty:
        return None
    ident = ident_columns(kept)
    last = kept.sort_values([*ident, "eval_index"], kind="stable").groupby(ident, dropna=False).tail(1)
    return last.reset_index(drop=True), aggregate(last, value="eval_return", ci=CI)


def _evaluation_section(
    evals: pd.DataFrame, include_unfinished: bool, names: Sequence[str], curves_file: str | None
) -> list[str]:
    """Markdown of the runs' final evaluations (``eval_run{i}.pkl``), when there are any."""
    if evals.empty:
        return []
    results = evaluation_results(evals, include_unfinished)
    lines = ["", "## Evaluation", ""]
    if results is None:
        return lines + ["Every evaluated run was left out: none finished (--include-unfinished includes them)."]
    last, summary = results
    if "experiment" not in summary.columns:
        summary.insert(0, "experiment", names[0])
        last.insert(0, "experiment", names[0])
    # integers, though the columns are floats when an experiment without evaluations was concatenated in (NaN)
    counts = [str(int(n)) for n in sorted(last["eval_episodes"].dropna().unique())]
    of_last = (
        f"the {counts[0]} episodes of its last evaluation"
        if len(counts) == 1
        else f"the episodes of its last evaluation, {', '.join(counts[:-1])} or {counts[-1]} by experiment"
    )
    labels = " | ".join(f"{label} [{CI:.0%} CI]" for _, label in STATS)
    lines += [
        f"Final evaluation of a run: the mean return of {of_last} "
        "(the agent in eval mode, on the eval env). Across runs as above.",
        "",
        f"| experiment | runs | {labels} | final evaluation per run (at env step) |",
        "|---|---:|" + "---:|" * len(STATS) + "---|",
    ]
    for row in summary.to_dict("records"):
        cells = " | ".join(f"{_num(row[stat])} {_ci(row, stat)}" for stat, _ in STATS)
        mine = last[last["experiment"] == row["experiment"]]
        per_run = ", ".join(
            f"{_num(r['eval_return'])} ({int(r['global_step'])}){_unfinished_mark(r)}" for r in mine.to_dict("records")
        )
        lines.append(f"| {row['experiment']} | {row['num_runs']} | {cells} | {per_run} |")
    kept, _ = select_runs(evals, include_unfinished, log=False)
    unevaluated = runs_without_episodes(kept, ident_columns(kept))
    if len(unevaluated):  # runs in the analysis that never reached an evaluation (failed before it)
        lines += ["", f"Runs without an evaluation, not in these statistics: {describe_runs(unevaluated)}."]
    if curves_file:
        lines += ["", f"![Evaluation curves]({curves_file})"]
    return lines


def default_x(df: pd.DataFrame) -> str:
    """The x axis that follows the budget: ``episode_index`` when every run had an episode budget, else ``global_step``."""
    units = {record.get("budget_unit") for record in df.attrs.get("runs") or []}
    return "episode_index" if units == {"episodes"} else "global_step"


def plot_evaluations(evals: pd.DataFrame, args: argparse.Namespace, title: str | None) -> Figure:
    """``eval_curves.png``: :func:`~online_trainer.analysis.evaluation_curves.plot_evaluation_curves` with the
    command's options."""
    return plot_evaluation_curves(
        evals,
        x="episodes_trained" if args.x == "episode_index" else "global_step",
        stat=CURVE_STAT,
        ci=CI,
        span="common" if args.common_range else "all",
        ylim=tuple(args.ylim) if args.ylim else "auto",
        yscale=args.yscale,
        include_unfinished=args.include_unfinished,
        title=title,
    )


def _caption(args: argparse.Namespace) -> str:
    smooth = f"; each run smoothed by a trailing mean of {args.smooth} episodes" if args.smooth > 1 else "; unsmoothed"
    span = (
        "the range every run covers"
        if args.common_range
        else "the whole range some run covers; thin stretches stand on fewer runs than the legend counts"
    )
    return (
        f"{STAT_LABELS[CURVE_STAT]} across runs with a pointwise {CI:.0%} bootstrap band{smooth}; "
        f"x: {span}; runs are never extrapolated."
    )


def default_out_dir(paths: Sequence[str | os.PathLike]) -> Path:
    """The first experiment directory, or the common parent of several."""
    if len(paths) == 1:
        return Path(paths[0])
    return Path(os.path.commonpath([os.path.abspath(p) for p in paths]))


def report_command(args: argparse.Namespace) -> int:
    """Write the learning curves (PNG) and the final-performance summary (Markdown) of the experiments."""
    paths = list(args.exp_dirs)
    if args.ylim and not (math.isfinite(args.ylim[0]) and math.isfinite(args.ylim[1]) and args.ylim[0] < args.ylim[1]):
        raise ConfigError(f"--ylim {args.ylim[0]:g} {args.ylim[1]:g}: give two finite numbers, LOW below HIGH.")
    with _each_message_once():
        last_k = args.last_k or configured_last_k(paths)
        df = _scored(load_episodes(paths), args.score)
        if df.empty:
            raise ConfigError(f"{', '.join(map(str, paths))}: no episode has finished yet, there is nothing to report.")
        results = final_results(df, last_k, args.include_unfinished)
        if results[1] is None:
            raise ConfigError(
                f"every run was left out: {describe_runs(results[2])} did not finish; "
                "pass --include-unfinished to report them anyway."
            )
        out = Path(args.out) if args.out else default_out_dir(paths)
        out.mkdir(parents=True, exist_ok=True)
        names = [Path(p).resolve().name for p in paths]
        title = names[0] if len(names) == 1 else None  # an experiment, or a sweep (its legend names the configurations)
        args.x, args.smooth = args.x or default_x(df), args.smooth or last_k  # smoothed as compare smooths
        figure = plot_learning_curves(
            df,
            x=args.x,
            stat=CURVE_STAT,
            ci=CI,
            title=title,
            smooth=args.smooth,
            span="common" if args.common_range else "all",
            ylim=tuple(args.ylim) if args.ylim else "auto",
            yscale=args.yscale,
            include_unfinished=args.include_unfinished,
        )
        figure.savefig(out / CURVES_FILE, dpi=150)
        evaluations = finite_evaluations(load_evaluations(paths))
        written = [out / CURVES_FILE]
        if evaluation_results(evaluations, args.include_unfinished) is not None:
            plot_evaluations(evaluations, args, title).savefig(out / EVAL_CURVES_FILE, dpi=150)
            written.append(out / EVAL_CURVES_FILE)
        (out / SUMMARY_FILE).write_text(
            summary_markdown(
                df,
                last_k,
                names,
                CURVES_FILE,
                args.include_unfinished,
                _caption(args),
                evaluations,
                results,
                EVAL_CURVES_FILE if len(written) > 1 else None,
                ranked=len(paths) == 1 and len(experiment_dirs(paths[0])) > 1,  # one sweep's configurations
            )
        )
        print(
            final_table(
                df,
                last_k,
                args.include_unfinished,
                results,
                ranked=len(paths) == 1 and len(experiment_dirs(paths[0])) > 1,
            )
        )
        if (budgets := budget_note(df)) is not None:
            logger.warning("report: %s", budgets)
        if (raw := unread_raw_note(df)) is not None:
            logger.warning("report: %s", raw)
    print()
    for path in [*written, out / SUMMARY_FILE]:
        print(f"Wrote {path}")
    return 0
