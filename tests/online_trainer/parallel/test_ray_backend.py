"""The Ray backend on a local Ray instance: same records as serial, failures isolated, progress."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import cloudpickle
import pytest

from online_trainer import ExecutionOptions, OnlineTrainer, RunsFailedError, load_episodes, load_run_metrics
from online_trainer.errors import Preempted
from online_trainer.hooks import Hook
from online_trainer.parallel.ray_backend import PREEMPT_FILE
from online_trainer.records import storage
from tests.conftest import (
    FailsOnThirdRun,
    RecordingAgent,
    ReportPools,
    make_counting_vec,
    pool_reports,
    pool_threads,
    strip,
)

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # starts a local Ray cluster


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # Ray workers do not share the test's sys.path: ship the test helpers by value.
    for name in ("tests.conftest",):
        cloudpickle.register_pickle_by_value(sys.modules[name])
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    yield
    ray.shutdown()
    for name in ("tests.conftest",):
        cloudpickle.unregister_pickle_by_value(sys.modules[name])


def test_ray_gives_the_same_records_as_serial(tmp_path):
    serial = OnlineTrainer(make_counting_vec(2), RecordingAgent).multi_run(
        3, num_episodes=6, seed_offset=4, progress=False
    )
    on_ray = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        3, num_episodes=6, seed_offset=4, backend="ray", num_workers=2, ray_resources={"num_cpus": 1}, progress=False
    )
    assert strip(on_ray) == strip(serial)
    assert strip([load_run_metrics(tmp_path, i) for i in range(1, 4)]) == strip(serial)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["backend"] == "ray" and [r["status"] for r in manifest["runs"]] == ["finished"] * 3
    assert not (tmp_path / ".ray_shared_fs_check").exists()


def test_ray_isolates_a_failing_run(tmp_path):
    with pytest.raises(RunsFailedError, match=r"run 3 \(seed 20000\): ValueError: diverged on purpose") as info:
        OnlineTrainer(make_counting_vec(1), FailsOnThirdRun, exp_dir=tmp_path).multi_run(
            4, num_episodes=8, seed_offset=0, backend="ray", num_workers=2, metrics_flush_every=1, progress=False
        )
    assert [len(r) if r is not None else None for r in info.value.results] == [8, 8, None, 8]
    assert len(load_run_metrics(tmp_path, 3)) >= 1


def test_ray_progress_reaches_the_driver(capsys):
    OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(2, num_episodes=30, backend="ray", num_workers=2)
    err = capsys.readouterr().err
    assert "2/2 runs ended" in err and "60/60" in err


def test_ray_options_are_checked():
    with pytest.raises(
        ValueError, match=r"execution.backend must be one of 'local', 'ray', 'slurm', but got execution.backend='dask'"
    ):
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(1, num_episodes=1, backend="dask")
    with pytest.raises(ValueError, match=r"execution.ray_resources=\{'num_cpus': 1\} applies to backend='ray' only"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(1, num_episodes=1, ray_resources={"num_cpus": 1})
    # a cluster's address with the local backend ran the runs here without a word (an outside tester's find)
    with pytest.raises(
        ValueError,
        match=r"execution.ray_address='10.0.0.1:6379' applies to backend='ray' only.*"
        r"set backend='ray'.*execution.ray_address=null",
    ):
        ExecutionOptions(backend="local", ray_address="10.0.0.1:6379")
    # D19: a list raised dict()'s "cannot convert dictionary update sequence element #0 to a sequence"
    for bad in ([1], {1: 2}):
        with pytest.raises(ValueError) as refused:
            ExecutionOptions(backend="ray", ray_resources=bad)
        assert str(refused.value) == (
            "execution.ray_resources must be a dict of Ray task options by name, e.g. {'num_cpus': 1, 'num_gpus': "
            f"0.25}}, but got execution.ray_resources={bad!r}."
        )


def test_a_sweep_on_ray_runs_every_configuration(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    ranking = trainer.sweep(
        {"lr": [0.1, 0.5], "gamma": [0.9]},
        num_runs=2,
        num_episodes=4,
        seed_offset=0,
        backend="ray",
        num_workers=2,
        progress=False,
    )
    assert sorted(ranking["lr"]) == [0.1, 0.5] and ranking["num_runs"].tolist() == [2, 2]
    for name in ("lr=0.1,gamma=0.9", "lr=0.5,gamma=0.9"):
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert [r["status"] for r in manifest["runs"]] == ["finished", "finished"]
        assert not (tmp_path / name / ".ray_shared_fs_check").exists()


def test_ray_tasks_limit_every_thread_pool(tmp_path):
    """Ray gives a task of one CPU one OpenMP thread by default; torch_threads=2 is what every pool gets."""
    OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        2,
        num_episodes=2,
        backend="ray",
        num_workers=2,
        torch_threads=2,
        ray_resources={"num_cpus": 1},
        hooks=[ReportPools(tmp_path)],
        progress=False,
    )
    assert pool_threads(pool_reports(tmp_path)) == {2}


CANCEL_SCRIPT = textwrap.dedent("""
    import signal, sys, time
    from pathlib import Path

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup: the Ray workers started below inherit it
    import cloudpickle, ray
    import tests.conftest
    from online_trainer.callbacks import EmptyCallBack
    from online_trainer.loop.factories import AgentFactory, EnvFactory
    from online_trainer.options.groups import RecordOptions, RunPlan
    from online_trainer.parallel.ray_backend import RayExecutor
    from online_trainer.progress.display import NoProgress
    from online_trainer.run.one_run import RunSpec
    from tests.conftest import RecordingAgent, make_counting_vec

    class Slow(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            time.sleep(0.002)

    class AfterTheLongRunWrites(RecordingAgent):
        exp = ""

        def reset(self, seed):
            stream = Path(self.exp) / "metrics_run1.pkl"
            while not (stream.exists() and stream.stat().st_size):
                time.sleep(0.05)
            super().reset(seed)

    class Stop(Exception):
        pass

    raised = []

    def on_result(result):
        raised.append(time.monotonic())
        raise Stop()

    if __name__ == "__main__":
        cloudpickle.register_pickle_by_value(tests.conftest)
        ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
        AfterTheLongRunWrites.exp = sys.argv[1]
        specs = [
            RunSpec(
                run_idx=i, seed=i, env_factory=EnvFactory(make_counting_vec(1)), agent_factory=AgentFactory(agent),
                options=RunPlan(num_episodes=n, records=RecordOptions(flush_every=2)), callback=EmptyCallBack(),
                exp_dir=sys.argv[1],
            )
            for i, agent, n in ((1, Slow, 10**6), (2, AfterTheLongRunWrites, 3))
        ]
        try:
            RayExecutor(max_concurrent=2, grace=60).run(specs, NoProgress(), on_result)
        except Stop:
            print(f"STOPPED {time.monotonic() - raised[0]:.1f}")
""")


def test_a_cancel_interrupts_a_task_though_the_driver_ignores_sigint(tmp_path):
    """The driver cancels the tasks in flight when it stops (an error of its own, Ctrl-C) and a run interrupted so
    flushes its records on its way out. A driver started with SIGINT ignored (under nohup) passes SIG_IGN on to
    the Ray workers it starts, and Ray's soft cancel, a SIGINT, did nothing until the kill after the grace period."""
    script = tmp_path / "script.py"
    script.write_text(CANCEL_SCRIPT)
    (tmp_path / "exp").mkdir()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "exp")], env=env, capture_output=True, text=True, timeout=240
    )
    stopped = [line for line in done.stdout.splitlines() if line.startswith("STOPPED")]
    assert stopped, done.stdout + done.stderr
    assert float(stopped[0].split()[1]) < 30  # interrupted at once, not killed after the 60 s of grace


