"""Scalar events kept as numbers and encoded as TensorBoard records in batches, with numpy.

Logging a scalar costs a few list appends: :class:`ScalarBatch` keeps the step, the wall
time and the values of each call in the group of its layout (the scalar names of one
``(tag, keys)``). :meth:`ScalarBatch.encode` turns everything kept into framed TFRecords at
once. The events of a group differ only in the wall time, the step and the values, so a
group whose steps take the same number of varint bytes is laid out as one ``uint8`` matrix:
the constant bytes come from a template row, the variable ones are written column by column.
The CRC32C of every payload comes from per-byte tables: for messages of one length the CRC is
affine, ``crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0)``, so the CRC of a payload is the CRC of the
template xor one table entry per variable byte. The records are byte for byte what
:meth:`online_trainer.callbacks.event_file.ScalarEncoder.encode` gives one at a time, and every scalar's
records are in the order of its calls.
"""

from __future__ import annotations

import functools
import operator
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import crc32c
import numpy as np

from online_trainer.callbacks.base import scalar_name
from online_trainer.callbacks.event_file import _CRC_MASK_DELTA, _PACK_U64, _masked_crc, _value_head, _varint

# A step takes 1 + (the number of these limits it reaches) varint bytes; a negative step, as uint64, takes 10.
_VARINT_LIMITS = np.array([1 << (7 * j) for j in range(1, 10)], dtype=np.uint64)
_BIT_OF_BYTE = ((np.arange(256)[:, None] >> np.arange(8)) & 1).astype(bool)
_index, _now = operator.index, time.time


