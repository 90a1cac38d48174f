"""The Slurm backend's options, config keys and manifest rules: checked without a cluster."""

from __future__ import annotations

import os
import re

import pytest

from online_trainer import ExecutionOptions, OnlineTrainer, SlurmOptions
from online_trainer.cli.run_command import execution_options
from online_trainer.config.loading import load_experiment_config
from online_trainer.config.schema import ConfigError
from online_trainer.experiment import ownership
from tests.conftest import RecordingAgent, make_counting_vec


@pytest.mark.parametrize(
    "options, message",
    [
        ({"time": 0}, "time must be a positive int, but got time=0"),
        ({"cpus_per_task": 1.5}, "cpus_per_task must be a positive int, but got cpus_per_task=1.5"),
        ({"runs_per_job": 0}, "runs_per_job must be a positive int, but got runs_per_job=0"),
        ({"max_requeues": -1}, "max_requeues must be a non-negative int, but got max_requeues=-1"),
        ({"mem": " "}, "mem must be a non-empty string or None, but got mem=' '"),
        ({"additional_parameters": ["exclude"]}, "additional_parameters must be a dict of sbatch options"),
        ({"poll_interval": 0}, "poll_interval must be a positive number of seconds, but got poll_interval=0"),
        ({"time": "2h"}, "time must be a positive int, but got time='2h'. It is in minutes (120: two hours)"),
        # an array of its own lifted the cap of running jobs and left tasks with no run on the node (an outside tester's find)
        (
            {"additional_parameters": {"array": "0-5"}},
            "sets 'array', which the runner sets itself (one array task per job, at most num_workers running at once)",
        ),
        ({"additional_parameters": {"job-name": "x"}}, "sets 'job-name', which the runner sets itself"),
        ({"additional_parameters": {"cpus-per-task": 2}}, "sets 'cpus-per-task', which is an option of its own: pass "),
        # signalled at their start, requeued jobs died of SIGUSR2 (FAILED) before a handler was set (outside testers:
        # with time=1, whatever the delay, since Slurm signals up to 60 s early)
        (
            {"time": 4},
            "signal_delay_s=90 with time=4: Slurm sends the signal up to 60 s earlier than asked, so a job could be "
            "signalled 150 s before its 240 s run out, before it had run half of them. Pass signal_delay_s=60 or "
            "less, or a longer time.",
        ),
        ({"time": 3, "signal_delay_s": 31}, "Pass signal_delay_s=30 or less"),
        (
            {"time": 1, "signal_delay_s": 30},
            "time=1 is too short for the signal a job gets before its time limit: Slurm sends it up to 60 s earlier "
            "than asked, so a job could be signalled as it starts, and die of it. Pass time=3 or more",
        ),
        ({"time": 2, "signal_delay_s": 1}, "time=2 is too short for the signal"),
    ],
)
def test_bad_slurm_options_are_named(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        SlurmOptions(**options)


def test_a_signal_delay_of_half_the_time_limit_less_slurms_minute_is_taken():
    assert SlurmOptions(time=3, signal_delay_s=30).signal_delay_s == 30 and SlurmOptions(time=5).time == 5


def test_slurm_options_belong_to_the_slurm_backend():
    with pytest.raises(ValueError, match="applies to backend='slurm' only, but got backend='local'"):
        ExecutionOptions(slurm=SlurmOptions(partition="gpu"))
    assert ExecutionOptions(backend="slurm").slurm == SlurmOptions()
    assert ExecutionOptions(backend="slurm").in_workers  # what runs need is checked to travel


@pytest.mark.parametrize("backend, package, extra", [("ray", "ray", "ray"), ("slurm", "submitit", "slurm")])
def test_a_backend_whose_package_is_missing_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, capsys, backend, package, extra
):
    """It failed at the first run, with a traceback, after the command had written config.yaml and a manifest of
    pending runs, so that the same command, once the package was installed, was refused as an earlier experiment."""
    import importlib.util

    from online_trainer.cli import main as cli

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == package else find_spec(name, *a))
    message = (
        f"execution.backend={backend!r} needs {package}, which is not installed here: pip install -e '.[{extra}]' "
        f"(or pip install {package}), or use backend='local'."
    )
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ExecutionOptions(backend=backend)
    config = tmp_path / "c.yaml"
    config.write_text(
        "env:\n  id: Corridor-v0\nagent:\n  name: q_learning\nnum_runs: 2\nnum_episodes: 2\ncallback: empty\n"
    )
    exp_dir = tmp_path / "exp"
    assert cli.main(["run", str(config), f"exp_dir={exp_dir}", f"execution.backend={backend}", "--no-progress"]) == 2
    assert message in capsys.readouterr().err
    assert not exp_dir.exists()


def test_only_the_slurm_parameters_given_reach_sbatch():
    options = SlurmOptions(partition="gpu", time=60, mem="4G", additional_parameters={"exclude": "node3"})
    assert options.sbatch_parameters() == {
        "partition": "gpu",
        "time": 60,
        "mem": "4G",
        "additional_parameters": {"exclude": "node3"},
    }
    assert SlurmOptions().sbatch_parameters() == {}


