"""A callback logging to Weights & Biases: one W&B run per seed, grouped by experiment."""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import logging
import os
import secrets
import string
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from online_trainer.callbacks.base import CallBack, metric_name
from online_trainer.callbacks.files import read_ids, write_ids
from online_trainer.callbacks.store_points import (
    PointLedger,
    Resumption,
    StorePosition,
    as_position,
    check_store_position,
)
from online_trainer.callbacks.wandb_history import RUN_IDS_FILE, has_exit_record, history_rows, run_files
from online_trainer.options import validation

logger = logging.getLogger(__name__)

EPISODE_AXIS = "episode"
"""The x of values logged through ``series`` (the runner's episode returns and lengths): the episode index."""
STEP_AXIS = "step"
"""The x of values logged through ``__call__`` (the agent's values, evaluations): the step they were logged at."""
_ID_CHARS = string.ascii_lowercase + string.digits
TAIL_POINTS = 4096
"""Points sent last before a checkpoint that the checkpoint keeps: W&B's service writes behind (in 32 KiB blocks), so
a kill loses what it had not written; a resumed run sends those again."""
_PARENT_ENV = ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY")
"""W&B settings read from the environment of the process that starts the runs (see :meth:`WandbCallback.setup`)."""


def _wandb() -> Any:
    try:
        import wandb
    except ImportError as exc:
        raise ImportError('WandbCallback needs wandb: pip install -e ".[wandb]" (or pip install wandb).') from exc
    return wandb


def new_run_id() -> str:
    """A W&B run id: 8 random lowercase letters and digits, as W&B makes them."""
    return "".join(secrets.choice(_ID_CHARS) for _ in range(8))


MODES = ("online", "offline", "disabled", "shared", "dryrun", "run")
"""What ``wandb.init`` takes as ``mode`` (the last three: W&B's own, shared runs and legacy names)."""


