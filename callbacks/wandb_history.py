"""Reading back the history of a W&B run from its local run files (``wandb/*run-*-{id}/run-{id}.wandb``).

W&B's service writes each run's records to a ``.wandb`` file: a 7-byte header, then a
LevelDB-style log of 32 KiB blocks, each record a ``wandb_internal_pb2.Record``. A resumed
:class:`~online_trainer.callbacks.WandbCallback` run reads every earlier file of its run id
(one per attempt) to learn which points the run holds. A file cut short by a kill ends at
its last complete record.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    """The run files of the W&B run ``run_id`` under ``wandb_dir`` (online and offline), oldest first."""
    return sorted(
        Path(wandb_dir).glob(f"*run-*-{run_id}/run-{run_id}.wandb"),
        key=lambda p: (p.parent.name.split("-")[-2], p.stat().st_mtime),
    )


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
