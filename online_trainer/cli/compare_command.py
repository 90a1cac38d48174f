"""``online-trainer compare``: is A better than B? ``comparison.md`` and one PNG per figure.

The statistics are those of :func:`online_trainer.analysis.compare.compare`.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
from pathlib import Path

import numpy as np

from online_trainer.analysis.compare import Comparison, compare
from online_trainer.analysis.plotting import STAT_LABELS
from online_trainer.cli.report import _each_message_once, configured_last_k, default_out_dir
from online_trainer.config.schema import ConfigError

MARKDOWN_FILE = "comparison.md"
CAPTIONS = {
    "aggregates.png": "Aggregate metrics",
    "improvement.png": "Probability of improvement",
    "profiles.png": "Performance profiles",
    "sample_efficiency.png": "Sample efficiency",
}


def parse_normalize(values: list[str] | None) -> object:
    """``--normalize``: ``minmax``, ``RANDOM,REFERENCE`` or ``ENV_ID=RANDOM,REFERENCE`` (repeated) to the argument."""
    if not values:
        return None
    if values == ["minmax"]:
        return "minmax"
    pairs: dict[str, tuple[float, float]] = {}
    for value in values:
        task, _, numbers = value.rpartition("=")
        try:
            low, high = (float(v) for v in numbers.split(","))
        except ValueError:
            raise ConfigError(
                f"--normalize {value!r}: give minmax, RANDOM,REFERENCE (e.g. 0,500) or "
                "ENV_ID=RANDOM,REFERENCE (e.g. CartPole-v1=9,500), once per env."
            ) from None
        if not task and len(values) > 1:
            raise ConfigError(
                f"--normalize {value!r}: with several --normalize, name the env of each (ENV_ID=RANDOM,REFERENCE)."
            )
        pairs[task] = (low, high)
    return pairs[""] if "" in pairs else pairs


_ARGUMENT = re.compile(r"\b(by|source|last_k|metric|optimality_threshold)=(?:'([^']*)'|\[([^\]]*)\]|([\w.<>-]+))?")
_WORDS = (
    (re.compile(r" \(--[\w-]+ on the command line\)"), ""),  # said already: the command's own words follow
    (re.compile(r"include_unfinished=True"), "--include-unfinished"),
    (re.compile(r"normalize='minmax'"), "--normalize minmax"),
    (re.compile(r"normalize=\(random, reference\)"), "--normalize ENV_ID=RANDOM,REFERENCE"),
    (re.compile(r"\(OnlineTrainer\.evaluate\)"), "(online-trainer eval)"),
)


def command_words(message: str) -> str:
    """``message`` of :func:`~online_trainer.analysis.compare.compare` with its arguments as this command's flags
    (``by='lr'`` as ``--by lr``, ``include_unfinished=True`` as ``--include-unfinished``)."""
    for pattern, words in _WORDS:
        message = pattern.sub(words, message)

    def flag(match: re.Match[str]) -> str:
        name = f"--{match[1].replace('_', '-')}"
        if match[3] is not None:  # by=['lr', 'gamma']: --by once per column
            return " ".join(f"{name} {column.strip().strip(chr(39))}" for column in match[3].split(","))
        value = match[2] if match[2] is not None else match[4]
        return f"{name} {value}" if value else name

    return _ARGUMENT.sub(flag, message)


class _CommandWords(logging.Filter):
    """Rewrites each logged message in this command's words (:func:`command_words`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = command_words(record.getMessage()), None
        return True


def _num(value: float) -> str:
    """Two decimals, as ``report``'s tables (``16.55``, not ``16.5``); three below 1 (a probability, a normalised
    score: ``0.550 [0.175, 0.950]``)."""
    if value is None or math.isnan(value):
        return "n/a"
    digits = 2 if abs(value) >= 1 else 3
    return f"{round(value, digits) + 0.0:.{digits}f}"  # + 0.0: what rounds to -0 is written 0.000 (A22)


def _ci(row: dict, name: str) -> str:
    return f"{_num(row[name])} [{_num(row[name + '_lo'])}, {_num(row[name + '_hi'])}]"


