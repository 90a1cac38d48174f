"""Tests of online_trainer.analysis.stats: values computed by hand on small fixed data."""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import pytest

from online_trainer.analysis.stats import STATISTICS, aggregate, curves, final_performance, iqm, summarize


def episodes(returns: dict, steps: dict | None = None, **columns) -> pd.DataFrame:
    """An episode table: ``returns[run]`` lists the returns of a run, ``steps[run]`` its global steps.

    Without ``steps``, episode ``e`` (1-based) ends at step ``100 * e``. Extra keyword
    arguments become constant columns (e.g. ``experiment="a"``, ``lr=0.1``).
    """
    rows = []
    for run, rets in returns.items():
        xs = steps[run] if steps else [100 * (e + 1) for e in range(len(rets))]
        for e, (ret, step) in enumerate(zip(rets, xs)):
            rows.append(
                {
                    "run": run,
                    "seed": 10 + run,
                    "episode_index": e + 1,
                    "global_step": step,
                    "ep_return": float(ret),
                    "ep_length": 5,
                    "wall_time": 0.1 * e,
                    **columns,
                }
            )
    return pd.DataFrame(rows)


def final_values(values: list[float], **columns) -> pd.DataFrame:
    """A table of one final return per run, as final_performance returns."""
    return pd.DataFrame({"run": range(len(values)), "final_return": values, **columns})


# ----------------------------------------------------------------------------- final_performance
def test_final_performance_last_k_by_hand():
    df = episodes({0: range(1, 13), 1: [4, 6]})
    out = final_performance(df, last_k=3)
    assert list(out.columns) == ["run", "seed", "final_return", "num_episodes"]
    assert out["final_return"].tolist() == [11.0, 5.0]  # mean(10, 11, 12); a short run uses all it has
    assert out["num_episodes"].tolist() == [3, 2]
    assert out["seed"].tolist() == [10, 11]


def test_final_performance_defaults_to_last_10_episodes():
    df = episodes({0: range(1, 21)})
    assert final_performance(df)["final_return"].item() == np.mean(range(11, 21))


def test_final_performance_uses_episode_order_not_row_order():
    df = episodes({0: [1, 2, 3, 4]}).iloc[::-1]
    assert final_performance(df, last_k=2)["final_return"].item() == 3.5


def test_final_performance_after_step(caplog):
    df = episodes({0: range(1, 13), 1: [1, 2]})  # run 0 ends at step 1200, run 1 at step 200
    with caplog.at_level(logging.WARNING, logger="online_trainer.analysis.stats"):
        out = final_performance(df, after_step=950)
    assert out["final_return"].iloc[0] == 11.0  # episodes ending at 1000, 1100, 1200
    assert np.isnan(out["final_return"].iloc[1])
    assert out["num_episodes"].tolist() == [3, 0]
    assert "1 run(s) have no episode that ended after step 950" in caplog.text


def test_final_performance_groups_by_experiment_by_default_and_keeps_runs_apart():
    df = pd.concat(
        [episodes({0: [1, 2], 1: [3, 4]}, experiment="a", lr=0.1), episodes({0: [10, 20]}, experiment="b", lr=0.1)]
    )
    out = final_performance(df, last_k=1)
    assert list(out.columns[:2]) == ["experiment", "run"]
    assert out["final_return"].tolist() == [2.0, 4.0, 20.0]
    by_lr = final_performance(df, last_k=1, group_by="lr")  # run 0 of a and run 0 of b stay two runs
    assert list(by_lr.columns[:3]) == ["lr", "experiment", "run"]
    assert len(by_lr) == 3
    assert len(final_performance(df, last_k=1, group_by=[])) == 3


