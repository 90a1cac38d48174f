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
BACKENDS = ("local", "ray", "slurm")


@dataclass(frozen=True, kw_only=True)
class SlurmOptions:
    """How runs go to a Slurm cluster (``ExecutionOptions(backend="slurm", slurm=SlurmOptions(...))``).

    The Slurm parameters keep submitit's names (those of ``submitit.SlurmExecutor``); one left
    None takes the cluster's default. See the how-to "Run seeds on a Slurm cluster".

    Raises:
        ValueError: naming the first bad option and its value.
    """

    partition: str | None = None
    """Partition (``--partition``); None: the cluster's default partition."""
    time: int | None = None
    """Time limit of each job in minutes (``--time``); None: the partition's. A job near it checkpoints its run and
    requeues itself (see ``signal_delay_s``)."""
    cpus_per_task: int | None = None
    """CPUs of each job (``--cpus-per-task``)."""
    mem: str | None = None
    """Memory of each job, as Slurm writes it: ``"4G"``, ``"500M"`` (``--mem``)."""
    gres: str | None = None
    """Generic resources of each job, e.g. ``"gpu:1"`` (``--gres``)."""
    account: str | None = None
    """Account charged (``--account``)."""
    qos: str | None = None
    """Quality of service (``--qos``)."""
    additional_parameters: Mapping[str, Any] | None = None
    """Any other ``sbatch`` option, by its long name: ``{"constraint": "v100", "exclude": "node3"}``."""
    runs_per_job: int = 1
    """Runs one job does, one after another: 1 gives each run its own job (the most parallel, the most scheduling
    per run); more suits short runs on a cluster that is slow to start jobs."""
    signal_delay_s: int = 90
    """Slurm signals a job (SIGUSR2) this many seconds before its time limit: the run writes a full checkpoint and the
    job requeues itself, then continues from it."""
    max_requeues: int = 10
    """Times a job may be requeued (preempted, or at its time limit) before its run fails; its checkpoint stays,
    so ``resume=True`` can continue it."""
    folder: str | None = None
    """Where job scripts and logs go; None: ``slurm/`` in the experiment directory. It must be on the filesystem
    the nodes share."""
    wait: bool = True
    """Wait for the jobs and return the records. False returns a
    :class:`~online_trainer.parallel.slurm_handle.SlurmRuns` handle right after submitting (``.job_ids``,
    ``.done()``, ``.wait()``): the jobs record their results in the experiment directory themselves, so this
    process may end."""
    poll_interval: float = 2.0
    """Seconds between two looks at the jobs' states (``squeue``) while waiting."""

    def __post_init__(self) -> None:
        for name in ("time", "cpus_per_task"):
            if getattr(self, name) is not None:
                validation.positive_int(name, getattr(self, name), "Use None for the cluster's default.")
        validation.positive_int("runs_per_job", self.runs_per_job)
        validation.positive_int("signal_delay_s", self.signal_delay_s)
        if not isinstance(self.max_requeues, int) or isinstance(self.max_requeues, bool) or self.max_requeues < 0:
            raise ValueError(f"max_requeues must be a non-negative int, but got max_requeues={self.max_requeues!r}.")
        for name in ("partition", "mem", "gres", "account", "qos", "folder"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name} must be a non-empty string or None, but got {name}={value!r}.")
        if self.additional_parameters is not None and not isinstance(self.additional_parameters, Mapping):
            raise ValueError("additional_parameters must be a dict of sbatch options, but got "
                             f"additional_parameters={self.additional_parameters!r}.")
        if not isinstance(self.poll_interval, (int, float)) or not self.poll_interval > 0:
            raise ValueError(f"poll_interval must be a positive number of seconds, but got "
                             f"poll_interval={self.poll_interval!r}.")

    def sbatch_parameters(self) -> dict[str, Any]:
        """The parameters of ``submitit.SlurmExecutor.update_parameters`` that were given."""
        names = ("partition", "time", "cpus_per_task", "mem", "gres", "account", "qos")
        given: dict[str, Any] = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        if self.additional_parameters:
            given["additional_parameters"] = dict(self.additional_parameters)
        return given


@dataclass(frozen=True, kw_only=True)
class ExecutionOptions:
    """How runs execute; validated when built.

    Raises:
        ValueError: naming the first bad option and its value.
    """

    num_workers: int = 1
    """Runs going at once (worker processes, or Ray tasks in flight); 1 runs them in this process."""
    backend: str = "local"
    """``"local"`` (this process or worker processes), ``"ray"``, or ``"slurm"`` (each run a Slurm job, see
    ``slurm``)."""
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
    slurm: SlurmOptions | None = None
    """The Slurm jobs' parameters with ``backend="slurm"`` (None: ``SlurmOptions()``, the cluster's defaults);
    ``num_workers`` is then the number of jobs running at once."""
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
        if self.slurm is not None and self.backend != "slurm":
            raise ValueError(f"slurm={self.slurm!r} applies to backend='slurm' only, but got backend={self.backend!r}.")
        if self.slurm is not None and not isinstance(self.slurm, SlurmOptions):
            raise ValueError(f"slurm must be a SlurmOptions, but got slurm={self.slurm!r}: use "
                             "slurm=SlurmOptions(partition=..., time=...) from online_trainer.")
        if self.backend == "slurm" and self.slurm is None:
            object.__setattr__(self, "slurm", SlurmOptions())
        methods = multiprocessing.get_all_start_methods()
        if self.start_method not in methods:
            raise ValueError(f"start_method must be one of {methods}, but got start_method={self.start_method!r}.")

    def capped(self, num_runs: int) -> "ExecutionOptions":
        """These options with at most ``num_runs`` workers (more would have nothing to do)."""
        if self.num_workers <= num_runs:
            return self
        logger.info("num_workers=%d is more than num_runs=%d: using %d workers", self.num_workers, num_runs, num_runs)
        return dataclasses.replace(self, num_workers=num_runs)

    def check_waits(self, caller: str) -> None:
        """Raise ValueError when ``caller`` (which needs every result) is asked not to wait for Slurm jobs."""
        if self.slurm is not None and not self.slurm.wait:
            raise ValueError(f"{caller} needs the results of its runs, but got slurm=SlurmOptions(wait=False): "
                             "wait=False is for multi_run; drop it here.")

    @property
    def in_workers(self) -> bool:
        """Whether runs leave this process (so what they need must be picklable)."""
        return self.backend != "local" or self.num_workers > 1


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
    cause = exc.cause if isinstance(exc, RunSetupError) else exc
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
