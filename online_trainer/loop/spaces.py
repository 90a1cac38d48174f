"""Batches of any gymnasium space: their structure, per-sub-env items and final observations.

A vector env batches its sub-envs' observations (and takes its actions) the way gymnasium's
``create_empty_array`` and ``concatenate`` lay them out:

- ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``: one array whose first axis is the
  sub-env;
- ``Dict``: a dict of batches, ``Tuple``: a tuple of batches, one per component (nested
  freely);
- ``Text``, ``Sequence``, ``Graph``, ``OneOf`` and custom spaces: a tuple of the sub-envs'
  items.

The loop and the episode tracker are handed batches, not spaces, so the space is inferred
from the first batch (:func:`infer_space`) unless the caller passes it. Inference is exact
for arrays, ``Dict`` and ``Tuple`` batches, nested or not; a tuple whose items are not all
batches is taken as a tuple of per-sub-env items, which is what the other spaces give. Only a
batch that fits both readings (a ``Sequence`` whose sub-envs' sequences are all ``num_envs``
long arrays, say) is ambiguous; pass the space for those.
"""

from __future__ import annotations

import functools
import numbers
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Box, Dict, Space, Tuple
from gymnasium.vector.utils import batch_space, iterate

__all__ = ["BatchSplitter", "as_rows", "final_observations", "infer_space", "leaf_paths"]


def infer_space(batch: Any, num_envs: int) -> Space[Any]:
    """Return a single-env space whose batches of ``num_envs`` are laid out like ``batch``.

    Only the structure, shapes and dtypes are inferred: array leaves become ``Box(0, 1, shape,
    dtype)`` (the bounds are placeholders; arrays of dtypes a ``Box`` cannot hold become a bare
    ``Space`` with that shape and dtype), tuples of per-sub-env items a bare ``Space``.

    Args:
        batch: a batch of observations or actions of ``num_envs`` sub-envs.
        num_envs: the number of sub-envs.

    Returns:
        A ``Dict``, ``Tuple``, ``Box`` or bare ``Space``, nested like ``batch``.

    Raises:
        TypeError: ``batch`` is not a batch of ``num_envs`` items in any of gymnasium's layouts.
    """
    if isinstance(batch, np.ndarray):
        if batch.ndim and batch.shape[0] == num_envs:
            return _array_space(batch.shape[1:], batch.dtype)
    elif isinstance(batch, Mapping):
        return Dict([(key, infer_space(value, num_envs)) for key, value in batch.items()])
    elif type(batch) is tuple and all(_is_batch(part, num_envs) for part in batch):
        return Tuple([infer_space(part, num_envs) for part in batch])
    elif isinstance(batch, (tuple, list)) and len(batch) == num_envs:
        rows = as_rows(batch)
        return Space() if rows is None else _array_space(rows.shape[1:], rows.dtype)
    raise TypeError(
        f"Cannot split {reprlib.repr(batch)} of type {type(batch).__name__} into the items of {num_envs} sub-envs: a batch is an "
        "array with one row per sub-env, a dict or tuple of batches, or a tuple of one item per sub-env."
    )


def as_rows(batch: Any) -> np.ndarray | None:
    """Return ``batch`` as an array with one row per sub-env, or None for a tuple of items.

    Arrays are returned as they are; lists (of numbers, or of lists of numbers) and tuples of
    numbers, which agents may return as actions, become numeric arrays; tuples of strings,
    sequences, graphs or other objects, which is how ``Text``, ``Sequence``, ``Graph``,
    ``OneOf`` and custom spaces are batched, give None.
    """
    if isinstance(batch, np.ndarray):
        return batch
    if isinstance(batch, tuple) and not all(isinstance(item, (numbers.Number, np.generic)) for item in batch):
        return None
    try:
        rows = np.asarray(batch)
    except ValueError:  # ragged
        return None
    return rows if rows.dtype.kind in "biuf" else None


def leaf_paths(space: Space[Any]) -> list[tuple[Any, ...]]:
    """Return the key paths to the leaves of a (nested) ``Dict``/``Tuple`` space, in order.

    A space that is neither has one leaf, at the empty path ``()``.
    """
    if isinstance(space, Dict):
        return [(key, *path) for key, sub in space.spaces.items() for path in leaf_paths(sub)]
    if isinstance(space, Tuple):
        return [(j, *path) for j, sub in enumerate(space.spaces) for path in leaf_paths(sub)]
    return [()]


