"""A callback logging to MLflow: one MLflow run per seed, metrics in batches."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import itertools
import logging
import os
import re
import socket
import time
import urllib.parse
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
from online_trainer.options import validation

logger = logging.getLogger(__name__)

STORE_FILE = "mlflow.db"
ARTIFACTS_DIR = "mlartifacts"
RUN_IDS_FILE = "mlflow_runs.json"
ARTIFACT_FILES = ("args.yaml", "config.py", "hyperparameters.yaml", "manifest.json")
RUN_TAG = "online_trainer.run"
DEFAULT_EXPERIMENT = "online_trainer"  # without an exp_dir or an experiment_name
MAX_BATCH = 1000  # metrics per MlflowClient.log_batch call (MLflow's limit)
_NOT_IN_NAME = re.compile(r"[^\w\-. /:]")


def _mlflow() -> Any:
    try:
        import mlflow
        import mlflow.entities  # noqa: F401
    except ImportError as exc:
        raise ImportError('MLflowCallback needs MLflow: pip install -e ".[mlflow]" (or pip install mlflow).') from exc
    return mlflow


_SQLITE = "sqlite:///"
_OPENED: dict[str, tuple[int, int] | None] = {}
"""The SQLite file (device, inode) of each store URI when this process last let MLflow open it."""


def _store_file_changed(uri: str) -> bool:
    """Whether the SQLite file of ``uri`` is not the one MLflow opened in this process (or was never opened here).

    Checked whenever a client is made: in the parent at each call, and in a worker at each run, since a
    worker kept from an earlier call (a notebook's second ``multi_run``) holds MLflow's caches of that call.
    """
    if not uri.startswith(_SQLITE):
        return False
    try:
        stat = os.stat(uri[len(_SQLITE) :])
        identity: tuple[int, int] | None = (stat.st_dev, stat.st_ino)
    except OSError:  # not made yet: whatever MLflow holds for this URI is of a file that is gone
        identity = None
    changed = identity is None or _OPENED.get(uri) != identity
    _OPENED[uri] = identity
    return changed


def _reopen_store(uri: str) -> None:
    """Let MLflow open the SQLite file of ``uri`` anew in this process.

    MLflow keeps, for the life of the process, one store per URI and one SQLAlchemy engine per database
    (with its open connections). The experiment directory's ``mlflow.db`` may have been replaced since:
    ``overwrite=True`` sets the earlier one aside, and a call whose runs all failed before their first env
    step removes its own and puts the earlier one back. A second call in the same process (a notebook)
    then wrote through connections to the file set aside ("attempt to write a readonly database"), and a
    worker kept from the first call looked its runs up in that file ("Run with id=... not found").
    MLflow has no public way to close them; its caches are reached here only when they are as this
    version of MLflow keeps them.
    """
    try:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.tracking._tracking_service import utils
    except ImportError:  # another MLflow layout: it opens the store as it does
        return
    engines = getattr(SqlAlchemyStore, "_engine_map", None)
    engine = engines.pop(uri, None) if isinstance(engines, dict) else None
    if engine is not None:
        engine.dispose()
    registry = getattr(utils, "_tracking_store_registry", None)
    clear = getattr(getattr(type(registry), "_get_store_with_resolved_uri", None), "cache_clear", None)
    if callable(clear):
        clear()


class _Experiment:
    """What :meth:`MLflowCallback.setup` made for one experiment directory (it travels to workers)."""

    def __init__(self, uri: str, experiment_id: str, run_ids: dict[int, str]) -> None:
        self.uri, self.experiment_id, self.run_ids = uri, experiment_id, run_ids


class MLflowCallback(CallBack):
    """Logs each run (seed) of an experiment as one MLflow run, under one MLflow experiment.

    The store and the experiment are created once, in the parent process, before any run
    starts (:meth:`setup`); so are the MLflow runs, one per seed, named ``run_{i}`` and tagged
    ``online_trainer.run``. Their ids are kept in ``exp_dir/mlflow_runs.json``, so a run done
    again (a resumed sweep) logs into the same MLflow run. Each run logs its seed, its run
    number and the tuning hyperparameters as params, and its values as metrics named without
    the run's part of the tag (``ep_return``, ``eval/ep_return``, ``agents/loss``), so that
    MLflow's charts overlay the seeds. Metrics are kept in memory and sent with
    ``MlflowClient.log_batch`` (up to 1000 at once): every ``flush_values`` values, at least
    every ``max_delay`` seconds when an episode ends, and when the run ends. When every run
    has ended, the experiment directory's small files (``args.yaml``, ``config.py``,
    ``hyperparameters.yaml``, ``manifest.json``) are logged as artifacts of each run.

    A run's full checkpoint sends what is kept first, so the store holds every value logged
    before it. A resumed run (``resume=True``) reads its MLflow run's points and does not send
    again those it logs that the store holds already (sent after the checkpoint, before the
    interruption); a run that starts again from its first step likewise. MLflow deletes no
    point: what cannot be made exact (values held twice, or held with another value than the
    resumed run logs) is logged as a warning (see :mod:`online_trainer.callbacks.store_points`).

    Args:
        tracking_uri: where MLflow keeps runs; None: a SQLite database in the experiment
            directory, ``sqlite:///{exp_dir}/mlflow.db`` (artifacts in ``exp_dir/mlartifacts``).
            Read it with ``mlflow ui --backend-store-uri sqlite:///{exp_dir}/mlflow.db``.
        experiment_name: the MLflow experiment; None: the experiment directory's name
            (``online_trainer`` without one).
        flush_values: metric values kept before they are sent.
        max_delay: seconds after which an episode's values also send what is kept.

    Raises:
        ValueError: ``flush_values`` is not a positive int or ``max_delay`` is negative; at
            setup, neither an exp_dir nor a tracking_uri.
        ImportError: at setup, MLflow is not installed.
    """

    STORE: ClassVar[str] = "MLflow"
    """The kind of store its checkpoint positions name (:meth:`check_position` takes no other)."""

    _unpicklable = ("_clients",)

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment_name: str | None = None,
        flush_values: int = MAX_BATCH,
        max_delay: float = 5.0,
    ) -> None:
        flush_values = validation.positive_int("flush_values", flush_values)
        if not isinstance(max_delay, (int, float)) or max_delay < 0:
            raise ValueError(f"max_delay must be a number of seconds >= 0, but got max_delay={max_delay!r}.")
        if tracking_uri is not None:
            _check_scheme(tracking_uri)
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self.flush_values = flush_values
        self.max_delay = max_delay
        self._experiments: dict[str, _Experiment] = {}
        self._owner = False  # True in the process that ran setup (the parent): it logs the artifacts
        self._clients: dict[str, Any] | None = None
        self._active: tuple[str, str, str] | None = None  # (uri, run id, run tag) of the run under way
        self._buffer: list[tuple[str, float, float, int]] = []
        self._names: dict[tuple[str, str], str] = {}
        self._last_flush = 0.0
        self._ledger = PointLedger()
        self._resuming: dict[str, StorePosition | None] = {}  # run tag -> its checkpoint's position (rewind)
        self._resumption: Resumption | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_owner=False, _active=None, _buffer=[], _resumption=None)
        return state

    def setup(self, exp_dir: str | os.PathLike | None, runs: Mapping[int, int]) -> None:
        """Create (or open) the store, the experiment and one MLflow run per run number, here, once."""
        self._owner = True
        try:
            prepared = self._prepare(exp_dir, runs)
        except Exception as exc:
            # a server that answers, but not as MLflow's (another service on that port: V19 got MLflow's 404 and the
            # page's HTML, naming no argument)
            if not self.tracking_uri or type(exc).__name__ != "MlflowException":
                raise
            said = (str(exc).strip().splitlines() or [""])[0][:300]
            raise ConnectionError(
                f"MLflowCallback(tracking_uri={self.tracking_uri!r}): what answers there is not an MLflow tracking "
                f"store ({said}). Check the address and port of the tracking server (`mlflow server` prints them); "
                "nothing was run."
            ) from exc
        self._experiments[self._key(exp_dir)] = prepared

    def _prepare(self, exp_dir: str | os.PathLike | None, runs: Mapping[int, int]) -> _Experiment:
        if self.tracking_uri:
            uri, location = self.tracking_uri, None
        elif exp_dir is not None:
            local = Path(exp_dir).resolve()
            uri, location = f"sqlite:///{local / STORE_FILE}", (local / ARTIFACTS_DIR).as_uri()
            if self._clients is not None:  # a second call with this callback: the store may be another file now
                self._clients.pop(uri, None)
        else:
            raise ValueError(
                "MLflowCallback(tracking_uri=None) keeps its store in the experiment directory, but "
                "exp_dir is None: make the trainer with exp_dir=..., or pass tracking_uri=... "
                "(e.g. 'sqlite:///mlflow.db' or 'http://localhost:5000')."
            )
        if self.tracking_uri:  # the experiment directory's own store is made with the directory
            _check_reachable(uri)
        client = self._client(uri)
        name = self.experiment_name or (Path(exp_dir).resolve().name if exp_dir is not None else DEFAULT_EXPERIMENT)
        experiment = client.get_experiment_by_name(name)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:
            experiment_id = client.create_experiment(name, artifact_location=location)
        ids_path = None if exp_dir is None else Path(exp_dir) / RUN_IDS_FILE
        run_ids = read_ids(ids_path) if ids_path is not None else {}
        for run in runs:
            if run not in run_ids or not self._exists(client, run_ids[run]):
                run_ids[run] = client.create_run(
                    experiment_id, run_name=f"run_{run}", tags={RUN_TAG: str(run)}
                ).info.run_id
            elif location is not None:
                kept = client.get_run(run_ids[run]).info.artifact_uri or ""
                if not kept.startswith(location):
                    logger.warning(
                        "%s was moved or copied since its MLflow runs were made: MLflow keeps a run's artifacts where "
                        "it was made (%s), not in %s, and does not move them. The metrics are in the store here.",
                        exp_dir,
                        kept,
                        location,
                    )
                    location = None  # said once
        if ids_path is not None:
            write_ids(ids_path, run_ids)
        return _Experiment(uri, experiment_id, run_ids)

    @staticmethod
    def _exists(client: Any, run_id: str) -> bool:
        try:
            return client.get_run(run_id).info.lifecycle_stage == "active"
        except Exception:  # MlflowException: no such run in this store
            return False

    def _client(self, uri: str) -> Any:
        if self._clients is None:
            self._clients = {}
        client = self._clients.get(uri)
        if client is None:
            if _store_file_changed(uri):
                _reopen_store(uri)
            client = self._clients[uri] = _mlflow().MlflowClient(uri)
        return client

    @staticmethod
    def _key(exp_dir: str | os.PathLike | None) -> str:
        return "" if exp_dir is None else os.path.abspath(exp_dir)

    def start_run(
        self, run_idx: int, seed: int, params: Mapping[str, Any], exp_dir: str | None, run_tag: str = ""
    ) -> None:
        """Make the run's MLflow run the one values go to, and log its params."""
        self._end_active("KILLED")  # a run that never said it ended
        experiment = self._experiments.get(self._key(exp_dir))
        if experiment is None or run_idx not in experiment.run_ids:  # used without the trainer's setup
            experiment = self._experiments[self._key(exp_dir)] = self._prepare(exp_dir, {run_idx: seed})
        entities = _mlflow().entities
        run_id = experiment.run_ids[run_idx]
        client = self._client(experiment.uri)
        values = {"seed": seed, "run": run_idx, **params}
        client.log_batch(run_id, params=[entities.Param(str(k), str(v)) for k, v in values.items()])
        client.update_run(run_id, status="RUNNING")
        run_tag = run_tag or f"run_{run_idx}"
        self._active = (experiment.uri, run_id, run_tag)
        self._names.clear()
        self._ledger, self._resumption = PointLedger(), None
        if run_tag in self._resuming:  # a resumed run, or one started again: the store holds points of it
            position = self._resuming.pop(run_tag)
            self._ledger = PointLedger(position=position)
            self._resumption = Resumption(
                f"MLflowCallback, MLflow run {run_id}", run_tag, self._held(client, run_id), position
            )

    @staticmethod
    def _held(client: Any, run_id: str) -> list[tuple[str, float, float]]:
        """Every metric point of the MLflow run, per name in the order of its steps."""
        points: list[tuple[str, float, float]] = []
        for name in client.get_run(run_id).data.metrics:
            history = sorted(client.get_metric_history(run_id, name), key=lambda m: (m.step, m.timestamp))
            points.extend((name, m.step, m.value) for m in history)
        return points

    def checkpoint(self, run_tag: str) -> dict[str, Any]:
        """Send what is kept and return how many points of each metric the run has logged (its position, as
        :meth:`StorePosition.to_state <online_trainer.callbacks.store_points.StorePosition.to_state>`)."""
        self.flush()
        return dataclasses.replace(self._ledger.position(), sink=self.STORE).to_state()

    def check_position(self, position: Any) -> None:
        """Raise ``ValueError`` unless ``position`` is None or a MLflow sink's (not another sink's: the callbacks
        differ from those the experiment ran with)."""
        check_store_position(position, self.STORE)

    def rewind(self, run_tag: str, position: Any, since: float | None = None) -> None:  # since: its runs are its own
        """Note that the run ``run_tag`` resumes from ``position`` (what :meth:`checkpoint` returned; None: it
        starts again); its :meth:`start_run`
        then reads what its MLflow run holds, so as to send nothing twice."""
        self._resuming[run_tag] = as_position(position)

    def end_run(self, run_idx: int, status: str) -> None:
        """Send what is kept and mark the MLflow run FAILED (``failed``), KILLED (``interrupted``) or FINISHED."""
        self._end_active({"failed": "FAILED", "interrupted": "KILLED"}.get(status, "FINISHED"))

    def _end_active(self, mlflow_status: str) -> None:
        if self._active is None:
            return
        try:
            self.flush()
            if self._resumption is not None:
                self._resumption.report()
        finally:
            uri, run_id, _ = self._active
            self._active, self._resumption = None, None
            self._names.clear()
            # MLflow writes "View run ... at: URL" to stdout for a tracking server, two lines a run (V20): logged
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                self._client(uri).set_terminated(run_id, mlflow_status)
            for line in printed.getvalue().splitlines():
                if line.strip():
                    logger.info("MLflow: %s", line.strip())

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        now = time.time()
        for key, value in data.items():
            self._buffer.append((self._name(key, tag, "step"), float(value), now, step))
        if len(self._buffer) >= self.flush_values or (force and now - self._last_flush > self.max_delay):
            self.flush()

    def series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> None:
        """Keep every value of ``key`` at once (see :meth:`online_trainer.callbacks.CallBack.series`)."""
        now, name = time.time(), self._name(key, tag, "episode")
        times = itertools.repeat(now) if wall_times is None else wall_times
        self._buffer.extend([(name, float(value), wall, step) for value, step, wall in zip(values, steps, times)])
        if len(self._buffer) >= self.flush_values or now - self._last_flush > self.max_delay:
            self.flush()

    def _name(self, key: str, tag: str, axis: str) -> str:
        name = self._names.get((key, tag))
        if name is None:
            if self._active is None:
                raise RuntimeError(
                    f"MLflowCallback got {key!r} under {tag!r} outside a run: it logs into the MLflow run "
                    "of the run under way; call start_run(run_idx, seed, params, exp_dir) first "
                    "(the trainer does)."
                )
            name = self._names[(key, tag)] = _NOT_IN_NAME.sub("_", metric_name(key, tag, self._active[2]))
            self._ledger.axes.setdefault(name, axis)
        return name

    def flush(self) -> None:
        """Send the metric values kept so far, with ``log_batch``."""
        self._last_flush = time.time()
        if not self._buffer or self._active is None:
            return
        uri, run_id, _ = self._active
        metric = _mlflow().entities.Metric
        buffer, self._buffer = self._buffer, []
        add = self._ledger.add
        for name, value, _, step in buffer:
            add(name, step, value)
        resumption = self._resumption
        if resumption is not None:  # leave out what the store holds already
            buffer = [point for point in buffer if resumption.keep(point[0], point[3], point[1])]
        client = self._client(uri)
        for start in range(0, len(buffer), MAX_BATCH):
            client.log_batch(
                run_id,
                metrics=[
                    metric(name, value, int(wall * 1000), int(step))
                    for name, value, wall, step in buffer[start : start + MAX_BATCH]
                ],
            )

    def reset(self) -> None:
        """Nothing is averaged: values kept are sent (or dropped with the run, see :meth:`start_run`)."""

    def close(self) -> None:
        """End a run left open; in the process that ran :meth:`setup`, log the experiment's small files."""
        self._end_active("FAILED")
        self._resuming.clear()
        if self._owner:
            experiments, self._experiments, self._owner = self._experiments, {}, False
            self._log_artifacts(experiments)

    def _log_artifacts(self, experiments: dict[str, _Experiment]) -> None:
        for key, experiment in experiments.items():
            files = [Path(key) / name for name in ARTIFACT_FILES if key and (Path(key) / name).is_file()]
            client = self._client(experiment.uri)
            for run_id in experiment.run_ids.values():
                for path in files:
                    client.log_artifact(run_id, os.fspath(path))

    def __repr__(self) -> str:
        return f"MLflowCallback(tracking_uri={self.tracking_uri!r}, experiment_name={self.experiment_name!r})"


