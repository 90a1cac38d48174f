"""The options of a call, each declared once: a field of a frozen, keyword-only, validated dataclass.

``multi_run``, ``sweep`` and ``evaluate`` take a few option objects grouped the way users think
about a run::

    trainer.multi_run(5, total_steps=50_000, checkpoint_freq=10_000,
                      evaluation=EvaluationOptions(freq=5_000, episodes=10),
                      checkpoints=CheckpointOptions(keep=3),
                      records=RecordOptions(score="raw"),
                      execution=ExecutionOptions(num_workers=4))

Everything else derives from the fields: the YAML keys of the command (``evaluation.freq=5000``,
:mod:`online_trainer.config.schema`), the manifest's record of the call and the resume comparison
(:func:`~online_trainer.options.derived.call_record`: every field but those declared
``affects_records=False``), and the reference page ``docs/reference/trainer-options.md``
(:mod:`online_trainer.orchestration.options_reference`). Adding an option
is one field here, with its docstring and check, plus the code that uses it.

Each field is declared with :func:`option`: its default, the check of its value (a function of
:mod:`online_trainer.options.validation`, the one value checker of the package) and whether it can change
what a run records. The flat keywords of the previous release (``eval_freq=``, ``keep_checkpoints=``,
...) are translated by :data:`~online_trainer.options.derived.LEGACY_NAMES`, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import multiprocessing
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from online_trainer.errors import ValueTypeError, value_error
from online_trainer.loop.budget import Budget
from online_trainer.loop.hook_protocol import check_hooks
from online_trainer.loop.raw_scores import SCORES
from online_trainer.options import validation

logger = logging.getLogger(__name__)

__all__ = [
    "CheckpointOptions",
    "EvaluationOptions",
    "ExecutionOptions",
    "OptionGroup",
    "RecordOptions",
    "RunPlan",
    "SlurmOptions",
    "option",
]

SECTIONS: dict[str, type[OptionGroup]] = {}
"""Every option group by its section name (``"evaluation"``): what the YAML keys and the legacy keywords name."""


def option(
    default: Any = dataclasses.MISSING,
    *,
    check: Callable[[str, Any], Any] | None = None,
    affects_records: bool = True,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A field of an option group.

    Args:
        default: the default value.
        check: ``check(name, value) -> value``, run when the object is built; ``name`` is the dotted key
            (``evaluation.freq``) named by its error.
        affects_records: False for options that cannot change what a run records (progress display, number
            of workers, ...): a resumed call may give another value. Every other option is in the manifest's
            record of the call, and a resumed call that gives another value is refused.
        default_factory: as :func:`dataclasses.field`'s.
    """
    metadata = {"check": check, "affects_records": affects_records}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True, kw_only=True)
class OptionGroup:
    """Base of the option groups: runs each field's check, then :meth:`_check` for rules across fields.

    Raises:
        ValueError: naming the first bad option by its dotted key (``evaluation.freq``) and its value.
    """

    section: ClassVar[str] = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        validation.keywords_only(cls, args, kwargs)
        self = super().__new__(cls)
        object.__setattr__(self, "_given", frozenset(kwargs))  # not a field: equality and repr leave it out
        return self

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.section:
            SECTIONS[cls.section] = cls

    def given(self, name: str) -> bool:
        """Whether the field ``name`` was passed when this object was built, rather than left at its default.

        ``ExecutionOptions(num_workers=1)`` gives ``num_workers`` though 1 is its default: a flat keyword
        that says otherwise disagrees with it. An object made by :func:`dataclasses.replace` gives every field.
        """
        return name in getattr(self, "_given", ())

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            check = spec.metadata.get("check")
            if check is not None:
                object.__setattr__(self, spec.name, check(self.key(spec.name), getattr(self, spec.name)))
        self._check()

    def _check(self) -> None:
        """Rules that tie several fields together (none by default)."""

    @classmethod
    def key(cls, name: str) -> str:
        """The dotted key of the field ``name``: ``evaluation.freq``."""
        return f"{cls.section}.{name}" if cls.section else name


def _episodes_trigger(name: str, value: Any) -> Any:
    return validation.episode_trigger(name, value)


