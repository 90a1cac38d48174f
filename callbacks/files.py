"""Small files the sinks keep beside the experiment, written so that a crash never leaves half of one.

(The callbacks stand beside the runner and do not import it, so these are their own helpers.)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path


def named(exc: OSError, path: str | os.PathLike) -> OSError:
    """``exc`` again, saying which file could not be written (a full disk said only "No space left on device")."""
    hint = " Free some space, then resume." if exc.errno == errno.ENOSPC else ""
    return type(exc)(exc.errno, f"could not write {os.fspath(path)}: {exc.strerror or exc}.{hint}")


@contextlib.contextmanager
def _temporary(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path``, removed however the block ends (a full disk left a 0-byte one for good);
    an OSError of the block names ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
    except OSError as exc:
        raise named(exc, path) from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _write(tmp: Path, data: bytes) -> None:
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, and swap it in.

    Raises:
        OSError: naming ``path``; the temporary file is removed and ``path`` left as it was.
    """
    path = Path(path)
    with _temporary(path) as tmp:
        _write(tmp, data)
        os.replace(tmp, path)


def create_with(path: str | os.PathLike, data: bytes) -> bool:
    """Create ``path`` holding ``data``, all at once, unless it exists; return whether this call created it.

    The file appears with its content (a hard link to a complete temporary file), so a process
    that finds it never reads it half-written, and of several processes creating it at once
    exactly one does.

    Raises:
        OSError: naming ``path``; the temporary file is removed.
    """
    path = Path(path)
    if path.exists():
        return False
    with _temporary(path) as tmp:
        _write(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    return True


def read_ids(path: str | os.PathLike) -> dict[int, str]:
    """The run number -> id map kept in ``path`` (empty when there is no such file)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return {}
    return {int(run): str(run_id) for run, run_id in json.loads(text).items()}


def write_ids(path: str | os.PathLike, ids: dict[int, str]) -> None:
    """Keep the run number -> id map ``ids`` in ``path`` (JSON, replaced atomically)."""
    text = json.dumps({str(run): ids[run] for run in sorted(ids)}, indent=2) + "\n"
    write_atomic(path, text.encode())


def file_path(name: str, log_path: str | os.PathLike, example: str) -> str:
    """``log_path`` as a string; raise ValueError naming ``name`` when it is a directory (the sink writes one file).

    ``example``: the file name the message suggests inside that directory (``"scalars.csv"``).
    """
    path = os.fspath(log_path)
    if os.path.isdir(path) or path.endswith(("/", os.sep)):
        raise ValueError(
            f"{name} is the path of the file the sink writes, but got {name}={path!r}, which is a directory: pass a "
            f"file in it, e.g. {name}={os.path.join(path, example)!r}."
        )
    return path


def check_not_exp_dir(name: str, path: str, exp_dir: str | os.PathLike | None, example: str) -> None:
    """Raise ValueError when the file ``path`` is the experiment directory itself (``JsonlCallback(exp_dir)`` for a
    new experiment: the directory does not exist yet when the sink is made, and every run would fail at its end)."""
    if exp_dir is not None and os.path.abspath(path) == os.path.abspath(exp_dir):
        raise ValueError(
            f"{name} is the path of the file the sink writes, but got {name}={path!r}, which is the experiment "
            f"directory: pass a file in it, e.g. {name}={os.path.join(path, example)!r}."
        )
