"""What the sinks that append one line per value to one shared text file (CSV, JSONL) have in common."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

from online_trainer.callbacks.base import CallBack
from online_trainer.callbacks.files import check_not_exp_dir, named
from online_trainer.callbacks.rewind import (
    FilePosition,
    as_file_position,
    belongs,
    check_file_position,
    position,
    rewind_files,
    run_counts,
    text_lines,
)


class LineFileSink(CallBack):
    """A sink writing whole lines to ``log_path``, opened with ``O_APPEND``, for every run of an experiment.

    Each write is one ``os.write`` of whole lines, so worker processes can share the file and no
    line is ever torn. A run's position is how many lines of each of its tags the file held at its
    checkpoint; a resumed run keeps that many and removes its later lines (found by
    :meth:`entry_of_line`), and leaves other runs' lines alone, and every line written before the run's
    experiment began (``since``: another experiment's, under the same tags). Counts, not the file's size: the
    other runs cut back in the same resume move every later byte (see :mod:`online_trainer.callbacks.rewind`).

    Writers hold the file's lock shared while they append, and a rewind holds it alone while it swaps
    in the cut file (a Slurm job that restarts cuts its run back while the other jobs write): a writer
    whose descriptor is on the file swapped out opens the new one, or its lines would go nowhere.
    The lock is a hidden file beside ``log_path`` (``.scalars.jsonl.lock``).

    Subclasses set :attr:`FILE_NAME` and ``log_path``, define :meth:`flush` (writing with
    :meth:`_append`), :meth:`_open` and :meth:`entry_of_line`, and count in ``_lines_of`` (tag ->
    lines) every line they keep to write.
    """

    FILE_NAME: ClassVar[str]
    """The name the docs suggest for the file (``scalars.csv``), used in messages."""

    _unpicklable = ("_fd", "_lock_fd")
    log_path: str
    _fd: int | None = None
    _lock_fd: int | None = None
    _lines_of: dict[str, int]
    """Lines of each tag in the file: those this process wrote, and those a rewind kept (a resumed run's)."""

    @staticmethod
    def entry_of_line(line: bytes) -> tuple[str | None, float | None]:
        """The tag a line of the file was logged under (None for a line of no run: a header, a torn line) and its
        wall time (None when it has none)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Append what is kept to the file."""
        raise NotImplementedError

    def _open(self) -> int:
        """Open ``log_path`` for appending (made with its header, if the format has one); return the descriptor."""
        raise NotImplementedError

    def _entries(self, data: bytes) -> Iterator[tuple[int, int, str | None, float | None]]:
        return text_lines(data, self.entry_of_line)

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        if fcntl is None:  # Windows: one process writes (no Slurm there)
            yield
            return
        if self._lock_fd is None:
            directory, name = os.path.split(self.log_path)
            if directory:
                os.makedirs(directory, exist_ok=True)
            self._lock_fd = os.open(os.path.join(directory, f".{name}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _append(self, payload: bytes) -> None:
        """Append whole lines to the file at ``log_path`` now (see the class docstring).

        A write that fails part way (a full disk takes what fits, in whole pages) leaves no part of a line: the
        file is cut back to its last whole line (F16: ``pandas.read_json(lines=True)`` failed on the JSONL file).
        """
        try:
            with self._locked(exclusive=False):
                fd = self._fd
                if fd is not None and not _same_file(fd, self.log_path):
                    self._fd = None
                    os.close(fd)
                self._write_all(self._open() if self._fd is None else self._fd, payload)
        except OSError as exc:
            self._cut_torn_line()
            raise named(exc, self.log_path) from exc

    def _cut_torn_line(self) -> None:
        """Cut the file back to the end of its last whole line, holding its lock alone (cutting takes no space)."""
        with contextlib.suppress(OSError), self._locked(exclusive=True), open(self.log_path, "rb+") as f:
            end = f.seek(0, os.SEEK_END)
            keep = end
            while keep > 0:  # back to the last newline, a block at a time
                start = max(0, keep - (1 << 16))
                f.seek(start)
                block = f.read(keep - start)
                newline = block.rfind(b"\n")
                if newline >= 0:
                    keep = start + newline + 1
                    break
                keep = start
            if keep < end:
                f.truncate(keep)

    @staticmethod
    def _write_all(fd: int, payload: bytes) -> None:
        view = memoryview(payload)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def checkpoint(self, run_tag: str) -> dict[str, Any]:
        """Write what is kept; the position is the file's size and the lines of each of the run's tags."""
        self.flush()
        at = position(self.log_path)
        counts = {tag: n for tag, n in self._lines_of.items() if belongs(tag, run_tag)}
        return FilePosition(at.path, at.offset, at.others, counts).to_state()

    def check_position(self, position: Mapping[str, Any] | None) -> None:
        """Raise ``ValueError`` unless ``position`` is None or where this sink's files stood."""
        check_file_position(position, os.path.basename(self.log_path).__eq__, os.path.dirname(self.log_path) or ".")

    def rewind(self, run_tag: str, position: Mapping[str, Any] | None, since: float | None = None) -> None:
        """Remove the run's lines written after ``position`` (all of them when None); lines written before ``since``
        (the Unix time the run's experiment was created) are not the run's, whatever their tag."""
        at = as_file_position(position)
        if os.path.exists(self.log_path):
            with self._locked(exclusive=True):
                rewind_files([Path(self.log_path)], run_tag, at, self._entries, since=since)
        for tag in [tag for tag in self._lines_of if belongs(tag, run_tag)]:
            del self._lines_of[tag]
        if at is not None:  # the resumed run goes on counting from the lines kept
            kept = at.counts if at.counts is not None else run_counts(self.log_path, self._entries, run_tag, since)
            self._lines_of.update(kept)

    def setup(self, exp_dir: str | os.PathLike | None, runs: Mapping[int, int]) -> None:
        """Refuse a ``log_path`` that is the experiment directory, before any run starts."""
        check_not_exp_dir("log_path", self.log_path, exp_dir, self.FILE_NAME)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            for name in ("_fd", "_lock_fd"):
                fd = getattr(self, name)
                if fd is not None:
                    setattr(self, name, None)
                    os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    """Whether ``fd`` is open on the file at ``path`` (not on one a rewind swapped out)."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_ino, held.st_dev) == (now.st_ino, now.st_dev)