class _Group:
    """The pending events of one layout: parallel lists, one entry per call (``k`` values each), and the
    array chunks of series (each already in call order, after the lists' entries kept before it)."""

    __slots__ = ("names", "heads", "seqs", "steps", "walls", "values", "chunks")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        heads = [_value_head(name) for name in names]
        heads[0] = b"\x2a" + _varint(sum(len(h) + 4 for h in heads)) + heads[0]  # Summary field of the Event
        self.heads = heads
        self.seqs: list[int] = []
        self.steps: list[int] = []
        self.walls: list[float] = []
        self.values: list[float] = []
        self.chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add_chunk(self, seqs: np.ndarray, steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> None:
        """Keep a series' events (after those of the lists so far)."""
        if self.seqs:
            self.chunks.append(self._lists())
        self.chunks.append((seqs, steps, walls, values))

    def _lists(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        chunk = (
            np.array(self.seqs, dtype=np.int64),
            np.array(self.steps, dtype=np.int64),
            np.array(self.walls, dtype=np.float64),
            np.array(self.values, dtype=np.float64).reshape(len(self.seqs), len(self.names)),
        )
        self.seqs, self.steps, self.walls, self.values = [], [], [], []
        return chunk

    def take(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """The events kept, as arrays (sequence numbers, steps, wall times, values), or None; the group is then empty."""
        if self.seqs:
            self.chunks.append(self._lists())
        chunks, self.chunks = self.chunks, []
        if len(chunks) <= 1:
            return chunks[0] if chunks else None
        seqs, steps, walls, values = zip(*chunks)
        return np.concatenate(seqs), np.concatenate(steps), np.concatenate(walls), np.concatenate(values)


@functools.lru_cache(maxsize=256)
def _crc_tables(size: int, var_cols: tuple[int, ...]) -> np.ndarray:
    """Entry ``256 * j + b``: what byte value ``b`` at position ``var_cols[j]`` of a ``size``-byte payload adds
    (xor) to its CRC. They depend on the layout's geometry only: the runs of a sweep, whose tags have the same
    lengths, share them."""
    zero_crc = crc32c.crc32c(bytes(size))
    basis = np.empty((len(var_cols), 8), dtype=np.uint32)
    probe = bytearray(size)
    for j, col in enumerate(var_cols):
        for bit in range(8):
            probe[col] = 1 << bit
            basis[j, bit] = crc32c.crc32c(bytes(probe)) ^ zero_crc
        probe[col] = 0
    tables = np.bitwise_xor.reduce(np.where(_BIT_OF_BYTE[None, :, :], basis[:, None, :], np.uint32(0)), axis=2)
    tables.flags.writeable = False  # shared
    return tables.ravel()


class _Shape:
    """The constant parts of the records of one layout whose steps take ``m`` varint bytes."""

    __slots__ = ("size", "template", "value_cols", "var_cols", "base_crc", "tables", "table_rows")

    def __init__(self, heads: list[bytes], m: int) -> None:
        payload = bytearray(b"\x09" + bytes(8) + b"\x10" + bytes(m))
        var_cols = list(range(1, 9)) + list(range(10, 10 + m))
        self.value_cols = []
        for head in heads:
            payload += head
            self.value_cols.append(len(payload))
            var_cols += range(len(payload), len(payload) + 4)
            payload += bytes(4)
        size = len(payload)
        self.size = size
        self.template = np.frombuffer(
            _PACK_U64(size) + _masked_crc(_PACK_U64(size)) + bytes(payload) + bytes(4), dtype=np.uint8
        )
        self.var_cols = np.array(var_cols, dtype=np.intp)
        self.base_crc = np.uint32(crc32c.crc32c(bytes(payload)))
        self.tables = _crc_tables(size, tuple(var_cols))
        self.table_rows = np.arange(len(var_cols), dtype=np.intp) * 256

    def encode(self, steps: np.ndarray, walls: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
        """The records of ``len(steps)`` events as a matrix, one row (record) per event."""
        n = len(steps)
        rows = np.empty((n, len(self.template)), dtype=np.uint8)
        rows[:] = self.template
        payload = rows[:, 12 : 12 + self.size]
        payload[:, 1:9] = walls.astype("<f8").view(np.uint8).reshape(n, 8)
        for j in range(m):
            byte = (steps >> np.uint64(7 * j)) & np.uint64(0x7F)
            payload[:, 10 + j] = byte | np.uint64(0x80) if j < m - 1 else byte
        with np.errstate(over="ignore"):  # beyond float32: inf, as TensorBoard's own writer stores it
            packed = values.astype("<f4").view(np.uint8).reshape(n, -1, 4)
        for k, col in enumerate(self.value_cols):
            payload[:, col : col + 4] = packed[:, k]
        contributions = self.tables[payload[:, self.var_cols] + self.table_rows]
        crc = np.bitwise_xor.reduce(contributions, axis=1) ^ self.base_crc
        masked = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_CRC_MASK_DELTA)
        rows[:, 12 + self.size :] = masked.astype("<u4").view(np.uint8).reshape(n, 4)
        return rows


class ScalarBatch:
    """Scalars logged but not yet encoded, in call order across every tag.

    Attributes:
        count: events kept since the last :meth:`encode`.
    """

    def __init__(self) -> None:
        self._groups: dict[tuple[str, ...], _Group] = {}
        self._layouts: dict[tuple[str, ...], _Group] = {}
        self._shapes: dict[tuple[tuple[str, ...], int], _Shape] = {}
        self.count = 0
        self.run_tag = ""
        """The run's part of its tags (``run_1``; ``lr=0.1/run_1`` in a sweep), for the scalars' names."""

    def add(self, data: Mapping[str, Any], tag: str, step: int) -> int:
        """Keep the values of ``data`` under ``tag`` at ``step`` and now; return the number of events kept.

        Values are read now (``float(value)``), so later changes to a mutable value (a numpy
        0-d array, a tensor) do not reach the log. An empty ``data`` logs nothing.

        Raises:
            TypeError: ``step`` is not an integer, or a value is not a number.
        """
        key = (tag, *data)
        group = self._groups.get(key)
        if group is None:
            if not data:
                return self.count
            group = self._group(key)
        step = _index(step)
        values = group.values
        kept = len(values)
        try:
            for value in data.values():
                values.append(float(value))
        except Exception:
            del values[kept:]  # keep the group's lists aligned
            raise
        group.steps.append(step)
        group.walls.append(_now())
        group.seqs.append(self.count)
        self.count += 1
        return self.count

    def step_logger(self, tag: str, limit: int, on_full: Callable[[], Any]) -> StepScalars:
        """A ``call_back`` for ``agent.update`` that keeps its dicts under ``tag`` (see :class:`StepScalars`)."""
        return StepScalars(self, tag, limit, on_full)

    def add_series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> int:
        """Keep ``values[j]`` of scalar ``key`` under ``tag`` at ``steps[j]``, in order; return the count kept.

        ``wall_times[j]``: the wall time of ``values[j]`` (seconds since the epoch); None: now.

        Raises:
            TypeError: a step is not an integer, or a value is not a number.
        """
        count = len(values)
        if count != len(steps) or (wall_times is not None and count != len(wall_times)):
            raise ValueError(
                f"add_series: {count} values for {len(steps)} steps"
                + ("" if wall_times is None else f" and {len(wall_times)} wall times")
            )
        if not count:  # an empty chunk would leave encode() an empty group to lay out
            return self.count
        group_key = (tag, key)
        group = self._groups.get(group_key) or self._group(group_key)
        # every array made before the group changes: a bad value or step leaves the batch as it was
        floats = _numbers(values, np.float64, float)
        if type(steps) is range:  # the run passes a range of episode indices
            step_array = np.arange(steps.start, steps.stop, steps.step, dtype=np.int64)
        else:
            step_array = _numbers(steps, np.int64, _index, kinds="biu")
        walls = np.full(count, _now()) if wall_times is None else _numbers(wall_times, np.float64, float)
        group.add_chunk(np.arange(self.count, self.count + count), step_array, walls, floats.reshape(count, 1))
        self.count += count
        return self.count

    def _group(self, key: tuple[str, ...]) -> _Group:
        tag, keys = key[0], key[1:]
        names = tuple(scalar_name(k, tag, self.run_tag) for k in keys)
        group = self._layouts.get(names)  # the same scalars reached through another tag spelling
        if group is None:
            group = self._layouts[names] = _Group(names)
        self._groups[key] = group
        return group

    def encode(self) -> bytes:
        """The framed records of every event kept, in call order; the batch is then empty."""
        if not self.count:
            return b""
        parts: list[_Part] = []
        for group in self._layouts.values():
            kept = group.take()
            if kept is None:
                continue
            seqs, steps, walls, values = kept
            steps = steps.view(np.uint64)  # negative: two's complement
            widths = np.searchsorted(_VARINT_LIMITS, steps, side="right") + 1
            low, high = int(widths.min()), int(widths.max())
            for m in range(low, high + 1):
                shape = self._shapes.get((group.names, m))
                if shape is None:
                    shape = self._shapes[(group.names, m)] = _Shape(group.heads, m)
                if low == high:
                    parts.append(_Part(group.names, seqs, shape.encode(steps, walls, values, m)))
                    break
                pick = widths == m
                if pick.any():
                    rows = shape.encode(steps[pick], walls[pick], values[pick], m)
                    parts.append(_Part(group.names, seqs[pick], rows))
        self.count = 0
        return _in_call_order(parts)


def _numbers(values: Sequence[Any], dtype: type, convert: Callable[[Any], Any], kinds: str = "biuf") -> np.ndarray:
    """``values`` as a 1-d array of ``dtype``, each converted by ``convert`` unless numpy reads them as numbers.

    ``np.asarray`` reads a list of Python numbers at C speed; anything else (None, a string, an
    object, a float where ``kinds`` wants integers) goes through ``convert`` one by one, which
    raises for what it does not take.
    """
    array = np.asarray(values)
    if array.ndim == 1 and array.dtype.kind in kinds:
        return array.astype(dtype)  # a copy: the caller's array may change after
    return np.array([convert(value) for value in values], dtype=dtype)


class StepScalars:
    """``call_back(data)`` keeps ``data`` under ``tag`` at :attr:`step`, as :meth:`ScalarBatch.add` does, in one call.

    What ``TBCallBack`` hands to ``agent.update`` through the runner: an agent may log at every
    update, and three nested calls (the logger, the sink, the batch) cost a 64-sub-env CartPole
    run about 2% of its time. ``on_full`` is called once ``limit`` events are kept.
    """

    __slots__ = ("batch", "tag", "step", "limit", "on_full", "groups")

    def __init__(self, batch: ScalarBatch, tag: str, limit: int, on_full: Callable[[], Any]) -> None:
        self.batch, self.tag, self.step, self.limit, self.on_full = batch, tag, 0, limit, on_full
        self.groups: dict[tuple[str, ...], _Group] = {}  # by the dict's keys: the tag is this logger's

    def __call__(self, data: Mapping[str, Any]) -> None:
        keys = tuple(data)
        group = self.groups.get(keys)
        if group is None:
            if not keys:
                return
            group = self.groups[keys] = self.batch._group((self.tag, *keys))
        values = group.values
        kept = len(values)
        try:
            for value in data.values():
                values.append(float(value))
        except Exception:
            del values[kept:]  # keep the group's lists aligned
            raise
        batch = self.batch
        group.steps.append(self.step)
        group.walls.append(_now())
        group.seqs.append(batch.count)
        batch.count += 1
        if batch.count >= self.limit:
            self.on_full()


class _Part:
    """Encoded records of equal length: their scalar names, sequence numbers (ascending) and rows."""

    __slots__ = ("names", "seqs", "rows")

    def __init__(self, names: tuple[str, ...], seqs: list[int] | np.ndarray, rows: np.ndarray) -> None:
        self.names, self.seqs, self.rows = names, seqs, rows


def _in_call_order(parts: list[_Part]) -> bytes:
    """The rows of ``parts`` with every scalar's records in call order.

    TensorBoard reads each scalar's series in file order and ignores the order across
    scalars, so parts are simply concatenated unless two of them share a scalar and
    interleave in time; then every record goes to its place by sequence number.
    """
    parts.sort(key=lambda part: part.seqs[0])
    for k, part in enumerate(parts):
        for later in parts[k + 1 :]:
            if later.seqs[0] < part.seqs[-1] and not set(part.names).isdisjoint(later.names):
                return _merged(parts)
    return b"".join(part.rows.tobytes() for part in parts)


def _merged(parts: list[_Part]) -> bytes:
    lengths = np.empty(sum(len(part.seqs) for part in parts), dtype=np.int64)
    for part in parts:
        lengths[part.seqs] = part.rows.shape[1]
    offsets = np.cumsum(lengths) - lengths
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    for part in parts:
        out[offsets[part.seqs][:, None] + np.arange(part.rows.shape[1])] = part.rows
    return out.tobytes()
