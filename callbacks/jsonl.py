"""A callback writing one JSON object per line."""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from online_trainer.callbacks.files import file_path
from online_trainer.callbacks.line_file import LineFileSink
from online_trainer.options import validation


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _finite(value: Any) -> Any:
    """``value`` with every NaN and infinite float replaced by None (JSON ``null``), in lists and dicts too."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _dumps(record: dict[str, Any]) -> str:
    """Strict JSON: NaN and infinities, which ``json`` would write as ``NaN`` and ``Infinity``, become ``null``."""
    try:
        return json.dumps(record, allow_nan=False)
    except ValueError:  # a non-finite float somewhere: the rare path
        return json.dumps(_finite(record), allow_nan=False)


class JsonlCallback(LineFileSink):
    """Appends ``{"tag", "step", "values", "wall_time"}`` objects, one per line, to ``log_path``.

    Lines are buffered and written ``flush_every`` calls at a time (at once when
    ``force=True``) with a single ``write`` on a file opened with ``O_APPEND``, so several
    processes can share one file and no line is ever torn. Every line is strict JSON:
    NaN and infinite values are written as ``null`` (Python's ``json`` would write
    ``NaN`` and ``Infinity``, which strict parsers reject); ``pandas.read_json`` reads
    them back as NaN.

    Args:
        log_path: the ``.jsonl`` file; its directory is created on the first write.
        flush_every: number of calls buffered before they are written.
    """

    FILE_NAME = "scalars.jsonl"

    def __init__(self, log_path: str | os.PathLike, flush_every: int = 100) -> None:
        flush_every = validation.positive_int("flush_every", flush_every)
        self.log_path = file_path("log_path", log_path, "scalars.jsonl")
        self.flush_every = flush_every
        self._fd: int | None = None
        self._lines: list[str] = []
        self._lines_of: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_lines"] = []
        return state

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        values = {key: _jsonable(value) for key, value in data.items()}
        record = {"tag": tag, "step": int(step), "values": values, "wall_time": time.time()}
        self._lines.append(_dumps(record))
        self._lines_of[tag] = self._lines_of.get(tag, 0) + 1
        if force or len(self._lines) >= self.flush_every:
            self.flush()

    def series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> None:
        """One line per value, each with its wall time, written at once (see :meth:`online_trainer.callbacks.CallBack.series`)."""
        times = itertools.repeat(time.time()) if wall_times is None else wall_times
        before = len(self._lines)
        self._lines.extend(
            _dumps({"tag": tag, "step": int(step), "values": {key: _jsonable(value)}, "wall_time": float(wall)})
            for value, step, wall in zip(values, steps, times)
        )
        self._lines_of[tag] = self._lines_of.get(tag, 0) + len(self._lines) - before
        self.flush()

    def flush(self) -> None:
        """Write the buffered lines."""
        if not self._lines:
            return
        payload = ("\n".join(self._lines) + "\n").encode("utf-8")
        self._lines.clear()
        self._append(payload)

    def _open(self) -> int:
        directory = os.path.dirname(self.log_path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        return self._fd

    def written_files(self) -> list[str]:
        """``log_path`` once it holds values (see :meth:`online_trainer.callbacks.CallBack.written_files`)."""
        return [self.log_path] if os.path.isfile(self.log_path) and os.path.getsize(self.log_path) > 0 else []

    @staticmethod
    def entry_of_line(line: bytes) -> tuple[str | None, float | None]:
        """The ``tag`` and ``wall_time`` of a line (None, None for a line that is not a JSON object)."""
        try:
            record = json.loads(line)
            wall_time = record.get("wall_time")
            return record.get("tag"), float(wall_time) if isinstance(wall_time, (int, float)) else None
        except (ValueError, AttributeError):
            return None, None

    def __repr__(self) -> str:
        return f"JsonlCallback(log_path={self.log_path!r}, flush_every={self.flush_every})"
