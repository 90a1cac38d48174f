"""One run: build env and agent, seed them, drive the loop, and persist what it produced."""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from online_trainer.callbacks import EmptyCallBack
from online_trainer.callbacks.base import step_logger as callback_step_logger
from online_trainer.errors import RunSetupError
from online_trainer.loop import raw_scores, seeding
from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.budget import Budget
from online_trainer.loop.evaluation import Evaluator, eval_seed
from online_trainer.loop.factories import (
    AgentFactory,
    EnvFactory,
    agent_name,
    autoreset_mode,
    check_actions,
    check_agent,
    note_structured_observations,
)
from online_trainer.loop.normalization import observation_statistics
from online_trainer.loop.steps import failed_at, mark_failed_at, run_loop
from online_trainer.options.groups import RunPlan
from online_trainer.progress.display import NoProgress, Progress
from online_trainer.records import storage
from online_trainer.records.episode_table import EpisodeTable
from online_trainer.run import agent_settings, env_identity, full_checkpoint
from online_trainer.run.events import run_events
from online_trainer.run.hook_runner import StopRun
from online_trainer.run.interrupts import finishing_the_stop

logger = logging.getLogger(__name__)

FRAME_RENDER_MODES = ("rgb_array", "rgb_array_list", "ansi")
COMPLETED = frozenset({"finished", "stopped_early"})
"""Statuses of runs that ended as they should: their budget spent, or stopped by a hook."""


@dataclass(frozen=True)
class RunSpec:
    """Everything one run needs; it travels to worker processes with cloudpickle."""

    run_idx: int
    """The run's number, from 1 (``metrics_run1.pkl``, ``Run1_Last``, ``ep_return/run_1``)."""
    seed: int
    env_factory: EnvFactory
    agent_factory: AgentFactory
    options: RunPlan
    """What every run of the experiment shares (budget, checkpoints, records, evaluation)."""
    callback: Any
    train: bool = True
    copy_agent: bool = False
    """Run on a deep copy of the agent instance the user passed (several runs in one process)."""
    tuning_hp: dict[str, Any] | None = None
    exp_dir: str | None = None
    eval_env_factory: EnvFactory | None = None
    """The eval env's factory (None: the training env's, called once more) when evaluating."""
    eval_only: bool = False
    """Only evaluate the agent as built (a saved checkpoint): ``options.evaluation.episodes`` episodes, seeded with ``seed``."""
    checkpoint: str = ""
    """The checkpoint an ``eval_only`` spec evaluates (``last``, ``best``, ``S5000``...)."""
    observation_statistics: Any = None
    """The training env's observation statistics kept with that checkpoint (a ``RunningMeanStd``), which the eval
    env's ``NormalizeObservation`` wrappers standardise with; None: their own (see
    :mod:`online_trainer.loop.normalization`)."""
    task_id: int = -1
    """Unique among the runs submitted together (a sweep submits several experiments); -1: run_idx."""
    label: str = ""
    """Name on the progress display; empty: ``run {run_idx}``."""
    tag_prefix: str = ""
    """Put before ``run_{i}`` in callback tags, so the configurations of a sweep stay apart."""
    resume: bool = False
    """Continue from the run's full checkpoint (``Run{i}_Resume.pkl``) when it has one."""
    continuing: bool = False
    """The run adds to an experiment an earlier call made (a resumed call, a sweep called again): its agent is
    compared with the one the experiment trained (``agent.json``) before its first step."""
    log_levels: dict[str, int] | None = None
    """In a worker process of the local pool: the levels of the parent's loggers that have one (``""``: the root),
    at which the worker logs to the parent's handlers (None: as the process is)."""

    @property
    def key(self) -> int:
        """The id executors and the progress display know this run by."""
        return self.run_idx if self.task_id < 0 else self.task_id

    @property
    def name(self) -> str:
        return self.label or f"run {self.run_idx}"

    @property
    def budget(self) -> Budget:
        """The run's budget (``options.budget``)."""
        return self.options.budget


