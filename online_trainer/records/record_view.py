"""A run's episode records as ``multi_run`` hands them back: a sequence of dicts built as they are read."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from online_trainer.records.episode_table import RAW_KEYS, RECORD_KEYS, EpisodeTable, read_only_actions

SCALAR_KEYS = {
    "ep_return": ("returns", np.float64),
    "ep_length": ("lengths", np.int64),
    "global_step": ("steps", np.int64),
    "wall_time": ("times", np.float64),
}
READ_BLOCK = 1024  # records built at a time while iterating


class RunRecords(Sequence):
    """One run's episode records, as ``multi_run`` returns them: a read-only sequence of dicts.

    It reads like the list of record dicts it stands for: ``len(run)``, ``run[i]``, ``run[-1]``,
    ``run[a:b]`` (a list), iteration, ``in``, ``==`` with a list of records, ``+``, and
    ``pandas.DataFrame(list(run))``. The dicts are built from the run's columns when they are
    read, so a run's records cost nothing until then; each read builds fresh dicts, so
    changes to one are not seen by the next read: ``list(run)`` gives a list of your own.
    Action arrays are read-only views of the run's actions (copy one to change it); the run's
    own arrays, and the files written from them, stay writeable.
    :meth:`column` gives one key of every record at once. It pickles as a plain list of dicts.

    Args:
        table: the run's :class:`EpisodeTable`, no longer changed.
    """

    __slots__ = ("_table",)

    def __init__(self, table: EpisodeTable) -> None:
        self._table = table

    def __len__(self) -> int:
        return len(self._table)

    def __getitem__(self, index: Any) -> Any:
        table, count = self._table, len(self._table)
        if isinstance(index, slice):
            start, stop, step = index.indices(count)
            if step == 1:
                return table.records(table.first + start, table.first + max(start, stop), read_only=True)
            return [self[i] for i in range(start, stop, step)]
        i = operator.index(index)
        if i < 0:
            i += count
        if not 0 <= i < count:
            raise IndexError(f"record index {index} out of range: the run has {count} episode records")
        return table.records(table.first + i, table.first + i + 1, read_only=True)[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        table = self._table
        for lo in range(table.first, table.count, READ_BLOCK):
            yield from table.records(lo, min(lo + READ_BLOCK, table.count), read_only=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunRecords):
            return other._table is self._table or list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Any) -> list[dict[str, Any]]:
        return list(self) + list(other)

    def __radd__(self, other: Any) -> list[dict[str, Any]]:
        return list(other) + list(self)

    def __repr__(self) -> str:
        return f"<RunRecords: {len(self)} episode records of the run with seed {self._table.agent_seed}>"

    def __reduce__(self) -> tuple[Any, ...]:
        # the records with the run's own (writeable) arrays: a copy or an unpickled list is the user's to change
        return list, (self._table.records(),)

    def column(self, key: str) -> Any:
        """Every record's ``key``, in episode order, without building the dicts.

        Returns:
            A numpy array for ``ep_return``, ``ep_length``, ``global_step``, ``wall_time``,
            ``episode_index`` and ``agent_seed``; a list for the other keys.

        Raises:
            KeyError: ``key`` is not a record key.
        """
        table = self._table
        if key in SCALAR_KEYS:
            name, dtype = SCALAR_KEYS[key]
            return np.array(getattr(table, name), dtype=dtype)
        if key == "episode_index":
            return np.arange(table.first + 1, table.count + 1)
        if key == "agent_seed":
            return np.full(len(table), table.agent_seed)
        if key not in table.keys():
            raise KeyError(f"column({key!r}): not a record key; the keys are {list(table.keys())}")
        return [record[key] for record in self]


class LoadedRecords(RunRecords):
    """A run's records read back as a list of dicts (from its metrics file, or from a worker), read like a
    :class:`RunRecords`: ``multi_run`` hands every run back the same way, whether it ran in this call or
    an earlier one that ``resume=True`` continues. Each read gives fresh dicts, whose action arrays are
    read-only views, as a :class:`RunRecords` does.

    Args:
        records: the run's record dicts, in episode order, no longer changed.
    """

    __slots__ = ("_records",)

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [_fresh(record) for record in self._records[index]]
        try:
            return _fresh(self._records[operator.index(index)])
        except IndexError:
            raise IndexError(
                f"record index {index} out of range: the run has {len(self._records)} episode records"
            ) from None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(_fresh, self._records)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RunRecords):
            return len(other) == len(self) and list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        seed = self._records[0].get("agent_seed") if self._records else None
        return f"<RunRecords: {len(self)} episode records of the run with seed {seed}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self._records),)

    def column(self, key: str) -> Any:
        """Every record's ``key``, in episode order (see :meth:`RunRecords.column`).

        Raises:
            KeyError: ``key`` is not a record key.
        """
        keys = self._records[0].keys() if self._records else (*RECORD_KEYS, *RAW_KEYS)
        if key not in keys:
            raise KeyError(f"column({key!r}): not a record key; the keys are {list(keys)}")
        values = [record[key] for record in self._records]
        if key in SCALAR_KEYS:
            return np.array(values, dtype=SCALAR_KEYS[key][1])
        if key in ("episode_index", "agent_seed"):
            return np.array(values, dtype=np.int64)
        return values


def _fresh(record: dict[str, Any]) -> dict[str, Any]:
    """A new dict of ``record`` whose actions are read-only views, as :class:`RunRecords` hands them out: an
    in-place change to one read would reach every later read of the run."""
    fresh = dict(record)
    if "actions" in fresh:
        fresh["actions"] = read_only_actions(fresh["actions"])
    return fresh


def as_records(run: Any) -> RunRecords | None:
    """A run's records as a :class:`RunRecords` (``run``: an :class:`EpisodeTable`, a list of records, or None)."""
    if run is None or isinstance(run, RunRecords):
        return run
    return RunRecords(run) if isinstance(run, EpisodeTable) else LoadedRecords(list(run))
