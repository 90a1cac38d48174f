"""Runs in worker processes: same records as serial, failures isolated, clean Ctrl-C."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import psutil
import pytest

from online_trainer import OnlineTrainer, RunsFailedError, load_all_run_metrics, load_run_metrics, shutdown_workers
from online_trainer.callbacks import JsonlCallback
from online_trainer.hooks import Hook
from online_trainer.loop.seeding import run_seed
from online_trainer.parallel import worker_pool, workers
from online_trainer.parallel.threads import THREAD_VARIABLES
from online_trainer.parallel.workers import WorkerPool
from online_trainer.records.storage import run_indices
from tests.conftest import (
    FailsOnThirdRun,
    RecordingAgent,
    make_counting_vec,
    pool_reports,
    pool_threads,
    strip,
)


def worker_processes():
    """Live worker processes of this test process (not multiprocessing's resource tracker)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue  # exited, not yet reaped
    return found


def test_two_workers_give_the_same_records_as_one(tmp_path):
    def env():  # a local function and a lambda agent factory: both travel with cloudpickle
        return gym.make_vec("CartPole-v1", num_envs=2)

    class NotebookAgent:  # defined here, as in a notebook cell
        def __init__(self, env):
            self.space = env.action_space

        def reset(self, seed):
            self.space.seed(seed)

        def act(self, obs):
            return self.space.sample()

        def update(self, *args, **kwargs):
            pass

    serial = OnlineTrainer(env, lambda e: NotebookAgent(e), exp_dir=tmp_path / "serial").multi_run(
        4, num_episodes=15, seed_offset=2, progress=False
    )
    parallel = OnlineTrainer(env, lambda e: NotebookAgent(e), exp_dir=tmp_path / "parallel").multi_run(
        4, num_episodes=15, seed_offset=2, num_workers=2, progress=False
    )
    assert strip(serial) == strip(parallel)
    assert strip(load_all_run_metrics(tmp_path / "parallel")) == strip(serial)
    manifest = json.loads((tmp_path / "parallel" / "manifest.json").read_text())
    assert manifest["torch_threads"] == 1 and manifest["num_workers"] == 2
    assert [r["status"] for r in manifest["runs"]] == ["finished"] * 4


class ThreadCountAgent(RecordingAgent):
    def log(self):
        import torch

        return [{"threads": np.array([torch.get_num_threads()])}] * self.num_envs


@pytest.mark.slow
@pytest.mark.parametrize("torch_threads", [1, 2])
def test_workers_limit_torch_threads(torch_threads):
    runs = OnlineTrainer(make_counting_vec(1), ThreadCountAgent).multi_run(
        2, num_episodes=2, num_workers=2, torch_threads=torch_threads, progress=False
    )
    assert {int(t) for run in runs for r in run for t in r["agent_logs"]["threads"]} == {torch_threads}


POOLS_SCRIPT = textwrap.dedent("""
    import sys
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, ReportPools, make_counting_vec

    if __name__ == "__main__":
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
            2, num_episodes=2, num_workers=2, start_method=sys.argv[2], hooks=[ReportPools(sys.argv[1])],
            progress=False)
""")


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_limit_every_thread_pool_in_the_users_environment(tmp_path, start_method):
    """In a fresh process started without OMP_NUM_THREADS and the like, each worker's BLAS, OpenMP and torch
    pools have torch_threads threads, numpy's BLAS (loaded before the worker's code runs) included."""
    script = tmp_path / "pools.py"
    script.write_text(POOLS_SCRIPT)
    env = {name: value for name, value in os.environ.items() if name not in THREAD_VARIABLES}
    env["PYTHONPATH"] = os.getcwd()
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path), start_method], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert pool_threads(pool_reports(tmp_path)) == {1}


def start_method_seen(path: Path):
    """An env factory that writes the default start method of multiprocessing in its process, and what an async
    vector env made there starts its sub-envs with, into ``path``."""

    def make():
        import multiprocessing

        env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async")
        path.write_text(json.dumps([multiprocessing.get_start_method(), type(env.processes[0]).__name__]))
        return env

    return make


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_an_env_factory_in_a_worker_gets_the_parents_default_start_method(tmp_path, start_method):
    """A worker took its own start method (spawn) as multiprocessing's default: an AsyncVectorEnv made in it spawned
    each sub-env, importing everything again, and runs took 5-50 times as long as in the parent (tester A7)."""
    import multiprocessing

    shutdown_workers()
    seen = tmp_path / "seen.json"
    OnlineTrainer(start_method_seen(seen), RecordingAgent).multi_run(
        2, num_episodes=2, seed_offset=0, num_workers=2, start_method=start_method, progress=False
    )
    default = multiprocessing.get_start_method()
    assert json.loads(seen.read_text()) == [default, type(multiprocessing.get_context(default).Process()).__name__]
    shutdown_workers()


