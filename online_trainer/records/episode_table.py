"""A run's episode records, held as columns and handed out as lists of dicts.

A record is a dict with the keys :data:`RECORD_KEYS`. A fast vectorised env ends several
episodes on every step; building, pickling and collecting a dict per episode as it ends
cost more than the env itself (about 10 us an episode, where 64 CartPole sub-envs take 21 us
to play one). :class:`EpisodeTable` keeps a run's records as columns instead: Python lists of
returns, lengths, steps and times, the array actions of many episodes in one array (a
vectorised env's closed episodes are copied out of the action buffer a sub-env at a time,
with no index per action: see :class:`ActionSlab`), and the rarer per-episode extras (frames,
transitions, agent logs) by position. Dicts are built in one comprehension when records are read
(:meth:`EpisodeTable.records`); ``multi_run`` hands each run back as a
:class:`~online_trainer.records.record_view.RunRecords`, a read-only sequence that builds them as
they are read, so records nobody reads cost nothing.

On disk a metrics chunk and each run of ``all_metrics.pkl`` are pickled from the columns
(:meth:`EpisodeTable.disk_form`) so that ``pickle.load`` builds the list of record dicts
itself with builtins only (and numpy for the actions: see :mod:`online_trainer.records.pickling`)::

    list(map(dict, map(zip, repeat(RECORD_KEYS), zip(returns, lengths, frames, ...))))

so the files load with ``pickle.load`` as lists of records, with or without this package.
Actions held in slabs are put back to back by ``numpy.take`` when a file is loaded, not
while the run plays. ``all_metrics.pkl`` holds a run's metrics chunks themselves, when the
table kept them, unpickled one after the other on load.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import pickle
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np

from online_trainer.records.pickling import ActionSlab, Call, episode_actions_form

RECORD_KEYS = (
    "ep_return",
    "ep_length",
    "frames",
    "transitions",
    "actions",
    "agent_seed",
    "episode_index",
    "agent_logs",
    "global_step",
    "wall_time",
)
EXTRA_KEYS = ("frames", "transitions", "agent_logs")
RAW_KEYS = ("raw_return", "raw_length")  # after RECORD_KEYS in runs with raw scores (loop.raw_scores)
_STATE = (
    "agent_seed",
    "first",
    "returns",
    "lengths",
    "steps",
    "times",
    "_segments",
    "_segment_dtypes",
    "_packed",
    "_segment_rows",
    "_segment_ends",
    "_objects",
    "extras",
    "_extra_positions",
    "raw_returns",
    "raw_lengths",
)
PROTOCOL = 5


class EpisodeTable:
    """The episode records of one run, as columns, in the order the episodes ended.

    Position ``p`` (from 0) is the run's episode ``p + 1``. The table holds positions
    ``first`` to ``count - 1``: :meth:`clear` forgets the ones before (records kept out of
    memory once they are on disk).

    Actions are held in one of three ways, fixed by the first episode added: array actions
    (``Box``, ``Discrete``...) with the episodes of each :meth:`add` back to back in one array;
    other actions (``Dict`` and ``Tuple`` spaces) as one object per episode; or None (actions
    not kept).

    Args:
        agent_seed: the run's seed, in every record.
    """

    def __init__(self, agent_seed: int) -> None:
        self.agent_seed = agent_seed
        self.first = 0
        self.returns: list[float] = []
        self.lengths: list[int] = []
        self.steps: list[int] = []
        self.times: list[float] = []
        # Array actions come in segments: the episodes of one add back to back ("packed"), or a slab of
        # add_slabs (see ActionSlab). Per segment: its array (integers may be narrower than the actions),
        # the actions' dtype, whether it is packed, the held row of its first episode, and per episode the
        # row of the segment after its actions (its first is that less its length).
        self._segments: list[np.ndarray] = []
        self._segment_dtypes: list[np.dtype] = []
        self._packed: list[bool] = []
        self._segment_rows: list[int] = []
        self._segment_ends: list[Sequence[int] | np.ndarray] = []
        self._wide: dict[int, np.ndarray] = {}  # segments of narrow integers, widened when first read
        self._objects: list[Any] | None = None  # actions that are not arrays (or None), per held episode
        # position -> value, for the episodes that have one (frames, transitions, agent_logs), and
        # those positions in increasing order
        self.extras: dict[str, dict[int, Any]] = {key: {} for key in EXTRA_KEYS}
        self._extra_positions: dict[str, list[int]] = {key: [] for key in EXTRA_KEYS}
        # The metrics chunks made so far while, back to back, they hold the run's records from its first
        # (positions 0 to _chunked - 1) and no frames: then they are the run's disk form too (see disk_form).
        # _chunked is -1 once they cannot be (frames, a gap, cleared records).
        self._chunks: list[bytes] = []
        self._chunked = 0
        self.raw_returns: list[float] | None = None  # raw scores per held episode, when the run has them
        self.raw_lengths: list[Any] | None = None

    def add_raw(self, returns: Sequence[float], lengths: Sequence[Any]) -> None:
        """Append the raw scores of the next episodes, in the order they ended; from then on records have RAW_KEYS."""
        if self.raw_returns is None or self.raw_lengths is None:
            self.raw_returns, self.raw_lengths = [], []
        self.raw_returns.extend(returns)
        self.raw_lengths.extend(lengths)

    @property
    def count(self) -> int:
        """Episodes added so far (held or cleared)."""
        return self.first + len(self.returns)

    def __len__(self) -> int:
        return len(self.returns)

    def add(
        self,
        returns: Sequence[float] | np.ndarray,
        lengths: Sequence[int] | np.ndarray,
        steps: Sequence[int] | np.ndarray,
        times: Sequence[float] | np.ndarray,
        actions: Any,
    ) -> None:
        """Append episodes, in the order they ended.

        Args:
            returns, lengths, steps, times: one value per episode (``steps``: the run's env steps
                when it ended; ``times``: seconds since the run started).
            actions: the episodes' array actions back to back (``sum(lengths)`` rows), or a list
                of one object per episode, or None when actions are not kept.
        """
        first_new = len(self.returns)
        self.returns.extend(returns.tolist() if isinstance(returns, np.ndarray) else returns)
        self.lengths.extend(lengths.tolist() if isinstance(lengths, np.ndarray) else lengths)
        self.steps.extend(steps.tolist() if isinstance(steps, np.ndarray) else steps)
        self.times.extend(times.tolist() if isinstance(times, np.ndarray) else times)
        added = len(self.returns) - first_new
        if isinstance(actions, np.ndarray) and self._objects is None:
            # a tuple of ints: the collector stops tracking it (one an episode with a single sub-env)
            ends = tuple(itertools.accumulate(self.lengths[first_new:]))
            self._add_segment(first_new, actions, actions.dtype, True, ends)
        else:
            if self._objects is None:
                if self._segments:
                    raise TypeError("EpisodeTable: the actions of earlier episodes were arrays, these are not")
                self._objects = [None] * first_new
            self._objects.extend([None] * added if actions is None else actions)

    def add_slabs(
        self,
        returns: Sequence[float],
        lengths: Sequence[int],
        steps: Sequence[int],
        times: Sequence[float],
        slabs: Sequence[ActionSlab],
    ) -> None:
        """Append episodes, in the order they ended, whose array actions are in ``slabs``.

        The slabs' episodes, one after the other, are those given (one value each in ``returns``,
        ``lengths``, ``steps`` and ``times``, as for :meth:`add`).
        """
        if self._objects is not None:
            raise TypeError("EpisodeTable: the actions of earlier episodes were not arrays, these are")
        row = len(self.returns)
        self.returns.extend(returns)
        self.lengths.extend(lengths)
        self.steps.extend(steps)
        self.times.extend(times)
        for slab in slabs:
            self._add_segment(row, slab.data, slab.dtype, False, slab.ends)
            row += len(slab.ends)
        if row != len(self.returns):
            raise ValueError(
                f"EpisodeTable.add_slabs: the slabs hold {row - len(self.returns) + len(returns)} "
                f"episodes, not {len(returns)}"
            )

    def _add_segment(self, row: int, data: np.ndarray, dtype: np.dtype, packed: bool, ends: Any) -> None:
        self._segments.append(data)
        self._segment_dtypes.append(dtype)
        self._packed.append(packed)
        self._segment_rows.append(row)
        self._segment_ends.append(ends)

    def add_one(self, ep_return: float, length: int, step: int, wall_time: float, actions: Any) -> None:
        """Append one episode (``actions``: its array of ``length`` rows, another object, or None)."""
        self.add(
            (ep_return,),
            (length,),
            (step,),
            (wall_time,),
            actions if actions is None or (isinstance(actions, np.ndarray) and self._objects is None) else [actions],
        )

    def set_extra(self, key: str, position: int, value: Any) -> None:
        """Give episode ``position`` (not given one before, and after those given one) its ``key``."""
        self.extras[key][position] = value
        self._extra_positions[key].append(position)

    def drop_extra(self, key: str) -> None:
        """Forget every episode's ``key`` (frames, once they are on disk)."""
        self.extras[key].clear()
        self._extra_positions[key].clear()

    def clear(self) -> None:
        """Forget the held records (they are on disk); positions go on from :attr:`count`."""
        self.first = self.count
        self.release_chunks()
        self.returns, self.lengths, self.steps, self.times = [], [], [], []
        if self.raw_returns is not None:
            self.raw_returns, self.raw_lengths = [], []
        self._segments, self._segment_dtypes, self._packed, self._segment_rows = [], [], [], []
        self._segment_ends = []
        self._wide = {}
        if self._objects is not None:
            self._objects = []
        for key in EXTRA_KEYS:
            self.drop_extra(key)

    # ------------------------------------------------------------ reading

    def _actions_column(
        self, lo: int, hi: int, for_disk: bool, read_only: bool = False, lengths: list[int] | None = None
    ) -> Any:
        """The actions of held rows ``lo:hi``: a list (of read-only views), or (for disk) what loads as one.

        ``lengths``: ``self.lengths[lo:hi]``, when the caller has the list (pickled once, for both).
        """
        n = hi - lo
        if self._objects is not None:
            return (
                [read_only_actions(actions) for actions in self._objects[lo:hi]] if read_only else self._objects[lo:hi]
            )
        if not self._segments:
            return Call(itertools.repeat, None, n) if for_disk else [None] * n
        if lengths is None:
            lengths = self.lengths[lo:hi]
        rows = self._segment_rows
        parts = []  # (segment, its first and last held row in lo:hi)
        for k in range(bisect.bisect_right(rows, lo) - 1, len(self._segments)):
            if rows[k] >= hi:
                break
            parts.append((k, max(lo, rows[k]), min(hi, rows[k + 1] if k + 1 < len(rows) else len(self.returns))))
        if for_disk:
            return self._disk_actions(parts, lengths, lo)
        views: list[np.ndarray] = []
        for k, a, b in parts:
            segment = self._widened(k)
            if read_only:  # views of a read-only view: the table's own arrays stay writeable (and pickle so)
                segment = segment.view()
                segment.flags.writeable = False
            ends = self._segment_ends[k][a - rows[k] : b - rows[k]]
            if isinstance(ends, np.ndarray):
                ends = ends.tolist()
            views.extend([segment[end - length : end] for end, length in zip(ends, lengths[a - lo : b - lo])])
        return views

    def _widened(self, k: int) -> np.ndarray:
        """Segment ``k`` in the actions' own dtype."""
        segment, dtype = self._segments[k], self._segment_dtypes[k]
        if segment.dtype == dtype:
            return segment
        wide = self._wide.get(k)
        if wide is None:
            wide = self._wide[k] = segment.astype(dtype)
        return wide

    def _disk_actions(self, parts: list[tuple[int, int, int]], lengths: list[int], lo: int) -> Any:
        """What pickles as the actions of ``parts`` (see :meth:`_actions_column`) and loads as one array each."""
        rows = self._segment_rows
        pieces = [
            (self._segments[k], self._packed[k], self._segment_ends[k][a - rows[k] : b - rows[k]]) for k, a, b in parts
        ]
        return episode_actions_form(pieces, lengths, self._segment_dtypes[parts[0][0]])

    def _has_extra(self, key: str, lo: int, hi: int) -> bool:
        """Whether some held row in ``lo:hi`` has a ``key`` (frames, transitions, agent_logs)."""
        positions = self._extra_positions[key]
        i = bisect.bisect_left(positions, self.first + lo)
        return i < len(positions) and positions[i] < self.first + hi

    def _extra_column(self, key: str, lo: int, hi: int, for_disk: bool) -> Any:
        values, n = self.extras[key], hi - lo
        base = self.first
        present = self._has_extra(key, lo, hi)
        if key == "agent_logs":
            if not present:
                return Call(itertools.repeat, None, n) if for_disk else itertools.repeat(None, n)
            return [values.get(p) for p in range(base + lo, base + hi)]
        if not present:  # a fresh empty list per record
            return Call(map, list, Call(itertools.repeat, (), n)) if for_disk else map(list, itertools.repeat((), n))
        return [values.get(p, []) for p in range(base + lo, base + hi)]

    def _columns(self, lo: int, hi: int, for_disk: bool, read_only: bool = False) -> list[Any]:
        n = hi - lo
        seed = Call(itertools.repeat, self.agent_seed, n) if for_disk else itertools.repeat(self.agent_seed, n)
        lengths = self.lengths[lo:hi]
        return [
            self.returns[lo:hi],
            lengths,
            self._extra_column("frames", lo, hi, for_disk),
            self._extra_column("transitions", lo, hi, for_disk),
            self._actions_column(lo, hi, for_disk, read_only, lengths),
            seed,
            range(self.first + lo + 1, self.first + hi + 1),
            self._extra_column("agent_logs", lo, hi, for_disk),
            self.steps[lo:hi],
            self.times[lo:hi],
        ] + (
            []
            if self.raw_returns is None or self.raw_lengths is None
            else [self.raw_returns[lo:hi], self.raw_lengths[lo:hi]]
        )

    def keys(self) -> tuple[str, ...]:
        """The keys of this table's records: :data:`RECORD_KEYS`, then :data:`RAW_KEYS` with raw scores."""
        return RECORD_KEYS if self.raw_returns is None else RECORD_KEYS + RAW_KEYS

    def records(
        self, start: int | None = None, stop: int | None = None, read_only: bool = False
    ) -> list[dict[str, Any]]:
        """The records of positions ``start:stop`` (default: every held one), as dicts.

        Array actions are views of one buffer (which the table no longer changes); with
        ``read_only`` every action array handed out is a read-only view. The
        collector is paused while the dicts are built: they hold no cycles, and a run's
        records would otherwise be scanned over and over as they are made.
        """
        lo, hi = self._rows(start, stop)
        if hi <= lo:
            return []
        if self.raw_returns is not None:
            with _gc_paused():
                return [dict(zip(self.keys(), row)) for row in zip(*self._columns(lo, hi, False, read_only))]
        if not any(self._has_extra(key, lo, hi) for key in EXTRA_KEYS):  # the common case: literals are cheaper
            seed = self.agent_seed
            indices = range(self.first + lo + 1, self.first + hi + 1)
            lengths = self.lengths[lo:hi]
            actions = self._actions_column(lo, hi, False, read_only, lengths)
            with _gc_paused():
                return [
                    {
                        "ep_return": r,
                        "ep_length": n,
                        "frames": [],
                        "transitions": [],
                        "actions": a,
                        "agent_seed": seed,
                        "episode_index": i,
                        "agent_logs": None,
                        "global_step": s,
                        "wall_time": w,
                    }
                    for r, n, a, i, s, w in zip(
                        self.returns[lo:hi], lengths, actions, indices, self.steps[lo:hi], self.times[lo:hi]
                    )
                ]
        returns, lengths, frames, transitions, actions, seeds, indices, logs, steps, times = self._columns(
            lo, hi, False, read_only
        )
        with _gc_paused():
            return [
                {
                    "ep_return": r,
                    "ep_length": n,
                    "frames": f,
                    "transitions": tr,
                    "actions": a,
                    "agent_seed": seed,
                    "episode_index": i,
                    "agent_logs": g,
                    "global_step": s,
                    "wall_time": w,
                }
                for r, n, f, tr, a, seed, i, g, s, w in zip(
                    returns, lengths, frames, transitions, actions, seeds, indices, logs, steps, times
                )
            ]

    def disk_form(self, start: int | None = None, stop: int | None = None) -> Any:
        """What pickles as the records of positions ``start:stop`` and loads as their list of dicts.

        For every record of a run whose metrics chunks hold them all (:meth:`chunk`), it is those
        chunks, unpickled one after the other when loaded: ``all_metrics.pkl`` then costs a copy
        of bytes made already, not a second pickling of the run.
        """
        if start is None and stop is None and 0 < self._chunked == self.count and self.first == 0:
            return Call(list, Call(itertools.chain.from_iterable, Call(map, pickle.loads, self._chunks)))
        lo, hi = self._rows(start, stop)
        if hi <= lo:
            return []
        rows = Call(zip, *self._columns(lo, hi, True))
        return Call(list, Call(map, dict, Call(map, zip, Call(itertools.repeat, self.keys()), rows)))

    def chunk(self, start: int, stop: int) -> bytes:
        """One metrics chunk: the pickle of the records of positions ``start:stop``.

        Chunks made in order from the first record, none with frames, are kept for
        :meth:`disk_form` until :meth:`release_chunks`.
        """
        data = pickle.dumps(self.disk_form(start, stop), PROTOCOL)
        lo, hi = self._rows(start, stop)
        if start == self._chunked and not self._has_extra("frames", lo, hi):
            self._chunks.append(data)
            self._chunked = stop
        else:
            self.release_chunks()
        return data

    def release_chunks(self) -> None:
        """Forget the chunks kept for :meth:`disk_form` (it then pickles the columns)."""
        self._chunks, self._chunked = [], -1

    def _rows(self, start: int | None, stop: int | None) -> tuple[int, int]:
        start = self.first if start is None else start
        stop = self.count if stop is None else stop
        if start < self.first or stop > self.count:
            raise IndexError(f"positions {start}:{stop} are not held (held: {self.first}:{self.count})")
        return start - self.first, stop - self.first

    def to_state(self) -> dict[str, Any]:
        """The held records as plain data (lists, arrays and dicts of them): what a full checkpoint keeps."""
        state = self.__getstate__()
        return {name.lstrip("_"): state[name] for name in _STATE}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> EpisodeTable:
        """The table :meth:`to_state` described (it keeps no metrics chunk: :meth:`disk_form` pickles the columns)."""
        table = cls(state["agent_seed"])
        table.__dict__.update({name: state[name.lstrip("_")] for name in _STATE})
        if table.count:
            table.release_chunks()
        return table

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_wide"] = {}
        if len(self._segments) > 1 and all(self._packed) and len(set(self._segment_dtypes)) == 1:
            # one array travels faster than one per episode (a single sub-env adds them one by one)
            state["_segments"] = [np.concatenate(self._segments)]
            state["_segment_dtypes"] = self._segment_dtypes[:1]
            state["_packed"] = [True]
            state["_segment_rows"] = [0]
            state["_segment_ends"] = [list(itertools.accumulate(self.lengths))]
        return state


