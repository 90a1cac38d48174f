"""The actions of every sub-env's current episode, kept in growing numpy buffers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium.spaces import Dict, Space, Tuple

from online_trainer.core.spaces import as_rows, infer_space, leaf_paths


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
        # Episodes closed by close() whose actions are still in the buffer (sub-env, first row, end
        # row of each), and the actions of those gathered already (before their rows were dropped).
        self._pending_envs: list[int] = []
        self._pending_starts: list[int] = []
        self._pending_ends: list[int] = []
        self._gathered: list[np.ndarray] = []
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

    @property
    def is_array(self) -> bool:
        """Whether the actions are arrays kept in one buffer (so :meth:`close` and :meth:`take` serve)."""
        return self._allocated and self._paths is None

    def close(self, envs: list[int], skip: int) -> list[int]:
        """End the episodes of sub-envs ``envs`` (array actions) and return their lengths.

        Their actions stay in the buffer until :meth:`take` gathers them, all at once.
        """
        start, t = self.start, self.t
        starts = [start[i] for i in envs]
        for i in envs:
            start[i] = t + skip
        # flat lists of numbers, not a tuple per call: see EpisodeTracker.close
        self._pending_envs += envs
        self._pending_starts += starts
        self._pending_ends += [t] * len(envs)
        return [t - first for first in starts]

    def take(self) -> np.ndarray:
        """The actions of the episodes closed since the last call, back to back, in closing order."""
        self._gather()
        gathered, self._gathered = self._gathered, []
        if len(gathered) == 1:
            return gathered[0]
        if not gathered:
            return self.buffers[0][:0, 0].copy()
        return np.concatenate(gathered)

    def _gather(self) -> None:
        if not self._pending_envs:
            return
        envs, starts = np.array(self._pending_envs), np.array(self._pending_starts)
        lengths = np.array(self._pending_ends) - starts
        self._pending_envs, self._pending_starts, self._pending_ends = [], [], []
        total = int(lengths.sum())
        # Row r of sub-env e is item r * num_envs + e of the buffer seen as one axis of rows and
        # sub-envs; episode k's items are those of its start row onwards, num_envs apart.
        offsets = np.cumsum(lengths) - lengths  # where each episode begins in the result
        items = np.arange(0, total * self.num_envs, self.num_envs)
        items += np.repeat((starts - offsets) * self.num_envs + envs, lengths)
        buffer = self.buffers[0]
        self._gathered.append(buffer.reshape(-1, *buffer.shape[2:]).take(items, axis=0))

    def _make_room(self, actions: Any) -> None:
        if not self._allocated:
            self._allocate(actions)
        else:
            self._gather()  # closed episodes need rows that are about to be dropped
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