@pytest.mark.parametrize("group_by", ["seed", ["experiment", "seed"], ["experiment", "status"], "status"])
def test_group_by_the_seed_or_status_columns_a_run_carries(group_by):
    """``seed`` and ``status`` are constant within a run: grouping by them is allowed (it used to fail inside
    pandas, as they were also taken along as the runs' own columns)."""
    df = pd.concat([episodes({0: [1, 2], 1: [3, 4]}, experiment="a"), episodes({0: [10, 20]}, experiment="b")]).assign(
        status="finished"
    )
    out = final_performance(df, last_k=1, group_by=group_by)
    assert sorted(out["final_return"].tolist()) == [2.0, 4.0, 20.0] and out.columns.is_unique
    summary = summarize(df, last_k=1, group_by=group_by)
    assert summary["num_runs"].sum() == 3


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"last_k": 3, "after_step": 100}, "either last_k or after_step, not both; got last_k=3, after_step=100"),
        ({"last_k": 0}, "last_k must be an int >= 1, got last_k=0"),
        ({"last_k": 2.5}, "last_k=2.5"),
        ({"group_by": "algo"}, r"group_by='algo' names column\(s\) \['algo'\]"),
    ],
)
def test_final_performance_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        final_performance(episodes({0: [1, 2]}), **kwargs)


def test_final_performance_missing_column_and_empty_data():
    with pytest.raises(ValueError, match=r"no column\(s\) \['ep_return'\]"):
        final_performance(episodes({0: [1]}).drop(columns="ep_return"))
    with pytest.raises(ValueError, match="empty"):
        final_performance(episodes({0: [1]}).iloc[:0])
    with pytest.raises(TypeError, match="DataFrame"):
        final_performance([1, 2, 3])


def test_group_by_a_column_that_changes_within_a_run_is_refused():
    df = episodes({0: [1, 2]})
    df["lr"] = [0.1, 0.2]
    with pytest.raises(ValueError, match=r"\['lr'\] change value within a run"):
        final_performance(df, group_by="lr")


# ----------------------------------------------------------------------------- aggregate
def test_iqm_matches_the_rliable_definition_by_hand():
    assert iqm(range(1, 9)) == pytest.approx((3 + 4 + 5 + 6) / 4)
    # n=10: int(0.25 * 10) = 2 values dropped at each end, not 2.5.
    assert iqm([0, 0, 0, 1, 2, 3, 4, 100, 100, 100]) == pytest.approx((0 + 1 + 2 + 3 + 4 + 100) / 6)
    assert iqm([7.0]) == 7.0
    assert set(STATISTICS) == {"mean", "median", "iqm"}


def test_aggregate_point_estimates_by_hand():
    out = aggregate(final_values([1, 2, 3, 4, 5, 6, 7, 100]), ci=None)
    row = out.iloc[0]
    assert row["mean"] == pytest.approx(128 / 8)
    assert row["median"] == pytest.approx(4.5)
    assert row["iqm"] == pytest.approx(4.5)
    assert row["num_runs"] == 8
    assert np.isnan(row["iqm_lo"]) and np.isnan(row["iqm_hi"])


def test_aggregate_columns_and_groups():
    df = pd.concat([final_values([1, 2, 3], experiment="a"), final_values([4, 5, 6, 7], experiment="b")])
    out = aggregate(df)
    assert list(out.columns) == [
        "experiment",
        "mean",
        "mean_lo",
        "mean_hi",
        "median",
        "median_lo",
        "median_hi",
        "iqm",
        "iqm_lo",
        "iqm_hi",
        "num_runs",
        "num_missing",
    ]
    assert out["experiment"].tolist() == ["a", "b"]
    assert out["mean"].tolist() == [2.0, 5.5]
    assert out["num_runs"].tolist() == [3, 4]


def test_aggregate_ci_contains_estimate_and_shrinks_with_more_runs():
    rng = np.random.default_rng(0)
    few = aggregate(final_values(rng.normal(10, 2, 5)), seed=1).iloc[0]
    many = aggregate(final_values(rng.normal(10, 2, 200)), seed=1).iloc[0]
    for row in (few, many):
        for stat in ("mean", "median", "iqm"):
            assert row[f"{stat}_lo"] <= row[stat] <= row[f"{stat}_hi"]
    for stat in ("mean", "median", "iqm"):
        assert many[f"{stat}_hi"] - many[f"{stat}_lo"] < few[f"{stat}_hi"] - few[f"{stat}_lo"]


