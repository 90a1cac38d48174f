"""The Slurm backend against a real Slurm cluster (``.ci/slurm-up.sh`` starts a one-node one as root).

Skipped, with the reason, where ``sinfo`` is missing or the cluster does not answer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import gymnasium as gym
import pytest

from online_trainer import (
    ExecutionOptions,
    OnlineTrainer,
    RunsFailedError,
    SlurmOptions,
    SlurmRuns,
    load_episodes,
    load_run_metrics,
)
from online_trainer.agents import QLearningAgent
from online_trainer.hooks import Hook
from online_trainer.progress import display
from online_trainer.run import full_checkpoint
from tests.conftest import FailsOnThirdRun, RecordingAgent, SamplingAgent, make_counting_vec, strip

pytest.importorskip("submitit")


def _cluster_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return "sinfo is missing: no Slurm here (as root, .ci/slurm-up.sh starts a one-node cluster)"
    try:
        done = subprocess.run(["sinfo", "-h", "-o", "%a %t"], capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "the Slurm cluster does not answer (sinfo timed out)"
    usable = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("up") and line.split()[1].rstrip("*") in ("idle", "mix", "alloc")
    ]
    if done.returncode != 0 or not usable:
        return f"the Slurm cluster is down (sinfo: {(done.stderr or done.stdout).strip() or 'no node up'})"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_cluster_problem() is not None, reason=str(_cluster_problem()))]
COLUMNS = ["run", "seed", "episode_index", "ep_return", "ep_length", "global_step"]


@pytest.fixture(scope="module", autouse=True)
def by_value():
    # Jobs import by name what travels by reference: ship the test helpers by value.
    modules = [sys.modules["tests.conftest"], sys.modules[__name__]]
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    yield
    for module in modules:
        cloudpickle.unregister_pickle_by_value(module)


class JobIdHook(Hook):
    """Writes the ``SLURM_JOB_ID`` its run sees into the experiment directory."""

    def on_run_start(self, ctx):
        Path(ctx.exp_dir, f"job_of_run{ctx.run}").write_text(os.environ.get("SLURM_JOB_ID", "none"))


def cliff():
    return gym.make_vec("CliffWalking-v1", num_envs=2, vectorization_mode="sync")


def slurm(workers: int = 2, **options) -> ExecutionOptions:
    return ExecutionOptions(
        backend="slurm", num_workers=workers, progress=False, slurm=SlurmOptions(poll_interval=1.0, **options)
    )


def wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.2)


def test_records_on_slurm_equal_a_local_run_and_each_run_ran_in_a_job(tmp_path):
    local = OnlineTrainer(make_counting_vec(2), RecordingAgent).multi_run(
        3, num_episodes=6, seed_offset=4, progress=False
    )
    on_slurm = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        3, num_episodes=6, seed_offset=4, execution=slurm(), hooks=[JobIdHook()]
    )
    assert strip(on_slurm) == strip(local)
    assert strip([load_run_metrics(tmp_path, run) for run in (1, 2, 3)]) == strip(local)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["backend"] == "slurm" and [r["status"] for r in manifest["runs"]] == ["finished"] * 3
    jobs = [(tmp_path / f"job_of_run{run}").read_text() for run in (1, 2, 3)]
    assert all(job.isdigit() for job in jobs) and len(set(jobs)) == 3  # a job each
    assert all(entry["slurm_job"] for entry in manifest["runs"])


STEPS = 60_000


def tensorboard_returns(exp_dir: Path) -> list[tuple[int, float]]:
    """The ``ep_return/run_1`` points of the experiment's TensorBoard files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = []
    for path in sorted(exp_dir.glob("events.out.tfevents.*")):
        events = EventAccumulator(str(path), size_guidance={"scalars": 0})
        events.Reload()
        if "ep_return/run_1" in events.Tags()["scalars"]:
            points += [(event.step, event.value) for event in events.Scalars("ep_return/run_1")]
    return sorted(points)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The records and TensorBoard returns of one uninterrupted run of the requeue trials, run here."""
    exp_dir = tmp_path_factory.mktemp("uninterrupted")
    trainer = OnlineTrainer(cliff, QLearningAgent, exp_dir=exp_dir)
    trainer.multi_run(1, total_steps=STEPS, seed_offset=11, progress=False)
    return load_episodes(exp_dir)[COLUMNS], tensorboard_returns(exp_dir)


@pytest.mark.parametrize(
    "interrupt", [["scontrol", "requeue"], ["scancel", "--signal=USR2"]], ids=["requeue", "time-limit-signal"]
)
def test_a_requeued_job_continues_its_run_to_the_records_of_an_uninterrupted_one(
    tmp_path, uninterrupted, interrupt, monkeypatch, capsys
):
    """``scontrol requeue`` (SIGTERM, Slurm requeues), or the signal before a time limit (the job requeues itself)."""
    handle = OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(
        1, total_steps=STEPS, seed_offset=11, execution=slurm(1, wait=False)
    )
    assert isinstance(handle, SlurmRuns) and not handle.done()
    job = handle.job_ids[0]
    wait_for(tmp_path / "metrics_run1.pkl")
    subprocess.run([*interrupt, job], check=True)
    monkeypatch.setattr(display, "_terminal", lambda: False)  # the display's lines, as a log keeps them
    assert handle.wait(progress=True, poll_interval=1.0) is not None
    # while the job waited in the queue its run was not counted as running (an outside tester's find)
    drawn = capsys.readouterr().err.splitlines()
    assert any("0/1 runs ended, 1 requeued" in line for line in drawn), drawn
    assert f"{STEPS}/{STEPS}" in drawn[-1] and "1/1 runs ended" in drawn[-1]
    log = (tmp_path / "slurm" / f"{job}_0_log.err").read_text()
    assert "Slurm restarted this job: run 1 continues from its checkpoint at step" in log
    records, returns = uninterrupted
    assert load_episodes(tmp_path)[COLUMNS].equals(records)
    assert tensorboard_returns(tmp_path) == returns  # the sink too: no gap, no duplicate
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["runs"][0]["status"] == "finished" and (tmp_path / "all_metrics.pkl").is_file()
    # where it continued, as resume=True records it (only the job's log said so; an outside tester's find)
    resumed = manifest["runs"][0]["resumed_from"]
    assert 0 < resumed["global_step"] < STEPS and f"checkpoint at step {resumed['global_step']}" in log
    assert resumed["env_restored"] in (True, False) and resumed["episodes"] >= 0


def test_a_job_requeued_more_than_max_requeues_fails_its_run_and_keeps_its_checkpoint(tmp_path):
    handle = OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(
        1, total_steps=STEPS, seed_offset=11, execution=slurm(1, wait=False, max_requeues=0)
    )
    job = handle.job_ids[0]
    wait_for(tmp_path / "metrics_run1.pkl")
    subprocess.run(["scontrol", "requeue", job], check=True)
    with pytest.raises(RunsFailedError) as caught:
        handle.wait(progress=False)
    (failure,) = caught.value.failures
    assert (
        f"RequeueLimit: Slurm job {job} was requeued 1 time, more than max_requeues=0, so run 1 (seed 11)"
        in failure.exception
    )
    assert (tmp_path / "Run1_Resume.pkl").is_file()


def test_a_run_that_raises_in_a_job_is_named_with_its_job_and_its_log_holds_the_traceback(tmp_path):
    """The failure named the run and its error only, and the job's log held one line, no traceback (Y2)."""
    with pytest.raises(RunsFailedError) as caught:
        OnlineTrainer(make_counting_vec(1), FailsOnThirdRun, exp_dir=tmp_path).multi_run(
            3, num_episodes=8, seed_offset=0, execution=slurm()
        )
    (failure,) = caught.value.failures
    job = json.loads((tmp_path / "manifest.json").read_text())["runs"][2]["slurm_job"]
    log = tmp_path / "slurm" / f"{job}_0_log.err"
    assert failure.run_idx == 3 and failure.exception.startswith("ValueError: diverged on purpose")
    assert failure.exception.endswith(f" (in Slurm job {job}; its log: {log})")
    assert "Traceback (most recent call last)" in log.read_text() and "diverged on purpose" in log.read_text()


