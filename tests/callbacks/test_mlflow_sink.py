"""MLflowCallback: read back with MLflow's own client, from the SQLite store the parent created."""

from __future__ import annotations

import json
import logging

import pytest

from online_trainer import OnlineTrainer
from online_trainer.callbacks import MLflowCallback
from tests.conftest import RecordingAgent, make_counting_vec

mlflow = pytest.importorskip("mlflow")


def mlflow_runs(exp_dir):
    client = mlflow.MlflowClient(f"sqlite:///{exp_dir}/mlflow.db")
    experiment = client.get_experiment_by_name(exp_dir.name)
    runs = {int(r.data.tags["online_trainer.run"]): r for r in client.search_runs([experiment.experiment_id])}
    return client, experiment, runs


def history(client, run, name):
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, name), key=lambda m: m.step)]


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [1, 2])
def test_one_mlflow_run_per_seed_holds_what_the_runner_logged(tmp_path, num_workers):
    exp_dir = tmp_path / "cartpole_dqn"
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp_dir, args={"lr": 0.1})
    trainer.call_back = MLflowCallback()
    records = trainer.multi_run(
        2,
        num_episodes=6,
        seed_offset=0,
        tuning_hp={"lr": 0.1},
        num_workers=num_workers,
        eval_freq=3,
        eval_episodes=2,
        progress=False,
    )

    client, experiment, runs = mlflow_runs(exp_dir)
    assert experiment.artifact_location == (exp_dir / "mlartifacts").as_uri()
    assert sorted(runs) == [1, 2]
    ids = json.loads((exp_dir / "mlflow_runs.json").read_text())
    assert {int(k): v for k, v in ids.items()} == {run: r.info.run_id for run, r in runs.items()}
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    for run, mlflow_run in runs.items():
        assert mlflow_run.info.run_name == f"run_{run}"
        assert mlflow_run.info.status == "FINISHED"
        assert mlflow_run.data.params == {"seed": str(manifest["seeds"][run - 1]), "run": str(run), "lr": "0.1"}
        own = list(records[run - 1])
        assert history(client, mlflow_run, "ep_return") == [(r["episode_index"], r["ep_return"]) for r in own]
        assert history(client, mlflow_run, "ep_length") == [(r["episode_index"], r["ep_length"]) for r in own]
        evaluations = trainer.evaluations[run - 1]
        assert history(client, mlflow_run, "eval/ep_return") == [(e["global_step"], e["mean"]) for e in evaluations]
        losses = history(client, mlflow_run, "agents/loss")
        assert [value for _, value in losses] == [float(k) for k in range(1, len(losses) + 1)]
        artifacts = {a.path for a in client.list_artifacts(mlflow_run.info.run_id)}
        assert artifacts == {"args.yaml", "manifest.json"}


def test_without_exp_dir_or_tracking_uri_it_stops_before_any_run(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    trainer.call_back = MLflowCallback()
    with pytest.raises(ValueError, match=r"MLflowCallback\(tracking_uri=None\) .* exp_dir is None: .*tracking_uri="):
        trainer.multi_run(1, num_episodes=2, progress=False)


@pytest.mark.slow
def test_a_run_done_again_logs_into_the_same_mlflow_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow puts the artifacts of a given store in ./mlruns
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    callback = MLflowCallback(tracking_uri=uri, experiment_name="shared")
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    callback.setup(exp_dir, {1: 7})
    first = json.loads((exp_dir / "mlflow_runs.json").read_text())
    callback.start_run(1, 7, {}, str(exp_dir), "run_1")
    callback({"ep_return": 1.0}, "ep_return/run_1", 1, force=True)
    callback.end_run(1, "failed")
    callback = MLflowCallback(tracking_uri=uri, experiment_name="shared")
    callback.setup(exp_dir, {1: 7})
    assert json.loads((exp_dir / "mlflow_runs.json").read_text()) == first
    callback.start_run(1, 7, {}, str(exp_dir), "run_1")
    callback({"ep_return": 2.0}, "ep_return/run_1", 2, force=True)
    callback.end_run(1, "finished")
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("shared").experiment_id])
    assert run.info.run_id == first["1"] and run.info.status == "FINISHED"
    assert history(client, run, "ep_return") == [(1, 1.0), (2, 2.0)]

    # without an exp_dir, the runs go to the given store, under the experiment "online_trainer"
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    trainer.call_back = MLflowCallback(tracking_uri=uri)
    (records,) = trainer.multi_run(1, num_episodes=3, seed_offset=0, progress=False)
    (run,) = client.search_runs([client.get_experiment_by_name("online_trainer").experiment_id])
    assert history(client, run, "ep_return") == [(r["episode_index"], r["ep_return"]) for r in records]