def test_unpicklable_factory_fails_before_any_run(tmp_path):
    lock = threading.Lock()

    def env_with_lock():
        assert lock
        return make_counting_vec(1)()

    with pytest.raises(TypeError, match=r"env=<function .*env_with_lock.*> cannot be sent to worker processes .*lock"):
        OnlineTrainer(env_with_lock, RecordingAgent, exp_dir=tmp_path / "e").multi_run(2, num_episodes=1, num_workers=2)
    assert not (tmp_path / "e").exists()
    # the same objects are fine in this process
    OnlineTrainer(env_with_lock, RecordingAgent).multi_run(1, num_episodes=1, progress=False)
    assert "or use num_workers=1." in str(refused(env_with_lock, "local", 2))
    # Slurm and Ray runs always travel: num_workers=1 is no way out (an outside tester followed it, in vain)
    for backend, where in (("slurm", "Slurm jobs"), ("ray", "Ray tasks")):
        message = str(refused(env_with_lock, backend, 1))
        assert f"cannot be sent to {where}" in message and "num_workers=1" not in message


class ActsOnTuples(RecordingAgent):
    def act(self, obs):
        return obs.shapes  # the mistake: an AttributeError in the user's own code, before the first step


def test_an_agent_error_before_the_first_step_in_a_worker_shows_the_users_line(tmp_path):
    """With workers the exception comes back without its traceback (A11: only the library's frames, ending in
    ``raise error.cause from None``): the worker's frames are a note of it, the user's line among them."""
    with pytest.raises(AttributeError) as raised:
        OnlineTrainer(make_counting_vec(1), ActsOnTuples, exp_dir=tmp_path / "e").multi_run(
            2, num_episodes=1, num_workers=2, progress=False
        )
    notes = "\n".join(raised.value.__notes__)
    assert "Raised in the run's worker process, Traceback (most recent call last):" in notes
    assert f'File "{__file__}"' in notes and "in act" in notes and "return obs.shapes" in notes
    assert notes.count("Raised in the run's worker process") == 1


def test_an_env_refused_for_workers_is_freed_when_the_error_is_dropped(tmp_path):
    """The refusal's error held the env in a reference cycle, which the garbage collector freed in any order: an
    AsyncVectorEnv's pipes closed before the env, whose __del__ then printed an OSError at the user's exit (O3)."""
    import gc
    import weakref

    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async")
    alive = weakref.ref(env)
    trainer = OnlineTrainer(env, RecordingAgent)
    del env
    gc.disable()
    try:
        with pytest.raises(TypeError, match="cannot be sent to worker processes"):
            trainer.multi_run(2, num_episodes=1, num_workers=2, progress=False)
        del trainer
        assert alive() is None  # freed by its count, as the user drops it: env first, then its pipes
    finally:
        gc.enable()
        if alive() is not None:
            alive().close()


def refused(env, backend, num_workers):
    """The TypeError of check_travel for ``env`` under ``backend`` (nothing is run or imported)."""
    from online_trainer.loop.factories import AgentFactory, EnvFactory
    from online_trainer.options.groups import ExecutionOptions
    from online_trainer.orchestration.planning import RunnerParts

    parts = RunnerParts(EnvFactory(env), AgentFactory(RecordingAgent), None)
    with pytest.raises(TypeError) as error:
        parts.check_travel(ExecutionOptions(backend=backend, num_workers=num_workers))
    return error.value


def nth_run(exp_dir, n):
    """The index of the ``n``-th run (from 0) of ``exp_dir``, whatever runs are numbered from."""
    return run_indices(exp_dir)[n]


@pytest.mark.parametrize("num_workers", [1, 2])
def test_one_failing_run_leaves_the_others_complete(tmp_path, num_workers):
    trainer = OnlineTrainer(make_counting_vec(1), FailsOnThirdRun, exp_dir=tmp_path)
    with pytest.raises(RunsFailedError) as info:
        trainer.multi_run(
            4, num_episodes=8, seed_offset=0, num_workers=num_workers, metrics_flush_every=1, progress=False
        )
    message = str(info.value)
    assert "1 run(s) failed" in message
    third = nth_run(tmp_path, 2)
    assert f"run {third} (seed {run_seed(0, 3)}): ValueError: diverged on purpose" in message
    assert "in update" in message  # the end of the traceback
    assert [f.run_idx for f in info.value.failures] == [third]
    results = info.value.results
    assert [len(r) if r is not None else None for r in results] == [8, 8, None, 8]
    lengths = {i: len(load_run_metrics(tmp_path, i)) for i in run_indices(tmp_path)}
    assert [n for i, n in lengths.items() if i != third] == [8, 8, 8]
    assert lengths[third] >= 1  # the episodes before the failure
    statuses = [r["status"] for r in json.loads((tmp_path / "manifest.json").read_text())["runs"]]
    assert statuses == ["finished", "finished", "failed", "finished"]


class DiesOnSecondRun(RecordingAgent):
    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        if self.seed == run_seed(0, 2) and self.updates == 5:
            os._exit(3)  # a segfault or the OOM killer, as the parent sees it


def test_a_dying_worker_fails_only_its_run(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), DiesOnSecondRun, exp_dir=tmp_path)
    with pytest.raises(RunsFailedError) as info:
        trainer.multi_run(4, num_episodes=5, seed_offset=0, num_workers=2, progress=False)
    second = nth_run(tmp_path, 1)
    assert [f.run_idx for f in info.value.failures] == [second]
    assert (
        f"run {second} (seed {run_seed(0, 2)}): WorkerDied: the worker process exited with code 3 during this run"
        in str(info.value)
    )
    assert [len(load_run_metrics(tmp_path, i)) for i in run_indices(tmp_path) if i != second] == [5, 5, 5]


