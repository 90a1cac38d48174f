"""A run's budget: how many episodes or env steps it trains for."""

from __future__ import annotations

from dataclasses import dataclass

INFINITY = float("inf")


@dataclass(frozen=True)
class Budget:
    """When a run stops: after ``num_episodes`` finished episodes or ``total_steps`` env steps.

    Exactly one is set. Env steps count real transitions of all sub-envs together; a step
    budget may be overshot by less than ``num_envs`` steps, because sub-envs step together.
    """

    num_episodes: int | None = None
    total_steps: int | None = None

    @property
    def max_episodes(self) -> float:
        return INFINITY if self.num_episodes is None else self.num_episodes

    @property
    def max_steps(self) -> float:
        return INFINITY if self.total_steps is None else self.total_steps

    @property
    def unit(self) -> str:
        """``episodes`` or ``steps``: what the budget counts."""
        return "episodes" if self.num_episodes is not None else "steps"

    @property
    def total(self) -> int:
        if self.num_episodes is not None:
            return self.num_episodes
        assert self.total_steps is not None  # exactly one is set
        return self.total_steps
