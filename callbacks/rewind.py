"""Cutting a run's outputs back to a checkpoint, so that a resumed run writes nothing twice.

A sink's :meth:`~online_trainer.callbacks.CallBack.checkpoint` flushes what it holds and says
where its files stand (a :class:`FilePosition`, returned as plain data: its :meth:`~FilePosition.to_state`,
which the run's full checkpoint keeps); before a resumed run starts,
:meth:`~online_trainer.callbacks.CallBack.rewind` removes from those files what the run wrote
after that point. Files are shared (runs of several worker processes append to one JSONL or
CSV file; a worker's TensorBoard file holds each run it ran, one after the other), so only
the resumed run's own entries are removed: those after its checkpoint's offset in the file it
was writing then, and every one in a file created after the checkpoint (by an earlier attempt
to resume it). A file is rewritten only when it holds something to remove, by a temporary
file swapped in.

A file all runs append to (JSONL, CSV) is cut by counts, not by offsets: removing one run's
entries moves every later byte, so another run's offset, taken before, would then fall past
some of its own later entries, or inside a line. Its position says how many entries of each
of the run's tags the file held (:attr:`FilePosition.counts`), and a rewind keeps that many,
wherever they are now.

Entries are the run's by their tag (``ep_return/run_1``), which another experiment logging to the same
file or folder writes too. A rewind given ``since``, the time the run's experiment was created, leaves
every entry written before it alone, whatever its tag: an experiment that ended before this one began
keeps all its entries. (Experiments writing one file at the same time under the same tags cannot be
told apart.)
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from online_trainer.callbacks.files import write_atomic

Entries = Callable[[bytes], Iterator[tuple[int, int, str | None, float | None]]]
"""Splits a file's bytes into ``(start, end, tag, wall_time)`` entries (tag None: not a run's; wall_time None:
unknown)."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FilePosition:
    """Where a sink's files stood at a run's checkpoint.

    Attributes:
        path: the file the run was writing (None when it had written none yet).
        offset: its size then, everything flushed.
        others: every other file of the sink that existed then (name -> size), left as they are.
        counts: the entries of each of the run's tags in ``path`` then; where given, a rewind keeps the first
            so many of each and removes the run's others, and ``offset`` is not used to cut.
    """

    path: str | None
    offset: int = 0
    others: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] | None = None

    KIND: ClassVar[str] = "file"
    """The ``kind`` of its :meth:`to_state`, which tells it from another sink's position."""

    def to_state(self) -> dict[str, Any]:
        """The position as plain data (what the sink's ``checkpoint`` returns, kept in the full checkpoint)."""
        state = {"kind": self.KIND, "path": self.path, "offset": self.offset, "others": dict(self.others)}
        if self.counts is not None:
            state["counts"] = dict(self.counts)
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FilePosition:
        """The position :meth:`to_state` described.

        Raises:
            ValueError: ``state`` is not a file position's (another sink's: the callbacks differ from the run's).
        """
        if isinstance(state, list):  # the experiment ran with several sinks, this call with one of them
            raise ValueError(
                f"the run's checkpoint holds {held_by(state)}, but this call has this one sink: resume with the "
                "callbacks the experiment ran with, every one in its place (a list of them, or a MultiCallback)."
            )
        if not isinstance(state, Mapping) or state.get("kind") != cls.KIND:
            raise ValueError(
                f"the run's checkpoint holds {held_by(state)} for this sink, not where its files stood: resume with "
                "the callbacks the experiment ran with."
            )
        counts = state.get("counts")
        return cls(
            state["path"],
            int(state["offset"]),
            {str(k): int(v) for k, v in state["others"].items()},
            None if counts is None else {str(k): int(v) for k, v in counts.items()},
        )


def as_file_position(state: Mapping[str, Any] | None) -> FilePosition | None:
    """The :class:`FilePosition` a checkpoint kept for a sink (its :meth:`~FilePosition.to_state`), or None
    (the run starts again: every entry of it goes).

    Raises:
        ValueError: ``state`` is another sink's position.
    """
    return None if state is None else FilePosition.from_state(state)