def test_jsonl_from_several_workers_is_complete(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = JsonlCallback(tmp_path / "log.jsonl", flush_every=3)
    runs = trainer.multi_run(4, num_episodes=10, seed_offset=0, num_workers=2, progress=False)
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    for i, run in zip(run_indices(tmp_path), runs):
        episodes = [line for line in lines if line["tag"] == f"ep_return/run_{i}"]
        assert [line["values"]["ep_return"] for line in episodes] == [r["ep_return"] for r in run]
        updates = [line for line in lines if line["tag"] == f"agents/run_{i}"]
        assert [line["values"]["loss"] for line in updates] == list(range(1, len(updates) + 1))


def test_progress_display_in_the_parent(tmp_path, capsys, terminal):
    OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(3, num_episodes=20, num_workers=2)
    err = capsys.readouterr().err
    assert "all runs" in err and "3/3 runs ended" in err and "run 2" in err


SCRIPT = textwrap.dedent("""
    import sys, time
    import numpy as np
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    class Slow(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            time.sleep(0.002)

    if __name__ == "__main__":
        OnlineTrainer(make_counting_vec(1), Slow, exp_dir=sys.argv[1]).multi_run(
            2, num_episodes=100000, seed_offset=0, num_workers=2, metrics_flush_every=5)
""")


@pytest.mark.slow
def test_keyboard_interrupt_stops_every_worker_and_keeps_metrics(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    exp = tmp_path / "exp"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(exp)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        # a suite started in the background of a script has SIGINT ignored, and the script would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while (
        proc.poll() is None
        and time.monotonic() < deadline
        and not (len([p for p in exp.glob("metrics_run*.pkl") if p.stat().st_size]) == 2)
    ):
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1]
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 2
    proc.send_signal(signal.SIGINT)  # as a notebook interrupt: the parent only
    _, err = proc.communicate(timeout=60)  # a hang fails here
    assert "KeyboardInterrupt" in err
    assert "terminating it" not in err  # every worker stopped on SIGINT, none had to be terminated
    bars = [line for line in err.splitlines() if line.startswith("all runs:")]
    assert "2/2 runs ended, 2 interrupted" in bars[-1], err  # the bar's last state counts them
    time.sleep(0.5)
    alive = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every chunk complete: the runs flushed on their way out
        assert all(len(run) >= 5 for run in load_all_run_metrics(exp))
    statuses = [r["status"] for r in json.loads((exp / "manifest.json").read_text())["runs"]]
    assert statuses == ["interrupted", "interrupted"]


# The parent's stop takes longer than the second press's gap (its callback closes slowly): a second press after the
# call returned would hit Python's own printing of the traceback, not this library.
SCRIPT_SLOW_STOP = textwrap.dedent("""
    import sys, time
    from online_trainer import OnlineTrainer
    from online_trainer.callbacks import EmptyCallBack
    from tests.conftest import RecordingAgent, make_counting_vec

    class Slow(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            time.sleep(0.002)

    class SlowClose(EmptyCallBack):
        def close(self):
            time.sleep(0.3)

    if __name__ == "__main__":
        trainer = OnlineTrainer(make_counting_vec(1), Slow, exp_dir=sys.argv[1])
        trainer.call_back = SlowClose()
        trainer.multi_run(2, num_episodes=100000, seed_offset=0, num_workers=2, metrics_flush_every=5)
""")


@pytest.mark.slow
@pytest.mark.parametrize("gap", [0.002, 0.02])
def test_ctrl_c_pressed_twice_stops_every_worker_quietly_and_keeps_metrics(tmp_path, gap):
    """Ctrl-C reaches the terminal's whole process group, and people press it twice. A worker hit again as it left
    printed a traceback (tester T2), and the parent's second KeyboardInterrupt broke off writing the manifest."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT_SLOW_STOP)
    exp = tmp_path / "exp"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(exp)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while (
        proc.poll() is None
        and time.monotonic() < deadline
        and not all(
            (exp / f"metrics_run{i}.pkl").is_file() and (exp / f"metrics_run{i}.pkl").stat().st_size for i in (1, 2)
        )
    ):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(gap)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert err.count("Traceback") == 1 and "online_trainer-worker" not in err and "race condition" not in err, err
    assert "make the same call with resume=True" in err  # the first KeyboardInterrupt's, with its note
    statuses = [r["status"] for r in json.loads((exp / "manifest.json").read_text())["runs"]]
    assert statuses == ["interrupted", "interrupted"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every chunk complete: the runs flushed on their way out
        assert all(len(run) >= 5 for run in load_all_run_metrics(exp))


def test_workers_run_atexit_handlers_when_they_finish(tmp_path):
    """Workers skip the interpreter's slow teardown, but what agents registered with atexit still runs."""
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()

    class AtexitAgent(RecordingAgent):
        def reset(self, seed):
            super().reset(seed)
            import atexit

            atexit.register((marker_dir / f"{seed}.txt").write_text, str(os.getpid()))

    OnlineTrainer(make_counting_vec(1), AtexitAgent).multi_run(
        2, num_episodes=2, num_workers=2, seed_offset=0, progress=False
    )
    shutdown_workers()  # workers otherwise wait for the next call
    markers = {int(m.stem): int(m.read_text()) for m in marker_dir.iterdir()}
    assert sorted(markers) == [0, 10000]  # the seeds of the two runs
    assert os.getpid() not in markers.values()  # written by the workers as they ended