def test_values_outside_a_run_are_refused():
    with pytest.raises(RuntimeError, match="outside a run: .*call start_run"):
        MLflowCallback(tracking_uri="sqlite:///unused.db")({"x": 1.0}, "t", 0)


@pytest.mark.slow
def test_an_interrupted_run_resumed_holds_the_points_of_an_uninterrupted_one(tmp_path, monkeypatch):
    """Values sent after the checkpoint, before the interruption, are not sent again by the resumed run."""
    monkeypatch.chdir(tmp_path)  # MLflow puts the artifacts of a given store in ./mlruns
    import gymnasium as gym

    from online_trainer.agents import PPOAgent
    from tests.online_trainer.experiment.test_resume import Crash

    uri = f"sqlite:///{tmp_path / 'store.db'}"

    def trainer(name):
        t = OnlineTrainer(
            lambda: gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"),
            lambda env: PPOAgent(env, n_steps=64),
            exp_dir=tmp_path / name,
        )
        t.call_back = MLflowCallback(tracking_uri=uri, flush_values=20)
        return t

    kw = dict(total_steps=1000, seed_offset=3, checkpoint_freq=300, eval_freq=400, eval_episodes=2, progress=False)
    trainer("ref").multi_run(1, **kw)
    with pytest.raises(KeyboardInterrupt):
        trainer("cut").multi_run(1, hooks=[Crash(700)], **kw)
    trainer("cut").multi_run(1, resume=True, **kw)
    client = mlflow.MlflowClient(uri)
    points = {}
    for name in ("ref", "cut"):
        (run,) = client.search_runs([client.get_experiment_by_name(name).experiment_id])
        points[name] = {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics
            if key.split("/")[0] not in ("stats", "timing")
        }
    assert {"ep_return", "eval/ep_return", "agents/policy_loss"} <= set(points["ref"])
    assert points["cut"] == points["ref"]


def test_what_a_resumed_run_cannot_make_exact_is_a_warning_naming_the_run_and_the_range(tmp_path, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow puts the artifacts of a given store in ./mlruns
    from online_trainer.callbacks.store_points import StorePosition

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    callback = MLflowCallback(tracking_uri=uri, experiment_name="shared")
    callback.setup(exp_dir, {1: 7})
    callback.start_run(1, 7, {}, str(exp_dir), "run_1")
    callback.series("ep_return", "ep_return/run_1", [1.0, 2.0, 3.0, 3.0, 5.0], range(1, 6))
    callback.end_run(1, "interrupted")
    callback = MLflowCallback(tracking_uri=uri, experiment_name="shared")
    # a checkpoint after 2 episodes, one of which the store holds twice; episodes 3 to 5 sent after it
    callback.rewind("run_1", StorePosition({"ep_return": (1, 1)}, {"ep_return": "episode"}).to_state())
    callback.setup(exp_dir, {1: 7})
    with caplog.at_level(logging.WARNING):
        callback.start_run(1, 7, {}, str(exp_dir), "run_1")
        callback.series("ep_return", "ep_return/run_1", [2.0, 3.0, 4.0, 5.0, 6.0], range(2, 7))
        callback.end_run(1, "finished")
    client = mlflow.MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("shared").experiment_id])
    assert history(client, run, "ep_return") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 3.0), (5, 5.0), (6, 6.0)]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"MLflowCallback, MLflow run {run.info.run_id}, run_1: 1 points of 'ep_return' from episode 4 to 4 were in the "
        "store already, sent before the interruption, with other values than the resumed run logged (it is not "
        "deterministic); the store keeps the earlier values"
    ]


def test_a_moved_experiment_says_where_its_mlflow_artifacts_stay(tmp_path, caplog):
    """Resumed after `mv`, the runs' artifacts were written to the old path without a word (tester J3)."""
    import shutil

    callback = MLflowCallback()
    callback.setup(tmp_path / "a", {1: 7})
    callback.setup(tmp_path / "a", {1: 7})
    assert "was moved" not in caplog.text
    shutil.move(tmp_path / "a", tmp_path / "b")
    with caplog.at_level(logging.WARNING):
        MLflowCallback().setup(tmp_path / "b", {1: 7, 2: 8})
    (said,) = [r.getMessage() for r in caplog.records if "was moved or copied" in r.getMessage()]
    assert f"({(tmp_path / 'a' / 'mlartifacts').as_uri()}" in said and (tmp_path / "b" / "mlartifacts").as_uri() in said


