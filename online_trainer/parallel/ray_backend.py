"""Runs as Ray tasks, on a local Ray instance or a cluster.

How records reach the experiment directory: each task writes its metrics stream and
checkpoints into ``exp_dir`` itself, exactly as a local worker does, so a crash of the
driver or of another node loses nothing that was flushed. On a cluster ``exp_dir`` must
therefore be on a filesystem every node mounts at the same path (NFS, a cluster
filesystem). The driver checks this before a run starts: it writes a token file into
``exp_dir`` and every task checks that it sees the token, failing with a clear error
otherwise; records are never written where the driver cannot read them. Records also
come back to the driver with each result (unless ``keep_records=False``), and progress
reaches the driver's display through a Ray queue.

A preemption signal (SIGTERM, SIGUSR1) reaches the tasks the same way: the driver, whose handlers replace the ones
``ray.init`` installs, writes the signal into ``exp_dir/.preempt``; each task looks for that file about twice a
second, and its run writes a full checkpoint at its next step and stops, as in a worker process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import cloudpickle

from online_trainer.errors import Preempted, RunSetupError
from online_trainer.experiment import job_results
from online_trainer.options.typed import did_you_mean
from online_trainer.parallel import shipping
from online_trainer.parallel.execution import ResultHandler, StartHandler, failed_result, no_start
from online_trainer.parallel.threads import limit_threads, thread_variables
from online_trainer.progress.display import NoProgress, ProgressDisplay, QueueProgress
from online_trainer.records import storage
from online_trainer.run.builtin import preemption
from online_trainer.run.one_run import COMPLETED, RunResult, RunSpec, execute_run

logger = logging.getLogger(__name__)

TOKEN_FILE = ".ray_shared_fs_check"
PREEMPT_FILE = ".preempt"
"""Written into each experiment directory by a driver that got a preemption signal: the signal's number."""


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend='ray' needs Ray: pip install -e '.[ray]' (or pip install ray).") from exc
    return ray


def _ray_task(payload: bytes, queue: Any, torch_threads: int | None, token: str | None, cwd: str) -> RunResult:
    """Run one spec in a Ray worker; ``token`` is the content of every spec's token file, ``cwd`` the driver's
    working directory."""
    limit_threads(torch_threads)  # the libraries the Ray worker loaded before its environment was set
    spec: RunSpec = cloudpickle.loads(payload)
    preemption.forget_before(time.monotonic())  # a Ray worker runs task after task: an earlier task's signal
    with _in_directory(cwd):  # all of it: the callback's close and the result file write relative paths too
        try:
            with _interruptible(), _watching_for_preemption(spec.exp_dir):
                if token is not None and spec.exp_dir is not None:  # the token went into the specs' directories
                    _check_token(spec.exp_dir, token)
                if spec.exp_dir is not None:  # an earlier attempt's: this attempt's end is the one to record
                    job_results.result_path(spec.exp_dir, spec.run_idx).unlink(missing_ok=True)
                result = execute_run(spec, NoProgress() if queue is None else QueueProgress(queue))
        except Preempted as exc:  # it checkpointed (if it can) and stopped: the driver raises it, saying what was kept
            result = failed_result(spec, exc, keep_exception=True)
            result.status = "interrupted"
            return result
        except Exception as exc:
            return failed_result(spec, exc)
        finally:
            spec.callback.close()
        if spec.exp_dir is not None and result.status in COMPLETED:
            _leave_result(spec, result)
        return result


