"""The across-run statistics and their percentile (stratified) bootstrap intervals.

Shared by :mod:`online_trainer.analysis.stats` (one value per run) and :mod:`online_trainer.analysis.curves`
(one value per run and grid point). See :mod:`online_trainer.analysis.stats` for the conventions.
"""

from __future__ import annotations

import inspect
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import scipy.stats
from numpy.typing import ArrayLike

Seed: TypeAlias = int | np.random.Generator | None

# scipy >= 1.15 names the generator ``rng``; older releases call it ``random_state``.
_RNG_KEYWORD = "rng" if "rng" in inspect.signature(scipy.stats.bootstrap).parameters else "random_state"
# Upper bound on the number of floats one bootstrap batch holds (about 160 MB).
_MAX_BATCH_FLOATS = 20_000_000


def iqm(values: ArrayLike, axis: int | None = -1) -> float | np.ndarray:
    """Interquartile mean, as ``rliable.metrics.aggregate_iqm``: ``trim_mean(values, 0.25)``.

    ``int(0.25 * n)`` values are dropped at each end (of 1..8, the mean of 3..6); ``axis``
    is the axis to reduce (``None`` flattens first).
    """
    return scipy.stats.trim_mean(np.asarray(values, dtype=float), 0.25, axis=axis)


#: The across-run statistics, by the name that ``stat`` arguments accept.
STATISTICS: dict[str, Callable[..., float | np.ndarray]] = {"mean": np.mean, "median": np.median, "iqm": iqm}


def stat_fn(stat: str) -> Callable[..., float | np.ndarray]:
    """The statistic called ``stat``; a ValueError lists the known names."""
    try:
        return STATISTICS[stat]
    except (KeyError, TypeError):
        raise ValueError(f"stat must be one of {sorted(STATISTICS)}, got stat={stat!r}.") from None


def check_seed(seed: Seed) -> None:
    """Refuse a ``seed`` that is neither None, a non-negative int nor a numpy Generator."""
    ok = (
        seed is None
        or isinstance(seed, np.random.Generator)
        or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0)
    )
    if not ok:
        raise ValueError(f"seed must be a non-negative int, a numpy.random.Generator or None, got seed={seed!r}.")


class GroupStreams:
    """One random stream per group, the same whatever other groups are analysed with it.

    The stream of a group is seeded from ``seed`` and the group's key (its column names
    and values), or its scores (:meth:`of_values`), so adding, removing or reordering groups
    leaves every other group's intervals unchanged. A ``numpy.random.Generator`` gives one draw for the base seed
    (reproducible given its state); ``None`` draws fresh entropy.

    Args:
        seed: Seed or generator of the bootstrap.
    """

    def __init__(self, seed: Seed) -> None:
        check_seed(seed)
        if isinstance(seed, np.random.Generator):
            seed = int(seed.integers(2**63))
        self.base = None if seed is None else int(seed)

    def __call__(self, keys: Mapping[str, Any]) -> np.random.Generator:
        """The generator of the group ``keys`` (``{}`` when nothing is grouped)."""
        if self.base is None:
            return np.random.default_rng()
        text = repr(sorted((str(k), _plain(v)) for k, v in keys.items()))
        return np.random.default_rng([self.base, zlib.crc32(text.encode())])

    def of_values(self, strata: Sequence[np.ndarray]) -> np.random.Generator:
        """The generator of a group known by its values (each stratum's, in the order given): the same runs get the
        same intervals whatever their group is called (``show`` of an experiment and ``compare`` of it with another)."""
        if self.base is None:
            return np.random.default_rng()
        digest = 0
        for values in strata:
            digest = zlib.crc32(np.ascontiguousarray(values, dtype=np.float64).tobytes() + b"|", digest)
        return np.random.default_rng([self.base, digest])


def _plain(value: Any) -> Any:
    """A value whose ``repr`` is the same for a numpy scalar and its Python equivalent."""
    if isinstance(value, np.generic):
        value = value.item()
    return "nan" if isinstance(value, float) and np.isnan(value) else value


def _bootstrap_interval(
    strata: list[np.ndarray], stat: Callable, ci: float, n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile-bootstrap CI of ``stat`` over the pooled runs of every stratum.

    Each array holds one stratum, runs on the last axis (leading axes, such as grid
    points, are computed in one vectorised pass). Runs are resampled within each stratum
    independently. A stratum with one run is kept as is: resampling it always returns it,
    and ``scipy.stats.bootstrap`` refuses samples of one observation.
    """
    resampled = [s for s in strata if s.shape[-1] >= 2]
    fixed = [s for s in strata if s.shape[-1] < 2]
    fixed_values = np.concatenate(fixed, axis=-1) if fixed else None

    def pooled(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        parts = list(samples)
        if fixed_values is not None:
            shape = samples[0].shape[:-1] + (fixed_values.shape[-1],)
            parts.append(np.broadcast_to(np.expand_dims(fixed_values, -2), shape))
        return stat(parts[0] if len(parts) == 1 else np.concatenate(parts, axis=-1), axis=-1)

    per_resample = max(1, int(np.prod(strata[0].shape[:-1])) * sum(s.shape[-1] for s in strata))
    batch = max(1, min(n_resamples, _MAX_BATCH_FLOATS // per_resample))
    result = scipy.stats.bootstrap(
        resampled,
        pooled,
        n_resamples=n_resamples,
        batch=batch,
        vectorized=True,
        axis=-1,
        confidence_level=ci,
        method="percentile",
        **{_RNG_KEYWORD: rng},
    )
    return np.asarray(result.confidence_interval.low), np.asarray(result.confidence_interval.high)


def estimate(
    strata: list[np.ndarray], stat: Callable, ci: float | None, n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Rows value, lo, hi of ``stat`` over the pooled runs (last axis) of the strata (2-D).

    Bounds are NaN where fewer than two runs exist, and equal to the value where every
    run has the same value.
    """
    pooled = np.concatenate(strata, axis=-1)
    out = np.full((3, pooled.shape[0]), np.nan)
    if pooled.shape[-1] == 0:
        return out
    out[0] = stat(pooled, axis=-1)
    if ci is None or all(s.shape[-1] < 2 for s in strata):
        return out
    constant = np.ptp(pooled, axis=-1) == 0
    out[1:, constant] = out[0, constant]
    if not constant.all():
        out[1:, ~constant] = _bootstrap_interval([s[~constant] for s in strata], stat, ci, n_resamples, rng)
    return out
