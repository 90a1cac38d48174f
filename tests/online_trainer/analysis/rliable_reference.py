"""Regenerate ``rliable_reference.json``: rliable's estimates and intervals on two small fixed datasets.

``compare`` claims rliable's point estimates and stratified-bootstrap intervals, but rliable
(archived) needs ``arch<8``, which does not import with pandas 3, so CI cannot run it. This
script stores rliable's numbers; ``test_compare_rliable.py`` checks ours against them
without rliable.

Run it in a throwaway venv outside the repository (the numbers in the JSON were made with
Python 3.11.7, rliable 1.2.0, arch 7.2.0, pandas 2.3.3, numpy 2.4.6, scipy 1.17.1; the
file records the versions)::

    python3 -m venv /tmp/rliable-venv
    /tmp/rliable-venv/bin/pip install "pandas<3" rliable "arch<8" numpy scipy
    /tmp/rliable-venv/bin/python tests/online_trainer/analysis/rliable_reference.py

It takes a few minutes on one core. For each dataset (fixed scores, stored in the JSON) it
calls ``rliable.library.get_interval_estimates`` (percentile intervals, ``REPS`` resamples;
rliable draws from numpy's global generator, seeded before every call) on: IQM, mean,
median, optimality gap (``rliable.metrics``), the median of all runs pooled (what ``compare``
calls the median), P(X > Y) and the differences of IQM, mean and pooled median between the
two candidates (``StratifiedIndependentBootstrap``); and ``create_performance_profile`` on
``NUM_TAUS`` thresholds from the lowest to the highest score.

Two bootstrap implementations with different random streams give different endpoints, so
each endpoint comes with a band: with its own ``REPS`` resamples repeated with the same
seed (``apply``), the percentiles of rliable's bootstrap distribution at levels
``q +- z * sqrt(q (1 - q) (1 / OUR_RESAMPLES + 1 / REPS))``. The empirical q-quantile of
``OUR_RESAMPLES`` draws from the same distribution has a rank-level error of standard
deviation ``sqrt(q (1 - q) / OUR_RESAMPLES)``, and rliable's empirical distribution one of
``sqrt(q (1 - q) / REPS)``: our endpoint falls outside the band with probability
``2 * (1 - Phi(z))`` when both bootstraps resample the same way. ``z`` makes that chance
``FALSE_ALARM`` over every endpoint checked together (Bonferroni). Being a band on the
distribution's levels, it needs no assumption on its shape (the IQM and the profiles of a
few runs are lumpy).
"""

from __future__ import annotations

import json
import platform
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

FIXTURE = Path(__file__).with_name("rliable_reference.json")
REPS = 50_000
"""rliable's resamples (the default of ``get_interval_estimates``)."""
OUR_RESAMPLES = 20_000
"""The ``n_resamples`` the tests give ``compare``; the bands are computed for it."""
CI = 0.95
FALSE_ALARM = 1e-3
"""The chance that any endpoint of a correct bootstrap falls outside its band."""
NUM_TAUS = 21
AGGREGATES = ("iqm", "mean", "median", "median_of_runs", "optimality_gap")
"""``median`` is rliable's (of per-task means); ``compare``'s median is ``median_of_runs``."""
DIFFERENCES = ("probability_of_improvement", "difference_iqm", "difference_mean", "difference_median")
"""X against Y; the differences are of the pooled statistics (``difference_median``: of ``median_of_runs``)."""


def levels(ci: float = CI) -> tuple[float, float]:
    """The levels of the lower and upper endpoints of a percentile interval."""
    return (1 - ci) / 2, (1 + ci) / 2


def band(replicates: np.ndarray, q: float, z: float, ours: int = OUR_RESAMPLES, theirs: int = REPS) -> np.ndarray:
    """``(2, ...)``: where the q-quantile of ``ours`` resamples lands, given ``theirs`` replicates (axis 0)."""
    delta = z * np.sqrt(q * (1 - q) * (1 / ours + 1 / theirs))
    return np.percentile(replicates, [100 * max(q - delta, 0), 100 * min(q + delta, 1)], axis=0)


def z_for(num_checks: int, false_alarm: float = FALSE_ALARM) -> float:
    """The two-sided normal quantile for ``false_alarm`` shared by ``num_checks`` endpoints."""
    from scipy.stats import norm

    return float(norm.isf(false_alarm / (2 * num_checks)))


def datasets() -> dict[str, dict]:
    """Scores (``runs x tasks`` per candidate, as rliable takes them) rounded to 3 decimals, and their gap threshold."""
    rng = np.random.default_rng(20240532)
    levels_ = np.array([0.2, 0.8, 1.4])  # tasks far apart: a bootstrap that does not stratify is much wider
    three = {"A": rng.normal(levels_, 0.3, (10, 3)), "B": rng.normal(levels_ + 0.25, 0.35, (10, 3))}
    one = {"A": rng.integers(0, 11, (6, 1)).astype(float), "B": rng.integers(2, 13, (9, 1)).astype(float)}
    return {
        "three_tasks": {"scores": {k: np.round(v, 3) for k, v in three.items()}, "optimality_threshold": 1.0},
        "one_task_ties_unequal_runs": {"scores": one, "optimality_threshold": 8.0},
    }


