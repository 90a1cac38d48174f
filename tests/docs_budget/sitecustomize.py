"""Budgets cut to seconds for the documentation's examples (tests/test_docs_snippets.py).

This folder goes first on ``PYTHONPATH`` of the processes that run the examples, so Python
imports this module at start-up in each of them: the page's own process and the ``online-trainer``
commands its shell blocks run (not their worker processes). Nothing else imports it.

It wraps ``OnlineTrainer.multi_run``, ``sweep`` and ``evaluate`` and ``optuna_objective``: a step
budget above ``STEPS`` becomes ``STEPS`` and an episode budget above ``EPISODES`` becomes
``EPISODES``, with ``eval_freq`` and ``checkpoint_freq`` scaled by the same factor (so an example
still evaluates and checkpoints as often per run); at most ``RUNS`` seeds, ``WORKERS`` workers,
``EVAL_EPISODES`` evaluation episodes, ``TRIALS`` Optuna trials. The cut is idempotent, so a
call that goes through two wrapped functions is cut once; a resumed call is cut as the first
was. The examples' code is left as written.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import sys

STEPS, EPISODES, RUNS, WORKERS, EVAL_EPISODES, TRIALS = 600, 5, 2, 2, 2, 2


def _scaled(value, factor):
    return value if value is None or factor <= 1 else max(1, math.ceil(value / factor))


def cut(arguments: dict) -> None:
    """Cut the budget keywords of one call in place (those the call has)."""
    factor = 1.0
    if arguments.get("total_steps") is not None and arguments["total_steps"] > STEPS:
        factor = arguments["total_steps"] / STEPS
        arguments["total_steps"] = STEPS
    if arguments.get("num_episodes") is not None and arguments["num_episodes"] > EPISODES:
        factor = arguments["num_episodes"] / EPISODES
        arguments["num_episodes"] = EPISODES
    for name in ("eval_freq", "checkpoint_freq"):
        if name in arguments:
            arguments[name] = _scaled(arguments[name], factor)
    for name, cap in (("num_runs", RUNS), ("num_workers", WORKERS), ("eval_episodes", EVAL_EPISODES)):
        if isinstance(arguments.get(name), int) and arguments[name] > cap:
            arguments[name] = cap
    execution = arguments.get("execution")
    if execution is not None and getattr(execution, "num_workers", 1) > WORKERS:
        arguments["execution"] = dataclasses.replace(execution, num_workers=WORKERS)


def wrap(function, evaluation: bool = False):
    signature = inspect.signature(function)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        cut(bound.arguments)
        if evaluation and isinstance(bound.arguments.get("num_episodes"), int):
            bound.arguments["num_episodes"] = min(bound.arguments["num_episodes"], EVAL_EPISODES + 1)
        return function(*bound.args, **bound.kwargs)

    return wrapper


def objective_of_few_trials(make_objective):
    @functools.wraps(make_objective)
    def wrapper(*args, **kwargs):
        objective = wrap(make_objective)(*args, **kwargs)

        def few(trial):
            if trial.number >= TRIALS - 1:
                trial.study.stop()  # the study ends after this trial
            return objective(trial)

        return few

    return wrapper


def install() -> None:
    from online_trainer.orchestration import optuna_search, trainer

    cls = trainer.OnlineTrainer
    cls.multi_run = wrap(cls.multi_run)
    cls.sweep = wrap(cls.sweep)
    cls.evaluate = wrap(cls.evaluate, evaluation=True)
    optuna_search.optuna_objective = objective_of_few_trials(optuna_search.optuna_objective)


# worker processes run what the parent's cut calls planned: they need no wrapping (and start faster without it)
if os.environ.get("ONLINE_TRAINER_DOCS_BUDGET") == "1" and "--multiprocessing-fork" not in sys.argv:
    install()
