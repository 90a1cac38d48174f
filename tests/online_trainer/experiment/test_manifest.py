"""The experiment directory a call leaves: what overwrite=True replaces, and what the manifest says of each run."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import types
import warnings

import numpy as np
import pytest

from online_trainer import ExperimentExistsError, OnlineTrainer, Preempted, RecordOptions, RunsFailedError, load_runs
from online_trainer.hooks import Hook
from online_trainer.records import storage
from online_trainer.run import full_checkpoint
from tests.conftest import RecordingAgent, make_counting_vec


def snapshot(root):
    """Every file under ``root`` (hidden ones and ``.lock`` included) with its bytes."""
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


class WrongShape(RecordingAgent):
    """Returns one action too many."""

    def act(self, obs):
        return np.zeros(len(obs) + 1, dtype=np.int64)


def earlier_experiment(exp_dir):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir, args={"lr": 0.1})
    trainer.multi_run(2, num_episodes=4, seed_offset=0, checkpoint_freq=2, progress=False)
    before = snapshot(exp_dir)
    assert len(before) > 8 and "all_metrics.pkl" in before and "args.yaml" in before
    return before


@pytest.mark.parametrize("workers", [1, 2])
def test_overwrite_keeps_the_earlier_experiment_when_the_new_call_fails_before_its_first_step(tmp_path, workers):
    before = earlier_experiment(tmp_path)
    trainer = OnlineTrainer(make_counting_vec(1), WrongShape, exp_dir=tmp_path, args={"lr": 0.2})
    with pytest.raises(
        ValueError,
        match=r"returned actions of shape \(2,\) \(2 actions\), but Discrete\(2\) with "
        r"num_envs=1 needs shape \(1,\)",
    ) as excinfo:
        trainer.multi_run(2, total_steps=2000, overwrite=True, num_workers=workers, progress=False)
    assert snapshot(tmp_path) == before  # byte for byte, and nothing else (no set-aside folder left)
    assert excinfo.value.__notes__[-1].endswith(
        "before its first env step; every run was stopped, and nothing of this call was kept on disk: the earlier "
        "experiment it would have replaced is put back as it was)"
    )


def test_a_refused_overwrite_keeps_the_earlier_experiments_manifest_lock(tmp_path):
    """An experiment run on Slurm holds .manifest.lock (its jobs' lock on the manifest): a refused overwrite=True
    removed it with its own files, and the experiment was not put back byte for byte (tester S7)."""
    earlier_experiment(tmp_path)
    (tmp_path / ".manifest.lock").write_bytes(b"")  # as the earlier experiment's Slurm jobs left it
    before = snapshot(tmp_path)
    trainer = OnlineTrainer(make_counting_vec(1), WrongShape, exp_dir=tmp_path, args={"lr": 0.2})
    with pytest.raises(ValueError, match=r"returned actions of shape"):
        trainer.multi_run(2, total_steps=2000, overwrite=True, progress=False)
    assert snapshot(tmp_path) == before


def every_sink(exp_dir):
    from online_trainer.callbacks import CSVCallback, JsonlCallback, MLflowCallback, TBCallBack

    return [
        TBCallBack(exp_dir),
        JsonlCallback(exp_dir / "log.jsonl"),
        CSVCallback(exp_dir / "scalars.csv"),
        MLflowCallback(),
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_overwrite_with_every_sink_keeps_the_earlier_experiment_when_the_new_call_fails_before_its_first_step(
    tmp_path, workers
):
    """MLflow's store is made before any run starts: its artifacts folder, left by the failed call, counted as the new
    experiment, and the earlier one was deleted (an outside tester's find: a finished experiment lost to a typo)."""
    pytest.importorskip("mlflow")
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path, args={"lr": 0.1})
    trainer.call_back = every_sink(tmp_path)
    trainer.multi_run(2, num_episodes=4, seed_offset=0, checkpoint_freq=2, num_workers=workers, progress=False)
    before = snapshot(tmp_path)
    assert "mlflow.db" in before and any(name.startswith("mlartifacts/") for name in before)
    trainer = OnlineTrainer(make_counting_vec(1), WrongShape, exp_dir=tmp_path, args={"lr": 0.2})
    trainer.call_back = every_sink(tmp_path)
    with pytest.raises(ValueError, match=r"returned actions of shape \(2,\)"):
        trainer.multi_run(2, total_steps=2000, overwrite=True, num_workers=workers, progress=False)
    assert snapshot(tmp_path) == before
    # and in the same process (a notebook), the corrected call replaces it: MLflow opens the new store, here and in
    # the workers kept from the first call (they looked the new runs up in the file set aside: "Run ... not found")
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path, args={"lr": 0.2})
    trainer.call_back = every_sink(tmp_path)
    trainer.multi_run(1, num_episodes=3, seed_offset=0, overwrite=True, num_workers=workers, progress=False)
    trainer.multi_run(2, num_episodes=3, seed_offset=0, overwrite=True, num_workers=workers, progress=False)
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == tmp_path.name]
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(run.info.run_name for run in runs) == ["run_1", "run_2"]
    assert all(len(client.get_metric_history(run.info.run_id, "ep_return")) == 3 for run in runs)
    assert not (tmp_path / storage.SET_ASIDE_DIR).exists() and not (tmp_path / "Run2_Last_agent.t").exists()