def _leave_result(spec: RunSpec, result: RunResult) -> None:
    """Write how the run ended beside its files, as a Slurm job does: a task outlives a driver that dies (killed,
    its node lost) by the time it takes to end, and a resume then counts the run as completed instead of doing it
    again from its first step (its full checkpoint is gone by then)."""
    counts = dataclasses.replace(result, records=None, agent=None, evaluations=None)  # the records are on disk
    path = job_results.result_path(str(spec.exp_dir), spec.run_idx)
    try:
        path.parent.mkdir(exist_ok=True)
        storage.write_atomic(path, cloudpickle.dumps(counts))
    except OSError as exc:  # the driver, alive, records the run's end anyway
        logger.warning("run %d: could not write %s: %s", spec.run_idx, path, exc)


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """Python's SIGINT handler while the task runs (the disposition the worker had, after).

    Ray's soft cancel, which lets a run flush its records on its way out, interrupts the task with
    SIGINT; a driver started with SIGINT ignored (under nohup, a background job of a script) passes
    that on to the Ray workers it starts, and the cancel would do nothing until the kill.
    """
    if threading.current_thread() is not threading.main_thread():  # signal handlers are the main thread's
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _watching_for_preemption(exp_dir: str | os.PathLike | None, every: float = 0.5) -> Iterator[None]:
    """While the task's run goes, a thread looks for the driver's :data:`PREEMPT_FILE` in ``exp_dir`` every ``every``
    seconds and, once it is there, asks the run to checkpoint and stop (the run looks at that about every second).
    A run without an experiment directory cannot be resumed: the driver's cancel stops it."""
    if exp_dir is None:
        yield
        return
    path, done = Path(exp_dir) / PREEMPT_FILE, threading.Event()

    def watch() -> None:
        while not done.wait(every):
            if path.exists():
                try:
                    signum = int(path.read_text())
                except (OSError, ValueError):  # being written: a SIGTERM it is
                    signum = signal.SIGTERM
                preemption.request(signum, announce=False)  # the driver said it
                return

    watcher = threading.Thread(target=watch, name="online-trainer-preemption", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


@contextlib.contextmanager
def _in_directory(cwd: str) -> Iterator[None]:
    """The task in the driver's working directory where the node has it (its worker's, after), as worker processes
    and Slurm jobs run: relative paths (``exp_dir``, a sink's ``log_dir``, the user's files) are the driver's. A
    worker of a cluster started with ``ray start`` runs in a directory of Ray's, where the driver's relative
    ``exp_dir`` was another directory (an outside tester's find)."""
    previous = os.getcwd()
    if not os.path.isdir(cwd):  # another machine: the token check says what to do
        yield
        return
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(previous)


def _check_answers(address: str | None, timeout: float = 5.0) -> None:
    """Raise ``ConnectionError`` when nothing listens at ``address`` (``host:port`` of a head node's GCS); other
    forms (None, ``auto``, ``ray://`` of Ray Client) are left to ``ray.init``."""
    if address is None or "://" in address or address in ("auto", "local"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {address} ({exc})") from exc


def _check_token(exp_dir: str, token: str) -> None:
    path = Path(exp_dir) / TOKEN_FILE
    if not path.is_file() or path.read_text() != token:
        where = os.path.abspath(exp_dir)
        raise RuntimeError(
            f"exp_dir={exp_dir!r} ({where} on Ray node {socket.gethostname()}) is not the driver's experiment "
            "directory: put the experiment directory on a filesystem every node mounts at the same path"
            + (
                "."
                if os.path.isabs(exp_dir)
                else ", and give exp_dir as an absolute path (the driver's working directory is not on this node)."
            )
        )


def _task_option_names() -> tuple[str, ...]:
    """The options Ray's tasks take, where this Ray version says (it moved them between modules); else none."""
    for module in ("ray._common.ray_option_utils", "ray._private.ray_option_utils"):
        with contextlib.suppress(ImportError, AttributeError):
            return tuple(importlib.import_module(module).task_options)
    return ()


def _exp_dirs(specs: Sequence[RunSpec]) -> list[Path]:
    """The distinct experiment directories of ``specs`` (none when records stay in memory)."""
    return [Path(d) for d in dict.fromkeys(spec.exp_dir for spec in specs if spec.exp_dir is not None)]


def task_options(resources: Mapping[str, Any], torch_threads: int | None) -> dict[str, Any]:
    """Ray options of each task: ``resources``, and a ``runtime_env`` whose ``env_vars`` limit its thread pools.

    Ray starts the task's worker process with those variables set, so numpy's BLAS reads the limit
    when it is loaded. The caller's other ``resources["runtime_env"]["env_vars"]`` are kept; for the
    thread variables ``torch_threads`` is the setting, as in worker processes.
    """
    options = dict(resources)
    variables = thread_variables(torch_threads)
    if variables:
        runtime_env = dict(options.get("runtime_env") or {})
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), **variables}
        options["runtime_env"] = runtime_env
    return options


