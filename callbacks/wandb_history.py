"""Reading back the history of a W&B run from its local run files (``wandb/*run-*-{id}/run-{id}.wandb``).

:func:`load_wandb_history` gives a run's points as a table, online or offline, without a W&B
server (W&B's own reader of these files was removed in wandb 0.31). W&B's service writes each run's records to a ``.wandb`` file: a 7-byte header, then a
LevelDB-style log of 32 KiB blocks, each record a ``wandb_internal_pb2.Record``. A resumed
:class:`~online_trainer.callbacks.WandbCallback` run reads every earlier file of its run id
(one per attempt) to learn which points the run holds. A file cut short by a kill ends at
its last complete record.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from online_trainer.callbacks.files import read_ids

if TYPE_CHECKING:
    import pandas as pd

RUN_IDS_FILE = "wandb_runs.json"
"""The W&B id of each run of an experiment, under its directory: ``{"1": "k3x9...", ...}``."""
BLOCK = 32768
HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def record_bytes(data: bytes) -> Iterator[bytes]:
    """The complete records of a ``.wandb`` file's bytes, in order (a torn last record is left out)."""
    if data[:4] != b":W&B":
        raise ValueError("not a W&B run file (its header is not ':W&B')")
    pending, pos = b"", HEADER
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # the rest of a block is padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 or pos + 7 + length > len(data):
            return
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            yield pending


def run_files(wandb_dir: str | os.PathLike, run_id: str) -> list[Path]:
    """The run files of the W&B run ``run_id`` under ``wandb_dir`` (online and offline), oldest first.

    Each attempt has its folder, ``[offline-]run-{YYYYmmdd_HHMMSS}-{id}``; W&B adds ``-1``, ``-2``, ...
    to the folders of attempts that start in the same second as an earlier one.
    """
    folder = re.compile(rf"(?:offline-)?run-(\d{{8}}_\d{{6}})-{re.escape(run_id)}(?:-(\d+))?")
    found = []
    for path in Path(wandb_dir).glob(f"*run-*-{run_id}*/run-{run_id}.wandb"):
        match = folder.fullmatch(path.parent.name)
        if match:
            found.append((match[1], int(match[2] or 0), path.stat().st_mtime, path))
    return [path for *_, path in sorted(found)]


def history_rows(path: str | os.PathLike) -> Iterator[dict[str, Any]]:
    """The history rows of one run file, in the order they were logged."""
    from wandb.proto import wandb_internal_pb2

    for chunk in record_bytes(Path(path).read_bytes()):
        try:
            record = wandb_internal_pb2.Record.FromString(chunk)  # type: ignore[attr-defined]
        except Exception:  # a record cut by a kill: the file ends there
            return
        if record.WhichOneof("record_type") == "history":
            yield {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item}


def has_exit_record(path: str | os.PathLike) -> bool:
    """Whether a run file holds its run's exit record (W&B's service writes it when the run finishes)."""
    from wandb.proto import wandb_internal_pb2

    for chunk in record_bytes(Path(path).read_bytes()):
        try:
            record = wandb_internal_pb2.Record.FromString(chunk)  # type: ignore[attr-defined]
        except Exception:
            return False
        if record.WhichOneof("record_type") == "exit":
            return True
    return False


def load_wandb_history(exp_dir: str | os.PathLike, run: int) -> pd.DataFrame:
    """The points :class:`~online_trainer.callbacks.WandbCallback` logged for one run, read from its local files.

    Reads ``exp_dir/wandb_runs.json`` for the run's W&B id, then every run file of that id
    under ``exp_dir/wandb/`` (one folder per attempt when the run was resumed, online or
    offline), oldest first. Each point of a resumed run is in exactly one of them, so the
    rows together are the run's history as an uninterrupted run would hold it.

    Args:
        exp_dir: The experiment directory (for a sweep, the configuration's directory).
        run: The run number (from 1).

    Returns:
        One row per ``run.log`` call, in the order logged: the metric columns (episode
        returns and lengths under ``ep_return`` and ``ep_length`` with their x in ``episode``;
        the agent's and evaluations' values with theirs in ``step``) and W&B's own
        ``_step``, ``_timestamp`` and ``_runtime``. A value a row does not log is NaN.

    Raises:
        FileNotFoundError: ``exp_dir`` has no ``wandb_runs.json``, or no run file of the run.
        KeyError: ``run`` is not a run of the experiment.
    """
    import pandas as pd

    ids_file = Path(exp_dir) / RUN_IDS_FILE
    if not ids_file.is_file():
        raise FileNotFoundError(
            f"{ids_file} does not exist: exp_dir={str(exp_dir)!r} was not run with WandbCallback "
            "(or is not an experiment directory)."
        )
    ids = read_ids(ids_file)
    if run not in ids:
        raise KeyError(f"run={run!r} is not a run of {exp_dir} (its W&B runs: {sorted(ids)}).")
    files = run_files(Path(exp_dir) / "wandb", ids[run])
    if not files:
        raise FileNotFoundError(
            f"No W&B run file of run {run} (W&B id {ids[run]}) under {Path(exp_dir) / 'wandb'}: the run has not "
            "started, or its files were moved."
        )
    return pd.DataFrame([row for path in files for row in history_rows(path)])