def test_aggregate_is_deterministic_with_a_seed():
    data = final_values(np.random.default_rng(0).normal(size=8))
    pd.testing.assert_frame_equal(aggregate(data, seed=7), aggregate(data, seed=7))
    pd.testing.assert_frame_equal(
        aggregate(data, seed=np.random.default_rng(7)), aggregate(data, seed=np.random.default_rng(7))
    )
    assert not aggregate(data, seed=7, n_resamples=500).equals(aggregate(data, seed=8, n_resamples=500))
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        aggregate(data, seed=-1)


def test_a_groups_interval_does_not_depend_on_the_other_groups():
    rng = np.random.default_rng(0)
    a = final_values(rng.normal(0, 1, 7), experiment="a")
    b = final_values(rng.normal(3, 2, 5), experiment="b")
    c = final_values(rng.normal(9, 1, 6), experiment="0c")  # sorts before a
    alone = aggregate(a, n_resamples=500).set_index("experiment").loc["a"]
    together = aggregate(pd.concat([c, b, a]), n_resamples=500).set_index("experiment").loc["a"]
    pd.testing.assert_series_equal(alone, together)
    runs_a = episodes({r: rng.normal(0, 1, 9) for r in range(4)}, experiment="a")
    runs_b = episodes({r: rng.normal(5, 1, 9) for r in range(3)}, experiment="0b")
    curve_alone = curves(runs_a, n_resamples=200)
    curve_together = curves(pd.concat([runs_b, runs_a]), n_resamples=200)
    pd.testing.assert_frame_equal(
        curve_alone, curve_together[curve_together["experiment"] == "a"].reset_index(drop=True)
    )


def test_the_same_runs_get_the_same_intervals_whatever_their_group_is_called_and_their_order():
    # show (one experiment, no group) and compare (the experiment as a candidate) printed intervals that differed in
    # their last digit: each group's bootstrap stream was drawn from its name
    values = np.random.default_rng(3).normal(100, 20, 6)
    cols = ["iqm_lo", "iqm_hi", "mean_lo", "mean_hi", "median_lo", "median_hi"]
    alone = aggregate(final_values(values), n_resamples=500)[cols]
    named = aggregate(final_values(values[::-1], experiment="candidate"), n_resamples=500)[cols]
    pd.testing.assert_frame_equal(alone, named)
    other = aggregate(final_values(values + 1.0), n_resamples=500)[cols]
    assert not np.allclose(other.to_numpy() - 1.0, alone.to_numpy())  # another group's values: another stream


def test_aggregate_single_run_and_identical_values(caplog):
    with caplog.at_level(logging.WARNING, logger="online_trainer.analysis.stats"):
        out = aggregate({"one": [3.0], "same": [2.0, 2.0, 2.0]})
    one, same = out.set_index("group").loc["one"], out.set_index("group").loc["same"]
    assert one["iqm"] == 3.0 and one["num_runs"] == 1
    assert np.isnan(one["iqm_lo"]) and np.isnan(one["iqm_hi"])
    assert (same["mean_lo"], same["mean"], same["mean_hi"]) == (2.0, 2.0, 2.0)
    assert (same["iqm_lo"], same["iqm_hi"]) == (2.0, 2.0)
    assert "single run" in caplog.text


def test_aggregate_leaves_out_nan_runs(caplog):
    with caplog.at_level(logging.WARNING, logger="online_trainer.analysis.stats"):
        out = aggregate(final_values([1.0, np.nan, 3.0]), ci=None)
    assert out["mean"].item() == 2.0 and out["num_runs"].item() == 2 and out["num_missing"].item() == 1
    assert "Leaving out 1 run(s) whose final_return is NaN or infinite: run 1" in caplog.text


