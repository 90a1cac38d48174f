"""The runner's own jobs as built-in hooks: metrics stream, episode logs, evaluation, checkpoints, progress, stats, preemption."""