def read_only_actions(actions: Any) -> Any:
    """``actions`` with each array a read-only view (``Dict`` and ``Tuple`` actions: dicts and tuples of them, nested alike)."""
    if isinstance(actions, np.ndarray):
        view = actions.view()
        view.flags.writeable = False
        return view
    if isinstance(actions, dict):
        return {key: read_only_actions(leaf) for key, leaf in actions.items()}
    if isinstance(actions, tuple):
        return tuple(read_only_actions(leaf) for leaf in actions)
    return actions


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def dump_runs(runs: Sequence[Any]) -> bytes:
    """The pickle of ``all_metrics.pkl``: the list of runs (tables, lists of records, or None)."""
    return pickle.dumps(_runs_form(runs), PROTOCOL)


def dump_runs_to(runs: Sequence[Any], file: BinaryIO) -> None:
    """Write :func:`dump_runs`'s pickle to ``file``, without holding it in memory (large arrays go straight to the file)."""
    pickle.dump(_runs_form(runs), file, PROTOCOL)


def chunks_form(chunks: Sequence[bytes]) -> Any:
    """What pickles as the records the metrics chunks ``chunks`` hold and loads as their list of dicts: the chunks'
    own bytes, as :meth:`EpisodeTable.disk_form` keeps them (a run of an earlier call, read back from its stream)."""
    return Call(list, Call(itertools.chain.from_iterable, Call(map, pickle.loads, list(chunks))))


def _runs_form(runs: Sequence[Any]) -> list[Any]:
    return [run.disk_form() if isinstance(run, EpisodeTable) else run for run in runs]
