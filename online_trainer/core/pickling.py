"""Episode records pickled fast, and once for both metric files.

Per episode, a fast env's run used to pay for numpy's own array reducer (about 3 us an array:
it imports ``pickle`` and ``numpy._core.numeric`` on every call), for the pickler's memo (a
``MEMOIZE`` for every dict, list, tuple and buffer of every record), and for pickling every
record twice: into its ``metrics_run{i}.pkl`` chunk and into ``all_metrics.pkl``.

* :class:`RecordPickler` gives arrays numpy's own protocol-5 form,
  ``_frombuffer(PickleBuffer(a), a.dtype, a.shape, "C")``, built without those imports: its
  pickles are byte for byte those of :mod:`pickle` (checked at import; if they differ,
  numpy's reducer is used).
* :class:`ChunkEncoder` pickles records in the pickler's fast mode (no memo) after a fixed
  preamble that memoizes the objects every record shares: the record keys, numpy's
  ``_frombuffer``, ``"C"`` and common dtypes. The records' opcodes then hold no ``MEMOIZE``
  and ``GET`` only the preamble's objects, so they mean the same after that preamble in any
  pickle: metrics chunks and ``all_metrics.pkl`` (:func:`dump_runs`) are made of them, and
  ``all_metrics.pkl`` reuses a stream's opcodes for the very records it pickled
  (:class:`EncodedRecords`).

A metrics chunk (a pickle of the list of the chunk's records)::

    PROTO 5  FRAME n  <preamble: builds and memoizes the shared objects, pops them>
    EMPTY_LIST MARK <records' opcodes> APPENDS STOP

``all_metrics.pkl`` (a pickle of the list of runs)::

    PROTO 5  FRAME n <preamble>  EMPTY_LIST MARK
      per run: NONE, or EMPTY_LIST MARK (FRAME n <some records' opcodes>)... APPENDS
    APPENDS STOP

Records whose opcodes do not fit in one 64 KiB frame, records with frames, and records that
fast mode refuses (cycles) are pickled as :mod:`pickle` pickles them: their chunk, or (for a
single record too big for a frame) the whole ``all_metrics.pkl``. What fast mode changes: an
object found twice in the records pickled together (other than the shared ones) is loaded as
two equal objects.
"""

from __future__ import annotations

import io
import logging
import operator
import pickle
from typing import Any, Sequence

import numpy as np

logger = logging.getLogger(__name__)

PROTOCOL = 5
_PROTO, _FRAME, _STOP = b"\x80\x05", b"\x95", b"."
_MARK, _TUPLE, _EMPTY_LIST, _APPENDS, _POP, _NONE = b"(", b"t", b"]", b"e", b"0", b"N"
_TUPLE_N = {1: b"\x85", 2: b"\x86", 3: b"\x87"}
_HEAD = 11  # PROTO 5, FRAME and its 8-byte length

# The keys of the records EpisodeTracker.finish builds, in order (interned: the same objects).
RECORD_KEYS = ("ep_return", "ep_length", "frames", "transitions", "actions", "agent_seed", "episode_index",
               "agent_logs", "global_step", "wall_time")
_DTYPES = ("int64", "float32", "float64", "int8")  # Discrete and MultiDiscrete, Box, numpy, MultiBinary
_MARKER = "online_trainer records/1"  # the chunk layout of this module

_reduced = np.zeros(1).__reduce_ex__(PROTOCOL)
_FROM_BUFFER = _reduced[0]  # numpy._core.numeric._frombuffer (numpy.core.numeric in numpy 1.x)
_C = _reduced[1][-1]  # numpy's "C": the same object, so that the memo finds it as pickle's does
_fast_arrays = isinstance(_reduced[1][0], pickle.PickleBuffer) and len(_reduced[1]) == 4


class RecordPickler(pickle.Pickler):
    """A protocol-5 ``pickle.Pickler`` that reduces C-contiguous numpy arrays without numpy's per-call imports.

    The result is numpy's own: ``_frombuffer`` of the array's bytes (a ``bytearray`` when
    the array is writable), its dtype, shape and ``"C"``, for arrays of numbers and bools;
    other arrays (Fortran order, strings, dates, structured or object dtypes, subclasses)
    and objects go to their own reducers.
    """

    def reducer_override(self, obj: Any) -> Any:
        if _fast_arrays and type(obj) is np.ndarray and obj.dtype.kind in "biufc" and obj.flags.c_contiguous:
            return _FROM_BUFFER, (pickle.PickleBuffer(obj), obj.dtype, obj.shape, _C)
        return NotImplemented


