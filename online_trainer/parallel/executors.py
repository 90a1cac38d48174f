"""Where runs execute: here, in worker processes, or as Ray tasks (the dispatcher).

Every executor isolates failures (a run that raises becomes a failed :class:`RunResult`;
the others go on), reports progress to the parent's display, calls ``on_start`` with each
spec before the run can begin (before it is sent to a worker or a Ray task) and hands each
result to ``on_result`` as soon as it is known. What they share is in
:mod:`online_trainer.parallel.execution`; each executor imports only that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from online_trainer.parallel.execution import ExecutionOptions, ResultHandler, StartHandler, no_start
from online_trainer.parallel.ray_backend import RayExecutor
from online_trainer.parallel.serial import run_serial
from online_trainer.parallel.threads import limited_threads
from online_trainer.parallel.workers import WorkerPool, shared_pool
from online_trainer.progress.display import NoProgress, ProgressDisplay
from online_trainer.run.builtin import preemption
from online_trainer.run.interrupts import finishing_the_stop
from online_trainer.run.one_run import RunSpec


@contextlib.contextmanager
def early_workers(options: ExecutionOptions, max_runs: int) -> Iterator[WorkerPool | None]:
    """Get the worker processes ``options`` ask for going (None when runs stay here or go to Ray).

    Enter it before checking the env and agent: the start-up of workers not already warm
    from an earlier call then overlaps the checks.
    """
    if options.backend != "local" or options.num_workers == 1:
        yield None
        return
    pool = shared_pool(options.num_workers, options.start_method, options.torch_threads)
    pool.start(max_runs)
    yield pool


def execute(
    specs: Sequence[RunSpec],
    options: ExecutionOptions,
    on_result: ResultHandler,
    pool: WorkerPool | None = None,
    on_start: StartHandler = no_start,
    on_submitted: Callable[[RunSpec, str], None] | None = None,
) -> Any:
    """Run ``specs`` as ``options`` say, with one progress display for all of them.

    ``pool`` is the one :func:`early_workers` started, if any. ``on_start(spec)`` is called
    before a run can begin, ``on_result(result)`` when it has ended; either raising stops
    every run and propagates. With Slurm, ``on_submitted(spec, job_id)`` is called once the
    run's job is submitted.

    Returns:
        None once every run has ended; with Slurm and ``SlurmOptions(wait=False)``, a
        :class:`~online_trainer.parallel.slurm_handle.SlurmRuns` handle right after submitting.
    """
    if not specs:
        return None
    budget = specs[0].budget
    detached = options.slurm is not None and not options.slurm.wait  # nothing to show: no run ends here
    display: ProgressDisplay | NoProgress = NoProgress()

    def show() -> ProgressDisplay | NoProgress:
        nonlocal display
        if options.progress and not detached and isinstance(display, NoProgress):
            display = ProgressDisplay(len(specs), budget.total, budget.unit, slots=options.num_workers)
        return display

    closed = False
    try:
        if options.backend == "slurm":
            from online_trainer.parallel.slurm import SlurmExecutor
            from online_trainer.parallel.slurm_handle import SlurmRuns

            slurm_options = options.slurm
            assert slurm_options is not None  # ExecutionOptions sets SlurmOptions() for backend="slurm"
            slurm = SlurmExecutor(slurm_options, options.num_workers, options.torch_threads)
            if not slurm_options.wait:
                submitted = slurm.submit(specs, on_start, on_submitted)
                # str(): submit() refuses a spec without an exp_dir
                return SlurmRuns([(str(spec.exp_dir), spec.run_idx) for spec, _ in submitted], str(slurm.folder(specs)))
            slurm.run(specs, show, on_result, on_start, on_submitted)  # the bars once sbatch took the jobs
            return None
        if options.backend == "ray":
            executor = RayExecutor(
                options.ray_address, options.ray_resources, options.num_workers, options.torch_threads
            )
            executor.run(specs, show(), on_result, on_start)
        elif options.num_workers > 1:
            pool = pool or shared_pool(options.num_workers, options.start_method, options.torch_threads)
            with preemption.handling(forward=pool.signal_running):
                pool.run(specs, show(), on_result, on_start)
        else:
            with preemption.handling(), limited_threads(options.torch_threads):
                run_serial(specs, show(), on_result, on_start)
    except BaseException as error:
        with finishing_the_stop(error):  # a second Ctrl-C just after the workers stopped broke off the bars' close
            display.close_all()
        closed = True
        raise
    finally:
        if not closed:
            display.close_all()
    return None