@pytest.mark.slow
def test_a_worker_stopped_while_it_leaves_prints_nothing(tmp_path, capfd):
    """SIGTERM to workers running their exit handlers (a notebook kernel's process group stopped while the pool
    sends its workers away) prints no "Exception ignored in atexit ... SystemExit: 143"."""
    shutdown_workers()  # new workers, whose stderr capfd captures
    marker_dir = tmp_path / "leaving"
    marker_dir.mkdir()

    class SlowExitAgent(RecordingAgent):
        def reset(self, seed):
            super().reset(seed)
            import atexit

            def slow_exit(path=marker_dir / str(os.getpid())):  # noqa: B008  (the worker's pid, read when it defines this)
                path.touch()
                time.sleep(3)  # the SIGTERM below comes meanwhile

            atexit.register(slow_exit)

    OnlineTrainer(make_counting_vec(1), SlowExitAgent).multi_run(2, num_episodes=2, num_workers=2, progress=False)
    closer = threading.Thread(target=shutdown_workers)
    closer.start()
    deadline = time.monotonic() + 60
    while not list(marker_dir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.01)
    leaving = [int(marker.name) for marker in marker_dir.iterdir()]
    assert leaving
    for pid in leaving:
        os.kill(pid, signal.SIGTERM)
    closer.join(60)
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "SystemExit" not in err, err


class PidAgent(RecordingAgent):
    def log(self):
        return [{"pid": np.array([os.getpid()])}] * self.num_envs


def worker_pids(runs):
    return {int(p) for run in runs for r in run for p in r["agent_logs"]["pid"]}


@pytest.mark.slow
def test_calls_share_warm_workers_until_shutdown():
    shutdown_workers()
    trainer = OnlineTrainer(make_counting_vec(1), PidAgent)
    first = worker_pids(trainer.multi_run(4, num_episodes=3, num_workers=2, progress=False))
    live = {p.pid for p in worker_processes()}
    assert first <= live and len(live) == 2 and os.getpid() not in first
    second = worker_pids(trainer.multi_run(4, num_episodes=3, num_workers=2, progress=False))
    assert second <= live  # the same processes: no new interpreter, no second torch import
    third = worker_pids(trainer.multi_run(2, num_episodes=3, num_workers=2, torch_threads=2, progress=False))
    assert not third & live  # other settings: a new pool
    shutdown_workers()
    assert worker_processes() == []


def test_warm_workers_outlive_a_ctrl_c_between_calls():
    """A notebook's stop button on another cell sends SIGINT to the kernel's process group: the idle warm workers
    died of it, and the next call paid their start again (an outside tester's notebook)."""
    shutdown_workers()
    trainer = OnlineTrainer(make_counting_vec(1), PidAgent)
    first = worker_pids(trainer.multi_run(2, num_episodes=3, num_workers=2, progress=False))
    for pid in first:
        os.kill(pid, signal.SIGINT)
    time.sleep(0.5)
    assert {p.pid for p in worker_processes()} == first
    assert worker_pids(trainer.multi_run(2, num_episodes=3, num_workers=2, progress=False)) == first
    shutdown_workers()


@pytest.mark.slow
def test_changed_source_restarts_the_workers(tmp_path, monkeypatch):
    """Warm workers must not run stale code: an edited module of the user's means new workers."""
    shutdown_workers()
    module = tmp_path / "my_agent_module.py"
    module.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_agent_module  # noqa: F401  (loaded by the user's session, as in a notebook)

    trainer = OnlineTrainer(make_counting_vec(1), PidAgent)
    first = worker_pids(trainer.multi_run(2, num_episodes=2, num_workers=2, progress=False))
    later = time.time() + 5
    os.utime(module, (later, later))
    second = worker_pids(trainer.multi_run(2, num_episodes=2, num_workers=2, progress=False))
    assert not first & second
    assert {p.pid for p in worker_processes()}.isdisjoint(first)  # the stale ones left
    shutdown_workers()


def test_idle_workers_leave_and_are_replaced():
    pool = WorkerPool(2, idle_timeout=0.5)
    try:
        pool.start(2)
        processes = list(pool.processes.values())
        deadline = time.monotonic() + 20
        while any(p.is_alive() for p in processes) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p.exitcode for p in processes] == [0, 0]
        pool.start(2)
        assert all(p.is_alive() for p in pool.processes.values())
    finally:
        pool.close()
    assert all(not p.is_alive() for p in pool.processes.values())


