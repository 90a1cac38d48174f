"""Where runs execute: here, in worker processes, or as Ray tasks.

Every executor isolates failures (a run that raises becomes a failed :class:`RunResult`;
the others go on), reports progress to the parent's display and hands each result to
``on_result`` as soon as it is known.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any, Callable, Mapping, Sequence

import cloudpickle

from online_trainer.progress import NoProgress, ProgressDisplay
from online_trainer.run import RunResult, RunSpec, execute_run

logger = logging.getLogger(__name__)

ResultHandler = Callable[[RunResult], None]
BACKENDS = ("local", "ray")


def failed_result(spec: RunSpec, exc: BaseException | str, keep_exception: bool = False) -> RunResult:
    """The result of a run that raised ``exc`` (or died, described by a string)."""
    if isinstance(exc, BaseException):
        summary = f"{type(exc).__name__}: {exc}"
        error = "".join(traceback.format_exception(exc))
    else:
        summary = error = exc
    extra: dict[str, Any] = {"exception": summary}
    if keep_exception:
        extra["exception_object"] = exc
    return RunResult(run_idx=spec.run_idx, seed=spec.seed, records=None, status="failed", error=error, extra=extra)


def check_picklable(objects: Mapping[str, Any]) -> None:
    """Raise TypeError naming the first object that cannot travel to a worker process."""
    for name, obj in objects.items():
        try:
            cloudpickle.dumps(obj)
        except Exception as exc:
            raise TypeError(
                f"{name}={obj!r} cannot be sent to worker processes ({type(exc).__name__}: {exc}). Pass a factory "
                "that builds it inside the worker (for envs: envs.make_env(...) or a function returning "
                "gym.make_vec(...)), keep locks, open files and processes out of it, or use num_workers=1."
            ) from exc


def run_serial(specs: Sequence[RunSpec], display: ProgressDisplay | NoProgress, on_result: ResultHandler) -> None:
    """Run every spec here, one after another; a failing run does not stop the others."""
    for spec in specs:
        try:
            result = execute_run(spec, display)
        except Exception as exc:  # isolated: reported with the others at the end
            logger.error("run %d (seed %d) failed: %s", spec.run_idx, spec.seed, exc)
            result = failed_result(spec, exc, keep_exception=True)
        display.run_finished(spec.run_idx, result.status == "failed")
        on_result(result)
