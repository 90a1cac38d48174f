"""The ``online-trainer`` command (also ``python -m online_trainer``).

::

    online-trainer run CONFIG.yaml [key=value ...]      run every seed of an experiment
    online-trainer wait EXP_DIR [--poll SECONDS]        wait for the experiment's Slurm jobs, then its table
    online-trainer show EXP_DIR [--last-k K] [--include-unfinished]   its final-performance table
    online-trainer report EXP_DIR [EXP_DIR ...]         learning curves (PNG) and a summary (Markdown)
        [--ylim LOW HIGH] [--yscale symlog] [--common-range] [--include-unfinished]
    online-trainer compare DIR [DIR ...] [--out DIR]    is A better than B? comparison.md and figures

The config schema is :class:`online_trainer.config.schema.ExperimentConfig`. Errors in
the user's input are printed as ``online-trainer: error: ...`` with exit status 2, before
anything runs; runs that fail give exit status 1. The library logs with :mod:`logging`;
this module is the one place that prints.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from online_trainer.config.schema import ConfigError
from online_trainer.errors import ExperimentInUseError, ManifestDamagedError, SlurmSubmissionError

PROG = "online-trainer"
USAGE_ERROR = 2
USER_ERRORS = (
    ConfigError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    PermissionError,
    ExperimentInUseError,
    SlurmSubmissionError,
    ManifestDamagedError,
)
"""Exceptions that mean the user's input is wrong: reported in one line, exit status 2."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _lazy(module: str, name: str):
    """A handler that imports its module when called, so ``--help`` does not load pandas and torch."""

    def handler(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)

    return handler