def zombie(pid: int) -> bool:
    """Whether ``pid`` exited and its parent has not collected its exit status (``<defunct>`` in ``ps``)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return False


def gone(pids: set[int], timeout: float = 20) -> bool:
    """Whether every process of ``pids`` has left and been collected within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_workers_that_left_idle_are_collected_not_left_defunct(monkeypatch):
    """They stayed <defunct> until the next call or the end of the process: a notebook's kernel showed them in ps
    for hours (tester X2)."""
    shutdown_workers()
    monkeypatch.setattr(workers, "IDLE_TIMEOUT", 0.5)
    runs = OnlineTrainer(make_counting_vec(1), PidAgent).multi_run(
        2, num_episodes=3, num_workers=2, seed_offset=0, progress=False
    )
    pids = worker_pids(runs)
    assert len(pids) == 2 and gone(pids), [zombie(pid) for pid in pids]
    pool = WorkerPool(2, idle_timeout=0.5)  # started and never given a run
    try:
        pool.start(2)
        assert gone({p.pid for p in pool.processes.values()})
    finally:
        pool.close()
    shutdown_workers()


@pytest.mark.slow
def test_a_call_after_the_workers_left_idle_starts_new_ones(monkeypatch):
    shutdown_workers()
    monkeypatch.setattr(workers, "IDLE_TIMEOUT", 0.5)
    trainer = OnlineTrainer(make_counting_vec(1), PidAgent)
    first = trainer.multi_run(2, num_episodes=3, num_workers=2, seed_offset=0, progress=False)
    deadline = time.monotonic() + 20
    while worker_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert worker_processes() == []
    second = trainer.multi_run(2, num_episodes=3, num_workers=2, seed_offset=0, progress=False)
    assert strip(second) == strip(first) and not worker_pids(first) & worker_pids(second)
    shutdown_workers()


ORPHAN_SCRIPT = textwrap.dedent("""
    import sys, time
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    if __name__ == "__main__":
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(2, num_episodes=2, num_workers=2, progress=False)
        print("done", flush=True)
        time.sleep(60)
""")


@pytest.mark.slow
def test_workers_leave_when_their_parent_is_killed(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(ORPHAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    with subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout.readline().strip() == "done"
            workers = [c for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())]
            assert len(workers) == 2  # warm, waiting for a next call
        finally:
            proc.kill()
    gone, alive = psutil.wait_procs(workers, timeout=15)
    assert alive == []


SLOW_START_SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    if __name__ == "__mp_main__":  # a worker imports the script before it installs its handlers: seconds, as torch's
        time.sleep(4)
    if __name__ == "__main__":
        threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=sys.argv[1]).multi_run(
            2, num_episodes=2, num_workers=2, progress=False)
""")


@pytest.mark.slow
def test_a_preemption_signal_before_the_workers_are_ready_is_not_reported_as_their_failure(tmp_path):
    """The signal passed on killed them before their handlers were in place, and the log said "worker 30183 was
    killed by SIGUSR1 (exit code -10) before it was ready" for a SIGTERM the user sent (O3)."""
    script = tmp_path / "script.py"
    script.write_text(SLOW_START_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "exp")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "Preempted" in done.stderr and "SIGTERM received" in done.stderr
    assert "before it was ready" not in done.stderr and "killed by" not in done.stderr, done.stderr
    runs = json.loads((tmp_path / "exp" / "manifest.json").read_text())["runs"]
    assert [run["status"] for run in runs] == ["interrupted", "interrupted"]  # sent out; none began


class LoadedModulesAgent(RecordingAgent):
    """Logs whether its worker had torch loaded when the run began."""

    def reset(self, seed):
        super().reset(seed)
        self.torch_loaded = "torch" in sys.modules

    def log(self):
        return [{"torch_loaded": np.array([self.torch_loaded])}] * self.num_envs


@pytest.mark.slow
def test_forkserver_workers_start_with_the_heavy_libraries_loaded():
    import multiprocessing.forkserver

    import torch  # noqa: F401  (the parent uses torch, so the forkserver preloads it)

    # A forkserver started by an earlier test, before this process imported torch, preloads
    # what the parent used then: start a fresh one, as a new session would.
    shutdown_workers()
    multiprocessing.forkserver._forkserver._stop()
    trainer = OnlineTrainer(make_counting_vec(2), LoadedModulesAgent)
    serial = trainer.multi_run(3, num_episodes=4, seed_offset=5, progress=False)
    forked = trainer.multi_run(
        3, num_episodes=4, seed_offset=5, num_workers=2, start_method="forkserver", progress=False
    )
    assert strip(forked) == strip(serial)
    assert all(r["agent_logs"]["torch_loaded"].all() for run in forked for r in run)
    shutdown_workers()


def test_forkserver_preloads_installed_libraries_only(tmp_path, monkeypatch):
    """The user's own modules may be edited between calls: the forkserver must not keep them."""
    module = tmp_path / "users_library.py"
    module.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import users_library  # noqa: F401

    monkeypatch.setattr(worker_pool, "FORKSERVER_PRELOAD", ("numpy", "users_library", "not_imported_here"))

    class Context:
        def set_forkserver_preload(self, names):
            self.names = names

    context = Context()
    workers.preload_forkserver(context)
    assert context.names == ["__main__", "numpy", "online_trainer.parallel.forkserver_signals"]


