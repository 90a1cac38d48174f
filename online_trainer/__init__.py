"""online_trainer: run online RL experiments over many seeds.

``OnlineTrainer(env, agent, exp_dir=...).multi_run(num_runs, num_episodes=... | total_steps=...)``
"""

import importlib
from typing import Any

from online_trainer.errors import ExperimentInUseError, RunFailure, RunsFailedError
from online_trainer.protocol import Agent
from online_trainer.storage import (
    TruncatedMetricsWarning,
    load_agent_logs,
    load_all_run_metrics,
    load_args,
    load_config,
    load_run_metrics,
    load_transitions,
)
from online_trainer.trainer import OnlineTrainer

# Analysis pulls in pandas, scipy and matplotlib: imported on first use, so that worker
# processes, which import this package to run, start quickly.
_LAZY = {
    "aggregate": "online_trainer.stats",
    "curves": "online_trainer.stats",
    "final_performance": "online_trainer.stats",
    "iqm": "online_trainer.stats",
    "load_agent": "online_trainer.checkpoints",
    "load_episodes": "online_trainer.dataframes",
    "load_evaluations": "online_trainer.dataframes",
    "load_runs": "online_trainer.dataframes",
    "optuna_objective": "online_trainer.optuna_search",
    "plot_final_performance": "online_trainer.plotting",
    "plot_learning_curves": "online_trainer.plotting",
    "shutdown_workers": "online_trainer.workers",
    "summarize": "online_trainer.stats",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'online_trainer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "Agent",
    "ExperimentInUseError",
    "OnlineTrainer",
    "RunFailure",
    "RunsFailedError",
    "TruncatedMetricsWarning",
    "aggregate",
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
    "plot_final_performance",
    "plot_learning_curves",
    "shutdown_workers",
    "summarize",
]