def dumps(obj: Any) -> bytes:
    """``pickle.dumps(obj, 5)``, the same bytes, with arrays reduced by :class:`RecordPickler`."""
    buffer = io.BytesIO()
    RecordPickler(buffer, PROTOCOL).dump(obj)
    return buffer.getvalue()


class _Preamble:
    """The shared objects' opcodes (memoizing each, then popping them) and the pickler memo they leave."""

    def __init__(self) -> None:
        shared = [_MARKER, *RECORD_KEYS, _FROM_BUFFER, _C, *(np.dtype(name) for name in _DTYPES)]
        buffer = io.BytesIO()
        pickler = RecordPickler(buffer, PROTOCOL)
        pickler.dump(shared)
        data = buffer.getvalue()
        if data[:3] != _PROTO + _FRAME or int.from_bytes(data[3:_HEAD], "little") != len(data) - _HEAD \
                or data[-1:] != _STOP:
            raise ValueError("the preamble is not one frame")
        self.ops = data[_HEAD:-1] + _POP
        self.memo = pickler.memo.copy()
        self.shared = shared  # the memo refers to these objects by id: keep them alive


def _frame(data: bytes) -> bytes:
    return _FRAME + len(data).to_bytes(8, "little")


class ChunkEncoder:
    """Pickles lists of records in the layouts of the module's docstring (one encoder per stream)."""

    def __init__(self) -> None:
        self._buffer = io.BytesIO()
        self._pickler: RecordPickler | None = None
        if _PREAMBLE is not None:
            self._pickler = RecordPickler(self._buffer, PROTOCOL)
            self._pickler.fast = True
            self._pickler.memo = _PREAMBLE.memo

    def encode(self, records: Sequence[Any], kept: EncodedRecords | None = None) -> bytes:
        """One complete pickle of ``list(records)``: a metrics chunk.

        Args:
            records: the chunk's records.
            kept: where to keep the records with their opcodes, for :func:`dump_runs`.
        """
        # Frames are big (no single frame of the pickle holds them) and held nowhere but in the stream file.
        ops = self.record_ops(records) if records and not _any_frames(records) else None
        if kept is not None:
            kept.add(records, ops)
        if ops is None:
            return dumps(list(records))
        head = _PREAMBLE.ops + _EMPTY_LIST + _MARK
        return b"".join((_PROTO, _FRAME, (len(head) + len(ops) + 2).to_bytes(8, "little"), head, ops, _APPENDS, _STOP))

    def record_ops(self, records: Sequence[Any]) -> bytes | None:
        """The opcodes that push ``records`` on the unpickler's stack after the preamble (one frame), or None."""
        if self._pickler is None or not records:
            return None
        buffer = self._buffer
        try:
            self._pickler.dump(tuple(records))
            data = buffer.getvalue()
        except Exception:  # e.g. fast mode refuses a cycle; pickled as usual, which raises if it must
            return None
        finally:
            buffer.seek(0)
            buffer.truncate()
        if data[:3] != _PROTO + _FRAME or int.from_bytes(data[3:_HEAD], "little") != len(data) - _HEAD \
                or data[-1:] != _STOP:
            return None  # more than one frame: its inner frames cannot be cut out
        n = len(records)
        if n > 3:  # MARK <records> TUPLE
            return data[_HEAD + 1:-2] if data[_HEAD:_HEAD + 1] == _MARK and data[-2:-1] == _TUPLE else None
        return data[_HEAD:-2] if data[-2:-1] == _TUPLE_N[n] else None  # <records> TUPLE1/2/3


class EncodedRecords:
    """The records a metrics stream pickled, in order, batch by batch, with the opcodes of each batch.

    :func:`dump_runs` reuses the opcodes of a batch for the very same record objects at the same
    places, so that ``all_metrics.pkl`` does not pickle them again: records are not changed once
    streamed (a run that keeps another version of a record, e.g. without its frames, keeps
    another object). Batches pickled plainly (records with frames among them) are kept as
    their number of records only. The opcodes stay in the process that made them: a copy (a
    result sent back by a worker) is empty.
    """

    def __init__(self) -> None:
        self.batches: list[tuple[tuple[Any, ...] | None, bytes | None, int]] = []

    def add(self, records: Sequence[Any], ops: bytes | None) -> None:
        """Keep a batch: the records with their opcodes, or (``ops`` None) their number only."""
        self.batches.append((None, None, len(records)) if ops is None else (tuple(records), ops, len(records)))

    def __reduce__(self) -> tuple[Any, ...]:
        return EncodedRecords, ()


