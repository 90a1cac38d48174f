"""The act -> step -> update loop (a general one and one for a single sub-env), for both budgets."""

from __future__ import annotations

import dis
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np
from gymnasium.spaces import Box, Discrete
from gymnasium.vector import AutoresetMode, VectorEnv

from online_trainer.core.budget import Budget
from online_trainer.core.episodes import EpisodeTracker
from online_trainer.core.factories import accepts_valid
from online_trainer.core.spaces import final_observations

_NONE_ONLY_OPS = frozenset({"RESUME", "NOP", "CACHE", "LOAD_CONST", "RETURN_VALUE", "RETURN_CONST"})


class StepLogger:
    """The ``call_back`` handed to ``agent.update``: logs a dict under ``agents/run_{i}``."""

    __slots__ = ("callback", "tag", "step")

    def __init__(self, callback: Any, tag: str) -> None:
        self.callback, self.tag, self.step = callback, tag, 0

    def __call__(self, data: dict[str, Any]) -> None:
        self.callback(data, self.tag, self.step)


@dataclass
class LoopState:
    """Where a loop stands between two env steps: what a full checkpoint keeps of it, and where a resumed loop starts.

    The tracker holds the rest (each sub-env's episode in progress). The single-sub-env loop
    keeps its episode in locals, saved here.
    """

    global_step: int
    episodes: int
    obs: Any
    """The observation the agent acts on next."""
    episode_return: float = 0.0
    reset_step: bool = False
    episode_actions: list[Any] = field(default_factory=list)


class LoopEvents(Protocol):
    """What the loop tells the rest of the run."""

    snapshot_due: bool
    """Set when a full checkpoint is due: the loop calls :meth:`snapshot` at the next step boundary."""

    def on_episodes(self, first_index: int, returns: Any, lengths: Any, global_step: int) -> None:
        """Episodes ``first_index, first_index + 1, ...`` ended at ``global_step`` with these returns and lengths.

        The tracker has closed them (:meth:`EpisodeTracker.close`); their records are in its
        table once it is sealed. Setting :attr:`snapshot_due` here (an episode-budget checkpoint)
        has :meth:`on_step_event` and :meth:`snapshot` called at the end of this step.
        """

    def on_step_event(self, global_step: int) -> float:
        """``global_step`` reached the threshold last returned; return the next one."""

    def snapshot(self, state: LoopState) -> None:
        """Write a full checkpoint of the run at this step boundary."""


def agent_log(agent: Any) -> Callable[[], Any] | None:
    """``agent.log``, or None when the agent has none or its code can only return None.

    A ``log`` attribute that is not callable (a list of the agent's own notes, a
    ``logging.Logger``) is not the protocol's method: as for the other optional methods, it
    is left alone. A ``log`` whose body is ``return None``, ``pass`` or a docstring (the protocol's default,
    ``AgentBase.log``) has no effect, so the loop need not call it. Any other ``log`` is
    called after every update, whatever it returned before.
    """
    log = getattr(agent, "log", None)
    if not callable(log):
        return None
    code = getattr(getattr(log, "__func__", log), "__code__", None)
    if isinstance(code, types.CodeType) and all(
        op.opname in _NONE_ONLY_OPS and (op.opname not in ("LOAD_CONST", "RETURN_CONST") or op.argval is None)
        for op in dis.get_instructions(code)
    ):
        return None
    return log


def run_loop(
    env: VectorEnv,
    agent: Any,
    obs: Any,
    actions: Any,
    tracker: EpisodeTracker,
    events: LoopEvents,
    budget: Budget,
    train: bool,
    step_logger: StepLogger | None,
    start: LoopState | None = None,
) -> tuple[int, int]:
    """Run until the budget is spent; return ``(global_step, episodes)``.

    ``actions`` are the agent's actions for ``obs`` (the run checked them before its first step).
    ``start``: where a resumed run continues (its ``obs`` is ``obs``); None starts at step 0.

    ``events.on_step_event`` is called whenever the env-step count reaches the threshold it
    returned last (progress ticks, step checkpoints, the step budget), so the per-step cost
    of all of them is one comparison.

    ``agent.log()`` is called after every update when the agent has a ``log`` method, whatever
    it returned before: an agent may log only some steps (after its first rollout, every n-th
    update, once ``set_hp`` turns logging on), so nothing is inferred from earlier returns. Only
    a ``log`` whose code can do nothing but return None is not called (see :func:`agent_log`).

    A single sub-env that neither renders nor keeps transitions (the common case of one env)
    runs in :func:`_run_single`, which makes the same calls with its book-keeping in local
    Python scalars.
    """
    if env.num_envs == 1 and tracker.actions is not None and tracker.frames is None and tracker.transitions is None:
        return _run_single(env, agent, obs, actions, tracker, events, budget, train, step_logger, start)
    act, step = agent.act, env.step
    update = agent.update if train else None
    pass_valid = update is not None and accepts_valid(update)
    log = agent_log(agent)
    tracker.keep_valid = pass_valid or log is not None or tracker.transitions is not None
    render = tracker.frames is not None
    mode = tracker.mode
    same_step, disabled = mode is AutoresetMode.SAME_STEP, mode is AutoresetMode.DISABLED
    observe, end_step, add_logs, close = tracker.observe, tracker.end_step, tracker.add_logs, tracker.close
    valid, done = tracker.valid, tracker.done
    max_steps, max_episodes = budget.max_steps, budget.max_episodes
    obs_space = env.single_observation_space
    raw = tracker.raw
    global_step, episodes = (0, 0) if start is None else (start.global_step, start.episodes)
    next_event = events.on_step_event(global_step)
    while True:
        next_obs, reward, terminated, truncated, info = step(actions)
        global_step += observe(obs, actions, reward, terminated, truncated)
        ended = tracker.ended
        if update is not None:
            seen = final_observations(next_obs, info, obs_space) if same_step and ended else next_obs
            if step_logger is not None:
                step_logger.step = global_step
            if pass_valid:
                update(seen, reward, terminated, truncated, call_back=step_logger, valid=valid)
            else:
                update(seen, reward, terminated, truncated, call_back=step_logger)
        if log is not None:
            entries = log()
            if entries is not None:
                add_logs(entries)
        if render and tracker.wants_frame():
            tracker.add_frames(env.render())
        if ended:
            envs = done.nonzero()[0].tolist()
            last = len(envs) >= max_episodes - episodes  # the episode budget ends at this step
            if last:
                envs = envs[:int(max_episodes - episodes)]
            returns, lengths = close(envs, global_step, None if last else done)
            if raw is not None:
                raw(info, envs)
            events.on_episodes(episodes + 1, returns, lengths, global_step)
            if events.snapshot_due:
                next_event = global_step
            episodes += len(envs)
            if last:
                return global_step, episodes
            if disabled:
                next_obs, _ = env.reset(options={"reset_mask": done.copy()})
                if render and tracker.wants_frame(after_reset=True):
                    tracker.add_frames(env.render(), after_reset=done)
            end_step(True, envs)
        elif tracker.resetting:
            end_step(False)
        obs = next_obs
        if global_step >= next_event:
            if global_step >= max_steps:
                return global_step, episodes
            next_event = events.on_step_event(global_step)
            if events.snapshot_due:
                events.snapshot(LoopState(global_step, episodes, obs))
        actions = act(obs)