def test_a_run_that_cannot_checkpoint_fails_at_the_time_limit_signal_rather_than_requeue_to_step_0(tmp_path):
    """An agent without save() and load() cannot write a full checkpoint: requeued, its run would start again from
    step 0 and meet the same time limit, max_requeues times."""
    handle = OnlineTrainer(cliff, SamplingAgent, exp_dir=tmp_path).multi_run(
        1, total_steps=3_000_000, seed_offset=11, execution=slurm(1, wait=False)
    )
    job = handle.job_ids[0]
    wait_for(tmp_path / "metrics_run1.pkl")
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    with pytest.raises(RunsFailedError) as caught:
        handle.wait(progress=False)
    (failure,) = caught.value.failures
    assert f"TimeLimit: run 1 (seed 11) reached the time limit of Slurm job {job} at step" in failure.exception
    assert "without a full checkpoint (its agent, SamplingAgent, has no save() and load())" in failure.exception
    run = json.loads((tmp_path / "manifest.json").read_text())["runs"][0]
    assert run["status"] == "failed" and 0 < run["global_step"] < 3_000_000
    assert "requeueing" not in (tmp_path / "slurm" / f"{job}_0_log.err").read_text()


def test_a_cancelled_job_is_reported_by_seed_job_and_log_the_others_finish_and_resume_submits_it_alone(tmp_path):
    handle = OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(
        3, total_steps=STEPS, seed_offset=0, execution=slurm(2, wait=False)
    )
    job = handle.job_ids[0]
    wait_for(tmp_path / "metrics_run1.pkl")
    subprocess.run(["scancel", job], check=True)
    with pytest.raises(RunsFailedError) as caught:
        handle.wait(progress=False)
    (failure,) = caught.value.failures
    assert (failure.run_idx, failure.seed) == (1, 0)
    assert f"run 1 (seed 0) has no result, and its Slurm job {job} ended CANCELLED; its log: " in failure.exception
    assert failure.exception.endswith(f"{job}_0_log.err") and f"{job}_0_log.err" in str(caught.value)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["failed", "finished", "finished"]
    # its counts are what its records and checkpoint show, not 0 (an outside tester's find)
    progress = full_checkpoint.run_progress(tmp_path, 1)
    assert manifest["runs"][0]["global_step"] == progress["global_step"] > 0
    assert manifest["runs"][0]["episodes"] == progress["episodes"] > 0
    # resume=True submits only the cancelled run, which continues from the checkpoint it wrote on SIGTERM
    OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(
        3, total_steps=STEPS, seed_offset=0, execution=slurm(2), resume=True
    )
    resumed = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["status"] for r in resumed["runs"]] == ["finished"] * 3
    assert resumed["runs"][0]["slurm_job"] != job and resumed["runs"][1:] == manifest["runs"][1:]
    reference = OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path / "ref")
    reference.multi_run(1, total_steps=STEPS, seed_offset=0, progress=False)
    run1 = load_episodes(tmp_path).query("run == 1")[COLUMNS].reset_index(drop=True)
    assert run1.equals(load_episodes(tmp_path / "ref")[COLUMNS])