def check_file_position(state: Mapping[str, Any] | None, writes: Callable[[str], bool], directory: str) -> None:
    """A file sink's ``check_position``: raise ``ValueError`` unless ``state`` is None or the position of files
    the sink writes (``writes(name)`` is true for the name of each) in ``directory``, where it writes them.

    Files are matched by name (see :func:`rewind_files`), so that a moved experiment resumes: the position of
    another file sink would cut this sink's file at that sink's offset, or take it for a file made after the
    checkpoint and empty it. A file that held values at the checkpoint must still be in ``directory``: a sink
    pointed elsewhere (another ``log_dir``) would leave the values logged after the checkpoint where they were
    and log them again in its own files, every one of them twice.
    """
    at = as_file_position(state)
    if at is None:
        return
    sizes = dict(at.others) if at.path is None else {at.path: at.offset, **at.others}
    for path, size in sizes.items():
        name = os.path.basename(path)
        if not writes(name):
            raise ValueError(
                f"the run's checkpoint holds the position of {name!r} for this sink, which writes no such file: "
                "resume with the callbacks the experiment ran with."
            )
        if size > 0 and not os.path.isfile(os.path.join(directory, name)):
            raise ValueError(
                f"the run's checkpoint holds the position of {name!r} in {os.path.dirname(path) or '.'!r}, but this "
                f"sink writes in {directory!r}, which has no such file: resume with the callbacks the experiment ran "
                "with, writing where they did (their files are cut back to the checkpoint there)."
            )


def belongs(tag: str, run_tag: str) -> bool:
    """Whether a value logged under ``tag`` is the run's whose tags end with ``run_tag`` (``run_1``, ``lr=0.1/run_1``)."""
    return tag == run_tag or tag.endswith("/" + run_tag)


def _runs(tag: str | None, wall_time: float | None, run_tag: str, since: float | None) -> bool:
    """Whether an entry is the run's: logged under one of its tags, and not before its experiment began (``since``)."""
    if tag is None or not belongs(tag, run_tag):
        return False
    return since is None or wall_time is None or wall_time >= since


def takes_since(rewind: Callable[..., Any]) -> bool:
    """Whether a sink's ``rewind`` takes ``since`` (one written before the runner passed it does not)."""
    try:
        parameters = inspect.signature(rewind).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "since" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def rewind_run(callback: Any, run_tag: str, position: Any, since: float | None = None) -> None:
    """``callback.rewind(run_tag, position, since=since)``; ``since`` only to a ``rewind`` that takes it, and nothing
    for a callback without ``rewind``."""
    rewind = getattr(callback, "rewind", None)
    if not callable(rewind):
        return
    if since is not None and takes_since(rewind):
        rewind(run_tag, position, since=since)
    else:
        rewind(run_tag, position)


def position(path: str | os.PathLike | None, siblings: Iterable[str | os.PathLike] = ()) -> FilePosition:
    """The position of ``path`` (its size now) and of ``siblings`` (the sink's other files)."""
    others = {os.fspath(p): os.path.getsize(p) for p in siblings if os.fspath(p) != os.fspath(path or "")}
    if path is None or not os.path.exists(path):
        return FilePosition(None, 0, others)
    return FilePosition(os.fspath(path), os.path.getsize(path), others)


def cut_file(
    path: str | os.PathLike,
    keep_before: int | None,
    entries: Entries,
    run_tag: str,
    keep_first: Mapping[str, int] | None = None,
    drop_torn: bool = True,
    since: float | None = None,
) -> bool:
    """Remove the run's entries of ``path`` from byte ``keep_before`` on (None: all of them).

    Args:
        path: the file.
        keep_before: entries starting before this offset stay; None removes the run's entries everywhere.
        entries: splits the file's bytes into ``(start, end, tag, wall_time)`` entries (tag None: not a run's,
            kept); an incomplete entry at the end (a killed writer) is dropped whoever wrote it.
        run_tag: the run's tag suffix (see :func:`belongs`).
        keep_first: instead of ``keep_before``: the first so many entries of each of the run's tags stay,
            wherever they are, and the run's other entries go.
        drop_torn: rewrite the file to drop an incomplete last entry even when it holds nothing of the run.
            False where another process may be writing it (its last entry is then one on its way), and the
            run's file is not written again.
        since: entries written before this Unix time are not the run's, whatever their tag (another
            experiment's, in a file experiments share); None: every entry under the run's tags is.

    Returns:
        Whether the file was rewritten.
    """
    data = Path(path).read_bytes()
    start_at = 0 if keep_before is None or keep_first is not None else min(keep_before, len(data))
    kept, changed, last_end = [data[:start_at]], False, start_at
    seen: dict[str, int] = {}
    for start, end, tag, wall_time in entries(data):
        if end <= start_at:
            continue
        last_end = end
        if _runs(tag, wall_time, run_tag, since):
            assert tag is not None  # a run's entry has its tag
            if keep_first is not None:
                seen[tag] = seen.get(tag, 0) + 1
                if seen[tag] <= keep_first.get(tag, 0):
                    kept.append(data[start:end])
                    continue
            changed = True
        else:
            kept.append(data[start:end])
    if last_end < len(data) and drop_torn:  # a torn last entry
        changed = True
    short = {tag: (seen.get(tag, 0), count) for tag, count in (keep_first or {}).items() if seen.get(tag, 0) < count}
    if short:  # lines the checkpoint counted are gone (the file cut short or edited since): said, not refused
        logger.warning(
            "%s holds fewer entries of the resumed run than its checkpoint counted (%s): they were lost since "
            "(the file cut short or edited), and the run logs on after them, so the file lacks them. Put back a "
            "copy of the file before resuming to keep them.",
            os.fspath(path),
            ", ".join(f"{tag}: {found} of {count}" for tag, (found, count) in sorted(short.items())),
        )
    if changed:
        write_atomic(path, b"".join(kept))
    return changed


