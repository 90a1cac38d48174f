"""Observation encoding: numpy packing of raw observations, and the torch feature layers.

Two stages, so that buffers can keep observations compact and networks see features:

* :class:`ObsEncoder` (numpy) packs a batch of raw observations into one array per
  observation (``pack``: the raw array itself, or a Dict's keys flattened side by side) and
  turns packed observations into a float32 matrix ``(batch, dim)`` (``__call__``: one-hot
  for ``Discrete``, flattened otherwise; pixel values are *not* scaled here).
* :func:`feature_layers` (torch) maps that matrix to the features the agent's MLP reads:
  nothing for vectors; for an image (a ``Box`` of rank 3, or a ``uint8`` one of rank 2) a
  NatureCNN-like encoder that restores the image's shape, scales ``uint8`` pixels by
  1/255 and ends in ``cnn_features`` ReLU units; for a ``Dict``, each key's own encoder
  (a CNN for image keys, its flattened values otherwise), concatenated in key order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

WRAPPER_HINT = (
    "Wrap the env to change its observations, e.g. with gymnasium.wrappers.FlattenObservation (any space to a "
    "flat Box) or, for MiniGrid, minigrid.wrappers.ImgObsWrapper (the image alone)."
)
"""What the error for an unsupported observation space suggests."""


@dataclass(frozen=True)
class ImageLayout:
    """Where an image's axes are: ``shape`` as stored, ``channels_first`` and ``scale``."""

    shape: tuple[int, ...]
    channels_first: bool
    scale: float

    @property
    def chw(self) -> tuple[int, int, int]:
        """``(channels, height, width)`` of the image."""
        if len(self.shape) == 2:
            height, width = self.shape
            return 1, height, width
        if self.channels_first:
            channels, height, width = self.shape
            return channels, height, width
        height, width, channels = self.shape
        return channels, height, width


def image_layout(space: gym.Space) -> ImageLayout | None:
    """The layout of an image ``Box``, or None when ``space`` is not one.

    A ``Box`` of rank 3 is an image whose channel axis is the smaller of the first and the
    last (``HxWxC`` on a tie); a ``uint8`` ``Box`` of rank 2 is a one-channel image.
    ``uint8`` pixels are scaled by 1/255, float ones are used as they are.
    """
    if not isinstance(space, gym.spaces.Box):
        return None
    is_uint8 = space.dtype == np.uint8
    if len(space.shape) == 3 or (len(space.shape) == 2 and is_uint8):
        channels_first = len(space.shape) == 3 and space.shape[0] < space.shape[-1]
        return ImageLayout(tuple(int(s) for s in space.shape), channels_first, 1.0 / 255.0 if is_uint8 else 1.0)
    return None


def space_shape(space: gym.Space) -> tuple[int, ...]:
    """``space.shape``, which every space used here has (``Space.shape`` may be None)."""
    if space.shape is None:
        raise ValueError(f"The space {space} has no shape. {WRAPPER_HINT}")
    return space.shape


def _part_dim(space: gym.Space) -> int:
    return int(space.n) if isinstance(space, gym.spaces.Discrete) else int(np.prod(space_shape(space)))


def _check_leaf(space: gym.Space, where: str) -> None:
    if not isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary)):
        raise ValueError(
            f"Observations must come from a Box, Discrete or MultiBinary space, or a Dict of those, but got "
            f"{where}={space}. {WRAPPER_HINT}"
        )


