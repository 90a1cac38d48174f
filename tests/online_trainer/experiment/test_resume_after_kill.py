"""Killed jobs (SIGKILL at any moment, SIGTERM to the job or its process group) resumed to the records and sink
points of an uninterrupted run: each job a subprocess, as a cluster runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from online_trainer import load_episodes
from online_trainer.records import storage
from online_trainer.run import full_checkpoint
from tests.online_trainer.experiment.test_resume import COLUMNS

JOB = textwrap.dedent("""
    import sys, gymnasium as gym
    from online_trainer import ExecutionOptions, OnlineTrainer, RecordOptions
    from online_trainer.agents import QLearningAgent, PPOAgent

    def env():
        return gym.make_vec("{env_id}", num_envs=2, vectorization_mode="sync")

    def agent(e):
        return {agent}(e)

    if __name__ == "__main__":
        exp, workers, resume = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
        OnlineTrainer(env, agent, exp_dir=exp).multi_run(2, total_steps={steps}, seed_offset=11,
            checkpoint_freq={every}, num_workers=workers, records=RecordOptions(flush_every=20),
            execution=ExecutionOptions(progress=False), resume=resume)
""")


def wait_for_runs(job: subprocess.Popen, streams: list[Path], timeout: float = 600) -> None:
    """Wait until the job's runs have begun (their metrics streams exist), failing if it never gets there.

    A signal sent before the job's call began killed it with the default action (exit -15, nothing printed): a
    deadline that ran out on a loaded machine sent SIGTERM anyway (an outside tester, at load 8)."""
    deadline = time.monotonic() + timeout
    while not all(path.exists() for path in streams):
        assert job.poll() is None, f"the job ended (status {job.returncode}) before its runs began"
        assert time.monotonic() < deadline, f"the job's runs did not begin within {timeout} s"
        time.sleep(0.05)


def run_job(script, exp_dir, workers, resume_flag, **popen):
    return subprocess.Popen(
        [sys.executable, str(script), str(exp_dir), str(workers), resume_flag], cwd=script.parent, **popen
    )


@pytest.mark.slow
def test_sigterm_leaves_a_resumable_checkpoint(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB.format(env_id="CartPole-v1", agent="PPOAgent", steps=10_000, every=8_000))
    job = run_job(script, tmp_path / "cut", 1, "0", stderr=subprocess.PIPE)
    wait_for_runs(job, [tmp_path / "cut" / "metrics_run1.pkl"])
    job.send_signal(signal.SIGTERM)
    _, err = job.communicate(timeout=300)
    assert job.returncode != 0 and b"Preempted" in err
    manifest = json.loads((tmp_path / "cut" / storage.MANIFEST_FILE).read_text())
    assert manifest["runs"][0]["status"] == "interrupted"
    header = full_checkpoint.read(tmp_path / "cut", 1, header_only=True)
    assert 0 < header.global_step < 8_000  # written at once (within a second: about 5k steps), not at checkpoint_freq
    assert run_job(script, tmp_path / "cut", 1, "1").wait(timeout=900) == 0
    assert run_job(script, tmp_path / "ref", 1, "0").wait(timeout=900) == 0
    assert load_episodes(tmp_path / "ref")[COLUMNS].equals(load_episodes(tmp_path / "cut")[COLUMNS])


# (workers, seed of the kill's timing): the fault suite's kill-and-resume trials
KILL_TRIALS = [(1, seed) for seed in range(8)] + [(2, seed) for seed in range(12, 16)]


@pytest.fixture(scope="module")
def kill_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("kill")
    script = root / "job.py"
    script.write_text(JOB.format(env_id="CliffWalking-v1", agent="QLearningAgent", steps=16_000, every=500))
    references = {}
    for workers in (1, 2):
        assert run_job(script, root / f"ref{workers}", workers, "0").wait(timeout=900) == 0
        references[workers] = load_episodes(root / f"ref{workers}")[COLUMNS]
    return script, references


@pytest.mark.slow
@pytest.mark.parametrize("workers,seed", KILL_TRIALS)
def test_a_run_killed_at_any_moment_resumes_to_the_uninterrupted_records(kill_job, tmp_path, workers, seed):
    """SIGKILL of the whole process group after a seeded delay past the first metrics, then resume."""
    script, references = kill_job
    job = run_job(script, tmp_path, workers, "0", start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("metrics_run*.pkl")) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(np.random.default_rng(seed).uniform(0.0, 1.0))  # the runs take about 1.5 s on an idle machine
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.wait(timeout=60)
    assert run_job(script, tmp_path, workers, "1").wait(timeout=900) == 0
    assert load_episodes(tmp_path)[COLUMNS].equals(references[workers])


SINKS_JOB = textwrap.dedent("""
    import os, signal, sys, gymnasium as gym
    from online_trainer import EvaluationOptions, ExecutionOptions, OnlineTrainer
    from online_trainer.agents import PPOAgent
    from online_trainer.callbacks import MLflowCallback, MultiCallback, WandbCallback
    from online_trainer.hooks import Hook

    class Kill(Hook):
        every_steps = 50

        def __init__(self, at):
            self.at = at

        def on_step(self, ctx):
            if ctx.run == 1 and ctx.global_step >= self.at:
                os.killpg(0, signal.SIGKILL)  # the job and W&B's service with it

    def env():
        return gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")

    def agent(e):
        return PPOAgent(e, n_steps=64)

    if __name__ == "__main__":
        exp, store, kill_at, resume = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
        trainer = OnlineTrainer(env, agent, exp_dir=exp)
        trainer.call_back = MultiCallback([MLflowCallback(tracking_uri=store, flush_values=50),
                                           WandbCallback(project="tests", mode="offline", flush_rows=20)])
        trainer.multi_run(2, total_steps=1200, seed_offset=3, checkpoint_freq=400, hooks=[Kill(kill_at)],
                          evaluation=EvaluationOptions(freq=500, episodes=2),
                          execution=ExecutionOptions(progress=False), resume=resume)