def _check_scheme(tracking_uri: str) -> None:
    """Refuse a ``tracking_uri`` whose scheme no MLflow store takes (``fiel:...``), naming the argument: MLflow says
    it later, and of its model registry. Where MLflow's table of stores cannot be read, nothing is checked."""
    try:  # private, but the one list of what MLflow (and its installed plugins) take
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry

        schemes = sorted(str(scheme) for scheme in _tracking_store_registry._registry)
    except (ImportError, AttributeError):
        return
    scheme = urllib.parse.urlparse(tracking_uri).scheme
    base = scheme.split("+")[0]  # postgresql+psycopg2
    if len(scheme) <= 1 or base in schemes:  # a path (C:\\... on Windows reads as scheme "c")
        return
    close = difflib.get_close_matches(base, schemes, n=1, cutoff=0.6)
    raise ValueError(
        f"MLflowCallback got tracking_uri={tracking_uri!r}, whose scheme {scheme!r} no MLflow store takes"
        + (f" (did you mean {close[0]!r}?)" if close else "")
        + ": give a path, 'file:/absolute/path', 'sqlite:///mlflow.db' or 'http://host:5000' (MLflow's schemes here: "
        + f"{', '.join(repr(s) for s in schemes if s)})."
    )


def _check_reachable(tracking_uri: str, timeout: float = 5.0) -> None:
    """Refuse, before the first run, a tracking server nothing answers at, and a SQLite file in a directory that does
    not exist: MLflow retried the first for four minutes and then raised its own error (R19), and made the second's
    directories wherever the mistyped path led.

    Raises:
        ConnectionError: nothing answers at an ``http(s)`` ``tracking_uri`` within ``timeout`` seconds.
        FileNotFoundError: the directory of a ``sqlite:///`` file does not exist.
    """
    parsed = urllib.parse.urlparse(tracking_uri)
    if parsed.scheme in ("http", "https") and parsed.hostname:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            socket.create_connection((parsed.hostname, port), timeout=timeout).close()
        except OSError as exc:
            raise ConnectionError(
                f"MLflowCallback(tracking_uri={tracking_uri!r}): nothing answers at {parsed.hostname}:{port} ({exc}). "
                "Start the tracking server (`mlflow server --host 0.0.0.0 --port PORT` on its machine) or give a "
                "tracking_uri that answers; nothing was run."
            ) from exc
    elif parsed.scheme == "sqlite" and tracking_uri.startswith("sqlite:///"):
        path = Path(urllib.parse.unquote(tracking_uri[len("sqlite:///") :]))
        if str(path) not in ("", ":memory:") and not path.parent.is_dir():
            raise FileNotFoundError(
                f"MLflowCallback(tracking_uri={tracking_uri!r}): the directory of the store, {path.parent}, does not "
                "exist. Make it first, or fix the path ('sqlite:///relative.db' is in the working directory, "
                "'sqlite:////absolute/path.db' has four slashes)."
            )
