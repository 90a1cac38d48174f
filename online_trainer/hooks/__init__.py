"""Hooks: react to a run's events (stop early, change the env on a schedule, log what you need).

A hook is any object with some of ``on_run_start(ctx)``, ``on_step(ctx)``, ``on_episode_end(ctx, record)``,
``on_eval(ctx, result)``, ``on_checkpoint(ctx, path)`` and ``on_run_end(ctx)``; pass hooks to
``OnlineTrainer.multi_run(..., hooks=[...])`` or ``sweep(..., hooks=[...])``. Each run gets its own
copy of each hook. ``ctx`` (a :class:`RunContext`) gives the run, its seed, the global step, the
episodes finished, the env, the agent, the run's ``exp_dir``, a generator seeded from the run's seed
(``ctx.rng``), ``ctx.log(data)`` and ``ctx.stop(reason)``.

Order at each event: the built-in jobs first (the metrics stream, the callback's episode logs,
evaluation, checkpoints, progress, then the built-in :class:`RunStats`), then the user's hooks
in the order given.
"""

from online_trainer.core.hooks import Hook, RunContext
from online_trainer.core.run_stats import RunStats
from online_trainer.core.stoppers import StopOnNoImprovement, StopOnPlateau, StopOnReturn

__all__ = ["Hook", "RunContext", "RunStats", "StopOnNoImprovement", "StopOnPlateau", "StopOnReturn"]
