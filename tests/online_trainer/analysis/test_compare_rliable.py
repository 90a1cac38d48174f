"""compare() against rliable's numbers stored in ``rliable_reference.json``: runs without rliable.

rliable (archived) does not import where pandas 3 is installed, so ``rliable_reference.py``
stored its point estimates and 95% intervals on two fixed datasets, with, for each interval
endpoint, the band where ours must land if both bootstraps resample alike (its docstring
derives it). Point estimates must agree to rounding.
"""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest

from online_trainer.analysis.compare import Comparison, compare_scores
from online_trainer.analysis.compare_inputs import CompareOptions
from tests.online_trainer.analysis.rliable_reference import AGGREGATES, FIXTURE, NUM_TAUS
from tests.online_trainer.analysis.test_compare import as_table

REFERENCE = json.loads(FIXTURE.read_text())
DATASETS = sorted(REFERENCE["datasets"])
OURS = {"iqm": "iqm", "mean": "mean", "median_of_runs": "median", "optimality_gap": "optimality_gap"}
"""rliable's name of each aggregate we compute (its ``median``, of per-task means, is not ours)."""
FLOAT = 1e-9
"""Slack for rounding: two bootstraps that draw the same resample compute its statistic in a different order."""


@functools.cache
def ours(name: str, metric: str) -> Comparison:
    spec = REFERENCE["datasets"][name]
    scores = {c: np.array(m) for c, m in spec["scores"].items()}
    options = CompareOptions(
        optimality_threshold=spec["optimality_threshold"],
        ci=REFERENCE["ci"],
        n_resamples=REFERENCE["our_n_resamples"],
        num_taus=len(spec["taus"]),
        metric=metric,
    )
    return compare_scores(as_table(scores), options, candidates=list(scores))


def outside(value, reference: dict, end: str) -> np.ndarray:
    """Where ``value`` (our ``end`` endpoint) falls outside rliable's band for it."""
    low, high = np.asarray(reference[f"{end}_band"], dtype=float)
    value = np.asarray(value, dtype=float)
    return ~((low - FLOAT <= value) & (value <= high + FLOAT))


def describe(label: str, value, reference: dict, end: str) -> str:
    return f"{label} {end}: ours {value}, rliable {reference[end]}, band {reference[f'{end}_band']}"


def test_the_reference_is_rliables_and_its_bands_hold_its_own_endpoints():
    assert set(REFERENCE["versions"]) >= {"rliable", "arch", "pandas", "numpy"}
    assert REFERENCE["reps"] >= 10_000 and REFERENCE["ci"] == 0.95
    # the bands are as narrow as the resamples allow, for about one false alarm in a thousand over them all
    assert REFERENCE["false_alarm"] <= 1e-3 and 4 < REFERENCE["z"] < 5
    for spec in REFERENCE["datasets"].values():
        assert len(spec["taus"]) == NUM_TAUS
        estimates = [e for c in spec["aggregates"].values() for k, e in c.items() if k != "median"]
        estimates += list(spec["improvement"]["A>B"].values()) + list(spec["profiles"].values())
        for e in estimates:
            for end in ("lo", "hi"):
                assert not outside(e[end], e, end).any()


@pytest.mark.parametrize("name", DATASETS)
def test_point_estimates_equal_rliables(name):
    spec, out = REFERENCE["datasets"][name], ours(name, "iqm")
    aggregates = out.aggregates.set_index("candidate")
    for candidate, theirs in spec["aggregates"].items():
        for key, column in OURS.items():
            assert aggregates.loc[candidate, column] == pytest.approx(theirs[key]["value"], rel=1e-12, abs=1e-12)
    pair = spec["improvement"]["A>B"]
    row = out.improvement.set_index(["candidate", "versus"]).loc[("A", "B")]
    assert row["probability_of_improvement"] == pytest.approx(pair["probability_of_improvement"]["value"], abs=1e-12)
    for metric in ("iqm", "mean", "median"):
        d = ours(name, metric).improvement.set_index(["candidate", "versus"]).loc[("A", "B"), "difference"]
        assert d == pytest.approx(pair[f"difference_{metric}"]["value"], rel=1e-12, abs=1e-12)
    assert out.profiles["tau"].unique() == pytest.approx(spec["taus"], rel=1e-15)
    for candidate, theirs in spec["profiles"].items():
        fraction = out.profiles.loc[out.profiles["candidate"] == candidate, "fraction"]
        assert fraction.to_numpy() == pytest.approx(theirs["value"], abs=1e-12)


@pytest.mark.parametrize("name", DATASETS)
def test_aggregate_intervals_equal_rliables_within_bootstrap_noise(name):
    aggregates = ours(name, "iqm").aggregates.set_index("candidate")
    wrong = []
    for candidate, theirs in REFERENCE["datasets"][name]["aggregates"].items():
        for key, column in OURS.items():
            for end in ("lo", "hi"):
                value = aggregates.loc[candidate, f"{column}_{end}"]
                if outside(value, theirs[key], end):
                    wrong.append(describe(f"{candidate} {column}", value, theirs[key], end))
    assert wrong == []


@pytest.mark.parametrize("name", DATASETS)
def test_improvement_intervals_equal_rliables_within_bootstrap_noise(name):
    pair, wrong = REFERENCE["datasets"][name]["improvement"]["A>B"], []
    for metric in ("iqm", "mean", "median"):
        row = ours(name, metric).improvement.set_index(["candidate", "versus"]).loc[("A", "B")]
        for column, key in (
            ("probability_of_improvement", "probability_of_improvement"),
            ("difference", f"difference_{metric}"),
        ):
            for end in ("lo", "hi"):
                if outside(row[f"{column}_{end}"], pair[key], end):
                    wrong.append(describe(f"{key} (metric={metric})", row[f"{column}_{end}"], pair[key], end))
    assert wrong == []


@pytest.mark.parametrize("name", DATASETS)
def test_profile_bands_equal_rliables_within_bootstrap_noise(name):
    profiles, wrong = ours(name, "iqm").profiles, []
    for candidate, theirs in REFERENCE["datasets"][name]["profiles"].items():
        rows = profiles[profiles["candidate"] == candidate]
        for end in ("lo", "hi"):
            values = rows[f"fraction_{end}"].to_numpy()
            for i in np.flatnonzero(outside(values, theirs, end)):
                low, high = np.asarray(theirs[f"{end}_band"])[:, i]
                wrong.append(
                    f"{candidate} tau={rows['tau'].iloc[i]:.3f} {end}: ours {values[i]}, "
                    f"rliable {theirs[end][i]}, band [{low}, {high}]"
                )
    assert wrong == []


def test_our_median_pools_the_runs_where_rliables_takes_the_median_of_task_means():
    spec = REFERENCE["datasets"]["three_tasks"]
    aggregates = ours("three_tasks", "iqm").aggregates.set_index("candidate")
    for candidate, m in spec["scores"].items():
        assert aggregates.loc[candidate, "median"] == pytest.approx(np.median(m))
        assert spec["aggregates"][candidate]["median"]["value"] == pytest.approx(np.median(np.mean(m, axis=0)))
        assert aggregates.loc[candidate, "median"] != pytest.approx(spec["aggregates"][candidate]["median"]["value"])
    assert set(AGGREGATES) == {*OURS, "median"}