class ObsEncoder:
    """Packs raw observations for storage and turns them into a float32 matrix ``(batch, dim)``.

    Args:
        space: the single observation space of the env.

    Attributes:
        dim: number of columns of ``__call__``'s output.
        storage_shape, storage_dtype: shape and dtype of one packed observation.
        one_hot: True for a ``Discrete`` space (its features are one-hot vectors).
        vector: True for a non-image ``Box`` (the only kind that may be normalised).

    Raises:
        ValueError: for spaces other than Box, Discrete, MultiBinary or a flat Dict of
            those; the message suggests a wrapper.
    """

    def __init__(self, space: gym.Space) -> None:
        self.space = space
        self.keys: tuple[str, ...] | None = None
        if isinstance(space, gym.spaces.Dict):
            self.keys = tuple(space.spaces)
            for key in self.keys:
                _check_leaf(space[key], f"observation_space[{key!r}]")
            parts = [space[key] for key in self.keys]
            self._sizes = [1 if isinstance(p, gym.spaces.Discrete) else int(np.prod(space_shape(p))) for p in parts]
            self._starts = [int(p.start) if isinstance(p, gym.spaces.Discrete) else 0 for p in parts]
            self._one_hot = [
                np.eye(p.n, dtype=np.float32) if isinstance(p, gym.spaces.Discrete) else None for p in parts
            ]
            all_uint8 = all(isinstance(p, gym.spaces.Box) and p.dtype == np.uint8 for p in parts)
            self.storage_dtype = np.dtype(np.uint8 if all_uint8 else np.float32)
            self.storage_shape: tuple[int, ...] = (sum(self._sizes),)
            self.dim = sum(_part_dim(p) for p in parts)
            self.one_hot = self.vector = False
            return
        _check_leaf(space, "observation_space")
        self.dim = _part_dim(space)
        self.storage_shape, self.storage_dtype = space_shape(space), np.dtype(space.dtype)
        self.one_hot = isinstance(space, gym.spaces.Discrete)
        self._eye = np.eye(self.dim, dtype=np.float32) if self.one_hot else None
        self._start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0
        self.vector = not self.one_hot and image_layout(space) is None

    def pack(self, obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        """A batch of raw observations as one array ``(batch, *storage_shape)``."""
        if self.keys is None:
            return np.asarray(obs)
        n = len(obs[self.keys[0]])
        columns = [np.asarray(obs[key]).reshape(n, -1) for key in self.keys]
        return np.concatenate(columns, axis=1, dtype=self.storage_dtype)

    def __call__(self, packed: np.ndarray) -> np.ndarray:
        """Float32 features ``(batch, dim)`` of packed observations."""
        if self.keys is not None:
            out, start = [], 0
            for size, offset, eye in zip(self._sizes, self._starts, self._one_hot):
                column = packed[:, start : start + size]
                out.append(column.astype(np.float32) if eye is None else eye[column[:, 0].astype(np.int64) - offset])
                start += size
            return np.concatenate(out, axis=1)
        if self._eye is not None:
            return self._eye[np.asarray(packed, dtype=np.int64).reshape(-1) - self._start]
        packed = np.asarray(packed, dtype=np.float32)
        return packed.reshape(packed.shape[0], self.dim)


def _init(layer: nn.Conv2d | nn.Linear, fan_in: int, generator: torch.Generator, orthogonal: bool, gain: float) -> None:
    if orthogonal:
        nn.init.orthogonal_(layer.weight, gain=gain, generator=generator)
        if layer.bias is not None:  # the layers made here all have one
            nn.init.zeros_(layer.bias)
    else:  # PyTorch's default scheme, drawn from ``generator``
        nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
        bound = 1.0 / math.sqrt(fan_in)
        if layer.bias is not None:
            nn.init.uniform_(layer.bias, -bound, bound, generator=generator)


class ImageEncoder(nn.Module):
    """NatureCNN (Mnih et al. 2015) for images of at least 36x36, a 2x2-kernel CNN for smaller ones.

    Args:
        layout: the image's layout (see :func:`image_layout`).
        features: width of the final ReLU layer.
        generator: torch generator of the initial weights.
        orthogonal: orthogonal initialisation with gain sqrt(2) (PPO), else PyTorch's default.

    Raises:
        ValueError: for an image smaller than 2x2.
    """

    def __init__(self, layout: ImageLayout, features: int, generator: torch.Generator, orthogonal: bool) -> None:
        super().__init__()
        self.layout = layout
        channels, height, width = layout.chw
        if min(height, width) >= 36:
            specs = [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
        else:
            specs = [(width_out, 2, 1) for width_out in (16, 32, 64)][: min(height, width) - 1]
        if not specs:
            raise ValueError(
                f"Images must be at least 2x2 for the CNN encoder but got shape {layout.shape}. {WRAPPER_HINT}"
            )
        layers: list[nn.Module] = []
        in_channels = channels
        for out_channels, kernel, stride in specs:
            conv = nn.utils.skip_init(nn.Conv2d, in_channels, out_channels, kernel, stride)
            _init(conv, in_channels * kernel * kernel, generator, orthogonal, math.sqrt(2))
            layers += [conv, nn.ReLU()]
            in_channels = out_channels
            height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
        flat = in_channels * height * width
        linear = nn.utils.skip_init(nn.Linear, flat, features)
        _init(linear, flat, generator, orthogonal, math.sqrt(2))
        self.cnn = nn.Sequential(*layers, nn.Flatten(), linear, nn.ReLU())
        self.out_dim = features
        self._shape = (-1, *layout.shape) if len(layout.shape) == 3 else (-1, 1, *layout.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Features of flattened images ``(batch, H*W*C)``."""
        image = x.reshape(self._shape)
        if len(self.layout.shape) == 3 and not self.layout.channels_first:
            image = image.permute(0, 3, 1, 2)
        if self.layout.scale != 1.0:
            image = image * self.layout.scale
        return self.cnn(image)


class DictEncoder(nn.Module):
    """Each key's encoder (a CNN for images, the flattened values otherwise), concatenated.

    Args:
        space: a ``Dict`` of Box, Discrete and MultiBinary spaces.
        features: width of each image key's CNN output.
        generator: torch generator of the initial weights.
        orthogonal: see :class:`ImageEncoder`.
    """

    def __init__(self, space: gym.spaces.Dict, features: int, generator: torch.Generator, orthogonal: bool) -> None:
        super().__init__()
        self.sizes = [_part_dim(space[key]) for key in space.spaces]
        self.encoders = nn.ModuleList()  # in key order (a ModuleDict would reject keys with a ".")
        self.out_dim = 0
        for key, size in zip(space.spaces, self.sizes):
            layout = image_layout(space[key])
            if layout is None:
                self.encoders.append(nn.Identity())
                self.out_dim += size
            else:
                self.encoders.append(ImageEncoder(layout, features, generator, orthogonal))
                self.out_dim += features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenated features of each key's columns of ``x``."""
        parts = x.split(self.sizes, dim=1)
        return torch.cat([encoder(part) for encoder, part in zip(self.encoders, parts)], dim=1)


def feature_layers(
    space: gym.Space, features: int, generator: torch.Generator, orthogonal: bool = False
) -> tuple[list[nn.Module], int]:
    """The layers that map :class:`ObsEncoder` output to MLP input, and the MLP's input width.

    No layer (and the encoder's ``dim``) for vector, ``Discrete`` and ``MultiBinary``
    spaces; an :class:`ImageEncoder` for images; a :class:`DictEncoder` for ``Dict`` spaces
    with at least one image key.
    """
    layout = image_layout(space)
    if layout is not None:
        image_encoder = ImageEncoder(layout, features, generator, orthogonal)
        return [image_encoder], image_encoder.out_dim
    if isinstance(space, gym.spaces.Dict) and any(image_layout(s) is not None for s in space.spaces.values()):
        dict_encoder = DictEncoder(space, features, generator, orthogonal)
        return [dict_encoder], dict_encoder.out_dim
    return [], ObsEncoder(space).dim
