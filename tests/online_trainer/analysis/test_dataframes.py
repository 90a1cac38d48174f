"""load_episodes: one row per episode, hyperparameters as columns, status, crashed, hand-written and legacy experiments."""

from __future__ import annotations

import json
import logging
import math
import pickle

import pytest

from online_trainer import OnlineTrainer, TruncatedMetricsWarning, load_all_run_metrics, load_episodes
from online_trainer.analysis.dataframes import evaluation_files, load_evaluations, load_runs
from online_trainer.analysis.stats import summarize
from online_trainer.loop.seeding import SEED_STRIDE
from tests.conftest import RecordingAgent, make_counting_vec, record, write_experiment


def run(exp_dir, num_runs=2, episodes=5, **kwargs):
    return OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp_dir).multi_run(
        num_runs, num_episodes=episodes, seed_offset=1, progress=False, **kwargs
    )


def test_one_experiment(tmp_path):
    runs = run(tmp_path, tuning_hp={"lr": 0.1})
    df = load_episodes(tmp_path)
    assert list(df.columns) == [
        "run",
        "seed",
        "status",
        "episode_index",
        "global_step",
        "ep_return",
        "ep_length",
        "wall_time",
        "lr",
    ]
    assert len(df) == 10
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert df.groupby("run")["seed"].first().to_dict() == {e["run"]: e["seed"] for e in manifest["runs"]}
    assert df["seed"].nunique() == 2 and abs(df["seed"].max() - df["seed"].min()) == SEED_STRIDE
    assert (df["status"] == "finished").all()
    assert df["ep_return"].tolist() == [r["ep_return"] for rs in runs for r in rs]
    assert (df["lr"] == 0.1).all()
    assert [r["num_episodes"] for r in df.attrs["runs"]] == [5, 5]


def test_several_experiments_get_an_experiment_column(tmp_path):
    run(tmp_path / "x", num_runs=1)
    run(tmp_path / "y", num_runs=2)
    df = load_episodes([tmp_path / "x", tmp_path / "y"])
    assert df.columns[0] == "experiment"
    assert df.groupby("experiment")["run"].nunique().to_dict() == {"x": 1, "y": 2}
    # a directory holding experiments (a sweep) loads them all
    assert len(load_episodes(tmp_path)) == len(df)


def test_crashed_experiment_loads_complete_chunks(tmp_path):
    write_experiment(tmp_path, {1: ("interrupted", 7, None)})
    with open(tmp_path / "metrics_run1.pkl", "wb") as f:
        for start in range(0, 20, 5):
            pickle.dump([record(i, i) for i in range(start + 1, start + 6)], f)
    path = tmp_path / "metrics_run1.pkl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])  # the last chunk is cut short
    with pytest.warns(TruncatedMetricsWarning):
        df = load_episodes(tmp_path)
    assert df["episode_index"].tolist() == list(range(1, 16))
    assert (df["status"] == "interrupted").all()


def test_runs_are_read_by_their_manifest_number_with_status_and_zero_episode_runs(tmp_path, caplog):
    runs = {
        1: ("finished", 100, [record(i, i) for i in range(1, 6)]),
        2: ("failed", 200, [record(1, -5), record(2, -6)]),
        3: ("interrupted", 300, None),  # killed before its first flush: no stream
        5: ("Stopped early", 500, [record(1, 9)]),  # numbers need not be contiguous
        6: ("pending", 600, []),  # an empty stream
    }
    write_experiment(tmp_path, runs, manifest_order=[5, 3, 1, 6, 2])  # list order is not the run number
    with caplog.at_level(logging.WARNING):
        df = load_episodes(tmp_path)
    assert df.groupby("run")["seed"].first().to_dict() == {1: 100, 2: 200, 5: 500}
    assert df.groupby("run")["status"].first().to_dict() == {1: "finished", 2: "failed", 5: "stopped_early"}
    assert df.loc[df["run"] == 2, "ep_return"].tolist() == [-5.0, -6.0]
    # runs without episodes have no row, are named in a warning and listed in attrs
    assert "2 of 5 run(s) have no episode on disk" in caplog.text
    assert "run 3 (interrupted)" in caplog.text and "run 6 (pending)" in caplog.text
    assert [(r["run"], r["status"], r["num_episodes"]) for r in df.attrs["runs"]] == [
        (1, "finished", 5),
        (2, "failed", 2),
        (3, "interrupted", 0),
        (5, "stopped_early", 1),
        (6, "pending", 0),
    ]
    table = load_runs(tmp_path)
    assert table["run"].tolist() == [1, 2, 3, 5, 6]
    assert table.loc[table["run"] == 2, "error"].item().endswith("RuntimeError: boom")
    assert table["last_step"].tolist()[:2] == [50, 20]