def test_a_misspelt_ray_resource_is_refused_naming_it_and_keeps_nothing(tmp_path):
    """R19: ray_resources={"num_cpu": 1} raised Ray's own error after the call had written its manifest, and the
    corrected call was refused: "already holds an experiment whose runs did not all end"."""
    exp_dir = tmp_path / "exp"
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir)
    kw = dict(num_episodes=2, seed_offset=0, progress=False, backend="ray")
    with pytest.raises(ValueError) as refused:
        trainer.multi_run(2, ray_resources={"num_cpu": 1}, **kw)
    message = str(refused.value)
    assert message.startswith(
        "execution.ray_resources={'num_cpu': 1} is not what Ray takes: 'num_cpu' is not an option of Ray tasks "
        "(did you mean 'num_cpus'?). Ray says: Invalid option keyword num_cpu"
    ), message
    assert not exp_dir.exists()
    assert [len(run) for run in trainer.multi_run(2, ray_resources={"num_cpus": 1}, **kw)] == [2, 2]


def test_a_task_no_node_can_hold_is_refused_before_any_run(tmp_path):
    """parallel.md's ray_resources={"num_cpus": 1, "num_gpus": 0.25} on a machine without a GPU waited forever,
    the bar at 0% and Ray's autoscaler's line the only word (an outside tester)."""
    with pytest.raises(
        ValueError,
        match=r"ray_resources=\{'num_cpus': 1, 'num_gpus': 0.25\} asks each run for "
        r"\{'CPU': 1.0, 'GPU': 0.25\}, which no node of the Ray cluster has \(its nodes: CPU=2",
    ):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "e").multi_run(
            2, num_episodes=2, backend="ray", ray_resources={"num_cpus": 1, "num_gpus": 0.25}, progress=False
        )
    assert not (tmp_path / "e").exists()