FORKSERVER_SIGNALS = """
import json, multiprocessing, multiprocessing.forkserver, os
from online_trainer.parallel import worker_pool

def ignored_signals(pid):
    with open(f"/proc/{pid}/status") as status:
        mask = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
    return sorted(signum for signum in range(1, 32) if mask >> (signum - 1) & 1)

if __name__ == "__main__":
    context = multiprocessing.get_context("forkserver")
    worker_pool.preload_forkserver(context)
    process = context.Process(target=os.getpid)
    process.start()
    process.join()
    print(json.dumps([ignored_signals(multiprocessing.forkserver._forkserver._forkserver_pid), ignored_signals(os.getpid())]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_forkserver_outlives_the_signals_meant_for_the_runs(tmp_path):
    """SIGTERM or SIGUSR1 to the whole process group must not kill the forkserver (its workers would read as dead);
    importing the module elsewhere changes nothing."""
    from online_trainer.parallel import forkserver_signals

    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN and not forkserver_signals.in_forkserver()
    script = tmp_path / "job.py"
    script.write_text(FORKSERVER_SIGNALS)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True)
    in_forkserver, in_caller = (set(part) for part in json.loads(out.stdout))
    assert {signal.SIGINT, signal.SIGTERM, signal.SIGUSR1} <= in_forkserver
    assert not {signal.SIGTERM, signal.SIGUSR1} & in_caller


SCALAR_ACTIONS = """
import sys
sys.path.insert(0, {root!r})
from online_trainer import OnlineTrainer
from tests.conftest import RecordingAgent, make_counting_vec

class ScalarAgent(RecordingAgent):
    def act(self, obs):
        super().act(obs)
        return 0

if __name__ == "__main__":
    try:
        OnlineTrainer(make_counting_vec(2), ScalarAgent).multi_run(2, num_episodes=50, num_workers=2, progress=False)
    except ValueError as exc:
        print("refused:", exc)
"""


@pytest.mark.slow
def test_a_run_refused_before_its_first_step_stops_the_workers_without_tracebacks(tmp_path):
    # The other worker may still be starting (importing the script again) when the refusal
    # stops the pool: it must leave quietly, not print a KeyboardInterrupt nobody pressed.
    script = tmp_path / "scalar_actions.py"
    script.write_text(SCALAR_ACTIONS.format(root=str(Path(__file__).resolve().parents[3])))
    for _ in range(3):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert "refused:" in done.stdout and "returned actions of shape ()" in done.stdout
        assert "Traceback" not in done.stderr, done.stderr


WARNS_IN_MAIN = """
import sys, warnings
sys.path.insert(0, {root!r})
from online_trainer import ExecutionOptions, OnlineTrainer
from tests.conftest import RecordingAgent, make_counting_vec

class WarningAgent(RecordingAgent):
    def reset(self, seed):
        warnings.warn("every agent says this", UserWarning)
        return super().reset(seed)

if __name__ == "__main__":
    OnlineTrainer(make_counting_vec(1), WarningAgent).multi_run(
        4, num_episodes=2, seed_offset=0,
        execution=ExecutionOptions(num_workers=2, start_method={start_method!r}, progress=False),
    )
"""


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_a_warning_of_an_agent_of_the_main_script_is_said_once_with_its_file_and_line(tmp_path, start_method):
    """V18: said twice with 2 workers, the second time from `<dynamic-code>:9`: a result sent back with
    cloudpickle's placeholder names gave the parent's class those methods, and the next runs' code lost its file."""
    script = tmp_path / "warns.py"
    script.write_text(WARNS_IN_MAIN.format(root=str(Path(__file__).resolve().parents[3]), start_method=start_method))
    env = {name: value for name, value in os.environ.items() if name != "PYTHONWARNINGS"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.endswith("UserWarning: every agent says this")]
    assert said == [f"{script}:9: UserWarning: every agent says this"], done.stderr


CLOSE_WHILE_STARTING = """
import logging, time
import torch  # what a worker imports again while it starts (a script of a torch agent): seconds
from online_trainer.parallel.workers import WorkerPool

if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    pool = WorkerPool(2, "spawn", 1)
    pool.start(2)
    started = time.monotonic()
    pool.close()
    print(f"closed in {time.monotonic() - started:.2f} s", flush=True)
    assert all(not process.is_alive() for process in pool.processes.values())
"""


def test_a_pool_closed_while_its_workers_start_ends_them_at_once(tmp_path):
    """A script whose call ran nothing (a resume of a finished experiment) waited up to 5 s at exit for workers
    still importing torch, then logged that they "did not stop within 5 s"."""
    pytest.importorskip("torch")
    script = tmp_path / "close_early.py"
    script.write_text(CLOSE_WHILE_STARTING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split()[2]) < 1.0 and "did not stop" not in done.stderr


def test_a_pool_closed_once_its_workers_are_ready_lets_them_leave(caplog):
    pool = WorkerPool(1, "spawn", 1)
    pool.start(1)
    (worker,) = pool.workers.values()
    assert worker.conn.poll(60)  # its "ready"
    pool.close()
    assert worker.ready and worker.process.exitcode == 0 and "did not stop" not in caplog.text


