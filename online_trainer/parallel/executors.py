"""Where runs execute: here, in worker processes, or as Ray tasks.

Every executor isolates failures (a run that raises becomes a failed :class:`RunResult`;
the others go on), reports progress to the parent's display, calls ``on_start`` with each
spec before the run can begin (before it is sent to a worker or a Ray task) and hands each
result to ``on_result`` as soon as it is known.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

import cloudpickle

from online_trainer.core.errors import RunSetupError
from online_trainer.core.progress import NoProgress, ProgressDisplay
from online_trainer.core.run import RunResult, RunSpec, execute_run

if TYPE_CHECKING:
    from online_trainer.parallel.workers import WorkerPool

logger = logging.getLogger(__name__)

ResultHandler = Callable[[RunResult], None]
StartHandler = Callable[[RunSpec], None]
BACKENDS = ("local", "ray")


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


def run_serial(specs: Sequence[RunSpec], display: ProgressDisplay | NoProgress, on_result: ResultHandler,
               on_start: StartHandler = no_start) -> None:
    """Run every spec here, one after another; a failing run does not stop the others."""
    for spec in specs:
        on_start(spec)
        try:
            result = execute_run(spec, display)
        except Exception as exc:  # isolated: reported with the others at the end (a setup error stops all)
            if not isinstance(exc, RunSetupError):
                logger.error("run %d (seed %d) failed: %s", spec.run_idx, spec.seed, exc)
            result = failed_result(spec, exc, keep_exception=True)
        display.run_finished(spec.key, result.status != "finished")
        on_result(result)


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
    """Multiprocessing start method of the worker processes."""
    torch_threads: int = 1
    """Torch threads per worker process or Ray task."""
    ray_address: str | None = None
    """Ray cluster address (None: ``RAY_ADDRESS`` or a local Ray)."""
    ray_resources: Mapping[str, Any] | None = None
    """Ray task options per run, e.g. ``{"num_cpus": 1, "num_gpus": 0.25}``."""
    progress: bool = True
    """Show the progress display."""

    def __post_init__(self) -> None:
        from online_trainer.core import validation

        validation.positive_int("num_workers", self.num_workers, "Use 1 to run in this process.")
        validation.positive_int("torch_threads", self.torch_threads)
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


@contextlib.contextmanager
def early_workers(options: ExecutionOptions, max_runs: int) -> Iterator["WorkerPool | None"]:
    """Get the worker processes ``options`` ask for going (None when runs stay here or go to Ray).

    Enter it before checking the env and agent: the start-up of workers not already warm
    from an earlier call then overlaps the checks.
    """
    if options.backend != "local" or options.num_workers == 1:
        yield None
        return
    from online_trainer.parallel.workers import shared_pool

    pool = shared_pool(options.num_workers, options.start_method, options.torch_threads)
    pool.start(max_runs)
    yield pool


def execute(specs: Sequence[RunSpec], options: ExecutionOptions, on_result: ResultHandler,
            pool: "WorkerPool | None" = None, on_start: StartHandler = no_start) -> None:
    """Run ``specs`` as ``options`` say, with one progress display for all of them.

    ``pool`` is the one :func:`early_workers` started, if any. ``on_start(spec)`` is called
    before a run can begin, ``on_result(result)`` when it has ended; either raising stops
    every run and propagates.
    """
    from online_trainer.parallel.ray_backend import RayExecutor
    from online_trainer.parallel.workers import shared_pool

    if not specs:
        return
    budget = specs[0].budget
    display = ProgressDisplay(len(specs), budget.total, budget.unit) if options.progress else NoProgress()
    try:
        if options.backend == "ray":
            executor = RayExecutor(options.ray_address, options.ray_resources, options.num_workers, options.torch_threads)
            executor.run(specs, display, on_result, on_start)
        elif options.num_workers > 1:
            pool = pool or shared_pool(options.num_workers, options.start_method, options.torch_threads)
            pool.run(specs, display, on_result, on_start)
        else:
            run_serial(specs, display, on_result, on_start)
    finally:
        display.close_all()
