"""Per-sub-env episode book-keeping that knows gymnasium's autoreset modes.

Only real transitions count: under ``AutoresetMode.NEXT_STEP`` the step after an episode
ends is the sub-env's reset step, which is neither counted in the next episode's length,
summed into its return, recorded as an action or transition, nor reported as an env step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np
from gymnasium.spaces import Dict, Space, Tuple
from gymnasium.vector import AutoresetMode

from online_trainer.core.spaces import BatchSplitter, as_rows, infer_space, leaf_paths


class ActionHistory:
    """The actions of every sub-env's current episode, in growing numpy buffers.

    Row ``t`` of a buffer holds the batch of actions of step ``t``; ``start[i]`` is the first
    row of sub-env ``i``'s current episode. Rows no episode needs are dropped when the buffers
    fill, so memory follows the longest running episode, not the run.

    What :meth:`episode` returns, for an episode of ``T`` steps:

    - array actions (``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``): one array of
      shape ``(T, *action_shape)``, kept in a single buffer (one copy per step);
    - ``Dict`` and ``Tuple`` actions, nested freely: the space's structure with one array per
      leaf, each with a leading time axis, e.g. ``{"move": (T,) array, "aim": ((T, 2) array,
      (T, 3) array)}`` for ``Dict(move=Discrete, aim=Tuple((Box(shape=(2,)), MultiBinary(3))))``;
    - leaves of spaces batched as tuples of items (``Text``, ``Sequence``, ``Graph``,
      ``OneOf``, custom spaces): object arrays of shape ``(T,)``.

    Args:
        num_envs: the number of sub-envs.
        capacity: the number of steps the buffers hold before they are compacted or grown.
        space: the single-env action space; ``None`` to infer it from the first batch of
            actions (see :func:`online_trainer.core.spaces.infer_space`).
    """

    def __init__(self, num_envs: int, capacity: int = 1024, space: Space[Any] | None = None) -> None:
        self.num_envs = num_envs
        self.capacity = capacity
        self.space = space
        self.buffers: list[np.ndarray] = []
        self.start = [0] * num_envs
        self.t = 0
        # Key paths to the leaves of structured actions (None for array actions: one buffer),
        # and which leaves are tuples of items rather than arrays.
        self._paths: list[tuple[Any, ...]] | None = None
        self._items: list[bool] = []
        self._allocated = False
        # Array actions are written by the first branch of append while t < _fast_rows: 0 until
        # the buffer exists and for structured actions, else the capacity.
        self._fast_rows = 0
        self._buffer: np.ndarray | None = None

    def append(self, actions: Any) -> None:
        """Store the batch of actions of one env step."""
        t = self.t
        if t < self._fast_rows:
            self._buffer[t] = actions
            self.t = t + 1
            return
        if t == self.capacity or not self._allocated:
            self._make_room(actions)
        if self._paths is None:
            self.buffers[0][self.t] = actions
            self.t += 1
            return
        for buffer, path, items in zip(self.buffers, self._paths, self._items):
            leaf = actions
            for key in path:
                leaf = leaf[key]
            if items:  # one object per sub-env: numpy must not unpack tuples or graphs
                leaf = np.fromiter(leaf, dtype=object, count=self.num_envs)
            buffer[self.t] = leaf
        self.t += 1

    def episode(self, i: int) -> Any:
        """Return a copy of sub-env ``i``'s actions since its episode started."""
        if self._paths is None:
            return self.buffers[0][self.start[i]:self.t, i].copy()
        rows = slice(self.start[i], self.t)
        return _nest(self.space, iter([buffer[rows, i].copy() for buffer in self.buffers]))

    def restart(self, i: int, skip: int) -> None:
        """Start sub-env ``i``'s next episode after ``skip`` more rows (1 for a reset step)."""
        self.start[i] = self.t + skip

    def _make_room(self, actions: Any) -> None:
        if not self._allocated:
            self._allocate(actions)
        else:
            first = min(min(self.start), self.t)
            live = self.t - first
            if live * 2 > self.capacity:
                self.capacity *= 2
            for k, buffer in enumerate(self.buffers):
                fresh = np.empty((self.capacity, *buffer.shape[1:]), dtype=buffer.dtype)
                fresh[:live] = buffer[first:self.t]
                self.buffers[k] = fresh
            self.start = [start - first for start in self.start]
            self.t = live
        if self._paths is None:
            self._buffer, self._fast_rows = self.buffers[0], self.capacity

    def _allocate(self, actions: Any) -> None:
        self._allocated = True
        if self.space is None:
            if isinstance(actions, np.ndarray):  # the common case: no inference needed
                self.buffers = [_empty_buffer(self.capacity, actions)]
                return
            self.space = infer_space(actions, self.num_envs)
        paths = leaf_paths(self.space)
        leaves = []
        for path in paths:
            leaf = actions
            for key in path:
                leaf = leaf[key]
            leaves.append(leaf)
        self._items = [as_rows(leaf) is None for leaf in leaves]
        self.buffers = [_empty_buffer(self.capacity, leaf) for leaf in leaves]
        if paths != [()] or self._items[0]:
            self._paths = paths