run_command = _lazy("online_trainer.cli.run_command", "run_command")
resume_command = _lazy("online_trainer.cli.resume_command", "resume_command")
show_command = _lazy("online_trainer.cli.report", "show_command")
report_command = _lazy("online_trainer.cli.report", "report_command")
compare_command = _lazy("online_trainer.cli.compare_command", "compare_command")
eval_command = _lazy("online_trainer.cli.run_command", "eval_command")
wait_command = _lazy("online_trainer.cli.wait", "wait_command")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, one subcommand per action (each sets ``handler``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run online RL experiments over many seeds, and summarise them.",
        epilog=f"Run '{PROG} COMMAND --help' for the options of a command.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log INFO (-v) or DEBUG (-vv) messages")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser(
        "run",
        usage="%(prog)s [-h] [--no-progress] CONFIG [KEY=VALUE ...]",
        help="run an experiment described by a YAML config",
        description="Build the env and agent of CONFIG, run every seed, write the experiment directory "
        "(config.yaml, args.yaml, manifest.json, metrics_run*.pkl, logs) and print the final table.",
        epilog="Overrides are dotted keys with YAML values, e.g. num_runs=3 env.num_envs=4 "
        "agent.hyperparameters.lr=1e-3 exp_dir=runs/lr_1e-3 overwrite=true.",
    )
    # optional here so that, without it, argparse does not also call the overrides required; main() requires it
    run.add_argument("config", metavar="CONFIG", nargs="?", help="YAML experiment config (see configs/)")
    run.add_argument(
        "overrides",
        metavar="KEY=VALUE",
        nargs="*",
        help="config overrides, applied in order (a section, then its keys); one key set twice to different "
        "values is refused",
    )
    run.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    run.set_defaults(handler=run_command, usage_error=run.error)

    resume = commands.add_parser(
        "resume",
        help="continue an experiment of 'run' that was cut off (killed, preempted, failed)",
        description="Keep the finished runs of EXP_DIR; continue every other run from its full checkpoint "
        "(written every checkpoint_freq steps and on SIGTERM/SIGUSR1), or start it again when it "
        "has none. Outputs are cut back to the checkpoint first, so nothing is written twice.",
    )
    resume.add_argument("exp_dir", metavar="EXP_DIR", help="an experiment directory made by 'online-trainer run'")
    resume.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    resume.set_defaults(handler=resume_command, usage_error=resume.error)

    wait = commands.add_parser(
        "wait",
        help="wait until the Slurm jobs of an experiment's runs have ended, then print its table",
        description="Follow the runs of EXP_DIR handed to Slurm jobs by a process that did not wait for them "
        "(execution.slurm.wait=false), with their progress bars, until each has ended; then print the "
        "final-performance table. Ctrl-C stops the waiting, not the jobs.",
    )
    wait.add_argument("exp_dir", metavar="EXP_DIR", help="the experiment directory")
    wait.add_argument(
        "--poll",
        type=_positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="seconds between two looks at squeue (default: 2)",
    )
    wait.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    wait.set_defaults(handler=wait_command)

    show = commands.add_parser(
        "show",
        help="print the final-performance table of an experiment on disk",
        description="Print each run's final return and the mean, median and IQM across runs with 95% bootstrap CIs.",
    )
    show.add_argument("exp_dir", metavar="EXP_DIR", help="experiment directory, or a sweep of them")
    show.add_argument(
        "--last-k",
        type=_positive_int,
        default=None,
        metavar="K",
        help="episodes averaged per run (default: last_k of EXP_DIR/config.yaml, else 10)",
    )
    show.add_argument(
        "--include-unfinished",
        action="store_true",
        help="include failed, interrupted and pending runs in the statistics (listed, but left out, by default)",
    )
    _add_score(show)
    show.set_defaults(handler=show_command)

    report = commands.add_parser(
        "report",
        help="write learning curves (PNG) and a final-performance summary (Markdown)",
        description="Plot the learning curves (IQM across runs, 95% CI) of the experiments and write a "
        "Markdown table of their final performance; existing report files are replaced. Curves cover "
        "the whole range some run covers (thin where fewer runs have data; never extrapolated). Runs "
        "that did not finish are listed but left out unless --include-unfinished.",
    )
    report.add_argument("exp_dirs", metavar="EXP_DIR", nargs="+", help="experiment directories, or sweeps of them")
    report.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="output directory (default: EXP_DIR, or the common parent of several)",
    )
    report.add_argument(
        "--x",
        choices=("global_step", "episode_index"),
        default=None,
        help="x axis of the curves (default: follows the budget: episode_index for an episode "
        "budget, else global_step)",
    )
    report.add_argument(
        "--last-k",
        type=_positive_int,
        default=None,
        metavar="K",
        help="episodes averaged per run (default: last_k of the configs, else 10)",
    )
    report.add_argument(
        "--smooth",
        type=_positive_int,
        default=None,
        metavar="N",
        help="average each run's returns over a trailing window of N episodes before plotting "
        "(default: K of --last-k, the window compare uses; 1 draws the raw returns)",
    )
    report.add_argument(
        "--common-range",
        action="store_true",
        help="cut each curve to the x range every run of it covers (default: the whole range some run covers)",
    )
    report.add_argument(
        "--ylim",
        type=float,
        nargs=2,
        default=None,
        metavar=("LOW", "HIGH"),
        help="y axis limits (default: the full range, cut with a note when early returns are "
        "extreme next to the last half of training)",
    )
    report.add_argument(
        "--yscale",
        choices=("auto", "linear", "symlog"),
        default="auto",
        help="y axis scale; symlog shows extreme early returns and the converged ones together "
        "(default auto: linear, unless the default y range would hide over half the curve)",
    )
    report.add_argument(
        "--include-unfinished",
        action="store_true",
        help="include failed, interrupted and pending runs in the curves and statistics",
    )
    _add_score(report)
    report.set_defaults(handler=report_command)

    _add_compare(commands)

    evaluate = commands.add_parser(
        "eval",
        help="evaluate the saved checkpoints of an experiment greedily",
        description="Rebuild each run's agent from its checkpoint (with the env and agent of EXP_DIR/config.yaml), "
        "play greedy episodes on an env seeded with the run's eval seed, write "
        "EXP_DIR/evaluation_WHICH.csv and print each run's mean return and the mean, median and IQM "
        "across runs with 95% bootstrap CIs.",
    )
    evaluate.add_argument("exp_dir", metavar="EXP_DIR", help="an experiment directory made by 'run'")
    evaluate.add_argument(
        "--which", choices=("last", "best", "all"), default="last", help="checkpoints to evaluate (default: last)"
    )
    evaluate.add_argument(
        "--episodes", type=_positive_int, default=100, metavar="N", help="episodes per checkpoint (default: 100)"
    )
    evaluate.add_argument("--workers", type=_positive_int, default=1, metavar="N", help="worker processes")
    evaluate.add_argument("--overwrite", action="store_true", help="replace an earlier evaluation_WHICH.csv")
    evaluate.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    evaluate.set_defaults(handler=eval_command)
    return parser


def _add_score(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--score",
        choices=("return", "raw"),
        default=None,
        help="what a run's returns are: 'return', the sums of the rewards the agent learned from, or 'raw', the "
        "env's raw scores its RecordEpisodeStatistics recorded (default: raw for experiments run with "
        "records.score=raw, else return)",
    )