class RayExecutor:
    """Submits each run as a Ray task with ``resources`` (``num_cpus``, ``num_gpus``, ...).

    Args:
        address: Ray cluster address; None uses ``RAY_ADDRESS`` or starts a local Ray.
        resources: Ray task options per run, ``{"num_cpus": 1}`` by default.
        max_concurrent: runs in flight at once (the ``num_workers`` of ``multi_run``).
        torch_threads: threads of every pool (torch, BLAS, OpenMP) in each task (None: as Ray sets them), through
            the task's ``runtime_env`` (see :func:`task_options`) and at the task's start.
        grace: seconds to wait for interrupted tasks before they are killed.
    """

    def __init__(
        self,
        address: str | None = None,
        resources: Mapping[str, Any] | None = None,
        max_concurrent: int = 1,
        torch_threads: int | None = 1,
        grace: float = 5.0,
    ) -> None:
        self.ray = _import_ray()
        self.address = address or os.environ.get("RAY_ADDRESS")
        self.address_from_env = not address and self.address is not None
        self.resources = dict(resources or {"num_cpus": 1})
        self.max_concurrent, self.torch_threads, self.grace = max_concurrent, torch_threads, grace

    def _connect(self, specs: Sequence[RunSpec]) -> None:
        """Connect to Ray (``ray.init``) unless this process is connected.

        Raises:
            RunSetupError: nothing answers at ``address`` (Ray itself retries for minutes, in log lines of its
                own), or ``ray.init`` failed (a refused token, versions that differ): the call keeps nothing.
        """
        if self.ray.is_initialized():
            self._check_connected_address(specs)
            return
        where = self.address or "a new local instance"
        logger.info("connecting to Ray at %s", where)
        try:
            _check_answers(self.address)
            self.ray.init(
                address=self.address, include_dashboard=False, logging_level=logging.WARNING, configure_logging=False
            )
        except Exception as exc:
            given = "RAY_ADDRESS" if self.address_from_env else f"execution.ray_address={self.address!r}"
            refusal = ConnectionError(
                f"could not connect to Ray at {where} ({given}): {type(exc).__name__}: {exc}. Check the address "
                "and that the cluster is up (`ray status` on its head node prints both). Nothing was run."
            )
            raise RunSetupError(specs[0].run_idx, specs[0].seed, refusal) from exc

    def _check_connected_address(self, specs: Sequence[RunSpec]) -> None:
        """Refuse an ``execution.ray_address`` other than the cluster this process is connected to already (R23: a
        notebook with a local Ray up ran there, the address given ignored without a word).

        Raises:
            RunSetupError: the address differs from the connected cluster's (its GCS address).
        """
        if self.address is None or self.address_from_env or self.address == "auto" or "://" in self.address:
            return
        try:
            connected = self.ray.get_runtime_context().gcs_address
        except Exception:  # a Ray without it: nothing to compare with
            return
        if connected and connected != self.address:
            refusal = ValueError(
                f"execution.ray_address={self.address!r}, but this process is connected to the Ray cluster at "
                f"{connected} already (ray.init was called), and a process connects to one cluster: call "
                "ray.shutdown() first to run on the address given, or drop ray_address to run where it is connected."
            )
            raise RunSetupError(specs[0].run_idx, specs[0].seed, refusal)

    def _check_fits(self, specs: Sequence[RunSpec]) -> None:
        """Refuse (Ray on this machine alone) or warn of (a cluster, which may grow) a task no node can hold: Ray
        would keep it waiting, and the call with it, without a word of ours.

        Raises:
            RunSetupError: every node of the Ray cluster is this machine, and none has what ``ray_resources`` asks.
        """
        asked = {"CPU": self.resources.get("num_cpus", 1), "GPU": self.resources.get("num_gpus", 0)}
        asked.update({"memory": self.resources["memory"]} if self.resources.get("memory") else {})
        asked.update(self.resources.get("resources") or {})
        asked = {name: float(amount) for name, amount in asked.items() if amount}
        alive = [node for node in self.ray.nodes() if node.get("Alive")]
        nodes = [node.get("Resources", {}) for node in alive]
        if not nodes or any(all(node.get(k, 0.0) >= v for k, v in asked.items()) for node in nodes):
            return
        local = all(node.get("NodeManagerHostname") == socket.gethostname() for node in alive)
        have = "; ".join(
            ", ".join(f"{k}={v:g}" for k, v in sorted(node.items()) if k in asked or k in ("CPU", "GPU"))
            for node in nodes
        )
        message = (
            f"ray_resources={self.resources!r} asks each run for {asked}, which no node of the Ray cluster has "
            f"(its nodes: {have})"
        )
        if local:
            refusal = ValueError(f"{message}: ask for what this machine has, e.g. ray_resources={{'num_cpus': 1}}.")
            raise RunSetupError(specs[0].run_idx, specs[0].seed, refusal)
        logger.warning("%s: the runs wait until a node that has it joins the cluster (Ctrl-C stops them).", message)

    def run(
        self,
        specs: Sequence[RunSpec],
        display: ProgressDisplay | NoProgress,
        on_result: ResultHandler,
        on_start: StartHandler = no_start,
    ) -> None:
        """Run every spec as a Ray task (``on_start(spec)`` before each is submitted); return when all have a result."""
        ray = self.ray
        self._connect(specs)
        self._check_fits(specs)
        from ray.util.queue import Queue

        task = self._task(specs)
        exp_dirs = _exp_dirs(specs)
        for exp_dir in exp_dirs:  # a killed driver's: the tasks of this call would stop at once
            (exp_dir / PREEMPT_FILE).unlink(missing_ok=True)
        # The queue is an actor: a process of its own, started only when progress is shown.
        queue = None if isinstance(display, NoProgress) else Queue()
        token = self._write_token(specs)
        cwd = os.getcwd()
        waiting = list(specs)
        in_flight: dict[Any, RunSpec] = {}
        stopped: list[Preempted] = []  # what the runs a preemption stopped raised in their tasks

        def preempt(signum: int) -> None:
            """Pass the signal on: to the tasks of runs with an experiment directory through it, to the others as a
            cancel (they could not be resumed from a checkpoint)."""
            for exp_dir in exp_dirs:
                try:
                    storage.write_atomic(exp_dir / PREEMPT_FILE, str(int(signum)).encode())
                except OSError as exc:
                    logger.error("could not pass the preemption signal on to the runs in %s: %s", exp_dir, exc)
            for ref, spec in list(in_flight.items()):
                if spec.exp_dir is None:
                    ray.cancel(ref, force=False)

        try:
            # after ray.init, whose driver handlers (SIGTERM) would end the process without a checkpoint (R19)
            with preemption.handling(forward=preempt):
                while waiting or in_flight:
                    while waiting and len(in_flight) < self.max_concurrent and not preemption.requested():
                        spec = waiting.pop(0)
                        on_start(spec)
                        in_flight[task.remote(shipping.dumps(spec), queue, self.torch_threads, token, cwd)] = spec
                    if preemption.requested() and not in_flight:
                        raise Preempted.of_runs(stopped, on_disk=bool(exp_dirs))
                    ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.2)
                    self._drain(queue, display)
                    for ref in ready:
                        spec = in_flight.pop(ref)
                        try:
                            result = ray.get(ref)
                        except Exception as exc:  # the task's worker died, Ray failed it, or cancelled it
                            result = failed_result(spec, exc)
                            if preemption.requested() and isinstance(exc, ray.exceptions.TaskCancelledError):
                                result.status = "interrupted"
                        if result.status == "failed":
                            logger.error("%s (seed %d) failed: %s", spec.name, spec.seed, result.extra.get("exception"))
                        if isinstance(result.extra.get("exception_object"), Preempted):
                            stopped.append(result.extra["exception_object"])
                        self._drain(queue, display)
                        display.run_finished(spec.key, result.status)
                        on_result(result)
                if stopped:  # the signal came as the last runs were ending: those it stopped say where they stand
                    raise Preempted.of_runs(stopped, on_disk=bool(exp_dirs))
        except BaseException:
            self._cancel(list(in_flight))
            raise
        finally:
            for exp_dir in exp_dirs:
                (exp_dir / PREEMPT_FILE).unlink(missing_ok=True)
                if token is not None:
                    (exp_dir / TOKEN_FILE).unlink(missing_ok=True)
            if queue is not None:
                ray.kill(queue.actor)

    def _task(self, specs: Sequence[RunSpec]) -> Any:
        """The remote function of the runs, with their task options.

        Raises:
            RunSetupError: Ray refuses ``ray_resources`` (a misspelt option: R19's ``num_cpu`` wrote the experiment's
                files, and the corrected call found them in its way).
        """
        try:
            return self.ray.remote(_ray_task).options(max_retries=0, **task_options(self.resources, self.torch_threads))
        except ValueError as exc:
            valid = _task_option_names()
            hints = "".join(
                f" {key!r} is not an option of Ray tasks{did_you_mean(key, valid)}."
                for key in self.resources
                if valid and key not in valid
            )
            refusal = ValueError(
                f"execution.ray_resources={self.resources!r} is not what Ray takes:{hints or ''} Ray says: {exc}"
            )
            raise RunSetupError(specs[0].run_idx, specs[0].seed, refusal) from exc

    @staticmethod
    def _write_token(specs: Sequence[RunSpec]) -> str | None:
        """Write one token into the experiment directory of every spec (a sweep has several)."""
        exp_dirs = _exp_dirs(specs)
        if not exp_dirs:
            return None
        token = uuid.uuid4().hex
        for exp_dir in exp_dirs:
            storage.write_atomic(exp_dir / TOKEN_FILE, token.encode())  # an OSError names the file
        return token

    @staticmethod
    def _drain(queue: Any, display: ProgressDisplay | NoProgress) -> None:
        if queue is None:
            return
        size = queue.qsize()
        if size:
            for message in queue.get_nowait_batch(size):
                display.handle(message)

    def _cancel(self, refs: list[Any]) -> None:
        """Interrupt running tasks (KeyboardInterrupt in each, so streams flush), then kill them."""
        ray = self.ray
        for ref in refs:
            ray.cancel(ref, force=False)
        deadline = time.monotonic() + self.grace
        remaining = refs
        while remaining and time.monotonic() < deadline:
            _, remaining = ray.wait(remaining, num_returns=len(remaining), timeout=0.2)
        for ref in remaining:
            ray.cancel(ref, force=True)