def _empty_buffer(capacity: int, batch: Any) -> np.ndarray:
    """An empty buffer of ``capacity`` batches like ``batch``: an array's rows, else object items."""
    rows = as_rows(batch)
    if rows is None:
        return np.empty((capacity, len(batch)), dtype=object)
    return np.empty((capacity, *rows.shape), dtype=rows.dtype)


def _nest(space: Space[Any], leaves: Iterator[np.ndarray]) -> Any:
    """Nest ``leaves`` (given in :func:`leaf_paths` order) in the structure of ``space``."""
    if isinstance(space, Dict):
        return {key: _nest(sub, leaves) for key, sub in space.spaces.items()}
    if isinstance(space, Tuple):
        return tuple(_nest(sub, leaves) for sub in space.spaces)
    return next(leaves)


class EpisodeTracker:
    """Accumulates returns, lengths, actions and optional extras per sub-env.

    Observations and actions may belong to any gymnasium space; each transition holds sub-env
    ``i``'s own observation and action in the single-env space's structure (a dict for a
    ``Dict`` space, a tuple for a ``Tuple`` space, an array row for array spaces).

    A step costs a few operations, whatever the episode lengths and with no per-sub-env work
    in Python: actions go to a preallocated buffer, an episode's length is the number of steps
    since it started (its action rows, or a step count when actions are not kept), less its
    reset step, and returns are summed in float64 in step order. Closing an episode copies
    its actions and nothing else that grows with its length.

    Args:
        num_envs: the number of sub-envs.
        autoreset_mode: the vector env's autoreset mode.
        keep_transitions: keep ``(obs, action, reward, terminated, truncated)`` of every real
            transition in the episode records.
        keep_frames: keep the frames given to :meth:`add_frames` in the episode records.
        keep_actions: keep each episode's actions (see :class:`ActionHistory`).
        observation_space: the single-env observation space; ``None`` to infer it from the
            first batch (see :func:`online_trainer.core.spaces.infer_space`).
        action_space: the single-env action space; ``None`` to infer it likewise.
        frames_trigger: which episodes keep their frames: ``k`` (episodes ``k, 2k, ...``), a
            callable ``episode_index -> bool`` (asked once per episode), or None (every one).
            The others' records hold no frames. With one sub-env the frames an episode will
            not keep are not even rendered (see :meth:`wants_frame`), unless ``render_each_step``.
        render_each_step: call ``env.render()`` at every step whatever the trigger: the env's
            ``render()`` hands over the frames drawn since its last call (``rgb_array_list``).

    Attributes:
        valid: ``valid[i]`` is True when sub-env ``i``'s entry of the current step is a real
            transition. It is the array handed to agents as ``update(..., valid=...)``.
        done: ``terminated | truncated`` of the current step.
        ended: whether any sub-env's episode ended at the current step (``done.any()``).
        partial: whether some entry of the current step is not a transition (a reset step
            under NEXT_STEP), so that :meth:`end_step` must run even when no episode ended.
    """

    def __init__(
        self,
        num_envs: int,
        autoreset_mode: AutoresetMode,
        keep_transitions: bool = False,
        keep_frames: bool = False,
        keep_actions: bool = True,
        observation_space: Space[Any] | None = None,
        action_space: Space[Any] | None = None,
        frames_trigger: int | Callable[[int], bool] | None = None,
        render_each_step: bool = False,
    ) -> None:
        self.num_envs = num_envs
        self.mode = autoreset_mode
        self._reset_skip = 1 if autoreset_mode is AutoresetMode.NEXT_STEP else 0
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.valid = np.ones(num_envs, dtype=bool)
        self.done = np.zeros(num_envs, dtype=bool)
        self.ended = False
        self.partial = False
        # Without kept actions, lengths come from these (with them, from the action rows).
        self._steps = 0  # env steps observed
        self._starts = [0] * num_envs  # the step at which each sub-env's episode began
        self.actions = ActionHistory(num_envs, space=action_space) if keep_actions else None
        self.transitions = [[] for _ in range(num_envs)] if keep_transitions else None
        self._split_obs = BatchSplitter(num_envs, observation_space)
        self._split_actions = BatchSplitter(num_envs, action_space)
        self.frames = [[] for _ in range(num_envs)] if keep_frames else None
        self._next_frames: list[list[Any]] = [[] for _ in range(num_envs)]
        self._trigger = frames_trigger
        self._triggered: dict[int, bool] = {}  # a callable trigger's answers, until the episode ends
        self._finished = 0  # the index of the last episode closed
        # With one sub-env, the episode a frame belongs to is known when it is rendered. With
        # several, episodes are numbered in the order they end, so an episode's index is known
        # only then: every step is rendered, and frames an episode does not keep are dropped.
        self.film_always = frames_trigger is None or num_envs > 1 or render_each_step
        self.logs: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]
        self.start_time = time.perf_counter()

    def observe(self, obs: Any, actions: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> int:
        """Book-keep one env step and return how many of its entries are real transitions."""
        if self.actions is not None:
            self.actions.append(actions)
        else:
            self._steps += 1
        done = self.done
        np.logical_or(terminated, truncated, out=done)
        self.ended = bool(np.count_nonzero(done))
        if self.partial:
            valid = self.valid
            np.add(self.returns, reward, out=self.returns, where=valid)
            real = int(np.count_nonzero(valid))
        else:
            self.returns += reward
            real = self.num_envs
        if self.transitions is not None:
            self._keep_transitions(obs, actions, reward, terminated, truncated)
        return real

    def _keep_transitions(
        self, obs: Any, actions: Any, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray
    ) -> None:
        obs, actions = self._split_obs(obs), self._split_actions(actions)
        for i in np.flatnonzero(self.valid):
            self.transitions[i].append((obs[i], actions[i], float(reward[i]), bool(terminated[i]), bool(truncated[i])))

    def end_step(self, ended: bool) -> None:
        """Prepare ``valid`` for the next step (after the agent's update of this one)."""
        if self._reset_skip and (ended or self.partial):
            np.logical_not(self.done, out=self.valid)
            self.partial = ended

    def add_logs(self, entries: list[dict[str, Any] | None] | None) -> None:
        """Keep the per-sub-env entries ``agent.log()`` returned after this step's update.

        Only real transitions' entries belong to an episode: the entries of sub-envs whose
        step is not one (``valid`` is False: a reset step under NEXT_STEP) are dropped.
        """
        if entries is None:
            return
        valid = self.valid
        for i, entry in enumerate(entries):
            if entry is not None and valid[i]:
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

    def keeps_frames(self, episode_index: int) -> bool:
        """Whether the ``episode_index``-th episode keeps its frames (asks the trigger once)."""
        trigger = self._trigger
        if trigger is None:
            return True
        if isinstance(trigger, int):
            return episode_index % trigger == 0
        kept = self._triggered.get(episode_index)
        if kept is None:
            kept = self._triggered[episode_index] = bool(trigger(episode_index))
        return kept

    def wants_frame(self, after_reset: bool = False) -> bool:
        """Whether to call ``env.render()`` now: after :meth:`observe` (or before the first step).

        True when some episode the frame belongs to may keep it: always with several sub-envs
        (their episodes are numbered when they end) and without a trigger; with one sub-env,
        when the trigger keeps the current episode, or under SAME_STEP at an episode's last step
        the next one (that frame shows its reset state). ``after_reset``: the frame after the
        runner's own reset of finished sub-envs (AutoresetMode.DISABLED), after :meth:`finish`.
        """
        if self.film_always:
            return True
        index = self._finished + 1
        if self.ended and not after_reset and self.mode is AutoresetMode.SAME_STEP:
            index += 1
        return self.keeps_frames(index)

    def finish(self, i: int, episode_index: int, global_step: int, agent_seed: int,
               ep_return: float | None = None, actions: np.ndarray | None = None) -> dict[str, Any]:
        """Close sub-env ``i``'s episode and return its record.

        Args:
            i: the sub-env.
            episode_index: the episode's number in the run, from 1.
            global_step: env steps of the run so far.
            agent_seed: the run's seed.
            ep_return: the episode's return when the caller summed the rewards itself (the
                loop of a single sub-env does); None: the return :meth:`observe` summed.
            actions: the episode's actions when the caller kept them itself (their number
                is the episode's length); None: those :meth:`observe` kept.
        """
        if ep_return is None:
            ep_return = self.returns.item(i)
        self.returns[i] = 0.0
        history = self.actions
        if actions is not None:
            length = len(actions)
        elif history is not None:
            length, actions = history.t - history.start[i], history.episode(i)
            history.restart(i, self._reset_skip)
        else:
            length, actions = self._steps - self._starts[i], None
            self._starts[i] = self._steps + self._reset_skip
        logs = self.logs[i]
        record = {
            "ep_return": ep_return,
            "ep_length": length,
            "frames": [],
            "transitions": [],
            "actions": actions,
            "agent_seed": agent_seed,
            "episode_index": episode_index,
            "agent_logs": _concat_logs(logs) if logs else None,
            "global_step": global_step,
            "wall_time": time.perf_counter() - self.start_time,
        }
        if logs:
            self.logs[i] = []
        if self.transitions is not None:
            record["transitions"] = self.transitions[i]
            self.transitions[i] = []
        if self.frames is not None:
            if self.keeps_frames(episode_index):
                record["frames"] = self.frames[i]
            self._triggered.pop(episode_index, None)
            self._finished = episode_index
            self.frames[i] = self._next_frames[i]
            self._next_frames[i] = []
        return record


def _concat_logs(entries: list[dict[str, Any]]) -> dict[str, np.ndarray] | None:
    if not entries:
        return None
    keys = dict.fromkeys(key for entry in entries for key in entry)
    return {key: np.concatenate([np.atleast_1d(e[key]) for e in entries if key in e]) for key in keys}
