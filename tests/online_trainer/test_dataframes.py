"""load_episodes: one row per episode, hyperparameters as columns, crashed and swept experiments."""

from __future__ import annotations


import pytest

from online_trainer import OnlineTrainer, TruncatedMetricsWarning, load_episodes
from online_trainer.seeding import SEED_STRIDE
from tests.conftest import RecordingAgent, make_counting_vec


def run(exp_dir, num_runs=2, episodes=5, **kwargs):
    return OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp_dir).multi_run(
        num_runs, num_episodes=episodes, seed_offset=1, progress=False, **kwargs)


def test_one_experiment(tmp_path):
    runs = run(tmp_path, tuning_hp={"lr": 0.1})
    df = load_episodes(tmp_path)
    assert list(df.columns) == ["run", "seed", "episode_index", "global_step", "ep_return", "ep_length", "wall_time", "lr"]
    assert len(df) == 10
    assert df["seed"].tolist() == [1] * 5 + [1 + SEED_STRIDE] * 5
    assert df["ep_return"].tolist() == [r["ep_return"] for rs in runs for r in rs]
    assert (df["lr"] == 0.1).all()


def test_several_experiments_get_an_experiment_column(tmp_path):
    run(tmp_path / "x", num_runs=1)
    run(tmp_path / "y", num_runs=2)
    df = load_episodes([tmp_path / "x", tmp_path / "y"])
    assert df.columns[0] == "experiment"
    assert df.groupby("experiment")["run"].nunique().to_dict() == {"x": 1, "y": 2}
    # a directory holding experiments (a sweep) loads them all
    assert len(load_episodes(tmp_path)) == len(df)


def test_crashed_experiment_loads_complete_chunks(tmp_path):
    run(tmp_path, num_runs=1, episodes=20, metrics_flush_every=5)
    path = tmp_path / "metrics_run0.pkl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])  # the last chunk is cut short
    with pytest.warns(TruncatedMetricsWarning):
        df = load_episodes(tmp_path)
    assert df["episode_index"].tolist() == list(range(1, 16))


def test_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_episodes(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="holds no experiment"):
        load_episodes(tmp_path)
