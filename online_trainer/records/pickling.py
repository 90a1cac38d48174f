"""Pickled forms that load with builtins and numpy alone: calls, narrow integers, slabs of actions.

The metrics files are read by people without this package (``pickle.load`` in a notebook, on
another machine). What they hold is therefore built, when loaded, by calls to builtins and
numpy that the pickle names (:class:`Call`), never by a class of ours.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np


class Call:
    """Pickles as the call ``func(*args)``: the unpickler makes the result, no class of ours needed."""

    __slots__ = ("func", "args")

    def __init__(self, func: Callable[..., Any], *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return self.func, self.args


class ActionSlab(NamedTuple):
    """The array actions of consecutive episodes, in one array but not back to back.

    Episode ``k``'s actions are ``data[ends[k] - length_k:ends[k]]`` (its length is in the
    records), read in ``dtype``: integers may be kept narrower (see :func:`narrowest`).
    """

    data: np.ndarray
    ends: list[int]
    dtype: np.dtype


def narrowest(values: np.ndarray, dtype: np.dtype | None = None) -> np.dtype:
    """The narrowest integer type that holds ``values``, or ``dtype`` (default: theirs) when none is narrower.

    Only integer ``values`` have a narrower type; ``dtype``'s byte order is kept.
    """
    dtype = values.dtype if dtype is None else dtype
    if values.dtype.kind not in "iu" or values.size == 0:
        return dtype
    narrow = np.result_type(np.min_scalar_type(values.min()), np.min_scalar_type(values.max()))
    return narrow if narrow.itemsize < dtype.itemsize else dtype


def narrowed(pieces: list[np.ndarray], dtype: np.dtype | None) -> Any:
    """What pickles as the actions ``pieces`` back to back: integers in the narrowest integer type that
    holds them, widened back to ``dtype`` on load (None: left narrow).

    ``Discrete`` actions are int64 and mostly small: a run of CartPole's 0s and 1s takes an
    eighth of the bytes in the files (the actions are most of a record's bytes), and loads as
    the same int64 array. Other dtypes pickle as they are.
    """
    # joined, one reduction, not one per piece (numpy joins non-native byte orders into native ones)
    flat = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
    target = flat.dtype if dtype is None else dtype
    narrow = narrowest(flat, target)
    if narrow == target:
        return flat.astype(target, copy=False)
    flat = flat.astype(narrow, copy=False)
    return flat if dtype is None else Call(np.asarray, flat, dtype)


def episode_actions_form(
    pieces: list[tuple[np.ndarray, bool, Sequence[int] | np.ndarray]], lengths: list[int], dtype: np.dtype
) -> Call:
    """What pickles as the array actions of consecutive episodes and loads as one array each, in ``dtype``.

    Args:
        pieces: in episode order, the arrays that hold the episodes' actions: each with whether
            its episodes are back to back (packed) or in a slab (see :class:`ActionSlab`), and the
            row after each of its episodes' actions.
        lengths: the episodes' lengths: the very list the records pickle too (pickled once).

    Each episode's actions are cut by ``numpy.split`` from one array that holds them all back to
    back (narrowed: see :func:`narrowed`): packed pieces are so already; slabs are put so by
    ``numpy.take`` when loaded, not while the run plays.
    """
    cuts = Call(list, Call(itertools.accumulate, Call(itertools.islice, lengths, len(lengths) - 1)))
    episode = 0
    if all(packed for _, packed, _ in pieces):
        joined = []
        for data, _, ends in pieces:
            joined.append(data[ends[0] - lengths[episode] : ends[-1]])
            episode += len(ends)
        return Call(np.split, narrowed(joined, dtype), cuts)
    spans, shifts = [], []
    taken = placed = 0  # rows of the spans so far, and of their episodes back to back
    for data, _, piece_ends in pieces:
        ends = np.asarray(piece_ends)
        held = np.array(lengths[episode : episode + len(ends)])
        episode += len(ends)
        starts = ends - held
        first, last = int(starts.min()), int(ends.max())
        spans.append(data[first:last])
        # where each episode is among the spans, less where it goes back to back
        shifts.append(starts - first + taken - placed - (np.cumsum(held) - held))
        taken += last - first
        placed += int(held.sum())
    items = Call(np.add, Call(np.arange, placed), Call(np.repeat, narrowed([np.concatenate(shifts)], None), lengths))
    return Call(np.split, Call(np.asarray, Call(np.take, narrowed(spans, None), items, 0), dtype), cuts)
