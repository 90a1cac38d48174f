"""The actions of every sub-env's current episode, kept in growing numpy buffers."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium.spaces import Dict, Space, Tuple

from online_trainer.loop.spaces import as_rows, infer_space, leaf_paths
from online_trainer.records.pickling import ActionSlab, narrowest


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
            actions (see :func:`online_trainer.loop.spaces.infer_space`).
    """

    def __init__(self, num_envs: int, capacity: int = 1024, space: Space[Any] | None = None) -> None:
        self.num_envs = num_envs
        self.capacity = capacity
        self.space = space
        self.buffers: list[np.ndarray] = []
        self.start = [0] * num_envs
        self.t = 0
        # Episodes closed by close() whose actions are still in the buffer (array actions): (t, envs) marks
        # that the episodes of sub-envs envs ended at row t, in closing order. An episode's actions are the
        # rows from the end of its sub-env's previous one (and the reset row under NEXT_STEP), or from
        # _since[i] for its first since the last copy out, made at row _unread. And the slabs of episodes
        # copied out already. (A list: a mark costs one append, where a row of a boolean matrix cost a view
        # and a ufunc call at every step that ends an episode.)
        self._marks: list[tuple[int, list[int]]] = []
        self._since = np.zeros(num_envs, dtype=np.int64)
        self._unread = 0
        self._pending = False
        self._slabs: list[ActionSlab] = []
        # Key paths to the leaves of structured actions (None for array actions: one buffer),
        # and which leaves are tuples of items rather than arrays.
        self._paths: list[tuple[Any, ...]] | None = None
        self._items: list[bool] = []
        self._allocated = False
        # Array actions are written by the first branch of append while t < _fast_rows: 0 until
        # the buffer exists and for structured actions, else the capacity.
        self._fast_rows = 0
        self._buffer: np.ndarray = np.empty(0)  # no buffer yet: never indexed while _fast_rows is 0

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
            return self.buffers[0][self.start[i] : self.t, i].copy()
        rows = slice(self.start[i], self.t)
        assert self.space is not None  # structured actions: the space was inferred when the buffers were made
        return _nest(self.space, iter([buffer[rows, i].copy() for buffer in self.buffers]))

    def restart(self, i: int, skip: int) -> None:
        """Start sub-env ``i``'s next episode after ``skip`` more rows (1 for a reset step)."""
        self.start[i] = self.t + skip

    @property
    def is_array(self) -> bool:
        """Whether the actions are arrays kept in one buffer (so :meth:`close` and :meth:`take` serve)."""
        return self._allocated and self._paths is None

    def close(self, envs: list[int], skip: int, mask: np.ndarray | None = None) -> list[int]:
        """End the episodes of sub-envs ``envs`` (ascending; array actions) and return their lengths.

        ``mask``: a boolean array true for exactly ``envs``, when the caller has one: ``envs`` came
        from it, so they are ascending (not checked). The actions stay in the buffer until
        :meth:`take` copies them out, all at once.
        """
        start, t, marks = self.start, self.t, self._marks
        if mask is None and any(b <= a for a, b in zip(envs, envs[1:])):
            raise ValueError(f"ActionHistory.close: envs={envs} must be ascending (episodes are numbered so)")
        if marks and marks[-1][0] == t:  # a second close at this row: what the first closed is copied out first,
            self._copy_out()  # so that the episodes keep their closing order (and one closed twice is empty)
        self._marks.append((t, list(envs)))
        lengths = []
        restart = t + skip
        for i in envs:
            lengths.append(t - start[i])
            start[i] = restart
        self._pending = True
        return lengths

    def take(self) -> list[ActionSlab]:
        """The actions of the episodes closed since the last call, in closing order, as slabs (one per buffer)."""
        self._copy_out()
        slabs, self._slabs = self._slabs, []
        return slabs

    def _copy_out(self) -> None:
        """Copy the actions of the episodes closed since the last call out of the buffer, into one slab.

        A sub-env's episodes closed since the last call follow one another down its column of the
        buffer, so the slab is, sub-env after sub-env, the rows from its first such episode's start to
        its last one's end (with the reset rows between episodes under NEXT_STEP): one strided copy a
        sub-env, no index per action (putting the episodes back to back in closing order is left to
        whoever loads a metrics file). Integers go in the narrowest type that holds the buffer's rows.
        """
        if not self._pending:
            return
        self._pending = False
        marks, self._marks = self._marks, []
        counts = [len(envs) for _, envs in marks]
        rows = np.repeat(np.array([row for row, _ in marks], dtype=np.int64), counts)
        envs = np.fromiter(itertools.chain.from_iterable(envs for _, envs in marks), dtype=np.intp, count=len(rows))
        self._unread = self.t
        first = self._since
        last = first.copy()
        last[envs] = rows  # of repeated indices the last assignment stays: each sub-env's last end
        sizes = last - first  # 0 for the sub-envs with no episode here
        offsets = np.cumsum(sizes) - sizes  # where each sub-env's rows go in the slab
        buffer = self.buffers[0]
        dtype = narrowest(buffer[int(first[envs].min()) : self.t], buffer.dtype)
        lo, hi = first.tolist(), last.tolist()
        pieces = [buffer[lo[i] : hi[i], i] for i in np.flatnonzero(sizes).tolist()] or [buffer[:0, 0]]
        data = np.concatenate(pieces, dtype=dtype, casting="unsafe")
        self._slabs.append(ActionSlab(data, (offsets - first)[envs] + rows, buffer.dtype))
        self._since = np.array(self.start)

    def to_state(self) -> dict[str, Any]:
        """The history as plain data (the rows kept so far, the episodes' starts, the closing marks and slabs not
        yet taken): what a full checkpoint keeps."""
        t = self.t
        return {
            "num_envs": self.num_envs,
            "capacity": self.capacity,
            "space": self.space,
            "t": t,
            "start": list(self.start),
            "buffers": [buffer[:t].copy() for buffer in self.buffers],
            "closed": self._closed_matrix() if self._allocated and self._paths is None else None,
            "since": self._since.copy(),
            "unread": self._unread,
            "pending": self._pending,
            "paths": self._paths,
            "items": list(self._items),
            "allocated": self._allocated,
            "slabs": [{"data": slab.data, "ends": list(slab.ends), "dtype": slab.dtype} for slab in self._slabs],
        }

    def from_state(self, state: dict[str, Any]) -> ActionHistory:
        """Set this (new) history to the one :meth:`to_state` described, and return it.

        Raises:
            ValueError: the state is of a history of another number of sub-envs.
        """
        if state["num_envs"] != self.num_envs:
            raise ValueError(f"the saved action history has num_envs={state['num_envs']}, this one {self.num_envs}")
        capacity, t = state["capacity"], state["t"]
        self.capacity, self.space, self.t, self.start = capacity, state["space"], t, list(state["start"])
        self.buffers = []
        for rows in state["buffers"]:
            buffer = np.empty((capacity, *rows.shape[1:]), dtype=rows.dtype)
            buffer[:t] = rows
            self.buffers.append(buffer)
        self._marks = []
        if state["closed"] is not None:  # by row, then sub-env: the order they were closed in
            rows, envs = np.nonzero(state["closed"])
            for row, group in itertools.groupby(zip(rows.tolist(), envs.tolist()), key=lambda mark: mark[0]):
                self._marks.append((row, [env for _, env in group]))
        self._since, self._unread, self._pending = np.array(state["since"]), state["unread"], state["pending"]
        self._paths, self._items, self._allocated = state["paths"], list(state["items"]), state["allocated"]
        self._slabs = [ActionSlab(slab["data"], list(slab["ends"]), slab["dtype"]) for slab in state["slabs"]]
        if self._allocated and self._paths is None:
            self._buffer, self._fast_rows = self.buffers[0], capacity
        return self

    def _closed_matrix(self) -> np.ndarray:
        """The marks as a ``(t + 1, num_envs)`` boolean matrix, true where a sub-env's episode ended at a row
        (what a full checkpoint keeps)."""
        closed = np.zeros((self.t + 1, self.num_envs), dtype=bool)
        for row, envs in self._marks:
            closed[row, envs] = True
        return closed

    def _make_room(self, actions: Any) -> None:
        if not self._allocated:
            self._allocate(actions)
        else:
            self._copy_out()  # closed episodes need rows that are about to be dropped
            first = min(min(self.start), self.t)
            live = self.t - first
            grow = live * 2 > self.capacity
            if grow:
                self.capacity *= 2
            for k, buffer in enumerate(self.buffers):
                if grow:
                    self.buffers[k] = np.empty((self.capacity, *buffer.shape[1:]), dtype=buffer.dtype)
                self.buffers[k][:live] = buffer[first : self.t]  # in place: the rows do not overlap (live <= first)
            self.start = [start - first for start in self.start]
            self.t = self._unread = live
            self._since = np.array(self.start)
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