def test_a_stream_without_manifest_entry_has_status_unknown(tmp_path, caplog):
    write_experiment(tmp_path, {1: ("finished", 1, [record(1, 1)])})
    with open(tmp_path / "metrics_run2.pkl", "wb") as f:
        pickle.dump([record(1, 2)], f)
    with caplog.at_level(logging.WARNING):
        df = load_episodes(tmp_path)
    assert df.groupby("run")["status"].first().to_dict() == {1: "finished", 2: "unknown"}
    assert "have no manifest entry" in caplog.text


def test_original_onlinetrainer_directory_without_manifest(tmp_path, caplog):
    """metrics_run{i}.pkl from 1, appended pickled lists of dicts lacking global_step, wall_time, episode_index."""

    def legacy(ret, length):
        return {
            "ep_return": ret,
            "ep_length": length,
            "frames": [],
            "transitions": [],
            "actions": None,
            "agent_seed": 42,
            "agent_logs": None,
        }

    with open(tmp_path / "metrics_run1.pkl", "wb") as f:
        pickle.dump([legacy(-10.0, 4), legacy(-8.0, 3)], f)
        pickle.dump([legacy(-2.0, 5)], f)  # a second chunk appended later
    with open(tmp_path / "metrics_run2.pkl", "wb") as f:
        pickle.dump([{"ep_return": 1.0, "ep_length": 7, "agent_seed": 43}], f)
    with caplog.at_level(logging.WARNING):
        df = load_episodes(tmp_path)
    # F13: a deleted manifest.json counted a failed run's partial episodes without a word
    assert f"{tmp_path} has no manifest.json: the statuses of its runs are unknown, so every run counts" in caplog.text
    assert df["run"].tolist() == [1, 1, 1, 2]
    assert df["episode_index"].tolist() == [1, 2, 3, 1]
    assert df["global_step"].tolist() == [4, 7, 12, 7]  # running sum of ep_length
    assert df["global_step"].dtype == "int64"
    assert all(math.isnan(t) for t in df["wall_time"])
    assert (df["status"] == "unknown").all()
    assert df["seed"].tolist() == [42, 42, 42, 43]
    assert summarize(df, last_k=1, ci=None)["num_runs"].item() == 2  # unknown runs are analysed
    runs = load_all_run_metrics(tmp_path)  # the plain loaders read it too
    assert [len(r) for r in runs] == [3, 1] and runs[0][2]["ep_return"] == -2.0


def test_nan_returns_are_kept_as_recorded(tmp_path):
    write_experiment(tmp_path, {1: ("finished", 1, [record(1, 1), record(2, float("nan")), record(3, 3)])})
    df = load_episodes(tmp_path)
    assert df["ep_return"].isna().tolist() == [False, True, False]


def test_evaluations_of_a_real_run(tmp_path):
    run(tmp_path, episodes=10, eval_freq=5, eval_episodes=3, tuning_hp={"lr": 0.1})
    assert [p.name for p in evaluation_files(tmp_path)] == ["eval_run1.pkl", "eval_run2.pkl"]
    evals = load_evaluations(tmp_path)
    assert list(evals.columns) == [
        "run",
        "seed",
        "status",
        "eval_index",
        "global_step",
        "episodes_trained",
        "eval_return",
        "eval_std",
        "eval_episodes",
        "wall_time",
        "scheduled",
        "video",
        "lr",
    ]
    assert evals["run"].tolist() == [1, 1, 2, 2] and evals["eval_index"].tolist() == [1, 2, 1, 2]
    assert evals["episodes_trained"].tolist() == [5, 10, 5, 10]
    assert (evals["eval_episodes"] == 3).all() and (evals["status"] == "finished").all()
    none = write_experiment(tmp_path / "none", {1: ("finished", 1, [record(1, 1)])})
    assert load_evaluations(none).empty
    # an experiment without evaluations first made every column float (scheduled 1.0), and the evaluation curves
    # of the two then failed with a KeyError (tester V15)
    both = load_evaluations([none, tmp_path])
    assert both["scheduled"].dtype == bool and both["run"].dtype == "int64" and len(both) == 4
    from online_trainer import plot_evaluation_curves

    plot_evaluation_curves(both)


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_episodes(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="holds no experiment"):
        load_episodes(tmp_path)