def test_a_run_a_task_finished_after_the_driver_stopped_is_not_done_again(tmp_path, monkeypatch):
    """The driver was killed; its tasks ended their runs after it, which the manifest then never recorded: the resume
    did the finished runs again from step 0, their full checkpoints removed (tester L2, 3 times of 3)."""
    from online_trainer.experiment.manifest import Experiment

    record = Experiment.on_result

    def driver_dies(self, result):  # as if the driver died as the run's result came: the manifest never hears of it
        raise KeyboardInterrupt

    monkeypatch.setattr(Experiment, "on_result", driver_dies)
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    kw = dict(num_episodes=6, seed_offset=0, backend="ray", num_workers=1, checkpoint_freq=4, progress=False)
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(2, **kw)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["runs"][0]["status"] == "interrupted"  # what the driver could record
    metrics = (tmp_path / "metrics_run1.pkl").read_bytes()
    monkeypatch.setattr(Experiment, "on_result", record)
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(2, resume=True, **kw)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [entry["status"] for entry in manifest["runs"]] == ["finished", "finished"]
    assert manifest["runs"][0]["episodes"] == 6 and "resumed_from" not in manifest["runs"][0]
    assert (tmp_path / "metrics_run1.pkl").read_bytes() == metrics  # run 1 was not done again
    assert [len(run) for run in runs] == [6, 6]