@dataclass(frozen=True, kw_only=True)
class EvaluationOptions(OptionGroup):
    """Greedy evaluation of each run's agent on a separate env, every ``freq`` and once at the end.

    Given (even as ``EvaluationOptions()``), the runs are evaluated; ``evaluation=None`` (the default) is no
    evaluation. The agent is switched to ``eval()``, plays ``episodes`` complete episodes and goes back to
    ``train()``; the training env and episode are untouched. Records: ``exp_dir/eval_run{i}.pkl``,
    ``trainer.evaluations``, ``eval/ep_return/run_{i}``. With evaluation, ``Run{i}_Best_agent.t`` is the state
    at the best evaluation mean.
    """

    section: ClassVar[str] = "evaluation"

    env: Any = option(None)
    """The env to evaluate on: an env or a zero-argument factory; None: the training env's factory, called once
    more per run (in :meth:`~OnlineTrainer.evaluate`: the last ``multi_run``'s). On resume, giving one where the
    experiment had none, or none where it had one, is refused; the value itself is compared only when it is plain
    data. In a config file, a section like ``env``'s (``evaluation.env: {id: CartPole-v1, kwargs: {...}}``)."""
    freq: int | None = option(None, check=validation.optional_positive_int)
    """Evaluate every this many env steps (step budget) or finished episodes (episode budget), and once at the
    end; None: at the end only."""
    episodes: int = option(10, check=validation.positive_int)
    """Complete episodes per evaluation, spread evenly over the eval env's sub-envs."""
    record_video: int | None = option(None, check=validation.optional_positive_int)
    """Film the first episode (of sub-env 0) of every this-many-th evaluation into
    ``exp_dir/videos/run{i}/eval{k}_step{n}.mp4`` (the eval env must be made with ``render_mode="rgb_array"``;
    needs ``pip install -e ".[video]"``). A callback with a ``video`` method gets each video too."""


@dataclass(frozen=True, kw_only=True)
class CheckpointOptions(OptionGroup):
    """What the checkpoints of ``checkpoint_freq`` keep (``Run{i}_Last`` and ``Run{i}_Best_agent.t`` always stay)."""

    section: ClassVar[str] = "checkpoints"

    keep: int | None = option(None, check=validation.optional_positive_int, affects_records=False)
    """Keep only the last this many periodic checkpoints of each run (``Run{i}_S*``/``Run{i}_E*``); None keeps
    them all. Needs ``checkpoint_freq``."""
    buffers: bool = option(False, check=validation.boolean)
    """Put the agent's replay buffer in the run's full checkpoint (``save(buffers=True)``, for agents whose
    ``save`` takes ``buffers``), so that a resumed off-policy run continues exactly; without it the buffer starts
    empty again after a resume. Periodic checkpoints hold it as the agent's own ``save_buffer`` says."""


@dataclass(frozen=True, kw_only=True)
class RecordOptions(OptionGroup):
    """What the runs keep and log: records in memory, agents, metrics streams, frames, statistics, the score."""

    section: ClassVar[str] = "records"

    in_memory: bool = option(True, check=validation.boolean, affects_records=False)
    """Hand the records back in memory; False keeps them on disk only (memory stays flat) and ``None`` stands for
    each run in the result (needs ``dump_metrics`` and an exp_dir)."""
    keep_agents: bool = option(True, check=validation.boolean, affects_records=False)
    """Keep each run's final agent in ``trainer.agents`` (with workers they are sent back to this process);
    False for agents too big to keep (large replay buffers)."""
    flush_every: int | None = option(None, check=validation.optional_positive_int, affects_records=False)
    """Episode records per chunk of the metrics streams; None: 100 per sub-env. Records reach the disk at least
    every second while episodes end, at once for an episode that keeps its frames, and when the run ends."""
    frames_trigger: Any = option(None, check=_episodes_trigger)
    """When the training env renders frames (``render_mode="rgb_array"``, ``"rgb_array_list"`` or ``"ansi"``),
    the episodes whose records keep them: ``k`` keeps episodes ``k, 2k, ...``, a callable
    ``episode_index -> bool`` (indices from 1) those it accepts; None: every episode. With a metrics stream the
    frames are in ``metrics_run{i}.pkl`` only."""
    stats_window: int = option(100, check=validation.positive_int)
    """Episodes averaged into the rolling return and length logged under ``stats/run_{i}``."""
    stats_every_steps: int | None = option(None, check=validation.optional_positive_int)
    """Log SPS, rolling means and timing shares every this many env steps; None: about every 10 seconds (and once
    more when a run ends)."""
    score: str = option(
        "return",
        check=validation.choice(
            SCORES,
            "'return' sums the rewards the agent learns from, "
            "'raw' uses the episode statistics of a "
            "RecordEpisodeStatistics wrapper inside the env's wrappers.",
        ),
    )
    """What evaluations, the progress display and the analysis report: ``"return"`` (the sum of the rewards the
    agent learns from) or ``"raw"`` (the episode statistics of a ``RecordEpisodeStatistics`` inside the env's
    wrappers: game scores under reward clipping)."""


