"""compare(): hand-computed point estimates, intervals that behave, rliable's numbers, sweeps, files on disk."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

from online_trainer import OnlineTrainer, compare, load_episodes
from online_trainer.analysis.compare import compare_scores
from online_trainer.analysis.compare_inputs import CompareOptions
from online_trainer.analysis.compare_stats import (
    probability_of_improvement,
    seeds_for_level,
    seeds_needed,
    separation_bound,
    smallest_p_value,
)
from online_trainer.analysis.curves import curves
from online_trainer.analysis.dataframes import load_evaluations
from tests.conftest import RecordingAgent, make_counting_vec


def table(values: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """Per-run scores: {candidate: {task: [score of run 1, ...]}}."""
    return pd.DataFrame(
        [
            {"candidate": c, "task": t, "experiment": f"{c}/{t}", "run": i, "raw_score": v}
            for c, tasks in values.items()
            for t, vs in tasks.items()
            for i, v in enumerate(vs, 1)
        ]
    )


def test_point_estimates_equal_a_hand_computation():
    scores = table({"A": {"t": [1, 2, 3, 4, 5, 6, 7, 8]}, "B": {"t": [0, 2, 2, 9, 9, 9, 9, 9]}})
    out = compare_scores(scores, CompareOptions(optimality_threshold=6, n_resamples=200))
    a = out.aggregates.set_index("candidate")
    assert a.loc["A", "iqm"] == pytest.approx((3 + 4 + 5 + 6) / 4)  # int(0.25 * 8) = 2 dropped at each end
    assert a.loc["B", "iqm"] == pytest.approx((2 + 9 + 9 + 9) / 4)
    assert a.loc["A", "optimality_gap"] == pytest.approx(6 - (1 + 2 + 3 + 4 + 5 + 6 + 6 + 6) / 8)
    # pairs (a, b) with a > b, plus one half per tie: 1 beats 0; 2 beats 0, ties two 2s; 3..8 beat 0, 2, 2
    wins = sum((x > y) + 0.5 * (x == y) for x in range(1, 9) for y in [0, 2, 2, 9, 9, 9, 9, 9])
    pair = out.improvement.set_index(["candidate", "versus"])
    assert pair.loc[("A", "B"), "probability_of_improvement"] == pytest.approx(wins / 64) == pytest.approx(21 / 64)
    assert pair.loc[("B", "A"), "probability_of_improvement"] == pytest.approx(43 / 64)
    assert out.aggregates["num_runs"].tolist() == [8, 8] and out.aggregates["num_tasks"].tolist() == [1, 1]


def test_probability_of_improvement_is_averaged_over_tasks():
    assert probability_of_improvement(
        [np.array([1.0, 2.0]), np.array([5.0])], [np.array([2.0]), np.array([1.0, 9.0])]
    ) == pytest.approx((0.25 + 0.5) / 2)  # (0 + 1/2) / 2, (1 + 0) / 2


def test_identical_candidates_cannot_be_told_apart():
    rng = np.random.default_rng(1)
    same = list(rng.normal(size=10))
    out = compare_scores(table({"A": {"t": same}, "B": {"t": same}}))
    row = out.improvement.iloc[0]
    assert row["probability_of_improvement"] == 0.5
    assert row["probability_of_improvement_lo"] < 0.5 < row["probability_of_improvement_hi"]
    assert not row["distinguishable"] and row["intervals_overlap"]
    assert row["seeds_needed"] == np.inf  # a difference of exactly zero: no number of seeds separates them
    # C13: every interval of the same runs is the same, whatever the candidate is called (the optimality gap's and
    # the profiles' were drawn from streams named after the candidate)
    values = list(rng.uniform(size=10))
    out = compare_scores(table({"A": {"t": values}, "B": {"t": values}}), CompareOptions(optimality_threshold=0.8))
    first, second = out.aggregates.set_index("candidate").loc[["A", "B"]].to_dict("records")
    assert first == second
    profiles = out.profiles.set_index("candidate")
    assert profiles.loc["A"].to_numpy().tolist() == profiles.loc["B"].to_numpy().tolist()


def test_a_clearly_better_candidate_has_an_interval_above_one_half():
    rng = np.random.default_rng(2)
    out = compare_scores(
        table(
            {
                "good": {"t1": list(rng.normal(3, 1, 10)), "t2": list(rng.normal(3, 1, 10))},
                "bad": {"t1": list(rng.normal(0, 1, 10)), "t2": list(rng.normal(0, 1, 10))},
            }
        )
    )
    row = out.improvement.set_index(["candidate", "versus"]).loc[("good", "bad")]
    assert row["probability_of_improvement_lo"] > 0.5 and row["distinguishable"]
    assert row["difference_lo"] > 0 and row["seeds_needed"] == 10  # the seeds run, never fewer
    assert out.aggregates["num_tasks"].tolist() == [2, 2]


@pytest.mark.parametrize(
    "scores, told_apart, too_few, needed",
    [
        ({"t": ([1.0, 2.0], [50.0, 60.0])}, False, True, 4),  # any 2 vs 2 split: p >= 1/3, whatever the gap
        ({"t": ([1.0, 2.0, 3.0], [50.0, 60.0, 70.0])}, False, True, 4),  # complete separation of 3 vs 3: p = 1/10
        ({"t": ([1.0, 2.0, 3.0, 4.0], [50.0, 60.0, 70.0, 80.0])}, True, False, 4),  # 4 vs 4: p = 1/35
        ({"t": ([1.0, 2.0, 3.0], [50.0, 60.0, 70.0]), "u": ([1.0, 2.0, 3.0], [50.0, 60.0, 70.0])}, True, False, 3),
    ],
)
def test_a_verdict_needs_seeds_with_which_a_rank_test_could_reach_the_level(scores, told_apart, too_few, needed):
    """Two seeds a side far apart used to be "told apart": their bootstrap interval of the difference excluded zero,
    though a split that lopsided happens one time in six between two equal candidates."""
    out = compare_scores(
        table({"weak": {t: w for t, (w, _) in scores.items()}, "strong": {t: s for t, (_, s) in scores.items()}}),
        CompareOptions(n_resamples=500),
    )
    row = out.improvement.set_index(["candidate", "versus"]).loc[("strong", "weak")]
    assert row["difference_lo"] > 0  # the bootstrap interval alone would have said "better"
    assert (bool(row["distinguishable"]), bool(row["too_few_seeds"]), row["seeds_needed"]) == (
        told_apart,
        too_few,
        needed,
    )


def test_smallest_p_value_and_the_seeds_a_level_needs():
    two, three, four = ([np.zeros(n)] for n in (2, 3, 4))
    assert smallest_p_value(two, two) == pytest.approx(1 / 3)
    assert smallest_p_value(three, three) == pytest.approx(1 / 10)
    assert smallest_p_value(four, four) == pytest.approx(1 / 35)
    assert smallest_p_value([np.zeros(1)], [np.zeros(1)]) == 1.0
    assert smallest_p_value(three * 2, three * 2) == pytest.approx(2 / 400)  # tasks are independent
    assert [seeds_for_level(1, 0.95), seeds_for_level(1, 0.99), seeds_for_level(2, 0.95)] == [4, 5, 3]


def test_seeds_needed_is_never_fewer_than_were_run():
    assert seeds_needed(10, 5.0, 4.0, 6.0) == 10  # told apart: the formula says 1, but 10 is what was shown
    assert seeds_needed(10, 1.0, -0.05, 1.5) == 11  # not told apart: more than 10, though the formula says 6
    assert seeds_needed(10, 1.0, -1.0, 3.0) == 40
    assert seeds_needed(10, 0.0, -1.0, 1.0) == np.inf
    # C17: 5 seeds against 2, not told apart: never fewer than the 5 run; the width is that of 2*5*2/7 seeds a side
    assert seeds_needed(5, 1.0, -0.2, 2.2, other_runs=2) == 5  # ceil(20/7 * 1.44) = 5
    assert seeds_needed(2, 1.0, -1.0, 3.0, other_runs=5) == 12  # ceil(20/7 * 4) = 12
    assert seeds_needed(5, 1.0, 0.5, 1.5, other_runs=2) == 5  # told apart: the larger of the seeds run


def test_complete_separation_is_a_degenerate_interval_with_a_bound_that_holds_at_five_seeds():
    out = compare_scores(
        table({"A": {"t": [1, 2, 3, 4, 5]}, "B": {"t": [6, 7, 8, 9, 10]}}), CompareOptions(n_resamples=500)
    )
    pair = out.improvement.set_index(["candidate", "versus"])
    a_b, b_a = pair.loc[("A", "B")], pair.loc[("B", "A")]
    assert (a_b["probability_of_improvement_lo"], a_b["probability_of_improvement_hi"]) == (0, 0)  # every resample
    assert a_b["degenerate"] and b_a["degenerate"] and b_a["distinguishable"]
    # 5 disjoint pairs each won with probability P: P ** 5 >= 2.5% one-sided, whatever the distributions
    assert b_a["separation_bound"] == pytest.approx(0.025 ** (1 / 5)) == pytest.approx(0.4782, abs=1e-4)
    assert a_b["separation_bound"] == pytest.approx(1 - 0.025 ** (1 / 5))
    assert a_b["separation_chance"] == pytest.approx(1 / 252)  # one of C(10, 5) rank sets, if A and B were alike
    assert a_b["seeds_needed"] == 5


def test_separation_bounds_over_tasks_and_unequal_seeds():
    assert separation_bound(1.0, pairs=3, ci=0.9) == pytest.approx(0.05 ** (1 / 3))
    assert math.isnan(separation_bound(0.96, pairs=3, ci=0.9))
    # 3 vs 4 seeds on each of two tasks: 2 * min(3, 4) = 6 disjoint pairs, C(7, 3) = 35 rank sets per task
    out = compare_scores(
        table({"A": {"t1": [5, 6, 7], "t2": [5, 6, 7]}, "B": {"t1": [1, 2, 3, 4], "t2": [0, 1, 2, 3]}}),
        CompareOptions(n_resamples=200),
    )
    row = out.improvement.set_index(["candidate", "versus"]).loc[("A", "B")]
    assert row["degenerate"] and row["separation_bound"] == pytest.approx(0.025 ** (1 / 6))
    assert row["separation_chance"] == pytest.approx(1 / 35**2)


def test_an_interval_that_is_not_a_point_is_not_degenerate():
    out = compare_scores(
        table({"A": {"t": [1, 2, 3, 7, 5]}, "B": {"t": [6, 4, 8, 9, 10]}}), CompareOptions(n_resamples=500)
    )
    row = out.improvement.iloc[0]
    assert not row["degenerate"] and math.isnan(row["separation_bound"]) and math.isnan(row["separation_chance"])


def test_intervals_cover_the_known_answer_and_a_seed_repeats_them():
    rng = np.random.default_rng(3)
    scores = table({"A": {"t": list(rng.normal(0, 1, 30))}, "B": {"t": list(rng.normal(0.5, 1, 30))}})
    first, again = compare_scores(scores), compare_scores(scores)
    pd.testing.assert_frame_equal(first.aggregates, again.aggregates)
    pd.testing.assert_frame_equal(first.improvement, again.improvement)
    pd.testing.assert_frame_equal(first.profiles, again.profiles)
    a = first.aggregates.set_index("candidate")
    assert a.loc["A", "mean_lo"] < 0 < a.loc["A", "mean_hi"] and a.loc["B", "mean_lo"] < 0.5 < a.loc["B", "mean_hi"]
    truth = 0.5 * (1 + math.erf(-0.5 / 2))  # P(N(0,1) > N(0.5,1))
    row = first.improvement.set_index(["candidate", "versus"]).loc[("A", "B")]
    assert row["probability_of_improvement_lo"] < truth < row["probability_of_improvement_hi"]
    other = compare_scores(scores, CompareOptions(seed=7)).aggregates
    assert not other[["iqm_lo", "iqm_hi"]].equals(first.aggregates[["iqm_lo", "iqm_hi"]])


def test_profiles_count_runs_above_tau_averaged_over_tasks():
    out = compare_scores(
        table({"A": {"t1": [0, 1], "t2": [0, 0]}, "B": {"t1": [1, 1], "t2": [1, 1]}}), CompareOptions(num_taus=3)
    )
    profiles = out.profiles.set_index(["candidate", "tau"])["fraction"]
    assert profiles.loc["A"].tolist() == [0.25, 0.25, 0.0] and profiles.loc["B"].tolist() == [
        1.0,
        1.0,
        0.0,
    ]  # tau 0, 0.5, 1


def test_normalisation_and_optimality_gap():
    scores = table({"A": {"x": [10, 20], "y": [0, 1]}, "B": {"x": [20, 20], "y": [1, 1]}})
    out = compare_scores(scores, CompareOptions(normalize={"x": (10, 20), "y": (0, 1)}, n_resamples=200))
    assert out.scores["score"].tolist() == [0, 1, 0, 1, 1, 1, 1, 1]
    assert out.aggregates.set_index("candidate").loc["A", "optimality_gap"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"normalize has no \(random, reference\) scores for task\(s\) \['y'\]"):
        compare_scores(scores, CompareOptions(normalize={"x": (10, 20)}))


def test_wrong_input_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="source must be one of .* got source='evaluation'"):
        CompareOptions(source="evaluation")
    with pytest.raises(ValueError, match=r"normalize must be a pair \(random score, reference score\)"):
        CompareOptions(normalize=(1, 1))
    with pytest.raises(ValueError, match=r"missing \{'B': \['y'\]\}"):
        compare_scores(table({"A": {"x": [1, 2], "y": [1, 2]}, "B": {"x": [1, 2]}}))
    with pytest.raises(ValueError, match="needs an 'experiment' column .* or by=<column>"):
        compare(pd.DataFrame({"run": [1], "ep_return": [1.0]}))


def rliable_library():
    pytest.importorskip("rliable")
    try:
        from rliable import library
    except Exception as exc:  # rliable is archived: its arch < 8 does not import with pandas >= 3
        pytest.skip(f"rliable.library does not import here: {exc}")
    return library


def cross_check_scores():
    rng = np.random.default_rng(4)
    return {"A": rng.normal(0, 1, (10, 3)), "B": rng.normal(0.4, 1, (10, 3))}  # runs x tasks, as rliable takes


def as_table(scores):
    return table({c: {f"t{j}": list(m[:, j]) for j in range(m.shape[1])} for c, m in scores.items()})


def test_point_estimates_equal_rliable():
    metrics = pytest.importorskip("rliable.metrics")
    scores = cross_check_scores()
    out = compare_scores(as_table(scores), CompareOptions(optimality_threshold=1, n_resamples=200))
    a = out.aggregates.set_index("candidate")
    for c, m in scores.items():
        assert a.loc[c, "iqm"] == pytest.approx(metrics.aggregate_iqm(m))
        assert a.loc[c, "mean"] == pytest.approx(metrics.aggregate_mean(m))
        assert a.loc[c, "optimality_gap"] == pytest.approx(metrics.aggregate_optimality_gap(m, 1))
    p = out.improvement.set_index(["candidate", "versus"]).loc[("A", "B"), "probability_of_improvement"]
    assert p == pytest.approx(metrics.probability_of_improvement(scores["A"], scores["B"]))


def test_intervals_equal_rliable_within_bootstrap_noise():
    """rliable itself, where it imports (the stored numbers of test_compare_rliable.py run everywhere).

    Our endpoint must land in the band where the same percentile of our resamples falls, given
    rliable's bootstrap distribution (see rliable_reference.py), for one false alarm in a thousand.
    """
    library = rliable_library()
    from rliable import metrics

    from tests.online_trainer.analysis.rliable_reference import band, levels, rliable_interval, z_for

    scores, reps, n_resamples = cross_check_scores(), 5_000, 20_000
    out = compare_scores(as_table(scores), CompareOptions(optimality_threshold=1, n_resamples=n_resamples))
    aggregates = out.aggregates.set_index("candidate")
    row = out.improvement.set_index(["candidate", "versus"]).loc[("A", "B")]
    columns = ["iqm", "mean", "median", "optimality_gap"]
    stats = [metrics.aggregate_iqm, metrics.aggregate_mean, np.median, metrics.aggregate_optimality_gap]
    z = z_for(2 * (2 * len(columns) + 2))
    checks = []
    for seed, (c, m) in enumerate(scores.items(), 1):
        _, cis, replicates = rliable_interval(
            library.StratifiedBootstrap, m, lambda m: np.array([f(m) for f in stats]), seed, reps, verify=False
        )
        checks += [
            (f"{c} {col}", aggregates.loc[c, f"{col}_{end}"], cis[i, j], replicates[:, j], q)
            for j, col in enumerate(columns)
            for i, (end, q) in enumerate(zip(("lo", "hi"), levels()))
        ]

    def pair(x, y):
        return np.array([metrics.probability_of_improvement(x, y), metrics.aggregate_iqm(x) - metrics.aggregate_iqm(y)])

    _, cis, replicates = rliable_interval(
        library.StratifiedIndependentBootstrap, [scores["A"], scores["B"]], pair, 3, reps, verify=False
    )
    names = [("P(A > B)", "probability_of_improvement"), ("IQM(A) - IQM(B)", "difference")]
    checks += [
        (name, row[f"{col}_{end}"], cis[i, j], replicates[:, j], q)
        for j, (name, col) in enumerate(names)
        for i, (end, q) in enumerate(zip(("lo", "hi"), levels()))
    ]
    wrong = []
    for label, value, theirs, replicates_, q in checks:
        low, high = band(replicates_, q, z, ours=n_resamples, theirs=reps)
        if not low - 1e-9 <= value <= high + 1e-9:
            wrong.append(f"{label} at {q}: ours {value}, rliable {theirs}, band [{low}, {high}]")
    assert wrong == []


# ----------------------------------------------------------------------------- experiments on disk
def experiment(path, num_runs=3, tuning_hp=None, **kwargs):
    kwargs.setdefault("num_episodes", 12)
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=path).multi_run(
        num_runs, seed_offset=1, progress=False, tuning_hp=tuning_hp, **kwargs
    )
    return path


def test_directories_are_candidates_and_curves_share_a_grid(tmp_path):
    experiment(tmp_path / "a")
    experiment(tmp_path / "b", num_runs=4)
    out = compare([tmp_path / "a", tmp_path / "b"], n_resamples=200)
    assert out.info["candidates"] == ["a", "b"] and out.aggregates["num_runs"].tolist() == [3, 4]
    assert len(out.scores) == 7 and out.scores["task"].nunique() == 1
    grids = out.curves.groupby("candidate")["global_step"].apply(tuple)
    assert grids["a"] == grids["b"]
    assert (out.curves["num_runs"] <= out.curves["total_runs"]).all()


def test_the_figures_come_from_python_as_the_command_saves_them(tmp_path):
    """compare() gave only tables: the four figures were the command's alone (an outside tester's notebook)."""
    from matplotlib.figure import Figure

    out = compare([experiment(tmp_path / "a"), experiment(tmp_path / "b")], n_resamples=200)
    figures = out.figures()
    assert list(figures) == ["aggregates", "improvement", "profiles", "sample_efficiency"]
    assert all(isinstance(figure, Figure) for figure in figures.values())
    titles = [axes.get_title() for axes in figures["aggregates"].axes]
    assert any(titles) and figures["sample_efficiency"].axes[0].get_xlabel()
    no_curves = dataclasses.replace(out, curves=out.curves.iloc[:0])
    assert list(no_curves.figures()) == ["aggregates", "improvement", "profiles"]


def test_the_figures_take_a_colour_per_candidate(tmp_path):
    """U17: a candidate's colour came from its place among the candidates compared; ``colors`` keeps one."""
    from matplotlib.colors import to_hex

    out = compare([experiment(tmp_path / "a"), experiment(tmp_path / "b")], n_resamples=200)
    figures = out.figures(colors={"b": "#ff0000"})
    for name in ("profiles", "sample_efficiency"):
        drawn = {line.get_label(): to_hex(line.get_color()) for line in figures[name].axes[0].get_lines()}
        assert drawn["b (n=3)"] == "#ff0000" and drawn["a (n=3)"] == "#0072b2", (name, drawn)
    with pytest.raises(ValueError, match=r"colors names 'c', not a candidate of the data: its candidates are 'a', 'b'"):
        out.figures(colors={"c": "red"})


