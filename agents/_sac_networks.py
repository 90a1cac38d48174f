"""SAC's networks: a squashed-Gaussian actor and twin Q-networks evaluated as one batched MLP.

The twin critics are two MLPs of the same shape whose weights are stacked, ``(2, in, out)``
per layer, so both run in one ``baddbmm`` per layer instead of two ``linear`` calls. Each
member is initialised as ``nn.Linear`` initialises itself, from the generator passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from online_trainer.agents._networks import ACTIVATIONS, mlp

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)


class SquashedGaussianActor(nn.Module):
    """``a = tanh(mu + std * noise)``: a Gaussian squashed into ``[-1, 1]`` per action dimension.

    Args:
        features: layers from observation features to the MLP input (a CNN for images; none
            for vectors), whose output has ``in_dim`` columns.
        in_dim: width of the MLP input.
        action_dim: number of action dimensions.
        hidden_sizes: hidden widths (the activation follows each hidden layer).
        activation: hidden activation name.
        log_std_bounds: ``(min, max)`` the log std is clamped to (SB3: ``(-20, 2)``).
        generator: torch generator of the initial weights.
    """

    def __init__(
        self,
        features: Sequence[nn.Module],
        in_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        log_std_bounds: tuple[float, float],
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(*features)
        self.net = mlp((in_dim, *hidden_sizes, 2 * action_dim), activation, generator)
        self.action_dim = action_dim
        self.log_std_min, self.log_std_max = log_std_bounds

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and clamped log std of the pre-squash Gaussian."""
        mu, log_std = self.net(self.features(x)).split(self.action_dim, dim=-1)
        return mu, log_std.clamp(self.log_std_min, self.log_std_max)

    def sample(self, x: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Squashed actions from standard-normal ``noise``, and their log-probabilities.

        ``log pi(a) = log N(u; mu, std) - sum log(1 - tanh(u)^2)``, the correction written
        as ``2 * (log 2 - u - softplus(-2u))`` (exact, and stable for large ``|u|``).
        """
        mu, log_std = self(x)
        u = mu + log_std.exp() * noise
        log_prob = (-0.5 * noise.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)
        log_prob = log_prob - (2.0 * (_LOG_2 - u - nn.functional.softplus(-2.0 * u))).sum(-1)
        return torch.tanh(u), log_prob

    def act(self, x: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Squashed actions from standard-normal ``noise``, without their log-probabilities."""
        mu, log_std = self(x)
        return torch.tanh(mu + log_std.exp() * noise)

    def greedy(self, x: torch.Tensor) -> torch.Tensor:
        """``tanh(mu)``: the squashed mean."""
        return torch.tanh(self(x)[0])


class TwinQ(nn.Module):
    """Two Q-networks ``Q_k(s, a)`` of the same shape, evaluated together.

    Args:
        features: layers from observation features to the MLP input (shared by the twins).
        in_dim: width of the observation part of the MLP input.
        action_dim: number of action dimensions (concatenated to the observation part).
        hidden_sizes: hidden widths.
        activation: hidden activation name.
        generator: torch generator of the initial weights.
    """

    def __init__(
        self,
        features: Sequence[nn.Module],
        in_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        generator: torch.Generator,
    ) -> None:
        super().__init__()
        self.features = nn.Sequential(*features)
        self._shared = len(features) > 0
        sizes = (in_dim + action_dim, *hidden_sizes, 1)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            weight = torch.empty(2, fan_in, fan_out)
            bias = torch.empty(2, 1, fan_out)
            bound = 1.0 / math.sqrt(fan_in)
            for k in range(2):  # nn.Linear's initialisation of each twin, weights stored transposed
                w = torch.empty(fan_out, fan_in)
                nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=generator)
                weight[k] = w.T
                nn.init.uniform_(bias[k], -bound, bound, generator=generator)
            self.weights.append(nn.Parameter(weight))
            self.biases.append(nn.Parameter(bias))
        self.activation = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor, actions: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """Both Q-values, shape ``(2, batch)``.

        Args:
            x: observation features ``(batch, dim)``.
            actions: squashed actions ``(batch, action_dim)``.
            detach_params: use the weights without recording their gradients (the actor's
                loss needs gradients with respect to ``actions`` only).
        """
        if self._shared:
            with torch.set_grad_enabled(torch.is_grad_enabled() and not detach_params):
                x = self.features(x)
        h = torch.cat([x, actions], dim=-1).expand(2, -1, -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            if detach_params:
                weight, bias = weight.detach(), bias.detach()
            h = torch.baddbmm(bias, h, weight)
            if i < last:
                h = self.activation(h)
        return h.squeeze(-1)