class RejectsHyperparameters(RecordingAgent):
    def __init__(self, env=None):
        raise ValueError("lr=-1 must be positive")


def test_a_setup_error_in_a_job_stops_every_run_with_that_error_and_leaves_nothing(tmp_path):
    exp = tmp_path / "exp"
    with pytest.raises(ValueError, match=r"^lr=-1 must be positive") as info:
        OnlineTrainer(make_counting_vec(1), RejectsHyperparameters, exp_dir=exp).multi_run(
            3, num_episodes=50, seed_offset=0, execution=slurm(2)
        )
    assert "before its first env step" in "".join(getattr(info.value, "__notes__", []))
    assert not exp.exists()  # the corrected call finds nothing in its way


def test_fifty_tiny_runs_complete_on_slurm(tmp_path):
    local = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "local").multi_run(
        50, num_episodes=2, seed_offset=0, num_workers=2, progress=False
    )
    on_slurm = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "slurm").multi_run(
        50, num_episodes=2, seed_offset=0, execution=slurm(2, runs_per_job=5)
    )
    assert strip(on_slurm) == strip(local)
    manifest = json.loads((tmp_path / "slurm" / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished"] * 50
    assert len({r["slurm_job"] for r in manifest["runs"]}) == 10  # five runs a job


SIBLING = '''
import numpy as np


class SiblingAgent:
    """An agent in a module beside the user's script: imported by name, not shipped by value."""

    def __init__(self, env):
        self.num_envs = env.num_envs

    def act(self, obs):
        return np.zeros(self.num_envs, dtype=np.int64)

    def update(self, next_obs, reward, terminated, truncated, call_back=None):
        pass
'''


def test_a_job_imports_what_the_submitting_process_can_import(tmp_path, monkeypatch):
    """A module beside the user's script is on the submitting process's sys.path only; spawned workers get that
    path, and so do Slurm jobs (they failed with ModuleNotFoundError)."""
    code = tmp_path / "user_code"
    code.mkdir()
    (code / "sibling_agent_module.py").write_text(SIBLING)
    monkeypatch.syspath_prepend(str(code))
    import sibling_agent_module

    on_slurm = OnlineTrainer(make_counting_vec(1), sibling_agent_module.SiblingAgent, exp_dir=tmp_path / "exp")
    runs = on_slurm.multi_run(2, num_episodes=3, seed_offset=0, execution=slurm())
    assert [len(run) for run in runs] == [3, 3]
    del sys.modules["sibling_agent_module"]


def test_overwrite_and_resume_are_refused_while_the_experiments_jobs_run(tmp_path):
    """overwrite=True used to set the experiment aside while its jobs went on writing checkpoints and results
    into the new one; resume=True was refused."""
    handle = OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(
        1, total_steps=2 * STEPS, seed_offset=11, execution=slurm(1, wait=False)
    )
    job = handle.job_ids[0]
    wait_for(tmp_path / "metrics_run1.pkl")
    try:
        # a plain call was refused as for an earlier experiment, advising overwrite=True, which is refused too
        asked = {"overwrite": "overwrite=True", "resume": "resume=True", "plain": "A new experiment in this exp_dir"}
        for call in ({"overwrite": True}, {"resume": True}, {}):
            with pytest.raises(
                RuntimeError,
                match=rf"{asked[next(iter(call), 'plain')]}, but .* has runs still in Slurm jobs: "
                rf"run 1 in job {job} \((RUNNING|PENDING)\)",
            ):
                OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(
                    1, total_steps=1000, seed_offset=11, progress=False, **call
                )
            manifest = json.loads((tmp_path / "manifest.json").read_text())
            assert manifest["seed_offset"] == 11 and manifest["runs"][0]["slurm_job"] == job  # not set aside
    finally:
        subprocess.run(["scancel", job], check=True)
        with pytest.raises(RunsFailedError):
            handle.wait(progress=False)


def test_readers_report_runs_of_cancelled_jobs_as_interrupted_or_pending_once_the_jobs_have_ended(tmp_path, caplog):
    """With the submitting process gone (wait=False, no wait()), a cancelled job's run stayed "running" for show and
    load_episodes forever: the job writes a checkpoint on SIGTERM but no result (a requeue looks the same). A run
    whose job never left the queue was "running" too, and then "interrupted", with a checkpoint it never wrote."""
    from online_trainer import load_runs
    from online_trainer.experiment.slurm_states import LIVE, job_states

    handle = OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(  # long: cancelled before the end
        3, total_steps=40 * STEPS, seed_offset=11, execution=slurm(2, wait=False)
    )
    jobs = handle.job_ids
    wait_for(tmp_path / "metrics_run1.pkl")
    wait_for(tmp_path / "metrics_run2.pkl")
    assert load_runs(tmp_path)["status"].tolist() == ["running", "running", "pending"]  # two at once: one queued
    subprocess.run(["scancel", jobs[0].split("_")[0]], check=True)  # the whole array
    deadline = time.monotonic() + 300
    while any(state in LIVE for state in (job_states(jobs) or {}).values()):
        assert time.monotonic() < deadline, "the cancelled jobs did not end"
        time.sleep(1)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["running"] * 3  # on disk, as the jobs left it
    assert load_runs(tmp_path)["status"].tolist() == ["interrupted", "interrupted", "pending"]  # as readers say
    assert (
        f"Slurm job {jobs[0]} (cancelled), Slurm job {jobs[1]} (cancelled) ended before recording how run(s) "
        in caplog.text
    )
    assert f"Slurm job {jobs[2]} (cancelled) ended before run(s) 3 started in them" in caplog.text
    # resume=True continues such runs: test_a_cancelled_job_is_reported_by_seed_job_and_log_... shows it


SUBMIT_AND_LEAVE = """\
env:
  id: Corridor-v0
  num_envs: 2
agent:
  name: q_learning
num_runs: 1
total_steps: 3000000
seed_offset: 0
callback: empty
execution:
  backend: slurm
  slurm:
    wait: false
    poll_interval: 1.0
"""


def test_the_command_says_which_jobs_it_submitted_when_it_runs_and_when_it_resumes(tmp_path, capsys):
    """online-trainer resume with execution.slurm.wait=false printed a table of runs "left out" instead."""
    from online_trainer.cli import main as cli
    from online_trainer.experiment.slurm_states import LIVE, job_states

    config = tmp_path / "leave.yaml"
    config.write_text(SUBMIT_AND_LEAVE)
    exp_dir = tmp_path / "exp"
    assert cli.main(["run", str(config), f"exp_dir={exp_dir}", "--no-progress"]) == 0
    (job,) = SlurmRuns.of(exp_dir).job_ids
    out = capsys.readouterr().out
    assert f"Submitted 1 run as Slurm job {job}. See how they stand with: online-trainer show {exp_dir}" in out
    assert f"Wait for them with: online-trainer wait {exp_dir}" in out
    wait_for(exp_dir / "metrics_run1.pkl")
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 2  # its job runs: refused in one line
    err = capsys.readouterr().err
    assert f"resume=True, but {str(exp_dir)!r} has runs still in Slurm jobs: run 1 in job {job}" in err
    assert "Traceback" not in err
    subprocess.run(["scancel", job], check=True)
    deadline = time.monotonic() + 300
    while (job_states([job]) or {}).get(job) in LIVE:
        assert time.monotonic() < deadline, "the cancelled job did not end"
        time.sleep(1)
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 0
    (again,) = SlurmRuns.of(exp_dir).job_ids
    out = capsys.readouterr().out
    assert again != job and f"Submitted 1 run as Slurm job {again}" in out and "left out" not in out
    subprocess.run(["scancel", again], check=True)


class FailsInItsSecondRun(QLearningAgent):
    """Fails at its 100th update in the run of seed 10000 (run 2 of seed_offset=0)."""

    def reset(self, seed):
        super().reset(seed)
        self.failing, self.updates = seed == 10_000, 0

    def update(self, *args, **kwargs):
        self.updates += 1
        if self.failing and self.updates == 100:
            raise RuntimeError("the agent's update failed")
        return super().update(*args, **kwargs)


def test_the_wait_command_follows_jobs_a_process_left_to_the_end_and_prints_the_table(tmp_path, capsys):
    """There was no command to wait for runs submitted with wait=False, only SlurmRuns.of(exp_dir).wait()."""
    from online_trainer.cli import main as cli

    handle = OnlineTrainer(cliff, FailsInItsSecondRun, exp_dir=tmp_path).multi_run(
        2, total_steps=STEPS, seed_offset=0, execution=slurm(2, wait=False)
    )
    jobs = ", ".join(dict.fromkeys(handle.job_ids))
    # at once: the jobs have not started, and the manifest has only the call's budget (no bars were shown then)
    assert cli.main(["wait", str(tmp_path), "--poll", "1"]) == 1  # a run failed
    captured = capsys.readouterr()
    assert f"Waiting for the Slurm jobs of {tmp_path}: {jobs}" in captured.out
    # the final state: which run ends first depends on when each job starts
    assert f"all runs:   0%|          | 0/{2 * STEPS}" in captured.err and "2/2 runs ended, 1 failed" in captured.err
    assert "1 run(s) failed" in captured.err and "RuntimeError: the agent's update failed" in captured.err
    assert "Final return of each run" in captured.out and "failed" in captured.out
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished", "failed"]
    # every job has ended: nothing to follow, and the status still says a run failed
    assert cli.main(["wait", str(tmp_path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "Waiting" not in captured.out and "1 run(s) failed" in captured.err


def test_a_job_sbatch_refuses_stops_the_call_before_anything_is_kept(tmp_path, capsys):
    """A partition the cluster lacks failed with submitit's traceback after the experiment was written; the same
    call with the right partition was then refused as an existing experiment (an outside tester's find)."""
    from online_trainer import SlurmSubmissionError
    from online_trainer.cli.main import main

    exp = tmp_path / "exp"
    with pytest.raises(SlurmSubmissionError) as refused:
        OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp).multi_run(
            2, num_episodes=4, seed_offset=0, execution=slurm(partition="nosuchpart")
        )
    assert str(refused.value).startswith(
        "Slurm refused the jobs (sbatch: error: invalid partition specified: nosuchpart;"
    )
    assert str(refused.value).endswith("Nothing was submitted.")
    assert not exp.exists()
    # sbatch's own line is in the refusal, not also printed bare before it (an outside tester)
    assert "invalid partition" not in capsys.readouterr().err
    # with the progress display on, a refused call draws no bars (it drew "all runs: 0/..." first: tester S7)
    with pytest.raises(SlurmSubmissionError):
        OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp).multi_run(
            2,
            num_episodes=4,
            seed_offset=0,
            execution=ExecutionOptions(backend="slurm", num_workers=2, slurm=SlurmOptions(partition="nosuchpart")),
        )
    assert "all runs" not in capsys.readouterr().err
    config = tmp_path / "config.yaml"
    config.write_text(
        "env: {id: CliffWalking-v1, num_envs: 1}\nagent: {name: q_learning}\ntotal_steps: 200\nnum_runs: 1\n"
        f"exp_dir: {tmp_path / 'cmd'}\nexecution: {{backend: slurm, slurm: {{partition: nosuchpart}}}}\n"
    )
    assert main(["run", "--no-progress", str(config)]) == 2
    err = capsys.readouterr().err
    assert "online-trainer: error: Slurm refused the jobs (sbatch: error: invalid" in err
    assert err.count("invalid partition specified") == 1
    assert not (tmp_path / "cmd").exists()
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp).multi_run(
        2, num_episodes=4, seed_offset=0, execution=slurm()
    )  # the corrected call finds nothing in its way


@contextlib.contextmanager
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt in this process while the block runs (a pytest-xdist worker ignores it)."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_ctrl_c_leaves_a_run_whose_job_never_started_pending(tmp_path, caplog):
    """The manifest called interrupted a run whose job was still queued when Ctrl-C cancelled it (an outside tester's
    find): readers and the docs call such a run pending."""
    import signal
    import threading

    def interrupt_once_run_1_writes():
        wait_for(tmp_path / "metrics_run1.pkl")
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_run_1_writes, daemon=True).start()
    with ctrl_c_raises(), pytest.raises(KeyboardInterrupt) as cut:  # one job at a time: run 2's queues behind run 1's
        OnlineTrainer(cliff, QLearningAgent, exp_dir=tmp_path).multi_run(
            2, total_steps=STEPS, seed_offset=0, execution=slurm(1)
        )
    assert "make the same call with resume=True" in cut.value.__notes__[-1]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["interrupted", "pending"]
    assert manifest["runs"][0]["global_step"] > 0 and manifest["runs"][1]["global_step"] is None
    assert "slurm_job" in manifest["runs"][0] and "slurm_job" not in manifest["runs"][1]  # its job was cancelled
    # waiting afterwards: neither is failed ("?", and run 2's cancelled job "GONE"); both are named, with the resume
    from online_trainer.cli import main as cli

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cli.main(["wait", str(tmp_path), "--no-progress"]) == 1
    assert "failed" not in caplog.text and "GONE" not in caplog.text
    assert (
        f"{tmp_path}: runs 1, 2 did not finish and no Slurm job holds them (interrupted, or never started: the jobs "
        "were cancelled). Continue with: the call that made it again, with resume=True"
    ) in caplog.text
    assert [r["status"] for r in json.loads((tmp_path / "manifest.json").read_text())["runs"]] == [
        "interrupted",
        "pending",
    ]


def test_a_job_that_will_not_start_as_asked_is_named_while_the_call_waits(tmp_path, caplog):
    """A job asking for more CPUs than the node has stayed queued (PartitionConfig) while the call waited in silence
    (an outside tester's find)."""
    import signal
    import threading

    def interrupt_after_the_warning():
        deadline = time.monotonic() + 60
        while "will not start as asked" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_after_the_warning, daemon=True).start()
    with ctrl_c_raises(), caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, num_episodes=2, seed_offset=0, execution=slurm(1, cpus_per_task=64)
        )
    assert "is queued and will not start as asked (PartitionConfig: it asks for more than the partition has" in (
        caplog.text
    )