class BatchSplitter:
    """Splits batches of one space into the items of each sub-env, with gymnasium's ``iterate``.

    Item ``i`` has the single-env space's structure: a dict for a ``Dict`` space, a tuple for
    a ``Tuple``, a row (a view, not a copy) for an array. The space is inferred from the first
    batch when it is not given.

    Args:
        num_envs: the number of sub-envs.
        space: the single-env space; ``None`` to infer it.
    """

    __slots__ = ("num_envs", "space", "_batched")

    def __init__(self, num_envs: int, space: Space[Any] | None = None) -> None:
        self.num_envs = num_envs
        self.space = space
        self._batched: Space[Any] | None = None

    def __call__(self, batch: Any) -> Sequence[Any] | np.ndarray:
        """Return the sub-envs' items of ``batch``: item ``i`` belongs to sub-env ``i``."""
        if isinstance(batch, np.ndarray):
            return batch
        if self._batched is None:
            if self.space is None:
                self.space = infer_space(batch, self.num_envs)
            self._batched = batch_space(self.space, self.num_envs)
        return list(iterate(self._batched, batch))


def final_observations(
    next_obs: Any, info: dict[str, Any] | list[dict[str, Any]], space: Space[Any] | None = None
) -> Any:
    """Under SAME_STEP autoreset, ``next_obs`` with finished sub-envs' true final observations.

    Gymnasium puts the reset observation of a finished sub-env in ``next_obs`` and its final
    observation in ``info["final_obs"]`` (an object array of single-env observations, masked by
    ``info["_final_obs"]``); behind gymnasium's ``DictInfoToList``, in ``info[i]["final_obs"]`` of the
    list of sub-env dicts. Works for every space; ``next_obs`` itself is left unchanged.

    Args:
        next_obs: the batch of observations returned by ``env.step``.
        info: the info returned by the same ``env.step``: a dict, or a list of one dict per sub-env.
        space: the single-env observation space; ``None`` to infer the layout from ``next_obs``.

    Returns:
        A batch laid out like ``next_obs``, or ``next_obs`` itself when no sub-env finished.
    """
    if isinstance(info, list):
        rows = np.array([i for i, sub in enumerate(info) if "final_obs" in sub], dtype=np.intp)
        if not len(rows):
            return next_obs
        finals = [info[i]["final_obs"] for i in rows]
        num_envs = len(info)
    else:
        mask = info.get("_final_obs")
        if mask is None or not mask.any():
            return next_obs
        rows = np.flatnonzero(mask)
        finals = [info["final_obs"][i] for i in rows]
        num_envs = len(mask)
    if isinstance(next_obs, np.ndarray):
        return _with_rows(next_obs, rows, finals)
    return _with_final(space if space is not None else infer_space(next_obs, num_envs), next_obs, rows, finals)


def _with_final(space: Space[Any], batch: Any, rows: np.ndarray, finals: list[Any]) -> Any:
    """``batch`` of ``space`` with item ``rows[k]`` replaced by ``finals[k]``, in a new batch."""
    if isinstance(batch, np.ndarray):
        return _with_rows(batch, rows, finals)
    if isinstance(space, Dict):
        return {key: _with_final(space[key], part, rows, [f[key] for f in finals]) for key, part in batch.items()}
    if isinstance(space, Tuple):
        return tuple(
            _with_final(sub, part, rows, [f[j] for f in finals])
            for j, (sub, part) in enumerate(zip(space.spaces, batch, strict=True))
        )
    items = list(batch)  # a tuple of per-sub-env items
    for i, final in zip(rows, finals):
        items[i] = final
    return tuple(items)


def _with_rows(batch: np.ndarray, rows: np.ndarray, finals: list[Any]) -> np.ndarray:
    out = batch.copy()
    for i, final in zip(rows, finals):
        out[i] = final
    return out


def _is_batch(x: Any, num_envs: int) -> bool:
    """True for an array of ``num_envs`` rows or a dict/tuple of such batches (a Dict/Tuple batch)."""
    if isinstance(x, np.ndarray):
        return x.ndim > 0 and x.shape[0] == num_envs
    if isinstance(x, Mapping):
        return True
    if type(x) is tuple:  # not a named tuple such as a GraphInstance
        return all(_is_batch(part, num_envs) for part in x) or _is_items(x, num_envs)
    return False


def _is_items(x: tuple[Any, ...], num_envs: int) -> bool:
    """True for a tuple of ``num_envs`` items that are not scalars (strings, graphs, sequences)."""
    return len(x) == num_envs and not any(isinstance(item, (numbers.Number, np.generic)) for item in x)


@functools.lru_cache(maxsize=256)
def _array_space(shape: tuple[int, ...], dtype: np.dtype) -> Space[Any]:
    if dtype.kind in "biuf":
        return Box(0, 1, shape, dtype)
    return Space(shape, dtype)