def test_sweep_and_evaluate_refuse_not_waiting_for_their_jobs(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    detached = ExecutionOptions(backend="slurm", slurm=SlurmOptions(wait=False))
    with pytest.raises(ValueError, match="sweep needs the results of its runs, but got slurm=SlurmOptions"):
        trainer.sweep({"lr": [1, 2]}, 1, num_episodes=1, execution=detached)
    with pytest.raises(ValueError, match="evaluate needs the results of its runs"):
        trainer.evaluate(execution=detached)
    assert list(tmp_path.iterdir()) == []


def test_a_run_in_a_slurm_job_stays_running_when_the_submitting_process_is_gone(tmp_path):
    manifest = {"runs": [{"run": 1, "status": "running", "slurm_job": "7_0"}, {"run": 2, "status": "running"}]}
    assert ownership.settle_running(tmp_path, manifest) == [2]  # nobody holds the lock
    assert manifest["runs"][0]["status"] == "running"  # its job records how it ends
    assert ownership.settle_running(tmp_path, manifest, owned=True) == [1]  # a resume, having asked Slurm


def test_the_config_names_the_backend_and_the_slurm_keys(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("env: {id: CartPole-v1}\nagent: {name: random}\nnum_episodes: 2\nexecution: {num_workers: 3}\n")
    config = load_experiment_config(
        path, ["execution.backend=slurm", "execution.slurm.partition=debug", "execution.slurm.time=30"]
    )
    assert execution_options(config) == ExecutionOptions(
        backend="slurm", num_workers=3, slurm=SlurmOptions(partition="debug", time=30)
    )
    with pytest.raises(
        ConfigError,
        match=r"unknown key 'execution.slurm.partitoin' \(did you mean "
        r"'execution.slurm.partition'\?\)",
    ):
        execution_options(load_experiment_config(path, ["execution.backend=slurm", "execution.slurm.partitoin=a"]))
    with pytest.raises(ConfigError, match="execution.slurm: time must be a positive int, but got time=0"):
        execution_options(load_experiment_config(path, ["execution.backend=slurm", "execution.slurm.time=0"]))
    # in a file's words, not Python's (S11: "or time=None for the partition's limit")
    with pytest.raises(ConfigError, match="Use null for the cluster's default"):
        load_experiment_config(path, ["execution.backend=slurm", "execution.slurm.cpus_per_task=0"])
    with pytest.raises(ConfigError, match="Pass time=3 or more \\(minutes\\), or time=null for the partition's limit"):
        load_experiment_config(path, ["execution.backend=slurm", "execution.slurm.time=2"])
    # the fix is said: a Slurm config switched to local (tester S7)
    with pytest.raises(
        ConfigError,
        match=r"execution.slurm=.* applies to backend='slurm' only, but got backend='local'. To run with "
        r"backend='local', drop the Slurm options: slurm=null \(in a config or on the command line: "
        r"execution.slurm=null\)",
    ):
        load_experiment_config(path, ["execution.slurm.time=30"])
    with pytest.raises(
        ConfigError,
        match=r"cannot set execution.slurm.additional_parameters.job_name. Set the whole mapping: "
        r"execution.slurm.additional_parameters=\{job_name: VALUE\}",
    ):
        load_experiment_config(path, ["execution.backend=slurm", "execution.slurm.additional_parameters.job_name=x"])
    with pytest.raises(
        ConfigError,
        match=r"execution.backend must be one of 'local', 'ray', 'slurm', but got "
        r"execution.backend='rayy' \(did you mean 'ray'\?\)",
    ):
        load_experiment_config(path, ["execution.backend=rayy"])


def test_the_commands_header_says_how_many_jobs_run_at_once_not_workers(tmp_path):
    from online_trainer.cli.run_command import _describe

    path = tmp_path / "cfg.yaml"
    path.write_text("env: {id: CartPole-v1}\nagent: {name: random}\nnum_runs: 4\nnum_episodes: 2\n")
    slurm = load_experiment_config(path, ["execution.num_workers=2", "execution.backend=slurm"])
    assert _describe(slurm).endswith("2 episodes each, 2 Slurm jobs at a time")  # it said "2 workers" (Y2)
    local = load_experiment_config(path, ["execution.num_workers=2"])
    assert _describe(local).endswith("2 episodes each, 2 workers")


class Display:
    """Records what reaches the submitting process's progress display."""

    def __init__(self):
        self.messages = []

    def handle(self, message):
        self.messages.append(message)


def test_a_jobs_progress_reaches_the_display_once_even_when_read_mid_write(tmp_path):
    from online_trainer.experiment import job_results
    from online_trainer.parallel.slurm import _Watch
    from online_trainer.parallel.slurm_job import FileChannel
    from online_trainer.progress.display import QueueProgress

    (tmp_path / "slurm").mkdir()
    path = job_results.progress_path(tmp_path, 2)
    bar = QueueProgress(FileChannel(path, interval=0.0), interval=0.0).open_run(7, "run 2", 100, "steps")
    bar.advance(5)
    bar.advance(6)
    complete = path.read_bytes()
    bar.advance(7)
    path.write_bytes(path.read_bytes()[:-3])  # the last batch still being written
    watch, display = _Watch([(7, str(tmp_path), 2, 10_000, "5_1")], str(tmp_path / "slurm")), Display()
    watch.progress(display)
    assert display.messages == [("start", 7, "run 2"), ("progress", 7, 5, None, None), ("progress", 7, 6, None, None)]
    assert watch.offsets[7] == len(complete)
    path.write_bytes(complete)
    bar.advance(8)  # appended after the batch that was cut off
    watch.progress(display)
    assert display.messages[3:] == [("progress", 7, 8, None, None)]


def test_wait_takes_a_jobs_result_read_before_the_job_wrote_its_manifest_entry(tmp_path, monkeypatch):
    """A job writes its run's result file, then its manifest entry: wait() read the result in between and failed
    the finished run with "?" (seen once in CI, after a requeue)."""
    import json
    import pickle

    from online_trainer import OnlineTrainer, SlurmRuns
    from online_trainer.experiment import job_results, slurm_states

    # squeue no longer knows job 4242, as a cluster answers (where Slurm is installed but down, each squeue
    # waited about 18 s for its controller)
    monkeypatch.setattr(slurm_states, "_squeue", lambda bases: {})
    from online_trainer.run.one_run import RunResult
    from tests.conftest import RecordingAgent, make_counting_vec

    (records,) = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=3, seed_offset=0, progress=False
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    finished = dict(manifest["runs"][0])
    manifest["runs"][0].update(status="running", slurm_job="4242")  # as the job left it before its result
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "slurm").mkdir()
    result = RunResult(1, finished["seed"], None, episodes=3, global_step=finished["global_step"], wall_time=0.1)
    job_results.result_path(tmp_path, 1).write_bytes(pickle.dumps(result))
    (run,) = SlurmRuns.of(tmp_path).wait(progress=False, poll_interval=0.01)
    assert [r["ep_return"] for r in run] == [r["ep_return"] for r in records]
    entry = json.loads((tmp_path / "manifest.json").read_text())["runs"][0]
    assert (entry["status"], entry["episodes"], entry["slurm_job"]) == ("finished", 3, "4242")


def test_a_slurm_job_ignores_the_time_limit_signal_once_its_runs_are_done():
    """A second SIGUSR2 after the job had checkpointed and asked for its requeue (or after its run had finished) killed
    it with the signal's default action: Slurm marked it FAILED, status 140 (an outside tester's find)."""
    import signal

    from online_trainer.parallel.slurm_job import TIME_LIMIT_SIGNALS, SlurmRunJob

    before = {sig: signal.getsignal(sig) for sig in TIME_LIMIT_SIGNALS}
    try:
        assert SlurmRunJob([], torch_threads=None, max_requeues=0)() == []
        assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in TIME_LIMIT_SIGNALS)
        os.kill(os.getpid(), signal.SIGUSR2)  # what killed the job: now nothing happens
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_job_that_left_the_queue_without_starting_is_described_in_words_without_a_log_it_never_wrote(tmp_path):
    """A pending array task cancelled before it started is forgotten by Slurm: the failure said "ended GONE", "is no
    longer known to Slurm before run 2 had a result", and named a log that never existed (Y2)."""
    pytest.importorskip("submitit")
    from online_trainer.experiment.slurm_states import GONE
    from online_trainer.parallel.slurm import ended_without_result

    result = ended_without_result(2, 10003, 2, "2406_1", GONE, str(tmp_path))
    assert result.extra["exception"] == (
        "SlurmJobEnded: run 2 (seed 10003) has no result, and its Slurm job 2406_1 is no longer known to Slurm "
        "(cancelled before it started, or ended long ago); the job wrote no log: it never started"
    )
    assert result.error == result.extra["exception"] and "GONE" not in result.error
    (tmp_path / "2406_1_0_log.err").write_text("srun: error: node lost\n")
    result = ended_without_result(2, 10003, 2, "2406_1", "NODE_FAIL", str(tmp_path))
    assert result.extra["exception"].endswith(f"ended NODE_FAIL; its log: {tmp_path / '2406_1_0_log.err'}")
    assert result.error.endswith("The end of that log:\nsrun: error: node lost")


def test_a_refusal_names_the_additional_parameters_as_sbatch_got_them():
    """S11: ``additional_parameters={"exclud": "vm"}`` ran as ``--exclude`` (sbatch takes a prefix), and the refusal
    ("Requested node configuration is not available") named neither the key nor its value."""
    from online_trainer.parallel.slurm import sbatch_options_said

    said = sbatch_options_said({"exclud": "vm", "mail_type": "END"})
    assert said == (
        " additional_parameters went to sbatch as --exclud=vm, --mail-type=END: sbatch reads an option's unambiguous "
        "prefix as the option itself, so check each key's spelling (sbatch --help lists them)."
    )
    assert sbatch_options_said(None) == sbatch_options_said({}) == ""
