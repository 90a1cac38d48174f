"""Where runs execute: in this process, or in worker processes."""

from __future__ import annotations

import logging
import multiprocessing
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Sequence

import cloudpickle

from online_trainer.progress import Progress
from online_trainer.run import RunResult, RunSpec, execute_run

logger = logging.getLogger(__name__)

ResultHandler = Callable[[RunResult], None]


def failed_result(spec: RunSpec, exc: BaseException) -> RunResult:
    """The result of a run that raised ``exc``."""
    return RunResult(
        run_idx=spec.run_idx,
        seed=spec.seed,
        records=None,
        status="failed",
        error="".join(traceback.format_exception(exc)),
        extra={"exception": f"{type(exc).__name__}: {exc}", "exception_object": exc},
    )


def run_serial(specs: Sequence[RunSpec], progress: Progress, on_result: ResultHandler) -> None:
    """Run every spec here, one after another; a failing run does not stop the others."""
    for spec in specs:
        try:
            result = execute_run(spec, progress)
        except Exception as exc:  # isolated: reported with the others at the end
            logger.error("run %d (seed %d) failed: %s", spec.run_idx, spec.seed, exc)
            result = failed_result(spec, exc)
        on_result(result)


def _worker(payload: bytes) -> RunResult:
    spec: RunSpec = cloudpickle.loads(payload)
    try:
        return execute_run(spec)
    except Exception as exc:
        result = failed_result(spec, exc)
        result.extra.pop("exception_object")
        return result
    finally:
        spec.callback.close()


def run_processes(
    specs: Sequence[RunSpec], num_workers: int, progress: Progress, on_result: ResultHandler, start_method: str = "spawn"
) -> None:
    """Run the specs in ``num_workers`` worker processes (cloudpickled, so lambdas travel)."""
    context = multiprocessing.get_context(start_method)
    with ProcessPoolExecutor(max_workers=num_workers, mp_context=context) as pool:
        futures = [pool.submit(_worker, cloudpickle.dumps(spec)) for spec in specs]
        for future in as_completed(futures):
            on_result(future.result())
