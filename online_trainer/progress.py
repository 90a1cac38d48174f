"""Progress display: one tqdm bar per run (``tqdm.auto``, so notebooks render it)."""

from __future__ import annotations

from typing import Protocol

from tqdm.auto import tqdm


class RunProgress(Protocol):
    """What a run reports while it goes."""

    def advance(self, amount: int) -> None:
        """Count ``amount`` more episodes (episode budget) or env steps (step budget)."""

    def episode_end(self, ep_return: float) -> None:
        """Show the return of the episode that just ended."""

    def close(self) -> None:
        """The run ended."""


class Progress(Protocol):
    """Opens a :class:`RunProgress` per run."""

    def open_run(self, run_idx: int, total: int, unit: str) -> RunProgress:
        """Start the display of run ``run_idx`` whose budget is ``total`` ``unit``."""


class NoProgress:
    """Displays nothing."""

    def open_run(self, run_idx: int, total: int, unit: str) -> "NoProgress":
        return self

    def advance(self, amount: int) -> None:
        pass

    def episode_end(self, ep_return: float) -> None:
        pass

    def close(self) -> None:
        pass


class TqdmRunProgress:
    """A tqdm bar for one run, showing the last episode return."""

    def __init__(self, run_idx: int, total: int, unit: str, position: int | None = None, leave: bool = True) -> None:
        self.bar = tqdm(total=total, unit=unit, desc=f"run {run_idx}", position=position, leave=leave, dynamic_ncols=True)

    def advance(self, amount: int) -> None:
        self.bar.update(amount)

    def episode_end(self, ep_return: float) -> None:
        self.bar.set_postfix_str(f"return={ep_return:.4g}", refresh=False)

    def close(self) -> None:
        self.bar.close()


class TqdmProgress:
    """One bar per run, in the process that runs it."""

    def open_run(self, run_idx: int, total: int, unit: str) -> TqdmRunProgress:
        return TqdmRunProgress(run_idx, total, unit)
