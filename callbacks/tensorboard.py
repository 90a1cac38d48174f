"""TensorBoard callbacks: averaged and buffered (:class:`TBCallBack`) or direct (:class:`BasicCallBack`)."""

from __future__ import annotations

import os
import time
from typing import Any, Mapping

from callbacks.base import CallBack, scalar_name
from callbacks.event_file import EventFileWriter, ScalarEncoder


class TBCallBack(CallBack):
    """Writes scalars to TensorBoard event files, averaging each tag over ``flush_every`` calls.

    Values of one ``tag`` are summed per key; on every ``flush_every``-th call with that tag
    their means are written at the step of that call. ``force=True`` writes the given values
    at once (episode summaries use it). Encoded events are buffered in memory and reach the
    file every 64 KiB, at least every ``max_delay`` seconds when a forced write comes, and
    on :meth:`close`.

    Args:
        log_dir: directory of the event files (created on the first write).
        flush_every: number of calls per tag averaged into one point; 1 writes every call.
        max_delay: seconds after which a forced write also flushes the file, so TensorBoard
            shows progress while a run goes on.
    """

    _unpicklable = ("_writer",)

    def __init__(self, log_dir: str | os.PathLike, flush_every: int = 1, max_delay: float = 2.0) -> None:
        if not isinstance(flush_every, int) or flush_every < 1:
            raise ValueError(f"flush_every must be a positive int, but got flush_every={flush_every!r}.")
        self.log_dir = os.fspath(log_dir)
        self.flush_every = flush_every
        self.max_delay = max_delay
        self._writer: EventFileWriter | None = None
        self._names: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}
        self._encoder = ScalarEncoder()
        self._pending: dict[str, tuple[dict[str, float], list[int]]] = {}
        self._last_flush = 0.0

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        if force or self.flush_every == 1:
            self._write(data, tag, step, force)
            return
        pending = self._pending.get(tag)
        if pending is None:
            pending = self._pending[tag] = ({}, [0])
        sums, count = pending
        for key, value in data.items():
            sums[key] = sums.get(key, 0.0) + value
        count[0] += 1
        if count[0] >= self.flush_every:
            self._write({key: total / count[0] for key, total in sums.items()}, tag, step, False)
            sums.clear()
            count[0] = 0

    def _write(self, data: Mapping[str, Any], tag: str, step: int, force: bool) -> None:
        writer = self._writer
        if writer is None:
            writer = self._writer = EventFileWriter(self.log_dir)
        keys = tuple(data)
        names = self._names.get((tag, keys))
        if names is None:
            names = self._names[(tag, keys)] = tuple(scalar_name(key, tag) for key in keys)
        now = time.time()
        writer.write(self._encoder.encode(names, data.values(), step, now))
        if force and now - self._last_flush > self.max_delay:
            writer.flush()
            self._last_flush = now

    def reset(self) -> None:
        self._pending.clear()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(log_dir={self.log_dir!r}, flush_every={self.flush_every})"


class BasicCallBack(TBCallBack):
    """Writes every value to TensorBoard as it comes, with no averaging and no buffering.

    Slower than :class:`TBCallBack`; use it when every point must be on disk at once.
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        super().__init__(log_dir, flush_every=1, max_delay=0.0)

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        self._write(data, tag, step, force)
        self._writer.flush()

    def __repr__(self) -> str:
        return f"BasicCallBack(log_dir={self.log_dir!r})"