def test_overwrite_removes_the_earlier_experiment_once_the_new_one_ran(tmp_path):
    earlier_experiment(tmp_path)
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=3, overwrite=True, progress=False
    )
    names = set(snapshot(tmp_path))
    assert not any(name.startswith(storage.SET_ASIDE_DIR) for name in names)
    assert not any(name.startswith("Run2") or name == "args.yaml" or name == "metrics_run2.pkl" for name in names)
    assert [len(run) for run in storage.load_all_run_metrics(tmp_path)] == [3]


def test_overwrite_keeps_the_files_with_an_experiments_names_that_the_earlier_experiment_did_not_write(
    tmp_path, caplog
):
    """Tester F16: overwrite=True deleted the user's own my_notes.jsonl, events.out.tfevents.from_my_other_tool and
    Run5_S1.pkl beside an experiment of 1 run, without a word (an INFO line counted the files)."""
    from online_trainer.callbacks import CSVCallback, JsonlCallback, MultiCallback, TBCallBack

    def sinks():
        return MultiCallback(
            [TBCallBack(tmp_path), JsonlCallback(tmp_path / "callback.jsonl"), CSVCallback(tmp_path / "scalars.csv")]
        )

    first = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    first.call_back = sinks()
    first.multi_run(2, num_episodes=3, progress=False)
    earlier = {p.name for p in tmp_path.iterdir()}
    mine = {
        "my_notes.jsonl": '{"note": "lr 0.1 looked better"}\n',
        "table.csv": "lr,score\n0.1,3\n",
        "events.out.tfevents.from_my_other_tool": "x",
        "Run5_S1.pkl": "mine",
        "metrics_run9.pkl": "mine",
        # V16: of a run the earlier experiment had, but no periodic checkpoint of it (no checkpoint_freq) and no
        # evaluation stream (it did not evaluate)
        "Run2_E3.pkl": "mine",
        "eval_run1.pkl": "mine",
        "callback.jsonl.txt": "not a pattern",
        # F17: copies of the sinks' own files, whose first lines are a sink's, deleted without a word
        "backup_log.jsonl": (tmp_path / "callback.jsonl").read_text(),
        "scalars_backup.csv": (tmp_path / "scalars.csv").read_text(),
        # M22: names an experiment's only begin with, a checkpoint's name without a checkpoint_freq, and the user's
        # own config.py beside calls without config=
        "metrics_run1_old.pkl": "mine",
        "metrics_run2-copy.pkl": "mine",
        "Run1_Last_notes.txt": "mine",
        "config.py": "MY_SETTINGS = 1\n",
    }
    for name, text in mine.items():
        (tmp_path / name).write_text(text)
    second = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    second.call_back = sinks()
    with caplog.at_level("WARNING"):
        second.multi_run(1, num_episodes=3, overwrite=True, progress=False)
    assert {name: (tmp_path / name).read_text() for name in mine} == mine  # every one kept, as it was
    assert (
        "does not show it wrote them: kept (Run1_Last_notes.txt, Run2_E3.pkl, Run5_S1.pkl, backup_log.jsonl, "
        "config.py, eval_run1.pkl, events.out.tfevents.from_my_other_tool, metrics_run9.pkl, my_notes.jsonl, "
        "scalars_backup.csv, table.csv)" in caplog.text
    )
    # the earlier experiment's own files are gone: its run 2, its sinks' lines of run 2
    assert "metrics_run2.pkl" in earlier and not (tmp_path / "metrics_run2.pkl").exists()
    assert "run_2" not in (tmp_path / "callback.jsonl").read_text() + (tmp_path / "scalars.csv").read_text()
    events = [p.name for p in tmp_path.glob("events.out.tfevents.*") if p.name not in mine]
    assert len([e for e in events if e in earlier]) <= 1  # the layout file, written again; the earlier events gone