def test_a_by_comparison_takes_the_colours_the_plots_group_by_takes(tmp_path):
    """N19: compare(by="lr").figures(colors={0.001: ...}) was refused (its candidates are named 'lr=0.001'), while
    the plots' group_by="lr" took only that key."""
    from matplotlib.colors import to_hex

    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.sweep({"lr": [0.1, 0.5]}, num_runs=2, num_episodes=12, seed_offset=0, progress=False)
    out = compare(tmp_path, by="lr", n_resamples=100)
    for colors in ({0.5: "#ff0000"}, {"lr=0.5": "#ff0000"}):
        drawn = {
            line.get_label(): to_hex(line.get_color())
            for line in out.figures(colors=colors)["profiles"].axes[0].get_lines()
        }
        assert drawn["lr=0.5 (n=2)"] == "#ff0000", drawn


def test_a_sweep_compares_its_configurations(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    ranking = trainer.sweep({"lr": [0.1, 0.2, 0.3]}, num_runs=3, num_episodes=8, seed_offset=0, progress=False)
    # RecordingAgent ignores lr and the seeds are shared: the configurations are identical
    assert ranking["told_apart"].tolist() == [False] * 3
    assert ranking["probability_of_improvement"].iloc[1:].tolist() == [0.5, 0.5]
    assert "cannot be told apart" in ranking.attrs["note"]
    out = compare(tmp_path, n_resamples=200)
    assert out.info["candidates"] == ["lr=0.1", "lr=0.2", "lr=0.3"]
    assert len(out.improvement) == 6
    by_lr = compare(tmp_path, by="lr", n_resamples=200)
    assert by_lr.info["candidates"] == ["lr=0.1", "lr=0.2", "lr=0.3"]  # "0.1" alone did not say what it is


def test_a_candidate_pooling_configurations_that_share_seeds_is_flagged(tmp_path, caplog):
    """by="lr" over a sweep that also varies gamma pools two runs of each seed into a candidate."""
    import logging

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.sweep({"lr": [0.1, 0.2], "gamma": [0.9, 0.99]}, num_runs=3, num_episodes=6, seed_offset=0)
    caplog.set_level(logging.WARNING, logger="online_trainer")
    pooled = compare(tmp_path, by="lr", n_resamples=100).info["shared_seed_note"]
    assert pooled.startswith(
        "Some candidates pool experiments that ran the same seeds: lr=0.1 (2 experiments, 6 runs of 3"
    )
    assert pooled in caplog.text
    assert compare(tmp_path, n_resamples=100).info["shared_seed_note"] is None
    assert compare(tmp_path, by=["lr", "gamma"], n_resamples=100).info["shared_seed_note"] is None


def test_a_sweep_of_one_configuration_has_an_experiment_column(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.sweep({"lr": [0.1]}, num_runs=2, num_episodes=4, seed_offset=0, progress=False)
    assert load_episodes(tmp_path)["experiment"].unique().tolist() == ["lr=0.1"]
    assert "experiment" not in load_episodes(tmp_path / "lr=0.1").columns


def test_evaluations_per_episode(tmp_path):
    experiment(tmp_path, num_runs=2, num_episodes=10, eval_freq=5, eval_episodes=3)
    rows = load_evaluations(tmp_path, per_episode=True)
    assert list(rows.columns) == [
        "run",
        "seed",
        "status",
        "global_step",
        "episodes_trained",
        "eval_index",
        "scheduled",
        "episode",
        "return",
        "length",
    ]
    assert len(rows) == 2 * 2 * 3 and rows["episode"].tolist()[:3] == [1, 2, 3]
    per_eval = load_evaluations(tmp_path)
    # each episode row carries its evaluation's episodes_trained and scheduled, as the per-evaluation rows do
    joined = rows.merge(per_eval, on=["run", "eval_index"], suffixes=("", "_eval"))
    assert (joined["episodes_trained"] == joined["episodes_trained_eval"]).all() and joined["scheduled"].all()
    assert rows.groupby(["run", "eval_index"])["return"].mean().tolist() == pytest.approx(
        per_eval["eval_return"].tolist()
    )


def test_step_budget_curves_end_on_every_run(tmp_path):
    experiment(tmp_path, num_runs=3, num_episodes=None, total_steps=101)
    df = load_episodes(tmp_path)
    assert {r["budget_unit"] for r in df.attrs["runs"]} == {"steps"} and {r["budget"] for r in df.attrs["runs"]} == {
        101
    }
    table_ = curves(df, num_points=20)
    assert table_["global_step"].iloc[-1] == 101
    assert table_["num_runs"].iloc[-1] == 3  # before: the run whose last episode ended last, alone (n=1)


def test_candidates_run_on_different_budgets_are_flagged(tmp_path, caplog):
    """Final scores of 200- and 300-step runs rank the budgets as much as the agents: compare says so."""
    import logging

    from tests.conftest import RecordingAgent, make_counting_vec

    for name, steps in (("short", 200), ("long", 300), ("long_too", 300)):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / name).multi_run(
            3, total_steps=steps, seed_offset=0
        )
    caplog.set_level(logging.WARNING, logger="online_trainer")
    result = compare([tmp_path / "short", tmp_path / "long"], n_resamples=100)
    note = result.info["budget_note"]
    assert note.startswith("The candidates ran on different budgets, so their final scores also compare the budgets")
    assert "(short: 200 env steps; long: 300 env steps)" in note and note in caplog.text
    caplog.clear()
    assert compare([tmp_path / "long", tmp_path / "long_too"], n_resamples=100).info["budget_note"] is None
    assert "different budgets" not in caplog.text
    from online_trainer.cli import main as cli

    assert cli.main(["compare", str(tmp_path / "short"), str(tmp_path / "long"), "--out", str(tmp_path / "cmp")]) == 0
    assert (
        "**Budgets differ.** The candidates ran on different budgets"
        in (tmp_path / "cmp" / "comparison.md").read_text()
    )


class StopsRunTwoAt150Steps:
    """Stops the run of seed 10000 once it has taken 150 env steps."""

    every_steps = 50

    def on_step(self, ctx):
        if ctx.seed == 10000 and ctx.global_step >= 150:
            ctx.stop("return reached")


def test_runs_stopped_early_are_flagged(tmp_path, caplog):
    """A run a stopper ended scores its episodes before the stop, against runs that used their whole budget: compare
    said nothing of it."""
    import logging

    from online_trainer.cli import main as cli

    for name in ("full", "full_too"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / name).multi_run(
            3, total_steps=300, seed_offset=0, progress=False
        )
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "stopper").multi_run(
        3, total_steps=300, seed_offset=0, hooks=[StopsRunTwoAt150Steps()], progress=False
    )
    caplog.set_level(logging.WARNING, logger="online_trainer")
    note = compare([tmp_path / "full", tmp_path / "stopper"], n_resamples=100).info["stopped_early_note"]
    assert note == (
        "Some runs were stopped early by a hook, so their scores are of their last episodes before they stopped, not "
        "at the end of the budget the other runs used: stopper: run 2 at 150 of 300 env steps (return reached)."
    )
    assert note in caplog.text
    assert compare([tmp_path / "full", tmp_path / "full_too"], n_resamples=100).info["stopped_early_note"] is None
    assert cli.main(["compare", str(tmp_path / "full"), str(tmp_path / "stopper"), "--out", str(tmp_path / "c")]) == 0
    assert f"**Runs stopped early.** {note}" in (tmp_path / "c" / "comparison.md").read_text()