def test_a_run_without_a_metrics_stream_is_said_to_be_one(tmp_path, caplog):
    """dump_metrics=False: the run finished with episodes, none on disk; the warning says why (an outside tester's find)."""
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=4, seed_offset=0, dump_metrics=False, progress=False
    )
    with caplog.at_level(logging.WARNING):
        df = load_episodes(tmp_path)
    assert df.empty and df.attrs["runs"][0]["status"] == "finished"
    assert (
        "run 1 ended finished after 4 episodes but wrote no metrics_run1.pkl (it ran with dump_metrics=False)"
        in caplog.text
    )


def test_an_experiment_given_twice_is_refused_and_one_with_an_experiment_set_aside_says_so(tmp_path, caplog):
    """compare X X named its one candidate '.'; show said nothing of an earlier experiment a cut-off overwrite=True
    call had set aside, which the next call puts back."""
    import logging

    from online_trainer import OnlineTrainer, compare, load_episodes
    from online_trainer.records import storage
    from tests.conftest import RecordingAgent, make_counting_vec

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "a").multi_run(
        2, num_episodes=3, seed_offset=0, progress=False
    )
    (tmp_path / "x").mkdir()
    for twice in ([tmp_path / "a", tmp_path / "a"], [tmp_path / "a", tmp_path / "x" / ".." / "a"]):
        with pytest.raises(ValueError, match=r"The experiment .* is given twice .*: its runs would count twice"):
            compare(twice)
    (tmp_path / "a" / storage.SET_ASIDE_DIR).mkdir()
    with caplog.at_level(logging.WARNING):
        assert len(load_episodes(tmp_path / "a")) == 6
    assert "also holds an earlier experiment, set aside in .replaced/ by an overwrite=True call that was cut off" in (
        caplog.text
    )


def test_runs_that_kept_no_records_are_named_so_by_show_and_the_analysis(tmp_path):
    """show said "No run finished an episode" of runs that had finished with dump_metrics=False (an outside tester's find)."""
    from online_trainer.cli.report import final_table

    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, num_episodes=4, seed_offset=0, dump_metrics=False, progress=False
    )
    df = load_episodes(tmp_path)
    assert [r["unrecorded_episodes"] for r in df.attrs["runs"]] == [4, 4]
    assert final_table(df, 10).startswith(
        "No run recorded its episodes (they ran with dump_metrics=False): there is no final return to show."
    )
    with pytest.raises(ValueError, match=r"No run recorded its episodes, .* ran with dump_metrics=False"):
        summarize(df)


def test_load_run_metrics_names_the_runs_there_are(tmp_path):
    """``load_run_metrics(exp, 0)`` said the run had not started (an outside tester's find)."""
    import numpy as np

    from online_trainer import load_run_metrics

    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, num_episodes=4, seed_offset=0, progress=False
    )
    assert len(load_run_metrics(tmp_path, np.int64(2))) == 4
    with pytest.raises(ValueError, match="run_idx=0, but runs are numbered from 1"):
        load_run_metrics(tmp_path, 0)
    with pytest.raises(FileNotFoundError, match=r"run_idx=3, but .* has runs 1 to 2\."):
        load_run_metrics(tmp_path, 3)
    for wrong in ("1", True, 1.0):
        with pytest.raises(TypeError, match="run_idx must be a run's number, an int counted from 1"):
            load_run_metrics(tmp_path, wrong)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_failed_run_has_the_env_steps_it_took_not_those_of_its_last_episode(tmp_path, num_workers):
    """load_runs and show gave a failed run's env steps as its last finished episode's step (487 for a run that
    raised at step 500), where the docs promise the steps the run took."""
    from online_trainer.errors import RunsFailedError

    class FailsAtUpdate(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.real == 23:  # real transitions of its one sub-env: env step 23 of the run
                raise RuntimeError("boom")

    with pytest.raises(RunsFailedError):
        OnlineTrainer(make_counting_vec(1), FailsAtUpdate, exp_dir=tmp_path).multi_run(
            2, total_steps=100, seed_offset=1, progress=False, num_workers=num_workers
        )
    runs = load_runs(tmp_path)
    assert runs["status"].tolist() == ["failed", "failed"]
    assert runs["env_steps"].tolist() == [23, 23]
    assert (runs["last_step"] < 23).all()  # the last episode ended before it
    assert (runs["wall_time"] > 0).all()
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [entry["global_step"] for entry in manifest["runs"]] == [23, 23]


def test_load_evaluations_gives_each_filmed_evaluation_its_video_under_the_directory_given(tmp_path, monkeypatch):
    """The evaluation records held their video's path as the run wrote it (from its working directory); the
    DataFrame had no way to find the video of an evaluation."""
    pytest.importorskip("imageio_ffmpeg")
    exp = tmp_path / "exp"
    monkeypatch.chdir(tmp_path)
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir="exp").multi_run(
        1,
        total_steps=40,
        seed_offset=0,
        eval_freq=10,
        eval_episodes=2,
        record_video=2,
        eval_env=make_counting_vec(1, render_mode="rgb_array"),
        progress=False,
    )
    (exp / "videos" / "run1" / "eval4_step40.mp4").unlink()  # a video deleted since
    monkeypatch.chdir(exp)
    videos = load_evaluations(".").set_index("eval_index")["video"]
    assert videos.dropna().to_dict() == {2: "videos/run1/eval2_step20.mp4"} and len(videos) == 4
    assert load_evaluations(exp)["video"][1] == str(exp / "videos" / "run1" / "eval2_step20.mp4")