class WandbCallback(CallBack):
    """Logs each run (seed) of an experiment as one W&B run; the runs of an experiment share a group.

    Each W&B run is named ``run_{i}``, grouped under the experiment directory's name (or
    ``group``), with the seed, the run number and the tuning hyperparameters in its config.
    Run ids are drawn in the parent before runs start and kept in ``exp_dir/wandb_runs.json``,
    so a run done again (a resumed sweep) continues the same W&B run (``resume="allow"``)
    instead of opening a new one. W&B's files go to ``exp_dir/wandb/``. Offline
    (``WANDB_MODE=offline`` or ``mode="offline"``) nothing leaves the machine; ``wandb sync
    exp_dir/wandb/offline-run-*`` uploads later.

    Metric names leave out the run's part of the tag (``ep_return``, ``eval/ep_return``,
    ``agents/loss``), so W&B overlays the seeds. W&B keeps one x per metric: values logged
    through :meth:`series` (the episode returns and lengths) are plotted against ``episode``
    (the episode index), values logged through ``__call__`` against ``step`` (the step they
    were logged at: the env step for the agent's values and evaluations). Each ``run.log``
    costs W&B a fraction of a millisecond, so values are kept and merged: those that share an
    x (one episode's return and length, the values of one env step) go in one row; rows are
    sent every ``flush_rows`` rows, at least every ``max_delay`` seconds when an episode
    ends, and when the run ends.

    A run's full checkpoint sends what is kept and keeps the last points sent (W&B's service
    writes behind: a kill loses what it had not written). A resumed run (``resume=True``)
    reads its W&B run's local files (``exp_dir/wandb/*run-*-{id}/run-{id}.wandb``, one per
    attempt), sends again the points up to the checkpoint that they lack, and does not send
    again those it logs that they hold already; a run that starts again from its first step
    likewise. What cannot be made exact is logged as a warning (see
    :mod:`online_trainer.callbacks.store_points`). Online, the local files are taken as what
    the server holds.

    Args:
        project: the W&B project (None: ``WANDB_PROJECT`` or W&B's default).
        entity: the W&B entity (None: yours).
        group: the group of the runs (None: the experiment directory's name).
        mode: ``"online"``, ``"offline"`` or ``"disabled"`` (None: ``WANDB_MODE`` or online).
        flush_rows: rows kept before they are sent.
        max_delay: seconds after which an episode's values also send what is kept.
        **init_kwargs: more arguments of ``wandb.init`` (``tags``, ``notes``, ``settings``...).

    Raises:
        ValueError: ``flush_rows`` is not a positive int, ``max_delay`` is negative, or
            ``init_kwargs`` sets what the callback sets itself (``id``, ``name``, ``config``...).
        ImportError: at setup, wandb is not installed.
    """

    STORE: ClassVar[str] = "W&B"
    """The kind of store its checkpoint positions name (:meth:`check_position` takes no other)."""

    _unpicklable = ("_run",)
    _OWN_ARGS = ("id", "name", "config", "resume", "dir", "reinit", "group", "project", "entity", "mode")

    def __init__(
        self,
        project: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        mode: str | None = None,
        flush_rows: int = 256,
        max_delay: float = 5.0,
        **init_kwargs: Any,
    ) -> None:
        flush_rows = validation.positive_int("flush_rows", flush_rows)
        if not isinstance(max_delay, (int, float)) or max_delay < 0:
            raise ValueError(f"max_delay must be a number of seconds >= 0, but got max_delay={max_delay!r}.")
        taken = sorted(set(init_kwargs) & set(self._OWN_ARGS))
        if taken:
            raise ValueError(
                f"WandbCallback sets {taken} itself, but got them in init_kwargs: pass project, entity, "
                "group and mode as the callback's own arguments, and drop the others."
            )
        _check_init_kwargs(init_kwargs)
        if mode is not None and mode not in MODES:
            close = difflib.get_close_matches(str(mode), MODES, n=1, cutoff=0.6)
            raise ValueError(
                f"WandbCallback got mode={mode!r}: it must be one of {', '.join(map(repr, MODES[:3]))} (or None for "
                f"WANDB_MODE, else online)" + (f"; did you mean {close[0]!r}?" if close else ".")
            )
        _check_project(project)
        self.project, self.entity, self.group, self.mode = project, entity, group, mode
        self.flush_rows = flush_rows
        self.max_delay = max_delay
        self.init_kwargs = init_kwargs
        self._ids: dict[str, dict[int, str]] = {}
        self._parent_env: dict[str, str] = {}
        self._run: Any = None
        self._run_tag = ""
        self._rows: list[dict[str, Any]] = []
        self._last_row: dict[tuple[str, int], dict[str, Any]] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._defined: set[str] = set()
        self._last_flush = 0.0
        self._ledger = PointLedger(TAIL_POINTS)
        self._resuming: dict[str, StorePosition | None] = {}  # run tag -> its checkpoint's position (rewind)
        self._resumption: Resumption | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_rows=[], _last_row={}, _names={}, _defined=set(), _resumption=None)
        return state

    def setup(self, exp_dir: str | os.PathLike | None, runs: Mapping[int, int]) -> None:
        """Draw (or read back) the W&B id of every run, here, once; keep them in ``exp_dir/wandb_runs.json``.

        ``WANDB_MODE``, ``WANDB_PROJECT`` and ``WANDB_ENTITY`` are read here too, from this
        process's environment, and hold in every run (worker processes started before they were
        set would not see them); the callback's own arguments take precedence.
        """
        _wandb()  # not installed: say so before any run starts
        path = None if exp_dir is None else Path(exp_dir) / RUN_IDS_FILE
        ids = read_ids(path) if path is not None else {}
        for run in runs:
            ids.setdefault(run, new_run_id())
        if path is not None:
            write_ids(path, ids)
        self._ids[self._key(exp_dir)] = ids
        # workers started earlier (a warm pool) do not see later changes to this process's environment
        self._parent_env = {name: os.environ[name] for name in _PARENT_ENV if name in os.environ}

    @staticmethod
    def _key(exp_dir: str | os.PathLike | None) -> str:
        return "" if exp_dir is None else os.path.abspath(exp_dir)

    def start_run(
        self, run_idx: int, seed: int, params: Mapping[str, Any], exp_dir: str | None, run_tag: str = ""
    ) -> None:
        """Open (or resume) the run's W&B run."""
        wandb = _wandb()
        self._finish(1)  # a run that never said it ended
        ids = self._ids.setdefault(self._key(exp_dir), {})
        run_id = ids.setdefault(run_idx, new_run_id())
        run_tag = run_tag or f"run_{run_idx}"
        self._ledger, self._resumption = PointLedger(TAIL_POINTS), None
        if run_tag in self._resuming:  # a resumed run, or one started again: its earlier files hold points of it
            position = self._resuming.pop(run_tag)
            self._ledger = PointLedger(TAIL_POINTS, position)
            self._resumption = Resumption(f"WandbCallback, W&B run {run_id}", run_tag, _held(exp_dir, run_id), position)
        settings = self.init_kwargs.get("settings") or wandb.Settings(console="off", silent=True)
        self._run = wandb.init(
            **{**self.init_kwargs, "settings": settings},
            project=self.project or self._parent_env.get("WANDB_PROJECT"),
            entity=self.entity or self._parent_env.get("WANDB_ENTITY"),
            mode=self.mode or self._parent_env.get("WANDB_MODE"),
            group=self.group or (Path(exp_dir).resolve().name if exp_dir is not None else None),
            name=f"run_{run_idx}",
            id=run_id,
            resume="allow",
            reinit="create_new",
            config={"seed": seed, "run": run_idx, **params},
            dir=exp_dir,
        )
        self._run_tag = run_tag
        self._last_flush = time.time()
        self._names.clear()
        self._defined.clear()
        if self._resumption is not None:
            for name, x, value in self._resumption.resend:  # lost before the checkpoint: not logged again by the run
                axis = self._ledger.axes.get(name, STEP_AXIS)
                self._define(name, axis)
                self._run.log({axis: int(x), name: value})

    def checkpoint(self, run_tag: str) -> dict[str, Any]:
        """Send what is kept and return how many points of each metric the run has logged, with the last ones (as
        :meth:`StorePosition.to_state <online_trainer.callbacks.store_points.StorePosition.to_state>`)."""
        self.flush()
        return dataclasses.replace(self._ledger.position(), sink=self.STORE).to_state()

    def check_position(self, position: Any) -> None:
        """Raise ``ValueError`` unless ``position`` is None or a W&B sink's (not another sink's: the callbacks
        differ from those the experiment ran with)."""
        check_store_position(position, self.STORE)

    def rewind(self, run_tag: str, position: Any, since: float | None = None) -> None:  # since: its runs are its own
        """Note that the run ``run_tag`` resumes from ``position`` (what :meth:`checkpoint` returned; None: it
        starts again); its :meth:`start_run`
        then reads what its W&B run files hold, so as to send what they lack and nothing twice."""
        self._resuming[run_tag] = as_position(position)

    def end_run(self, run_idx: int, status: str) -> None:
        """Send what is kept and finish the W&B run (exit code 1 when it ``failed`` or was ``interrupted``, else 0)."""
        self._finish(1 if status in ("failed", "interrupted") else 0)

    def _finish(self, exit_code: int) -> None:
        if self._run is None:
            return
        try:
            self.flush()
            if self._resumption is not None:
                self._resumption.report()
        finally:
            run, self._run, self._resumption = self._run, None, None
            self._names.clear()
            run.finish(exit_code=exit_code)
            _FINISHED_HERE.add(run.id)

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        for key, value in data.items():
            self._add(STEP_AXIS, step, self._name(key, tag, STEP_AXIS), value)
        if len(self._rows) >= self.flush_rows or (force and time.time() - self._last_flush > self.max_delay):
            self.flush()

    def series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> None:
        """Keep every value of ``key`` against its episode index (see :meth:`online_trainer.callbacks.CallBack.series`).

        W&B stamps each row with the time it is logged: ``wall_times`` are not passed on.
        """
        name = self._name(key, tag, EPISODE_AXIS)
        for value, step in zip(values, steps):
            self._add(EPISODE_AXIS, step, name, value)
        if len(self._rows) >= self.flush_rows or time.time() - self._last_flush > self.max_delay:
            self.flush()

    def _add(self, axis: str, x: int, name: str, value: Any) -> None:
        """Put ``name: value`` in the row of ``(axis, x)``, or in a new one when that row has it already."""
        row = self._last_row.get((axis, x))
        if row is None or name in row:
            row = self._last_row[(axis, x)] = {axis: int(x)}
            self._rows.append(row)
        row[name] = float(value)

    def _name(self, key: str, tag: str, axis: str) -> str:
        name = self._names.get((key, tag))
        if name is None:
            if self._run is None:
                raise RuntimeError(
                    f"WandbCallback got {key!r} under {tag!r} outside a run: it logs into the W&B run "
                    "of the run under way; call start_run(run_idx, seed, params, exp_dir) first "
                    "(the trainer does)."
                )
            name = self._names[(key, tag)] = metric_name(key, tag, self._run_tag)
            self._define(name, axis)
        return name

    def _define(self, name: str, axis: str) -> None:
        if name not in self._defined:
            self._defined.add(name)
            self._ledger.axes.setdefault(name, axis)
            self._run.define_metric(name, step_metric=axis)

    def flush(self) -> None:
        """Send the rows kept so far, one ``run.log`` each."""
        self._last_flush = time.time()
        if self._run is None or not self._rows:
            return
        rows, self._rows = self._rows, []
        self._last_row.clear()
        add, resumption = self._ledger.add, self._resumption
        for row in rows:
            axis = EPISODE_AXIS if EPISODE_AXIS in row else STEP_AXIS
            x = row[axis]
            for name, value in row.items():
                if name != axis:
                    add(name, x, value)
        if resumption is not None:  # leave out what the run's earlier files hold already
            rows = [row for row in (self._unheld(row, resumption) for row in rows) if len(row) > 1]
        log = self._run.log
        for row in rows:
            log(row)

    @staticmethod
    def _unheld(row: dict[str, Any], resumption: Resumption) -> dict[str, Any]:
        """``row`` without the values the run's earlier files hold (its x stays)."""
        axis = EPISODE_AXIS if EPISODE_AXIS in row else STEP_AXIS
        x = row[axis]
        return {name: value for name, value in row.items() if name == axis or resumption.keep(name, x, value)}

    def reset(self) -> None:
        """Nothing is averaged: values kept are sent when the run ends."""

    def close(self) -> None:
        """Finish a W&B run left open (as failed: its run never said it ended)."""
        self._finish(1)
        self._resuming.clear()

    def __repr__(self) -> str:
        return f"WandbCallback(project={self.project!r}, group={self.group!r}, mode={self.mode!r})"