UNGUARDED = """
import sys
sys.path.insert(0, {root!r})
from online_trainer import OnlineTrainer, RunsFailedError
from tests.conftest import RecordingAgent, make_counting_vec

trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir={exp_dir!r})
try:
    {call}
except (RunsFailedError, RuntimeError) as exc:
    if __name__ != "__main__":  # a worker importing the script: its error must end it, as without this try
        raise
    print("failed:", type(exc).__name__, exc, *getattr(exc, "__notes__", []))
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "call",
    [
        "trainer.multi_run(2, num_episodes=3, num_workers=2, progress=False)",
        "trainer.sweep({{'lr': [0.1, 0.2]}}, 1, num_episodes=3, execution=__import__('online_trainer').ExecutionOptions("
        "num_workers=2, progress=False))",
    ],
)
def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path, call):
    """Each spawned worker imported the script again and called multi_run (or sweep) a second time: it found the
    experiment locked and died, and the parent reported failed runs, or "no configuration finished an episode"
    for a sweep, without a word of the guard (an outside tester's find)."""
    script = tmp_path / "unguarded.py"
    root = str(Path(__file__).resolve().parents[3])
    script.write_text(UNGUARDED.format(root=root, exp_dir=str(tmp_path / "exp"), call=call.format()))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    name = "sweep" if "sweep" in call else "multi_run"
    assert (
        f"{name}() was called while a worker process started: worker processes start by importing your main script "
        f"again, and it calls {name}() at its top level. Put the code that calls {name}() under "
        '`if __name__ == "__main__":`' in done.stderr
    ), done.stderr[-3000:]
    assert "failed:" in done.stdout and "`if __name__ == '__main__':`" in done.stdout, done.stdout
    assert "none has a return to rank" not in done.stdout + done.stderr
    # no run could start: the call keeps nothing, so the script with the guard added is not refused for an
    # "earlier experiment" that never ran (an outside tester's find)
    assert "failed: RuntimeError WorkerDied: every worker process exited" in done.stdout
    assert "nothing was kept on disk" in done.stdout
    assert not list((tmp_path / "exp").rglob("manifest.json"))


class LogsEverySteps(Hook):
    """Logs an INFO line from the run's process every 2 env steps, and a warning with a traceback at its end."""

    every_steps = 2

    def on_step(self, ctx):
        logging.getLogger("a_users.hook").info("run %d at step %d", ctx.run, ctx.global_step)

    def on_run_end(self, ctx):
        try:
            raise ValueError("inside")
        except ValueError:
            logging.getLogger("a_users.hook").warning("run %d ended", ctx.run, exc_info=True)
        # a value that cannot be pickled: the record goes without it
        logging.getLogger("a_users.hook").warning("run %d held a lock", ctx.run, extra={"lock": threading.Lock()})


class Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_what_runs_log_in_workers_reaches_the_parents_handlers_once(tmp_path, monkeypatch, start_method):
    """A hook's INFO lines in two workers went nowhere with spawn (a basicConfig under the main guard never runs
    there), and through the progress bars or twice with fork (an outside tester)."""
    root, kept = logging.getLogger(), Kept()
    monkeypatch.setattr(root, "handlers", [kept])
    level = root.level
    root.setLevel(logging.INFO)  # setLevel, not the attribute: loggers cache their levels
    try:
        _log_in_workers(tmp_path, kept, start_method)
    finally:
        root.setLevel(level)


def _log_in_workers(tmp_path, kept, start_method):
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, total_steps=8, seed_offset=0, num_workers=2, start_method=start_method, hooks=[LogsEverySteps()]
    )
    lines = sorted(r.getMessage() for r in kept.records if r.name == "a_users.hook" and r.levelno == logging.INFO)
    assert lines == sorted(f"run {run} at step {step}" for run in (1, 2) for step in (2, 4, 6))
    warned = [r for r in kept.records if r.levelno == logging.WARNING and r.name == "a_users.hook"]
    ended = [r for r in warned if "ended" in r.getMessage()]
    assert len(ended) == 2 and all("ValueError: inside" in r.getMessage() for r in ended)
    assert sorted(r.getMessage() for r in warned if "lock" in r.getMessage()) == [
        f"run {i} held a lock" for i in (1, 2)
    ]
    assert {r.process for r in ended} != {os.getpid()} and all(
        r.processName.startswith("online_trainer-worker") for r in ended
    )
    # the levels set here hold for what workers send: a logger silenced here stays silent
    kept.records.clear()
    logging.getLogger("a_users").setLevel(logging.ERROR)  # setLevel: the loggers' cached levels are cleared
    try:
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "b").multi_run(
            2, total_steps=8, seed_offset=0, num_workers=2, start_method=start_method, hooks=[LogsEverySteps()]
        )
    finally:
        logging.getLogger("a_users").setLevel(logging.NOTSET)
    assert not [r for r in kept.records if r.name == "a_users.hook"]


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_named_loggers_level_and_handler_hold_for_workers_once(tmp_path, monkeypatch, start_method):
    """A logger raised above a quiet root (INFO under WARNING) logged nothing from spawn workers, which knew only the
    root's level; a named logger's own handler wrote each record of fork workers twice (an outside tester)."""
    root, named, kept, own = logging.getLogger(), logging.getLogger("a_users"), Kept(), Kept()
    to_file = logging.FileHandler(tmp_path / "named.log")  # a fork's copy of it wrote to the same file
    monkeypatch.setattr(root, "handlers", [kept])
    monkeypatch.setattr(named, "handlers", [own, to_file])
    level = root.level
    root.setLevel(logging.WARNING)
    named.setLevel(logging.INFO)
    try:
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            2, total_steps=8, seed_offset=0, num_workers=2, start_method=start_method, hooks=[LogsEverySteps()]
        )
    finally:
        root.setLevel(level)
        named.setLevel(logging.NOTSET)
        to_file.close()
    expected = sorted(f"run {run} at step {step}" for run in (1, 2) for step in (2, 4, 6))
    lines = (tmp_path / "named.log").read_text().splitlines()
    assert sorted(line for line in lines if line.startswith("run ") and "at step" in line) == expected
    for handler in (own, kept):  # the logger's own handler, and the root's through propagation
        assert sorted(r.getMessage() for r in handler.records if r.levelno == logging.INFO) == expected


