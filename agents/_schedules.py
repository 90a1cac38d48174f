"""Hyperparameter schedules written as rl-baselines3-zoo writes them: ``0.2`` or ``"lin_0.2"``.

A schedule is a function of the *progress remaining*, which falls from 1 at the start of
training to 0 at its end (Stable-Baselines3's convention): ``"lin_0.2"`` is
``0.2 * progress_remaining``, a number is constant.
"""

from __future__ import annotations

from collections.abc import Callable

Schedule = Callable[[float], float]
"""A value as a function of the progress remaining (1 at the start, 0 at the end)."""

LINEAR_PREFIX = "lin_"


def parse_schedule(value: float | str, name: str) -> Schedule:
    """The schedule that ``value`` writes: a positive number (constant) or ``"lin_<start>"``.

    Raises:
        ValueError: naming ``name`` and ``value`` when it is neither, or not positive.
    """
    if isinstance(value, str):
        start: float | None = None
        if value.startswith(LINEAR_PREFIX):
            try:
                start = float(value[len(LINEAR_PREFIX) :])
            except ValueError:
                start = None
        if start is None or not start > 0:
            raise ValueError(
                f"{name} must be a positive number or a linear schedule 'lin_<start>' such as "
                f"'lin_0.001' (decaying linearly to 0 over total_steps) but got {name}={value!r}."
            )
        return lambda progress_remaining: start * progress_remaining
    if not value > 0:
        raise ValueError(f"{name} must be > 0 but got {name}={value!r}.")
    constant = float(value)
    return lambda progress_remaining: constant


def is_scheduled(value: float | str) -> bool:
    """Whether ``value`` writes a schedule that changes with progress (a ``"lin_"`` string)."""
    return isinstance(value, str)


def progress_remaining(steps: int, total_steps: int) -> float:
    """``1 - steps / total_steps``, clipped to ``[0, 1]``."""
    return min(1.0, max(0.0, 1.0 - steps / total_steps))
