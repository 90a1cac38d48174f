"""Run seeds: derived from ``seed_offset``, or from one random base drawn per experiment."""

from __future__ import annotations

import secrets

SEED_STRIDE = 10_000
"""Distance between the seeds of consecutive runs. Sub-env ``j`` of a run with seed ``s``
is reset with ``s + j``, so runs never share an env seed while ``num_envs <= SEED_STRIDE``."""


SEED_LIMIT = 2**31
"""Every training seed (a run's, and its sub-envs' ``seed + j``) is below it: evaluation seeds add it, so none
repeats a training seed, and ``np.random.seed``, which takes seeds below 2**32, takes them all."""


def draw_base_seed(num_runs: int = 1) -> int:
    """A random base seed, drawn once per experiment when ``seed_offset`` is None, with room below
    :data:`SEED_LIMIT` for the seeds of at least 1,000 runs (and of ``num_runs``)."""
    return secrets.randbelow(SEED_LIMIT - max(num_runs, 1000) * SEED_STRIDE)


def highest_seed_offset(num_runs: int) -> int:
    """The largest ``seed_offset`` whose ``num_runs`` runs keep every training seed below :data:`SEED_LIMIT`."""
    return SEED_LIMIT - num_runs * SEED_STRIDE


def run_seed(base_seed: int, run_idx: int) -> int:
    """The seed of run ``run_idx`` (numbered from 1): ``base_seed + (run_idx - 1) * SEED_STRIDE``."""
    return base_seed + (run_idx - 1) * SEED_STRIDE
