"""Hooks: react to a run's events (stop early, change the env on a schedule, log what you need).

A hook is any object with some of ``on_run_start(ctx)``, ``on_step(ctx)``,
``on_episodes(ctx, first_index, returns, lengths)`` (the episodes that ended at one env step, batched),
``on_episode_end(ctx, record)``, ``on_eval(ctx, result)``, ``on_checkpoint(ctx, path)`` and
``on_run_end(ctx)``; pass hooks to
``OnlineTrainer.multi_run(..., hooks=[...])`` or ``sweep(..., hooks=[...])``. Each run gets its own
copy of each hook. ``ctx`` (a :class:`RunContext`) gives the run, its seed, the global step, the
episodes finished, the env, the agent, the run's ``exp_dir``, a generator seeded from the run's seed
(``ctx.rng``), ``ctx.log(data)`` and ``ctx.stop(reason)``.

The runner's own jobs are hooks of this interface, called first at each event, in this order: the
metrics stream, the callback's episode logs, evaluation, checkpoints and the best state, progress,
then the built-in :class:`RunStats`; then the user's hooks in the order given (so a user's ``on_eval``
and ``on_checkpoint`` see each evaluation and checkpoint once written, and its ``on_run_end`` comes
after the final evaluation and checkpoints). See :mod:`online_trainer.run.hook_runner`.
"""

from online_trainer.hooks.stoppers import StopOnNoImprovement, StopOnPlateau, StopOnReturn
from online_trainer.loop.hook_protocol import Hook, RunContext
from online_trainer.run.builtin.run_stats import RunStats

__all__ = ["Hook", "RunContext", "RunStats", "StopOnNoImprovement", "StopOnPlateau", "StopOnReturn"]
