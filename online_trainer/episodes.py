"""Per-sub-env episode book-keeping that knows gymnasium's autoreset modes.

Only real transitions count: under ``AutoresetMode.NEXT_STEP`` the step after an episode
ends is the sub-env's reset step, which is neither counted in the next episode's length,
summed into its return, recorded as an action or transition, nor reported as an env step.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode


class ActionHistory:
    """The actions of every sub-env's current episode, in one growing numpy buffer.

    Row ``t`` holds the batch of actions of step ``t``; ``start[i]`` is the first row of
    sub-env ``i``'s current episode. Rows no episode needs are dropped when the buffer
    fills, so memory follows the longest running episode, not the run.
    """

    def __init__(self, num_envs: int, capacity: int = 1024) -> None:
        self.num_envs = num_envs
        self.capacity = capacity
        self.buffer: np.ndarray | None = None
        self.start = np.zeros(num_envs, dtype=np.int64)
        self.t = 0

    def append(self, actions: np.ndarray) -> None:
        """Store the batch of actions of one env step."""
        if self.t == self.capacity or self.buffer is None:
            self._make_room(actions)
        self.buffer[self.t] = actions
        self.t += 1

    def episode(self, i: int) -> np.ndarray:
        """Return a copy of sub-env ``i``'s actions since its episode started."""
        return self.buffer[self.start[i]:self.t, i].copy()

    def restart(self, i: int, skip: int) -> None:
        """Start sub-env ``i``'s next episode after ``skip`` more rows (1 for a reset step)."""
        self.start[i] = self.t + skip

    def _make_room(self, actions: np.ndarray) -> None:
        if self.buffer is None:
            self.buffer = np.empty((self.capacity, *np.shape(actions)), dtype=np.asarray(actions).dtype)
            return
        first = int(min(self.start.min(), self.t))
        live = self.t - first
        if live * 2 > self.capacity:
            self.capacity *= 2
        fresh = np.empty((self.capacity, *self.buffer.shape[1:]), dtype=self.buffer.dtype)
        fresh[:live] = self.buffer[first:self.t]
        self.buffer = fresh
        self.start -= first
        self.t = live


class EpisodeTracker:
    """Accumulates returns, lengths, actions and optional extras per sub-env.

    Attributes:
        valid: ``valid[i]`` is True when sub-env ``i``'s entry of the current step is a real
            transition. It is the array handed to agents as ``update(..., valid=...)``.
        done: ``terminated | truncated`` of the current step.
    """

    def __init__(
        self,
        num_envs: int,
        autoreset_mode: AutoresetMode,
        keep_transitions: bool = False,
        keep_frames: bool = False,
        keep_actions: bool = True,
    ) -> None:
        self.num_envs = num_envs
        self.mode = autoreset_mode
        self._reset_skip = 1 if autoreset_mode is AutoresetMode.NEXT_STEP else 0
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.lengths = np.zeros(num_envs, dtype=np.int64)
        self.valid = np.ones(num_envs, dtype=bool)
        self.done = np.zeros(num_envs, dtype=bool)
        self._partial = False
        self.actions = ActionHistory(num_envs) if keep_actions else None
        self.transitions = [[] for _ in range(num_envs)] if keep_transitions else None
        self.frames = [[] for _ in range(num_envs)] if keep_frames else None
        self._next_frames: list[list[Any]] = [[] for _ in range(num_envs)]
        self.logs: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]
        self.start_time = time.perf_counter()

    def observe(self, obs: Any, actions: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> int:
        """Book-keep one env step and return how many of its entries are real transitions."""
        if self.actions is not None:
            self.actions.append(actions)
        np.logical_or(terminated, truncated, out=self.done)
        if self._partial:
            valid = self.valid
            np.add(self.returns, reward, out=self.returns, where=valid)
            self.lengths += valid
            real = int(np.count_nonzero(valid))
        else:
            self.returns += reward
            self.lengths += 1
            real = self.num_envs
        if self.transitions is not None:
            self._keep_transitions(obs, actions, reward, terminated, truncated)
        return real

    def _keep_transitions(self, obs, actions, reward, terminated, truncated) -> None:
        for i in np.flatnonzero(self.valid):
            self.transitions[i].append((obs[i], actions[i], float(reward[i]), bool(terminated[i]), bool(truncated[i])))

    def end_step(self, ended: bool) -> None:
        """Prepare ``valid`` for the next step (after the agent's update of this one)."""
        if self._reset_skip and (ended or self._partial):
            np.logical_not(self.done, out=self.valid)
            self._partial = ended

    def add_logs(self, entries: list[dict[str, Any] | None] | None) -> None:
        """Keep the per-sub-env entries returned by ``agent.log()``."""
        if entries is None:
            return
        for i, entry in enumerate(entries):
            if entry is not None:
                self.logs[i].append(entry)

    def add_frames(self, frames: Any, after_reset: np.ndarray | None = None) -> None:
        """Attach the frames of ``env.render()`` to each sub-env's episode.

        Args:
            frames: one frame (``rgb_array``, ``ansi``) or list of frames
                (``rgb_array_list``) per sub-env.
            after_reset: when given, only these sub-envs' frames are kept (the trainer's own
                reset of finished sub-envs under ``AutoresetMode.DISABLED``).
        """
        if self.frames is None or frames is None:
            return
        same_step = self.mode is AutoresetMode.SAME_STEP
        for i, frame in enumerate(frames):
            if after_reset is not None and not after_reset[i]:
                continue
            # Under SAME_STEP the frame of a finishing step already shows the reset state.
            target = self._next_frames[i] if same_step and self.done[i] and after_reset is None else self.frames[i]
            if isinstance(frame, list):
                target.extend(frame)
            elif frame is not None:
                target.append(frame)

    def finish(self, i: int, episode_index: int, global_step: int, agent_seed: int) -> dict[str, Any]:
        """Close sub-env ``i``'s episode and return its record."""
        record = {
            "ep_return": float(self.returns[i]),
            "ep_length": int(self.lengths[i]),
            "frames": [],
            "transitions": [],
            "actions": self.actions.episode(i) if self.actions is not None else None,
            "agent_seed": agent_seed,
            "episode_index": episode_index,
            "agent_logs": _concat_logs(self.logs[i]),
            "global_step": global_step,
            "wall_time": time.perf_counter() - self.start_time,
        }
        self.returns[i] = 0.0
        self.lengths[i] = 0
        self.logs[i] = []
        if self.actions is not None:
            self.actions.restart(i, self._reset_skip)
        if self.transitions is not None:
            record["transitions"] = self.transitions[i]
            self.transitions[i] = []
        if self.frames is not None:
            record["frames"] = self.frames[i]
            self.frames[i] = self._next_frames[i]
            self._next_frames[i] = []
        return record


def _concat_logs(entries: list[dict[str, Any]]) -> dict[str, np.ndarray] | None:
    if not entries:
        return None
    keys = dict.fromkeys(key for entry in entries for key in entry)
    return {key: np.concatenate([np.atleast_1d(e[key]) for e in entries if key in e]) for key in keys}
