"""MLPs initialised from a given torch Generator, and the device networks go to."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
from torch import nn

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "tanh": nn.Tanh}
"""Activation names accepted by :func:`mlp`."""


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
    """``torch.device(device)``; ``"auto"`` is CUDA when available, else the CPU.

    Raises:
        ValueError: for a CUDA device when CUDA is not available, or a name torch does not know.
    """
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>' but got device={device!r}."
        ) from error
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={str(device)!r} was requested but CUDA is not available; use device='cpu' or device='auto'."
        )
    return resolved


def adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """``torch.optim.Adam`` with its fused kernel (one call per step for all parameters).

    The per-parameter loop of the default implementation costs more than the arithmetic for
    the small networks of these agents on a CPU.
    """
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)


_SMALLEST_DENORMAL = torch.tensor([1], dtype=torch.int32).view(torch.float32)
"""2**-149, built from its bits so that it exists whatever the flush mode is at import."""


@contextlib.contextmanager
def flush_denormals() -> Iterator[None]:
    """Run the block with denormal floats flushed to zero (``torch.set_flush_denormal``), then
    restore the mode found on entry.

    Adam's first moment of a weight whose gradient stays zero (a dead ReLU unit) shrinks by
    ``beta1`` a step and falls below float32's smallest normal number (1.2e-38) within a few
    hundred steps, and a CPU computes on such numbers many times slower: after 15k DQN steps on
    CartPole, 37k of the 65k first moments of the 256x256 layer were denormal and a fused Adam
    step took 0.97 ms instead of 0.19 ms. Flushed to zero, such a moment would have moved its
    weight by less than ``lr * 1e-30``. The mode belongs to the calling thread (torch's intra-op
    worker threads keep theirs); where the CPU cannot flush, nothing changes.
    """
    flushing = bool((_SMALLEST_DENORMAL * 1.0).item() == 0.0)
    if not flushing:
        torch.set_flush_denormal(True)
    try:
        yield
    finally:
        if not flushing:
            torch.set_flush_denormal(False)