def test_a_task_none_of_whose_runs_finished_an_episode_is_not_dropped_silently(tmp_path):
    """Its runs have no row in the episode table, so the task vanished from the comparison (num_tasks=1, nothing
    missing), while summarize counted the same runs as missing."""
    for name, env_id, steps in (
        ("a_cart", "CartPole-v1", 200),
        ("b_cart", "CartPole-v1", 200),
        ("a_acro", "Acrobot-v1", 20),  # acting 0, an Acrobot episode lasts 500 steps: none ends
        ("b_acro", "Acrobot-v1", 20),
        ("c_cart", "CartPole-v1", 4),  # a CartPole episode lasts about 10 steps acting 0
    ):
        OnlineTrainer(
            lambda env_id=env_id: gym.make_vec(env_id, num_envs=1), RecordingAgent, exp_dir=tmp_path / name
        ).multi_run(2, total_steps=steps, seed_offset=0, progress=False)
    with pytest.raises(
        ValueError,
        match=r"Every candidate must have scored runs on every task \(tasks are matched by env id\): missing "
        r"\{'A': \['Acrobot-v1'\], 'B': \['Acrobot-v1'\]\}",
    ):
        compare({"A": [tmp_path / "a_cart", tmp_path / "a_acro"], "B": [tmp_path / "b_cart", tmp_path / "b_acro"]})
    # an experiment none of whose runs finished an episode is a candidate without a score (it was no candidate)
    with pytest.raises(ValueError, match=r"missing \{'c_cart': \['CartPole-v1'\]\}"):
        compare([tmp_path / "a_cart", tmp_path / "c_cart"])


