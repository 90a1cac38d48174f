"""Evaluating the saved checkpoints of a finished experiment, every run at once, and loading one run's agent.

Each (run, checkpoint) becomes a spec that builds the agent from the checkpoint and plays
greedy episodes on an env seeded with the run's eval seed, exactly as evaluations during
training do: the last checkpoint's result equals the run's final evaluation.
"""

from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from online_trainer.config.builders import factories_from_config
from online_trainer.errors import RunsFailedError, value_error
from online_trainer.experiment import ownership
from online_trainer.experiment.checkpoint_files import WHICH, CheckpointAgent, checkpoints
from online_trainer.experiment.lock import hold_lock
from online_trainer.experiment.resuming import CALL_KEY
from online_trainer.loop.evaluation import eval_seed
from online_trainer.loop.factories import AgentFactory, EnvFactory
from online_trainer.loop.normalization import read_statistics
from online_trainer.loop.protocol import Agent, AgentMaker, EnvLike
from online_trainer.options import validation
from online_trainer.options.groups import EvaluationOptions, RecordOptions, RunPlan
from online_trainer.orchestration.planning import RunnerParts, run_experiments
from online_trainer.parallel.execution import ExecutionOptions
from online_trainer.records import storage
from online_trainer.run.one_run import COMPLETED, RunResult, RunSpec

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ["run", "seed", "checkpoint", "episode", "ep_return", "ep_length"]
logger = logging.getLogger(__name__)


def evaluation_path(exp_dir: str | os.PathLike, which: str) -> Path:
    """Where :func:`evaluate_checkpoints` writes its results: ``exp_dir/evaluation_{which}.csv``."""
    return Path(exp_dir) / f"evaluation_{which}.csv"


def evaluate_checkpoints(
    parts: RunnerParts,
    exp_dir: str | os.PathLike,
    which: str,
    num_episodes: int,
    execution: ExecutionOptions,
    overwrite: bool = False,
) -> pd.DataFrame:
    """Evaluate the ``which`` checkpoints of every run of ``exp_dir`` that ended (finished, or stopped early by a hook);
    see :meth:`OnlineTrainer.evaluate`."""
    execution.check_waits("evaluate")
    import pandas as pd

    exp_dir = Path(exp_dir)
    num_episodes = validation.positive_int("num_episodes", num_episodes)
    overwrite = validation.boolean("overwrite", overwrite)
    if which not in WHICH:
        raise value_error(which, str)(f"which must be one of {WHICH}, but got which={which!r}.")
    out = evaluation_path(exp_dir, which)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} holds an earlier evaluation: pass overwrite=True to replace it.")
    manifest = storage.read_manifest(exp_dir)
    ownership.settle_running(exp_dir, manifest)  # "running" runs of a writer that died are interrupted ones
    base = parts.agent_factory
    call = manifest.get(CALL_KEY, {})
    score = call.get(
        "records.score", call.get("score", "return")
    )  # a score="raw" experiment is evaluated on raw scores
    options = RunPlan(
        num_episodes=num_episodes,
        evaluation=EvaluationOptions(episodes=num_episodes),
        dump_metrics=False,
        records=RecordOptions(keep_agents=False, score=score),
        has_exp_dir=False,
    )
    specs: list[RunSpec] = []
    ended = [entry for entry in manifest["runs"] if entry["status"] in COMPLETED]
    others = ", ".join(f"run {e['run']} ({e['status']})" for e in manifest["runs"] if e["status"] not in COMPLETED)
    if not ended:
        raise FileNotFoundError(
            f"{exp_dir} has no run that ended (finished, or stopped early by a hook) to evaluate: {others}. "
            "Resume the experiment first (multi_run(..., resume=True), or online-trainer resume)."
        )
    if others:
        logger.warning("Evaluating the runs that ended; left out: %s.", others)
    for entry in ended:
        for label, path in checkpoints(exp_dir, entry["run"], which):
            loader = CheckpointAgent(lambda env: base(env, copy=base.is_instance), path)
            specs.append(
                RunSpec(
                    run_idx=entry["run"],
                    seed=eval_seed(entry["seed"]),
                    env_factory=parts.env_factory,
                    agent_factory=AgentFactory(loader),
                    options=options,
                    callback=parts.callback,
                    train=False,
                    exp_dir=None,
                    eval_env_factory=parts.eval_env_factory,
                    eval_only=True,
                    task_id=len(specs),
                    label=f"run {entry['run']} {label}",
                    checkpoint=label,
                    observation_statistics=read_statistics(path),
                )
            )
    group = CheckpointEvaluations(exp_dir, specs)

    def write(groups: list[CheckpointEvaluations]) -> list[list[Any]]:
        rows = [
            [spec.run_idx, manifest["runs"][spec.run_idx - 1]["seed"], spec.checkpoint, k + 1, ret, length]
            for spec, result in sorted(group.results, key=lambda item: item[0].key)
            if result.status == "finished"
            and result.evaluations is not None  # a finished evaluation run has its evaluation
            for k, (ret, length) in enumerate(zip(result.evaluations[0]["returns"], result.evaluations[0]["lengths"]))
        ]
        text = io.StringIO()
        csv.writer(text).writerows([COLUMNS, *rows])
        storage.write_atomic(out, text.getvalue().encode())
        return rows

    # the runs log nowhere (callback None) and write nothing but the table, under the experiment's lock
    rows = run_experiments(
        hold_lock(exp_dir), execution.capped(len(specs)), len(specs), lambda created: [group], None, write
    ).finalized
    failures = [r for _, r in group.results if r.status != "finished"]
    if failures:
        from online_trainer.errors import RunFailure

        raise RunsFailedError(
            [RunFailure(r.run_idx, r.seed, r.extra.get("exception", "?"), r.error or "") for r in failures]
        )
    return pd.DataFrame(rows, columns=COLUMNS)