def comparison_markdown(comparison: Comparison, figures: list[str]) -> str:
    """The Markdown of ``compare``: the aggregates, the pairwise comparisons, the advice, the figures."""
    options, info = comparison.options, comparison.info
    metric = STAT_LABELS[options.metric]
    ci = f"{options.ci:.0%}"
    score = (
        "the mean return of its last evaluation"
        if options.source == "eval"
        else f"the mean return of its last {options.last_k} training episodes"
    )
    scale = (
        f" Scores are normalised per task: (score - random) / (reference - random), with (random, reference) "
        f"{', '.join(f'{t}: ({lo:g}, {hi:g})' for t, (lo, hi) in info['normalization'].items())}."
        if info["normalization"]
        else ""
    )
    tasks = ", ".join(f"`{t}`" for t in info["tasks"])
    lines = [
        "# Comparison",
        "",
        f"Candidates: {', '.join(f'`{c}`' for c in info['candidates'])}; task(s): {tasks}. The score of a run "
        f"(a seed, the unit of replication) is {score}.{scale} Every interval is a {ci} percentile "
        "stratified-bootstrap confidence interval: runs are resampled within each task "
        f"({options.n_resamples} resamples, seed {options.seed}).",
        "",
        *([f"**Budgets differ.** {info['budget_note']}", ""] if info.get("budget_note") else []),
        *([f"**Seeds differ.** {info['seeds_note']}", ""] if info.get("seeds_note") else []),
        *([f"**Seeds shared.** {info['shared_seed_note']}", ""] if info.get("shared_seed_note") else []),
        *([f"**Runs stopped early.** {info['stopped_early_note']}", ""] if info.get("stopped_early_note") else []),
        *([f"**Unfinished runs scored.** {info['unfinished_note']}", ""] if info.get("unfinished_note") else []),
        *([f"**Runs left out.** {info['left_out_note']}", ""] if info.get("left_out_note") else []),
        *([f"**Candidates left out.** {info['unscored_note']}", ""] if info.get("unscored_note") else []),
        *([f"**Scales differ.** {info['scale_note']}", ""] if info.get("scale_note") else []),
        "## Aggregate metrics",
        "",
        f"| candidate | runs | tasks | IQM [{ci} CI] | mean [{ci} CI] | median [{ci} CI] | optimality gap [{ci} CI] |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in comparison.aggregates.to_dict("records"):
        missing = f" ({row['num_missing']} without a score)" if row["num_missing"] else ""
        lines.append(
            f"| {row['candidate']} | {row['num_runs']}{missing} | {row['num_tasks']} | {_ci(row, 'iqm')} | "
            f"{_ci(row, 'mean')} | {_ci(row, 'median')} | {_ci(row, 'optimality_gap')} |"
        )
    threshold = info["optimality_threshold"]
    lines += [
        "",
        "Optimality gap: how far runs fall short of "
        + (
            f"{threshold:g} on average (lower is better)."
            if threshold is not None
            else "an optimal score: not computed on raw returns (pass --normalize or --optimality-threshold)."
        ),
    ]
    lines += [
        "",
        "## Pairwise comparisons",
        "",
        f"P(X > Y): the probability that a run of X scores higher than a run of Y on the same task (ties count "
        f"one half), averaged over tasks. Difference: {metric} of X minus {metric} of Y.",
        "",
        f"| X | Y | P(X > Y) [{ci} CI] | {metric} difference [{ci} CI] | told apart? | seeds needed |",
        "|---|---|---:|---:|---|---:|",
    ]
    order = {c: i for i, c in enumerate(info["candidates"])}
    pairs = [r for r in comparison.improvement.to_dict("records") if order[r["candidate"]] < order[r["versus"]]]
    for row in pairs:
        told = "yes" if row["distinguishable"] else "no"
        degenerate = " (degenerate)" if row["degenerate"] else ""
        lines.append(
            f"| {row['candidate']} | {row['versus']} | {_ci(row, 'probability_of_improvement')}{degenerate} | "
            f"{_ci(row, 'difference')} | {told} | {_seeds(row['seeds_needed'])} |"
        )
    lines += ["", "## What this says", ""] + [
        f"- {_advice(row, metric, options.ci, _runs(comparison))}{_degenerate(row, options.ci)}" for row in pairs
    ]
    lines += [
        "",
        "Seeds needed: seeds per candidate and task for the interval of the difference to exclude zero, "
        "if the difference stays as observed (the interval narrows as 1/sqrt(seeds); Colas et al., 2018, "
        '"How many random seeds?"). Run that many, then compare again: the difference may not stay.',
    ]
    for name in figures:
        lines += ["", f"### Figure: {CAPTIONS[name].lower()}", "", f"![{CAPTIONS[name]}]({name})"]
    return "\n".join(lines) + "\n"


FEW_THOUSAND_SEEDS = 1_000
"""Past this many seeds per candidate, the advice says the difference is close to zero rather than to run them."""


def _seeds(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return "no number (equal)" if math.isinf(value) else str(int(value))


def _runs(comparison: Comparison) -> dict[str, int]:
    """Each candidate's seeds per task, as ``seeds_needed`` counts them: its runs with a score on the task where
    it has fewest."""
    scores = comparison.scores
    scored = scores[np.isfinite(scores["raw_score"].to_numpy(float))]
    per_task = scored.groupby(["candidate", "task"]).size().groupby("candidate").min()
    return {str(candidate): int(count) for candidate, count in per_task.items()}


def _advice(row: dict, metric: str, ci: float, runs: dict[str, int] | None = None) -> str:
    a, b, n = row["candidate"], row["versus"], row["num_runs"]
    runs = runs or {}
    uneven = runs.get(a, n) != runs.get(b, n)
    now = f"now {runs[a]} and {runs[b]}" if uneven else f"now {n}"
    seeds = f"{runs[a]} and {runs[b]} seeds" if uneven else f"{n} seeds per candidate"
    p = f"P({a} > {b}) = {_ci(row, 'probability_of_improvement')}"
    if row["too_few_seeds"] and (row["difference_lo"] > 0 or row["difference_hi"] < 0):
        return (
            f"`{a}` and `{b}` cannot be told apart with {seeds}: the interval of the {metric} "
            f"difference excludes zero ({p}), but with so few seeds even a complete separation could happen by "
            f"chance too often for the {ci:.0%} level (no exact rank test reaches it); run at least "
            f"{_seeds(row['seeds_needed'])} seeds per candidate with a score ({now})."
        )
    if row["distinguishable"]:
        better = a if row["difference"] > 0 else b
        overlap = (
            " Their own intervals overlap, which does not make them equal: the interval of their difference tells."
            if row["intervals_overlap"]
            else ""
        )
        return (
            f"`{better}` is better on {metric}: the interval of the {metric} difference excludes zero ({p}) "
            f"with {seeds}.{overlap}"
        )
    overlap = "their intervals overlap and " if row["intervals_overlap"] else ""
    needed = row["seeds_needed"]
    if math.isinf(needed):
        more = "no number of seeds separates equal scores"
    elif needed > FEW_THOUSAND_SEEDS:
        more = (
            f"the observed difference is close to zero: only about {int(needed):,} seeds per candidate ({now}) "
            "would give it an interval that excludes zero, so read the two as equal at this budget"
        )
    else:
        more = (
            f"the observed difference would need about {_seeds(needed)} seeds per candidate ({now}) for its "
            "interval to exclude zero"
        )
    return f"`{a}` and `{b}` cannot be told apart: {overlap}the difference's interval includes zero ({p}); {more}."


def _degenerate(row: dict, ci: float) -> str:
    """What a degenerate interval of P does not show, and what the seeds do show (empty when not degenerate)."""
    if not row["degenerate"]:
        return ""
    a, b, n, p = row["candidate"], row["versus"], row["num_runs"], row["probability_of_improvement"]
    if math.isnan(row["separation_bound"]):
        return (
            f" The interval of P is degenerate: every bootstrap resample gives {p:.2f}, because the runs tie; "
            "it shows no spread, not a certainty."
        )
    winner, loser = (a, b) if p == 1 else (b, a)
    bound = ("≥" if p == 1 else "≤") + f" {row['separation_bound']:.2f}"
    chance = row["separation_chance"]
    return (
        f" The interval of P is degenerate: every run of `{winner}` beats every run of `{loser}`, so every "
        f"bootstrap resample gives {p:.0f}, a certainty {n} seeds cannot give. Whatever the score distributions, "
        f"P({a} > {b}) {bound} ({(1 + ci) / 2:.1%} one-sided bound after complete separation); were both from "
        f"one distribution, a separation this complete would happen with probability {chance:.2g} "
        f"(1 in {round(1 / chance):,})."
    )


def compare_command(args: argparse.Namespace) -> int:
    """Write ``comparison.md`` and the figures of the experiments in ``args.dirs`` into ``args.out``."""
    paths = list(args.dirs)
    normalize = parse_normalize(args.normalize)
    words = _CommandWords()
    handlers = logging.getLogger().handlers
    for handler in handlers:
        handler.addFilter(words)
    try:
        with _each_message_once():
            last_k = args.last_k or configured_last_k(paths)  # as show and report score the runs
            comparison = compare(
                paths,
                by=args.by,
                source=args.source,
                last_k=last_k,
                normalize=normalize,
                optimality_threshold=args.optimality_threshold,
                metric=args.metric,
                n_resamples=args.resamples,
                seed=args.seed,
                include_unfinished=args.include_unfinished,
            )
    except ValueError as exc:
        raise ConfigError(command_words(str(exc))) from exc
    finally:
        for handler in handlers:
            handler.removeFilter(words)
    out = Path(args.out) if args.out else default_out_dir(paths)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, figure in comparison.figures().items():
        figure.savefig(out / f"{name}.png", dpi=150)
        written.append(f"{name}.png")
    (out / MARKDOWN_FILE).write_text(comparison_markdown(comparison, written))
    table = comparison.aggregates
    for row in table.to_dict("records"):
        print(f"{row['candidate']}: {STAT_LABELS[args.metric]} {_ci(row, args.metric)} over {row['num_runs']} runs")
    for row in comparison.improvement.to_dict("records"):
        if comparison.info["candidates"].index(row["candidate"]) < comparison.info["candidates"].index(row["versus"]):
            advice = _advice(row, STAT_LABELS[args.metric], comparison.options.ci, _runs(comparison))
            print((advice + _degenerate(row, comparison.options.ci)).replace("`", ""))
    print()
    for name in [*written, MARKDOWN_FILE]:
        print(f"Wrote {out / name}")
    return 0