def test_runs_are_named_by_their_numbers_when_the_column_reads_as_floats():
    """V11: a folder's evaluations (a column with NaN) named "ppo_killed/run 1.0 (interrupted)"."""
    import pandas as pd

    from online_trainer.analysis.selection import describe_runs

    runs = pd.DataFrame({"experiment": ["a", "a"], "run": [1.0, 2.5], "status": ["interrupted", "failed"]})
    assert describe_runs(runs) == "a/run 1 (interrupted), a/run 2.5 (failed)"


def test_load_evaluations_says_once_that_runs_were_left_running(tmp_path, caplog):
    """V11: the warning that runs left ``running`` by a killed writer count as interrupted came twice per call."""
    import json
    import logging

    from online_trainer import EvaluationOptions, OnlineTrainer, load_evaluations
    from tests.conftest import RecordingAgent, make_counting_vec

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, total_steps=40, evaluation=EvaluationOptions(freq=20, episodes=1), progress=False
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["runs"][0]["status"] = "running"  # as a writer killed mid-run leaves it
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        evals = load_evaluations(tmp_path)
    assert evals.attrs["runs"][0]["status"] == "interrupted"
    assert sum("were running when the process" in r.getMessage() for r in caplog.records) == 1


def test_the_budget_of_an_experiment_none_of_whose_runs_ended_is_read_from_its_call(tmp_path):
    """J13: load_runs gave an interrupted experiment's runs no budget (the manifest records it with a first run)."""
    from online_trainer.hooks import Hook

    class Stop(Hook):
        every_steps = 10

        def on_step(self, ctx):
            if ctx.global_step >= 20:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, total_steps=500, seed_offset=0, hooks=[Stop()], progress=False
        )
    runs = load_runs(tmp_path)
    assert runs["status"].tolist() == ["interrupted"]
    assert runs[["budget_unit", "budget"]].values.tolist() == [["steps", 500]]


def test_what_is_not_an_experiment_directory_is_refused_naming_it(tmp_path):
    """M22: load_episodes(42) raised "'int' object is not iterable", a file was said not to exist, and summarize of a
    path was told only "got str"."""
    from online_trainer import summarize

    (tmp_path / "c.yaml").write_text("x: 1\n")
    with pytest.raises(
        TypeError, match=r"Give an experiment directory \(a str or a pathlib.Path\) or a list of them, "
    ):
        load_episodes(42)
    with pytest.raises(NotADirectoryError, match=r"c.yaml is a file, not an experiment directory: give the folder"):
        load_episodes(tmp_path / "c.yaml")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "metrics_run1_old.pkl").write_text("a user's copy")  # not an experiment's name (M22)
    with pytest.raises(FileNotFoundError, match=r"mine holds no experiment \(no manifest.json or metrics_run\{i\}"):
        load_episodes(tmp_path / "mine")
    with pytest.raises(TypeError, match=r"but got 'runs/exp': pass load_episodes\('runs/exp'\) instead"):
        summarize("runs/exp")
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'lastk' \(did you mean 'last_k'\?\)"):
        summarize(None, lastk=3)


def test_an_experiment_whose_runs_were_all_cut_off_has_the_env_id_its_env_json_records(tmp_path):
    """V22: compare --include-unfinished said an experiment killed before any run ended had "no env id on record",
    though its env.json named CartPole-v1 (the manifest records it when a run ends)."""
    import gymnasium as gym

    from online_trainer.agents import RandomAgent
    from online_trainer.analysis.dataframes import env_id_of

    OnlineTrainer(lambda: gym.make_vec("CartPole-v1", 2), RandomAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=2, seed_offset=0, progress=False
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    del manifest["env_id"]  # as a manifest no run's end has written to
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert env_id_of(tmp_path) == "CartPole-v1"
    assert set(load_runs(tmp_path)["env_id"]) == {"CartPole-v1"}
