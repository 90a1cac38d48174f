"""Experiments as pandas DataFrames: one row per episode, or one row per run.

Reads the experiment directories this package writes (``manifest.json`` plus
``metrics_run{i}.pkl`` and, with evaluation, ``eval_run{i}.pkl``) and those of the
original OnlineTrainer (``metrics_run{i}.pkl`` only, runs numbered from 1, each file a
sequence of pickled lists of episode dicts).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from online_trainer.analysis.scores import RAW_COLUMNS, mark_score
from online_trainer.analysis.selection import (
    EVALUATIONS_COUNT,
    KEPT_STATUSES,
    RUNS_ATTR,
    STATUS_COLUMN,
    describe_runs,
    normalize_status,
)
from online_trainer.experiment import ownership, slurm_states
from online_trainer.records import storage
from online_trainer.run import full_checkpoint
from online_trainer.run.env_identity import env_path, recorded_identity

logger = logging.getLogger(__name__)

EPISODE_COLUMNS = ["run", "seed", STATUS_COLUMN, "episode_index", "global_step", "ep_return", "ep_length", "wall_time"]
RUN_COLUMNS = [
    "run",
    "seed",
    STATUS_COLUMN,
    "num_episodes",
    "unrecorded_episodes",
    "last_step",
    "env_steps",
    "wall_time",
    "sps",
    "stop_reason",
    "error",
    "env_id",
    "budget_unit",
    "budget",
]
#: Status of the runs of an experiment without a manifest: how they ended is not known.
UNKNOWN_STATUS = "unknown"
#: Evaluation streams: one chunk per evaluation of a run (see :mod:`online_trainer.loop.evaluation`).
EVAL_PATTERN = "eval_run*.pkl"
EVAL_COLUMNS = [
    "run",
    "seed",
    STATUS_COLUMN,
    "eval_index",
    "global_step",
    "episodes_trained",
    "eval_return",
    "eval_std",
    "eval_episodes",
    "wall_time",
    "scheduled",
    "video",
]
#: Columns of :func:`load_evaluations` with ``per_episode=True``: one row per evaluation episode.
EVAL_EPISODE_COLUMNS = [
    "run",
    "seed",
    STATUS_COLUMN,
    "global_step",
    "episodes_trained",
    "eval_index",
    "scheduled",
    "episode",
    "return",
    "length",
]


def experiment_dirs(path: str | os.PathLike) -> list[Path]:
    """``path`` itself when it is an experiment, else the experiments directly under it (a sweep)."""
    path = storage.require_dir(path)
    if _is_experiment(path):
        return [path]
    children = sorted(p for p in path.iterdir() if p.is_dir())
    found = [p for p in children if _is_experiment(p)]
    if not found:
        raise FileNotFoundError(
            f"{path} holds no experiment (no manifest.json or metrics_run{{i}}.pkl in it or below it)."
        )
    deeper = [p for p in children if p not in found and any(_is_experiment(q) for q in p.iterdir() if q.is_dir())]
    if deeper:  # a sweep beside experiments: its configurations are one level too deep to be read with them
        logger.warning(
            "%s also %s experiments of %s own (a sweep's configurations), one level below those read from %s: "
            "they are left out. Read it on its own (load_episodes(%r), online-trainer show %s).",
            ", ".join(os.fspath(p) for p in deeper),
            "hold" if len(deeper) > 1 else "holds",
            "their" if len(deeper) > 1 else "its",
            os.fspath(path),
            os.fspath(deeper[0]),
            os.fspath(deeper[0]),
        )
    return found


def _expand(exp_dirs: str | os.PathLike | Sequence[str | os.PathLike]) -> tuple[list[Path], bool]:
    """The experiment directories under ``exp_dirs``, and whether they need an ``experiment`` column.

    They do when there are several, or when a directory given holds experiments (a sweep,
    even of one configuration): the column then names each configuration.
    """
    given = [exp_dirs] if isinstance(exp_dirs, (str, os.PathLike)) else exp_dirs
    given = list(given) if isinstance(given, Iterable) else None
    if given is None or not all(isinstance(path, (str, os.PathLike)) for path in given):
        raise TypeError(  # M22: load_episodes(42) raised "'int' object is not iterable"
            "Give an experiment directory (a str or a pathlib.Path) or a list of them, but got "
            f"{exp_dirs!r}: e.g. 'runs/cartpole_dqn', or ['runs/dqn', 'runs/ppo']."
        )
    dirs, nested = [], False
    for path in given:
        found = experiment_dirs(path)
        nested |= found != [Path(path)]
        dirs += found
    seen: dict[Path, Path] = {}
    for path in dirs:
        twice = seen.setdefault(path.resolve(), path)
        if twice is not path:
            raise ValueError(
                f"The experiment {os.fspath(path)} is given twice ({os.fspath(twice)}): its runs would count twice. "
                "Give each experiment once."
            )
        aside = next((n for n in (storage.SETTING_ASIDE_DIR, storage.SET_ASIDE_DIR) if (path / n).is_dir()), None)
        if aside is not None:
            logger.warning(
                "%s also holds an earlier experiment, set aside in %s/ by an overwrite=True call that was cut off: "
                "the next call into this directory puts it back, unless the cut-off call's runs left results.",
                path,
                aside,
            )
    return dirs, nested or len(dirs) > 1


def budget_of(exp_dir: str | os.PathLike) -> tuple[str | None, int | None]:
    """``("steps", 5000)`` or ``("episodes", 200)``: the budget of an experiment's runs; ``(None, None)`` if unknown.

    Read from ``manifest.json`` (written since runs record it), else from the sweep's
    ``sweep.json`` one level up, else from ``config.yaml`` (experiments run by the command).
    """
    exp_dir = Path(exp_dir)
    candidates: list[Any] = []
    if (exp_dir / storage.MANIFEST_FILE).is_file():
        manifest = storage.read_manifest(exp_dir)
        # "budget" comes with the first run that ends; the record of the call has it from the start (J13: the runs
        # of an experiment none of whose runs had ended showed no budget)
        candidates += [manifest.get("budget"), manifest.get("call")]
    sweep_file = exp_dir.parent / "sweep.json"
    if sweep_file.is_file():
        try:
            candidates.append(json.loads(sweep_file.read_text()).get("budget"))
        except (OSError, ValueError):
            pass
    if (exp_dir / storage.CONFIG_YAML).is_file():
        try:
            candidates.append(yaml.safe_load((exp_dir / storage.CONFIG_YAML).read_text()))
        except yaml.YAMLError:
            pass
    for found in candidates:
        if isinstance(found, dict):
            for unit, key in (("steps", "total_steps"), ("episodes", "num_episodes")):
                if isinstance(found.get(key), int) and found[key] > 0:
                    return unit, found[key]
    return None, None


def env_id_of(exp_dir: str | os.PathLike) -> str | None:
    """The gymnasium id of an experiment's env: from ``manifest.json`` (written when a run ends), else ``env.json``
    (written by its first run to build its env: an experiment whose runs were all cut off, V22), else ``config.yaml``,
    else (a configuration of a sweep, written by a version that did not record it) that of the sweep's other
    configurations; None if unknown."""
    exp_dir = Path(exp_dir)
    if (exp_dir / storage.MANIFEST_FILE).is_file():
        env_id = storage.read_manifest(exp_dir).get("env_id")
        if isinstance(env_id, str):
            return env_id
    recorded = recorded_identity(exp_dir, quiet=True) if env_path(exp_dir).is_file() else None
    if recorded is not None and isinstance(recorded.get("env_id"), str):
        return recorded["env_id"]
    if (exp_dir / storage.CONFIG_YAML).is_file():
        try:
            config = yaml.safe_load((exp_dir / storage.CONFIG_YAML).read_text())
        except yaml.YAMLError:
            return None
        env = config.get("env") if isinstance(config, dict) else None
        if isinstance(env, dict) and isinstance(env.get("id"), str):
            return env["id"]
    if (exp_dir.parent / "sweep.json").is_file() or "=" in exp_dir.name:  # a sweep's configurations share their env
        siblings = {
            env_id
            for sibling in exp_dir.parent.iterdir()
            if sibling != exp_dir and (sibling / storage.MANIFEST_FILE).is_file()
            for env_id in [storage.read_manifest(sibling).get("env_id")]
            if isinstance(env_id, str)
        }
        if len(siblings) == 1:
            return siblings.pop()
    return None


def _is_experiment(path: Path) -> bool:
    return (path / storage.MANIFEST_FILE).is_file() or bool(storage.run_indices(path))  # metrics_run{i}.pkl exactly


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


def evaluation_files(exp_dir: str | os.PathLike) -> list[Path]:
    """The evaluation streams (``eval_run{i}.pkl``) of an experiment, sorted."""
    return sorted(Path(exp_dir).glob(EVAL_PATTERN))


def _evaluation_runs(
    exp_dir: Path, counts: dict[int, int], manifest: dict[int, dict[str, Any]]
) -> list[dict[str, Any]]:
    """The runs of an experiment for an evaluation table's ``attrs["runs"]``: what the manifest says of each (as
    :func:`load_runs`, with ``num_episodes`` its count of finished episodes) and ``num_evaluations``, its rows."""
    legacy = not (exp_dir / storage.MANIFEST_FILE).is_file()
    (unit, budget), env_id = budget_of(exp_dir), env_id_of(exp_dir)
    runs = []
    for run in sorted(set(manifest) | set(counts)):
        entry = manifest.get(run, {})
        status = normalize_status(entry.get("status", UNKNOWN_STATUS))
        record = _run_record(exp_dir, run, entry, entry.get("seed"), status, legacy, env_id, unit, budget)
        runs.append({**record, "num_episodes": entry.get("episodes"), EVALUATIONS_COUNT: counts.get(run, 0)})
    return runs


def _evaluation_rows(
    exp_dir: Path, manifest: dict[int, dict[str, Any]], per_episode: bool = False
) -> dict[str, list[Any]]:
    columns: dict[str, list[Any]] = {name: [] for name in (EVAL_EPISODE_COLUMNS if per_episode else EVAL_COLUMNS)}
    numbers = sorted(
        int(p.stem[len("eval_run") :]) for p in evaluation_files(exp_dir) if p.stem[len("eval_run") :].isdigit()
    )
    for run in numbers:
        entry = manifest.get(run, {})
        status = normalize_status(entry.get("status", UNKNOWN_STATUS))
        for chunk in storage.iter_metrics_chunks(exp_dir / f"eval_run{run}.pkl"):
            for record in chunk:
                returns = np.asarray(record.get("returns", []), dtype=float)
                if per_episode:
                    lengths = np.asarray(record.get("lengths", [np.nan] * returns.size), dtype=float)
                    for episode, (ret, length) in enumerate(zip(returns, lengths), start=1):
                        values = {
                            "run": run,
                            "seed": entry.get("seed"),
                            STATUS_COLUMN: status,
                            "global_step": record.get("global_step"),
                            "episodes_trained": record.get("episodes_trained"),
                            "eval_index": record.get("eval_index"),
                            "scheduled": bool(record.get("scheduled", True)),
                            "episode": episode,
                            "return": ret,
                            "length": length,
                        }
                        for name in EVAL_EPISODE_COLUMNS:
                            columns[name].append(values[name])
                    continue
                values = {
                    "run": run,
                    "seed": entry.get("seed"),
                    STATUS_COLUMN: status,
                    "eval_index": record.get("eval_index"),
                    "global_step": record.get("global_step"),
                    "episodes_trained": record.get("episodes_trained"),
                    "eval_return": record.get("mean", returns.mean() if returns.size else np.nan),
                    "eval_std": record.get("std", np.nan),
                    "eval_episodes": returns.size,
                    "wall_time": record.get("wall_time", np.nan),
                    "scheduled": bool(
                        record.get("scheduled", True)
                    ),  # not recorded before round 11: taken as scheduled
                    "video": _video(exp_dir, run, record.get("video")),
                }
                for name in EVAL_COLUMNS:
                    columns[name].append(values[name])
    return columns


def load_evaluations(
    exp_dirs: str | os.PathLike | Sequence[str | os.PathLike], *, per_episode: bool = False
) -> pd.DataFrame:
    """Load the evaluations of experiments (``eval_run{i}.pkl``) as one DataFrame with a row per evaluation.

    Columns: ``experiment`` (when several are loaded, or a sweep directory), ``run``, ``seed``, ``status`` (as in
    :func:`load_episodes`), ``eval_index`` (from 1), ``global_step`` and
    ``episodes_trained`` (when it was made), ``eval_return`` (the mean return of its
    episodes), ``eval_std``, ``eval_episodes`` (episodes played), ``wall_time``, ``scheduled``
    (at a point of the budget every run reaches: every ``evaluation.freq``, or the budget's end;
    False for the final evaluation of a run a hook stopped early), ``video`` (the path of its mp4 under the
    directory as given here, when ``record_video`` filmed it and the file is there; else None) and one column per
    hyperparameter. Empty (with those columns) when no run was evaluated.

    With ``per_episode=True``, one row per evaluation episode instead: ``experiment``
    (as above), ``run``, ``seed``, ``status``, ``global_step``, ``episodes_trained``, ``eval_index``, ``scheduled``,
    ``episode`` (from 1 within its evaluation), ``return``, ``length`` and the
    hyperparameter columns. The episodes of one evaluation are not independent
    replications: analyse them per run (the seed is the unit), never as runs.

    Args:
        exp_dirs: an experiment directory, a sweep directory, or a list of either.
        per_episode: One row per evaluation episode rather than per evaluation.

    Raises:
        FileNotFoundError: a directory is missing or holds no experiment.
    """
    dirs, labelled = _expand(exp_dirs)
    frames, runs = [], []
    for exp_dir, name in zip(dirs, _labels(dirs)):
        manifest = _manifest_runs(exp_dir)  # once: settling runs left running warns
        frame = pd.DataFrame(_evaluation_rows(exp_dir, manifest, per_episode))
        params = hyperparameters(exp_dir)
        for key, value in params.items():
            frame[key] = [value] * len(frame) if isinstance(value, (list, tuple, dict)) else value
        if not per_episode:
            counts = {int(k): int(v) for k, v in frame["run"].value_counts().items()}
            for record in _evaluation_runs(exp_dir, counts, manifest):
                runs.append({**({"experiment": name} if labelled else {}), **record, **params})
        if labelled:
            frame.insert(0, "experiment", name)
        frames.append(frame)
    # an experiment without evaluations adds no row, and an empty frame in the concatenation made every column
    # float (scheduled 1.0: the evaluation curves of several experiments failed on it, tester V15)
    kept = [frame for frame in frames if len(frame)] or frames[:1]
    out = pd.concat(kept, ignore_index=True) if len(kept) > 1 else kept[0]
    if per_episode:
        return out.astype({"return": "float64", "length": "float64"})
    out = out.astype({"eval_return": "float64", "eval_std": "float64", "wall_time": "float64"})
    out.attrs[RUNS_ATTR] = [{k: _plain(v) for k, v in r.items()} for r in runs]
    return out


def _video(exp_dir: Path, run: int, recorded: Any) -> str | None:
    """The path of an evaluation's video under ``exp_dir`` as loaded (the record holds it as the run wrote it, from
    its working directory); None when it was not filmed or the file is gone."""
    if not recorded:
        return None
    path = storage.video_dir(exp_dir, run) / Path(recorded).name
    return os.fspath(path) if path.is_file() else None


def _manifest_runs(exp_dir: Path) -> dict[int, dict[str, Any]]:
    """The manifest's entries by their ``run`` number (never by their position).

    Runs marked ``running`` whose writer is gone (the experiment's lock is free) come out
    ``interrupted``, with a logged warning: see :func:`online_trainer.experiment.ownership.settle_running`.
    """
    if not (exp_dir / storage.MANIFEST_FILE).is_file():
        return {}
    manifest = storage.read_manifest(exp_dir)
    ownership.settle_running(exp_dir, manifest)
    # runs whose Slurm jobs ended without saying how, and those whose jobs wait in the queue again (requeued)
    slurm_states.settle_ended_jobs(exp_dir, manifest, name_requeued=True)
    entries = {}
    for entry in manifest.get("runs", []):
        if isinstance(entry, dict) and isinstance(entry.get("run"), int):
            entries[entry["run"]] = entry
        else:
            logger.warning("%s: manifest entry %r has no run number; ignored.", exp_dir, entry)
    return entries


def _read_experiment(exp_dir: Path) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
    """Episode columns and run records of one experiment directory."""
    manifest = _manifest_runs(exp_dir)
    legacy = not (exp_dir / storage.MANIFEST_FILE).is_file()
    on_disk = set(storage.run_indices(exp_dir))
    unlisted = sorted(on_disk - set(manifest)) if not legacy else []
    if legacy and on_disk:
        logger.warning(
            "%s has no %s: the statuses of its runs are unknown, so every run counts in the statistics, one cut off "
            "or failed included (with the episodes it has). If it was lost, put back a copy of it.",
            exp_dir,
            storage.MANIFEST_FILE,
        )
    if unlisted:
        logger.warning(
            "%s: metrics_run{%s}.pkl have no manifest entry: their status is %r.",
            exp_dir,
            ",".join(map(str, unlisted)),
            UNKNOWN_STATUS,
        )
    columns: dict[str, list[Any]] = {name: [] for name in EPISODE_COLUMNS + RAW_COLUMNS}
    runs, filled, raw = [], set(), False
    (unit, budget), env_id = budget_of(exp_dir), env_id_of(exp_dir)
    for run in sorted(set(manifest) | on_disk):
        entry = manifest.get(run, {})
        status = normalize_status(entry.get("status", UNKNOWN_STATUS))
        records = storage.load_run_metrics(exp_dir, run) if run in on_disk else []
        lengths = np.cumsum([float(r.get("ep_length", np.nan)) for r in records])
        seed = entry.get("seed", records[0].get("agent_seed") if records else None)
        for position, record in enumerate(records, start=1):
            columns["run"].append(run)
            columns["seed"].append(seed)
            columns[STATUS_COLUMN].append(status)
            for name, fallback in (
                ("episode_index", position),
                ("global_step", lengths[position - 1]),
                ("wall_time", np.nan),
            ):
                if name not in record:
                    filled.add(name)
                columns[name].append(record.get(name, fallback))
            for name in ("ep_return", "ep_length", *RAW_COLUMNS):
                columns[name].append(record.get(name, np.nan))
            raw = raw or "raw_return" in record
        unrecorded = 0  # episodes the manifest counts but no stream holds (dump_metrics=False)
        if not records and run not in on_disk and (entry.get("episodes") or 0) > 0:
            unrecorded = int(entry["episodes"])
            logger.warning(
                "%s: run %d ended %s after %d episodes but wrote no metrics_run%d.pkl (it ran with "
                "dump_metrics=False): it has no row in the table.",
                exp_dir,
                run,
                status,
                entry["episodes"],
                run,
            )
        last = columns["global_step"][-1] if records else entry.get("global_step", 0)
        record = _run_record(exp_dir, run, entry, seed, status, legacy, env_id, unit, budget)
        runs.append({**record, "num_episodes": len(records), "unrecorded_episodes": unrecorded, "last_step": last})
    if filled:
        logger.info(
            "%s: records without %s: filled in (episode_index by position, global_step as the running "
            "sum of ep_length, exact for one sub-env only; wall_time NaN).",
            exp_dir,
            sorted(filled),
        )
    if not raw:  # no run recorded raw scores: no raw columns
        columns = {name: values for name, values in columns.items() if name not in RAW_COLUMNS}
    return columns, runs


def _run_record(
    exp_dir: Path,
    run: int,
    entry: dict[str, Any],
    seed: Any,
    status: str,
    legacy: bool,
    env_id: str | None,
    unit: str | None,
    budget: int | None,
) -> dict[str, Any]:
    """What the manifest (and, for a run that did not finish, its records and full checkpoint) say of a run:
    the columns of :func:`load_runs` but those counted from its episodes."""
    progress = {name: entry.get(name) for name in ("global_step", "wall_time", "sps")}
    if not legacy and status not in KEPT_STATUSES:  # ended without finishing: the disk may say more
        progress = _progress(exp_dir, run, progress)
    return {
        "run": run,
        "seed": seed,
        STATUS_COLUMN: status,
        "env_steps": progress["global_step"],
        "wall_time": progress["wall_time"],
        "sps": progress["sps"],
        "stop_reason": entry.get("stop_reason"),
        "error": entry.get("error"),
        "env_id": env_id,
        "budget_unit": unit,
        "budget": budget,
    }


def _progress(exp_dir: Path, run: int, known: dict[str, Any]) -> dict[str, Any]:
    """``global_step``, ``wall_time`` and ``sps`` of a run that did not finish: the manifest's (``known``), or its
    records' and its full checkpoint's when they say more (a manifest written before runs that failed or were cut
    off recorded them)."""
    on_disk = full_checkpoint.run_progress(exp_dir, run)
    if on_disk["global_step"] is None or on_disk["global_step"] <= (known["global_step"] or 0):
        return known
    wall_time = on_disk["wall_time"]
    return {
        "global_step": on_disk["global_step"],
        "wall_time": wall_time,
        "sps": round(on_disk["global_step"] / wall_time, 1) if wall_time else known["sps"],
    }


def _episode_frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    frame = pd.DataFrame(columns)
    types = {
        "run": "int64",
        "ep_return": "float64",
        "wall_time": "float64",
        STATUS_COLUMN: "object",
        **{name: "float64" for name in RAW_COLUMNS if name in frame},
    }
    for name in ("episode_index", "global_step", "ep_length"):
        values = pd.to_numeric(frame[name], errors="coerce")
        whole = values.notna().all() and bool((values == values.round()).all())
        types[name] = "int64" if whole else "float64"
    seeds = pd.to_numeric(frame["seed"], errors="coerce")
    types["seed"] = "int64" if seeds.notna().all() else "Int64"
    frame["seed"] = seeds
    return frame.astype(types)


def _load(exp_dirs: str | os.PathLike | Sequence[str | os.PathLike]) -> tuple[pd.DataFrame, pd.DataFrame]:
    dirs, labelled = _expand(exp_dirs)
    if not dirs:
        raise FileNotFoundError("load_episodes was given no experiment directory.")
    names = _labels(dirs)
    episode_frames, run_frames = [], []
    for exp_dir, name in zip(dirs, names):
        columns, runs = _read_experiment(exp_dir)
        frame, run_frame = _episode_frame(columns), pd.DataFrame(runs, columns=RUN_COLUMNS)
        for key, value in hyperparameters(exp_dir).items():
            for table in (frame, run_frame):
                table[key] = [value] * len(table) if isinstance(value, (list, tuple, dict)) else value
        if labelled:
            frame.insert(0, "experiment", name)
            run_frame.insert(0, "experiment", name)
        episode_frames.append(frame)
        run_frames.append(run_frame)
    episodes = pd.concat(episode_frames, ignore_index=True) if len(dirs) > 1 else episode_frames[0]
    runs = pd.concat(run_frames, ignore_index=True) if len(dirs) > 1 else run_frames[0]
    mark_score(episodes, dirs)
    return episodes, runs


def load_runs(exp_dirs: str | os.PathLike | Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Load experiments as one DataFrame with a row per run, runs without episodes included.

    Columns: ``experiment`` (when several are loaded, or a sweep directory), ``run``, ``seed``, ``status``
    (``finished``, ``failed``, ``interrupted``, ``pending`` (not started), ``running``
    (under way: the experiment's writer is alive), ``stopped_early``, or ``unknown`` for
    an experiment without a manifest), ``num_episodes`` (episodes on
    disk), ``unrecorded_episodes`` (episodes the run finished without writing them: it ran with
    ``dump_metrics=False``; else 0), ``last_step`` (``global_step`` of its last episode), ``env_steps`` (env steps the
    run took, from the manifest: past ``last_step`` when the budget ended mid-episode; None
    when the manifest does not say, e.g. a run that never ended), ``wall_time`` and ``sps`` (the
    run's seconds and env steps per second), ``stop_reason`` (what a hook said when it stopped
    the run early), ``error`` (the end of the traceback of a failed run), ``env_id`` (the
    gymnasium id of its env, None when not recorded), ``budget_unit`` and ``budget``
    (``"steps"`` and the step budget, or ``"episodes"`` and the episode budget; None when not
    recorded) and one column per
    hyperparameter.

    Args:
        exp_dirs: an experiment directory, a sweep directory, or a list of either.

    Raises:
        FileNotFoundError: a directory is missing or holds no experiment.
    """
    return _load(exp_dirs)[1]


def load_episodes(exp_dirs: str | os.PathLike | Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Load experiments as one DataFrame with a row per episode.

    Columns: ``run``, ``seed``, ``status``, ``episode_index``, ``global_step``,
    ``ep_return``, ``ep_length``, ``wall_time``, then ``raw_return`` and ``raw_length`` when
    some run recorded raw scores (its env had a ``RecordEpisodeStatistics`` among its wrappers;
    NaN for episodes without), and one column per hyperparameter the run was given as a sweep's configuration or
    ``tuning_hp`` (not those a command-line config hands the agent itself); no frames or
    transitions. When every experiment ran with ``score="raw"``, ``df.attrs["score"]`` is
    ``"raw"`` and the analysis (``summarize``, ``curves``, the plots) uses ``raw_return``. ``status`` is the run's status in the manifest
    (see :func:`load_runs`), except that a run the manifest says is ``running`` while
    nobody holds the experiment's lock any more (its process was killed) is reported as
    ``interrupted``, with a logged warning; :mod:`online_trainer.analysis.stats` and the
    plots leave out runs that did not finish unless asked. When several experiments are
    loaded (several directories), and always for a sweep directory (one experiment per
    configuration, even a single one), an ``experiment`` column names each by its directory.

    Runs are read by the number in each manifest entry (``metrics_run{run}.pkl``).
    Experiments cut short by a crash load their complete chunks (with a
    :class:`~online_trainer.records.storage.TruncatedMetricsWarning`). A run without a finished
    episode has no row: a warning names it, and ``df.attrs["runs"]`` lists every run
    (the records of :func:`load_runs`), so that the analysis counts it. Returns are kept
    as recorded, NaN included; the analysis leaves NaN and infinite returns out with a
    warning.

    A directory written by the original OnlineTrainer (no ``manifest.json``;
    ``metrics_run1.pkl``, ``metrics_run2.pkl``, ...) loads too. Its runs have status
    ``unknown`` (analysed like finished ones: nothing says otherwise) and their seed is
    the records' ``agent_seed``. Fields its records lack are filled in:
    ``episode_index`` by position (from 1), ``global_step`` as the running sum of
    ``ep_length`` (exact for one sub-env only: with several, episodes of the other
    sub-envs were under way), ``wall_time`` NaN.

    Args:
        exp_dirs: an experiment directory, a sweep directory, or a list of either.

    Raises:
        FileNotFoundError: a directory is missing or holds no experiment.
    """
    episodes, runs = _load(exp_dirs)
    empty = runs[runs["num_episodes"] == 0]
    if len(empty):
        logger.warning(
            "%d of %d run(s) have no episode on disk (none finished, or no metrics stream) and no row "
            "in the table: %s. "
            "df.attrs['runs'] lists them and the analysis counts them.",
            len(empty),
            len(runs),
            describe_runs(empty),
        )
    episodes.attrs[RUNS_ATTR] = [{k: _plain(v) for k, v in r.items()} for r in runs.to_dict("records")]
    return episodes


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _labels(dirs: list[Path]) -> list[str]:
    names = [d.name for d in dirs]
    if len(set(names)) == len(names):
        return names
    common = os.path.commonpath([str(d.resolve()) for d in dirs])
    return [os.path.relpath(d.resolve(), common) for d in dirs]


def experiment_labels(exp_dirs: str | os.PathLike | Sequence[str | os.PathLike]) -> dict[str, Path]:
    """The experiment directories under ``exp_dirs`` by the label their ``experiment`` column gives them."""
    dirs, _ = _expand(exp_dirs)
    return dict(zip(_labels(dirs), dirs))