def test_overwrite_sets_aside_the_earlier_sinks_lock_files_too(tmp_path):
    """Tester V15: an overwrite with another sink left the earlier JSONL sink's hidden .callback.jsonl.lock."""
    from online_trainer.callbacks import JsonlCallback

    first = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    first.call_back = JsonlCallback(tmp_path / "callback.jsonl")
    first.multi_run(1, num_episodes=3, progress=False)
    assert (tmp_path / ".callback.jsonl.lock").is_file()
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=3, overwrite=True, progress=False
    )
    assert not (tmp_path / ".callback.jsonl.lock").exists() and not (tmp_path / "callback.jsonl").exists()


class CtrlCBeforeTheRuns(OnlineTrainer):
    """Ctrl-C once the call holds its directory (input files written), before any run started."""

    def _on_exp_dir_held(self):
        raise KeyboardInterrupt


@pytest.mark.parametrize("earlier", [False, True])
def test_a_call_interrupted_before_any_run_started_leaves_the_directory_as_it_found_it(tmp_path, earlier):
    exp_dir = tmp_path / "runs" / "exp"
    before = earlier_experiment(exp_dir) if earlier else None
    trainer = CtrlCBeforeTheRuns(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir, args={"lr": 0.2})
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(1, num_episodes=3, overwrite=earlier, progress=False)
    if earlier:
        assert snapshot(exp_dir) == before  # put back, args.yaml of lr 0.1 included
    else:
        assert list(tmp_path.iterdir()) == []  # no args.yaml, no .lock, no runs/exp


def test_an_earlier_experiment_is_refused_with_the_public_error_that_lists_it(tmp_path):
    before = earlier_experiment(tmp_path)
    with pytest.raises(ExperimentExistsError, match="already holds an earlier experiment") as caught:
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, num_episodes=3, progress=False
        )
    assert isinstance(caught.value, FileExistsError)  # what `except FileExistsError` catches, as the docs say
    assert caught.value.exp_dir == tmp_path
    assert {path.name for path in caught.value.earlier} >= {"all_metrics.pkl", "manifest.json"}
    assert snapshot(tmp_path) == before


def test_an_experiment_set_aside_by_a_killed_call_is_put_back(tmp_path, caplog):
    """A call killed while its runs were being set up leaves the earlier experiment aside: the next call puts it back,
    and says so (F21: logged at info only, the experiment came back without a word)."""
    before = earlier_experiment(tmp_path)
    aside = tmp_path / storage.SET_ASIDE_DIR
    aside.mkdir()
    for path in storage.existing_experiment_files(tmp_path):
        path.rename(aside / path.name)
    with caplog.at_level("WARNING"), pytest.raises(FileExistsError, match="already holds an earlier experiment"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, num_episodes=3, progress=False
        )
    assert snapshot(tmp_path) == before
    assert (
        f"exp_dir {tmp_path}: a call with overwrite was killed before any of its runs started: the earlier "
        "experiment it had set aside is put back as it was" in caplog.text
    )
    assert json.loads((tmp_path / "manifest.json").read_text())["num_runs"] == 2