def _add_compare(commands: argparse._SubParsersAction) -> None:
    compare = commands.add_parser(
        "compare",
        help="is A better than B? aggregate metrics, probability of improvement, profiles (Markdown, PNG)",
        description="Compare experiments with the statistics of Agarwal et al. (2021): IQM, mean, median and "
        "optimality gap per candidate, the probability of improvement of each pair, performance "
        "profiles and sample-efficiency curves, each with a 95% stratified-bootstrap CI over runs "
        "(seeds). Writes comparison.md and one PNG per figure; existing files are replaced.",
        epilog="Each DIR is a candidate named by its directory; a sweep directory makes each configuration a "
        "candidate. Tasks (envs) are matched by env id.",
    )
    compare.add_argument("dirs", metavar="DIR", nargs="+", help="experiment directories, or sweeps of them")
    compare.add_argument(
        "--out", metavar="DIR", default=None, help="output directory (default: DIR, or the common parent of several)"
    )
    compare.add_argument(
        "--by",
        metavar="COLUMN",
        action="append",
        default=None,
        help="hyperparameter whose values are the candidates (repeat for several)",
    )
    compare.add_argument(
        "--source",
        choices=("episodes", "eval"),
        default="episodes",
        help="score of a run: its last training episodes (default) or its last evaluation",
    )
    compare.add_argument(
        "--last-k",
        type=_positive_int,
        default=None,
        metavar="K",
        help="training episodes averaged into a run's score (default: last_k of the configs, else 10)",
    )
    compare.add_argument(
        "--normalize",
        metavar="SPEC",
        action="append",
        default=None,
        help="minmax, RANDOM,REFERENCE, or ENV_ID=RANDOM,REFERENCE once per env: scores per "
        "task as (score - random) / (reference - random)",
    )
    compare.add_argument(
        "--optimality-threshold",
        type=float,
        default=None,
        metavar="SCORE",
        help="optimal score of the optimality gap (default: 1 with --normalize, else none)",
    )
    compare.add_argument(
        "--metric",
        choices=("iqm", "mean", "median"),
        default="iqm",
        help="statistic whose difference decides whether candidates can be told apart",
    )
    compare.add_argument(
        "--resamples", type=_positive_int, default=10_000, metavar="N", help="bootstrap resamples (default: 10000)"
    )
    compare.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    compare.add_argument(
        "--include-unfinished", action="store_true", help="include failed, interrupted and pending runs"
    )
    compare.set_defaults(handler=compare_command)


@contextlib.contextmanager
def _deprecations_said() -> Iterator[None]:
    """Print the package's deprecation warnings (a config's flat keys) as ``online-trainer: warning: ...``.

    Python hides a DeprecationWarning raised outside ``__main__``, so the command said nothing of them.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("default", message=_DEPRECATED, category=DeprecationWarning)
        shown = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if issubclass(category, DeprecationWarning) and re.match(_DEPRECATED, str(message)):
                print(f"{PROG}: warning: {message}", file=sys.stderr)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


_DEPRECATED = ".* is deprecated and will be removed"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    # Line by line, as stderr: redirected to one file with it (`> log 2>&1`), what is printed to stdout keeps its
    # place among the messages and logs, instead of coming after them all at the exit (S17).
    if isinstance(sys.stdout, io.TextIOWrapper):  # not a stream a caller replaced it with
        sys.stdout.reconfigure(line_buffering=True)
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        args.standalone = argv is None  # the process's own command line, not a call from Python (tests)
        if args.command == "run" and args.config is None:
            args.usage_error("the following arguments are required: CONFIG")
        if extra:  # argparse ends a positional list at the first option: `run C --no-progress k=v` leaves k=v over
            if args.command == "run" and all("=" in item and not item.startswith("-") for item in extra):
                args.overrides = [*args.overrides, *extra]
            elif args.command == "resume" and any("=" in item and not item.startswith("-") for item in extra):
                args.usage_error(
                    f"resume takes no overrides ({' '.join(extra)}): it runs what EXP_DIR/config.yaml says. Its "
                    "execution section (workers, backend, threads) may change: edit it in that file, then resume. "
                    "To run other settings, use: online-trainer run EXP_DIR/config.yaml KEY=VALUE exp_dir=<another path>"
                )
            else:
                getattr(args, "usage_error", parser.error)(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help, or a usage error argparse has already printed
        return exc.code if isinstance(exc.code, int) else USAGE_ERROR
    if os.getcwd() not in sys.path and "" not in sys.path:
        # a config's 'module:Name' (agent.name, env.id, env.wrappers) may name a module of the directory the command
        # runs in, as under `python -m online_trainer`; last, so that it never hides an installed package. Worker
        # processes start with this path.
        sys.path.append(os.getcwd())
    level = (logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        with _deprecations_said():
            return args.handler(args)
    except USER_ERRORS as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; the runs' flushed records are on disk.", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `online-trainer show DIR | head`: the reader has what it wanted
        # Python's recipe: what is left in stdout's buffer would fail again at exit, so it goes to devnull
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
