"""Evaluating the saved checkpoints of a finished experiment, every run at once.

Each (run, checkpoint) becomes a spec that builds the agent from the checkpoint and plays
greedy episodes on an env seeded with the run's eval seed, exactly as evaluations during
training do: the last checkpoint's result equals the run's final evaluation.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from online_trainer import executors, storage, validation
from online_trainer.checkpoints import WHICH, CheckpointAgent, checkpoints
from online_trainer.errors import RunsFailedError, RunSetupError
from online_trainer.evaluation import eval_seed
from online_trainer.executors import ExecutionOptions
from online_trainer.factories import AgentFactory
from online_trainer.lock import ExperimentLock
from online_trainer.loop import Budget
from online_trainer.run import RunResult, RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from online_trainer.planning import RunnerParts

COLUMNS = ["run", "seed", "checkpoint", "episode", "ep_return", "ep_length"]


def evaluation_path(exp_dir: str | os.PathLike, which: str) -> Path:
    """Where :func:`evaluate_checkpoints` writes its results: ``exp_dir/evaluation_{which}.csv``."""
    return Path(exp_dir) / f"evaluation_{which}.csv"


def evaluate_checkpoints(parts: "RunnerParts", exp_dir: str | os.PathLike, which: str, num_episodes: int,
                         execution: ExecutionOptions, overwrite: bool = False) -> "pd.DataFrame":
    """Evaluate the ``which`` checkpoints of every finished run of ``exp_dir``; see :meth:`OnlineTrainer.evaluate`."""
    import pandas as pd

    exp_dir = Path(exp_dir)
    num_episodes = validation.positive_int("num_episodes", num_episodes)
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, but got which={which!r}.")
    out = evaluation_path(exp_dir, which)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} holds an earlier evaluation: pass overwrite=True to replace it.")
    manifest = storage.read_manifest(exp_dir)
    base = parts.agent_factory
    specs = []
    for entry in manifest["runs"]:
        if entry["status"] != "finished":
            continue
        for label, path in checkpoints(exp_dir, entry["run"], which):
            loader = CheckpointAgent(lambda env, base=base: base(env, copy=base.is_instance), path)
            specs.append(RunSpec(
                run_idx=entry["run"], seed=eval_seed(entry["seed"]), env_factory=parts.env_factory,
                agent_factory=AgentFactory(loader), budget=Budget(num_episodes=num_episodes),
                callback=parts.callback, train=False, keep_agent=False, exp_dir=None, dump_metrics=False,
                eval_env_factory=parts.eval_env_factory, eval_episodes=num_episodes, eval_only=True,
                task_id=len(specs), label=f"run {entry['run']} {label}", checkpoint=label,
            ))
    if not specs:
        raise FileNotFoundError(f"{exp_dir} has no finished run to evaluate.")
    results: list[tuple[RunSpec, RunResult]] = []
    by_key = {spec.key: spec for spec in specs}
    with ExperimentLock(exp_dir):
        try:
            executors.execute(specs, execution.capped(len(specs)), lambda r: _collect(r, by_key, results))
        except RunSetupError as error:
            raise error.cause from None
        rows = [[spec.run_idx, manifest["runs"][spec.run_idx - 1]["seed"], spec.checkpoint, k + 1, ret, length]
                for spec, result in sorted(results, key=lambda item: item[0].key) if result.status == "finished"
                for k, (ret, length) in enumerate(zip(result.evaluations[0]["returns"],
                                                      result.evaluations[0]["lengths"]))]
        text = io.StringIO()
        csv.writer(text).writerows([COLUMNS, *rows])
        storage.write_atomic(out, text.getvalue().encode())
    failures = [r for _, r in results if r.status != "finished"]
    if failures:
        from online_trainer.errors import RunFailure

        raise RunsFailedError([RunFailure(r.run_idx, r.seed, r.extra.get("exception", "?"), r.error or "")
                               for r in failures])
    return pd.DataFrame(rows, columns=COLUMNS)


def _collect(result: RunResult, by_key: dict[int, RunSpec], results: list[tuple[RunSpec, RunResult]]) -> None:
    result.raise_if_setup_failed()
    results.append((by_key[result.key], result))
