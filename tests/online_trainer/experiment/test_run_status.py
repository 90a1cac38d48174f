"""The manifest says how each run stands as it happens: pending, running, then how it ended; readers
report a ``running`` run whose writer is gone as ``interrupted``."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time

import pandas as pd
import pytest

from online_trainer import OnlineTrainer
from online_trainer.analysis.dataframes import load_episodes, load_runs
from online_trainer.experiment.lock import LOCK_FILE, ExperimentLock
from online_trainer.experiment.ownership import is_held, settle_running
from online_trainer.experiment.resuming import runs_left
from tests.conftest import RecordingAgent, make_counting_vec, record, write_experiment


def manifest_statuses(exp_dir):
    return [r["status"] for r in json.loads((exp_dir / "manifest.json").read_text())["runs"]]


def test_runs_are_running_from_their_start_and_readers_see_them_running_while_the_writer_lives(tmp_path):
    seen, keys = [], []

    class Probe(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.updates == 3:
                seen.append((manifest_statuses(tmp_path), load_runs(tmp_path)["status"].tolist()))
                entries = json.loads((tmp_path / "manifest.json").read_text())["runs"]
                keys.append([sorted(entry) for entry in entries])

    OnlineTrainer(make_counting_vec(1), Probe, exp_dir=tmp_path).multi_run(2, num_episodes=3, progress=False)
    assert seen == [
        (["running", "pending"], ["running", "pending"]),
        (["finished", "running"], ["finished", "running"]),
    ]
    assert manifest_statuses(tmp_path) == ["finished", "finished"]
    every_key = sorted(["run", "seed", "status", "episodes", "global_step", "wall_time", "sps", "stop_reason", "error"])
    assert all(entry_keys == every_key for call in keys for entry_keys in call)  # raw JSON readers find every key


def hand_written(tmp_path):
    return write_experiment(
        tmp_path,
        {
            1: ("finished", 0, [record(1, 1.0)]),
            2: ("running", 10000, [record(1, 2.0)]),
            3: ("running", 20000, None),
            4: ("pending", 30000, None),
        },
    )


def test_a_running_run_whose_writer_is_gone_is_reported_interrupted(tmp_path, caplog):
    exp_dir = hand_written(tmp_path)
    (exp_dir / LOCK_FILE).write_text(json.dumps({"pid": 1, "host": "h", "started": "t"}))  # left by a killed writer
    caplog.set_level(logging.WARNING, logger="online_trainer")
    assert load_runs(exp_dir)["status"].tolist() == ["finished", "interrupted", "interrupted", "pending"]
    assert "run(s) 2, 3 were running when the process writing the experiment ended" in caplog.text
    # V16: run 3 kept nothing (killed with -9): 0 and 0, as a run interrupted by Ctrl-C that kept nothing, not null;
    # run 2's counts are its records'
    runs = load_runs(exp_dir).set_index("run")
    assert runs.loc[3, "env_steps"] == 0 and pd.isna(runs.loc[4, "env_steps"])
    episodes = load_episodes(exp_dir)
    assert episodes.groupby("run")["status"].first().to_dict() == {1: "finished", 2: "interrupted"}
    assert [r["status"] for r in episodes.attrs["runs"]] == ["finished", "interrupted", "interrupted", "pending"]
    assert manifest_statuses(exp_dir) == ["finished", "running", "running", "pending"]  # readers write nothing


def test_a_running_run_whose_writer_lives_is_reported_running(tmp_path, caplog):
    exp_dir = hand_written(tmp_path)
    fd = os.open(exp_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the writer, alive (in another process, as far as the lock can tell)
        caplog.set_level(logging.WARNING, logger="online_trainer")
        assert load_runs(exp_dir)["status"].tolist() == ["finished", "running", "running", "pending"]
        assert "were running" not in caplog.text
    finally:
        os.close(fd)
    assert load_runs(exp_dir)["status"].tolist() == ["finished", "interrupted", "interrupted", "pending"]


def test_resuming_redoes_the_running_runs_and_marks_them_interrupted_until_they_start(tmp_path):
    exp_dir = hand_written(tmp_path)
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    with ExperimentLock(exp_dir):  # the resuming call holds the lock: the running runs' writer is gone
        assert list(runs_left(manifest, exp_dir)) == [2, 3, 4]
    assert [r["status"] for r in manifest["runs"]] == ["finished", "interrupted", "interrupted", "pending"]
    assert not (exp_dir / "metrics_run2.pkl").exists()  # its partial stream goes: it runs again from the start
    assert settle_running(exp_dir, {"runs": [{"run": 1, "status": "finished"}]}) == []


def test_the_runs_of_a_sweep_are_judged_by_the_sweep_lock_and_a_cut_off_run_runs_again(tmp_path, caplog):
    seen = []

    class Probe(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.updates == 3:
                seen.append(load_runs(tmp_path / "lr=0.1")["status"].tolist())

    trainer = OnlineTrainer(make_counting_vec(1), Probe, exp_dir=tmp_path)
    trainer.sweep({"lr": [0.1]}, num_runs=2, num_episodes=3, seed_offset=0, progress=False)
    exp_dir = tmp_path / "lr=0.1"
    assert seen == [["running", "pending"], ["finished", "running"]]  # the sweep holds tmp_path/.lock
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    assert manifest["lock"] == os.path.join("..", LOCK_FILE) and not (exp_dir / LOCK_FILE).exists()
    manifest["runs"][1]["status"] = "running"  # as a kill of the sweep would have left it
    (exp_dir / "manifest.json").write_text(json.dumps(manifest))
    caplog.set_level(logging.WARNING, logger="online_trainer")
    assert load_runs(exp_dir)["status"].tolist() == ["finished", "interrupted"]
    trainer.sweep({"lr": [0.1]}, num_runs=2, num_episodes=3, seed_offset=0, progress=False)
    assert manifest_statuses(exp_dir) == ["finished", "finished"]
    assert seen[2:] == [["finished", "running"]]  # only run 2 ran again


def test_a_run_that_fails_its_setup_on_resume_leaves_the_manifest_as_it_was(tmp_path):
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).sweep(
        {"lr": [0.1]}, num_runs=1, num_episodes=2, seed_offset=0, progress=False
    )

    def broken(env):
        raise RuntimeError("no agent today")

    with pytest.raises(RuntimeError, match="no agent today"):
        OnlineTrainer(make_counting_vec(1), broken, exp_dir=tmp_path).sweep(
            {"lr": [0.1]}, num_runs=2, num_episodes=2, seed_offset=0, progress=False
        )
    assert manifest_statuses(tmp_path / "lr=0.1") == ["finished"]  # the second run it planned is not kept either


def test_probing_the_lock_never_makes_a_writer_refuse(tmp_path):
    """Readers probe the lock by taking it shared for an instant; a writer then retries instead of failing."""
    with ExperimentLock(tmp_path):
        assert is_held(tmp_path / LOCK_FILE)
    assert not is_held(tmp_path / LOCK_FILE) and not is_held(tmp_path / "missing" / LOCK_FILE)
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            is_held(tmp_path / LOCK_FILE)

    readers = [threading.Thread(target=probe) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        end = time.monotonic() + 0.5
        takes = 0
        while time.monotonic() < end:
            with ExperimentLock(tmp_path):
                takes += 1
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert takes > 10


def test_a_failed_run_faster_than_a_millisecond_gets_its_speed_from_the_time_before_rounding(tmp_path, monkeypatch):
    """Its wall time, rounded to 0.0 for the manifest, divided its steps: ZeroDivisionError in the parent (seen when
    a run raised at its 10th update under a loaded test machine)."""
    from online_trainer.experiment import job_results
    from online_trainer.run import full_checkpoint as checkpoint_module

    monkeypatch.setattr(
        checkpoint_module, "run_progress", lambda exp_dir, run: {"episodes": 2, "global_step": 5, "wall_time": 0.0004}
    )
    entry = {"run": 3, "seed": 20000, "status": "failed", "episodes": 2, "global_step": 0}
    job_results.progress_from_disk(tmp_path, entry)
    assert entry["global_step"] == 5 and entry["wall_time"] == 0.0 and entry["sps"] == 12500.0


def test_a_runs_sps_leaves_out_its_set_up(tmp_path):
    """D11: the quickstart's run 1 showed 962 SPS, run 5 4,428, for the same 30k steps: a worker's first run
    imported torch before its first env step. The manifest's ``sps`` is over the run's wall time less its set-up;
    ``wall_time`` keeps the whole."""

    def slow_to_build(env):
        time.sleep(1.0)  # as an import of torch on a busy machine
        return RecordingAgent(env)

    OnlineTrainer(make_counting_vec(1), slow_to_build, exp_dir=tmp_path).multi_run(1, total_steps=200, progress=False)
    (entry,) = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert entry["wall_time"] >= 1.0
    assert entry["sps"] > 2 * entry["global_step"] / entry["wall_time"]


def test_a_run_whose_slurm_job_waits_in_the_queue_again_is_read_as_requeued(tmp_path, monkeypatch):
    """S14, S17: after `scontrol requeue`, `show` called the run `running` while its job waited in the queue (the
    progress display said `requeued`); readers say `requeued`, and the manifest keeps `running` (resume asks Slurm)."""
    from online_trainer.cli import main as cli
    from online_trainer.experiment import slurm_states

    exp_dir = write_experiment(
        tmp_path,
        {1: ("running", 0, [record(1, 2.0)]), 2: ("running", 10000, None), 3: ("running", 20000, [record(1, 3.0)])},
    )
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    for entry, job in zip(manifest["runs"], ["41_0", "41_1", "41_2"]):
        entry["slurm_job"] = job
    (exp_dir / "manifest.json").write_text(json.dumps(manifest))
    states = {"41_0": "PENDING", "41_1": "PENDING", "41_2": "RUNNING"}  # run 2 never started: pending
    monkeypatch.setattr(slurm_states, "job_states", lambda ids: {i: states[i] for i in ids})
    assert load_runs(exp_dir)["status"].tolist() == ["requeued", "pending", "running"]
    assert manifest_statuses(exp_dir) == ["running", "running", "running"]  # readers write nothing
    assert cli.main(["show", str(exp_dir)]) == 0