def _run_single(
    env: VectorEnv,
    agent: Any,
    obs: Any,
    actions: Any,
    tracker: EpisodeTracker,
    events: LoopEvents,
    budget: Budget,
    train: bool,
    step_logger: StepLogger | None,
    start: LoopState | None = None,
) -> tuple[int, int]:
    """:func:`run_loop` for one sub-env whose actions are kept, with no frames or transitions.

    The calls, their order and their arguments are those of :func:`run_loop`; the return,
    whether the step is a reset step (NEXT_STEP) and, for actions that are numbers
    (``Discrete``, scalar ``Box``), the episode's actions are kept in locals; ``tracker``
    keeps other actions and log entries, and closes episodes.
    """
    act, step, keep_actions, close_one = agent.act, env.step, tracker.actions.append, tracker.close_one
    space = env.single_action_space
    # actions[0] of such a batch is a new numpy scalar: keeping it needs no copy
    numbers = isinstance(actions, np.ndarray) and actions.ndim == 1 and (
        isinstance(space, Discrete) or (isinstance(space, Box) and space.shape == ()))
    dtype, episode_actions = (actions.dtype if numbers else None), []
    update = agent.update if train else None
    pass_valid = update is not None and accepts_valid(update)
    log = agent_log(agent)
    add_logs, valid = tracker.add_logs, tracker.valid
    mode = tracker.mode
    same_step, disabled = mode is AutoresetMode.SAME_STEP, mode is AutoresetMode.DISABLED
    next_step = mode is AutoresetMode.NEXT_STEP
    max_steps, max_episodes = budget.max_steps, budget.max_episodes
    obs_space = env.single_observation_space
    raw = tracker.raw
    global_step = episodes = 0
    ep_return, reset_step = 0.0, False
    if start is not None:
        global_step, episodes, ep_return, reset_step = start.global_step, start.episodes, start.episode_return, \
            start.reset_step
        episode_actions = list(start.episode_actions)
    next_event = events.on_step_event(global_step)
    while True:
        next_obs, reward, terminated, truncated, info = step(actions)
        ended = terminated[0] or truncated[0]
        if not reset_step:
            ep_return += float(reward[0])  # float64 in step order, like EpisodeTracker.observe
            global_step += 1
            if numbers:
                episode_actions.append(actions[0])
        if not numbers:
            keep_actions(actions)
        if update is not None:
            seen = final_observations(next_obs, info, obs_space) if same_step and ended else next_obs
            if step_logger is not None:
                step_logger.step = global_step
            if pass_valid:
                update(seen, reward, terminated, truncated, call_back=step_logger, valid=valid)
            else:
                update(seen, reward, terminated, truncated, call_back=step_logger)
        if log is not None:
            entries = log()
            if entries is not None:
                add_logs(entries)
        if ended:
            episodes += 1
            kept = np.array(episode_actions, dtype=dtype) if numbers else None
            length = close_one(global_step, ep_return, kept)
            if raw is not None:
                raw(info, (0,))
            events.on_episodes(episodes, (ep_return,), (length,), global_step)
            if events.snapshot_due:
                next_event = global_step
            if episodes >= max_episodes:
                return global_step, episodes
            ep_return, episode_actions = 0.0, []
            if disabled:
                next_obs, _ = env.reset(options={"reset_mask": np.ones(1, dtype=bool)})
            reset_step = next_step
            valid[0] = not next_step
        elif reset_step:
            reset_step = False
            valid[0] = True
        obs = next_obs
        if global_step >= next_event:
            if global_step >= max_steps:
                return global_step, episodes
            next_event = events.on_step_event(global_step)
            if events.snapshot_due:
                events.snapshot(LoopState(global_step, episodes, obs, ep_return, reset_step, episode_actions))
        actions = act(obs)
