"""Feature encoding of observations and MLPs initialised from a given torch Generator."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
"""Activation names accepted by :func:`mlp`."""


class ObsEncoder:
    """Turns a batch of observations into a float32 feature matrix ``(batch, dim)``.

    ``Discrete`` observations become one-hot vectors; ``Box`` and ``MultiBinary`` ones are
    flattened.

    Raises:
        ValueError: for other observation spaces.
    """

    def __init__(self, space: gym.Space) -> None:
        if isinstance(space, gym.spaces.Discrete):
            self.dim = int(space.n)
            self._start = int(space.start)
            self._eye = np.eye(self.dim, dtype=np.float32)
        elif isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
            self.dim = int(np.prod(space.shape))
            self._eye = None
        else:
            raise ValueError(
                f"Observations must come from a Discrete, Box or MultiBinary space but got observation_space={space}."
            )
        self.one_hot = self._eye is not None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self._eye is not None:
            return self._eye[np.asarray(obs, dtype=np.int64).reshape(-1) - self._start]
        obs = np.asarray(obs, dtype=np.float32)
        return obs.reshape(obs.shape[0], self.dim)


def mlp(
    sizes: Sequence[int],
    activation: str,
    generator: torch.Generator,
    *,
    orthogonal: bool = False,
    hidden_gain: float = math.sqrt(2),
    out_gain: float = 1.0,
) -> nn.Sequential:
    """An MLP ``sizes[0] -> ... -> sizes[-1]`` initialised from ``generator`` only.

    Layers are created without their default initialisation (which would draw from
    torch's global generator) and then initialised from ``generator``: orthogonal weights
    with ``hidden_gain``/``out_gain`` and zero biases (``orthogonal=True``, as in PPO
    implementations), or PyTorch's default ``nn.Linear`` scheme otherwise.
    """
    layers: list[nn.Module] = []
    n_layers = len(sizes) - 1
    for i in range(n_layers):
        layer = nn.utils.skip_init(nn.Linear, sizes[i], sizes[i + 1])
        last = i == n_layers - 1
        if orthogonal:
            nn.init.orthogonal_(layer.weight, gain=out_gain if last else hidden_gain, generator=generator)
            nn.init.zeros_(layer.bias)
        else:
            nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
            bound = 1.0 / math.sqrt(sizes[i])
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
        layers.append(layer)
        if not last:
            layers.append(ACTIVATIONS[activation]())
    return nn.Sequential(*layers)


def resolve_device(device: str | torch.device) -> torch.device:
    """``torch.device(device)``, raising ValueError for CUDA when it is not available."""
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} was requested but CUDA is not available; use device='cpu'.")
    return resolved