@dataclass(frozen=True, kw_only=True)
class RunPlan(OptionGroup):
    """What every run of one call shares: ``multi_run``'s positional options and its option groups, validated.

    Built by ``multi_run``, ``sweep`` and ``evaluate``; a run's :class:`~online_trainer.run.one_run.RunSpec` holds it.
    """

    num_episodes: int | None = option(None)
    """Stop each run after exactly this many finished episodes (of all its sub-envs together)."""
    total_steps: int | None = option(None)
    """Stop each run after this many env steps (real transitions of all sub-envs together): at the first vector
    step that reaches it, so a run with ``num_envs`` sub-envs may take up to ``num_envs - 1`` more."""
    checkpoint_freq: int | None = option(None, check=validation.optional_positive_int)
    """Save the agent every this many episodes (episode budget) or env steps (step budget)."""
    dump_metrics: bool = option(True, check=validation.boolean)
    """Stream records to ``exp_dir/metrics_run{i}.pkl`` (needs an exp_dir); ``multi_run``'s None: when it has one."""
    dump_transitions: bool = option(False, check=validation.boolean)
    """Keep ``(obs, action, reward, terminated, truncated)`` per step in the records."""
    evaluation: EvaluationOptions | None = option(None)
    """Greedy evaluation (None: none)."""
    checkpoints: CheckpointOptions = option(default_factory=CheckpointOptions)
    """What the checkpoints keep."""
    records: RecordOptions = option(default_factory=RecordOptions)
    """What the runs keep and log."""
    hooks: Sequence[Any] = option((), affects_records=False)
    """User hooks; each run gets its own copy (a resumed run checks their classes against its checkpoint)."""
    has_exp_dir: bool = option(True, affects_records=False)
    """Whether the experiment has a directory (options that write files need one)."""
    budget: Budget = field(init=False, repr=False)
    """The budget the two first fields describe."""

    def _check(self) -> None:
        object.__setattr__(self, "budget", validation.budget(self.num_episodes, self.total_steps))
        for name, cls in (
            ("evaluation", EvaluationOptions),
            ("checkpoints", CheckpointOptions),
            ("records", RecordOptions),
        ):
            value = getattr(self, name)
            if not isinstance(value, cls) and not (value is None and name == "evaluation"):
                raise TypeError(
                    f"{name} must be {'an' if cls.__name__[0] in 'AEIOU' else 'a'} {cls.__name__}, but got "
                    f"{name}={value!r}: pass "
                    f"{name}={cls.__name__}(...) from online_trainer."
                )
        object.__setattr__(
            self, "hooks", check_hooks(self.hooks, None if self.evaluation is None else self.evaluation.freq)
        )
        if self.checkpoints.keep and self.checkpoint_freq is None:
            raise ValueError(
                f"checkpoints.keep={self.checkpoints.keep!r} applies to periodic checkpoints, but "
                "checkpoint_freq is None: pass checkpoint_freq=... too, or drop checkpoints.keep."
            )
        exp_dir = self.has_exp_dir or None
        if self.evaluation is not None:
            validation.needs_exp_dir(exp_dir, **{"evaluation.record_video": self.evaluation.record_video})
        validation.needs_exp_dir(
            exp_dir,
            dump_metrics=self.dump_metrics,
            checkpoint_freq=self.checkpoint_freq,
            **{"checkpoints.buffers": self.checkpoints.buffers},
        )
        if not self.records.in_memory and not self.dump_metrics:
            raise ValueError(
                "records.in_memory=False needs dump_metrics=True and an exp_dir, or the records would be lost."
            )

    @property
    def num_eval_episodes(self) -> int:
        """Episodes per evaluation; 0 when the runs are not evaluated."""
        return self.evaluation.episodes if self.evaluation is not None else 0