def test_an_experiment_without_an_env_id_on_record_is_matched_in_a_sweep_and_named_elsewhere(tmp_path):
    """Manifests written by the 2026-11-23 version from Python have no env_id: such an experiment is task 'task',
    so a sweep resumed by this version (some configurations with an env id, some without) could not be compared,
    nor could it be compared with an experiment of this version, and the error did not say why."""
    import json

    def forget_env_id(exp_dir):
        manifest = json.loads((exp_dir / "manifest.json").read_text())
        del manifest["env_id"]
        (exp_dir / "manifest.json").write_text(json.dumps(manifest))
        (exp_dir / "env.json").unlink()  # which says it too, since V22

    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), RecordingAgent, exp_dir=tmp_path / "sweep")
    trainer.sweep({"lr": [0.1, 0.2]}, num_runs=2, total_steps=100, seed_offset=0, progress=False)
    forget_env_id(tmp_path / "sweep" / "lr=0.1")
    assert compare(tmp_path / "sweep", n_resamples=100).info["tasks"] == ["CartPole-v1"]
    for name in ("old", "new"):
        OnlineTrainer(
            lambda: gym.make_vec("CartPole-v1", num_envs=1), RecordingAgent, exp_dir=tmp_path / name
        ).multi_run(2, total_steps=100, seed_offset=0, progress=False)
    forget_env_id(tmp_path / "old")
    with pytest.raises(ValueError, match=r"The runs of old have no env id on record \(task 'task': an experiment "):
        compare([tmp_path / "old", tmp_path / "new"], n_resamples=100)