def test_an_experiment_set_aside_by_a_call_killed_before_its_runs_left_a_result_is_put_back(tmp_path, caplog):
    """An overwrite=True call killed as its runs started leaves its own manifest (and empty streams) beside the
    earlier experiment it set aside. The next call, refused, deleted the earlier experiment: the manifest made it
    look as if the killed call's runs had begun."""
    before = earlier_experiment(tmp_path)
    aside = tmp_path / storage.SET_ASIDE_DIR
    aside.mkdir()
    for path in storage.existing_experiment_files(tmp_path):
        path.rename(aside / path.name)
    killed = json.loads((aside / "manifest.json").read_text())
    for entry in killed["runs"]:
        entry["status"] = "running"
    (tmp_path / "manifest.json").write_text(json.dumps(killed))
    (tmp_path / "metrics_run1.pkl").write_bytes(b"")  # opened, nothing flushed
    (tmp_path / "events.out.tfevents.1.host.1.000000").write_bytes(b"")
    with pytest.raises(FileExistsError, match="already holds an earlier experiment"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, num_episodes=3, progress=False
        )
    assert snapshot(tmp_path) == before
    # once a run of the killed call has left records, they are its experiment's: the earlier one is removed
    aside.mkdir()
    for path in storage.existing_experiment_files(tmp_path):
        path.rename(aside / path.name)
    (tmp_path / "manifest.json").write_text(json.dumps(killed))
    (tmp_path / "metrics_run1.pkl").write_bytes((aside / "metrics_run1.pkl").read_bytes())
    caplog.clear()
    with (
        caplog.at_level("WARNING"),
        pytest.raises(FileExistsError, match=r"whose runs did not all end \(0 of 2 did.*resume=True to continue"),
    ):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, num_episodes=3, progress=False
        )
    assert (
        f"exp_dir {tmp_path}: removed the earlier experiment, set aside by a call with overwrite that was killed after its runs started"
        in caplog.text
    )
    assert not aside.exists() and sorted(p.name for p in storage.existing_experiment_files(tmp_path)) == [
        "manifest.json",
        "metrics_run1.pkl",
    ]


class FailAt(Hook):
    """Raises in run 1 at env step ``at``."""

    every_steps = 1

    def __init__(self, at):
        self.at = at

    def on_step(self, ctx):
        if ctx.run == 1 and ctx.global_step == self.at:
            raise RuntimeError(f"hook failed at step {ctx.global_step}")