def test_stratified_bootstrap_resamples_within_strata():
    # Task A always scores 0, task B always 10: every stratified resample holds four of
    # each, so the mean is 5 in every resample. Pooling the strata gives a wide interval.
    data = final_values([0, 0, 0, 0, 10, 10, 10, 10], task=list("AAAABBBB"))
    stratified = aggregate(data, group_by=[], strata="task").iloc[0]
    assert (stratified["mean_lo"], stratified["mean"], stratified["mean_hi"]) == (5.0, 5.0, 5.0)
    assert stratified["num_strata"] == 2 and stratified["num_runs"] == 8
    pooled = aggregate(data, group_by=[]).iloc[0]
    assert pooled["mean_lo"] < 5.0 < pooled["mean_hi"]


def test_stratified_bootstrap_keeps_a_single_run_stratum():
    data = final_values([0, 1, 2, 3], task=list("ABBB"))
    row = aggregate(data, group_by=[], strata="task", seed=0).iloc[0]
    assert row["mean"] == 1.5
    # The stratum of one run contributes 0 to every resample: the mean is at least 0/4 + 3/4.
    assert 0.75 <= row["mean_lo"] < row["mean_hi"] <= 2.25


def test_aggregate_errors():
    with pytest.raises(ValueError, match=r"no column\(s\) \['final_return'\].*summarize"):
        aggregate(episodes({0: [1, 2]}))
    with pytest.raises(ValueError, match="must not share columns"):
        aggregate(final_values([1, 2], task=["A", "B"]), group_by="task", strata="task")
    with pytest.raises(ValueError, match="ci=1.5"):
        aggregate(final_values([1, 2]), ci=1.5)
    with pytest.raises(ValueError, match="n_resamples=0"):
        aggregate(final_values([1, 2]), n_resamples=0)


def test_summarize_is_final_performance_then_aggregate():
    df = pd.concat(
        [
            episodes({r: np.arange(12) * (r + 1) for r in range(4)}, experiment="a"),
            episodes({r: np.arange(12) - r for r in range(3)}, experiment="b"),
        ]
    )
    expected = aggregate(final_performance(df, last_k=4), seed=3).assign(num_excluded=0)
    pd.testing.assert_frame_equal(summarize(df, last_k=4, seed=3), expected)


def test_summarize_with_experiments_as_strata():
    df = pd.concat([episodes({0: [1], 1: [3]}, experiment="a"), episodes({0: [10], 1: [20]}, experiment="b")])
    row = summarize(df, strata="experiment", ci=None)
    assert "experiment" not in row.columns
    assert row["mean"].item() == pytest.approx(34 / 4) and row["num_strata"].item() == 2


# ----------------------------------------------------------------------------- curves
def two_runs() -> pd.DataFrame:
    # run 0: y = x - 10 on x in [10, 30]; run 1: y = x - 15 on x in [15, 35]
    return episodes({0: [0, 10, 20], 1: [0, 10, 20]}, steps={0: [10, 20, 30], 1: [15, 25, 35]})


def test_curves_cover_the_whole_range_by_default_by_hand():
    out = curves(two_runs(), num_points=6, stat="mean", ci=None)
    assert list(out.columns) == ["global_step", "value", "lo", "hi", "num_runs", "total_runs"]
    assert out["global_step"].tolist() == [10, 15, 20, 25, 30, 35]  # earliest first x .. latest last x
    # run 0 at 10..30: 0, 5, 10, 15, 20 and nothing at 35; run 1 nothing at 10, then 0, 5, 10, 15, 20
    assert out["value"].tolist() == [0.0, 2.5, 7.5, 12.5, 17.5, 20.0]
    assert out["num_runs"].tolist() == [1, 2, 2, 2, 2, 1]
    assert out["total_runs"].tolist() == [2] * 6
    assert out.attrs["span"] == "all"


def test_a_smoothed_curve_at_a_step_where_several_episodes_ended_is_the_trailing_mean_after_the_last():
    """Tester Z1: with 8 sub-envs report's curve (the trailing means of episodes ending at one step, averaged) and
    compare's (the last of them: the trailing mean as of that step) differed by up to 0.46."""
    df = episodes({0: [1.0, 2.0, 4.0, 8.0]}, steps={0: [10, 20, 20, 30]})  # two episodes end at step 20
    out = curves(df, num_points=3, stat="mean", ci=None, smooth=2)
    assert out["value"].tolist() == [1.0, 3.0, 6.0]  # trailing means 1, 1.5, 3, 6: at step 20, 3 (not 2.25)
    raw = curves(df, num_points=3, stat="mean", ci=None)
    assert raw["value"].tolist() == [1.0, 3.0, 8.0]  # unsmoothed, the episodes of one step are averaged


