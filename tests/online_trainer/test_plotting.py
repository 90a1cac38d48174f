"""Tests of online_trainer.plotting: figures from a synthetic episode table."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from online_trainer.plotting import plot_final_performance, plot_learning_curves


def synthetic(groups=("a", "b"), num_runs=4, num_episodes=40) -> pd.DataFrame:
    """2 groups x 4 runs of noisy rising returns; group b learns faster."""
    rng = np.random.default_rng(0)
    rows = []
    for g, (name, lr) in enumerate(zip(groups, (0.001, 0.01))):
        for run in range(num_runs):
            steps = np.cumsum(rng.integers(20, 40, num_episodes))
            returns = (g + 1) * np.log1p(steps / 100) + rng.normal(0, 0.3, num_episodes)
            for e in range(num_episodes):
                rows.append({"experiment": name, "lr": lr, "run": run, "seed": run, "episode_index": e + 1,
                             "global_step": int(steps[e]), "ep_return": returns[e], "ep_length": 30,
                             "wall_time": 0.01 * e})
    return pd.DataFrame(rows)


def legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_learning_curves_figure(tmp_path):
    fig = plot_learning_curves(synthetic(), title="Toy")
    path = tmp_path / "curves.png"
    fig.savefig(path)
    assert path.stat().st_size > 10_000
    ax = fig.axes[0]
    assert len(ax.get_lines()) == 2
    assert len(ax.collections) == 2  # one CI band per group
    assert ax.get_xlabel() == "Environment steps"
    assert ax.get_ylabel() == "Episode return (IQM, 95% CI)"
    assert ax.get_title() == "Toy"
    assert sorted(legend_texts(fig)) == ["a (4 runs)", "b (4 runs)"]
    assert legend_texts(fig)[0] == "b (4 runs)"  # the legend lists the best final curve first
    assert not ax.spines["top"].get_visible() and not ax.spines["right"].get_visible()


def test_learning_curves_per_episode_mean_without_band_grouped_by_hyperparameter():
    fig = plot_learning_curves(synthetic(), x="episode_index", stat="mean", ci=None, group_by="lr")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Episodes"
    assert ax.get_ylabel() == "Episode return (mean)"
    assert len(ax.collections) == 0
    assert sorted(legend_texts(fig)) == ["lr=0.001 (4 runs)", "lr=0.01 (4 runs)"]


def test_learning_curves_without_groups_and_a_90_percent_band():
    fig = plot_learning_curves(synthetic(), group_by=[], ci=0.9, stat="median", smooth=5)
    assert legend_texts(fig) == ["8 runs"]
    assert fig.axes[0].get_ylabel() == "Episode return (median, 90% CI)"


def test_learning_curves_draw_into_given_axes_and_leave_pyplot_alone():
    before = plt.get_fignums()
    fig = Figure()
    ax = fig.add_subplot()
    assert plot_learning_curves(synthetic(), ax=ax) is fig
    assert len(ax.get_lines()) == 2
    plot_learning_curves(synthetic())
    assert plt.get_fignums() == before


def test_learning_curves_unknown_x_names_it():
    with pytest.raises(ValueError, match=r"x='env_steps' is not a column of the data"):
        plot_learning_curves(synthetic(), x="env_steps")


def test_learning_curves_unknown_stat_and_data_type():
    with pytest.raises(ValueError, match="stat='max'"):
        plot_learning_curves(synthetic(), stat="max")
    with pytest.raises(TypeError, match="data must be a DataFrame of episodes, an experiment directory"):
        plot_learning_curves(42)


def test_learning_curves_from_real_experiment_directories(tmp_path):
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    dirs = [tmp_path / "a", tmp_path / "b"]
    for exp_dir in dirs:
        OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp_dir).multi_run(
            3, num_episodes=12, seed_offset=0, progress=False)
    fig = plot_learning_curves(dirs)
    fig.savefig(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert len(fig.axes[0].get_lines()) == 2
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["a (3 runs)", "b (3 runs)"]


def test_final_performance_figure(tmp_path):
    fig = plot_final_performance(synthetic(), last_k=5)
    fig.savefig(tmp_path / "final.png")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a (4 runs)", "b (4 runs)"]
    assert ax.get_xlabel() == "Return of the last 5 episodes (IQM, 95% CI)"
    assert len(ax.collections) == 2  # the runs' dots, one scatter per group
    fig = plot_final_performance(synthetic(), after_step=500, stat="mean", ci=None, show_runs=False)
    assert fig.axes[0].get_xlabel() == "Return after step 500 (mean)"
    assert len(fig.axes[0].collections) == 0
