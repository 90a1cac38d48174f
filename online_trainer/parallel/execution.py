"""What every executor shares: the execution options, the handler types and failed results.

:class:`ExecutionOptions` is declared with the other option groups in :mod:`online_trainer.options.groups`
(the command's config reads it too) and imported from here as before.

It imports nothing of :mod:`online_trainer.parallel`: the serial, worker-pool and Ray executors
import it, and :mod:`online_trainer.parallel.executors` dispatches to them.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from online_trainer.errors import RunSetupError
from online_trainer.loop.steps import failed_at
from online_trainer.options.groups import BACKENDS, ExecutionOptions, SlurmOptions  # noqa: F401  (imported from here too)
from online_trainer.parallel import shipping
from online_trainer.run.one_run import HOOK_NOTE, RunResult, RunSpec, records_of_failed

logger = logging.getLogger(__name__)

ResultHandler = Callable[[RunResult], None]
StartHandler = Callable[[RunSpec], None]


def resolve_execution(execution: ExecutionOptions | None, **keywords: Any) -> ExecutionOptions:
    """``execution`` (default: ``ExecutionOptions()``) with the keywords that were given (not None) applied.

    ``multi_run``'s positional ``num_workers`` (the original's) and ``execution.num_workers`` say the same: a
    keyword fills a field that ``execution`` was built without, and must agree with one it was given (even
    at its default: ``ExecutionOptions(num_workers=1)`` with ``num_workers=2`` is refused).

    Raises:
        TypeError: ``execution`` is not an :class:`ExecutionOptions`.
        ValueError: a keyword disagrees with the same field set in ``execution``, or a value is invalid.
    """
    if execution is not None and not isinstance(execution, ExecutionOptions):
        raise TypeError(
            f"execution must be an ExecutionOptions, but got execution={execution!r}: use "
            "execution=ExecutionOptions(num_workers=2, ...) from online_trainer."
        )
    given = {name: value for name, value in keywords.items() if value is not None}
    checks = {spec.name: spec.metadata.get("check") for spec in dataclasses.fields(ExecutionOptions)}
    for name, value in given.items():  # named as the caller spelled it: num_workers=0, not execution.num_workers=0
        check = checks.get(name)
        if check is not None:
            given[name] = check(name, value)
    if execution is None:
        return ExecutionOptions(**given)
    default = ExecutionOptions()
    for name, value in given.items():
        if getattr(execution, name) != value and (
            execution.given(name) or getattr(execution, name) != getattr(default, name)
        ):
            raise ValueError(
                f"{name}={value!r} disagrees with execution.{name}={getattr(execution, name)!r}: "
                f"give {name} once, either as a keyword or in execution=ExecutionOptions(...)."
            )
    return dataclasses.replace(execution, **given)


def failed_result(
    spec: RunSpec, exc: BaseException | str, keep_exception: bool = False, stopped_by: BaseException | None = None
) -> RunResult:
    """The result of a run that raised ``exc`` (or died, described by a string).

    A :class:`RunSetupError` (raised before the run's first env step) gives the status
    ``setup_failed`` and describes its cause; the cause travels with the result when it can
    be pickled, so that the parent can raise it. ``stopped_by``: the exception that ended the
    run's loop, when a string describes the failure (where the run stood is taken from it).
    """
    setup = isinstance(exc, RunSetupError)
    cause = exc.cause if isinstance(exc, RunSetupError) else exc
    if isinstance(cause, BaseException):
        summary = " ".join(
            [f"{type(cause).__name__}: {cause}"]
            + [note for note in getattr(cause, "__notes__", ()) if str(note).startswith(HOOK_NOTE)]
        )
        error = "".join(traceback.format_exception(cause))
    else:
        summary = error = cause
    extra: dict[str, Any] = {"exception": summary}
    if keep_exception or (setup and _picklable(cause)):
        extra["exception_object"] = cause
    # how far the run got, when it raised in its loop (else its records and full checkpoint tell the manifest)
    source = cause if isinstance(cause, BaseException) else stopped_by
    position = failed_at(source) if source is not None else None
    global_step, episodes, wall_time = (*position, 0.0)[:3] if position else (0, 0, 0.0)
    return RunResult(
        run_idx=spec.run_idx,
        seed=spec.seed,
        records=records_of_failed(cause) if isinstance(cause, BaseException) else None,  # exp_dir=None only
        key=spec.key,
        episodes=int(episodes),
        global_step=int(global_step),
        wall_time=float(wall_time),
        status="setup_failed" if setup else "failed",
        error=error,
        extra=extra,
    )


def _picklable(obj: Any) -> bool:
    try:
        shipping.dumps(obj)
    except Exception:
        return False
    return True


def _unshippable(name: str, obj: Any) -> tuple[str, Any, Exception] | None:
    """``(name, object, error)`` of what in ``obj`` does not pickle: the item of a list or tuple that does not (one
    hook of several, ``hooks[1]``), else ``obj`` itself; None when it pickles."""
    try:
        shipping.dumps(obj)
    except Exception as exc:
        if isinstance(obj, (list, tuple)):
            for index, item in enumerate(obj):
                found = _unshippable(f"{name}[{index}]", item)
                if found is not None:
                    return found
        # without its traceback: its frames (back to the caller's, which holds the error) would make a cycle with the
        # object in it, which only the garbage collector frees, in any order: an AsyncVectorEnv's pipes were closed
        # before the env, whose __del__ then printed an OSError at the user's exit
        return name, obj, exc.with_traceback(None)
    return None


def check_picklable(objects: Mapping[str, Any], backend: str = "processes") -> None:
    """Raise TypeError naming the first object that cannot travel to a worker process (a Ray task, a Slurm job).

    ``backend``: where the runs go, for the message: ``num_workers=1`` runs them here only without
    Ray or Slurm, whose runs always travel.
    """
    where = {"slurm": "Slurm jobs", "ray": "Ray tasks"}.get(backend, "worker processes")
    here = "" if backend in ("slurm", "ray") else ", or use num_workers=1"
    for given, value in objects.items():
        found = _unshippable(given, value)
        if found is not None:
            name, obj, exc = found
            fix = (
                "Create a hook's locks, open files, threads and processes in its on_run_start, not in its __init__"
                if name.startswith("hooks")
                else "Open a sink's files and connections on its first write, in the process that writes, and list "
                "the attributes holding them in its _unpicklable (see docs/how-to/write-a-sink.md)"
                if name.startswith("trainer.call_back")
                else "Pass a factory that builds it inside the worker (for envs: online_trainer.envs.make_env(...) "
                "or a function returning gym.make_vec(...)), keep locks, open files and processes out of it"
            )
            raise TypeError(
                f"{name}={obj!r} cannot be sent to {where} ({type(exc).__name__}: {exc}). {fix}{here}."
            ) from exc


def no_start(spec: RunSpec) -> None:
    """The ``on_start`` handler that records nothing."""


def refuse_while_importing_main(call: str) -> None:
    """Raise RuntimeError when ``call`` runs in a worker process that is importing the main script to start.

    Worker processes of the spawn and forkserver start methods import the main script again; a script that
    calls ``multi_run`` at its top level, outside ``if __name__ == "__main__":``, calls it again in each of
    them. That call found the experiment locked by the parent and died, and the parent reported failed runs,
    or a sweep with no episode to rank, without a word of the guard (an outside tester's find). Python's
    multiprocessing marks a process importing the main script to start with ``_inheriting``.
    """
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            f"{call}() was called while a worker process started: worker processes start by importing your main "
            f"script again, and it calls {call}() at its top level. Put the code that calls {call}() under "
            '`if __name__ == "__main__":` (a notebook needs nothing).'
        )
