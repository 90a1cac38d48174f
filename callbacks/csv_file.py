"""A callback writing one tidy CSV file: a row per value, ready for ``pandas.read_csv``."""

from __future__ import annotations

import csv
import io
import itertools
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from online_trainer.callbacks.base import metric_name
from online_trainer.callbacks.files import create_with, file_path
from online_trainer.callbacks.line_file import LineFileSink
from online_trainer.options import validation

COLUMNS = ("run", "metric", "step", "value", "tag", "key", "wall_time", "experiment")
_EARLIER_HEADER = ",".join(COLUMNS[:-1])  # files written before the experiment column, appended to as they are


class CSVCallback(LineFileSink):
    """Appends every value as a row ``run,metric,step,value,tag,key,wall_time,experiment`` to one CSV file.

    One tidy (long) file for every run and metric, the shape pandas works on::

        df = pd.read_csv(exp_dir / "scalars.csv")
        returns = df[df.metric == "ep_return"].pivot(index="step", columns="run", values="value")

    ``run`` is the run number (from 1; empty for values logged outside a run); ``metric`` is
    the value's name without the run's part of the tag, the same in every run (``ep_return``,
    ``eval/ep_return``, ``agents/loss``); ``step`` is the x value (the episode index for
    episode returns and lengths, the env step for the agent's values and evaluations);
    ``tag`` and ``key`` are as logged (``ep_return/run_1`` and ``ep_return``; ``agents/run_1``
    and ``loss``); ``wall_time`` is Unix time in seconds; ``experiment`` is the sweep's configuration
    (``lr=0.1``: the runs of a sweep share their numbers across configurations), empty outside a
    sweep. A file written before that column keeps its seven columns when appended to. NaN and
    infinities are written ``nan``, ``inf`` and ``-inf``, which ``read_csv`` reads back as floats.

    Rows are kept in memory and appended ``flush_rows`` at a time, at least every ``max_delay``
    seconds when an episode ends, and on :meth:`close`, each time with one ``write`` of whole
    lines to a file opened with ``O_APPEND``: several worker processes can share the file,
    no line is ever torn, and a killed run leaves a readable file holding every row written
    so far. The header is written once, with the file, by whichever process creates it.

    Args:
        log_path: the ``.csv`` file, appended to if it exists; its directory is created on the
            first write.
        flush_rows: rows kept in memory before they are written.
        max_delay: seconds after which an episode's values also write what is kept.

    Raises:
        ValueError: ``flush_rows`` is not a positive int, or ``max_delay`` is negative.
    """

    FILE_NAME = "scalars.csv"

    def __init__(self, log_path: str | os.PathLike, flush_rows: int = 4096, max_delay: float = 2.0) -> None:
        flush_rows = validation.positive_int("flush_rows", flush_rows)
        if not isinstance(max_delay, (int, float)) or max_delay < 0:
            raise ValueError(f"max_delay must be a number of seconds >= 0, but got max_delay={max_delay!r}.")
        self.log_path = file_path("log_path", log_path, "scalars.csv")
        self.flush_rows = flush_rows
        self.max_delay = max_delay
        self._fd: int | None = None
        self._rows: list[tuple[Any, ...]] = []
        self._run: int | str = ""
        self._run_tag = ""
        self._experiment = ""
        self._width = len(COLUMNS)  # of the file's rows (seven in a file written before the experiment column)
        self._names: dict[tuple[str, str], str] = {}
        self._last_flush = 0.0
        self._lines_of: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_rows"] = []  # rows kept by the original are written by the original
        state["_names"] = {}
        return state

    def start_run(
        self, run_idx: int, seed: int, params: Mapping[str, Any], exp_dir: str | None, run_tag: str = ""
    ) -> None:
        self._run, self._run_tag = run_idx, run_tag or f"run_{run_idx}"
        own = f"run_{run_idx}"  # a sweep's tag is "lr=0.1/run_1": its configuration comes first
        self._experiment = self._run_tag[: -len(own)].rstrip("/") if self._run_tag.endswith(own) else ""
        self._names.clear()

    def end_run(self, run_idx: int, status: str) -> None:
        self.flush()
        self._run, self._run_tag, self._experiment = "", "", ""
        self._names.clear()

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        now, run, rows, names, experiment = time.time(), self._run, self._rows, self._names, self._experiment
        for key, value in data.items():
            name = names.get((key, tag)) or self._name(key, tag)
            rows.append((run, name, step, float(value), tag, key, now, experiment))
        self._lines_of[tag] = self._lines_of.get(tag, 0) + len(data)
        if len(rows) >= self.flush_rows:
            self.flush()
        elif force and now - self._last_flush > self.max_delay:
            self.flush()

    def series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> None:
        """Keep every value of ``key`` as a row, at once (see :meth:`online_trainer.callbacks.CallBack.series`)."""
        now, run, experiment = time.time(), self._run, self._experiment
        name = self._names.get((key, tag)) or self._name(key, tag)
        times = itertools.repeat(now) if wall_times is None else wall_times
        rows = [
            (run, name, step, float(value), tag, key, wall, experiment)
            for value, step, wall in zip(values, steps, times)
        ]
        self._rows.extend(rows)
        self._lines_of[tag] = self._lines_of.get(tag, 0) + len(rows)
        if len(self._rows) >= self.flush_rows or now - self._last_flush > self.max_delay:
            self.flush()

    def _name(self, key: str, tag: str) -> str:
        name = self._names[(key, tag)] = metric_name(key, tag, self._run_tag)
        return name

    def flush(self) -> None:
        """Append the rows kept so far to the file."""
        self._last_flush = time.time()
        if not self._rows:
            return
        if self._fd is None:
            self._open()  # the file's width: its header says
        buffer = io.StringIO()
        width = self._width
        rows = self._rows if width == len(COLUMNS) else [row[:width] for row in self._rows]
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        self._rows.clear()
        self._append(buffer.getvalue().encode("utf-8"))

    def _open(self) -> int:
        """Create the file with its header row unless it exists; open it for appending; return the descriptor."""
        directory = os.path.dirname(self.log_path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        create_with(self.log_path, (",".join(COLUMNS) + "\n").encode())
        with open(self.log_path, encoding="utf-8") as file:
            earlier = file.readline().rstrip("\n") == _EARLIER_HEADER
        self._width = len(COLUMNS) - earlier
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        return self._fd

    def written_files(self) -> list[str]:
        """``log_path`` once it holds values (see :meth:`online_trainer.callbacks.CallBack.written_files`)."""
        header = len(",".join(COLUMNS)) + 1  # a file with its header row only holds no value
        return [self.log_path] if os.path.isfile(self.log_path) and os.path.getsize(self.log_path) > header else []

    @staticmethod
    def entry_of_line(line: bytes) -> tuple[str | None, float | None]:
        """The ``tag`` and ``wall_time`` columns of a row (None, None for the header)."""
        row = next(csv.reader([line.decode("utf-8")]), None)
        if not row or len(row) not in (len(COLUMNS), len(COLUMNS) - 1) or row[0] == "run":
            return None, None
        try:
            wall_time: float | None = float(row[_WALL_COLUMN])
        except ValueError:
            wall_time = None
        return row[_TAG_COLUMN], wall_time

    def __repr__(self) -> str:
        return f"CSVCallback(log_path={self.log_path!r})"


_TAG_COLUMN = COLUMNS.index("tag")
_WALL_COLUMN = COLUMNS.index("wall_time")