def test_curves_span_common_cuts_to_the_range_every_run_covers():
    out = curves(two_runs(), num_points=4, stat="mean", ci=None, span="common")
    assert out["global_step"].tolist() == [15, 20, 25, 30]  # latest first x .. earliest last x
    # run 0 at 15, 20, 25, 30: 5, 10, 15, 20; run 1: 0, 5, 10, 15
    assert out["value"].tolist() == [2.5, 7.5, 12.5, 17.5]
    assert out["num_runs"].tolist() == [2, 2, 2, 2]


def test_one_short_run_does_not_clip_the_others():
    # three runs reach step 1000, one stops at step 200: the curve still reaches 1000
    df = episodes({r: np.arange(10.0) + r for r in range(3)} | {3: [0.0, 1.0]})
    out = curves(df, num_points=10, stat="mean", ci=None)
    assert out["global_step"].iloc[-1] == 1000 and out["global_step"].iloc[0] == 100
    assert out.loc[out["global_step"] <= 200, "num_runs"].tolist() == [4, 4]
    assert (out.loc[out["global_step"] > 200, "num_runs"] == 3).all()
    assert out["value"].iloc[-1] == pytest.approx(np.mean([9, 10, 11]))  # never extrapolated


def test_an_observed_grid_interpolates_nothing():
    """grid="observed": each group's points are the x values its runs have; a point stands on the runs there."""
    df = pd.DataFrame(
        {
            "run": [1, 1, 1, 2, 2, 2],
            "episode_index": [1, 2, 3, 1, 2, 3],
            "global_step": [10, 20, 25, 10, 20, 30],
            "ep_return": [1.0, 2.0, 9.0, 3.0, 4.0, 5.0],
        }
    )
    out = curves(df, x="global_step", grid="observed", stat="mean", ci=None).set_index("global_step")
    assert out["value"].to_dict() == {10: 2.0, 20: 3.0, 25: 9.0, 30: 5.0}
    assert out["num_runs"].to_dict() == {10: 2, 20: 2, 25: 1, 30: 1}
    with pytest.raises(ValueError, match="grid must be x values or 'observed', got grid='seen'"):
        curves(df, grid="seen")


def test_curves_explicit_grid_never_extrapolates():
    out = curves(two_runs(), grid=[10, 12.5, 20, 35, 40], stat="mean")
    np.testing.assert_allclose(out["value"], [0.0, 2.5, 7.5, 20.0, np.nan])
    assert out["num_runs"].tolist() == [1, 1, 2, 1, 0]
    assert out["lo"].isna().tolist() == [True, True, False, True, True]  # one run: no interval


def test_curves_average_episodes_that_end_at_the_same_step():
    df = episodes({0: [0, 4, 10], 1: [1, 1, 1]}, steps={0: [0, 10, 20], 1: [0, 10, 20]})
    df.loc[1, "global_step"] = 0  # run 0: returns 0 and 4 both at step 0, 10 at step 20
    out = curves(df[df["run"] == 0], grid=[0, 10, 20], stat="mean", ci=None)
    assert out["value"].tolist() == [2.0, 6.0, 10.0]


def test_curves_smooth_is_a_trailing_moving_average():
    df = episodes({0: [0, 10, 20, 30]})
    out = curves(df, x="episode_index", num_points=4, smooth=2, ci=None)
    assert out["episode_index"].tolist() == [1, 2, 3, 4]
    assert out["value"].tolist() == [0.0, 5.0, 15.0, 25.0]