def _any_frames(records: Sequence[Any]) -> bool:
    """Whether some record holds frames (anything but None or an empty list under ``"frames"``)."""
    for record in records:
        frames = record.get("frames") if type(record) is dict else None
        if frames is not None and not (type(frames) is list and not frames):
            return True
    return False


class _Plain(Exception):
    """Some record does not fit in a frame: the runs are pickled plainly."""


def dump_runs(runs: Sequence[Sequence[Any] | None], encoded: Sequence[EncodedRecords | None] | None = None,
              batch: int = 64) -> list[bytes]:
    """A pickle of ``list(runs)`` (each a list of records, or None), in pieces to write in order.

    Args:
        runs: the records of each run, or None.
        encoded: for each run, what its stream kept (None: nothing). Where ``runs`` holds the
            very objects of a kept batch, at the same places, the batch's opcodes are used again.
        batch: the other records are pickled this many at a time (one at a time where a batch
            exceeds a frame); when a single record does not fit, the whole list is pickled as
            :mod:`pickle` does.
    """
    if _PREAMBLE is None:
        return [dumps(list(runs))]
    encoder = ChunkEncoder()

    def encode(records: Sequence[Any]) -> list[bytes]:
        pieces = []
        for start in range(0, len(records), batch):
            part = records[start:start + batch]
            ops = encoder.record_ops(part)
            for ops in [ops] if ops is not None else [encoder.record_ops([record]) for record in part]:
                if ops is None:
                    raise _Plain
                pieces += [_frame(ops), ops]
        return pieces

    pieces = [_PROTO, _frame(_PREAMBLE.ops), _PREAMBLE.ops, _EMPTY_LIST, _MARK]
    try:
        for records, kept in zip(runs, encoded or [None] * len(runs)):
            if records is None:
                pieces.append(_NONE)
                continue
            pieces += [_EMPTY_LIST, _MARK]
            done = 0  # records[:done] are in pieces
            for streamed, ops, count in kept.batches if kept is not None else ():
                end = done + count
                if end > len(records):
                    break
                if streamed is not None and all(map(operator.is_, streamed, records[done:end])):
                    pieces += [_frame(ops), ops]
                else:
                    pieces += encode(records[done:end])
                done = end
            pieces += encode(records[done:])
            pieces.append(_APPENDS)
    except _Plain:
        return [dumps(list(runs))]
    pieces += [_APPENDS, _STOP]
    return pieces


def same_values(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are equal in type and value, arrays included (dtype, shape, writeable)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.flags.writeable == b.flags.writeable \
            and bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    return a == b


def _check() -> None:
    """Use the fast paths only when this Python and numpy pickle as this module expects."""
    global _fast_arrays, _PREAMBLE
    sample = [np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros(3, dtype=np.int64)[::2], np.array(True),
              np.asfortranarray(np.ones((2, 2))), np.array(["a"]), np.zeros(0, np.int8), np.arange(3).view(np.uint8)]
    if dumps(sample) != pickle.dumps(sample, PROTOCOL):  # pragma: no cover - another numpy
        _fast_arrays = False
        logger.debug("numpy's array pickles differ from RecordPickler's: numpy's reducer is used")
    try:
        _PREAMBLE = _Preamble()
        encoder = ChunkEncoder()
        shared = [1.5, "s"]
        records = [{**{key: np.arange(i + 2) for key in RECORD_KEYS}, "frames": [], "x": shared, "y": shared, "i": i}
                   for i in range(6)]
        parts = (records[:1], records[1:5], records[5:])
        kept = EncodedRecords()
        chunks = [encoder.encode(part, kept) for part in parts]
        runs = [records[:5], None, records[5:]]
        pieces = dump_runs(runs, [kept, None, kept], batch=2)  # run 1 reuses the chunks; run 3 cannot
        if len(pieces) == 1 or len(encoder._pickler.memo.copy()) != len(_PREAMBLE.memo) \
                or not same_values(pickle.loads(b"".join(pieces)), runs) \
                or not all(same_values(pickle.loads(chunk), part) for chunk, part in zip(chunks, parts)):
            raise ValueError("the spliced pickles do not load as the records")
    except Exception as exc:  # pragma: no cover - a Python whose pickle works otherwise
        _PREAMBLE = None
        logger.debug("metric chunks are pickled as usual: %s", exc)


_PREAMBLE: _Preamble | None = None
_check()
