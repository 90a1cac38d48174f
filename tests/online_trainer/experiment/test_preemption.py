"""Preemption signals (SIGTERM) to the calling process: where a run stops, what it keeps and what ``Preempted`` says."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from online_trainer import OnlineTrainer, load_episodes
from online_trainer.errors import Preempted
from online_trainer.hooks import Hook
from online_trainer.records import storage
from tests.conftest import RecordingAgent, SamplingAgent, make_counting_vec
from tests.online_trainer.experiment.test_resume import COLUMNS


class SignalsAtRunEnd(Hook):
    """Sends SIGTERM to the calling process as run ``run`` ends: a preemption between two runs."""

    def __init__(self, parent: int, run: int):
        self.parent, self.run = parent, run

    def on_run_end(self, ctx):
        if ctx.run == self.run:
            os.kill(self.parent, signal.SIGTERM)


def test_a_preemption_between_two_runs_starts_no_new_run(tmp_path):
    """A run looks at the signal about every second: one that came in a run's last second was never acted on in
    this process, and the next runs started and finished, as if no signal had come (tester F3)."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(Preempted):
        trainer.multi_run(3, num_episodes=5, seed_offset=0, progress=False, hooks=[SignalsAtRunEnd(os.getpid(), 1)])
    statuses = [r["status"] for r in json.loads((tmp_path / "manifest.json").read_text())["runs"]]
    assert statuses == ["finished", "pending", "pending"]
    runs = trainer.multi_run(3, num_episodes=5, seed_offset=0, progress=False, resume=True)
    assert [len(run) for run in runs] == [5, 5, 5]


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_preemption_as_the_last_run_ends_stops_nothing_and_the_call_returns(tmp_path, num_workers):
    """With workers, a signal that came as the last run ended raised Preempted, "continue with resume=True", of an
    experiment whose every run had finished, and all_metrics.pkl was not written; this process returned (F3)."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    runs = trainer.multi_run(
        2,
        num_episodes=5,
        seed_offset=0,
        progress=False,
        num_workers=num_workers,
        hooks=[SignalsAtRunEnd(os.getpid(), 2)],
    )
    assert [len(run) for run in runs] == [5, 5] and (tmp_path / "all_metrics.pkl").is_file()
    statuses = [r["status"] for r in json.loads((tmp_path / "manifest.json").read_text())["runs"]]
    assert statuses == ["finished", "finished"]


class SignalsAtEpisode(Hook):
    """Sends SIGTERM to this process at episode ``episode`` of run 1: a preemption in the middle of a run."""

    def __init__(self, parent: int, episode: int = 3):
        self.parent, self.episode = parent, episode

    def on_episode_end(self, ctx, record):
        if ctx.run == 1 and ctx.episodes == self.episode:
            os.kill(self.parent, signal.SIGTERM)


LONG = 3_000_000  # env steps a run would take to its end: far more than a second's


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_run_that_cannot_checkpoint_stops_at_a_preemption_signal_and_a_resume_starts_it_again(tmp_path, num_workers):
    """A run whose agent has no save() and load() ran on to its end after SIGTERM (`kill PID` did nothing for as
    long as the run had left); it now stops within about a second, without a full checkpoint, and says so."""
    trainer = OnlineTrainer(make_counting_vec(1), SamplingAgent, exp_dir=tmp_path / "cut")
    hooks = [SignalsAtEpisode(os.getpid())]
    kw = dict(seed_offset=0, progress=False, num_workers=num_workers)
    with pytest.raises(Preempted) as stopped:
        trainer.multi_run(1, total_steps=LONG, hooks=hooks, **kw)
    run = json.loads((tmp_path / "cut" / "manifest.json").read_text())["runs"][0]
    assert run["status"] == "interrupted" and 0 < run["global_step"] < LONG
    assert not storage.resume_path(tmp_path / "cut", 1).exists()
    # the run's own exception, raised by the parent with workers too (it raised a plain one: R5)
    assert not stopped.value.checkpointed and stopped.value.run_idx == 1
    assert "run 1 stopped at step" in str(stopped.value)
    assert "without a full checkpoint (its agent, SamplingAgent, has no save() and load())" in str(stopped.value)
    assert "starts this one again from step 0" in str(stopped.value)


def test_a_run_that_cannot_checkpoint_restarts_from_step_0_to_the_uninterrupted_records(tmp_path):
    budget = 100_000  # seconds a run: past its first looks at the signal (about every second)
    trainer = OnlineTrainer(make_counting_vec(1), SamplingAgent, exp_dir=tmp_path / "cut")
    kw = dict(total_steps=budget, seed_offset=4, progress=False)
    with pytest.raises(Preempted):
        trainer.multi_run(2, hooks=[SignalsAtEpisode(os.getpid(), episode=50)], **kw)
    trainer.multi_run(2, resume=True, **kw)
    OnlineTrainer(make_counting_vec(1), SamplingAgent, exp_dir=tmp_path / "ref").multi_run(2, **kw)
    assert load_episodes(tmp_path / "ref")[COLUMNS].equals(load_episodes(tmp_path / "cut")[COLUMNS])


@pytest.mark.parametrize("train", [True, False])
def test_a_call_without_exp_dir_stops_at_a_preemption_signal_and_says_nothing_is_kept(train):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, train=train)
    with pytest.raises(Preempted) as stopped:
        trainer.multi_run(1, total_steps=LONG, seed_offset=0, progress=False, hooks=[SignalsAtEpisode(os.getpid())])
    assert not stopped.value.checkpointed and 0 < stopped.value.global_step < LONG
    message = str(stopped.value)
    assert "without a full checkpoint (the call has no exp_dir)" in message
    assert "so nothing of it is kept" in message and "resume=True" not in message


def test_preempted_pickles_with_what_it_says():
    import pickle

    error = pickle.loads(pickle.dumps(Preempted(3, 120, False, "the call has no exp_dir", on_disk=False)))
    assert (error.run_idx, error.global_step, error.checkpointed, error.why) == (
        3,
        120,
        False,
        "the call has no exp_dir",
    )
    assert str(error) == str(Preempted(3, 120, False, "the call has no exp_dir", on_disk=False))


def test_a_call_whose_runs_were_all_preempted_names_every_one():
    """Tester E4: with 2 workers the call's Preempted named run 1's checkpoint only; run 2 had saved one too."""
    import pickle

    from online_trainer.parallel.worker_pool import _Call

    call = _Call.__new__(_Call)  # only the preemption book-keeping
    call.preempted, call.stopped = None, []
    for stopped in (Preempted(2, 129320), Preempted(1, 126292)):
        call.pending, call.interrupted = {stopped.run_idx}, False
        call.display = type("Display", (), {"run_finished": lambda self, key, status: None})()
        call.on_result = lambda result: None
        spec = type("Spec", (), {"key": stopped.run_idx})()
        result = type("Result", (), {"status": "interrupted", "extra": {"exception_object": stopped}})()
        call.finish(spec, result)
    raised = call.raised(on_disk=True)
    # in the runs' order, whichever reported first (tester H10: "run 2 saved ...; run 1 saved one ...")
    assert "run 1 saved a full checkpoint at step 126292; run 2 saved one at step 129320" in str(raised)
    assert raised.others == [(2, 129320, True, "run 2")]
    # a run that could not write one says so first
    call.stopped.append(Preempted(3, 5, False, "its agent has no load()"))
    assert "run 3 stopped at step 5 without a full checkpoint (its agent has no load()); run 1 saved one at step " in (
        str(call.raised(on_disk=True))
    )
    assert str(pickle.loads(pickle.dumps(raised))) == str(raised)


def test_the_signal_is_announced_by_the_process_that_handles_it_not_by_the_processes_forked_from_it(
    caplog, monkeypatch
):
    """Tester S14: a Slurm job signals every process of the job, and an AsyncVectorEnv's sub-env workers, forked
    from the run's process with its handlers, each logged "SIGUSR2 received" (five lines for one signal)."""
    import logging

    from online_trainer.run.builtin import preemption

    real = os.getpid()
    with preemption.handling(), caplog.at_level(logging.WARNING):
        monkeypatch.setattr(preemption.os, "getpid", lambda: real + 1)  # as in a process forked from this one
        preemption.request(signal.SIGUSR2)
        assert preemption.requested() and "received" not in caplog.text
    monkeypatch.setattr(preemption.os, "getpid", lambda: real)
    with preemption.handling(), caplog.at_level(logging.WARNING):
        preemption.request(signal.SIGUSR2)
        preemption.request(signal.SIGUSR2)
    assert caplog.text.count("SIGUSR2 received: each run writes a full checkpoint") == 1