def rewind_files(
    files: Iterable[Path],
    run_tag: str,
    at: FilePosition | None,
    entries: Entries,
    drop_torn: bool = True,
    since: float | None = None,
) -> None:
    """Cut the run ``run_tag`` back to ``at`` in every file of a sink (None: remove all its entries).
    ``drop_torn``, ``since``: see :func:`cut_file`.

    Files are matched by name, not by the path spelled at the checkpoint: a sink's files share one
    folder, and an experiment directory reached by another path (relative or absolute, copied,
    moved) holds the same files.
    """
    current = None if at is None or at.path is None else os.path.basename(at.path)
    before = set() if at is None else {os.path.basename(other) for other in at.others}
    for file in files:
        name = os.path.basename(os.fspath(file))
        if at is None:
            cut_file(file, None, entries, run_tag, drop_torn=drop_torn, since=since)
        elif name == current:
            cut_file(file, at.offset, entries, run_tag, at.counts, drop_torn, since)
        elif name not in before:  # made after the checkpoint: by an earlier attempt at this run, or another process
            cut_file(file, None, entries, run_tag, drop_torn=drop_torn, since=since)


def run_counts(path: str | os.PathLike, entries: Entries, run_tag: str, since: float | None = None) -> dict[str, int]:
    """The entries of each of the run ``run_tag``'s tags in ``path`` (none when there is no such file); ``since``: see
    :func:`cut_file`."""
    if not os.path.exists(path):
        return {}
    counts: dict[str, int] = {}
    for _, _, tag, wall_time in entries(Path(path).read_bytes()):
        if _runs(tag, wall_time, run_tag, since):
            assert tag is not None  # a run's entry has its tag
            counts[tag] = counts.get(tag, 0) + 1
    return counts


def text_lines(
    data: bytes, entry_of: Callable[[bytes], tuple[str | None, float | None]]
) -> Iterator[tuple[int, int, str | None, float | None]]:
    """The complete lines of a text file as entries, ``entry_of(line)`` giving each one's tag and wall time (a last
    line without its newline is torn)."""
    start = 0
    while True:
        end = data.find(b"\n", start)
        if end < 0:
            return
        yield (start, end + 1, *entry_of(data[start:end]))
        start = end + 1


def event_records(data: bytes) -> Iterator[tuple[int, int, str | None, float | None]]:
    """The TFRecords of a TensorBoard event file as entries, tagged with their first value's tag, with their wall
    time."""
    from tensorboard.compat.proto import event_pb2

    start = 0
    while start + 12 <= len(data):
        length = int.from_bytes(data[start : start + 8], "little")
        end = start + 12 + length + 4
        if end > len(data):
            return
        event = event_pb2.Event.FromString(data[start + 12 : start + 12 + length])
        values = event.summary.value
        yield start, end, values[0].tag if values else None, event.wall_time
        start = end


def held_by(position: Any) -> str:
    """What a checkpoint's sink ``position`` is, for messages: ``the position of the file log.jsonl``, ``the position
    of a store (MLflow, W&B)``, ``the positions of 2 sinks (the file log.jsonl, a store (MLflow, W&B))``."""
    if isinstance(position, list):
        sinks = ", ".join(_sink_of(at) for at in position)
        return f"the position{'s' if len(position) != 1 else ''} of {len(position)} sink{'s' if len(position) != 1 else ''} ({sinks})"
    return "no position" if position is None else f"the position of {_sink_of(position)}"


def _sink_of(position: Any) -> str:
    if isinstance(position, Mapping):
        if position.get("kind") == FilePosition.KIND:
            path = position.get("path") or next(iter(position.get("others") or ()), None)
            return f"the file {os.path.basename(path)}" if path else "a file sink before its first file"
        if position.get("kind") == "store":  # online_trainer.callbacks.store_points.StorePosition
            return f"the {position['sink']} store" if position.get("sink") else "a store (MLflow, W&B)"
    return "no sink" if position is None else f"a {type(position).__name__}"