def test_an_experiment_has_the_same_colour_in_compare_and_in_the_learning_curves(tmp_path):
    from online_trainer.analysis.compare_plots import plot_sample_efficiency
    from online_trainer.analysis.plotting import plot_learning_curves

    for name in ("b_second", "a_first"):
        experiment(tmp_path / name)
    # given in the other order than the names sort: compare keeps the order given, the curves sort
    comparison = compare([tmp_path / "b_second", tmp_path / "a_first"], n_resamples=100)
    compared = {
        line.get_label().split(" (")[0]: line.get_color()
        for line in plot_sample_efficiency(comparison).axes[0].lines
        if not line.get_label().startswith("_")
    }
    curves = plot_learning_curves(load_episodes([tmp_path / "b_second", tmp_path / "a_first"]), group_by="experiment")
    plotted = {
        line.get_label(): line.get_color() for line in curves.axes[0].lines if not line.get_label().startswith("_")
    }
    assert set(compared) == {"a_first", "b_second"}
    assert {name: plotted[next(label for label in plotted if name in label)] for name in compared} == compared


def test_long_sweep_names_leave_the_improvement_plot_readable(tmp_path, recwarn):
    from online_trainer.analysis.compare_plots import plot_improvement

    names = ["learning_rate=0.001,hidden_size=64,gamma=0.99", "learning_rate=0.01,hidden_size=128,gamma=0.9"]
    for name in names:
        experiment(tmp_path / name)
    fig = plot_improvement(compare([tmp_path / name for name in names], n_resamples=100))
    fig.savefig(tmp_path / "improvement.png")
    assert not [w for w in recwarn if "constrained_layout not applied" in str(w.message)]
    box = fig.axes[0].get_position()  # after the layout: the axes keep most of their 4.5 inches
    assert box.width * fig.get_figwidth() > 3.5
    (label,) = [tick.get_text() for tick in fig.axes[0].get_yticklabels()]
    assert label == f"P({names[0]}\n  > {names[1]})  (n=3, 3)"