class CheckpointEvaluations:
    """The evaluations of one experiment's checkpoints, as
    :func:`~online_trainer.orchestration.planning.run_experiments` executes them: each result is kept
    with its spec; nothing is written to a manifest."""

    evaluates = True
    """Its runs are evaluations of checkpoints: their seeds are the runs' evaluation seeds (what messages say)."""

    def __init__(self, exp_dir: Path, specs: list[RunSpec]) -> None:
        self.exp_dir: Path | None = exp_dir
        self.specs = specs
        self.results: list[tuple[RunSpec, RunResult]] = []
        self._by_key = {spec.key: spec for spec in specs}

    def on_start(self, spec: RunSpec) -> None:
        """Nothing to record before an evaluation starts."""

    def on_submitted(self, spec: RunSpec, job_id: str) -> None:
        """Nothing to record for a submitted evaluation (its result comes back as any other)."""

    def on_result(self, result: RunResult) -> None:
        """Keep ``result`` with its spec.

        Raises:
            RunSetupError: the evaluation failed before its first env step; every evaluation must stop.
        """
        result.raise_if_setup_failed()
        self.results.append((self._by_key[result.key], result))

    def discard(self) -> None:
        """Nothing of an evaluation is on disk before its table is written."""

    def mark_interrupted(self) -> None:
        """Nothing to mark: an interrupted evaluation writes no table."""

    def kept_runs(self) -> list[int]:
        """None: the evaluations that ended before another failed are in no table."""
        return []


def load_agent(
    exp_dir: str | os.PathLike,
    run: int = 1,
    which: str = "last",
    agent_factory: AgentMaker | None = None,
    env: EnvLike | None = None,
) -> Agent:
    """An agent with run ``run``'s checkpoint loaded (``which``: ``"last"`` or ``"best"``).

    The best checkpoint of a run that did not finish (interrupted, failed) is its best so far: a
    warning says so.

    Args:
        exp_dir: the experiment directory.
        run: the run's number, from 1.
        which: ``"last"`` (the end of training) or ``"best"``.
        agent_factory: ``agent_factory(env) -> agent``; None for an experiment made by the
            ``online-trainer run`` command (built from its ``config.yaml``).
        env: the env handed to the factory (an env or a zero-argument factory); None: from
            ``config.yaml`` too.

    Raises:
        ValueError: ``which`` is ``"all"`` or unknown, or no factory is given for an
            experiment without ``config.yaml``.
        FileNotFoundError: no such checkpoint.
    """
    if which not in ("last", "best"):
        raise ValueError(f"load_agent loads one checkpoint: which must be 'last' or 'best', but got which={which!r}.")
    _check_run(Path(exp_dir), run)
    ((_, path),) = checkpoints(exp_dir, run, which)
    _warn_unfinished(Path(exp_dir), run, which)
    if agent_factory is None or env is None:
        config_env, config_agent = factories_from_config(exp_dir)
        agent_factory, env = agent_factory or config_agent, env if env is not None else config_env
    envs = EnvFactory(env)
    built = envs()
    try:
        return CheckpointAgent(agent_factory, path)(built)
    finally:
        envs.release(built)


def _warn_unfinished(exp_dir: Path, run: int, which: str) -> None:
    """Log a warning when run ``run`` did not finish: its ``which`` checkpoint is from part way through training."""
    manifest = storage.read_manifest(exp_dir)
    ownership.settle_running(exp_dir, manifest)  # "running" runs of a writer that died are interrupted ones
    entry = manifest["runs"][run - 1]
    status = entry.get("status")
    if status in COMPLETED:
        return
    steps = entry.get("global_step")
    where = f" at env step {steps}" if isinstance(steps, int) else ""
    logger.warning(
        "Run %d of %s is %s%s: its %s checkpoint is from part way through training, not from a finished run. %s",
        run,
        os.fspath(exp_dir),
        status,
        where,
        which,
        "It is still running." if status == "running" else "resume=True (online-trainer resume) finishes it.",
    )


def _check_run(exp_dir: Path, run: int) -> None:
    """Raise, saying what to give instead, unless ``exp_dir`` is an experiment with a run ``run``.

    Raises:
        FileNotFoundError: ``exp_dir`` does not exist, or holds no experiment.
        ValueError: ``exp_dir`` is a sweep (its configurations hold the runs), or has no run ``run``.
    """
    if not exp_dir.is_dir():
        raise FileNotFoundError(f"Experiment directory {exp_dir} does not exist.")
    if not (exp_dir / storage.MANIFEST_FILE).is_file():
        configurations = sorted(p.name for p in exp_dir.iterdir() if (p / storage.MANIFEST_FILE).is_file())
        if configurations:
            raise ValueError(
                f"{exp_dir} is a sweep: each of its configurations ({', '.join(configurations)}) is an experiment "
                f"with its own runs. Give one, e.g. load_agent({os.fspath(exp_dir / configurations[0])!r}, run=1, ...)."
            )
        raise FileNotFoundError(f"{exp_dir} holds no experiment (no {storage.MANIFEST_FILE}).")
    num_runs = len(storage.read_manifest(exp_dir)["runs"])
    if isinstance(run, bool) or not isinstance(run, int) or not 1 <= run <= num_runs:
        raise ValueError(f"run={run!r}, but {exp_dir} has runs 1 to {num_runs}: give a run's number, counted from 1.")
