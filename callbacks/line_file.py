"""What the sinks that append one line per value to one shared text file (CSV, JSONL) have in common."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from online_trainer.callbacks.base import CallBack
from online_trainer.callbacks.files import check_not_exp_dir
from online_trainer.callbacks.rewind import as_file_position, check_file_position, position, rewind_files, text_lines


class LineFileSink(CallBack):
    """A sink writing whole lines to ``log_path``, opened with ``O_APPEND``, for every run of an experiment.

    Each write is one ``os.write`` of whole lines, so worker processes can share the file and no
    line is ever torn. A run's position is the file's size at its checkpoint; a resumed run
    removes its own lines written after it (found by :meth:`tag_of_line`) and leaves other runs'
    lines alone.

    Subclasses set :attr:`FILE_NAME` and ``log_path``, open ``_fd``, and define :meth:`flush`
    and :meth:`tag_of_line`.
    """

    FILE_NAME: ClassVar[str]
    """The name the docs suggest for the file (``scalars.csv``), used in messages."""

    _unpicklable = ("_fd",)
    log_path: str
    _fd: int | None

    @staticmethod
    def tag_of_line(line: bytes) -> str | None:
        """The tag a line of the file was logged under, or None for a line of no run (a header, a torn line)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Append what is kept to the file."""
        raise NotImplementedError

    def _entries(self, data: bytes) -> Iterator[tuple[int, int, str | None]]:
        return text_lines(data, self.tag_of_line)

    @staticmethod
    def _write_all(fd: int, payload: bytes) -> None:
        view = memoryview(payload)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def checkpoint(self, run_tag: str) -> dict[str, Any]:
        """Write what is kept; the file's size is the run's position."""
        self.flush()
        return position(self.log_path).to_state()

    def check_position(self, position: Mapping[str, Any] | None) -> None:
        """Raise ``ValueError`` unless ``position`` is None or where this sink's files stood."""
        check_file_position(position, os.path.basename(self.log_path).__eq__, os.path.dirname(self.log_path) or ".")

    def rewind(self, run_tag: str, position: Mapping[str, Any] | None) -> None:
        """Remove the run's lines written after ``position`` (all of them when None)."""
        if os.path.exists(self.log_path):
            rewind_files([Path(self.log_path)], run_tag, as_file_position(position), self._entries)

    def setup(self, exp_dir: str | os.PathLike | None, runs: Mapping[int, int]) -> None:
        """Refuse a ``log_path`` that is the experiment directory, before any run starts."""
        check_not_exp_dir("log_path", self.log_path, exp_dir, self.FILE_NAME)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._fd is not None:
                fd, self._fd = self._fd, None
                os.close(fd)
