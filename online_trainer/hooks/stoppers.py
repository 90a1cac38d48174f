"""Built-in hooks that end a run early: on a return threshold, without improvement, on a plateau.

They look at training episodes through the batched ``on_episodes`` (no dict per episode), and
have ``state_dict``/``load_state_dict`` for exact resume.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from online_trainer.errors import value_error
from online_trainer.loop.hook_protocol import Hook, RunContext
from online_trainer.options import validation

SOURCES = ("train", "eval")


class StopOnReturn(Hook):
    """Stop once the return holds at or above ``threshold`` for ``patience`` consecutive checks.

    Args:
        threshold: the return to reach.
        window: with ``source="train"``, the rolling mean of the last ``window`` training
            episodes is checked after each episode, once ``window`` episodes have ended (one
            lucky episode does not stop a run).
        source: ``"train"`` (training returns) or ``"eval"`` (each evaluation's mean; needs
            ``evaluation=EvaluationOptions(freq=...)``).
        patience: consecutive checks that must hold (default 1).
    """

    def __init__(self, threshold: float, window: int = 100, source: str = "train", patience: int = 1) -> None:
        self.threshold = validation.finite_number("threshold", threshold, "Pass the return to reach, e.g. 475.0.")
        self.window = validation.positive_int("window", window)
        if source not in SOURCES:
            raise value_error(source, str)(f"source must be one of {SOURCES}, but got source={source!r}.")
        self.source = source
        self.patience = validation.positive_int("patience", patience)
        self.returns: collections.deque[float] = collections.deque(maxlen=self.window)
        self.held = 0

    @property
    def needs_eval_freq(self) -> bool:  # type: ignore[override]
        """With ``source="eval"`` it checks evaluations: a run without ``evaluation.freq`` is refused."""
        return self.source == "eval"

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        if self.source != "train":
            return
        for value in returns:
            self.returns.append(float(value))
            if len(self.returns) == self.window:
                self._check(ctx, sum(self.returns) / self.window, f"mean return of the last {self.window} episodes")

    def on_eval(self, ctx: RunContext, result: dict[str, Any]) -> None:
        if self.source == "eval":
            self._check(ctx, result["mean"], "evaluation mean return")

    def _check(self, ctx: RunContext, value: float, what: str) -> None:
        self.held = self.held + 1 if value >= self.threshold else 0
        if self.held >= self.patience:
            ctx.stop(
                f"StopOnReturn: {what} {value:.4g} >= {self.threshold:g} for {self.held} consecutive "
                f"check(s) at step {ctx.global_step}"
            )

    def state_dict(self) -> dict[str, Any]:
        """The window of training returns and the consecutive checks that held."""
        return {"returns": list(self.returns), "held": self.held}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returns.clear()
        self.returns.extend(state["returns"])
        self.held = int(state["held"])


class StopOnNoImprovement(Hook):
    """Stop when ``patience`` evaluations in a row bring no new best evaluation mean.

    It needs evaluations during the run: a run without ``evaluation.freq`` is refused before it starts.

    Args:
        patience: evaluations without a new best (strictly greater mean) that end the run.
        min_evals: evaluations before the rule applies.
    """

    needs_eval_freq = True

    def __init__(self, patience: int, min_evals: int = 1) -> None:
        self.patience = validation.positive_int("patience", patience)
        self.min_evals = validation.positive_int("min_evals", min_evals)
        self.best = float("-inf")
        self.evals = 0
        self.without = 0

    def on_eval(self, ctx: RunContext, result: dict[str, Any]) -> None:
        self.evals += 1
        if result["mean"] > self.best:
            self.best, self.without = result["mean"], 0
        else:
            self.without += 1
        if self.evals >= self.min_evals and self.without >= self.patience:
            ctx.stop(
                f"StopOnNoImprovement: no better evaluation mean than {self.best:.4g} in {self.without} "
                f"evaluations, at step {ctx.global_step}"
            )

    def state_dict(self) -> dict[str, Any]:
        """The best mean, the evaluations seen, and those in a row without a new best."""
        return {"best": self.best, "evals": self.evals, "without": self.without}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.evals, self.without = float(state["best"]), int(state["evals"]), int(state["without"])


class StopOnPlateau(Hook):
    """Stop when the rolling training return changes by less than ``rel_tol`` (relative) ``patience`` times in a row.

    Every ``window`` episodes the mean return of those episodes is compared with the mean of the
    ``window`` before them: the change ``|new - old| / max(|old|, 1e-8)`` is relative, so the
    rule reads the same whatever the reward scale.

    Args:
        window: episodes per block.
        rel_tol: the relative change below which a block counts as flat.
        patience: consecutive flat blocks that end the run.
    """

    def __init__(self, window: int = 100, rel_tol: float = 0.01, patience: int = 3) -> None:
        self.window = validation.positive_int("window", window)
        self.rel_tol = validation.finite_number("rel_tol", rel_tol, positive=True)
        self.patience = validation.positive_int("patience", patience)
        self.block: list[float] = []
        self.previous: float | None = None
        self.flat = 0

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        for value in returns:
            self.block.append(float(value))
            if len(self.block) == self.window:
                self._close_block(ctx)

    def _close_block(self, ctx: RunContext) -> None:
        mean, self.block = sum(self.block) / self.window, []
        if self.previous is not None:
            change = abs(mean - self.previous) / max(abs(self.previous), 1e-8)
            self.flat = self.flat + 1 if change < self.rel_tol else 0
            if self.flat >= self.patience:
                ctx.stop(
                    f"StopOnPlateau: the mean return of blocks of {self.window} episodes changed by less than "
                    f"{self.rel_tol:g} (relative) {self.flat} times in a row, at {mean:.4g}, step "
                    f"{ctx.global_step}"
                )
        self.previous = mean

    def state_dict(self) -> dict[str, Any]:
        """The returns of the block so far, the mean of the block before, and the flat blocks in a row."""
        return {"block": list(self.block), "previous": self.previous, "flat": self.flat}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.block, self.previous, self.flat = list(state["block"]), state["previous"], int(state["flat"])
