"""Run seeds: derived from ``seed_offset``, or from one random base drawn per experiment."""

from __future__ import annotations

import secrets

SEED_STRIDE = 10_000
"""Distance between the seeds of consecutive runs. Sub-env ``j`` of a run with seed ``s``
is reset with ``s + j``, so runs never share an env seed while ``num_envs <= SEED_STRIDE``."""


def draw_base_seed() -> int:
    """A random base seed, drawn once per experiment when ``seed_offset`` is None."""
    return secrets.randbelow(2**31 - 1000 * SEED_STRIDE)


def run_seed(base_seed: int, run_idx: int) -> int:
    """The seed of run ``run_idx`` (numbered from 1): ``base_seed + (run_idx - 1) * SEED_STRIDE``."""
    return base_seed + (run_idx - 1) * SEED_STRIDE
