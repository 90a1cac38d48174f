"""Running statistics for observation normalisation and reward scaling."""

from __future__ import annotations

from typing import Any

import numpy as np


class RunningMeanStd:
    """Running mean and variance of batches (parallel-variance merge, as in SB3's VecNormalize).

    Args:
        shape: shape of one sample.
        epsilon: initial pseudo-count, so the first batches do not divide by zero.
    """

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)

    def update(self, batch: np.ndarray) -> None:
        """Merge a batch (first axis: samples) into the statistics."""
        n = batch.shape[0]
        if n == 0:
            return
        batch_mean = batch.mean(axis=0)
        batch_var = batch.var(axis=0)
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + batch_var * n + delta**2 * self.count * n / total
        self.var = m2 / total
        self.count = total

    def normalize(self, x: np.ndarray, clip: float, epsilon: float = 1e-8) -> np.ndarray:
        """``clip((x - mean) / sqrt(var + epsilon), -clip, clip)`` as float32."""
        out = (x - self.mean) / np.sqrt(self.var + epsilon)
        return np.clip(out, -clip, clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """Mean, variance and count."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.mean = np.array(state["mean"], dtype=np.float64)
        self.var = np.array(state["var"], dtype=np.float64)
        self.count = float(state["count"])


class RewardScaler:
    """Divides rewards by the running std of the discounted return (no mean subtraction).

    Each sub-env keeps its discounted return ``R = gamma * R + r``, reset when its episode
    ends; only real transitions (``valid``) enter the statistics and the returns.

    Args:
        num_envs: number of sub-envs.
        gamma: discount of the return whose std is tracked.
        clip: scaled rewards are clipped to ``[-clip, clip]``.
    """

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0) -> None:
        self.rms = RunningMeanStd()
        self.returns = np.zeros(num_envs, dtype=np.float64)
        self.gamma = gamma
        self.clip = clip

    def __call__(self, reward: np.ndarray, done: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Scale ``reward``, updating the statistics with the real entries."""
        self.returns = np.where(valid, self.returns * self.gamma + reward, self.returns)
        self.rms.update(self.returns[valid])
        self.returns[valid & done] = 0.0
        scaled = reward / np.sqrt(self.rms.var + 1e-8)
        return np.clip(scaled, -self.clip, self.clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """Statistics and per-sub-env returns."""
        return {"rms": self.rms.state_dict(), "returns": self.returns.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.rms.load_state_dict(state["rms"])
        self.returns = np.array(state["returns"], dtype=np.float64)