TERMINATED_AS_THE_CALL_ENDS = """\
import os, signal, sys
from online_trainer import OnlineTrainer
from online_trainer.experiment.manifest import Experiment
from tests.conftest import RecordingAgent, make_counting_vec

write = Experiment.write_all_metrics

def terminated_first(self, runs):
    os.kill(os.getpid(), signal.SIGTERM)  # every run has ended: the call writes what it writes at its end
    write(self, runs)

Experiment.write_all_metrics = terminated_first
runs = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=sys.argv[1]).multi_run(
    2, num_episodes=5, seed_offset=0, progress=False
)
print([len(run) for run in runs])
"""


@pytest.mark.slow  # a subprocess
def test_a_preemption_while_the_call_writes_its_end_stops_nothing(tmp_path):
    """V21: once the runs had ended, a SIGTERM while the call wrote all_metrics.pkl ended the process by its default
    action (the call's handlers were gone): all_metrics.pkl was missing and the exit status said preempted."""
    script = tmp_path / "terminated.py"
    script.write_text(TERMINATED_AS_THE_CALL_ENDS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "exp")], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[5, 5]" and (tmp_path / "exp" / "all_metrics.pkl").is_file()
    assert "SIGTERM received after every run had ended: nothing to stop" in done.stderr


PREEMPTED_SCRIPT = """\
import os, signal, sys
from online_trainer import ExecutionOptions, OnlineTrainer
from online_trainer.errors import Preempted
from online_trainer.hooks import Hook
from tests.conftest import RecordingAgent, make_counting_vec

class Terminates(Hook):
    def on_episode_end(self, ctx, record):
        if record["episode_index"] == 3:
            os.kill(os.getpid(), signal.SIGTERM)

trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=sys.argv[1])
quiet = ExecutionOptions(progress=False)
call = lambda: trainer.multi_run(1, num_episodes=10**7, seed_offset=0, execution=quiet, hooks=[Terminates()])
if sys.argv[2] == "caught":
    try:
        call()
    except Preempted:
        sys.exit(143)
call()
"""


@pytest.mark.slow  # subprocesses
def test_a_script_stopped_by_sigterm_exits_as_resume_md_says(tmp_path):
    """Preempted's docstring said an uncaught one ends a script "as one stopped by the signal would": Python gives
    130 to a bare KeyboardInterrupt only, and a subclass ends it with status 1, as resume.md now says; caught, the
    script chooses the status a wrapper expects."""
    script = tmp_path / "preempted.py"
    script.write_text(PREEMPTED_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    for how, status in (("uncaught", 1), ("caught", 143)):
        exp_dir = tmp_path / how
        done = subprocess.run([sys.executable, str(script), str(exp_dir), how], capture_output=True, text=True, env=env)
        assert done.returncode == status, done.stderr
        assert [r["status"] for r in json.loads((exp_dir / "manifest.json").read_text())["runs"]] == ["interrupted"]
        assert ("online_trainer.errors.Preempted: preempted (SIGTERM or SIGUSR1)" in done.stderr) is (how == "uncaught")
