"""Agent state objects that ``torch.load(..., weights_only=True)`` can read.

An agent's state is a tree of dicts, lists and tuples whose leaves are tensors, numpy
arrays and Python scalars. :func:`pack_state` turns it into a deep copy holding only
tensors and primitive containers (numpy arrays become ``{"__ndarray__": tensor}``), so the
same object can be kept in memory, pickled, or written with ``torch.save`` and read back
with ``weights_only=True``. :func:`unpack_state` reverses it, again without sharing memory
with its input.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from typing import Any

import numpy as np
import torch

_NDARRAY = "__ndarray__"
SUFFIX = ".pt"
"""Extension of the file :func:`write_state` writes after the path prefix it is given."""


def pack_state(obj: Any) -> Any:
    """Return a deep copy of ``obj`` holding only tensors, primitives and containers.

    Raises:
        TypeError: for a leaf that is neither a tensor, a numpy array nor a primitive.
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError(f"Cannot store a numpy array of dtype=object in an agent state: {obj!r}")
        return {_NDARRAY: torch.from_numpy(np.array(obj, copy=True))}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {key: pack_state(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(pack_state(value) for value in obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"Cannot store {obj!r} of type {type(obj).__name__} in an agent state.")


def unpack_state(obj: Any) -> Any:
    """Inverse of :func:`pack_state`: numpy arrays come back as arrays (fresh copies)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        if set(obj) == {_NDARRAY}:
            return obj[_NDARRAY].numpy().copy()
        return {key: unpack_state(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(unpack_state(value) for value in obj)
    return obj


def state_file(path: str | os.PathLike) -> str:
    """The file that ``save(path)`` writes: ``path + ".pt"`` (``path`` itself if it ends so)."""
    path = os.fspath(path)
    return path if path.endswith(SUFFIX) else path + SUFFIX


def write_state(path: str | os.PathLike, state: Any) -> str:
    """Write a packed state to ``state_file(path)`` atomically and return that file name."""
    target = state_file(path)
    directory = os.path.dirname(os.path.abspath(target))
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-{secrets.token_hex(4)}{SUFFIX}")
    try:
        # os.open applies the umask, as for every other file of the experiment (mkstemp's files are 0600)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _not_written(exc, target) from exc
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
        os.replace(tmp, target)
    except BaseException as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(exc, OSError) or (isinstance(exc, RuntimeError) and _disk_full(directory)):
            raise _not_written(exc, target) from exc  # torch reports a full disk as "unexpected pos ..."
        raise
    return target


def _disk_full(directory: str) -> bool:
    try:
        return shutil.disk_usage(directory).free < 1 << 20
    except OSError:
        return False


def _not_written(exc: BaseException, target: str) -> OSError:
    """``exc`` as an OSError that names the state file and says what to do."""
    code = exc.errno if isinstance(exc, OSError) else errno.ENOSPC
    hint = " Free some space or choose another exp_dir." if code == errno.ENOSPC else ""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
    return OSError(code, f"could not write the agent's state {target}: {reason}.{hint}")


def read_state(path: str | os.PathLike) -> Any:
    """Read the packed state written by :func:`write_state` (``weights_only=True``).

    Raises:
        FileNotFoundError: when no state file exists for ``path``.
    """
    target = state_file(path)
    if not os.path.exists(target):
        raise FileNotFoundError(f"No agent state at {target!r} (written by save(path) for path={os.fspath(path)!r}).")
    return torch.load(target, map_location="cpu", weights_only=True)


def numpy_rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """The state of a numpy Generator as plain Python types."""
    return dict(rng.bit_generator.state)


def set_numpy_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    """Restore a state taken by :func:`numpy_rng_state`."""
    rng.bit_generator.state = state