@pytest.mark.parametrize(
    "names",
    [
        ("A", "B"),
        ("learning_rate=0.001,hidden_size=64,gamma=0.99", "learning_rate=0.01,hidden_size=128,gamma=0.9"),
        ("x" * 30, "lr=0.1"),
        ("x" * 60, "y" * 60, "z" * 60),
    ],
)
def test_a_degenerate_pair_has_its_whole_annotation_inside_the_improvement_plot(tmp_path, names):
    from online_trainer.analysis.compare_plots import plot_improvement

    # every run of the first beats every run of the others, and the second every run of the third
    runs = {name: {"t": [10.0 - 3 * i + r for r in (0.1, 0.2, 0.3)]} for i, name in enumerate(names)}
    comparison = compare_scores(table(runs), CompareOptions(n_resamples=100))
    fig = plot_improvement(comparison)
    fig.savefig(tmp_path / "improvement.png")
    notes = [text for text in fig.axes[0].texts if "degenerate bootstrap" in text.get_text()]
    assert len(notes) == len(names) * (len(names) - 1) // 2
    figure = fig.bbox
    for note in notes:
        box = note.get_window_extent()
        assert figure.x0 <= box.x0 and box.x1 <= figure.x1 and figure.y0 <= box.y0 and box.y1 <= figure.y1
    assert fig.axes[0].get_xticks().tolist() == [0, 0.25, 0.5, 0.75, 1]


def test_compare_on_evaluations_counts_every_run_and_gives_the_notes_of_episodes(tmp_path, caplog):
    """source="eval" dropped the budget and stopped-early notes, and a run that failed before its first
    evaluation left without a word (the evaluation table listed no runs)."""
    from online_trainer.errors import RunsFailedError
    from online_trainer.hooks import Hook

    class FailsEarly(RecordingAgent):
        def update(self, *args, **kwargs):
            if self.seed == 10001:  # run 2
                raise RuntimeError("boom")
            return super().update(*args, **kwargs)

    class StopRunThree(Hook):
        every_steps = 1

        def on_step(self, ctx):
            if ctx.run == 3 and ctx.global_step >= 30:
                ctx.stop("enough")

    evaluation = {"evaluation": __import__("online_trainer").EvaluationOptions(freq=20, episodes=1)}
    with pytest.raises(RunsFailedError):
        OnlineTrainer(make_counting_vec(1), FailsEarly, exp_dir=tmp_path / "a").multi_run(
            3, total_steps=100, seed_offset=1, progress=False, hooks=[StopRunThree()], **evaluation
        )
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "b").multi_run(
        3, total_steps=80, seed_offset=1, progress=False, **evaluation
    )
    evals = load_evaluations(tmp_path / "a")
    runs = {r["run"]: r for r in evals.attrs["runs"]}
    assert {run: (r["status"], r["num_evaluations"]) for run, r in runs.items()} == {
        1: ("finished", 5),
        2: ("failed", 0),
        3: ("stopped_early", 2),
    }
    caplog.set_level("WARNING")
    out = compare([tmp_path / "a", tmp_path / "b"], source="eval", n_resamples=100)
    assert "Leaving out 1 run(s) that did not finish: a/run 2 (failed)" in caplog.text
    assert "a: run 3 at 30 of 100 env steps (enough)" in out.info["stopped_early_note"]
    assert "a: 100 env steps; b: 80 env steps" in out.info["budget_note"]
    assert out.scores.groupby("candidate")["run"].apply(list).to_dict() == {"a": [1, 3], "b": [1, 2, 3]}
    assert "left out of the scores: a/run 2 (failed)" in out.info["left_out_note"]
    # let in, the run without an evaluation counts as a run without a score (it vanished)
    let_in = compare([tmp_path / "a", tmp_path / "b"], source="eval", n_resamples=100, include_unfinished=True)
    row = let_in.aggregates.set_index("candidate").loc["a"]
    assert (row["num_runs"], row["num_missing"]) == (2, 1) and let_in.info["left_out_note"] is None
    # and it is said (it was not: a killed run's scores stood beside whole budgets without a word)
    assert (
        "scored on the episodes they had, beside runs that used their whole budget: a/run 2 (failed)"
        in (let_in.info["unfinished_note"])
    )
    assert out.info["unfinished_note"] is None
    assert compare({"b1": tmp_path / "b", "b2": tmp_path / "b"}, n_resamples=100).info["left_out_note"] is None


