"""online_trainer: run online RL experiments over many seeds.

``OnlineTrainer(env, agent, exp_dir=...).multi_run(num_runs, num_episodes=... | total_steps=...)``
"""

import importlib
import time
from typing import Any

from online_trainer.errors import (
    ExperimentExistsError,
    ExperimentInUseError,
    Preempted,
    RunFailure,
    RunsFailedError,
    SlurmSubmissionError,
)
from online_trainer.loop.protocol import Agent
from online_trainer.options.groups import CheckpointOptions, EvaluationOptions, ExecutionOptions, RecordOptions
from online_trainer.records.record_view import RunRecords
from online_trainer.records.storage import (
    TruncatedMetricsWarning,
    load_agent_logs,
    load_all_run_metrics,
    load_args,
    load_config,
    load_run_metrics,
    load_transitions,
)

_imported_at = time.time()
"""When this process imported the package: a source file of it changed since is not what this process runs."""

# Imported on first use, so that worker processes, which import this package to reach the
# lower layers (records, loop, options, run) and online_trainer.parallel, load neither the
# orchestration layer nor analysis (pandas, scipy, matplotlib).
_LAZY = {
    "OnlineTrainer": "online_trainer.orchestration.trainer",
    "SlurmOptions": "online_trainer.parallel.execution",
    "SlurmRuns": "online_trainer.parallel.slurm_handle",
    "aggregate": "online_trainer.analysis.stats",
    "compare": "online_trainer.analysis.compare",
    "curves": "online_trainer.analysis.stats",
    "final_performance": "online_trainer.analysis.stats",
    "iqm": "online_trainer.analysis.stats",
    "load_agent": "online_trainer.orchestration.checkpoint_eval",
    "load_episodes": "online_trainer.analysis.dataframes",
    "load_evaluations": "online_trainer.analysis.dataframes",
    "load_runs": "online_trainer.analysis.dataframes",
    "optuna_objective": "online_trainer.orchestration.optuna_search",
    "plot_evaluation_curves": "online_trainer.analysis.evaluation_curves",
    "plot_final_performance": "online_trainer.analysis.plotting",
    "plot_learning_curves": "online_trainer.analysis.plotting",
    "shutdown_workers": "online_trainer.parallel.workers",
    "summarize": "online_trainer.analysis.stats",
}


def __getattr__(name: str) -> Any:
    if name == "RunOptions":  # the previous release's; deprecated (it warns when called)
        from online_trainer.options.derived import RunOptions

        return RunOptions
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'online_trainer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Agent",
    "CheckpointOptions",
    "EvaluationOptions",
    "ExecutionOptions",
    "ExperimentExistsError",
    "ExperimentInUseError",
    "OnlineTrainer",
    "Preempted",
    "RecordOptions",
    "RunFailure",
    "RunRecords",
    "RunsFailedError",
    "SlurmOptions",
    "SlurmRuns",
    "SlurmSubmissionError",
    "TruncatedMetricsWarning",
    "aggregate",
    "compare",
    "curves",
    "final_performance",
    "iqm",
    "load_agent",
    "load_agent_logs",
    "load_all_run_metrics",
    "load_args",
    "load_config",
    "load_episodes",
    "load_evaluations",
    "load_run_metrics",
    "load_runs",
    "load_transitions",
    "optuna_objective",
    "plot_evaluation_curves",
    "plot_final_performance",
    "plot_learning_curves",
    "shutdown_workers",
    "summarize",
]