def rliable_interval(
    bootstrap, data, func, seed: int, reps: int, verify: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rliable's point estimate and interval of ``func``, and its replicates.

    ``bootstrap`` is ``StratifiedBootstrap`` for one array, ``StratifiedIndependentBootstrap`` for a
    list. The replicates are ``bootstrap(data).apply(func, reps)`` drawn after ``np.random.seed(seed)``;
    the interval is their 2.5 and 97.5 percentiles, which ``verify`` checks are the numbers of
    ``rliable.library.get_interval_estimates`` with the same seed (doing the bootstrap twice).
    """
    from rliable import library

    np.random.seed(seed)
    replicates = (bootstrap(*data) if isinstance(data, list) else bootstrap(data)).apply(func, reps)
    cis = np.percentile(replicates, [100 * q for q in levels()], axis=0)
    point = func(*data) if isinstance(data, list) else func(data)
    if verify:
        np.random.seed(seed)
        theirs, intervals = library.get_interval_estimates({"x": data}, func, reps=reps, confidence_interval_size=CI)
        assert np.array_equal(cis, intervals["x"]) and np.array_equal(point, theirs["x"]), "not conf_int's draws"
    return np.atleast_1d(point), cis, replicates


def reference(reps: int = REPS) -> dict:
    """rliable's numbers on :func:`datasets`, with bands (see the module docstring)."""
    from rliable import library, metrics

    def pooled_median(m):
        return np.median(m)

    out, pending, seed = {}, [], 0
    for name, spec in datasets().items():
        scores, gamma = spec["scores"], spec["optimality_threshold"]
        stats = [
            metrics.aggregate_iqm,
            metrics.aggregate_mean,
            metrics.aggregate_median,
            pooled_median,
            lambda m, gamma=gamma: metrics.aggregate_optimality_gap(m, gamma),
        ]
        entry = {
            "scores": {k: v.tolist() for k, v in scores.items()},
            "optimality_threshold": gamma,
            "aggregates": {},
            "improvement": {},
        }
        for candidate, m in scores.items():
            seed += 1
            point, cis, reps_ = rliable_interval(
                library.StratifiedBootstrap, m, lambda m, stats=stats: np.array([f(m) for f in stats]), seed, reps
            )
            assert np.allclose(point, [f(m) for f in stats])
            entry["aggregates"][candidate] = {
                s: {"value": point[i], "lo": cis[0, i], "hi": cis[1, i], "seed": seed} for i, s in enumerate(AGGREGATES)
            }
            pending += [
                (entry["aggregates"][candidate][s], reps_[:, i]) for i, s in enumerate(AGGREGATES) if s != "median"
            ]

        def pair(x, y):
            return np.array(
                [
                    metrics.probability_of_improvement(x, y),
                    metrics.aggregate_iqm(x) - metrics.aggregate_iqm(y),
                    metrics.aggregate_mean(x) - metrics.aggregate_mean(y),
                    np.median(x) - np.median(y),
                ]
            )

        seed += 1
        point, cis, reps_ = rliable_interval(
            library.StratifiedIndependentBootstrap, [scores["A"], scores["B"]], pair, seed, reps
        )
        entry["improvement"]["A>B"] = {
            s: {"value": point[i], "lo": cis[0, i], "hi": cis[1, i], "seed": seed} for i, s in enumerate(DIFFERENCES)
        }
        pending += [(entry["improvement"]["A>B"][s], reps_[:, i]) for i, s in enumerate(DIFFERENCES)]

        pooled = np.concatenate([m.ravel() for m in scores.values()])
        taus = np.linspace(pooled.min(), pooled.max(), NUM_TAUS)
        entry["taus"], entry["profiles"] = taus.tolist(), {}
        for candidate, m in scores.items():
            seed += 1
            np.random.seed(seed)
            fractions, cis = library.create_performance_profile({"x": m}, taus, reps=reps, confidence_interval_size=CI)
            np.random.seed(seed)
            reps_ = library.StratifiedBootstrap(m).apply(
                lambda s, taus=taus: library.score_distributions(s, taus), reps
            )
            assert np.array_equal(np.percentile(reps_, [100 * q for q in levels()], axis=0), cis["x"])
            profile = {"value": fractions["x"], "lo": cis["x"][0], "hi": cis["x"][1], "seed": seed}
            entry["profiles"][candidate] = profile
            pending.append((profile, reps_))
        out[name] = entry

    # Every endpoint compared: two per scalar, two per threshold of a profile.
    num_checks = sum(2 * (1 if np.ndim(r) == 1 else r.shape[1]) for _, r in pending)
    z = z_for(num_checks)
    for estimate, replicates in pending:
        for end, q in zip(("lo", "hi"), levels()):
            estimate[f"{end}_band"] = band(replicates, q, z, theirs=reps)
    versions = {p: metadata.version(p) for p in ("rliable", "arch", "pandas", "numpy", "scipy")}
    return {
        "generated_by": "tests/online_trainer/analysis/rliable_reference.py (see its docstring)",
        "versions": {"python": platform.python_version(), **versions},
        "reps": reps,
        "our_n_resamples": OUR_RESAMPLES,
        "ci": CI,
        "false_alarm": FALSE_ALARM,
        "num_checks": num_checks,
        "z": z,
        "datasets": out,
    }


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    return value.item() if isinstance(value, np.generic) else value


def main() -> None:
    data = _plain(reference())
    FIXTURE.write_text(json.dumps(data, indent=1) + "\n")
    print(
        f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes; {data['num_checks']} endpoints, z = {data['z']:.2f})",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