def test_a_tracking_uri_of_no_mlflow_store_is_refused_naming_the_argument(tmp_path):
    """Tester H10: tracking_uri='fiel:...' failed at the call with MLflow's words on its model registry."""
    with pytest.raises(ValueError) as refused:
        MLflowCallback(tracking_uri=f"fiel:{tmp_path}")
    assert str(refused.value).startswith(
        f"MLflowCallback got tracking_uri='fiel:{tmp_path}', whose scheme 'fiel' no MLflow store takes (did you mean "
        "'file'?): give a path, 'file:/absolute/path', 'sqlite:///mlflow.db' or 'http://host:5000'"
    )
    for fine in (str(tmp_path), f"file:{tmp_path}", "sqlite:///mlflow.db", "postgresql+psycopg2://u@h/db"):
        MLflowCallback(tracking_uri=fine)


def test_a_tracking_server_nothing_answers_at_is_refused_at_once_and_nothing_is_kept(tmp_path):
    """R19: MLflow retried http://127.0.0.1:59999 for four minutes, then raised its own error naming no argument."""
    import socket
    import time

    with socket.socket() as probe:  # a port nothing listens at
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.call_back = MLflowCallback(tracking_uri=f"http://127.0.0.1:{port}")
    start = time.monotonic()
    with pytest.raises(ConnectionError) as refused:
        trainer.multi_run(1, num_episodes=2, progress=False)
    assert time.monotonic() - start < 30
    assert str(refused.value).startswith(
        f"MLflowCallback(tracking_uri='http://127.0.0.1:{port}'): nothing answers at 127.0.0.1:{port} ("
    )
    assert "Start the tracking server" in str(refused.value) and not (tmp_path / "exp").exists()


def test_a_sqlite_store_in_a_directory_that_does_not_exist_is_refused(tmp_path):
    """R19: sqlite:////nonexistent_dir/sub/mlflow.db made those directories at the filesystem's root, without a word."""
    uri = f"sqlite:///{tmp_path}/missing/sub/mlflow.db"
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.call_back = MLflowCallback(tracking_uri=uri)
    with pytest.raises(FileNotFoundError) as refused:
        trainer.multi_run(1, num_episodes=2, progress=False)
    assert str(refused.value).startswith(
        f"MLflowCallback(tracking_uri={uri!r}): the directory of the store, {tmp_path}/missing/sub, does not exist."
    )
    assert not (tmp_path / "missing").exists() and not (tmp_path / "exp").exists()


def test_a_tracking_uri_where_something_else_answers_is_refused_naming_it(tmp_path):
    """V19: a plain HTTP server at the tracking_uri gave MLflow's "error code 404 != 200" and the page's HTML."""
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
        trainer.call_back = MLflowCallback(tracking_uri=uri)
        with pytest.raises(ConnectionError) as refused:
            trainer.multi_run(1, num_episodes=2, progress=False)
    finally:
        server.shutdown()
        server.server_close()
    assert str(refused.value).startswith(
        f"MLflowCallback(tracking_uri={uri!r}): what answers there is not an MLflow tracking store ("
    )
    assert not (tmp_path / "exp").exists()


def test_what_mlflow_prints_as_a_run_ends_is_logged_not_printed(tmp_path, capsys, caplog, monkeypatch):
    """V20: with a tracking server, MLflow wrote "View run run_1 at: URL" and "View experiment at: URL" to stdout as each
    run ended, two lines a run, where the library prints nothing but progress."""
    import sys

    callback = MLflowCallback(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")

    class Client:  # what MLflow's client does for a tracking server, where a file store prints nothing
        def set_terminated(self, run_id, status):
            sys.stdout.write(f"View run {run_id} at: http://host/#/runs/{run_id}\n")

    monkeypatch.setattr(callback, "_client", lambda uri: Client())
    callback._active = ("uri", "abc", None)
    with caplog.at_level(logging.INFO, logger="online_trainer"):
        callback._end_active("FINISHED")
    assert capsys.readouterr().out == ""
    assert "MLflow: View run abc at: http://host/#/runs/abc" in caplog.text
