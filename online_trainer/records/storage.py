"""The experiment directory: file names, metric streams, manifest, args, config and loaders.

Layout::

    exp_dir/
      args.yaml  config.py            what produced the experiment
      manifest.json                   seeds, budget and how every run ended
      metrics_run{i}.pkl              appended pickle chunks, each a list of episode records
      all_metrics.pkl                 list of runs (lists of records), written at the end
      Run{i}_E{n}* / Run{i}_S{n}*     periodic checkpoints (episode / step budget)
      Run{i}_Last*  Run{i}_Best_agent.t
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import glob
import importlib.util
import io
import json
import logging
import operator
import os
import pickle
import re
import time
import types
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from online_trainer.errors import ManifestDamagedError
from online_trainer.records.episode_table import PROTOCOL, dump_runs_to

logger = logging.getLogger(__name__)

ARGS_FILE = "args.yaml"
CONFIG_FILE = "config.py"
MANIFEST_FILE = "manifest.json"
CONFIG_YAML = "config.yaml"
"""The resolved config of an experiment made by ``online-trainer run`` (overrides applied, defaults filled in)."""
INPUT_FILES = (CONFIG_FILE, ARGS_FILE, CONFIG_YAML)
"""The files that say what produced an experiment (a Python call's ``config.py`` and ``args.yaml``, the command's
``config.yaml``): ``overwrite=True`` sets aside an earlier experiment's, whoever made it."""
ALL_METRICS_FILE = "all_metrics.pkl"
HYPERPARAMETERS_FILE = "hyperparameters.yaml"
SET_ASIDE_DIR = ".replaced"
"""Where ``overwrite=True`` keeps an earlier experiment until the call that replaces it ends."""
SETTING_ASIDE_DIR = ".replacing"
"""Where ``overwrite=True`` moves an earlier experiment's files one by one; renamed to :data:`SET_ASIDE_DIR` once
every one is there, so that a call killed while it moved them leaves each file of the earlier experiment either
here or in place, and the next call puts them all back."""
# Files that belong to one multi_run: an earlier experiment is recognised by them and
# ``overwrite=True`` replaces them (see online_trainer.experiment.manifest.set_aside).
SWEEP_FILE = "sweep.json"
"""What marks a sweep's directory (its base seed and budget; its configurations are experiments in sub-directories)."""

_SAVED = r"(?:[._-].*)?"  # what agent.save(prefix) may add to the prefix (see saved_by)
EXPERIMENT_NAMES = (
    re.escape(MANIFEST_FILE),
    re.escape(ALL_METRICS_FILE),
    r"env\.json",  # the env the experiment ran on (online_trainer.run.env_identity)
    r"agent\.json",  # the agent it trained (online_trainer.run.agent_settings)
    r"metrics_run\d+\.pkl",
    r"eval_run\d+\.pkl",
    "videos",
    rf"Run\d+_[ES]\d+{_SAVED}",  # periodic checkpoints: what agent.save(Run{i}_E{n}) wrote
    rf"Run\d+_Last{_SAVED}",
    rf"Run\d+_Best{_SAVED}",  # Run{i}_Best_agent.t, or what save(Run{i}_Best) wrote
    r"Run\d+_Resume\.pkl",
    rf"Run\d+_Resume_agent{_SAVED}",
    r"events\.out\.tfevents\..*",
    r".*\.jsonl",
    # the sinks of online_trainer.callbacks: CSV files, the MLflow store and run ids, W&B's files and run ids
    r".*\.csv",
    r"mlflow\.db",
    r"mlflow_runs\.json",
    "mlartifacts",
    "wandb",
    r"wandb_runs\.json",
    "slurm",  # the Slurm backend's results, progress and job logs
)
"""The names of an experiment's files and folders, as regular expressions matched against a whole name: a run's
are its number and nothing else (``metrics_run1.pkl``, not a user's ``metrics_run1_old.pkl``: M22)."""


class TruncatedMetricsWarning(RuntimeWarning):
    """A metrics stream ends in an incomplete chunk (its run was killed while writing)."""