class WarnsAtStart(Hook):
    """Gives the Python warning a setting every run shares would give, in each run's process."""

    def on_run_start(self, ctx):
        with warnings.catch_warnings():  # not pytest's "error" filter, which fork workers inherit
            warnings.simplefilter("default")
            warnings.warn("the shared setting is odd (a tester's S17 case)", UserWarning, stacklevel=1)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_python_warning_every_worker_gives_is_said_once_in_the_call(tmp_path, monkeypatch, capfd, start_method):
    """``warnings.warn`` in the runs' processes went to each worker's stderr: a warning of a setting every run shares
    was printed once per worker (S17); it reaches the parent's handlers, once."""
    root, kept = logging.getLogger(), Kept()
    monkeypatch.setattr(root, "handlers", [kept])
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, total_steps=4, seed_offset=0, num_workers=2, start_method=start_method, hooks=[WarnsAtStart()]
    )
    said = [r.getMessage() for r in kept.records if "the shared setting is odd" in r.getMessage()]
    assert len(said) == 1 and "UserWarning" in said[0], said
    assert "the shared setting is odd" not in capfd.readouterr().err


def test_new_workers_after_the_library_itself_changed_say_to_restart(monkeypatch, caplog):
    """A notebook's kernel kept the library it imported, and a git pull changed its files: the new workers ran the
    new code, and the call failed with "AttributeError: 'AgentFactory' object has no attribute '_key'" naming
    run 1, not the cause (tester X2)."""
    import online_trainer
    from online_trainer.parallel import workers

    shutdown_workers()
    monkeypatch.setattr(online_trainer, "_imported_at", 0.0)  # every file of it changed since
    monkeypatch.setattr(workers, "_said_changed", set())
    caplog.set_level("WARNING", logger="online_trainer")
    trainer = OnlineTrainer(make_counting_vec(1), PidAgent)
    trainer.multi_run(2, num_episodes=2, num_workers=2, progress=False)
    said = [r.getMessage() for r in caplog.records if "changed after this process imported it" in r.getMessage()]
    assert len(said) == 1 and "Restart the kernel (or the interpreter)" in said[0]
    trainer.multi_run(2, num_episodes=2, num_workers=2, progress=False)  # the same workers: nothing new to say
    shutdown_workers()
    trainer.multi_run(2, num_episodes=2, num_workers=2, progress=False)
    assert len([r for r in caplog.records if "changed after this process" in r.getMessage()]) == 2  # another file
    shutdown_workers()


def test_a_preemption_signal_a_warm_worker_got_between_calls_does_not_stop_its_next_run(tmp_path):
    """A signal passed on as a run ended (or sent to an idle worker) stayed set in the warm worker: every run it took
    in the next calls stopped at its first look, as interrupted, and the call returned those cut records as if
    finished (seen as evaluations missing from one run of a later call)."""
    shutdown_workers()
    kw = dict(seed_offset=0, num_workers=2, progress=False)
    OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(2, total_steps=1_000, **kw)  # warm workers
    for process in workers._shared.processes.values():
        os.kill(process.pid, signal.SIGUSR1)
    time.sleep(0.5)
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.multi_run(2, total_steps=100_000, **kw)  # seconds a run: past its first looks at the signal
    runs = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert [(run["status"], run["global_step"]) for run in runs] == [("finished", 100_000)] * 2
    shutdown_workers()


def test_a_sink_that_cannot_travel_is_told_how_a_sink_opens_what_it_holds(tmp_path):
    """W19: a sink holding an open sqlite3 connection was told to pass a factory "(for envs: ...make_env...)", not what
    write-a-sink.md teaches (open on the first write, _unpicklable)."""
    import sqlite3

    from online_trainer.callbacks import CallBack

    class Eager(CallBack):
        def __init__(self, path):
            self.db = sqlite3.connect(path)

        def __call__(self, data, tag, step, force=False):
            pass

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.call_back = Eager(tmp_path / "db.sqlite")
    with pytest.raises(TypeError) as refused:
        trainer.multi_run(2, num_episodes=1, num_workers=2, progress=False)
    assert "trainer.call_back=" in str(refused.value) and "cannot be sent to worker processes" in str(refused.value)
    assert "list the attributes holding them in its _unpicklable (see docs/how-to/write-a-sink.md)" in str(
        refused.value
    )
    assert not (tmp_path / "exp").exists()
