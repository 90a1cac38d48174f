"""Tests of online_trainer.analysis.plotting: figures from a synthetic episode table."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from online_trainer.analysis.plotting import plot_final_performance, plot_learning_curves


def synthetic(groups=("a", "b"), num_runs=4, num_episodes=40) -> pd.DataFrame:
    """2 groups x 4 runs of noisy rising returns; group b learns faster."""
    rng = np.random.default_rng(0)
    rows = []
    for g, (name, lr) in enumerate(zip(groups, (0.001, 0.01))):
        for run in range(num_runs):
            steps = np.cumsum(rng.integers(20, 40, num_episodes))
            returns = (g + 1) * np.log1p(steps / 100) + rng.normal(0, 0.3, num_episodes)
            for e in range(num_episodes):
                rows.append(
                    {
                        "experiment": name,
                        "lr": lr,
                        "run": run,
                        "seed": run,
                        "episode_index": e + 1,
                        "global_step": int(steps[e]),
                        "ep_return": returns[e],
                        "ep_length": 30,
                        "wall_time": 0.01 * e,
                    }
                )
    return pd.DataFrame(rows)


def legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_learning_curves_figure(tmp_path):
    fig = plot_learning_curves(synthetic(), title="Toy")
    path = tmp_path / "curves.png"
    fig.savefig(path)
    assert path.stat().st_size > 10_000
    ax = fig.axes[0]
    # runs end at different steps: each curve is a thin line over its whole range and a thick one where all 4 runs are
    assert sorted(line.get_linewidth() for line in ax.get_lines()) == [0.9, 0.9, 1.8, 1.8]
    assert len(ax.collections) == 2  # one CI band per group
    assert ax.get_xlabel() == "Environment steps"
    assert ax.get_ylabel() == "Episode return (IQM, 95% CI)"
    assert ax.get_title() == "Toy"
    assert legend_texts(fig) == ["b (4 runs)", "a (4 runs)", "thin: fewer runs have data"]  # best final curve first
    assert not ax.spines["top"].get_visible() and not ax.spines["right"].get_visible()


def test_learning_curves_per_episode_mean_without_band_grouped_by_hyperparameter():
    fig = plot_learning_curves(synthetic(), x="episode_index", stat="mean", ci=None, group_by="lr")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Episodes"
    assert ax.get_ylabel() == "Episode return (mean)"
    assert len(ax.collections) == 0
    assert len(ax.get_lines()) == 2  # every run has every episode index: one thick line per group
    assert sorted(legend_texts(fig)) == ["lr=0.001 (4 runs)", "lr=0.01 (4 runs)"]


def test_learning_curves_without_groups_and_a_90_percent_band():
    fig = plot_learning_curves(synthetic(), group_by=[], ci=0.9, stat="median", smooth=5, span="common")
    assert legend_texts(fig) == ["8 runs"]
    assert fig.axes[0].get_ylabel() == "Episode return, mean of last 5 episodes\n(median, 90% CI across runs)"
    assert fig.axes[0].get_legend().get_title().get_text() == "each run: trailing mean of 5 episodes"


def test_learning_curves_draw_into_given_axes_and_leave_pyplot_alone():
    before = plt.get_fignums()
    fig = Figure()
    ax = fig.add_subplot()
    assert plot_learning_curves(synthetic(), ax=ax, span="common") is fig
    assert len(ax.get_lines()) == 2
    plot_learning_curves(synthetic())
    assert plt.get_fignums() == before


def test_learning_curves_in_a_subfigure_return_the_figure_that_can_be_saved():
    fig = Figure()
    ax = fig.subfigures(1, 2)[1].add_subplot()
    assert plot_learning_curves(synthetic(), ax=ax, span="common") is fig
    fig = Figure()
    ax = fig.subfigures(1, 2)[0].add_subplot()
    assert plot_final_performance(synthetic(), ax=ax) is fig


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
            3, num_episodes=12, seed_offset=0, progress=False
        )
    fig = plot_learning_curves(dirs, x="episode_index")
    fig.savefig(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
    assert len(fig.axes[0].get_lines()) == 2
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["a (3 runs)", "b (3 runs)"]


def test_final_performance_figure(tmp_path):
    fig = plot_final_performance(synthetic(), last_k=5)
    fig.savefig(tmp_path / "final.png")
    ax = fig.axes[0]
    # best first (top), as a sweep ranks its configurations; they were in alphabetical order (an outside tester)
    ticks = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels())), reverse=True)
    assert [text for _, text in ticks] == ["b (4 runs)", "a (4 runs)"]
    assert ax.get_xlabel() == "Return of the last 5 episodes (IQM, 95% CI)"
    assert len(ax.collections) == 2  # the runs' dots, one scatter per group
    # what the marks are, under the axes (an outside tester could not tell the faint dots from the estimate)
    assert "Solid dot: the IQM across runs; bar: its 95% CI; faint dots: each run's final return." in notes(fig)
    fig = plot_final_performance(synthetic(), after_step=500, stat="mean", ci=None, show_runs=False)
    assert fig.axes[0].get_xlabel() == "Return after step 500 (mean)"
    assert len(fig.axes[0].collections) == 0
    assert "Solid dot: the mean across runs." in notes(fig) and "faint" not in notes(fig)


# ----------------------------------------------------------------------------- experiments of known shape
def shaped(num_runs=4, num_episodes=30, short=None, statuses=None, early=None, early_length=10) -> pd.DataFrame:
    """Runs of one experiment whose episode e (1-based) lasts 10 steps and returns e.

    ``short``: run -> its number of episodes; ``statuses``: run -> status; ``early``: the
    return of the first 3 episodes of every run (extreme values), which last
    ``early_length`` steps.
    """
    rows = []
    for run in range(1, num_runs + 1):
        step = 0
        for e in range(1, (short or {}).get(run, num_episodes) + 1):
            ret = early if early is not None and e <= 3 else float(e)
            step += early_length if e <= 3 else 10
            rows.append(
                {
                    "run": run,
                    "seed": run,
                    "status": (statuses or {}).get(run, "finished"),
                    "episode_index": e,
                    "global_step": step,
                    "ep_return": ret,
                    "ep_length": 10,
                    "wall_time": 0.1 * e,
                }
            )
    return pd.DataFrame(rows)


def notes(fig: Figure) -> str:
    return " ".join(" ".join(t.get_text().split()) for t in fig.axes[0].texts)


def test_a_short_run_draws_a_thin_line_and_the_count_at_the_end():
    fig = plot_learning_curves(shaped(short={2: 10}))
    ax = fig.axes[0]
    thin, thick = sorted(ax.get_lines(), key=lambda line: line.get_linewidth())
    assert thin.get_xdata()[-1] == 300  # the whole range: the short run does not clip the curve
    thick_y = np.asarray(thick.get_ydata(), dtype=float)
    thick_x = np.asarray(thick.get_xdata(), dtype=float)
    assert np.isfinite(thick_y[thick_x <= 100]).all() and np.isnan(thick_y[thick_x > 100]).all()
    assert legend_texts(fig) == ["4 runs", "thin: fewer runs have data"]
    assert "n=3" in notes(fig)


def test_a_failed_run_is_left_out_of_the_legend_and_noted(caplog):
    df = shaped(short={4: 3}, statuses={4: "failed"})
    with caplog.at_level("WARNING"):
        fig = plot_learning_curves(df)
    assert legend_texts(fig) == ["3 runs"]  # the runs actually drawn, all over the whole range
    assert fig.axes[0].get_xlim()[1] == 300
    assert "Left out: 1 run that did not finish (1 failed)." in notes(fig)
    assert "run 4 (failed)" in caplog.text
    fig = plot_learning_curves(df, include_unfinished=True)
    assert legend_texts(fig) == ["4 runs", "thin: fewer runs have data"]
    assert "Left out" not in notes(fig)


def test_runs_left_out_of_several_experiments_are_named_with_their_experiment():
    """Tester V15: a report of two experiments said "Left out: 1 run that did not finish (1 failed)", not whose."""
    df = pd.concat(
        [shaped().assign(experiment="a"), shaped(short={2: 3}, statuses={2: "failed"}).assign(experiment="b")],
        ignore_index=True,
    )
    fig = plot_learning_curves(df)
    assert "Left out: 1 run that did not finish (1 failed): b run 2." in notes(fig)


def test_runs_without_episodes_are_noted():
    df = shaped(num_runs=2)
    df.attrs["runs"] = [{"run": r, "status": "finished", "num_episodes": 30 if r <= 2 else 0} for r in range(1, 5)]
    fig = plot_learning_curves(df)
    assert legend_texts(fig) == ["2 runs"]
    assert "Not drawn: 2 runs without a finished episode." in notes(fig)


def test_extreme_early_returns_cut_the_y_axis_with_a_note():
    df = shaped(early=-120_000.0)  # returns 1..30, but the first three are -120k
    fig = plot_learning_curves(df, x="episode_index", ci=None)
    low, high = fig.axes[0].get_ylim()
    assert -200 < low < 0 and 30 <= high < 100
    assert "y axis cut to" in notes(fig) and "10% of the curve points lie outside" in notes(fig)
    full = plot_learning_curves(df, x="episode_index", ci=None, ylim=None)
    assert full.axes[0].get_ylim()[0] < -100_000
    fixed = plot_learning_curves(df, x="episode_index", ci=None, ylim=(-50, 50))
    assert fixed.axes[0].get_ylim() == (-50, 50) and "y axis" not in notes(fixed)
    symlog = plot_learning_curves(df, x="episode_index", ci=None, yscale="symlog")
    assert symlog.axes[0].get_yscale() == "symlog" and symlog.axes[0].get_ylim()[0] < -120_000
    assert "y axis" not in notes(symlog)


def test_auto_scale_turns_symlog_when_a_cut_would_hide_most_of_the_curve():
    # as on CliffWalking: the first 3 episodes are extreme and long, most of the steps
    df = shaped(early=-120_000.0, early_length=1000)
    fig = plot_learning_curves(df, ci=None)
    assert fig.axes[0].get_yscale() == "symlog"
    assert "y axis symlog (linear within ±10)" in notes(fig)
    assert "would hide 88% of their points" in notes(fig)  # grid 1000..3270: points up to 3000 are extreme
    fig.draw_without_rendering()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert {"0", "-5", "$-10^{1}$", "$-10^{5}$"} <= set(labels)  # labelled inside the linear part too
    assert plot_learning_curves(df, ci=None, yscale="linear").axes[0].get_yscale() == "linear"


def test_a_symlog_axis_with_one_decade_tick_on_a_side_is_labelled_between_its_decades():
    """C13: CartPole returns up to 500 on a symlog axis linear within ±100 had no label above 10^2."""
    df = shaped(early=-5000.0)
    df["ep_return"] = np.where(df["ep_return"] > 0, df["ep_return"] * 16, df["ep_return"])  # up to 480
    fig = plot_learning_curves(df, x="episode_index", ci=None, yscale="symlog")
    fig.draw_without_rendering()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    # V15: in one notation with the decades (they read 10^2 then 200)
    assert {"$10^{2}$", "$2\\times10^{2}$"} <= set(labels) and "$-10^{3}$" in labels  # two decades on the negative side
    assert not [label for label in labels if "-2" in label or label == "200"]
    assert not [label for label in labels if "10^{3}$" in label and not label.startswith("$-")]  # beyond the axis


def test_ordinary_curves_are_not_cut():
    fig = plot_learning_curves(synthetic(), ylim="auto")
    assert fig.axes[0].get_yscale() == "linear" and "y axis" not in notes(fig)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"yscale": "log"}, r"yscale must be one of \('auto', 'linear', 'symlog'\), got yscale='log'"),
        ({"ylim": (1, 0)}, r"ylim must be finite with low < high, got ylim=\(1, 0\)"),
        ({"ylim": "tight"}, "ylim must be 'auto', None or a pair"),
        ({"span": "both"}, "span must be one of"),
    ],
)
def test_axis_option_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plot_learning_curves(synthetic(), **kwargs)


def test_final_performance_draws_the_iqm_not_the_mean():
    # final returns (last 5 episodes) 0, 0, 0, 0, 0, 0, 0 and 800 for one outlier run: mean 100, IQM 0
    rows = [
        {"run": r, "seed": r, "episode_index": e, "global_step": 10 * e, "ep_return": 800.0 if r == 7 else 0.0}
        for r in range(8)
        for e in range(1, 6)
    ]
    df = pd.DataFrame(rows)
    fig = plot_final_performance(df, stat="iqm", last_k=5, show_runs=False)
    marker = [line for line in fig.axes[0].get_lines() if line.get_marker() == "o"]
    assert len(marker) == 1 and marker[0].get_xdata()[0] == pytest.approx(0.0)
    fig = plot_final_performance(df, stat="mean", last_k=5, show_runs=False)
    marker = [line for line in fig.axes[0].get_lines() if line.get_marker() == "o"]
    assert marker[0].get_xdata()[0] == pytest.approx(100.0)


def test_final_performance_interval_is_the_statistics_interval():
    from online_trainer.analysis.stats import summarize

    df = synthetic()
    fig = plot_final_performance(df, stat="median", last_k=5, show_runs=False)
    summary = summarize(df, last_k=5).set_index("experiment")
    bars = [line for line in fig.axes[0].get_lines() if line.get_linewidth() == 5]
    ends = sorted(tuple(line.get_xdata()) for line in bars)
    expected = sorted((summary.loc[g, "median_lo"], summary.loc[g, "median_hi"]) for g in ("a", "b"))
    np.testing.assert_allclose(ends, expected)


def test_final_performance_notes_left_out_runs():
    fig = plot_final_performance(shaped(statuses={2: "interrupted"}), last_k=3)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["3 runs"]
    assert "Left out: 1 run that did not finish (1 interrupted)." in notes(fig)


def test_the_legend_beside_the_curves_leaves_room_for_their_end_labels(tmp_path):
    """The "n=1" labels at the ends of curves that fewer runs reach sat on the legend's title (an outside tester's find)."""
    df = pd.DataFrame(
        [
            {"experiment": name, "run": run, "episode_index": i, "global_step": 10 * i, "ep_return": float(i * k)}
            for k, name in enumerate(["a", "b"], start=1)
            for run in (1, 2, 3)
            for i in range(1, 30 if run == 1 else 20)  # run 1 goes further: both curves end on n=1
        ]
    )
    fig = plot_learning_curves(df, smooth=5)
    fig.savefig(tmp_path / "curves.png")
    renderer = fig._get_renderer()
    ends = [t for t in fig.axes[0].texts if t.get_text().startswith("n=")]
    assert len(ends) == 2
    legend = fig.axes[0].get_legend().get_window_extent(renderer)
    assert all(end.get_window_extent(renderer).x1 < legend.x0 for end in ends)
    assert legend.x1 <= fig.bbox.x1
    plt.close("all")


def test_the_end_labels_of_curves_ending_together_do_not_touch(tmp_path):
    """Two curves that end at about the same value on fewer runs drew their "n=1" labels over each other."""
    df = pd.DataFrame(
        [
            {"experiment": name, "run": run, "episode_index": i, "global_step": 10 * i, "ep_return": float(i + k)}
            for k, name in [(0.0, "a"), (0.3, "b"), (0.6, "c")]
            for run in (1, 2, 3)
            for i in range(1, 30 if run == 1 else 20)
        ]
    )
    fig = plot_learning_curves(df)
    fig.savefig(tmp_path / "curves.png")
    renderer = fig._get_renderer()
    ends = [t.get_window_extent(renderer) for t in fig.axes[0].texts if t.get_text().startswith("n=")]
    assert len(ends) == 3
    assert not any(one.overlaps(other) for k, one in enumerate(ends) for other in ends[k + 1 :])
    plt.close("all")


def test_the_legend_of_a_figure_made_here_stands_beside_the_curves(tmp_path):
    """Inside the axes, matplotlib's "best" place sat on a curve's tail and its n= label (an outside tester's find)."""
    df = pd.DataFrame(
        [
            {"experiment": name, "run": run, "episode_index": i, "global_step": 10 * i, "ep_return": float(i * k)}
            for k, name in enumerate(["a_rather_long_experiment_name", "b"], start=1)
            for run in (1, 2)
            for i in range(1, 30)
        ]
    )
    fig = plot_learning_curves(df)
    fig.savefig(tmp_path / "curves.png")
    renderer = fig._get_renderer()
    legend, axes = fig.axes[0].get_legend().get_window_extent(renderer), fig.axes[0].get_window_extent(renderer)
    assert legend.x0 > axes.x1 and legend.x1 <= fig.bbox.x1  # beside the axes, inside the figure
    assert axes.width > 0.5 * fig.bbox.width
    theirs, given = plt.subplots()
    plot_learning_curves(df, ax=given)  # the caller's axes keep their legend inside
    theirs.savefig(tmp_path / "theirs.png")
    renderer = theirs._get_renderer()
    assert given.get_legend().get_window_extent(renderer).x1 <= given.get_window_extent(renderer).x1 + 1
    plt.close("all")


def test_the_thin_entry_is_left_out_of_the_legend_when_no_thin_stretch_shows():
    """An outside tester: every plot of the quickstart's 5 runs said "thin: fewer runs have data" of a curve drawn
    thick from end to end (its first grid point, where only the run whose first episode ended first had data)."""
    df = shaped()
    df.loc[(df["run"] == 2) & (df["episode_index"] == 1), "global_step"] += 2  # its first episode ends at step 12
    fig = plot_learning_curves(df)
    thin, thick = sorted(fig.axes[0].get_lines(), key=lambda line: line.get_linewidth())
    assert np.isnan(np.asarray(thick.get_ydata(), dtype=float)[0])  # the first point still stands on fewer runs
    assert legend_texts(fig) == ["4 runs"]


def test_final_performance_with_long_names_keeps_its_caption_inside_the_figure(tmp_path):
    """Saved as the docs save figures (``fig.savefig(path)``), a sweep's plot cut its caption at the right edge:
    "... faint dots: each run's final retu" (an outside tester's find)."""
    fig = plot_final_performance(synthetic(groups=("lr=0.0006466,gamma=0.98", "lr=0.002188,gamma=0.98")), last_k=5)
    fig.savefig(tmp_path / "final.png")
    (caption,) = fig.axes[0].texts
    shown = caption.get_window_extent()
    assert fig.bbox.x0 <= shown.x0 and shown.x1 <= fig.bbox.x1 and fig.bbox.y0 <= shown.y0
    # the groups of group_by keep their sorted order (a hyperparameter from its lowest value)
    fig = plot_final_performance(synthetic(), last_k=5, group_by="lr")
    ticks = sorted(zip(fig.axes[0].get_yticks(), (t.get_text() for t in fig.axes[0].get_yticklabels())), reverse=True)
    assert [text for _, text in ticks] == ["lr=0.001 (4 runs)", "lr=0.01 (4 runs)"]


def test_a_group_has_one_colour_in_the_curves_and_the_final_performance():
    """R11: a sweep's lr=0.003 was orange in the learning curves and blue in the final performance (drawn best
    first, it took the first colour)."""
    from matplotlib.colors import to_hex

    curves = plot_learning_curves(synthetic())
    curve_colors = {
        line.get_label().split(" (")[0]: to_hex(line.get_color())
        for line in curves.axes[0].get_lines()
        if line.get_label() in ("a (4 runs)", "b (4 runs)")
    }
    final = plot_final_performance(synthetic(), last_k=5)
    ax = final.axes[0]
    by_y = {
        round(float(t), 3): label.get_text().split(" (")[0] for t, label in zip(ax.get_yticks(), ax.get_yticklabels())
    }
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    final_colors = {by_y[round(float(line.get_ydata()[0]), 3)]: to_hex(line.get_color()) for line in dots}
    assert curve_colors == final_colors and len(set(final_colors.values())) == 2


def test_the_y_label_and_the_legend_title_stay_inside_a_figure_with_notes():
    """Tester X14: with three lines of notes under a symlog axis the y label ran past the figure's top, and the
    legend's title lost its last letter at its right edge."""
    df = shaped(early=-900.0, early_length=1000, statuses={4: "failed"})
    fig = plot_learning_curves(df, smooth=10)
    assert len(notes(fig)) > 200 and "mean of last 10 episodes" in fig.axes[0].get_ylabel()  # 3 lines and more
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    box = fig.bbox
    for text in (fig.axes[0].yaxis.label, fig.axes[0].get_legend().get_title()):
        extent = text.get_window_extent(renderer)
        assert (
            box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1 and box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1
        )


def line_colors(fig: Figure) -> dict[str, str]:
    """The colour of each legend entry's curve, by its label."""
    from matplotlib.colors import to_hex

    return {line.get_label(): to_hex(line.get_color()) for line in fig.axes[0].get_legend().legend_handles}


def test_colors_keep_a_groups_colour_whatever_other_groups_are_drawn():
    """U17: a configuration's colour came from its place among the groups drawn: ``b`` was the palette's second colour
    beside ``a`` and its first alone, so two figures of one paper gave one method two colours."""
    both = plot_learning_curves(synthetic(), colors={"b": "#ff0000", "a": "#00aa00"})
    alone = plot_learning_curves(synthetic(groups=("x", "b")).query("experiment == 'b'"), colors={"b": "#ff0000"})
    assert line_colors(both)["b (4 runs)"] == line_colors(alone)["b (4 runs)"] == "#ff0000"
    assert line_colors(both)["a (4 runs)"] == "#00aa00"
    # a group left out of colors keeps the palette's colour of its place
    partial = plot_learning_curves(synthetic(), colors={"b": "#ff0000"})
    assert line_colors(partial)["a (4 runs)"] == "#0072b2"
    # by the value of a group_by column, and in the final-performance figure too
    by_lr = plot_learning_curves(synthetic(), group_by="lr", colors={0.01: "#ff0000"})
    assert line_colors(by_lr)["lr=0.01 (4 runs)"] == "#ff0000"
    finals = plot_final_performance(synthetic(), colors={"b": "#ff0000"})
    dots = [c for c in finals.axes[0].collections]
    assert any(np.allclose(c.get_facecolor()[0][:3], (1, 0, 0)) for c in dots)


@pytest.mark.parametrize(
    ("colors", "match"),
    [
        ({"c": "red"}, r"colors names 'c', not a group of the data: its groups are 'a', 'b'"),
        ({"a": "not-a-colour"}, r"colors has \{'a': 'not-a-colour'\}: not a colour matplotlib knows"),
        (["red", "blue"], r"colors=\['red', 'blue'\]: give a dict from each group to a matplotlib colour"),
    ],
)
def test_colors_that_name_no_group_or_no_colour_are_refused(colors, match):
    with pytest.raises(ValueError, match=match):
        plot_learning_curves(synthetic(), colors=colors)


def test_one_colors_mapping_serves_a_group_by_its_value_or_its_label():
    """N19: plot_final_performance(group_by="lr") took {0.001: ...} and compare(by="lr").figures() took
    {"lr=0.001": ...}, each refusing the other's key: one figure set needed two dictionaries."""
    by_label = plot_learning_curves(synthetic(), group_by="lr", colors={"lr=0.01": "#ff0000"})
    assert line_colors(by_label)["lr=0.01 (4 runs)"] == "#ff0000"
    finals = plot_final_performance(synthetic(), group_by="lr", colors={"lr=0.01": "#ff0000"})
    assert any(np.allclose(c.get_facecolor()[0][:3], (1, 0, 0)) for c in finals.axes[0].collections)
    with pytest.raises(ValueError, match=r"its groups are 0.001 \(or 'lr=0.001'\), 0.01 \(or 'lr=0.01'\)"):
        plot_learning_curves(synthetic(), group_by="lr", colors={"lr=0.1": "red"})


def test_a_str_of_notes_is_one_line_and_an_ax_that_is_not_one_is_refused_naming_it():
    """M22: notes="hi there" was drawn a character a line; ax="ax" raised "'str' object has no attribute"."""
    assert "hi there" in notes(plot_learning_curves(synthetic(), notes="hi there"))
    with pytest.raises(TypeError, match=r"ax must be a matplotlib Axes to draw in .* but got ax='ax'"):
        plot_learning_curves(synthetic(), ax="ax")
    with pytest.raises(
        TypeError, match=r"plot_learning_curves\(\) got an unexpected keyword argument 'smoth' \(did you"
    ):
        plot_learning_curves(synthetic(), smoth=3)
