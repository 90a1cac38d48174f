"""PPO's actor-critic: separate MLPs, categorical or diagonal-Gaussian policy.

Sampling draws its randomness from a numpy Generator passed in (the agent's own), so no
torch generator is needed on the network's device and no global state is touched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from online_trainer.agents._encoders import space_shape
from online_trainer.agents._networks import mlp

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


class ActorCritic(nn.Module):
    """Policy and value networks for a ``Discrete`` or ``Box`` action space.

    Args:
        obs_dim: size of the observation features.
        action_space: ``Discrete`` (categorical policy) or ``Box`` (Gaussian policy with a
            state-independent log std; actions are flattened).
        hidden_sizes: hidden widths of both networks.
        activation: hidden activation name.
        log_std_init: initial log std of the Gaussian policy.
        generator: torch generator for the initial weights (orthogonal, as in CleanRL).
        features: layers shared by both networks before their MLPs (a CNN for images; none for
            vectors), whose output has ``obs_dim`` columns.
    """

    def __init__(
        self,
        obs_dim: int,
        action_space: gym.Space,
        hidden_sizes: Sequence[int],
        activation: str,
        log_std_init: float,
        generator: torch.Generator,
        features: Sequence[nn.Module] = (),
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(*features)
        self._shared = len(features) > 0
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if isinstance(action_space, gym.spaces.Discrete):
            out_dim = int(action_space.n)
        else:
            out_dim = int(np.prod(space_shape(action_space)))
        self.out_dim = out_dim
        self.critic = mlp((obs_dim, *hidden_sizes, 1), activation, generator, orthogonal=True, out_gain=1.0)
        self.actor = mlp((obs_dim, *hidden_sizes, out_dim), activation, generator, orthogonal=True, out_gain=0.01)
        self.log_std = None if self.discrete else nn.Parameter(torch.full((out_dim,), float(log_std_init)))

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        """The shared features of observation features ``x`` (``x`` itself without shared layers)."""
        return self.features(x) if self._shared else x

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """State values, shape ``(batch,)``."""
        return self.critic(self.trunk(x)).squeeze(-1)

    def policy_out(self, x: torch.Tensor) -> torch.Tensor:
        """The actor's output (logits or Gaussian means)."""
        return self.actor(self.trunk(x))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actor output, state values)``, the shared layers run once."""
        h = self.trunk(x)
        return self.actor(h), self.critic(h).squeeze(-1)

    def log_prob_entropy(self, out: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of ``actions`` and entropies under the actor output ``out``."""
        if self.discrete:
            log_p = torch.log_softmax(out, dim=-1)
            chosen = log_p.gather(1, actions.long().unsqueeze(1)).squeeze(1)
            return chosen, -(log_p.exp() * log_p).sum(-1)
        assert self.log_std is not None  # a Gaussian policy has one
        log_std = self.log_std.expand_as(out)
        z = (actions - out) * torch.exp(-log_std)
        log_prob = (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        entropy = (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)
        return log_prob, entropy

    def sample(self, out: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        """One action per row of the actor output ``out``, drawn with ``rng``."""
        n = out.shape[0]
        if self.discrete:
            cdf = torch.softmax(out, dim=-1).cumsum(-1).cpu().numpy()
            u = rng.random((n, 1))
            index = np.minimum((cdf < u).sum(axis=1), self.out_dim - 1)
            return torch.as_tensor(index, device=out.device)
        assert self.log_std is not None  # a Gaussian policy has one
        noise = torch.as_tensor(rng.standard_normal((n, self.out_dim), dtype=np.float32), device=out.device)
        return out + torch.exp(self.log_std) * noise

    def greedy(self, out: torch.Tensor) -> torch.Tensor:
        """The most likely action (argmax, or the Gaussian mean)."""
        return out.argmax(dim=-1) if self.discrete else out