def test_the_raw_scores_of_several_tasks_pooled_are_named_as_such():
    """compare({"A": [cartpole, acrobot], ...}) pooled CartPole's and Acrobot's raw returns into one IQM without a
    word (an outside tester), where the docs say to normalise first."""
    from online_trainer.analysis.compare_inputs import scale_note

    scores = table({"A": {"x": [1, 2, 3], "y": [-300, -200, -100]}, "B": {"x": [2, 3, 4], "y": [-90, -80, -70]}})
    note = scale_note(scores, None)
    assert note is not None and "2 tasks (x, y) are pooled as raw returns" in note and "normalize=" in note
    assert scale_note(scores, "minmax") is None
    assert scale_note(scores[scores["task"] == "x"], None) is None


def test_compare_names_a_pooling_of_tasks_in_its_info(tmp_path, caplog):
    experiment(tmp_path / "a1")
    experiment(tmp_path / "b1")
    frame = load_episodes([tmp_path / "a1", tmp_path / "b1"])
    frame["task"] = ["t1" if e == "a1" else "t2" for e in frame["experiment"]]
    frame["cand"] = frame["run"] % 2
    caplog.set_level("WARNING")
    out = compare(frame, by="cand", n_resamples=100)
    assert "pooled as raw returns" in out.info["scale_note"] and "pooled as raw returns" in caplog.text


def test_experiments_without_the_hyperparameter_of_by_are_refused_not_pooled_as_nan(tmp_path):
    """compare([hc, hc_noise, sweep], by="lr") pooled the two experiments without an lr into one candidate, "lr=nan",
    ranked it, and said nothing (tester Q2)."""
    experiment(tmp_path / "plain")
    experiment(tmp_path / "plain_too")
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / "sweep")
    trainer.sweep({"lr": [0.1, 0.2]}, num_runs=3, num_episodes=8, seed_offset=0, progress=False)
    with pytest.raises(
        ValueError,
        match=r"by='lr': the experiment\(s\) plain, plain_too have no 'lr' \(not among their hyperparameters\), and "
        r"would be pooled as one candidate, lr=nan, however they differ. Leave them out, or compare the experiments "
        r"themselves \(no by=\)",
    ):
        compare([tmp_path / "plain", tmp_path / "plain_too", tmp_path / "sweep"], by="lr", n_resamples=100)
    assert compare(tmp_path / "sweep", by="lr", n_resamples=100).info["candidates"] == ["lr=0.1", "lr=0.2"]


def test_evaluations_compared_with_a_candidate_that_ran_none_say_so(tmp_path):
    """It said "missing {...: ['CartPole-v1']} ... run the missing ones ... resume an experiment cut off" of an
    experiment whose runs all finished on that env without evaluations (tester Q2)."""
    experiment(tmp_path / "evaluated", eval_freq=5, eval_episodes=2)
    experiment(tmp_path / "not_evaluated")
    with pytest.raises(
        ValueError,
        match=r"source='eval' compares evaluations, but not_evaluated has none on record: its runs ran none "
        r"\(training with evaluation=EvaluationOptions\(freq=...\) schedules them\), or all ended before their first",
    ):
        compare([tmp_path / "evaluated", tmp_path / "not_evaluated"], source="eval", n_resamples=100)


def test_a_comparison_refused_for_its_tasks_warns_of_nothing_first(tmp_path, caplog):
    """The "pooled as raw returns ... pass normalize=" warning came before the error that refused the comparison
    (each candidate on a task the other lacks), and pointed at an option that does not help (tester Q2)."""
    experiment(tmp_path / "a1")
    experiment(tmp_path / "b1", num_episodes=20)
    frame = load_episodes([tmp_path / "a1", tmp_path / "b1"])
    frame["task"] = ["t1" if e == "a1" else "t2" for e in frame["experiment"]]
    caplog.set_level("WARNING")
    with pytest.raises(ValueError, match=r"Every candidate must have scored runs on every task"):
        compare(frame, n_resamples=100)
    assert caplog.text == ""


def test_each_curve_of_a_comparison_ends_on_its_step_budget(tmp_path):
    """On the grid shared by every candidate, the curve of a shorter budget stopped at the grid point before it (1963
    of 2000 steps), which reads as runs that stopped early (tester Q2)."""
    for name, steps in (("short", 203), ("long", 300)):
        OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / name).multi_run(
            3, total_steps=steps, seed_offset=0, progress=False
        )
    curves_ = compare([tmp_path / "short", tmp_path / "long"], n_resamples=100, num_points=20).curves
    ends = curves_.dropna(subset=["value"]).groupby("candidate")["global_step"].max()
    assert ends.to_dict() == {"long": 300, "short": 203}
    at_budget = curves_[(curves_["candidate"] == "short") & (curves_["global_step"] == 203)]
    assert at_budget["num_runs"].tolist() == [3]


def test_every_figure_says_how_many_runs_of_a_candidate_have_no_score():
    """eval_curves.png and profiles.png said "acro_tiny (n=1)" of a candidate whose 4 runs ran, 3 without a score,
    while comparison.md said "1 (3 without a score)" (tester Q2)."""
    from online_trainer.analysis.compare_plots import describe

    scores = table({"A": {"t": [1.0, 2.0, 3.0, 4.0]}, "B": {"t": [1.0, np.nan, np.nan, np.nan]}})
    text = describe(compare_scores(scores, CompareOptions(n_resamples=100)))
    assert "runs: A 4, B 1 (3 without a score); 1 task" in text