def test_a_relative_exp_dir_is_the_drivers_though_ray_workers_run_elsewhere(tmp_path, monkeypatch):
    """Workers of a cluster started with ``ray start`` run in a directory of Ray's: every run of a relative exp_dir
    failed with "is not the driver's directory" on the machine the driver ran on (an outside tester's find). Here
    the driver moves after the workers started, which puts them in another directory too."""
    monkeypatch.chdir(tmp_path)
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir="runs/rel").multi_run(
        2, num_episodes=4, seed_offset=0, backend="ray", num_workers=2, progress=False
    )
    manifest = json.loads((tmp_path / "runs" / "rel" / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished", "finished"]
    assert [len(load_run_metrics(tmp_path / "runs" / "rel", i)) for i in (1, 2)] == [4, 4]
    assert list((tmp_path / "runs" / "rel").glob("events.out.tfevents.*"))  # the sink's relative log_dir too
    # and how each run ended, which a resume after the driver died reads (the task wrote it after leaving the
    # driver's directory: "could not write runs/rel/slurm/result_run1.pkl", tester V9)
    assert sorted(p.name for p in (tmp_path / "runs" / "rel" / "slurm").iterdir()) == [
        "result_run1.pkl",
        "result_run2.pkl",
    ]


NO_CLUSTER = """
import socket, sys
from online_trainer import ExecutionOptions, OnlineTrainer
from tests.conftest import RecordingAgent, make_counting_vec

if __name__ == "__main__":
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=sys.argv[1]).multi_run(
        2, num_episodes=4, seed_offset=0,
        execution=ExecutionOptions(backend="ray", ray_address=f"127.0.0.1:{port}", progress=False),
    )
"""


def test_a_ray_cluster_that_does_not_answer_is_named_at_once_and_nothing_is_kept(tmp_path):
    """ray.init retried a dead address for minutes in log lines of its own, and the sweep's directories were left
    behind with every run pending (an outside tester's find)."""
    script = tmp_path / "no_cluster.py"
    script.write_text(NO_CLUSTER)
    exp = tmp_path / "exp"
    done = subprocess.run(
        [sys.executable, str(script), str(exp)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 1
    assert "ConnectionError: could not connect to Ray at 127.0.0.1:" in done.stderr
    assert "nothing answers at 127.0.0.1:" in done.stderr and "Nothing was run." in done.stderr
    assert not exp.exists()


class SlowRecordingAgent(RecordingAgent):
    """A RecordingAgent (it saves and loads) taking 0.1 ms an update: a run lasts seconds, past a preemption."""

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        time.sleep(0.0001)


class SignalsDriverAtEpisode(Hook):
    """Sends ``signum`` to the driver at episode 30 of run 1 (the task runs in a Ray worker of this machine)."""

    def __init__(self, driver: int, signum: int):
        self.driver, self.signum = driver, signum

    def on_episode_end(self, ctx, record):
        if ctx.run == 1 and ctx.episodes == 30:
            os.kill(self.driver, self.signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1])
def test_a_preemption_signal_to_the_driver_checkpoints_every_task_and_the_resume_gives_the_uninterrupted_records(
    tmp_path, signum
):
    """R19: SIGTERM to a Ray driver ended it in Ray's own handler (a C++ stack dump, exit 1 or SIGABRT), and SIGUSR1
    by its default action: no run checkpointed, and their work since the last periodic checkpoint was lost."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        kw = dict(total_steps=20_000, seed_offset=3, progress=False, backend="ray", num_workers=2)
        trainer = OnlineTrainer(make_counting_vec(1), SlowRecordingAgent, exp_dir=tmp_path / "cut")
        with pytest.raises(Preempted) as stopped:
            trainer.multi_run(2, hooks=[SignalsDriverAtEpisode(os.getpid(), signum)], **kw)
        assert stopped.value.checkpointed and "continue with the same call and resume=True" in str(stopped.value)
        runs = json.loads((tmp_path / "cut" / "manifest.json").read_text())["runs"]
        assert [run["status"] for run in runs] == ["interrupted", "interrupted"]
        assert all(0 < run["global_step"] < 20_000 for run in runs), runs
        assert all(storage.resume_path(tmp_path / "cut", i).is_file() for i in (1, 2))
        assert not (tmp_path / "cut" / PREEMPT_FILE).exists()
        trainer.multi_run(2, resume=True, **kw)
        OnlineTrainer(make_counting_vec(1), SlowRecordingAgent, exp_dir=tmp_path / "ref").multi_run(2, **kw)
        columns = ["run", "episode_index", "global_step", "ep_return", "ep_length"]
        assert load_episodes(tmp_path / "ref")[columns].equals(load_episodes(tmp_path / "cut")[columns])
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_an_address_other_than_the_connected_clusters_is_refused_and_nothing_is_kept(tmp_path):
    """R23: with Ray initialised in the process (a notebook's ray.init), ray_address was ignored without a word and
    the runs went to the connected cluster."""
    exp = tmp_path / "exp"
    with pytest.raises(ValueError, match=r"execution.ray_address='127.0.0.1:1', but this process is connected to"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp).multi_run(
            2, num_episodes=4, seed_offset=0,
            execution=ExecutionOptions(backend="ray", ray_address="127.0.0.1:1", progress=False),
        )  # fmt: skip
    assert not exp.exists()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"ray_resources": {"num_cpus": "one"}}, r"ray_resources\['num_cpus'\] must be a non-negative number, but got"),
        (
            {"ray_resources": {"resources": {"tpu": -1}}},
            r"ray_resources\['resources'\]\['tpu'\] must be a non-negative",
        ),
        (
            {"ray_address": 6379},
            r"ray_address must be a Ray address such as 'auto', .* but got execution.ray_address=6379",
        ),
        ({"ray_address": ""}, r"but got execution.ray_address=''"),
    ],
)
def test_ray_options_of_the_wrong_kind_are_refused_when_made(given, said):
    """R23: {'num_cpus': 'one'} failed in the first run, leaving a manifest that refused the corrected call; 6379 and
    "" reached Ray."""
    with pytest.raises(ValueError, match=said):
        ExecutionOptions(backend="ray", **given)
