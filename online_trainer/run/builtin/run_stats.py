"""The built-in observability hook: steps per second, rolling return and length, and where the time goes.

Through the run's callback, every ``every_steps`` env steps (default: about every 10 seconds) and
once more when the run ends (its budget spent, or stopped by a hook):
``sps``, ``rolling_return`` and ``rolling_length`` (means over the last ``window`` episodes) under
``stats/run_{i}``, and the share of wall time spent in ``act``, ``env_step``, ``update`` and the
``runner`` itself under ``timing/run_{i}``, since the run started. The shares are sampled: a
thread looks at the run's stack every :data:`SAMPLE_SECONDS`, so the loop pays nothing per step.
Sampling every 20 ms cost a one-sub-env CartPole run 11 us a step (the thread takes the GIL from
the loop); every 250 ms costs about 1 us (``bench/overhead.py``, variant ``tb``).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from online_trainer.loop.hook_protocol import Hook, RunContext
from online_trainer.run.builtin.episode_log import EpisodeLog

SAMPLE_SECONDS = 0.25  # 40 samples per 10-second period; the shares accumulate over the run
PHASES = ("act", "env_step", "update", "runner")


def _code(method: Any) -> Any:
    return getattr(getattr(method, "__func__", method), "__code__", None)


class PhaseSampler:
    """Counts, at regular intervals, whether a thread is inside ``act``, ``env.step``, ``update`` or elsewhere."""

    def __init__(self, agent: Any, env: Any, thread_id: int) -> None:
        self.codes = {
            code: phase
            for code, phase in (
                (_code(getattr(agent, "act", None)), "act"),
                (_code(getattr(env, "step", None)), "env_step"),
                (_code(getattr(agent, "update", None)), "update"),
            )
            if code is not None
        }
        self.thread_id = thread_id
        self.counts = dict.fromkeys(PHASES, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="online_trainer-phase-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            frame = sys._current_frames().get(self.thread_id)
            phase = "runner"
            while frame is not None:
                found = self.codes.get(frame.f_code)
                if found is not None:
                    phase = found
                    break
                frame = frame.f_back
            self.counts[phase] += 1

    def shares(self) -> dict[str, float]:
        """The share of samples in each phase since the run started (empty without samples)."""
        counts = dict(self.counts)
        total = sum(counts.values())
        return {phase: count / total for phase, count in counts.items()} if total else {}


class RunStats(Hook):
    """Logs SPS, rolling means and timing shares of a run (see the module docstring).

    Args:
        episodes: the run's episode log, which keeps the last ``window`` episodes' returns and lengths.
        every_steps: log every this many env steps; None: every ``every_seconds``.
        every_seconds: the period without ``every_steps``.
    """

    def __init__(self, episodes: EpisodeLog, every_steps: int | None = None, every_seconds: float = 10.0) -> None:
        self.episodes = episodes
        self.every_steps = every_steps
        self.every_seconds = None if every_steps is not None else every_seconds
        self.sampler: PhaseSampler | None = None
        self.phase_counts = dict.fromkeys(PHASES, 0)  # samples restored by load_state_dict, before the run starts
        self.mark = (0, 0.0)

    def on_run_start(self, ctx: RunContext) -> None:
        self.mark = (ctx.global_step, time.perf_counter())
        self.sampler = PhaseSampler(ctx.agent, ctx.env, threading.get_ident())
        self.sampler.counts.update(self.phase_counts)
        self.sampler.start()

    def on_run_end(self, ctx: RunContext) -> None:
        """Log once more at the run's end (a run shorter than the period would log nothing otherwise)."""
        if ctx.global_step > self.mark[0]:  # not when the last periodic log was at this step
            self.on_step(ctx)

    def on_step(self, ctx: RunContext) -> None:
        steps, then = self.mark
        now = time.perf_counter()
        self.mark = (ctx.global_step, now)
        stats = {"sps": (ctx.global_step - steps) / max(now - then, 1e-9)}
        returns, lengths = self.episodes.recent()
        if returns:
            stats["rolling_return"] = float(sum(returns)) / len(returns)
            stats["rolling_length"] = float(sum(lengths)) / len(lengths)
        ctx.callback(stats, f"stats/{ctx.run_tag}", ctx.global_step, force=True)
        shares = self.sampler.shares() if self.sampler is not None else {}
        if shares:
            ctx.callback(shares, f"timing/{ctx.run_tag}", ctx.global_step, force=True)

    def close(self) -> None:
        """Stop the sampling thread (the run ended, however it ended)."""
        if self.sampler is not None:
            self.sampler.close()
            self.phase_counts = dict(self.sampler.counts)
            self.sampler = None

    def state_dict(self) -> dict[str, Any]:
        """``returns`` and ``lengths``: the window of the rolling means, oldest first; ``phase_counts``:
        the timing samples per phase so far (the SPS period starts again on resume)."""
        counts = self.sampler.counts if self.sampler is not None else self.phase_counts
        returns, lengths = self.episodes.recent()
        return {
            "returns": [float(r) for r in returns],
            "lengths": [int(n) for n in lengths],
            "phase_counts": dict(counts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.episodes.restore_recent(state["returns"], state["lengths"])
        self.phase_counts = {phase: int(state["phase_counts"].get(phase, 0)) for phase in PHASES}
        if self.sampler is not None:  # already sampling: its counts go on from the saved ones
            self.sampler.counts = dict(self.phase_counts)
