"""Faults of the local worker pool: a killed parent, killed workers (busy or idle), a full disk,
results that cannot travel, and an ``on_result`` handler that raises.

Every scenario runs under a deadline, so a hang fails the test instead of blocking CI. Run
files are found by globbing ``metrics_run*.pkl``, whatever runs are numbered from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest

from online_trainer import OnlineTrainer, RunsFailedError, load_episodes, load_runs, shutdown_workers
from online_trainer.callbacks import EmptyCallBack
from online_trainer.callbacks.base import CallBack
from online_trainer.experiment.lock import LOCK_FILE, ExperimentLock
from online_trainer.experiment.ownership import is_held
from online_trainer.experiment.resuming import runs_left
from online_trainer.loop.factories import AgentFactory, EnvFactory
from online_trainer.options.groups import RecordOptions, RunPlan
from online_trainer.parallel.workers import WorkerPool, shared_pool
from online_trainer.progress.display import NoProgress
from online_trainer.records.storage import iter_metrics_chunks
from online_trainer.run.one_run import RunSpec
from tests.conftest import RecordingAgent, make_counting_vec

pytestmark = pytest.mark.slow  # kill trials: workers and parents killed, processes started and reaped

REPO = Path(__file__).resolve().parents[3]
# (start method, whether a thread other than the main thread calls multi_run, seed of the kill's timing)
PARENT_KILL_TRIALS = (
    [("spawn", False, seed) for seed in range(5)]
    + [("spawn", True, seed) for seed in (5, 6)]
    + [("forkserver", False, seed) for seed in (7, 8, 9)]
    + [("fork", False, 10), ("fork", True, 11)]
)


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise TimeoutError in this (the main) thread when the block takes longer than ``seconds``."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: the call hangs")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def fresh_workers():
    shutdown_workers()
    yield
    shutdown_workers()


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``processes`` still running (a zombie has exited: nobody may reap it in a container)."""
    left = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
        except psutil.NoSuchProcess:
            continue
    return left