def metrics_path(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Path of the metrics stream of run ``run_idx``."""
    return Path(exp_dir) / f"metrics_run{run_idx}.pkl"


def video_dir(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Folder of run ``run_idx``'s evaluation videos (``eval{k}_step{n}.mp4``)."""
    return Path(exp_dir) / "videos" / f"run{run_idx}"


def evaluations_path(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Path of the evaluation stream of run ``run_idx`` (one record per evaluation)."""
    return Path(exp_dir) / f"eval_run{run_idx}.pkl"


def checkpoint_path(exp_dir: str | os.PathLike, run_idx: int, label: str) -> Path:
    """Path prefix handed to ``agent.save``: ``Run{i}_{label}`` (``E10``, ``S5000``, ``Last``)."""
    return Path(exp_dir) / f"Run{run_idx}_{label}"


def resume_path(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Path of run ``run_idx``'s full checkpoint (see :mod:`online_trainer.run.full_checkpoint`)."""
    return Path(exp_dir) / f"Run{run_idx}_Resume.pkl"


def best_agent_path(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Path of the torch-saved state of the agent at its best episode."""
    return Path(exp_dir) / f"Run{run_idx}_Best_agent.t"


def best_agent_prefix(exp_dir: str | os.PathLike, run_idx: int) -> Path:
    """Path prefix handed to ``agent.save`` at the best episode by an agent whose ``save()`` returns no state (it
    saves to files only, as Stable-Baselines3's models do): ``Run{i}_Best``."""
    return checkpoint_path(exp_dir, run_idx, "Best")


_SAVED_SUFFIX = re.compile(r"[._-]")
"""What may follow a prefix in the names ``agent.save(prefix)`` gives its files: ``Run1_Last.pt``, a folder
``Run1_Last``, ``Run1_Last_model.zip``, ``Run1_Last-critic.pt``."""


def saved_by(prefix: Path) -> list[Path]:
    """The files and folders ``agent.save(prefix)`` wrote: ``prefix`` itself, and names that continue it after a
    ``.``, ``_`` or ``-``; never the runner's own ``Run{i}_Best_agent.t`` (beside the prefix ``Run{i}_Best``)."""
    name = prefix.name
    return sorted(
        path
        for path in prefix.parent.glob(f"{glob.escape(name)}*")
        if (path.name == name or _SAVED_SUFFIX.match(path.name, len(name)))
        and not re.fullmatch(r"Run\d+_Best_agent\.t", path.name)
    )


_EXPERIMENT_NAME = re.compile("|".join(f"(?:{name})" for name in EXPERIMENT_NAMES), re.DOTALL)


def sink_lock_files(exp_dir: str | os.PathLike) -> list[Path]:
    """The lock files the JSONL and CSV sinks keep beside their files in ``exp_dir`` (``.callback.jsonl.lock``)."""
    root = Path(exp_dir)
    return sorted(path for pattern in (".*.jsonl.lock", ".*.csv.lock") for path in root.glob(pattern) if path.is_file())


def existing_experiment_files(exp_dir: str | os.PathLike) -> list[Path]:
    """Files in ``exp_dir`` written by an earlier ``multi_run`` (whole names that match :data:`EXPERIMENT_NAMES`,
    hidden ones aside; one listing of the folder)."""
    try:
        names = os.listdir(exp_dir)
    except OSError:  # no such folder, or not one: nothing of an experiment there
        return []
    root = Path(exp_dir)
    return sorted(root / name for name in names if name[:1] != "." and _EXPERIMENT_NAME.fullmatch(name))


def write_atomic(
    path: str | os.PathLike, data: bytes | Iterable[bytes | memoryview] | Callable[[BinaryIO], None]
) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, and swap it in.

    Args:
        path: the file to replace.
        data: bytes, pieces of them in order, or a function that writes the content to the open
            file (``pickle.dump`` into it spares a copy of a large pickle in memory).

    Raises:
        OSError: naming ``path`` (a full disk, a read-only directory). On any error the
            temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            if callable(data):
                data(f)
            elif isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            else:
                f.writelines(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise write_error(exc, path) from exc
        raise


ABANDONED_AFTER = 60.0
"""Seconds after which a temporary file of :func:`write_atomic` is taken for one a killed process left: a write
takes milliseconds (a younger one may be another process's write under way: a Slurm job recording its run)."""
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)\.tmp")


def remove_abandoned_temporaries(exp_dir: str | os.PathLike) -> list[Path]:
    """Remove the temporary files of :func:`write_atomic` (``.NAME.<pid>.tmp``) older than :data:`ABANDONED_AFTER`
    in ``exp_dir``: a process killed while it wrote (``manifest.json``, as a run ended) left them, and nothing else
    would (F17). Called by the holder of the experiment's lock; returns what it removed (logged)."""
    removed: list[Path] = []
    now = time.time()
    for path in Path(exp_dir).glob(".*.tmp"):
        match = _TEMPORARY.fullmatch(path.name)
        if match is None or int(match["pid"]) == os.getpid():
            continue
        try:
            if now - path.stat().st_mtime < ABANDONED_AFTER:
                continue
            path.unlink()
        except OSError:  # gone meanwhile, or not ours to remove: left as it is
            continue
        removed.append(path)
    if removed:
        logger.info("removed what killed writes left in %s: %s", exp_dir, ", ".join(p.name for p in sorted(removed)))
    return removed


def write_error(exc: OSError, path: str | os.PathLike) -> OSError:
    """``exc`` again, saying which file could not be written and what to do."""
    hint = " Free some space or choose another exp_dir." if exc.errno == errno.ENOSPC else ""
    return type(exc)(exc.errno, f"could not write {os.fspath(path)}: {exc.strerror or exc}.{hint}")


# ---------------------------------------------------------------- metric streams


class MetricsStream:
    """Appends pickled chunks to a stream file (``metrics_run{i}.pkl``, ``eval_run{i}.pkl``).

    Every chunk is one complete pickle of a list of records, handed to the operating system
    in one write, so a run killed at any moment leaves every earlier chunk readable. The file
    is created exclusively: an existing stream is never replaced. A run's episode records are
    pickled from its columns (:meth:`online_trainer.records.episode_table.EpisodeTable.chunk`) and
    written with :meth:`write`; other records are buffered with :meth:`append`, ``flush_every``
    to a chunk.

    Args:
        path: the stream file.
        flush_every: records buffered by :meth:`append` per chunk.
        resume_at: continue a resumed run's stream, cut to this size (its :meth:`position` at the checkpoint).
    """

    def __init__(self, path: str | os.PathLike, flush_every: int = 10, resume_at: int | None = None) -> None:
        self.path = Path(path)
        self.flush_every = flush_every
        self._buffer: list[dict[str, Any]] = []
        if resume_at is None:
            self._file: BinaryIO = open(self.path, "xb", buffering=0)
            return
        problem = stream_problem(self.path, resume_at)  # planning checked it; a file changed since is refused too
        if problem is not None:
            raise ValueError(f"{self.path} does not hold what its run's full checkpoint recorded: {problem}.")
        self._file = open(self.path, "r+b" if self.path.exists() else "xb", buffering=0)
        try:
            self._file.truncate(resume_at)
            self._file.seek(resume_at)
        except BaseException:
            self._file.close()
            raise

    def position(self) -> int:
        """The stream's size, everything buffered written: where a resumed run continues it."""
        self.flush()
        return self._file.tell()

    def append(self, record: dict[str, Any]) -> None:
        """Buffer one record, writing a chunk when ``flush_every`` are buffered."""
        self._buffer.append(record)
        if len(self._buffer) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the buffered records as one chunk.

        Raises:
            OSError: naming the stream (a full disk); earlier chunks stay readable.
        """
        if self._buffer:
            try:
                self.write(pickle.dumps(self._buffer, PROTOCOL))
            finally:
                self._buffer = []

    def write(self, chunk: bytes) -> None:
        """Write one chunk (a complete pickle) in one ``write(2)``.

        Raises:
            OSError: naming the stream (a full disk); earlier chunks stay readable.
        """
        try:
            written = self._file.write(chunk)  # unbuffered: one write(2)
            while written < len(chunk):  # a short write: the rest
                written += self._file.write(memoryview(chunk)[written:])
        except OSError as exc:
            raise write_error(exc, self.path) from exc

    def close(self) -> None:
        """Write what is buffered and close the file."""
        if not self._file.closed:
            try:
                self.flush()
            finally:
                with contextlib.suppress(OSError):  # flush said what failed; a second error would hide it
                    self._file.close()


def write_all_metrics(exp_dir: str | os.PathLike, runs: Sequence[Any]) -> None:
    """Atomically write ``all_metrics.pkl``: the list of runs, each loading as a list of records (or None).

    ``runs[k]``: run ``k + 1``'s :class:`~online_trainer.records.episode_table.EpisodeTable`, list of
    records, or None.
    """
    path = Path(exp_dir) / ALL_METRICS_FILE
    # Only the call that holds the experiment's lock writes it: another's temporary file is that of a call killed
    # while writing it (SIGTERM's default action), as large as the file, and nothing else would remove it.
    for stale in Path(exp_dir).glob(f".{ALL_METRICS_FILE}.*.tmp"):
        if stale.name != f".{ALL_METRICS_FILE}.{os.getpid()}.tmp":
            stale.unlink(missing_ok=True)
    write_atomic(path, functools.partial(dump_runs_to, runs))


def iter_metrics_chunks(path: str | os.PathLike) -> Iterator[list[dict[str, Any]]]:
    """Yield the chunks of a metrics stream; a truncated last chunk ends it with a warning."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"No metrics stream at {path}: the run has not started, or it ran with dump_metrics=False."
        )
    with open(path, "rb") as f:
        largest = 0  # the largest chunk read: what a write cut off by a kill leaves is less
        while True:
            start = f.tell()
            try:
                chunk = pickle.load(f)
            except EOFError:
                if f.tell() != start or f.read(1):
                    _warn_truncated(f, path, start, largest)
                return
            except Exception as exc:  # a cut or garbage: pickle raises one of many (OverflowError for a huge frame)
                _warn_truncated(f, path, start, largest, exc)
                return
            largest = max(largest, f.tell() - start)
            yield chunk


def stream_chunks(path: str | os.PathLike, count: int) -> list[bytes] | None:
    """The bytes of each chunk of the metrics stream ``path``, as written; None when they cannot stand for the run's
    ``count`` records in ``all_metrics.pkl`` as they are: a chunk does not load whole, they hold another number of
    records, or some record holds frames (which ``all_metrics.pkl`` leaves out)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    chunks, start, view, records = [], 0, memoryview(data), 0
    with io.BytesIO(data) as f:
        while start < len(data):
            try:
                chunk = pickle.load(f)
            except Exception:  # garbage, a cut: the loaders say so; here the run is pickled from its records
                return None
            if not isinstance(chunk, list) or any(isinstance(r, dict) and r.get("frames") for r in chunk):
                return None
            end = f.tell()
            chunks.append(bytes(view[start:end]))
            start, records = end, records + len(chunk)
    return chunks if records == count else None


def stream_problem(path: str | os.PathLike, size: int) -> str | None:
    """What is wrong with the first ``size`` bytes of stream ``path`` as a run's full checkpoint recorded them
    (whole chunks, ``size`` bytes in all), or None when nothing is. They are read and loaded once."""
    path = Path(path)
    if not path.is_file():
        return f"it does not exist, and its run's checkpoint recorded {size} bytes of it" if size else None
    with open(path, "rb") as f:
        actual = os.fstat(f.fileno()).st_size
        if actual < size:
            return f"it holds {actual} bytes, fewer than the {size} its run's checkpoint recorded"
        while f.tell() < size:
            start = f.tell()
            try:
                pickle.load(f)
            except Exception as exc:  # garbage or zeros: pickle raises one of many
                return f"its chunk at byte {start} does not load ({type(exc).__name__}: {exc})"
        if f.tell() != size:
            return f"its chunks do not end at byte {size}, where its run's checkpoint recorded its end"
    return None


def _warn_truncated(f: BinaryIO, path: Path, offset: int, largest: int, exc: Exception | None = None) -> None:
    detail = f" ({type(exc).__name__}: {exc})" if exc else ""
    size = os.fstat(f.fileno()).st_size
    if largest and size - offset > 2 * largest:  # more than a chunk cut off by a kill: damaged where it stops
        message = (
            f"{path} cannot be read from byte {offset} on{detail}, and {size - offset} of its {size} bytes are left "
            "unread, more than a run killed while writing leaves: the file is damaged there. The complete chunks "
            "before it were loaded; put back a copy of the file to read the rest."
        )
    else:
        message = (
            f"{path} ends in an incomplete chunk at byte {offset}{detail}: its run was probably killed while writing; "
            "the complete chunks before it were loaded."
        )
    warnings.warn(message, TruncatedMetricsWarning, stacklevel=3)


# ---------------------------------------------------------------- manifest, args, config


def read_manifest(exp_dir: str | os.PathLike) -> dict[str, Any]:
    """Return the manifest of an experiment (seeds, budget, status of each run)."""
    path = Path(exp_dir) / MANIFEST_FILE
    if not path.is_file():
        raise FileNotFoundError(f"No experiment manifest at {path}: is {exp_dir} an experiment directory?")
    try:
        manifest = json.loads(path.read_bytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestDamagedError(path, exc) from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("runs"), list):
        raise ManifestDamagedError(path, ValueError("it holds no list of runs"))
    return manifest


def write_manifest(exp_dir: str | os.PathLike, manifest: Mapping[str, Any]) -> None:
    """Atomically replace the manifest of ``exp_dir``."""
    write_atomic(Path(exp_dir) / MANIFEST_FILE, json.dumps(manifest, indent=2, default=str).encode())


class _ArgsDumper(yaml.SafeDumper):
    """Safe YAML that keeps tuples tuples, so ``load_args`` returns an equal Namespace."""


class _ArgsLoader(yaml.SafeLoader):
    pass


_ArgsDumper.add_representer(tuple, lambda d, v: d.represent_sequence("tag:yaml.org,2002:python/tuple", v))
_ArgsLoader.add_constructor(
    "tag:yaml.org,2002:python/tuple", lambda loader, node: tuple(loader.construct_sequence(node))
)


def dump_args(args: argparse.Namespace | Mapping[str, Any]) -> str:
    """Serialise ``args`` to YAML; raise ValueError naming a value YAML cannot hold."""
    values = dict(vars(args) if isinstance(args, argparse.Namespace) else args)
    try:
        return yaml.dump(values, Dumper=_ArgsDumper, sort_keys=True)
    except yaml.representer.RepresenterError as exc:
        bad = next((k for k, v in values.items() if _not_yaml(v)), "?")
        raise ValueError(
            f"args[{bad!r}]={values.get(bad)!r} cannot be written to {ARGS_FILE}: use numbers, strings, "
            "bools, None, lists, tuples or dicts of those."
        ) from exc


def _not_yaml(value: Any) -> bool:
    try:
        yaml.dump(value, Dumper=_ArgsDumper)
    except yaml.representer.RepresenterError:
        return True
    return False


def write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` (crash-safe, see :func:`write_atomic`) unless the file holds it already;
    return whether it was written. A call that changes nothing leaves the file, and its time, alone."""
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    write_atomic(path, data)
    return True


def write_text_once(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (crash-safe, see :func:`write_atomic`) unless the same text is there.

    Raises:
        FileExistsError: ``path`` holds other text.
        OSError: naming ``path`` (a full disk, a read-only directory); ``path`` is left as it was.
    """
    if path.exists():
        if path.read_text(encoding="utf-8") == text:
            return
        raise FileExistsError(f"{path} already exists with other content: pass overwrite=True or another exp_dir.")
    write_atomic(path, text.encode("utf-8"))


def load_args(exp_dir: str | os.PathLike) -> argparse.Namespace:
    """Return the ``args`` given to the trainer of ``exp_dir`` as an ``argparse.Namespace``."""
    path = Path(exp_dir) / ARGS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"No {ARGS_FILE} at {path}: the trainer was not given args.")
    return argparse.Namespace(**(yaml.load(path.read_text(), Loader=_ArgsLoader) or {}))


def load_config(exp_dir: str | os.PathLike) -> types.ModuleType:
    """Import and return the ``config.py`` copied into ``exp_dir``."""
    path = Path(exp_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"No {CONFIG_FILE} at {path}: the trainer was not given a config.")
    spec = importlib.util.spec_from_file_location(f"online_trainer_config_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"Cannot import {path} as a module.")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- loaders


def require_dir(exp_dir: str | os.PathLike) -> Path:
    """``exp_dir`` as a path, once checked to be a directory.

    Raises:
        FileNotFoundError: it does not exist.
        NotADirectoryError: it is a file (M22: said "does not exist").
    """
    path = Path(exp_dir)
    if not path.is_dir():
        if path.exists():
            raise NotADirectoryError(
                f"{path} is a file, not an experiment directory: give the folder multi_run wrote into (its exp_dir)."
            )
        raise FileNotFoundError(f"Experiment directory {path} does not exist.")
    return path


def run_indices(exp_dir: str | os.PathLike) -> list[int]:
    """Indices of the runs of ``exp_dir`` that have a metrics stream, in order."""
    path = require_dir(exp_dir)
    indices = []
    for stream in path.glob("metrics_run*.pkl"):
        suffix = stream.stem[len("metrics_run") :]
        if suffix.isdigit():
            indices.append(int(suffix))
    return sorted(indices)


def load_run_metrics(exp_dir: str | os.PathLike, run_idx: int) -> list[dict[str, Any]]:
    """Return the episode records of run ``run_idx`` (counted from 1), read from its metrics stream.

    Raises:
        TypeError: ``run_idx`` is not an int.
        ValueError: ``run_idx`` is below 1.
        FileNotFoundError: the experiment has no such run, or the run no metrics stream.
    """
    path = require_dir(exp_dir)
    try:
        if isinstance(run_idx, bool):
            raise TypeError
        run_idx = operator.index(run_idx)  # an int, or a numpy integer (a DataFrame's run column)
    except TypeError:
        raise TypeError(
            f"run_idx must be a run's number, an int counted from 1, but got run_idx={run_idx!r}."
        ) from None
    if run_idx < 1:
        raise ValueError(f"run_idx={run_idx}, but runs are numbered from 1: metrics_run1.pkl is the first run's.")
    stream = metrics_path(path, run_idx)
    if not stream.is_file() and (path / MANIFEST_FILE).is_file():
        num_runs = len(read_manifest(path).get("runs") or [])
        if run_idx > num_runs:
            raise FileNotFoundError(f"run_idx={run_idx}, but {path} has runs 1 to {num_runs}.")
    return [record for chunk in iter_metrics_chunks(stream) for record in chunk]


def load_all_run_metrics(exp_dir: str | os.PathLike) -> list[list[dict[str, Any]]]:
    """Return the records of every run, ``[run][episode]``, read from the metrics streams."""
    indices = run_indices(exp_dir)
    if not indices:
        raise FileNotFoundError(f"No metrics_run*.pkl in {exp_dir}: was it run with dump_metrics=True?")
    return [load_run_metrics(exp_dir, i) for i in indices]


def load_transitions(exp_dir: str | os.PathLike) -> list[list[list[tuple]]]:
    """Return ``[run][episode]`` lists of ``(obs, action, reward, terminated, truncated)``."""
    return [[record["transitions"] for record in run] for run in load_all_run_metrics(exp_dir)]


def load_agent_logs(exp_dir: str | os.PathLike) -> list[list[dict[str, Any] | None]]:
    """Return ``[run][episode]`` agent logs (dicts of arrays, or None)."""
    return [[record["agent_logs"] for record in run] for run in load_all_run_metrics(exp_dir)]
