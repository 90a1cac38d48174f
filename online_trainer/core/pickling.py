"""Pickled forms that load with builtins and numpy alone: calls, narrow integers, slabs of actions.

The metrics files are read by people without this package (``pickle.load`` in a notebook, on
another machine). What they hold is therefore built, when loaded, by calls to builtins and
numpy that the pickle names (:class:`Call`), never by a class of ours.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

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
