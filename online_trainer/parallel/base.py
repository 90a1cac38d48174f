"""What every executor shares: the execution options, the handler types and failed results.

It imports nothing of :mod:`online_trainer.parallel`: the serial, worker-pool and Ray executors
import it, and :mod:`online_trainer.parallel.executors` dispatches to them.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import cloudpickle

from online_trainer.core import validation
from online_trainer.core.errors import RunSetupError
from online_trainer.core.run import RunResult, RunSpec

logger = logging.getLogger(__name__)

ResultHandler = Callable[[RunResult], None]
StartHandler = Callable[[RunSpec], None]
BACKENDS = ("local", "ray")


@dataclass(frozen=True, kw_only=True)
class ExecutionOptions:
    """How runs execute; validated when built.

    Raises:
        ValueError: naming the first bad option and its value.
    """

    num_workers: int = 1
    """Runs going at once (worker processes, or Ray tasks in flight); 1 runs them in this process."""
    backend: str = "local"
    """``"local"`` (this process or worker processes) or ``"ray"``."""
    start_method: str = "spawn"
    """Multiprocessing start method of the worker processes; ``"forkserver"`` starts new workers in about
    0.2 s after the session's first call (the server imports torch once)."""
    torch_threads: int | None = 1
    """Threads of every pool (torch, BLAS, OpenMP) of each process running runs, so that N runs at once use N
    cores: each worker process and Ray task, and this process while its runs go (its own settings are given
    back after them). It replaces the ``OMP_NUM_THREADS``-like variables a worker would inherit. None leaves
    the pools as the environment and the libraries set them (one thread per core, by default); the flat
    keyword ``torch_threads=None`` means "not given" (1): pass ``ExecutionOptions(torch_threads=None)``."""
    ray_address: str | None = None
    """Ray cluster address (None: ``RAY_ADDRESS`` or a local Ray). With Ray the experiment directory must
    be on a filesystem all nodes share."""
    ray_resources: Mapping[str, Any] | None = None
    """Ray task options per run, e.g. ``{"num_cpus": 1, "num_gpus": 0.25}``."""
    progress: bool = True
    """Show the progress display."""

    def __post_init__(self) -> None:
        validation.positive_int("num_workers", self.num_workers, "Use 1 to run in this process.")
        validation.optional_positive_int("torch_threads", self.torch_threads)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, but got backend={self.backend!r}.")
        if self.ray_resources is not None and self.backend != "ray":
            raise ValueError(f"ray_resources={dict(self.ray_resources)!r} applies to backend='ray' only, but got "
                             f"backend={self.backend!r}.")
        methods = multiprocessing.get_all_start_methods()
        if self.start_method not in methods:
            raise ValueError(f"start_method must be one of {methods}, but got start_method={self.start_method!r}.")

    def capped(self, num_runs: int) -> "ExecutionOptions":
        """These options with at most ``num_runs`` workers (more would have nothing to do)."""
        if self.num_workers <= num_runs:
            return self
        logger.info("num_workers=%d is more than num_runs=%d: using %d workers", self.num_workers, num_runs, num_runs)
        return dataclasses.replace(self, num_workers=num_runs)

    @property
    def in_workers(self) -> bool:
        """Whether runs leave this process (so what they need must be picklable)."""
        return self.backend == "ray" or self.num_workers > 1


def resolve_execution(execution: ExecutionOptions | None, **keywords: Any) -> ExecutionOptions:
    """``execution`` (default: ``ExecutionOptions()``) with the flat keywords that were given (not None) applied.

    ``multi_run``, ``sweep`` and ``evaluate`` accept both ``execution=ExecutionOptions(...)`` and the
    flat keywords (``num_workers=2, backend="ray"``); this is where they meet.

    Raises:
        TypeError: ``execution`` is not an :class:`ExecutionOptions`.
        ValueError: a flat keyword disagrees with the same field of ``execution``, or a value is invalid.
    """
    if execution is not None and not isinstance(execution, ExecutionOptions):
        raise TypeError(f"execution must be an ExecutionOptions, but got execution={execution!r}: use "
                        "execution=ExecutionOptions(num_workers=2, ...) from online_trainer.")
    given = {name: value for name, value in keywords.items() if value is not None}
    if execution is None:
        return ExecutionOptions(**given)
    for name, value in given.items():
        if getattr(execution, name) != value:
            raise ValueError(f"{name}={value!r} disagrees with execution.{name}={getattr(execution, name)!r}: "
                             f"give {name} once, either as a keyword or in execution=ExecutionOptions(...).")
    return execution


def failed_result(spec: RunSpec, exc: BaseException | str, keep_exception: bool = False) -> RunResult:
    """The result of a run that raised ``exc`` (or died, described by a string).

    A :class:`RunSetupError` (raised before the run's first env step) gives the status
    ``setup_failed`` and describes its cause; the cause travels with the result when it can
    be pickled, so that the parent can raise it.
    """
    setup = isinstance(exc, RunSetupError)
    cause = exc.cause if setup else exc
    if isinstance(cause, BaseException):
        summary = f"{type(cause).__name__}: {cause}"
        error = "".join(traceback.format_exception(cause))
    else:
        summary = error = cause
    extra: dict[str, Any] = {"exception": summary}
    if keep_exception or (setup and _picklable(cause)):
        extra["exception_object"] = cause
    return RunResult(run_idx=spec.run_idx, seed=spec.seed, records=None, key=spec.key,
                     status="setup_failed" if setup else "failed", error=error, extra=extra)


def _picklable(obj: Any) -> bool:
    try:
        cloudpickle.dumps(obj)
    except Exception:
        return False
    return True


def check_picklable(objects: Mapping[str, Any]) -> None:
    """Raise TypeError naming the first object that cannot travel to a worker process."""
    for name, obj in objects.items():
        try:
            cloudpickle.dumps(obj)
        except Exception as exc:
            raise TypeError(
                f"{name}={obj!r} cannot be sent to worker processes ({type(exc).__name__}: {exc}). Pass a factory "
                "that builds it inside the worker (for envs: online_trainer.envs.make_env(...) or a function returning "
                "gym.make_vec(...)), keep locks, open files and processes out of it, or use num_workers=1."
            ) from exc


def no_start(spec: RunSpec) -> None:
    """The ``on_start`` handler that records nothing."""