@dataclass
class RunResult:
    """What a run hands back: its records (unless kept out of memory) and its counts."""

    run_idx: int
    seed: int
    records: EpisodeTable | list[dict[str, Any]] | None
    """The run's episode records (an :class:`EpisodeTable`; :func:`as_records` makes them dicts)."""
    key: int = -1
    episodes: int = 0
    global_step: int = 0
    wall_time: float = 0.0
    setup_time: float = 0.0
    """Seconds of ``wall_time`` this call spent before the run's first env step (building the env and the agent: a
    worker's first run imports their libraries), which the run's SPS leaves out."""
    status: str = "finished"
    """``finished``, ``stopped_early`` (a hook called ``ctx.stop``; ``extra["stop_reason"]`` says why), ``failed``,
    or ``setup_failed`` (raised before its first env step)."""
    error: str | None = None
    agent: Any = None
    """The run's agent after its last step (when the spec says ``keep_agent``)."""
    evaluations: list[dict[str, Any]] | None = None
    """The run's evaluation records (when it evaluated)."""
    env_info: dict[str, Any] = field(default_factory=dict)
    """``num_envs`` and ``autoreset_mode`` of the run's env, for the manifest."""
    extra: dict[str, Any] = field(default_factory=dict)

    def raise_if_setup_failed(self) -> None:
        """Raise :class:`RunSetupError` (with the run's own exception) when the run failed before its first step."""
        if self.status == "setup_failed":
            cause = self.extra.get("exception_object")
            if cause is None:
                cause = RuntimeError(self.extra.get("exception", "?") + "\n" + (self.error or ""))
            elif cause.__traceback__ is None and self.error and hasattr(cause, "add_note"):
                # raised in a worker: its traceback did not travel with it (tracebacks are not pickled)
                frames = worker_frames(self.error)
                if frames and frames not in getattr(cause, "__notes__", ()):
                    cause.add_note(frames)
            raise RunSetupError(self.run_idx, self.seed, cause)


def check_eval_spaces(eval_env: Any, env: Any) -> None:
    """Raise ValueError when the eval env's observations or actions are not of the training env's form.

    The agent was built on the training env: on other spaces it fails at the first evaluation, after training went
    on (a HalfCheetah eval env for an InvertedPendulum run), or acts on another scale without a word (actions
    rescaled to [-1, 1] for an agent built on [-3, 3]; N13). Observations must have the same form (kind, shape,
    number of values, keys); what they bound and their dtype may differ. Actions must also have the same bounds.
    """
    for kind in ("observation", "action"):
        ours, theirs = getattr(eval_env, f"single_{kind}_space"), getattr(env, f"single_{kind}_space")
        if not _same_form(ours, theirs, bounds=kind == "action"):
            raise ValueError(
                f"The eval env's {kind} space is {ours}, the training env's {theirs}: the agent was built on the "
                f"training env's. Give evaluation=EvaluationOptions(env=...) an env with the same {kind} space (the "
                "same wrappers but the ones that change only what is recorded, such as a time limit); in a config, "
                "an evaluation.env section with env's num_envs, kwargs and wrappers (it takes nothing from env)."
            )


