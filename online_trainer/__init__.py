"""online_trainer: run online RL experiments over many seeds.

``OnlineTrainer(env, agent, exp_dir=...).multi_run(num_runs, num_episodes=... | total_steps=...)``
"""

from online_trainer.dataframes import load_episodes
from online_trainer.errors import RunFailure, RunsFailedError
from online_trainer.plotting import plot_final_performance, plot_learning_curves
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
from online_trainer.stats import aggregate, curves, final_performance, iqm, summarize
from online_trainer.trainer import OnlineTrainer

__all__ = [
    "Agent",
    "OnlineTrainer",
    "RunFailure",
    "RunsFailedError",
    "TruncatedMetricsWarning",
    "aggregate",
    "curves",
    "final_performance",
    "iqm",
    "load_agent_logs",
    "load_all_run_metrics",
    "load_args",
    "load_config",
    "load_episodes",
    "load_run_metrics",
    "load_transitions",
    "plot_final_performance",
    "plot_learning_curves",
    "summarize",
]
