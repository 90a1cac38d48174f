"""What env an experiment ran on, kept in ``env.json``, and the check that a resumed call brings the same one.

An env is given as a factory (or an instance), which the runner cannot compare between two calls.
What it can compare is what the env says of itself: its gymnasium id, its number of sub-envs and
the layout of its observation and action spaces (:func:`space_signature`: kind, shape, dtype, the
number of choices; not the bounds, whose text changes between gymnasium versions). The first run of
an experiment that builds its env writes them to ``env.json``; every run of a resumed call checks
its env against them before its first step. Experiments made before ``env.json`` existed are
checked against what their manifest recorded (the env id and the number of sub-envs), when it did.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from online_trainer.records import storage

logger = logging.getLogger(__name__)

ENV_FILE = "env.json"
"""The experiment's env, as :func:`env_identity` describes it."""


def space_signature(space: spaces.Space[Any]) -> Any:
    """The layout of ``space`` as plain data: its kind and shape, dtype or number of choices, nested for Dict and Tuple."""
    if isinstance(space, spaces.Discrete):
        return ["Discrete", int(space.n), int(space.start)]
    if isinstance(space, spaces.Box):
        return ["Box", list(space.shape), str(space.dtype)]
    if isinstance(space, spaces.MultiDiscrete):
        return ["MultiDiscrete", np.asarray(space.nvec).tolist()]
    if isinstance(space, spaces.MultiBinary):
        return ["MultiBinary", np.atleast_1d(np.asarray(space.n)).tolist()]
    if isinstance(space, spaces.Dict):
        return ["Dict", {key: space_signature(sub) for key, sub in space.spaces.items()}]
    if isinstance(space, spaces.Tuple):
        return ["Tuple", [space_signature(sub) for sub in space.spaces]]
    return [type(space).__name__, list(space.shape or ())]


def gym_id(env: Any) -> str | None:
    """The gymnasium id of ``env`` (of its first sub-env for a vector env built by hand), None when unregistered."""
    spec = getattr(env, "spec", None)
    if spec is None:
        envs = getattr(env, "envs", None)
        spec = getattr(envs[0], "spec", None) if envs else None
    env_id = getattr(spec, "id", None)
    return env_id if isinstance(env_id, str) else None


def env_identity(env: Any) -> dict[str, Any]:
    """What the vector env ``env`` says of itself: its gymnasium id (:func:`gym_id`), sub-envs and space layouts."""
    return {
        "env_id": gym_id(env),
        "num_envs": int(env.num_envs),
        "observation_space": space_signature(env.single_observation_space),
        "action_space": space_signature(env.single_action_space),
    }


def env_path(exp_dir: str | os.PathLike) -> Path:
    """Where the experiment's env is recorded."""
    return Path(exp_dir) / ENV_FILE


def recorded_identity(exp_dir: str | os.PathLike, *, quiet: bool = False) -> dict[str, Any] | None:
    """The env the experiment in ``exp_dir`` ran on: ``env.json``, else what its manifest recorded; None when neither says.

    Args:
        exp_dir: the experiment's directory.
        quiet: say nothing of a damaged ``env.json`` (the resumed call's own check has said it once; its runs,
            which check again, stay quiet).
    """
    path = env_path(exp_dir)
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        pass
    except (OSError, ValueError, TypeError) as exc:  # said: a damaged file must not switch the check off unseen
        if not quiet:
            logger.warning(
                "%s is damaged (%s: %s): the env is checked against the manifest's env id and number of sub-envs "
                "only. Put back a copy of it, or remove it: the next run records its env there anew.",
                path,
                type(exc).__name__,
                exc,
            )
    try:
        manifest = storage.read_manifest(exp_dir)
    except (OSError, ValueError):
        return None
    known = {name: manifest[name] for name in ("env_id", "num_envs") if manifest.get(name) is not None}
    return known or None


def record_identity(exp_dir: str | os.PathLike, identity: dict[str, Any]) -> None:
    """Write ``env.json`` unless a run of the experiment has (the first run to build its env records it)."""
    path = env_path(exp_dir)
    if path.exists():
        return
    tmp = path.with_name(f".{ENV_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(identity, indent=2))
        os.link(tmp, path)  # fails when another run's is there: the first one stays
    except FileExistsError:
        pass
    except OSError as exc:  # a filesystem without hard links, a full disk: the run goes on, unchecked on resume
        logger.warning("could not record the experiment's env in %s (%s): a resume will not check its env", path, exc)
    finally:
        tmp.unlink(missing_ok=True)


def check_identity(
    exp_dir: str | os.PathLike,
    identity: dict[str, Any],
    run: str,
    continuing: str = "resume=True",
    *,
    quiet: bool = False,
) -> None:
    """Raise unless ``identity`` (run ``run``'s env, in a resumed call: ``continuing`` names that call in the
    refusal) is the env the experiment ran on.

    Only what both sides record is compared: an experiment whose manifest has no env id (an
    unregistered env) is compared on the rest. ``quiet`` is :func:`recorded_identity`'s.

    Raises:
        ValueError: naming what differs, and what to do.
    """
    recorded = recorded_identity(exp_dir, quiet=quiet)
    if recorded is None:
        return
    names = {"env_id": "env id", "num_envs": "sub-envs", "observation_space": "observations", "action_space": "actions"}
    differences = [
        f"{label} {_shown(identity[name])} (it ran with {_shown(recorded[name])})"
        for name, label in names.items()
        if recorded.get(name) is not None and identity.get(name) is not None and recorded[name] != identity[name]
    ]
    if differences:
        raise ValueError(
            f"{continuing} continues the experiment in {os.fspath(exp_dir)!r} on the env it ran on, but {run}'s env "
            f"differs: {'; '.join(differences)}. Call it with the env it was made with, or start a new experiment in "
            "another exp_dir."
        )


def _shown(value: Any) -> str:
    """A space signature as ``Box of shape (4,), float32`` or ``Discrete(2)``; anything else as its repr."""
    if isinstance(value, list) and value and isinstance(value[0], str):
        if value[0] == "Box":
            return f"Box of shape {tuple(value[1])}, {value[2]}"
        if value[0] == "Discrete":
            return f"Discrete({value[1]})" + (f" from {value[2]}" if value[2] else "")
        return json.dumps(value)
    return repr(value)