def test_curves_groups_ci_and_determinism():
    rng = np.random.default_rng(0)
    df = pd.concat(
        [
            episodes({r: rng.normal(0, 1, 30) + np.arange(30) for r in range(6)}, experiment="a"),
            episodes({r: rng.normal(5, 1, 30) for r in range(5)}, experiment="b"),
        ]
    )
    out = curves(df, num_points=20, seed=1)
    assert out["experiment"].tolist() == ["a"] * 20 + ["b"] * 20
    assert out.groupby("experiment")["num_runs"].max().tolist() == [6, 5]
    assert (out["lo"] <= out["value"]).all() and (out["value"] <= out["hi"]).all()
    assert (out["hi"] > out["lo"]).all()
    pd.testing.assert_frame_equal(out, curves(df, num_points=20, seed=1))
    iqm_at_first = iqm(df[df["episode_index"] == 1].groupby("experiment")["ep_return"].apply(list).loc["a"])
    assert out["value"].iloc[0] == pytest.approx(iqm_at_first)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x": "nope"}, r"x='nope' is not a column of the data; available columns: \['run'"),
        ({"stat": "max"}, r"stat must be one of \['iqm', 'mean', 'median'\], got stat='max'"),
        ({"ci": 95}, "ci=95"),
        ({"num_points": 1}, "num_points=1"),
        ({"smooth": 0}, "smooth=0"),
        ({"grid": [3, 2, 1]}, "grid must be a non-empty 1-D array of finite increasing values"),
        ({"span": "union"}, r"span must be one of \('all', 'common'\), got span='union'"),
    ],
)
def test_curves_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        curves(two_runs(), **kwargs)


def test_curves_refuses_a_non_numeric_x():
    df = two_runs().assign(label="x")
    with pytest.raises(ValueError, match="x='label' must be a numeric column"):
        curves(df, x="label")


# ----------------------------------------------------------------------------- status, runs without episodes, NaN
def with_status(df: pd.DataFrame, statuses: dict) -> pd.DataFrame:
    return df.assign(status=df["run"].map(statuses))


def test_runs_that_did_not_finish_are_left_out_with_a_warning_naming_them(caplog):
    df = with_status(
        episodes({0: [10] * 3, 1: [20] * 3, 2: [-100] * 2, 3: [30] * 3}),
        {0: "finished", 1: "finished", 2: "failed", 3: "stopped_early"},
    )
    with caplog.at_level(logging.WARNING):
        final = final_performance(df, last_k=2)
    assert final["run"].tolist() == [0, 1, 3]
    assert list(final.columns) == ["run", "seed", "status", "final_return", "num_episodes"]
    assert "Leaving out 1 run(s) that did not finish: run 2 (failed)" in caplog.text
    assert "include_unfinished=True" in caplog.text
    assert final_performance(df, last_k=2, include_unfinished=True)["run"].tolist() == [0, 1, 2, 3]
    summary = summarize(df, last_k=2, ci=None)
    assert summary["mean"].item() == 20.0
    assert (summary["num_runs"].item(), summary["num_missing"].item(), summary["num_excluded"].item()) == (3, 0, 1)
    included = summarize(df, last_k=2, ci=None, include_unfinished=True)
    assert included["mean"].item() == -10.0 and included["num_excluded"].item() == 0
    out = curves(df, ci=None, num_points=3)
    assert out["total_runs"].max() == 3 and out.attrs["excluded"][0]["run"] == 2


def test_a_group_whose_every_run_failed_keeps_a_row_and_all_failed_is_an_error():
    df = pd.concat(
        [
            with_status(episodes({0: [1, 2], 1: [3, 4]}, experiment="ok"), {0: "finished", 1: "finished"}),
            with_status(episodes({0: [5], 1: [6]}, experiment="bad"), {0: "failed", 1: "interrupted"}),
        ]
    )
    summary = summarize(df, last_k=1, ci=None).set_index("experiment")
    assert summary.loc["ok", "num_runs"] == 2 and summary.loc["ok", "num_excluded"] == 0
    assert summary.loc["bad", "num_runs"] == 0 and summary.loc["bad", "num_excluded"] == 2
    assert np.isnan(summary.loc["bad", "iqm"])
    bad = df[df["experiment"] == "bad"]
    with pytest.raises(ValueError, match=r"Every run was left out: bad/run 0 \(failed\), bad/run 1 \(interrupted\)"):
        summarize(bad)
    with pytest.raises(ValueError, match="Every run was left out"):
        curves(bad)


