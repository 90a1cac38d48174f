"""When a hook's ``on_step`` is due: the cadence it declares as data (``every_steps`` or ``every_seconds``).

The hook runner reads each hook's cadence once, when the run is built, and asks :meth:`Cadence.due`
only at the env step a cadence named (:attr:`Cadence.next_step`): the loop pays one comparison a
step for every hook together.
"""

from __future__ import annotations

import time
from typing import Any

SECONDS_CHECKS = 10  # a seconds-based hook's clock is read about this many times per period


class Cadence:
    """When one hook's ``on_step`` is due, in env steps (seconds are turned into a step stride as the run goes)."""

    def __init__(self, hook: Any) -> None:
        self.hook = hook
        self.every_steps: int | None = getattr(hook, "every_steps", None)
        # a hook without every_steps has every_seconds (the hook runner gives no cadence to a hook with neither)
        self.every_seconds: float = getattr(hook, "every_seconds", None) or 0.0
        self.next_step = float(self.every_steps) if self.every_steps else 1.0
        self.restart(0)

    def restart(self, global_step: int) -> None:
        """Start the clock of a seconds-based cadence now, at ``global_step``."""
        self.due_time = time.monotonic() + self.every_seconds
        self.mark = (global_step, time.monotonic())  # (global_step, time) of the last look at the clock

    def due(self, global_step: int) -> bool:
        """Whether the hook is due at ``global_step`` (which reached :attr:`next_step`); schedules the next look."""
        if self.every_steps:
            self.next_step = (global_step // self.every_steps + 1) * self.every_steps
            return True
        now = time.monotonic()
        steps, then = self.mark
        if now > then and global_step > steps:  # look about SECONDS_CHECKS times a period, at the pace so far
            stride = (global_step - steps) * self.every_seconds / (SECONDS_CHECKS * (now - then))
            self.next_step = global_step + max(1, int(stride))
        else:
            self.next_step = global_step + 1
        self.mark = (global_step, now)
        if now >= self.due_time:
            self.due_time = now + self.every_seconds
            return True
        return False