def _held(exp_dir: str | None, run_id: str) -> list[tuple[str, float, float]]:
    """Every point the earlier run files of ``run_id`` hold, in the order they were logged."""
    points: list[tuple[str, float, float]] = []
    if exp_dir is None:
        return points
    if run_id in _FINISHED_HERE:
        _wait_for_exit_record(Path(exp_dir) / "wandb", run_id)
    for path in run_files(Path(exp_dir) / "wandb", run_id):
        try:
            rows = list(history_rows(path))
        except Exception as exc:  # W&B's file format changed, or the file is damaged
            logger.warning(
                "WandbCallback: could not read %s (%s: %s): points it holds may be logged twice",
                path,
                type(exc).__name__,
                exc,
            )
            continue
        for row in rows:
            axis = EPISODE_AXIS if EPISODE_AXIS in row else STEP_AXIS
            points.extend(
                (name, row[axis], value)
                for name, value in row.items()
                if not name.startswith("_") and name not in (EPISODE_AXIS, STEP_AXIS)
            )
    return points


_FINISHED_HERE: set[str] = set()
"""Ids of the W&B runs this process finished: their service may still be writing the file when the run starts again."""
EXIT_RECORD_WAIT = 30.0
"""Seconds a run started again waits for its last attempt's file (finished by this process) to hold its exit record."""