BACKENDS = ("local", "ray", "slurm")
_BACKEND_PACKAGES = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}
"""The package each backend imports, and the extra that installs it."""


_NAMED_SBATCH = ("partition", "time", "cpus_per_task", "mem", "gres", "account", "qos")
"""The sbatch options :class:`SlurmOptions` has a field for."""

_RUNNER_SBATCH = {
    "array": "one array task per job, at most num_workers running at once",
    "job_name": "online_trainer",
    "output": "the job's log in the folder",
    "error": "the job's log in the folder",
    "open_mode": "the job's log in the folder",
    "wrap": "the job's script",
    "parsable": "how jobs are submitted",
}
"""sbatch options the runner sets, which ``additional_parameters`` would override (``array`` lifted the cap of running
jobs and left array tasks with no run to hold the node)."""


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
    job requeues itself, then continues from it. Slurm may send it up to 60 s earlier, so at most half of ``time``
    less 60 s (30 for ``time=3``; the default 90 needs ``time >= 5``)."""
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

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        validation.keywords_only(cls, args, kwargs)
        return super().__new__(cls)

    def _check_signal_delay(self, time: int) -> None:
        # Signalled at its start (or before it has loaded its checkpoint), a job requeues without running, or dies of
        # the signal. Slurm sends it up to 60 s earlier than asked (sbatch --signal), so the latest delay that still
        # leaves half of the time to run is 60 s short of half.
        latest = time * 30 - 60
        if latest < 1:
            raise ValueError(
                f"time={time} is too short for the signal a job gets before its time limit: Slurm sends it up to "
                "60 s earlier than asked, so a job could be signalled as it starts, and die of it. Pass time=3 or "
                "more (minutes), or time=None for the partition's limit."
            )
        if self.signal_delay_s > latest:
            raise ValueError(
                f"signal_delay_s={self.signal_delay_s} with time={time}: Slurm sends the signal up to 60 s "
                f"earlier than asked, so a job could be signalled {self.signal_delay_s + 60} s before its "
                f"{time * 60} s run out, before it had run half of them. Pass signal_delay_s={latest} or less, "
                "or a longer time."
            )

    def __post_init__(self) -> None:
        if self.time is not None:
            validation.positive_int(
                "time", self.time, "It is in minutes (120: two hours); None: the partition's limit."
            )
        if self.cpus_per_task is not None:
            validation.positive_int("cpus_per_task", self.cpus_per_task, "Use None for the cluster's default.")
        validation.positive_int("runs_per_job", self.runs_per_job)
        validation.positive_int("signal_delay_s", self.signal_delay_s)
        validation.boolean("wait", self.wait)  # V23: wait="no" was kept, and a non-empty string is true
        # Signalled at its start (or before it has loaded its checkpoint), a job requeues without running, or dies of
        # the signal. Slurm sends it up to 60 s earlier than asked (sbatch --signal), so the latest delay that still
        # leaves half of the time to run is 60 s short of half.
        if self.time is not None:
            self._check_signal_delay(self.time)
        if not isinstance(self.max_requeues, int) or isinstance(self.max_requeues, bool) or self.max_requeues < 0:
            typed = isinstance(self.max_requeues, int) and not isinstance(self.max_requeues, bool)
            raise (ValueError if typed else ValueTypeError)(
                f"max_requeues must be a non-negative int, but got max_requeues={self.max_requeues!r}."
            )
        for name in ("partition", "mem", "gres", "account", "qos", "folder"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise (ValueError if isinstance(value, str) else ValueTypeError)(
                    f"{name} must be a non-empty string or None, but got {name}={value!r}."
                )
        if self.additional_parameters is not None and not isinstance(self.additional_parameters, Mapping):
            raise ValueTypeError(
                "additional_parameters must be a dict of sbatch options, but got "
                f"additional_parameters={self.additional_parameters!r}."
            )
        for key in self.additional_parameters or {}:
            name = str(key).replace("-", "_")
            if name in _NAMED_SBATCH:
                raise ValueError(
                    f"additional_parameters={dict(self.additional_parameters or {})!r} sets {key!r}, which is an option "
                    f"of its own: pass {name}=... instead."
                )
            if name in _RUNNER_SBATCH:
                raise ValueError(
                    f"additional_parameters={dict(self.additional_parameters or {})!r} sets {key!r}, which the runner "
                    f"sets itself ({_RUNNER_SBATCH[name]}): leave it out."
                )
        if not isinstance(self.poll_interval, (int, float)) or not self.poll_interval > 0:
            raise (ValueError if isinstance(self.poll_interval, (int, float)) else ValueTypeError)(
                f"poll_interval must be a positive number of seconds, but got poll_interval={self.poll_interval!r}."
            )

    def sbatch_parameters(self) -> dict[str, Any]:
        """The parameters of ``submitit.SlurmExecutor.update_parameters`` that were given."""
        given: dict[str, Any] = {name: getattr(self, name) for name in _NAMED_SBATCH if getattr(self, name) is not None}
        if self.additional_parameters:
            given["additional_parameters"] = dict(self.additional_parameters)
        return given


def _workers(name: str, value: Any) -> int:
    return validation.positive_int(name, value, "Use 1 to run in this process.")


def _ray_resources(name: str, value: Any) -> Mapping[str, Any] | None:
    """None, or Ray's task options by name (D19: ``[1]`` raised "cannot convert dictionary update sequence")."""
    if value is not None and (not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value)):
        raise ValueTypeError(
            f"{name} must be a dict of Ray task options by name, e.g. {{'num_cpus': 1, 'num_gpus': 0.25}}, but got "
            f"{name}={value!r}."
        )
    amounts = {key: value[key] for key in ("num_cpus", "num_gpus", "memory") if value is not None and key in value}
    custom = (value or {}).get("resources")
    if custom is not None and (not isinstance(custom, Mapping) or not all(isinstance(key, str) for key in custom)):
        raise ValueTypeError(
            f"{name}['resources'] must be a dict of custom resource name to amount, e.g. {{'tpu': 1}}, but got "
            f"{name}['resources']={custom!r}."
        )
    amounts.update({f"resources']['{key}": amount for key, amount in (custom or {}).items()})
    for key, amount in amounts.items():  # R23: {'num_cpus': 'one'} failed after the experiment was made
        if not isinstance(amount, numbers.Real) or isinstance(amount, bool) or not float(amount) >= 0:
            raise value_error(amount, numbers.Real)(
                f"{name}['{key}'] must be a non-negative number, but got {name}['{key}']={amount!r}: e.g. "
                f"{name}={{'num_cpus': 1, 'num_gpus': 0.25}}."
            )
    return value