def wait_gone(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` seconds for ``processes`` to exit; return those still alive."""
    end = time.monotonic() + timeout
    while alive(processes) and time.monotonic() < end:
        time.sleep(0.05)
    return alive(processes)


def load_every_chunk(exp_dir: Path) -> dict[str, int]:
    """Records per metrics stream; a truncated or unreadable chunk, or an episode missing, fails the test."""
    counts = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for path in sorted(exp_dir.glob("metrics_run*.pkl")):
            indices = [record["episode_index"] for chunk in iter_metrics_chunks(path) for record in chunk]
            assert indices == list(range(1, len(indices) + 1)), path.name
            counts[path.name] = len(indices)
    return counts


# ---------------------------------------------------------------- the parent is killed


PARENT_SCRIPT = textwrap.dedent("""
    import sys, threading, time
    from online_trainer.callbacks import JsonlCallback
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    class Slow(RecordingAgent):  # runs 1 and 2 end within about a second; 3 and 4 take many
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            time.sleep(0.001 if self.seed < 20000 else 0.05)

    def main(exp_dir, start_method):
        trainer = OnlineTrainer(make_counting_vec(2), Slow, exp_dir=exp_dir)
        trainer.call_back = JsonlCallback(exp_dir + "/log.jsonl", flush_every=4)
        trainer.multi_run(4, num_episodes=RUN_EPISODES, seed_offset=0, num_workers=2, start_method=start_method,
                          checkpoint_freq=40, metrics_flush_every=3, progress=False)

    if __name__ == "__main__":
        if sys.argv[3] == "thread":  # workers started by another thread: no PR_SET_PDEATHSIG for them
            thread = threading.Thread(target=main, args=sys.argv[1:3])
            thread.start()
            thread.join()
        else:
            main(*sys.argv[1:3])
""")


RUN_EPISODES = 60


@pytest.mark.parametrize("start_method,from_thread,seed", PARENT_KILL_TRIALS)
def test_nothing_outlives_a_killed_parent(tmp_path, start_method, from_thread, seed):
    """SIGKILL of the parent mid-run: no process survives it by 5 s, nothing is written after it, and the
    manifest tells the truth: runs that started are finished or running, and read back as interrupted."""
    rng = random.Random(seed)
    script = tmp_path / "parent.py"
    script.write_text(PARENT_SCRIPT.replace("RUN_EPISODES", str(RUN_EPISODES)))
    exp = tmp_path / "exp"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    caller = "thread" if from_thread else "main"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(exp), start_method, caller],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        end = time.monotonic() + 60
        while (
            proc.poll() is None
            and time.monotonic() < end
            and not any(p.stat().st_size for p in exp.glob("metrics_run*.pkl"))
        ):
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1].decode()
        time.sleep(rng.uniform(0.0, 1.0))
        descendants = psutil.Process(proc.pid).children(recursive=True)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    gone_at = time.time()
    assert len(descendants) >= 2  # two workers (and the resource tracker, and the forkserver)
    assert wait_gone(descendants, 5.0) == []
    late = [p.name for p in exp.rglob("*") if p.is_file() and p.stat().st_mtime > gone_at]
    assert late == []
    counts = load_every_chunk(exp)
    assert counts  # whole chunks only: load_every_chunk fails on a torn one
    check_truthful_manifest(exp, counts)


def check_truthful_manifest(exp: Path, counts: dict[str, int]) -> None:
    """After the kill no run that started says pending, readers report running ones interrupted, a resume redoes them."""
    recorded = {entry["run"]: entry["status"] for entry in json.loads((exp / "manifest.json").read_text())["runs"]}
    started = {int(name[len("metrics_run") : -len(".pkl")]) for name in counts}
    assert started and set(recorded.values()) <= {"finished", "running", "pending"}, recorded
    assert all(recorded[run] in ("finished", "running") for run in started), (recorded, counts)
    assert all(counts[f"metrics_run{run}.pkl"] == RUN_EPISODES for run in recorded if recorded[run] == "finished")
    end = time.monotonic() + 5  # the kernel drops the flock of a killed process moments after it is gone
    while is_held(exp / LOCK_FILE) and time.monotonic() < end:
        time.sleep(0.01)
    assert not is_held(exp / LOCK_FILE)
    expected = {run: "interrupted" if status == "running" else status for run, status in recorded.items()}
    runs = load_runs(exp)
    assert dict(zip(runs["run"], runs["status"])) == expected
    episodes = load_episodes(exp)
    assert {r["run"]: r["status"] for r in episodes.attrs["runs"]} == expected
    assert set(episodes["status"]) <= {"finished", "interrupted"}
    with ExperimentLock(exp):
        redo = list(runs_left(json.loads((exp / "manifest.json").read_text()), exp))
    assert redo == [run for run, status in sorted(recorded.items()) if status != "finished"]


# ---------------------------------------------------------------- a worker is killed


class KillsItselfOnSecondRun(RecordingAgent):
    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        if self.seed == 10000 and self.updates == 5:  # the second run of seed_offset=0
            os.kill(os.getpid(), signal.SIGKILL)  # what the out-of-memory killer does


def live_workers(pool: WorkerPool) -> list[psutil.Process]:
    return alive([psutil.Process(p.pid) for p in pool.processes.values() if p.pid is not None])


def test_a_busy_worker_killed_fails_its_run_and_the_next_call_succeeds(tmp_path):
    with deadline(60):
        with pytest.raises(RunsFailedError) as info:
            OnlineTrainer(make_counting_vec(1), KillsItselfOnSecondRun, exp_dir=tmp_path / "a").multi_run(
                4, num_episodes=6, seed_offset=0, num_workers=2, progress=False
            )
    [failure] = info.value.failures
    assert failure.seed == 10000
    assert failure.exception == "WorkerDied: the worker process was killed by SIGKILL (exit code -9) during this run"
    assert [r is None for r in info.value.results] == [False, True, False, False]
    assert str(info.value).endswith(  # it said nothing of resume (tester D14)
        "\nOnce the cause is fixed, the same call with resume=True runs the failed runs again (each from its latest "
        "full checkpoint, or from its first step) and keeps the runs that ended."
    )
    assert sorted(load_every_chunk(tmp_path / "a").values())[-3:] == [6, 6, 6]
    with deadline(60):
        runs = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "b").multi_run(
            4, num_episodes=6, seed_offset=0, num_workers=2, progress=False
        )
    assert [len(run) for run in runs] == [6, 6, 6, 6]
    assert len(live_workers(shared_pool(2, "spawn", 1))) == 2  # the dead one was replaced


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_calls_after_an_idle_worker_was_killed_finish(tmp_path, start_method):
    """What the OOM killer does in a notebook between two calls, several times over."""
    rng = random.Random(7)
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    with deadline(60):
        expected = trainer.multi_run(
            4, num_episodes=4, seed_offset=3, num_workers=2, start_method=start_method, progress=False
        )
    for attempt in range(5):
        pool = shared_pool(2, start_method, 1)
        workers = live_workers(pool)
        assert len(workers) == 2
        victims = workers if attempt == 4 else [rng.choice(workers)]  # the last time both
        for victim in victims:
            victim.send_signal(signal.SIGKILL)
        assert wait_gone(victims, 5.0) == []
        with deadline(60):
            runs = trainer.multi_run(
                4, num_episodes=4, seed_offset=3, num_workers=2, start_method=start_method, progress=False
            )
        assert [[r["ep_return"] for r in run] for run in runs] == [[r["ep_return"] for r in run] for run in expected]
        assert shared_pool(2, start_method, 1) is pool  # the same pool, with the dead worker replaced
        assert not {w.pid for w in live_workers(pool)} & {v.pid for v in victims}


def test_a_killed_worker_reaped_by_someone_else_is_replaced():
    """Another library in the parent may reap children (os.wait, psutil): the pool must still see the death."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    with deadline(60):
        trainer.multi_run(2, num_episodes=2, seed_offset=0, num_workers=2, progress=False)
    pool = shared_pool(2, "spawn", 1)
    victim = pool.processes[0].pid
    os.kill(victim, signal.SIGKILL)
    os.waitpid(victim, 0)  # reaped here: multiprocessing never learns its exit code
    with deadline(60):
        runs = trainer.multi_run(4, num_episodes=2, seed_offset=0, num_workers=2, progress=False)
    assert [len(run) for run in runs] == [2, 2, 2, 2]
    assert victim not in {w.pid for w in live_workers(pool)} and len(live_workers(pool)) == 2


# ---------------------------------------------------------------- errors inside a worker's run


class DiskFullAgent(RecordingAgent):
    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        if self.updates == 7:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/data/exp/Run2_E5.txt")


class DevFullCallback(CallBack):
    """Writes its lines to /dev/full, where every write fails with ENOSPC, as on a full disk."""

    def __init__(self, flush_every: int = 3) -> None:
        self.flush_every, self.lines = flush_every, []

    def __call__(self, data, tag, step, force=False):
        self.lines.append(f"{tag} {step} {dict(data)}\n")
        if len(self.lines) >= self.flush_every:
            self.close()

    def close(self):
        if self.lines:  # the lines stay buffered until a write succeeds, as in a real writer
            with open("/dev/full", "w") as f:
                f.write("".join(self.lines))
            self.lines = []


def test_a_full_disk_in_a_worker_is_reported_as_the_disk_error(tmp_path):
    with deadline(60), pytest.raises(RunsFailedError) as info:
        OnlineTrainer(make_counting_vec(1), DiskFullAgent, exp_dir=tmp_path).multi_run(
            3, num_episodes=20, seed_offset=0, num_workers=2, progress=False
        )
    assert len(info.value.failures) == 3
    for failure in info.value.failures:
        assert failure.exception == "OSError: [Errno 28] No space left on device: '/data/exp/Run2_E5.txt'"
    assert "WorkerDied" not in str(info.value)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_write_that_hits_a_full_device_in_a_worker_is_reported(tmp_path):
    """A real ENOSPC from write(2), raised inside the run and again when the callback is closed."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = DevFullCallback()
    with deadline(60), pytest.raises(RunsFailedError) as info:
        trainer.multi_run(2, num_episodes=20, seed_offset=0, num_workers=2, progress=False)
    assert [f.exception for f in info.value.failures] == ["OSError: [Errno 28] No space left on device"] * 2
    assert "Then closing the callback raised: [Errno 28] No space left on device" in info.value.failures[0].traceback
    assert load_every_chunk(tmp_path)  # what was flushed before the error is readable


class AgentWithLock(RecordingAgent):
    def __init__(self, env=None):
        super().__init__(env)
        self.lock = threading.Lock()


def test_a_result_that_cannot_travel_is_still_reported(caplog):
    trainer = OnlineTrainer(make_counting_vec(1), AgentWithLock)
    with deadline(60), caplog.at_level(logging.WARNING, logger="online_trainer.parallel.workers"):
        runs = trainer.multi_run(2, num_episodes=3, seed_offset=0, num_workers=2, progress=False)
    assert [len(run) for run in runs] == [3, 3]  # the records came back, only the agents could not
    assert (
        "its trained agent could not be sent back from the worker (TypeError: cannot pickle '_thread.lock'"
        in caplog.text
    )


# ---------------------------------------------------------------- the on_result handler raises


class SlowAgent(RecordingAgent):
    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        time.sleep(0.002)


class WaitsForAnotherStream(SlowAgent):
    """Starts once another run of its experiment has flushed records (so that run is under way)."""

    def __init__(self, env, exp_dir):
        super().__init__(env)
        end = time.monotonic() + 30
        while not any(p.stat().st_size for p in Path(exp_dir).glob("metrics_run*.pkl")) and time.monotonic() < end:
            time.sleep(0.01)


def specs(exp_dir: Path, budgets: list[int]) -> list[RunSpec]:
    return [
        RunSpec(
            run_idx=i,
            seed=i * 10000,
            env_factory=EnvFactory(make_counting_vec(1)),
            agent_factory=AgentFactory(SlowAgent),
            options=RunPlan(num_episodes=n, records=RecordOptions(flush_every=2)),
            callback=EmptyCallBack(),
            exp_dir=str(exp_dir),
        )
        for i, n in enumerate(budgets, start=1)
    ]


class HandlerFailed(Exception):
    pass


STDIN_SCRIPT = textwrap.dedent("""
    from online_trainer import OnlineTrainer, RunsFailedError
    from tests.conftest import RecordingAgent, make_counting_vec

    if __name__ == "__main__":
        trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
        try:
            trainer.multi_run(2, num_episodes=2, seed_offset=0, num_workers=2, progress=False)
        except (RunsFailedError, RuntimeError) as error:
            print(error)
""")


def test_workers_that_cannot_import_a_script_read_from_stdin_say_so(tmp_path):
    """``python - < script.py`` with spawned workers: they cannot import '<stdin>' again, and the runs' error says
    that (not that the code should go under ``if __name__ == '__main__':``, where it already is)."""
    result = subprocess.run(
        [sys.executable, "-"],
        input=STDIN_SCRIPT,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "but it was read from '<stdin>', which they cannot read: save the script to a file" in result.stdout, (
        result.stdout + result.stderr
    )
    assert "if __name__" not in result.stdout


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_workers_of_a_parent_that_ignores_sigint_still_stop_on_the_pools_signal(tmp_path, caplog, start_method):
    """A script under nohup, or a background job of a non-interactive shell, starts with SIGINT ignored, and its
    workers inherit that. The pool still stops a busy worker's run with its stop signal, so that it flushes its
    records, instead of waiting out the grace period and terminating it with the records unflushed."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pool = WorkerPool(2, start_method, 1)

        def on_result(result):
            raise HandlerFailed(f"run {result.run_idx}")

        with deadline(60), caplog.at_level(logging.WARNING):
            with pytest.raises(HandlerFailed, match="run 2"):
                long, short = specs(tmp_path, [10**6, 2])
                waiting = AgentFactory(functools.partial(WaitsForAnotherStream, exp_dir=tmp_path))
                pool.run([long, dataclasses.replace(short, agent_factory=waiting)], NoProgress(), on_result)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert all(not p.is_alive() for p in pool.processes.values())
    assert "terminating it" not in caplog.text
    assert max(load_every_chunk(tmp_path).values()) > 2  # the long run flushed its records on the way out


class InterruptsItself(SlowAgent):
    """Sends its process SIGINT at its 5th update, as a Ctrl-C does to the terminal's whole process group."""

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)  # counts self.updates
        if self.updates == 5:
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_the_workers_of_a_parent_that_ignores_sigint_ignore_a_ctrl_c_too(tmp_path, start_method):
    """A background job of a non-interactive shell ignores SIGINT. Ctrl-C (SIGINT to the process group) reached its
    workers, which took SIGINT whatever they inherited: the runs under way failed with KeyboardInterrupt, while the
    parent went on with the next runs and ended with RunsFailedError. The workers now keep the parent's SIGINT."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    results = []
    try:
        pool = WorkerPool(2, start_method, 1)
        with deadline(60):
            runs = [
                dataclasses.replace(spec, agent_factory=AgentFactory(InterruptsItself))
                for spec in specs(tmp_path, [6, 6, 6])
            ]
            pool.run(runs, NoProgress(), results.append)
    finally:
        signal.signal(signal.SIGINT, previous)
        pool.close()
    assert sorted((r.run_idx, r.status, r.episodes) for r in results) == [
        (1, "finished", 6),
        (2, "finished", 6),
        (3, "finished", 6),
    ]


def test_a_raising_on_result_stops_every_worker_and_the_next_call_starts_fresh_ones(tmp_path, caplog):
    pool = shared_pool(2, "spawn", 1)

    def on_result(result):
        raise HandlerFailed(f"run {result.run_idx}")

    with deadline(60), caplog.at_level(logging.WARNING, logger="online_trainer.parallel.workers"):
        with pytest.raises(HandlerFailed, match="run 2"):
            long, short = specs(tmp_path, [10**6, 2])
            waiting = AgentFactory(functools.partial(WaitsForAnotherStream, exp_dir=tmp_path))
            pool.run([long, dataclasses.replace(short, agent_factory=waiting)], NoProgress(), on_result)
    assert pool.broken
    assert all(not p.is_alive() for p in pool.processes.values())
    assert "terminating it" not in caplog.text  # the busy worker stopped on SIGINT, within the grace period
    assert max(load_every_chunk(tmp_path).values()) > 2  # the long run flushed its records on the way out
    fresh = shared_pool(2, "spawn", 1)
    assert fresh is not pool
    results = []
    (tmp_path / "again").mkdir()
    with deadline(60):
        fresh.run(specs(tmp_path / "again", [2, 3]), NoProgress(), results.append)
    assert sorted((r.run_idx, r.status, r.episodes) for r in results) == [(1, "finished", 2), (2, "finished", 3)]
    with pytest.raises(RuntimeError, match="stopped"):
        pool.run(specs(tmp_path / "never", [1]), NoProgress(), results.append)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel signal on a lifeline is Linux only")
@pytest.mark.parametrize("start_method", ["spawn", "forkserver", "fork"])
def test_the_kernel_kills_a_worker_the_moment_its_lifeline_closes(tmp_path, start_method):
    """What the parent's death does to each worker's lifeline, however the worker was started."""
    pool = WorkerPool(2, start_method)
    try:
        with deadline(60):
            pool.run(specs(tmp_path, [1, 1]), NoProgress(), lambda result: None)  # both workers are up and armed
        worker = pool.workers[0]
        worker.lifeline.cut()
        worker.process.join(5)
        assert worker.process.exitcode == -signal.SIGKILL
        assert pool.workers[1].process.is_alive()
    finally:
        pool.close()


class CloseRaises(CallBack):
    """A sink whose close() raises every time: what it held was written at each run's end (end_run)."""

    def __call__(self, data, tag, step, force=False):
        pass

    def close(self):
        raise OSError("could not release the database")


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_sink_whose_close_raises_leaves_finished_runs_finished_whatever_the_workers(tmp_path, caplog, num_workers):
    """W19: with 2 workers each finished run was recorded failed (and a resume did it again from step 0); with 1 the
    runs finished, the call raised a bare OSError, and all_metrics.pkl was not written."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = CloseRaises()
    with deadline(60), caplog.at_level(logging.ERROR):
        runs = trainer.multi_run(2, num_episodes=5, seed_offset=0, num_workers=num_workers, progress=False)
    assert [len(run) for run in runs] == [5, 5] and (tmp_path / "all_metrics.pkl").is_file()
    statuses = [entry["status"] for entry in json.loads((tmp_path / "manifest.json").read_text())["runs"]]
    assert statuses == ["finished", "finished"]
    assert "close() raised after the run" in caplog.text and "could not release the database" in caplog.text