BLOCKING_SUBMITTER = """
import sys, gymnasium as gym
from online_trainer import ExecutionOptions, OnlineTrainer, SlurmOptions
from online_trainer.agents import QLearningAgent

def env():
    return gym.make_vec("CliffWalking-v1", num_envs=2, vectorization_mode="sync")

if __name__ == "__main__":
    OnlineTrainer(env, QLearningAgent, exp_dir=sys.argv[1]).multi_run(
        2, total_steps=20_000, seed_offset=0,
        execution=ExecutionOptions(backend="slurm", num_workers=2, progress=False, slurm=SlurmOptions(poll_interval=1.0)))
"""


def test_a_submitter_killed_while_it_waits_leaves_jobs_that_write_all_metrics(tmp_path):
    """A notebook killed while its blocking call followed the jobs (wait=True) cancels nothing: the jobs finished and
    recorded their runs, but only the submitter wrote all_metrics.pkl, so none was ever written (tester S7)."""
    from online_trainer.records import storage

    script, exp = tmp_path / "submit.py", tmp_path / "exp"
    script.write_text(BLOCKING_SUBMITTER)
    submitter = subprocess.Popen([sys.executable, str(script), str(exp)], cwd=tmp_path)
    deadline = time.monotonic() + 300
    while not (
        (exp / "manifest.json").is_file()
        and all("slurm_job" in run for run in json.loads((exp / "manifest.json").read_text())["runs"])
    ):
        assert submitter.poll() is None and time.monotonic() < deadline, "the runs were not handed to jobs"
        time.sleep(0.2)
    submitter.kill()
    submitter.wait(timeout=60)
    runs = SlurmRuns.of(exp).wait(progress=False, poll_interval=1.0)
    statuses = [run["status"] for run in json.loads((exp / "manifest.json").read_text())["runs"]]
    assert statuses == ["finished", "finished"]
    assert (exp / "all_metrics.pkl").is_file()
    kept = storage.load_all_run_metrics(exp)
    assert [[r["ep_return"] for r in run] for run in kept] == [[r["ep_return"] for r in run] for run in runs]
    assert [len(run) for run in kept] == [len(load_run_metrics(exp, i)) for i in (1, 2)]