""")


def sink_points(exp_dir, store):
    """{(sink, run, metric): sorted (step, value) points} of the MLflow and W&B runs of ``exp_dir`` (wall-clock
    figures aside)."""
    import mlflow

    from tests.callbacks.test_wandb_sink import read_run

    points = {}
    client = mlflow.MlflowClient(store)
    for run in client.search_runs([client.get_experiment_by_name(exp_dir.name).experiment_id]):
        for key in run.data.metrics:
            points[("mlflow", run.info.run_name, key)] = sorted(
                (m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)
            )
    for run, run_id in json.loads((exp_dir / "wandb_runs.json").read_text()).items():
        for key, values in read_run(exp_dir, run_id)[1].items():
            points[("wandb", run, key)] = sorted(values)
    return {key: values for key, values in points.items() if key[2].split("/")[0] not in ("stats", "timing")}


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [1000])
def test_a_run_killed_resumes_to_the_mlflow_and_wandb_points_of_an_uninterrupted_one(tmp_path, kill_at):
    """SIGKILL of the job's process group (W&B's service included) after a checkpoint, with values sent after it
    and values kept in memory, then resume: every metric's points, step and value, as never cut."""
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    script = tmp_path / "job.py"
    script.write_text(SINKS_JOB)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONPATH": os.pathsep.join(sys.path)}
    run = [sys.executable, str(script)]  # run in tmp_path: MLflow puts a given store's artifacts in ./mlruns
    assert (
        subprocess.run(
            [*run, str(tmp_path / "ref"), store, "1000000", "0"], env=env, timeout=900, cwd=tmp_path
        ).returncode
        == 0
    )
    job = subprocess.run(
        [*run, str(tmp_path / "cut"), store, str(kill_at), "0"],
        env=env,
        timeout=900,
        cwd=tmp_path,
        start_new_session=True,
    )
    assert job.returncode == -signal.SIGKILL
    assert (
        subprocess.run(
            [*run, str(tmp_path / "cut"), store, "1000000", "1"], env=env, timeout=900, cwd=tmp_path
        ).returncode
        == 0
    )
    reference = sink_points(tmp_path / "ref", store)
    assert {
        ("mlflow", "run_1", "ep_return"),
        ("wandb", "1", "ep_return"),
        ("mlflow", "run_2", "agents/policy_loss"),
        ("wandb", "1", "eval/ep_return"),
    } <= set(reference)
    assert sink_points(tmp_path / "cut", store) == reference


GROUP_JOB = textwrap.dedent("""
    import sys
    import gymnasium as gym
    from online_trainer import ExecutionOptions, OnlineTrainer
    from online_trainer.agents import RandomAgent

    if __name__ == "__main__":
        exp, method, resume = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=2), RandomAgent, exp_dir=exp).multi_run(
            4, total_steps=60_000, seed_offset=3, checkpoint_freq=15_000, resume=resume,
            execution=ExecutionOptions(num_workers=2, start_method=method, progress=False))
""")


@pytest.mark.slow
@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_sigterm_to_the_process_group_interrupts_the_workers_runs(tmp_path, start_method):
    """A cluster or a user stopping the job's whole process group: with forkserver the signal reaches the forkserver
    too, whose death made every worker read as dead (exit code 255) and its run be recorded failed."""
    script = tmp_path / "job.py"
    script.write_text(GROUP_JOB)
    exp = tmp_path / "cut"
    job = subprocess.Popen(
        [sys.executable, str(script), str(exp), start_method, "0"],
        cwd=tmp_path,
        start_new_session=True,
        stderr=subprocess.PIPE,
    )
    wait_for_runs(job, [exp / f"metrics_run{i}.pkl" for i in (1, 2)])
    time.sleep(0.5)
    os.killpg(job.pid, signal.SIGTERM)
    _, err = job.communicate(timeout=120)
    assert job.returncode != 0 and b"Preempted" in err, err.decode()[-2000:]
    runs = json.loads((exp / storage.MANIFEST_FILE).read_text())["runs"]
    assert [run["status"] for run in runs] == ["interrupted", "interrupted", "pending", "pending"], runs
    resumed = subprocess.run([sys.executable, str(script), str(exp), start_method, "1"], cwd=tmp_path, timeout=600)
    assert resumed.returncode == 0
    reference = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "ref"), start_method, "0"], cwd=tmp_path, timeout=600
    )
    assert reference.returncode == 0
    assert load_episodes(tmp_path / "ref")[COLUMNS].equals(load_episodes(exp)[COLUMNS])
