"""The serial executor: every run in this process, one after another."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from online_trainer.errors import Preempted, RunSetupError
from online_trainer.parallel.execution import ResultHandler, StartHandler, failed_result, no_start
from online_trainer.progress.display import NoProgress, ProgressDisplay
from online_trainer.run.builtin import preemption
from online_trainer.run.one_run import RunSpec, execute_run

logger = logging.getLogger(__name__)


def run_serial(
    specs: Sequence[RunSpec],
    display: ProgressDisplay | NoProgress,
    on_result: ResultHandler,
    on_start: StartHandler = no_start,
) -> None:
    """Run every spec here, one after another; a failing run does not stop the others.

    Raises:
        Preempted: a preemption signal came, and runs are left (none starts after it): a run looks at the signal
            about every second, so one that came in its last second, or between two runs, finds the next run here.
    """
    for spec in specs:
        if preemption.requested():
            raise Preempted(on_disk=spec.exp_dir is not None)
        on_start(spec)
        try:
            result = execute_run(spec, display)
        except KeyboardInterrupt:  # Ctrl-C or a preemption signal: the call ends here, the bar says how
            display.run_finished(spec.key, "interrupted")
            raise
        except Exception as exc:  # isolated: reported with the others at the end (a setup error stops all)
            result = failed_result(spec, exc, keep_exception=True)
            if not isinstance(exc, RunSetupError):
                logger.error("%s (seed %d) failed: %s", spec.name, spec.seed, result.extra["exception"])
        display.run_finished(spec.key, result.status)
        on_result(result)