def test_runs_without_episodes_are_counted_not_dropped(caplog):
    # 8 runs of which 6 never finished an episode: num_runs 2, and the 6 are reported
    df = with_status(episodes({1: [1.0, 3.0], 2: [5.0, 7.0]}), {1: "finished", 2: "finished"})
    df.attrs["runs"] = [
        {"run": r, "seed": 10 + r, "status": "finished", "num_episodes": 2 if r <= 2 else 0} for r in range(1, 9)
    ]
    final = final_performance(df, last_k=1)
    assert final["run"].tolist() == list(range(1, 9))
    assert final["num_episodes"].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]
    assert final["final_return"].isna().sum() == 6
    with caplog.at_level(logging.WARNING):
        summary = summarize(df, last_k=1, ci=None)
    assert (summary["num_runs"].item(), summary["num_missing"].item()) == (2, 6)
    assert "Leaving out 6 run(s) whose final_return is NaN" in caplog.text
    # once rows are removed, the list no longer describes the table and is not used
    assert len(final_performance(df[df["run"] == 1], last_k=1)) == 1


def test_runs_without_episodes_that_did_not_finish_count_as_excluded():
    df = with_status(episodes({1: [1.0], 2: [3.0]}), {1: "finished", 2: "finished"})
    df.attrs["runs"] = [
        {"run": 1, "status": "finished", "num_episodes": 1},
        {"run": 2, "status": "finished", "num_episodes": 1},
        {"run": 3, "status": "failed", "num_episodes": 0},
    ]
    summary = summarize(df, last_k=1, ci=None)
    assert (summary["num_runs"].item(), summary["num_missing"].item(), summary["num_excluded"].item()) == (2, 0, 1)
    assert final_performance(df, include_unfinished=True)["run"].tolist() == [1, 2, 3]


def test_nan_and_infinite_returns_are_left_out_with_a_warning(caplog):
    df = episodes({0: [0, 10, np.nan, 30], 1: [0, 10, 20, 30], 2: [np.inf, 1, 2, -np.inf]})
    with caplog.at_level(logging.WARNING):
        final = final_performance(df, last_k=2)
    # run 0: the last two finite returns are 10 and 30; run 2: 1 and 2
    assert final["final_return"].tolist() == [20.0, 25.0, 1.5]
    assert "Leaving out 3 episode(s) whose ep_return is NaN or infinite (run 0: 1, run 2: 2)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        out = curves(df[df["run"] == 0], grid=[100, 200, 300, 400], stat="mean", ci=None)
    assert out["value"].tolist() == [0.0, 10.0, 20.0, 30.0]  # interpolated across the NaN, not dropped
    assert out["num_runs"].tolist() == [1, 1, 1, 1]
    assert "NaN or infinite" in caplog.text


def test_runs_that_finished_no_episode_are_named_by_summarize_and_show(tmp_path, capsys):
    """summarize raised "The data is empty" without a word of the runs, and show said "No episode has finished yet"
    of runs that had finished (their budget ended before any episode)."""
    import gymnasium as gym

    from online_trainer import OnlineTrainer, load_episodes
    from online_trainer.cli import main as cli
    from tests.conftest import RecordingAgent

    OnlineTrainer(lambda: gym.make_vec("Acrobot-v1", num_envs=1), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, total_steps=20, seed_offset=0, progress=False
    )
    with pytest.raises(
        ValueError,
        match=r"No run finished an episode, so there is no return to analyse: run 1 \(finished\), run 2 \(finished\)\. "
        r"A step budget shorter",
    ):
        summarize(load_episodes(tmp_path))
    assert cli.main(["show", str(tmp_path)]) == 0
    assert "No run finished an episode: there is no final return to show." in capsys.readouterr().out
