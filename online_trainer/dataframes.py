"""Experiments as pandas DataFrames: one row per episode."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd
import yaml

from online_trainer import storage

EPISODE_COLUMNS = ["run", "seed", "episode_index", "global_step", "ep_return", "ep_length", "wall_time"]


def experiment_dirs(path: str | os.PathLike) -> list[Path]:
    """``path`` itself when it is an experiment, else the experiments directly under it (a sweep)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"Experiment directory {path} does not exist.")
    if _is_experiment(path):
        return [path]
    found = sorted(p for p in path.iterdir() if p.is_dir() and _is_experiment(p))
    if not found:
        raise FileNotFoundError(f"{path} holds no experiment (no manifest.json or metrics_run*.pkl in it or below it).")
    return found


def _is_experiment(path: Path) -> bool:
    return (path / storage.MANIFEST_FILE).is_file() or any(path.glob("metrics_run*.pkl"))


def hyperparameters(exp_dir: str | os.PathLike) -> dict[str, Any]:
    """The hyperparameters an experiment ran with (``tuning_hp`` and a sweep's configuration)."""
    exp_dir = Path(exp_dir)
    values: dict[str, Any] = {}
    if (exp_dir / storage.MANIFEST_FILE).is_file():
        values.update(storage.read_manifest(exp_dir).get("tuning_hp") or {})
    hp_file = exp_dir / storage.HYPERPARAMETERS_FILE
    if hp_file.is_file():
        values.update(yaml.safe_load(hp_file.read_text()) or {})
    return values


def _episode_rows(exp_dir: Path) -> pd.DataFrame:
    seeds: dict[int, int] = {}
    if (exp_dir / storage.MANIFEST_FILE).is_file():
        seeds = {entry["run"]: entry["seed"] for entry in storage.read_manifest(exp_dir)["runs"]}
    columns: dict[str, list[Any]] = {name: [] for name in EPISODE_COLUMNS}
    for run_idx in storage.run_indices(exp_dir):
        for chunk in storage.iter_metrics_chunks(storage.metrics_path(exp_dir, run_idx)):
            for record in chunk:
                columns["run"].append(run_idx)
                columns["seed"].append(seeds.get(run_idx, record.get("agent_seed")))
                for name in EPISODE_COLUMNS[2:]:
                    columns[name].append(record[name])
    frame = pd.DataFrame(columns)
    return frame.astype({"run": "int64", "episode_index": "int64", "global_step": "int64", "ep_length": "int64",
                         "ep_return": "float64", "wall_time": "float64"})


def load_episodes(exp_dirs: str | os.PathLike | Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Load experiments as one DataFrame with a row per episode.

    Columns: ``run``, ``seed``, ``episode_index``, ``global_step``, ``ep_return``,
    ``ep_length``, ``wall_time`` and one column per hyperparameter of the run; no frames or
    transitions. Experiments cut short by a crash load their complete chunks (with a
    :class:`~online_trainer.storage.TruncatedMetricsWarning`). When several experiments
    are loaded (several directories, or a sweep directory holding one experiment per
    configuration) an ``experiment`` column names each by its directory.

    Args:
        exp_dirs: an experiment directory, a sweep directory, or a list of either.

    Raises:
        FileNotFoundError: a directory is missing or holds no experiment.
    """
    given: Iterable[str | os.PathLike] = [exp_dirs] if isinstance(exp_dirs, (str, os.PathLike)) else exp_dirs
    dirs = [d for path in given for d in experiment_dirs(path)]
    if not dirs:
        raise FileNotFoundError("load_episodes was given no experiment directory.")
    names = _labels(dirs)
    frames = []
    for exp_dir, name in zip(dirs, names):
        frame = _episode_rows(exp_dir)
        for key, value in hyperparameters(exp_dir).items():
            frame[key] = [value] * len(frame) if isinstance(value, (list, tuple, dict)) else value
        if len(dirs) > 1:
            frame.insert(0, "experiment", name)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


def _labels(dirs: list[Path]) -> list[str]:
    names = [d.name for d in dirs]
    if len(set(names)) == len(names):
        return names
    common = os.path.commonpath([str(d.resolve()) for d in dirs])
    return [os.path.relpath(d.resolve(), common) for d in dirs]