def test_compare_gives_an_experiment_the_intervals_show_gives_it(tmp_path):
    """Tester Z1: compare printed PPO's IQM as 126.27 [120.07, 219.03] where show and report printed [119.43, 219.03]
    (2,000 resamples against 10,000, and each group's stream drawn from its name)."""
    from online_trainer.analysis.stats import summarize
    from tests.conftest import write_experiment

    rng = np.random.default_rng(4)
    for name, centre in (("ppo", 150.0), ("dqn", 200.0)):
        runs = {}
        for run in range(1, 6):
            returns = rng.normal(centre, 60.0, 30)
            records = [
                {"episode_index": i, "ep_return": float(r), "ep_length": 9, "global_step": 9 * i, "agent_seed": run}
                for i, r in enumerate(returns, start=1)
            ]
            runs[run] = ("finished", run, records)
        write_experiment(tmp_path / name, runs)
    shown = summarize(load_episodes(tmp_path / "ppo"), last_k=10).iloc[0]
    compared = compare([tmp_path / "ppo", tmp_path / "dqn"]).aggregates.set_index("candidate").loc["ppo"]
    for stat in ("iqm", "mean", "median"):
        assert [compared[f"{stat}{e}"] for e in ("", "_lo", "_hi")] == [shown[f"{stat}{e}"] for e in ("", "_lo", "_hi")]


def test_the_profile_plot_is_a_step_function_through_every_runs_score():
    """Tester Z1: profiles.png joined the 101 grid points by slopes and skipped the 0.4 level PPO held between its
    scores 126.4 and 127.9, which fell between two grid points."""
    from online_trainer.analysis.compare_plots import plot_profiles

    ppo = [116.9, 124.5, 126.4, 127.9, 264.6]
    scores = table({"ppo": {"CartPole": ppo}, "dqn": {"CartPole": [150.0, 160.0, 170.0, 300.0, 310.0]}})
    comparison = compare_scores(scores, CompareOptions(n_resamples=100))
    (line,) = [line for line in plot_profiles(comparison).axes[0].get_lines() if line.get_label().startswith("ppo")]
    assert line.get_drawstyle() == "steps-post"
    taus, fractions = line.get_xdata(), line.get_ydata()
    assert set(ppo) <= set(taus)
    assert fractions[list(taus).index(126.4)] == 0.4  # the level between 126.4 and 127.9
    assert fractions[list(taus).index(127.9)] == 0.2
    # every curve starts at 1, left of the lowest score (PPO's, 116.9: its curve started at 0.8, tester A7)
    assert taus[0] < 116.9 and fractions[0] == 1.0 and fractions[list(taus).index(116.9)] == 0.8
    axes = line.axes
    assert axes.get_xlim()[0] == taus[0] and axes.get_legend()._loc == 3  # lower left, away from the curves
    # and ends at 0, right of the highest score: DQN's drop at 310 was on the axis' edge, where it did not show
    (best,) = [line for line in axes.get_lines() if line.get_label().startswith("dqn")]
    assert best.get_xdata()[-1] > 310.0 and best.get_ydata()[-1] == 0.0 and best.get_ydata()[-2] == 0.0
    assert axes.get_xlim()[1] == best.get_xdata()[-1] == taus[-1]


def test_compare_says_when_the_candidates_ran_on_different_seeds(tmp_path, caplog):
    """Tester Z1: experiments of seed_offset 0 and 7 were compared without a word (compare.md advises the same)."""
    for name, offset in (("a", 0), ("b", 7), ("c", 0)):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / name).multi_run(
            3, total_steps=60, seed_offset=offset, progress=False
        )
    caplog.set_level("WARNING")
    differ = compare([tmp_path / "a", tmp_path / "b"], n_resamples=100)
    said = "The candidates ran on different seeds: task (a: seeds 0, 10000, 20000; b: seeds 7, 10007, 20007)"
    assert differ.info["seeds_note"].startswith(said)
    assert said in caplog.text
    assert compare([tmp_path / "a", tmp_path / "c"], n_resamples=100).info["seeds_note"] is None


def test_a_pairs_figures_do_not_depend_on_the_order_of_the_candidates():
    """Tester V16: the sweep (its configurations ranked) said about 1,053 seeds, compare of the same directory
    (listed by name) 1,039: each pair's bootstrap was drawn in the orientation of the candidates' order."""
    rng = np.random.default_rng(3)
    scores = pd.DataFrame(
        {
            "candidate": ["b"] * 5 + ["a"] * 5,
            "run": list(range(1, 6)) * 2,
            "raw_score": np.r_[rng.normal(10, 1, 5), rng.normal(9.8, 1, 5)],
        }
    ).assign(experiment=lambda df: df["candidate"])
    options = CompareOptions(n_resamples=500)
    ab = compare_scores(scores, options, candidates=["a", "b"]).improvement.set_index(["candidate", "versus"])
    ba = compare_scores(scores, options, candidates=["b", "a"]).improvement.set_index(["candidate", "versus"])
    pd.testing.assert_frame_equal(ab.sort_index(), ba.sort_index())
    against = compare_scores(scores, options, candidates=["b", "a"], against="b").improvement
    assert against.set_index(["candidate", "versus"]).sort_index().equals(ab.sort_index())


def test_the_sample_efficiency_axis_keeps_the_end_of_training_readable_as_the_learning_curves_do(tmp_path):
    """U17: CliffWalking's early trailing means near -95,000 drew a linear axis on which IQMs of -78 and -54 were one
    line at 0, while plot_learning_curves of the same runs turned symlog and said so."""
    from online_trainer.analysis.compare_plots import plot_sample_efficiency
    from tests.conftest import record, write_experiment

    def runs(late):
        made = {}
        for run in (1, 2, 3):
            early = [record(i, -90_000 - 1_000 * run, length=9_000, step=9_000 * i) for i in (1, 2, 3)]
            ends = [record(i, late - run, length=20, step=27_000 + 20 * (i - 3)) for i in range(4, 40)]
            made[run] = ("finished", run, early + ends)
        return made

    for name, late in (("slow", -78), ("fast", -54)):
        write_experiment(tmp_path / name, runs(late))
    comparison = compare([tmp_path / "slow", tmp_path / "fast"], n_resamples=100)
    figure = plot_sample_efficiency(comparison)
    (ax,) = figure.axes
    assert ax.get_yscale() == "symlog"
    notes = [text.get_text() for text in ax.texts if text.get_text().startswith("y axis")]
    assert len(notes) == 1 and "symlog" in notes[0] and "set yscale" not in notes[0]  # the figure takes no option