def _wait_for_exit_record(wandb_dir: Path, run_id: str) -> None:
    """Wait until the newest run file of ``run_id`` holds its exit record: the attempt this process finished is then
    all in it (under load the service writes the file's last records after ``finish()`` has returned)."""
    deadline = time.monotonic() + EXIT_RECORD_WAIT
    while True:
        files = run_files(wandb_dir, run_id)
        if not files or has_exit_record(files[-1]):
            return
        if time.monotonic() >= deadline:
            logger.warning(
                "WandbCallback: %s has no exit record %.0f s after its run finished: points it holds may be logged "
                "twice",
                files[-1],
                EXIT_RECORD_WAIT,
            )
            return
        time.sleep(0.05)


def _check_init_kwargs(init_kwargs: Mapping[str, Any]) -> None:
    """Refuse keyword arguments ``wandb.init`` does not take, now rather than when the first run starts.

    Raises:
        ValueError: naming each one, with the closest of ``wandb.init``'s parameters. Nothing is checked when
            wandb is not installed (the first run says so) or ``wandb.init`` takes ``**kwargs``.
    """
    if not init_kwargs:
        return
    try:
        import wandb
    except ImportError:
        return
    try:
        parameters = inspect.signature(wandb.init).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return
    unknown = [key for key in init_kwargs if key not in parameters]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, list(parameters), n=1, cutoff=0.6)
            hints.append(f"{key}={init_kwargs[key]!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ValueError(
            f"WandbCallback got {', '.join(hints)}, which wandb.init does not take: its keyword arguments are the "
            f"callback's own (project, entity, group, mode, flush_rows, max_delay) and those of wandb.init "
            f"({', '.join(name for name in parameters if name not in WandbCallback._OWN_ARGS)})."
        )


_PROJECT_CHARACTERS = "/\\#?%:"  # what W&B refuses in a project's name, with names over 128 characters


def _check_project(project: Any) -> None:
    """Refuse a project name W&B would refuse as the first run starts (R19: W&B's own UsageError, not naming the
    callback's argument)."""
    if project is None:
        return
    if not isinstance(project, str) or not project:
        raise ValueError(f"WandbCallback got project={project!r}: give the W&B project's name, a non-empty string.")
    found = sorted({char for char in project if char in _PROJECT_CHARACTERS})
    if found or len(project) > 128:
        why = f"it holds {', '.join(map(repr, found))}" if found else f"it is {len(project)} characters long"
        raise ValueError(
            f"WandbCallback got project={project!r}: W&B takes no project name with any of "
            f"{', '.join(map(repr, _PROJECT_CHARACTERS))} or over 128 characters, and {why}. Choose another name "
            "(a team's project goes in entity=..., not in the project's name)."
        )
