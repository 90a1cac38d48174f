"""Evaluating the saved checkpoints of a finished experiment, every run at once, and loading one run's agent.

Each (run, checkpoint) becomes a spec that builds the agent from the checkpoint and plays
greedy episodes on an env seeded with the run's eval seed, exactly as evaluations during
training do: the last checkpoint's result equals the run's final evaluation.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from online_trainer.config.builders import factories_from_config
from online_trainer.errors import RunSetupError, RunsFailedError
from online_trainer.experiment.checkpoint_files import WHICH, CheckpointAgent, checkpoints
from online_trainer.experiment.lock import ExperimentLock
from online_trainer.experiment.resuming import CALL_KEY
from online_trainer.loop.evaluation import eval_seed
from online_trainer.loop.factories import AgentFactory, EnvFactory
from online_trainer.options import validation
from online_trainer.options.groups import EvaluationOptions, RecordOptions, RunPlan
from online_trainer.parallel import executors
from online_trainer.parallel.execution import ExecutionOptions
from online_trainer.records import storage
from online_trainer.run.one_run import RunResult, RunSpec

if TYPE_CHECKING:
    import pandas as pd

    from online_trainer.orchestration.planning import RunnerParts

COLUMNS = ["run", "seed", "checkpoint", "episode", "ep_return", "ep_length"]


def evaluation_path(exp_dir: str | os.PathLike, which: str) -> Path:
    """Where :func:`evaluate_checkpoints` writes its results: ``exp_dir/evaluation_{which}.csv``."""
    return Path(exp_dir) / f"evaluation_{which}.csv"


def evaluate_checkpoints(parts: "RunnerParts", exp_dir: str | os.PathLike, which: str, num_episodes: int,
                         execution: ExecutionOptions, overwrite: bool = False) -> "pd.DataFrame":
    """Evaluate the ``which`` checkpoints of every finished run of ``exp_dir``; see :meth:`OnlineTrainer.evaluate`."""
    execution.check_waits("evaluate")
    import pandas as pd

    exp_dir = Path(exp_dir)
    num_episodes = validation.positive_int("num_episodes", num_episodes)
    overwrite = validation.boolean("overwrite", overwrite)
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, but got which={which!r}.")
    out = evaluation_path(exp_dir, which)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} holds an earlier evaluation: pass overwrite=True to replace it.")
    manifest = storage.read_manifest(exp_dir)
    base = parts.agent_factory
    call = manifest.get(CALL_KEY, {})
    score = call.get("records.score", call.get("score", "return"))  # a score="raw" experiment is evaluated on raw scores
    options = RunPlan(num_episodes=num_episodes, evaluation=EvaluationOptions(episodes=num_episodes), dump_metrics=False,
                      records=RecordOptions(keep_agents=False, score=score), has_exp_dir=False)
    specs = []
    for entry in manifest["runs"]:
        if entry["status"] != "finished":
            continue
        for label, path in checkpoints(exp_dir, entry["run"], which):
            loader = CheckpointAgent(lambda env, base=base: base(env, copy=base.is_instance), path)
            specs.append(RunSpec(
                run_idx=entry["run"], seed=eval_seed(entry["seed"]), env_factory=parts.env_factory,
                agent_factory=AgentFactory(loader), options=options, callback=parts.callback, train=False,
                exp_dir=None, eval_env_factory=parts.eval_env_factory, eval_only=True,
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


def load_agent(exp_dir: str | os.PathLike, run: int = 1, which: str = "last",
               agent_factory: Callable[[Any], Any] | None = None, env: Any = None) -> Any:
    """An agent with run ``run``'s checkpoint loaded (``which``: ``"last"`` or ``"best"``).

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
    ((_, path),) = checkpoints(exp_dir, run, which)
    if agent_factory is None or env is None:
        config_env, config_agent = factories_from_config(exp_dir)
        agent_factory, env = agent_factory or config_agent, env if env is not None else config_env
    envs = EnvFactory(env)
    built = envs()
    try:
        return CheckpointAgent(agent_factory, path)(built)
    finally:
        envs.release(built)
