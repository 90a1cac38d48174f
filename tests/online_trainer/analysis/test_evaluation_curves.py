"""plot_evaluation_curves: report's eval_curves.png from a notebook (Z11 found no Python route to it)."""

from __future__ import annotations

import numpy as np
import pytest

from online_trainer import EvaluationOptions, OnlineTrainer, load_evaluations, plot_evaluation_curves
from tests.conftest import RecordingAgent, make_counting_vec


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    exp_dir = tmp_path_factory.mktemp("evaluated")
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp_dir).multi_run(
        3, total_steps=300, seed_offset=0, evaluation=EvaluationOptions(freq=100, episodes=2), progress=False
    )
    return exp_dir


def test_the_curve_is_the_iqm_of_the_runs_evaluations_at_their_median_step(evaluated):
    evals = load_evaluations(evaluated)
    figure = plot_evaluation_curves(evaluated)
    (line,) = [line for line in figure.axes[0].get_lines() if line.get_label().endswith("3 runs")]
    evals["slot"] = evals.groupby("run").cumcount()
    expected_x = evals.groupby("slot")["global_step"].median().to_numpy(float)
    # the IQM of 3 runs is their mean (the 25% trimmed mean trims nothing of 3)
    expected_y = evals.groupby("slot")["eval_return"].mean().to_numpy(float)
    np.testing.assert_allclose(line.get_xdata(), expected_x)
    np.testing.assert_allclose(line.get_ydata(), expected_y)
    assert line.get_marker() == "o"
    assert figure.axes[0].get_ylabel() == "Evaluation return, mean per evaluation\n(IQM, 95% CI across runs)"


def test_a_table_and_the_directories_draw_the_same_and_episodes_trained_is_an_axis(evaluated):
    from_dir = plot_evaluation_curves(evaluated, stat="mean", ci=None)
    from_table = plot_evaluation_curves(load_evaluations(evaluated), stat="mean", ci=None)
    (a,), (b,) = (
        [line for line in f.axes[0].get_lines() if line.get_label().endswith("3 runs")] for f in (from_dir, from_table)
    )
    np.testing.assert_array_equal(a.get_xydata(), b.get_xydata())
    assert from_dir.axes[0].get_ylabel() == "Evaluation return, mean per evaluation\n(mean)"
    by_episodes = plot_evaluation_curves(evaluated, x="episodes_trained")
    assert by_episodes.axes[0].get_xlabel() == "Episodes trained"


def test_mistakes_are_named(evaluated, tmp_path):
    with pytest.raises(ValueError, match=r"x='episode_index': evaluation curves are drawn against 'global_step' or"):
        plot_evaluation_curves(evaluated, x="episode_index")
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "plain").multi_run(
        1, num_episodes=2, progress=False
    )
    with pytest.raises(ValueError, match=r"There is no evaluation to draw: the runs ran none"):
        plot_evaluation_curves(tmp_path / "plain")


def test_a_curve_of_one_evaluation_draws_its_interval(tmp_path):
    """H12: a configuration with one scheduled evaluation was a bare dot under an axis saying "95% CI"."""
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        3, total_steps=150, seed_offset=0, evaluation=EvaluationOptions(freq=100, episodes=2), progress=False
    )
    evals = load_evaluations(tmp_path)
    # the evaluation at step 100 only, as of runs a hook stopped after it (without the runs' budgets, which hold a
    # run's last value up to its budget)
    one = evals[evals["global_step"] < 150].assign(eval_return=lambda d: d["run"] * 10.0)
    one.attrs = {}
    figure = plot_evaluation_curves(one)
    bars = [line for line in figure.axes[0].get_lines() if line.get_linewidth() == 5]
    (bar,) = bars
    low, high = sorted(bar.get_ydata())
    assert low < 20.0 < high and bar.get_xdata()[0] == bar.get_xdata()[1]


def test_one_directory_drawn_alone_takes_its_colour_by_its_name(tmp_path):
    """V19: plot_learning_curves("sw/lr=0.01", colors={"lr=0.01": ...}) was refused: "its groups are None"."""
    from matplotlib.colors import to_hex

    from online_trainer import plot_final_performance, plot_learning_curves

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.sweep(
        {"lr": [0.1]},
        num_runs=2,
        total_steps=200,
        seed_offset=0,
        progress=False,
        evaluation=EvaluationOptions(freq=100, episodes=2),
    )
    alone = tmp_path / "lr=0.1"
    for plot in (plot_learning_curves, plot_evaluation_curves):
        figure = plot(alone, colors={"lr=0.1": "#ff0000"})
        assert {to_hex(line.get_color()) for line in figure.axes[0].get_lines() if line.get_label() == "2 runs"} == {
            "#ff0000"
        }
    plot_final_performance(alone, colors={"lr=0.1": "#ff0000"})
    for plot in (plot_learning_curves, plot_evaluation_curves):  # V20: evaluation curves listed None
        with pytest.raises(ValueError, match=r"its groups are 'lr=0.1' \("):
            plot(alone, colors={"lr=0.5": "red"})