def entries(exp_dir):
    return json.loads((exp_dir / storage.MANIFEST_FILE).read_text())["runs"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_run_reports_the_progress_its_records_show(tmp_path, workers):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(RunsFailedError):
        trainer.multi_run(2, total_steps=1000, seed_offset=0, hooks=[FailAt(499)], num_workers=workers, progress=False)
    records = storage.load_run_metrics(tmp_path, 1)
    assert len(records) >= 20 and records[-1]["global_step"] <= 499
    failed, finished = entries(tmp_path)
    assert failed["status"] == "failed" and finished["status"] == "finished" and finished["global_step"] == 1000
    assert failed["episodes"] == len(records) and failed["global_step"] == records[-1]["global_step"]
    assert failed["wall_time"] == pytest.approx(records[-1]["wall_time"], abs=1e-3) and failed["sps"] > 0
    runs = load_runs(tmp_path)
    assert runs["env_steps"].tolist() == [records[-1]["global_step"], 1000]
    assert runs["num_episodes"].tolist()[0] == len(records)


class Preempt(Hook):
    """Sends this process SIGTERM at env step ``at`` of run 1, as a scheduler about to preempt the job would."""

    every_steps = 1

    def __init__(self, at):
        self.at = at

    def on_step(self, ctx):
        if ctx.run == 1 and ctx.global_step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_preempted_run_reports_the_progress_of_its_checkpoint(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(Preempted):
        trainer.multi_run(1, total_steps=10**8, seed_offset=0, hooks=[Preempt(200)], progress=False)
    header = full_checkpoint.read(tmp_path, 1, header_only=True)
    assert header.global_step > 200
    (entry,) = entries(tmp_path)
    assert entry["status"] == "interrupted" and entry["global_step"] == header.global_step
    assert entry["episodes"] == header.episodes == len(storage.load_run_metrics(tmp_path, 1)) > 0
    assert entry["wall_time"] == pytest.approx(header.elapsed, abs=1e-3)
    runs = load_runs(tmp_path)
    assert runs["env_steps"].tolist() == [header.global_step] and runs["wall_time"].tolist()[0] > 0


def test_overwrite_warns_of_the_sinks_files_outside_the_experiment_which_it_keeps(tmp_path, caplog):
    """The earlier experiment's rows stayed in a CSV file outside exp_dir and the new runs' joined them: every
    episode of run 1 twice, and the docs' pivot of the file failed (an outside tester's find)."""
    from online_trainer.callbacks import CSVCallback, JsonlCallback, MultiCallback, TBCallBack

    exp_dir, shared = tmp_path / "exp", tmp_path / "shared"

    def call(**kw):
        trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir)
        trainer.call_back = MultiCallback(
            [CSVCallback(shared / "scalars.csv"), JsonlCallback(exp_dir / "log.jsonl"), TBCallBack(exp_dir)]
        )
        trainer.multi_run(1, num_episodes=3, seed_offset=0, progress=False, **kw)

    call()
    caplog.clear()
    call(overwrite=True)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and (
        f"overwrite=True replaces the experiment in {exp_dir}, but the callback writes to {shared / 'scalars.csv'}, "
        "outside it: those files stay as they are" in warned[0]
    )
    assert "log.jsonl" not in warned[0] and "tfevents" not in warned[0]  # inside exp_dir: replaced with it


def test_an_overwrite_with_mlflow_in_the_same_process_finds_its_runs_in_the_workers_kept(tmp_path):
    """A notebook's second call with overwrite=True failed in the workers kept from the first: MLflow's caches there
    still pointed at the store set aside ("Run with id=... not found"; an outside tester's find)."""
    pytest.importorskip("mlflow")
    from online_trainer.callbacks import MLflowCallback

    for _ in range(2):
        trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
        trainer.call_back = MLflowCallback()
        runs = trainer.multi_run(2, num_episodes=3, seed_offset=0, overwrite=True, num_workers=2, progress=False)
        assert [len(run) for run in runs] == [3, 3]


def test_the_submitting_process_keeps_where_a_restarted_slurm_job_continued_its_run(tmp_path):
    """A job Slurm restarted recorded ``resumed_from``; the submitting process then wrote its own entry over it as it
    recorded the run's end (an outside tester's find, in 6 trials of 6)."""
    import types

    from online_trainer.experiment import job_results
    from online_trainer.experiment.manifest import Experiment

    manifest = Experiment.new_manifest(2, 0, 0, {})
    for entry, job in zip(manifest["runs"], ("7_0", "7_1")):
        entry.update(
            status="running", slurm_job=job, resumed_from={"global_step": 10, "episodes": 1, "env_restored": True}
        )
    storage.write_manifest(tmp_path, manifest)
    experiment = Experiment(tmp_path, json.loads(json.dumps(manifest)), [])
    experiment._jobs.update(("7_0", "7_1"))  # this call submitted them (on_submitted)
    point = {"global_step": 40, "episodes": 4, "env_restored": True}
    job_results.record_restart(tmp_path, 1, types.SimpleNamespace(resume_point=point))  # from its checkpoint
    job_results.record_restart(tmp_path, 2, None)  # from its first step: no checkpoint yet
    for entry in experiment.manifest["runs"]:
        entry.update(status="finished")  # the submitting process records the ends it read
    experiment._write()
    written = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert written[0]["resumed_from"] == point and "resumed_from" not in written[1]
    assert [entry["status"] for entry in written] == ["finished", "finished"]


def test_a_slurm_run_resumed_by_the_call_keeps_its_resumed_from(tmp_path):
    """resume=True of runs an earlier call's Slurm jobs left: the call's own resumed_from was taken for one the job of
    that earlier call had removed, and dropped from the manifest (tester L2, in 4 experiments of 4)."""
    from online_trainer.experiment.manifest import Experiment

    manifest = Experiment.new_manifest(2, 0, 0, {})
    for entry, job in zip(manifest["runs"], ("7_0", "7_1")):
        entry.update(status="interrupted", slurm_job=job)  # cancelled with the earlier call
    storage.write_manifest(tmp_path, manifest)
    planned = json.loads(json.dumps(manifest))
    point = {"global_step": 40, "episodes": 4, "env_restored": True}
    planned["runs"][0]["resumed_from"] = point  # as planning a resume sets it
    experiment = Experiment(tmp_path, planned, [])
    experiment._write()
    written = json.loads((tmp_path / "manifest.json").read_text())["runs"]
    assert written[0]["resumed_from"] == point and "resumed_from" not in written[1]
    spec = types.SimpleNamespace(run_idx=1)
    experiment.on_submitted(spec, "9_0")  # this call's job, which writes nothing of its own yet
    assert json.loads((tmp_path / "manifest.json").read_text())["runs"][0]["resumed_from"] == point


@pytest.mark.parametrize("damage", [lambda text: text[: len(text) // 2], lambda text: "\udcff\x00garbage"])
def test_a_damaged_manifest_is_named_with_what_to_do_and_nothing_changes(tmp_path, capsys, damage):
    """load_runs and resume raised a bare JSONDecodeError or UnicodeDecodeError, `show` printed a traceback, and
    `resume` a JSON parser's message, none naming manifest.json (tester F2)."""
    from online_trainer.cli.main import main
    from online_trainer.errors import ManifestDamagedError

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.multi_run(2, num_episodes=3, seed_offset=0, progress=False)
    path = tmp_path / "manifest.json"
    path.write_bytes(damage(path.read_text()).encode(errors="surrogateescape"))
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    says = rf"{path} is damaged \(.*\): .* Put back a copy of it"
    with pytest.raises(ManifestDamagedError, match=says):
        load_runs(tmp_path)
    with pytest.raises(ManifestDamagedError, match=says):
        trainer.multi_run(2, num_episodes=3, seed_offset=0, progress=False, resume=True)
    assert main(["show", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"error: {path} is damaged" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_call_killed_while_writing_all_metrics_leaves_what_the_resume_writes_and_cleans(tmp_path):
    """SIGTERM (its default action) between all_metrics.pkl's content and its swap left
    .all_metrics.pkl.<pid>.tmp, as large as the file, which no later call removed (tester F2)."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.multi_run(2, num_episodes=3, seed_offset=0, progress=False)

    def returns():
        with open(tmp_path / "all_metrics.pkl", "rb") as file:
            return [[record["ep_return"] for record in run] for run in pickle.load(file)]

    whole = returns()
    (tmp_path / "all_metrics.pkl").rename(tmp_path / ".all_metrics.pkl.999999.tmp")
    trainer.multi_run(2, num_episodes=3, seed_offset=0, progress=False, resume=True)
    assert not list(tmp_path.glob(".all_metrics.pkl.*")) and returns() == whole and len(whole[1]) == 3


def test_all_metrics_written_by_a_resume_holds_the_streams_own_chunks(tmp_path):
    """Runs of an earlier call were pickled again from their dicts: all_metrics.pkl took 3.6 to 4.4 times the bytes
    of an uninterrupted call's (tester F3). It is now the same file, byte for byte."""
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.multi_run(3, num_episodes=40, seed_offset=0, progress=False, records=RecordOptions(flush_every=7))
    whole = (tmp_path / "all_metrics.pkl").read_bytes()
    (tmp_path / "all_metrics.pkl").unlink()
    trainer.multi_run(
        3, num_episodes=40, seed_offset=0, progress=False, records=RecordOptions(flush_every=7), resume=True
    )
    assert (tmp_path / "all_metrics.pkl").read_bytes() == whole


class InterruptRun2(Hook):
    """Ctrl-C in run 2's third episode."""

    def on_episode_end(self, ctx, record):
        if ctx.run == 2 and record["episode_index"] == 3:
            raise KeyboardInterrupt


def test_a_finished_runs_stream_cut_short_since_is_said_loudly_with_the_fix(tmp_path, caplog):
    """A resume wrote all_metrics.pkl with 38 of a finished run's 98 episodes, saying only that the run "was
    probably killed while writing" (tester F2)."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(2, num_episodes=30, seed_offset=0, progress=False, hooks=[InterruptRun2()])
    stream = tmp_path / "metrics_run1.pkl"
    whole = stream.read_bytes()
    stream.write_bytes(whole[: len(whole) // 2])
    with caplog.at_level("ERROR"), warnings.catch_warnings():
        warnings.simplefilter("error", storage.TruncatedMetricsWarning)  # not also "probably killed while writing"
        runs = trainer.multi_run(2, num_episodes=30, seed_offset=0, progress=False, resume=True)
    assert f"{stream} holds {len(runs[0])} of the 30 episodes run 1 recorded when it finished" in caplog.text
    assert "Put back a copy of it, remove all_metrics.pkl, and make the same call with resume=True" in caplog.text
    stream.write_bytes(whole)  # as the message says
    (tmp_path / "all_metrics.pkl").unlink()
    runs = trainer.multi_run(2, num_episodes=30, seed_offset=0, progress=False, resume=True)
    with open(tmp_path / "all_metrics.pkl", "rb") as file:
        assert [len(run) for run in pickle.load(file)] == [len(run) for run in runs] == [30, 30]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_failed_run_whose_end_cannot_be_recorded_is_named_on_the_disk_error(tmp_path, monkeypatch, workers):
    """A full disk at a failed run's end raised the manifest's OSError alone: the run's own error was only in the
    log (tester F2)."""
    import errno

    class Breaks(Hook):
        def on_episode_end(self, ctx, record):
            if ctx.episodes == 2:
                raise RuntimeError("hook broke")

    write = storage.write_manifest

    def full_disk_once_failed(exp_dir, manifest):
        if manifest["runs"][0]["status"] == "failed":
            raise OSError(errno.ENOSPC, "No space left on device", str(exp_dir))
        write(exp_dir, manifest)

    monkeypatch.setattr(storage, "write_manifest", full_disk_once_failed)
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(OSError, match="No space left") as caught:
        trainer.multi_run(workers, num_episodes=5, seed_offset=0, progress=False, hooks=[Breaks()], num_workers=workers)
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert re.search(
        r"Run \d \(seed \d+\) had failed before its end could be recorded: RuntimeError: hook broke", notes
    )


@pytest.mark.parametrize("moved", [2, -3])
def test_an_experiment_a_killed_overwrite_was_moving_aside_is_put_back_whole(tmp_path, moved, caplog):
    """overwrite=True moved the earlier experiment into .replaced/ one file at a time: killed part way, the next
    call took the files still in place for the killed call's own and deleted them, or deleted .replaced/ whole:
    the final agents, or the CSV, JSONL and W&B files, were lost (tester J3)."""
    before = earlier_experiment(tmp_path)
    moving = tmp_path / storage.SETTING_ASIDE_DIR
    moving.mkdir()
    for path in storage.existing_experiment_files(tmp_path)[:moved]:
        path.rename(moving / path.name)
    with caplog.at_level("WARNING"), pytest.raises(FileExistsError, match="already holds an earlier experiment"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, num_episodes=3, progress=False
        )
    assert snapshot(tmp_path) == before and not moving.exists()
    assert "was killed as it set it aside: put back" in caplog.text


def test_overwrite_moves_the_earlier_experiment_aside_whole_before_it_writes(tmp_path, monkeypatch):
    from online_trainer.experiment import manifest

    earlier_experiment(tmp_path)
    seen = []
    real = manifest.os.replace

    def watch(src, dst):
        seen.append((os.path.basename(os.path.dirname(dst)), os.path.basename(dst)))
        real(src, dst)

    monkeypatch.setattr(manifest.os, "replace", watch)
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=3, progress=False, overwrite=True
    )
    aside = [move for move in seen if storage.SET_ASIDE_DIR in move or storage.SETTING_ASIDE_DIR in move]
    assert aside[-1] == (tmp_path.name, storage.SET_ASIDE_DIR)  # renamed whole once every file was in .replacing
    assert len(aside) > 3 and {folder for folder, _ in aside[:-1]} == {storage.SETTING_ASIDE_DIR}


@pytest.mark.parametrize(
    ("aside", "moved"),
    [(storage.SETTING_ASIDE_DIR, 6), (storage.SETTING_ASIDE_DIR, None), (storage.SET_ASIDE_DIR, None)],
)  # .replaced/ holds every file: it is made whole from .replacing/
def test_resume_puts_back_what_a_killed_overwrite_set_aside_first(tmp_path, aside, moved):
    """resume=True skipped the set-aside folders: it ran without the checkpoints left in them (runs started again
    from step 0), or said the experiment had no manifest.json (tester R4)."""
    before = earlier_experiment(tmp_path)
    (tmp_path / aside).mkdir()
    for path in storage.existing_experiment_files(tmp_path)[:moved]:
        path.rename(tmp_path / aside / path.name)
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path, args={"lr": 0.1}).multi_run(
        2, num_episodes=4, seed_offset=0, checkpoint_freq=2, progress=False, resume=True
    )
    assert [len(run) for run in runs] == [4, 4]
    after = snapshot(tmp_path)
    assert {name: after.get(name) for name in before if name != ".lock"} == {
        name: data for name, data in before.items() if name != ".lock"
    }
    assert not (tmp_path / storage.SETTING_ASIDE_DIR).exists() and not (tmp_path / storage.SET_ASIDE_DIR).exists()


class InterruptedAtItsSecondAct(RecordingAgent):
    def act(self, obs):
        self.acts = getattr(self, "acts", 0) + 1
        if self.acts == 2:
            raise KeyboardInterrupt
        return super().act(obs)


def test_a_run_cut_off_before_it_kept_anything_counts_zero_steps_not_null(tmp_path):
    """O15: a run interrupted at its first step had "global_step": null and "episodes": null in the manifest, as a
    run not started has; it kept nothing, and a resume starts it at step 0."""
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(make_counting_vec(1), InterruptedAtItsSecondAct, exp_dir=tmp_path).multi_run(
            2, num_episodes=3, seed_offset=0, progress=False
        )
    runs = json.loads((tmp_path / storage.MANIFEST_FILE).read_text())["runs"]
    assert [(r["status"], r["episodes"], r["global_step"]) for r in runs] == [
        ("interrupted", 0, 0),
        ("pending", None, None),
    ]


class FailsToStartRun2(Hook):
    def on_run_start(self, ctx):
        if ctx.run == 2:
            raise RuntimeError("no curriculum for run 2")


def test_a_run_that_stopped_the_call_before_its_first_step_keeps_its_error_in_the_manifest(tmp_path):
    """R16: run 2's hook raised in on_run_start after run 1 had finished; run 2 was left pending with no error, and
    `show` listed it "pending, left out" with nothing on disk saying why (report's table of runs left out has it)."""
    from online_trainer.cli import main as cli

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(RuntimeError, match="no curriculum for run 2"):
        trainer.multi_run(3, num_episodes=3, seed_offset=0, progress=False, hooks=[FailsToStartRun2()])
    runs = json.loads((tmp_path / storage.MANIFEST_FILE).read_text())["runs"]
    assert [r["status"] for r in runs] == ["finished", "pending", "pending"]
    assert runs[1]["error"] == (
        "before its first env step (the call stopped): RuntimeError: no curriculum for run 2 (raised in hook "
        "FailsToStartRun2#0's on_run_start)"
    )
    assert runs[2]["error"] is None
    assert cli.main(["report", str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    assert (
        "| 2 | 10000 | pending | 0 | before its first env step (the call stopped): RuntimeError: no curriculum"
        in (tmp_path / "report" / "summary.md").read_text()
    )
    trainer.multi_run(3, num_episodes=3, seed_offset=0, progress=False, resume=True)
    runs = json.loads((tmp_path / storage.MANIFEST_FILE).read_text())["runs"]
    assert [(r["status"], r["error"]) for r in runs] == [("finished", None)] * 3


@pytest.mark.parametrize("sweep", [False, True])
def test_the_next_call_removes_what_a_killed_write_left_and_only_that(tmp_path, caplog, sweep):
    """F17: a SIGKILL as a run ended left `.manifest.json.<pid>.tmp`, which every later call (a resume, a completed
    sweep, a resume of it) left there. A temporary file younger than a minute may be another process's write under
    way (a Slurm job recording its run's end), and a name of another pattern is not one of ours: both stay."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    if sweep:
        trainer.sweep({"lr": [0.1]}, num_runs=1, num_episodes=2, seed_offset=0, progress=False)
        exp_dir = tmp_path / "exp" / "lr=0.1"
    else:
        trainer.multi_run(1, num_episodes=2, seed_offset=0, progress=False)
        exp_dir = tmp_path / "exp"
    old, fresh, mine = exp_dir / ".manifest.json.4242.tmp", exp_dir / ".manifest.json.4243.tmp", exp_dir / ".mine.tmp"
    for path in (old, fresh, mine):
        path.write_text("{")
    long_ago = old.stat().st_mtime - 2 * storage.ABANDONED_AFTER
    os.utime(old, (long_ago, long_ago))
    os.utime(mine, (long_ago, long_ago))
    caplog.set_level("INFO", logger="online_trainer.records.storage")
    if sweep:
        trainer.sweep({"lr": [0.1]}, num_runs=1, num_episodes=2, seed_offset=0, progress=False)
    else:
        trainer.multi_run(1, num_episodes=2, seed_offset=0, progress=False, resume=True)
    assert not old.exists() and fresh.exists() and mine.exists()
    assert f"removed what killed writes left in {exp_dir}: .manifest.json.4242.tmp" in caplog.text
