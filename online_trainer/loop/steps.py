"""The act -> step -> update loop, for any number of sub-envs and both budgets."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from gymnasium.vector import AutoresetMode, VectorEnv

from online_trainer.callbacks.base import AgentLogger
from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.budget import Budget
from online_trainer.loop.factories import accepts_valid, explain_step_error
from online_trainer.loop.spaces import final_observations


@dataclass(frozen=True)
class LoopState:
    """Where a loop stands between two env steps: what a full checkpoint keeps of it, and where a resumed loop starts.

    The tracker holds the rest (each sub-env's episode in progress).
    """

    global_step: int
    episodes: int
    obs: Any
    """The observation the agent acts on next."""

    def to_state(self) -> dict[str, Any]:
        """Plain data: the two counts and the observation (arrays, or dicts and tuples of arrays)."""
        return {"global_step": int(self.global_step), "episodes": int(self.episodes), "obs": self.obs}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> LoopState:
        """The loop state :meth:`to_state` described."""
        return cls(int(state["global_step"]), int(state["episodes"]), state["obs"])


class LoopEvents(Protocol):
    """What the loop tells the rest of the run."""

    @property
    def snapshot_due(self) -> bool:
        """True when a full checkpoint is due: the loop calls :meth:`snapshot` at the next step boundary."""

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


_FAILED_AT = "_online_trainer_failed_at"


def failed_at(error: BaseException) -> tuple[int, ...] | None:
    """``(global_step, episodes)`` of the loop that ``error`` went through, as the run's env steps and finished
    episodes when it raised (a failed run's manifest records them); None when it did not come from a loop.

    :func:`mark_failed_at` may have added the run's seconds."""
    position = getattr(error, _FAILED_AT, None)
    return position if isinstance(position, tuple) else None


def mark_failed_at(error: BaseException, *position: float) -> None:
    """Record where the run stood when ``error`` ended it (see :func:`failed_at`)."""
    with contextlib.suppress(AttributeError, TypeError):  # an exception that takes no attributes
        setattr(error, _FAILED_AT, position)


def agent_log(agent: Any) -> Callable[[], Any] | None:
    """``agent.log``, or None when the agent has no such method.

    A ``log`` attribute that is not callable (a list of the agent's own notes, a
    ``logging.Logger``) is not the protocol's method: as for the other optional methods, it
    is left alone. A ``log`` is called after every update; a call that returns None (the
    protocol's default, ``AgentBase.log``) costs that call and one comparison.
    """
    log = getattr(agent, "log", None)
    return log if callable(log) else None


def run_loop(
    env: VectorEnv,
    agent: Any,
    obs: Any,
    actions: Any,
    tracker: EpisodeTracker,
    events: LoopEvents,
    budget: Budget,
    train: bool,
    step_logger: AgentLogger | None,
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
    update, once ``set_hp`` turns logging on), so nothing is inferred from earlier returns.

    One loop serves every number of sub-envs: a dedicated loop for one sub-env (book-keeping
    in Python scalars) saved about 1 us a step, under 0.1% of the wall time of the reference
    DQN and PPO on CartPole (``bench/overhead.py --variants dqn,ppo``).
    """
    act, step = agent.act, env.step
    update = agent.update if train else None
    pass_valid = update is not None and accepts_valid(update)
    log = agent_log(agent)
    tracker.keep_valid = pass_valid or tracker.transitions is not None
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
    try:
        while True:
            try:
                next_obs, reward, terminated, truncated, info = step(actions)
            except Exception as error:  # free until raised (Python 3.11's exceptions cost nothing on the way)
                explain_step_error(error, actions, env, agent, f"At env step {global_step + 1} of the run")
                raise
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
                    envs = envs[: int(max_episodes - episodes)]
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
    except BaseException as error:  # free until raised
        mark_failed_at(error, global_step, episodes)
        raise