def _same_form(a: Any, b: Any, bounds: bool) -> bool:
    """Whether spaces ``a`` and ``b`` are of one kind and shape (and, with ``bounds``, a ``Box``'s bounds)."""
    from gymnasium import spaces

    if type(a) is not type(b):
        return False
    if isinstance(a, spaces.Dict):
        return list(a.spaces) == list(b.spaces) and all(_same_form(a[k], b[k], bounds) for k in a.spaces)
    if isinstance(a, spaces.Tuple):
        return len(a) == len(b) and all(_same_form(x, y, bounds) for x, y in zip(a, b))
    if isinstance(a, spaces.Box):
        return a.shape == b.shape and (
            not bounds
            or bool(np.allclose(a.low, b.low, equal_nan=True) and np.allclose(a.high, b.high, equal_nan=True))
        )
    if isinstance(a, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        return a == b
    return True  # Text, Graph, Sequence and custom spaces: the agent judges


def worker_frames(formatted: str) -> str:
    """The frames of the last traceback in ``formatted`` (``traceback.format_exception``'s text), headed as raised
    in the run's worker; empty when it has none."""
    head = "Traceback (most recent call last):"
    lines = formatted.rpartition(head)[2].splitlines()[1:] if head in formatted else []
    frames = list(itertools.takewhile(lambda line: line.startswith(" "), lines))
    return "\n".join(["Raised in the run's worker process, " + head, *frames]) if frames else ""


_told_of_eval_envs = False


def _warn_once_of_eval_envs(eval_envs: int, train_envs: int) -> None:
    """Say once a process that an agent sized by ``set_num_env`` fails on an eval env of other sub-envs (one sized by
    its obs, as the library's agents, does not: a warning a run would be too many)."""
    global _told_of_eval_envs
    if not _told_of_eval_envs:
        _told_of_eval_envs = True
        logger.warning(
            "The eval env has %d sub-env(s) and the training env %d, the number set_num_env gives the agent: an "
            "act(obs) that sizes its actions by that number, not by its obs (len(obs)), fails at the first "
            "evaluation (the library's agents size them by obs).",
            eval_envs,
            train_envs,
        )


def _sized_by_obs(agent: Any) -> bool:
    """Whether ``agent`` is one of the library's agents, which size their actions by the obs they are given (not
    imported here to ask: they bring torch)."""
    return any(cls.__module__ == "online_trainer.agents._base" for cls in type(agent).__mro__)


_SAID_NO_LOAD: set[tuple[type, str | None]] = set()
"""(agent class, experiment) pairs warned of in this process: once an experiment, not once a run (nor once a process:
a notebook's next experiment is told again)."""
"""The agent classes this process has said lack ``load`` (once each)."""


def prepare_agent(spec: RunSpec, env: Any) -> Any:
    """Build the run's agent, check it, and call the optional protocol methods in order.

    When training: ``reset(seed)``, ``set_num_env(n)``, ``set_hp(tuning_hp)``, ``train()``.
    With ``train=False`` the agent is used as given: ``set_num_env(n)``, ``set_hp`` when
    hyperparameters were given, then ``eval()``; never ``reset``.
    """
    agent = spec.agent_factory(env, copy=spec.copy_agent)
    check_agent(agent, spec.agent_factory.source, spec.train)
    if spec.train and spec.exp_dir is not None:  # what it says of itself as built, before reset and set_hp
        settings = agent_settings.agent_settings(agent)
        if spec.resume or spec.continuing:
            how = "resume=True" if spec.resume else "A sweep called again"
            agent_settings.check_settings(spec.exp_dir, settings, spec.name, how)
        if (
            not spec.resume
        ):  # a resume records nothing: with agent.json removed (see the refusal), its runs go unchecked
            agent_settings.record_settings(spec.exp_dir, settings)
    if spec.train:
        spec.agent_factory.check_fresh(agent)
    if spec.options.checkpoint_freq is not None and not callable(getattr(agent, "save", None)):
        raise TypeError(
            f"checkpoint_freq={spec.options.checkpoint_freq} needs agent.save(path=None), which the agent "
            f"{agent_name(agent)} lacks: add it, or drop checkpoint_freq."
        )
    if (
        spec.train
        and spec.exp_dir is not None
        and spec.options.checkpoint_freq is not None
        and not callable(getattr(agent, "load", None))
        and (type(agent), spec.exp_dir) not in _SAID_NO_LOAD
    ):
        _SAID_NO_LOAD.add((type(agent), spec.exp_dir))
        logger.warning(
            "The agent %s has save() but no load(): with checkpoint_freq=%s its checkpoints are written, but no run "
            "can be continued from them (a resumed run starts again from step 0) nor evaluated by the runner. Add "
            "load(state_or_path), which takes what save() returned or the path it was given.",
            type(agent).__name__,
            spec.options.checkpoint_freq,
        )
    if spec.tuning_hp and not callable(getattr(agent, "set_hp", None)):
        raise TypeError(
            f"tuning_hp={spec.tuning_hp!r} was given, but the agent {agent_name(agent)} has no set_hp method: "
            "add set_hp(dict), or drop tuning_hp."
        )
    if spec.train:
        _call_if_present(agent, "reset", spec.seed)
    _call_if_present(agent, "set_num_env", env.num_envs)
    if spec.tuning_hp:
        agent.set_hp(dict(spec.tuning_hp))
    _call_if_present(agent, "train" if spec.train else "eval")
    return agent


HOOK_NOTE = "(raised in hook "
"""How a run's error that came out of a user hook says which (a note; the summaries of failed runs repeat it)."""


def _close_env(spec: RunSpec, close: Callable[[], Any], name: str) -> None:
    """Close an env of the run; an error is logged: the run's records and checkpoints are written, and a run
    marked failed for its env's ``close()`` would be done again from step 0 by a resume."""
    try:
        close()
    except Exception as exc:
        logger.error(
            "%s (seed %d): its %s's close() raised %s: %s", spec.name, spec.seed, name, type(exc).__name__, exc
        )


def _call_if_present(agent: Any, name: str, *args: Any) -> None:
    method = getattr(agent, name, None)
    if callable(method):
        method(*args)


def _end_sink_run(spec: RunSpec, status: str) -> None:
    """Tell the callback that the run ended without finishing; its own error must not hide the run's."""
    try:
        _call_if_present(spec.callback, "end_run", spec.run_idx, status)
    except Exception as exc:
        logger.error(
            "run %d: the callback's end_run raised after the run ended (%s): %s: %s",
            spec.run_idx,
            status,
            type(exc).__name__,
            exc,
        )


def _check_env(env: Any, frames_trigger: Any = None) -> None:
    if env.num_envs > seeding.SEED_STRIDE:
        raise ValueError(
            f"num_envs={env.num_envs} exceeds {seeding.SEED_STRIDE}: runs would share env seeds. Use "
            f"at most {seeding.SEED_STRIDE} sub-envs."
        )
    render_mode = getattr(env, "render_mode", None)
    supported = env.metadata.get("render_modes") or []
    if render_mode is not None and supported and render_mode not in supported:
        raise ValueError(
            f"render_mode={render_mode!r} is not a render mode of this env, which supports "
            f"{list(supported)}: make the env with one of them."
        )
    if frames_trigger is not None and render_mode not in FRAME_RENDER_MODES:
        raise ValueError(
            f"records.frames_trigger={frames_trigger!r} picks the training episodes that keep their frames, but "
            f"the env's render_mode is {render_mode!r}: make the env with render_mode='rgb_array' "
            f"(or one of {list(FRAME_RENDER_MODES)}), or drop frames_trigger."
        )


def _warn_if_nan(obs: Any, run_idx: int) -> None:
    """Log a warning when the first observation of a run holds NaN (the env is probably broken)."""
    leaves = obs.values() if isinstance(obs, dict) else obs if isinstance(obs, tuple) else (obs,)
    for leaf in leaves:
        if isinstance(leaf, (dict, tuple)):
            _warn_if_nan(leaf, run_idx)
        elif isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f" and np.isnan(leaf).any():
            logger.warning("run %d: the env's first observation holds NaN; the agent will learn from it", run_idx)
            return


def execute_run(spec: RunSpec, progress: Progress | None = None) -> RunResult:
    """Run one seed to the end of its budget.

    The env factory and the agent factory are called once each. Everything before the
    first env step (building, checking and seeding the env and agent, the first actions)
    raises :class:`RunSetupError`, so that executors can stop every run at the first
    such error. The metrics stream is flushed on every exit path (normal end, exception,
    KeyboardInterrupt); the exception then propagates.
    """
    if spec.eval_only:
        return evaluate_only(spec, progress)
    progress = progress or NoProgress()
    start = time.perf_counter()
    env = events = bar = evaluator = saved = resumed_from = rng_after_act = None
    stop_reason = None
    setup_time = 0.0
    sink_run_open = False
    try:
        try:
            saved = (
                full_checkpoint.read(spec.exp_dir, spec.run_idx) if spec.resume and spec.exp_dir is not None else None
            )
            env = full_checkpoint.restored_env(saved)
            if env is None:
                env = spec.env_factory()
            _check_env(env, spec.options.records.frames_trigger)
            if spec.exp_dir is not None:
                identity = env_identity.env_identity(env)
                if spec.resume:
                    env_identity.check_identity(spec.exp_dir, identity, spec.name, quiet=True)  # the call said it
                env_identity.record_identity(spec.exp_dir, identity)
            try:
                agent = prepare_agent(spec, env)
            except Exception as error:  # an agent built for arrays may fail on a Dict space as it is built (N16)
                note_structured_observations(error, env)
                raise
            mode = autoreset_mode(env)
            with_raw = raw_scores.detect(env, spec.options.records.score, "training env")
            if saved is None:
                obs, _ = env.reset(seed=spec.seed)
            else:
                resumed_from = full_checkpoint.continue_run(saved, env, agent, spec.seed)
                obs = resumed_from.obs
            _warn_if_nan(obs, spec.run_idx)
            if saved is not None:  # the first act draws what the uninterrupted run drew (agents on np.random, torch)
                full_checkpoint.set_global_rng_state(saved.rng)
            try:
                first_actions = agent.act(obs)
            except Exception as error:
                note_structured_observations(error, env)
                raise
            # where the generators stood after it: the loop goes on from there, whatever setup and hooks draw meanwhile
            rng_after_act = full_checkpoint.global_rng_state() if saved is not None else None
            check_actions(first_actions, env, agent)
            if spec.options.evaluation is not None and spec.options.num_eval_episodes:
                eval_env = (spec.eval_env_factory or spec.env_factory).fresh()
                if spec.eval_env_factory is not None:
                    check_eval_spaces(eval_env, env)
                video_dir = None if spec.exp_dir is None else str(storage.video_dir(spec.exp_dir, spec.run_idx))
                evaluator = Evaluator(
                    eval_env,
                    agent,
                    eval_seed(spec.seed),
                    spec.options.evaluation.episodes,
                    spec.train,
                    video_dir,
                    spec.options.evaluation.record_video,
                    score=spec.options.records.score,
                    train_envs=env.num_envs,
                    observation_statistics=functools.partial(observation_statistics, env),
                )
                if (
                    eval_env.num_envs != env.num_envs
                    and callable(getattr(agent, "set_num_env", None))
                    and not _sized_by_obs(agent)
                ):
                    _warn_once_of_eval_envs(eval_env.num_envs, env.num_envs)
            # sinks with a record per run (MLflow, W&B) open it; a failure here stops every run, as bad input does
            _call_if_present(
                spec.callback,
                "start_run",
                spec.run_idx,
                spec.seed,
                dict(spec.tuning_hp or {}),
                spec.exp_dir,
                f"{spec.tag_prefix}run_{spec.run_idx}",
            )
            sink_run_open = True
        except Exception as exc:
            raise RunSetupError(spec.run_idx, spec.seed, exc) from exc
        render_mode = getattr(env, "render_mode", None)
        render = render_mode in FRAME_RENDER_MODES
        tracker = EpisodeTracker(
            env.num_envs,
            mode,
            keep_transitions=spec.options.dump_transitions,
            keep_frames=render,
            observation_space=env.single_observation_space,
            action_space=env.single_action_space,
            frames_trigger=spec.options.records.frames_trigger,
            render_each_step=render_mode == "rgb_array_list",
            agent_seed=spec.seed,
        )
        if saved is not None:
            tracker = full_checkpoint.restored_tracker(saved, tracker)
        if with_raw:  # reads the (restored) table
            tracker.raw = raw_scores.RawScores(tracker.table, mode)
        callback = spec.callback
        callback.reset()
        agent_tag = f"agents/{spec.tag_prefix}run_{spec.run_idx}"
        step_logger = None if type(callback) is EmptyCallBack else callback_step_logger(callback, agent_tag)
        bar = progress.open_run(spec.key, spec.name, spec.budget.total, spec.budget.unit)
        events = run_events(spec, env, agent, bar, tracker, evaluator, None if saved is None else saved.outputs)
        if resumed_from is not None:
            assert saved is not None  # the run resumed from it
            ctx = events.hooks.ctx
            ctx.global_step, ctx.episodes, ctx.resumed = resumed_from.global_step, resumed_from.episodes, True
            events.load_state_dict(saved.events)  # the bar too shows where the run stood
        elif render:
            try:  # a trigger that keeps no frame of the first episode: drawn once all the same, as a check (V19)
                frame = env.render()
                if tracker.wants_frame():
                    tracker.add_frames(frame)
            except Exception as exc:  # before the first env step: an env that cannot draw stops every run (D19)
                if hasattr(exc, "add_note"):  # Python 3.11+
                    exc.add_note(
                        f"(raised by the env's render(), which the run calls to keep frames: render_mode="
                        f"{render_mode!r}; install what the env draws with, or make it without a render_mode)"
                    )
                raise RunSetupError(spec.run_idx, spec.seed, exc) from exc
        try:
            try:
                events.start()
                if spec.exp_dir is not None and spec.train and full_checkpoint.can_continue(agent):
                    events.hooks.check_states_pickle()
            except StopRun:
                raise
            except Exception as exc:  # a hook's on_run_start or state, before the first env step: bad input, all stop
                where = events.hooks.raised_in(exc)
                if where is not None and hasattr(exc, "add_note"):  # Python 3.11+
                    exc.add_note(f"{HOOK_NOTE}{where})")
                raise RunSetupError(spec.run_idx, spec.seed, exc) from exc
            if rng_after_act is not None:  # after on_run_start: the loop goes on with the generators it had
                full_checkpoint.set_global_rng_state(rng_after_act)
            setup_time = time.perf_counter() - start
            global_step, episodes = run_loop(
                env, agent, obs, first_actions, tracker, events, spec.budget, spec.train, step_logger, resumed_from
            )
        except StopRun as stop:
            global_step, episodes, stop_reason = stop.global_step, events.episodes, stop.reason
            logger.info(
                "run %d (seed %d) stopped early at step %d: %s", spec.run_idx, spec.seed, global_step, stop_reason
            )
        except Exception as exc:
            position = failed_at(exc)
            if resumed_from is None and position is not None and position[0] == 0:
                # the run's first env.step raised (actions the env takes in no form, a broken env): bad input, as
                # the first actions' own check is, so every run stops and nothing of the call is kept
                raise RunSetupError(spec.run_idx, spec.seed, exc) from exc
            raise
        events.finish(True, global_step)
        sink_run_open = False
        _call_if_present(callback, "end_run", spec.run_idx, "finished" if stop_reason is None else "stopped_early")
    except BaseException as error:
        with finishing_the_stop(error):  # a second Ctrl-C must not break off the run's last flush
            where = events.hooks.raised_in(error) if events is not None and isinstance(error, Exception) else None
            if where is not None and hasattr(error, "add_note"):  # Python 3.11+
                error.add_note(f"{HOOK_NOTE}{where})")
            position = failed_at(error)
            if position is not None:  # the run's seconds, for its manifest entry (a resumed run's earlier ones too)
                mark_failed_at(error, *position[:2], time.perf_counter() - start + (saved.elapsed if saved else 0.0))
            if events is not None:
                try:
                    events.finish(False, position[0] if position is not None else 0)
                except Exception as exc:  # the run's own error is the one to report
                    # by its type too: a MemoryError has no text (T19: "...after it failed: " and nothing more)
                    logger.error(
                        "run %d: could not flush its records after it failed: %s: %s",
                        spec.run_idx,
                        type(exc).__name__,
                        exc,
                    )
                else:
                    tracker = events.tracker
                    if spec.exp_dir is None and spec.options.records.in_memory and tracker.table.first == 0:
                        keep_records_of_failed(error, tracker.table)  # nowhere on disk: they travel with the error
            if sink_run_open:
                _end_sink_run(spec, "failed" if isinstance(error, Exception) else "interrupted")
        raise
    finally:
        if events is not None:
            events.hooks.close()  # closed already, unless finishing failed
        if bar is not None:
            bar.close()
        if env is not None:
            if saved is not None and saved.env is not None:
                _close_env(spec, env.close, "env")  # the checkpoint's copy, not the factory's
            else:
                _close_env(spec, lambda: spec.env_factory.release(env), "env")
        if evaluator is not None:
            _close_env(spec, evaluator.env.close, "eval env")
    return RunResult(
        run_idx=spec.run_idx,
        seed=spec.seed,
        records=tracker.table if spec.options.records.in_memory and tracker.table.first == 0 else None,
        key=spec.key,
        episodes=episodes,
        global_step=global_step,
        wall_time=time.perf_counter() - start + (saved.elapsed if saved is not None else 0.0),
        setup_time=setup_time,
        agent=agent if spec.options.records.keep_agents else None,
        evaluations=events.evaluations.records if events.evaluations is not None else None,
        env_info={
            "num_envs": env.num_envs,
            "autoreset_mode": mode.name,
            "env_id": env_identity.gym_id(env),
            "budget": {"num_episodes": spec.budget.num_episodes, "total_steps": spec.budget.total_steps},
        },
        status="finished" if stop_reason is None else "stopped_early",
        extra={} if stop_reason is None else {"stop_reason": stop_reason},
    )


_FAILED_RECORDS = "_online_trainer_records"


def keep_records_of_failed(error: BaseException, table: EpisodeTable) -> None:
    """Let the records a run kept in memory until ``error`` ended it travel with the error (see
    :func:`records_of_failed`): with ``exp_dir=None`` they are nowhere else."""
    with contextlib.suppress(AttributeError, TypeError):  # an exception that takes no attributes
        setattr(error, _FAILED_RECORDS, table)


def records_of_failed(error: BaseException) -> EpisodeTable | None:
    """The records :func:`keep_records_of_failed` kept with ``error``, or None."""
    table = getattr(error, _FAILED_RECORDS, None)
    return table if isinstance(table, EpisodeTable) else None


def evaluate_only(spec: RunSpec, progress: Progress | None = None) -> RunResult:
    """Evaluate the agent ``spec`` builds (typically from a checkpoint), as during training.

    The eval env is reset with ``spec.seed`` (the run's eval seed) and the episodes are
    played exactly as a run's evaluations are, so evaluating a run's last checkpoint gives
    the result of its final evaluation during training.
    """
    start = time.perf_counter()
    bar = (progress or NoProgress()).open_run(spec.key, spec.name, spec.options.num_eval_episodes, "episodes")
    env = None
    try:
        try:
            env = (spec.eval_env_factory or spec.env_factory)()
            agent = prepare_agent(spec, env)
        except Exception as exc:
            raise RunSetupError(spec.run_idx, spec.seed, exc) from exc
        statistics = spec.observation_statistics
        evaluator = Evaluator(
            env,
            agent,
            spec.seed,
            spec.options.num_eval_episodes,
            training=False,
            score=spec.options.records.score,
            observation_statistics=lambda: statistics,
        )
        record = evaluator.evaluate(0, 0)
        bar.advance(spec.options.num_eval_episodes)
    finally:
        bar.close()
        if env is not None:
            (spec.eval_env_factory or spec.env_factory).release(env)
    return RunResult(
        run_idx=spec.run_idx,
        seed=spec.seed,
        records=None,
        key=spec.key,
        episodes=len(record["returns"]),
        wall_time=time.perf_counter() - start,
        evaluations=[record],
    )
