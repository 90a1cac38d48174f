"""A run's episode records, held as columns and handed out as lists of dicts.

A record is a dict with the keys :data:`RECORD_KEYS`. A fast vectorised env ends several
episodes on every step; building, pickling and collecting a dict per episode as it ends
cost more than the env itself (about 10 us an episode, where 64 CartPole sub-envs take 21 us
to play one). :class:`EpisodeTable` keeps a run's records as columns instead: Python lists of
returns, lengths, steps and times, the array actions of the episodes added together back to
back in one array, and the rarer per-episode extras (frames, transitions, agent logs) by
position. Dicts are built in one comprehension when records are read
(:meth:`EpisodeTable.records`); ``multi_run`` hands each run back as a
:class:`~online_trainer.core.run_records.RunRecords`, a read-only sequence that builds them as
they are read, so records nobody reads cost nothing.

On disk a metrics chunk and each run of ``all_metrics.pkl`` are pickled from the columns
(:meth:`EpisodeTable.disk_form`) so that ``pickle.load`` builds the list of record dicts
itself with builtins only (and numpy for the actions: see :func:`_narrowed`)::

    list(map(dict, map(zip, repeat(RECORD_KEYS), zip(returns, lengths, frames, ...))))

so the files load with ``pickle.load`` as lists of records, with or without this package.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import pickle
from collections.abc import Sequence
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

RECORD_KEYS = ("ep_return", "ep_length", "frames", "transitions", "actions", "agent_seed", "episode_index",
               "agent_logs", "global_step", "wall_time")
EXTRA_KEYS = ("frames", "transitions", "agent_logs")
PROTOCOL = 5


class _Call:
    """Pickles as the call ``func(*args)``: the unpickler makes the result, no class of ours needed."""

    __slots__ = ("func", "args")

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return self.func, self.args


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
        # Array actions come in segments (the episodes of one add, back to back): each segment, the
        # held row of its first episode, and per held episode the row of its segment after its actions.
        self._segments: list[np.ndarray] = []
        self._segment_rows: list[int] = []
        self._ends: list[int] = []
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

    @property
    def count(self) -> int:
        """Episodes added so far (held or cleared)."""
        return self.first + len(self.returns)

    def __len__(self) -> int:
        return len(self.returns)

    def add(self, returns: Sequence[float] | np.ndarray, lengths: Sequence[int] | np.ndarray,
            steps: Sequence[int] | np.ndarray, times: Sequence[float] | np.ndarray, actions: Any) -> None:
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
            self._segments.append(actions)
            self._segment_rows.append(first_new)
            self._ends.extend(itertools.accumulate(self.lengths[first_new:]))
        else:
            if self._objects is None:
                if self._segments:
                    raise TypeError("EpisodeTable: the actions of earlier episodes were arrays, these are not")
                self._objects = [None] * first_new
            self._objects.extend([None] * added if actions is None else actions)

    def add_one(self, ep_return: float, length: int, step: int, wall_time: float, actions: Any) -> None:
        """Append one episode (``actions``: its array of ``length`` rows, another object, or None)."""
        self.add((ep_return,), (length,), (step,), (wall_time,),
                 actions if actions is None or (isinstance(actions, np.ndarray) and self._objects is None) else [actions])

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
        self._segments, self._segment_rows, self._ends = [], [], []
        if self._objects is not None:
            self._objects = []
        for key in EXTRA_KEYS:
            self.drop_extra(key)

    # ------------------------------------------------------------ reading

    def _actions_column(self, lo: int, hi: int, for_disk: bool, read_only: bool = False) -> Any:
        """The actions of held rows ``lo:hi``: a list (of read-only views), or (for disk) what loads as one."""
        n = hi - lo
        if self._objects is not None:
            return [_read_only(actions) for actions in self._objects[lo:hi]] if read_only else self._objects[lo:hi]
        if not self._segments:
            return _Call(itertools.repeat, None, n) if for_disk else [None] * n
        pieces, views = [], []
        segments, rows, ends = self._segments, self._segment_rows, self._ends
        for k in range(bisect.bisect_right(rows, lo) - 1, len(segments)):
            first = rows[k]
            if first >= hi:
                break
            a, b = max(lo, first), min(hi, rows[k + 1] if k + 1 < len(rows) else len(self.returns))
            start = ends[a - 1] if a > first else 0
            if for_disk:
                pieces.append(segments[k][start:ends[b - 1]])
            else:
                segment = segments[k]
                if read_only:  # views of a read-only view: the table's own arrays stay writeable (and pickle so)
                    segment = segment.view()
                    segment.flags.writeable = False
                views.extend([segment[i:j] for i, j in zip([start, *ends[a:b - 1]], ends[a:b])])
        if not for_disk:
            return views
        return _Call(np.split, _narrowed(pieces), list(itertools.accumulate(self.lengths[lo:hi - 1])))

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
                return _Call(itertools.repeat, None, n) if for_disk else itertools.repeat(None, n)
            return [values.get(p) for p in range(base + lo, base + hi)]
        if not present:  # a fresh empty list per record
            return _Call(map, list, _Call(itertools.repeat, (), n)) if for_disk else map(list, itertools.repeat((), n))
        return [values.get(p, []) for p in range(base + lo, base + hi)]

    def _columns(self, lo: int, hi: int, for_disk: bool, read_only: bool = False) -> list[Any]:
        n = hi - lo
        seed = _Call(itertools.repeat, self.agent_seed, n) if for_disk else itertools.repeat(self.agent_seed, n)
        return [self.returns[lo:hi], self.lengths[lo:hi], self._extra_column("frames", lo, hi, for_disk),
                self._extra_column("transitions", lo, hi, for_disk), self._actions_column(lo, hi, for_disk, read_only), seed,
                range(self.first + lo + 1, self.first + hi + 1), self._extra_column("agent_logs", lo, hi, for_disk),
                self.steps[lo:hi], self.times[lo:hi]]

    def records(self, start: int | None = None, stop: int | None = None, read_only: bool = False) -> list[dict[str, Any]]:
        """The records of positions ``start:stop`` (default: every held one), as dicts.

        Array actions are views of one buffer (which the table no longer changes); with
        ``read_only`` every action array handed out is a read-only view. The
        collector is paused while the dicts are built: they hold no cycles, and a run's
        records would otherwise be scanned over and over as they are made.
        """
        lo, hi = self._rows(start, stop)
        if hi <= lo:
            return []
        if not any(self._has_extra(key, lo, hi) for key in EXTRA_KEYS):  # the common case: literals are cheaper
            seed = self.agent_seed
            indices = range(self.first + lo + 1, self.first + hi + 1)
            actions = self._actions_column(lo, hi, False, read_only)
            with _gc_paused():
                return [{"ep_return": r, "ep_length": n, "frames": [], "transitions": [], "actions": a,
                         "agent_seed": seed, "episode_index": i, "agent_logs": None, "global_step": s, "wall_time": w}
                        for r, n, a, i, s, w in zip(self.returns[lo:hi], self.lengths[lo:hi], actions, indices,
                                                    self.steps[lo:hi], self.times[lo:hi])]
        returns, lengths, frames, transitions, actions, seeds, indices, logs, steps, times = self._columns(
            lo, hi, False, read_only)
        with _gc_paused():
            return [{"ep_return": r, "ep_length": n, "frames": f, "transitions": tr, "actions": a, "agent_seed": seed,
                     "episode_index": i, "agent_logs": g, "global_step": s, "wall_time": w}
                    for r, n, f, tr, a, seed, i, g, s, w
                    in zip(returns, lengths, frames, transitions, actions, seeds, indices, logs, steps, times)]

    def disk_form(self, start: int | None = None, stop: int | None = None) -> Any:
        """What pickles as the records of positions ``start:stop`` and loads as their list of dicts.

        For every record of a run whose metrics chunks hold them all (:meth:`chunk`), it is those
        chunks, unpickled one after the other when loaded: ``all_metrics.pkl`` then costs a copy
        of bytes made already, not a second pickling of the run.
        """
        if start is None and stop is None and 0 < self._chunked == self.count and self.first == 0:
            return _Call(list, _Call(itertools.chain.from_iterable, _Call(map, pickle.loads, self._chunks)))
        lo, hi = self._rows(start, stop)
        if hi <= lo:
            return []
        rows = _Call(zip, *self._columns(lo, hi, True))
        return _Call(list, _Call(map, dict, _Call(map, zip, _Call(itertools.repeat, RECORD_KEYS), rows)))

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


    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if len(self._segments) > 1:  # one array travels faster than one per episode
            state["_segments"] = [np.concatenate(self._segments)]
            state["_segment_rows"] = [0]
            state["_ends"] = list(itertools.accumulate(self.lengths))
        return state


def _narrowed(pieces: list[np.ndarray]) -> Any:
    """What pickles as the actions ``pieces`` back to back: integers in the narrowest integer type that
    holds them, widened back on load.

    ``Discrete`` actions are int64 and mostly small: a run of CartPole's 0s and 1s takes an
    eighth of the bytes in the files (the actions are most of a record's bytes), and loads as
    the same int64 array. Other dtypes pickle as they are.
    """
    dtype = pieces[0].dtype
    # joined, one reduction, not one per piece (numpy joins non-native byte orders into native ones)
    flat = pieces[0] if len(pieces) == 1 else np.concatenate(pieces).astype(dtype, copy=False)
    if dtype.kind not in "iu" or flat.size == 0:
        return flat
    narrow = np.result_type(np.min_scalar_type(flat.min()), np.min_scalar_type(flat.max()))
    if narrow.itemsize >= dtype.itemsize:
        return flat
    return _Call(np.asarray, flat.astype(narrow), dtype)


def _read_only(actions: Any) -> Any:
    """Read-only views of one episode's structured actions (dicts and tuples of arrays), nested alike."""
    if isinstance(actions, np.ndarray):
        view = actions.view()
        view.flags.writeable = False
        return view
    if isinstance(actions, dict):
        return {key: _read_only(leaf) for key, leaf in actions.items()}
    if isinstance(actions, tuple):
        return tuple(_read_only(leaf) for leaf in actions)
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


def _runs_form(runs: Sequence[Any]) -> list[Any]:
    return [run.disk_form() if isinstance(run, EpisodeTable) else run for run in runs]