def _ray_address(name: str, value: Any) -> str | None:
    """None (``RAY_ADDRESS``, or a local Ray), or a non-empty address (R23: 6379 failed in Ray, "" started a local
    Ray without a word)."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise value_error(value, str)(
            f"{name} must be a Ray address such as 'auto', '10.0.0.1:6379' or 'ray://head:10001', or None for "
            f"RAY_ADDRESS or a local Ray, but got {name}={value!r}."
        )
    return value


@dataclass(frozen=True, kw_only=True)
class ExecutionOptions(OptionGroup):
    """How runs execute; none of it changes what a run records (a resumed call may change any of it).

    Raises:
        ValueError: naming the first bad option and its value.
    """

    section: ClassVar[str] = "execution"

    num_workers: int = option(1, check=_workers, affects_records=False)
    """Runs going at once (worker processes, or Ray tasks in flight); 1 runs them in this process."""
    backend: str = option("local", check=validation.choice(BACKENDS), affects_records=False)
    """``"local"`` (this process or worker processes), ``"ray"``, or ``"slurm"`` (each run a Slurm job, see
    ``slurm``)."""
    start_method: str = option("spawn", affects_records=False)
    """Multiprocessing start method of the worker processes; ``"forkserver"`` starts new workers in about
    0.2 s after the session's first call (the server imports torch once)."""
    torch_threads: int | None = option(1, check=validation.optional_positive_int, affects_records=False)
    """Threads of every pool (torch, BLAS, OpenMP) of each process running runs, so that N runs at once use N
    cores: each worker process and Ray task, and this process while its runs go (its own settings are given
    back after them). It replaces the ``OMP_NUM_THREADS``-like variables a worker would inherit. None leaves
    the pools as the environment and the libraries set them (one thread per core, by default)."""
    ray_address: str | None = option(None, check=_ray_address, affects_records=False)
    """Ray cluster address (None: ``RAY_ADDRESS`` or a local Ray). With Ray the experiment directory must
    be on a filesystem all nodes share."""
    ray_resources: Mapping[str, Any] | None = option(None, check=_ray_resources, affects_records=False)
    """Ray task options per run, e.g. ``{"num_cpus": 1, "num_gpus": 0.25}``."""
    slurm: SlurmOptions | None = option(None, affects_records=False)
    """The Slurm jobs' parameters with ``backend="slurm"`` (None: ``SlurmOptions()``, the cluster's defaults);
    ``num_workers`` is then the number of jobs running at once."""
    progress: bool = option(True, check=validation.boolean, affects_records=False)
    """Show the progress display: an overall bar and a bar per active run."""

    def _check(self) -> None:
        if self.ray_resources is not None and self.backend != "ray":
            raise ValueError(
                f"execution.ray_resources={dict(self.ray_resources)!r} applies to backend='ray' only, "
                f"but got execution.backend={self.backend!r}. To run with backend={self.backend!r}, drop them: "
                "ray_resources=None (in a config or on the command line: execution.ray_resources=null)."
            )
        if self.ray_address is not None and self.backend != "ray":
            raise ValueError(
                f"execution.ray_address={self.ray_address!r} applies to backend='ray' only, "
                f"but got execution.backend={self.backend!r}. To run on that Ray cluster, set backend='ray'; to run "
                f"with backend={self.backend!r}, drop it: ray_address=None (in a config or on the command line: "
                "execution.ray_address=null)."
            )
        validation.choice(tuple(multiprocessing.get_all_start_methods()))("execution.start_method", self.start_method)
        if self.slurm is not None and self.backend != "slurm":
            raise ValueError(
                f"execution.slurm={self.slurm!r} applies to backend='slurm' only, but got backend={self.backend!r}. "
                f"To run with backend={self.backend!r}, drop the Slurm options: slurm=None (in a config or on the "
                "command line: execution.slurm=null)."
            )
        if self.slurm is not None and not isinstance(self.slurm, SlurmOptions):
            raise ValueTypeError(
                f"execution.slurm must be a SlurmOptions, but got execution.slurm={self.slurm!r}: use "
                "slurm=SlurmOptions(partition=..., time=...) from online_trainer."
            )
        if self.backend == "slurm" and self.slurm is None:
            object.__setattr__(self, "slurm", SlurmOptions())
        needed = _BACKEND_PACKAGES.get(self.backend)
        if needed is not None and importlib.util.find_spec(needed[0]) is None:  # refused before anything is written
            raise ValueError(
                f"execution.backend={self.backend!r} needs {needed[0]}, which is not installed here: "
                f"pip install -e '.[{needed[1]}]' (or pip install {needed[0]}), or use backend='local'."
            )

    def capped(self, num_runs: int) -> ExecutionOptions:
        """These options with at most ``num_runs`` workers (more would have nothing to do)."""
        if self.num_workers <= num_runs:
            return self
        logger.info("num_workers=%d is more than num_runs=%d: using %d workers", self.num_workers, num_runs, num_runs)
        return dataclasses.replace(self, num_workers=num_runs)

    def check_waits(self, caller: str) -> None:
        """Raise ValueError when ``caller`` (which needs every result) is asked not to wait for Slurm jobs."""
        if self.slurm is not None and not self.slurm.wait:
            raise ValueError(
                f"{caller} needs the results of its runs, but got slurm=SlurmOptions(wait=False): "
                "wait=False is for multi_run; drop it here."
            )

    @property
    def in_workers(self) -> bool:
        """Whether runs leave this process (so what they need must be picklable)."""
        return self.backend != "local" or self.num_workers > 1
