"""Gymnasium's normalization wrappers in evaluations: what an evaluation freezes, and the statistics it plays with.

``NormalizeReward`` divides each reward by a running estimate; ``NormalizeObservation`` standardises each
observation with running estimates of its mean and variance. Both update their estimates as they step, so an eval
env with them would score each evaluation by statistics the evaluations before it changed. An evaluation therefore:

- freezes the eval env's ``NormalizeReward`` wrappers (gymnasium's ``update_running_mean``, as its docs advise for
  evaluation): its returns are then the env's own rewards, scaled by the statistics as the env was built;
- plays with the training env's observation statistics, as Stable-Baselines3's ``EvalCallback`` does with
  ``VecNormalize``: the agent learnt on observations standardised by them. :func:`observation_statistics` merges
  the training env's (one ``NormalizeObservation`` of the vector env, or one per sub-env) into one estimate, which
  :func:`evaluation_statistics` puts into every ``NormalizeObservation`` of the eval env, frozen while it plays.

A run's checkpoints keep the merged estimate beside them (:func:`write_statistics`), so that evaluating a
checkpoint later plays as the evaluation during training did.

Wrappers are reached where they are: the vector env's own wrappers, the sub-envs' of a :class:`SyncVectorEnv`,
and the sub-envs' of an :class:`AsyncVectorEnv` through ``set_attr`` (asked first with ``has_wrapper_attr``:
``get_attr`` of an attribute a sub-env lacks ends its process).
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv, VectorEnv, VectorWrapper
from gymnasium.wrappers.utils import RunningMeanStd

logger = logging.getLogger(__name__)

FROZEN = "update_running_mean"
"""The switch of gymnasium's running statistics (``NormalizeReward``, ``NormalizeObservation``)."""
_RETURN_STATISTICS = "return_rms"  # what NormalizeReward keeps, single and vector
_OBS_STATISTICS = "obs_rms"  # what NormalizeObservation keeps, single and vector
STATISTICS_SUFFIX = "_obs_statistics.npz"
"""Put after a checkpoint's prefix (``Run1_S5000``, ``Run1_Last``, ``Run1_Best``): the file of the training env's
observation statistics when the checkpoint was written."""


def _chain(env: Any, base: type) -> Iterator[Any]:
    """``env`` and the envs it wraps, outermost first, down to (not including) an env that is no ``base``."""
    while isinstance(env, base):
        yield env
        env = getattr(env, "env", None)


def _keeps(wrapper: Any, statistics: str) -> bool:
    """Whether ``wrapper`` is a normalization wrapper keeping ``statistics`` (with the switch to freeze them)."""
    return isinstance(getattr(type(wrapper), FROZEN, None), property) and hasattr(wrapper, statistics)


def _wrappers(env: VectorEnv, statistics: str) -> tuple[list[Any], bool]:
    """The wrappers of ``env`` keeping ``statistics`` that this process holds (the vector env's, a
    :class:`SyncVectorEnv`'s sub-envs'), and whether every sub-env of an :class:`AsyncVectorEnv` has one."""
    found = [w for w in _chain(env, VectorWrapper) if _keeps(w, statistics)]
    base: Any = env.unwrapped
    if isinstance(base, SyncVectorEnv):
        for sub in base.envs:
            found += [w for w in _chain(sub, gym.Wrapper) if _keeps(w, statistics)]
        return found, False
    return found, isinstance(base, AsyncVectorEnv) and all(base.call("has_wrapper_attr", statistics))


def reward_statistics(env: VectorEnv) -> tuple[list[Any], bool]:
    """The ``NormalizeReward`` wrappers of ``env`` this process holds, and whether an :class:`AsyncVectorEnv`'s
    sub-envs have one that ``set_attr`` reaches."""
    found, remote = _wrappers(env, _RETURN_STATISTICS)
    base: Any = env.unwrapped  # an AsyncVectorEnv when remote
    if remote and any(base.call("has_wrapper_attr", _OBS_STATISTICS)):
        # set_attr reaches the outermost wrapper with the switch: NormalizeObservation's, when it is outside
        remote = False
        _warn_once(
            "The async eval env's sub-envs have both NormalizeReward and NormalizeObservation: neither can be "
            "frozen (set_attr reaches only the outermost wrapper with the switch), so each evaluation updates their "
            "statistics: its observations, and its returns unless they are raw scores (records.score='raw'), are "
            "scaled by statistics the evaluations before it changed, and a frozen agent's evaluations do not repeat. "
            "Wrap the vector env instead, gymnasium.wrappers.vector.NormalizeReward(gym.make_vec(...)), or evaluate "
            "on an env without them (EvaluationOptions(env=...))."
        )
    return found, remote


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


@contextlib.contextmanager
def frozen_reward_statistics(env: VectorEnv) -> Iterator[None]:
    """Freeze, while the block runs, the running statistics of ``env``'s ``NormalizeReward`` wrappers.

    Updated by the evaluations, they would scale each evaluation's returns otherwise (a frozen agent's evaluations
    scored 207.0, then 3.97), so an evaluation leaves them as the eval env was built.
    """
    wrappers, remote = reward_statistics(env)
    if not wrappers and not remote:
        yield
        return
    base: Any = env.unwrapped  # an AsyncVectorEnv when remote
    before = [getattr(w, FROZEN) for w in wrappers]
    remote_before = list(base.get_attr(FROZEN)) if remote else []
    for wrapper in wrappers:
        setattr(wrapper, FROZEN, False)
    if remote:
        base.set_attr(FROZEN, False)
    try:
        yield
    finally:
        for wrapper, flag in zip(wrappers, before):
            setattr(wrapper, FROZEN, flag)
        if remote:
            base.set_attr(FROZEN, remote_before)


def observation_statistics(env: VectorEnv) -> RunningMeanStd | None:
    """The observation statistics of ``env``'s ``NormalizeObservation`` wrappers merged into one estimate (a copy),
    as if one wrapper had seen every observation they saw; None when it has none.

    With one wrapper (of the vector env, or of a single sub-env) it is that wrapper's estimate exactly.
    """
    found, remote = _wrappers(env, _OBS_STATISTICS)
    estimates = [w.obs_rms for w in found]
    base: Any = env.unwrapped  # an AsyncVectorEnv when remote
    if remote:
        estimates += list(base.get_attr(_OBS_STATISTICS))
    if not estimates:
        return None
    merged = copy.deepcopy(estimates[0])
    for estimate in estimates[1:]:
        merged.update_from_moments(estimate.mean, estimate.var, estimate.count)
    return merged


@contextlib.contextmanager
def evaluation_statistics(env: VectorEnv, statistics: RunningMeanStd | None) -> Iterator[None]:
    """While the block runs, every ``NormalizeObservation`` of the eval env ``env`` standardises with ``statistics``
    (each its own copy), frozen; their switches are put back after. With ``statistics`` None (the training env has
    no ``NormalizeObservation``) the eval env's wrappers play with their own as built (a warning says so), frozen:
    updated by every evaluation, they made a frozen agent's evaluations differ (V15).

    The sub-envs' wrappers of an :class:`AsyncVectorEnv` get the statistics through ``set_attr``, and are frozen
    through it too unless the sub-envs also have ``NormalizeReward``, whose switch ``set_attr`` cannot be told from
    theirs: then they go on updating from there (by an evaluation's observations, few against the training count,
    and every evaluation starts again from the statistics given).
    """
    found, remote = _wrappers(env, _OBS_STATISTICS)
    if statistics is None and (found or remote):  # the training env has none: the agent learnt on raw observations
        _warn_once(
            "The eval env has NormalizeObservation but the training env has none: the agent learnt on raw "
            "observations. The evaluations standardise with the eval env's own statistics as they were before its "
            "first evaluation (as built: mean 0, variance 1), frozen, so that they repeat; wrap the training env "
            "alike, or evaluate on an env without it (EvaluationOptions(env=...))."
        )
        statistics = observation_statistics(env)  # its own, merged: the same for every sub-env
    if statistics is None:
        yield
        return
    base: Any = env.unwrapped  # an AsyncVectorEnv when remote
    shapes = [np.shape(w.obs_rms.mean) for w in found]
    if remote:
        shapes += [np.shape(s.mean) for s in base.get_attr(_OBS_STATISTICS)]
    if any(shape != np.shape(statistics.mean) for shape in shapes):
        _warn_once(
            f"The eval env's NormalizeObservation statistics have the shape {shapes[0]}, the training env's "
            f"{np.shape(statistics.mean)}: the evaluations use the eval env's own, which they update. Give an eval "
            "env with the training env's observations (EvaluationOptions(env=...))."
        )
        yield
        return
    before = [(w.obs_rms, getattr(w, FROZEN)) for w in found]
    for wrapper in found:
        wrapper.obs_rms = copy.deepcopy(statistics)
        setattr(wrapper, FROZEN, False)
    remote_before, remote_estimates = None, None
    if remote:
        remote_estimates = list(base.get_attr(_OBS_STATISTICS))  # the eval env's own, put back after as locally
        base.set_attr(_OBS_STATISTICS, statistics)
        if not any(base.call("has_wrapper_attr", _RETURN_STATISTICS)):  # the only switch set_attr reaches is theirs
            remote_before = list(base.get_attr(FROZEN))
            base.set_attr(FROZEN, False)
    try:
        yield
    finally:
        for wrapper, (estimate, flag) in zip(found, before):
            wrapper.obs_rms = estimate
            setattr(wrapper, FROZEN, flag)
        if remote_before is not None:
            base.set_attr(FROZEN, remote_before)
        if remote_estimates is not None:
            base.set_attr(_OBS_STATISTICS, remote_estimates)


def statistics_path(checkpoint: str | os.PathLike) -> Path:
    """Where the observation statistics of the checkpoint ``checkpoint`` are (``Run1_Best_agent.t`` and the prefix
    ``Run1_Best`` share ``Run1_Best_obs_statistics.npz``)."""
    path = Path(checkpoint)
    name = path.name.removesuffix("_agent.t")
    return path.with_name(name + STATISTICS_SUFFIX)


def statistics_bytes(statistics: RunningMeanStd) -> bytes:
    """``statistics`` as the bytes of an ``.npz`` file of three arrays: ``mean``, ``var`` and ``count``."""
    buffer = io.BytesIO()
    np.savez(buffer, mean=statistics.mean, var=statistics.var, count=np.asarray(statistics.count, dtype=np.float64))
    return buffer.getvalue()


def read_statistics(checkpoint: str | os.PathLike) -> RunningMeanStd | None:
    """The observation statistics kept beside the checkpoint ``checkpoint``; None when it has none (the training env
    had no ``NormalizeObservation``, or the checkpoint was written before they were kept).

    Raises:
        ValueError: the file does not read as one (naming it).
    """
    path = statistics_path(checkpoint)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            mean, var, count = data["mean"], data["var"], float(data["count"])
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(
            f"{path} does not read as the observation statistics of a checkpoint ({exc}): the file may be damaged "
            "(put back a copy, or remove it to evaluate with the eval env's own statistics)."
        ) from exc
    statistics = RunningMeanStd(shape=mean.shape)
    statistics.mean, statistics.var, statistics.count = mean, var, count
    return statistics


# ---------------------------------------------------------------- a restarted env's running statistics

_RUNNING = (_OBS_STATISTICS, _RETURN_STATISTICS)
_WRAPPER_OF = {_OBS_STATISTICS: "NormalizeObservation", _RETURN_STATISTICS: "NormalizeReward"}


def _plain(statistics: RunningMeanStd) -> dict[str, Any]:
    """A running estimate as plain data (copies)."""
    return {"mean": np.array(statistics.mean), "var": np.array(statistics.var), "count": float(statistics.count)}


def _estimate(state: dict[str, Any]) -> RunningMeanStd:
    """The running estimate :func:`_plain` described."""
    mean = np.array(state["mean"])
    statistics = RunningMeanStd(shape=mean.shape, dtype=mean.dtype)
    statistics.mean, statistics.var, statistics.count = mean, np.array(state["var"]), float(state["count"])
    return statistics


def _class_path(wrapper: Any) -> str:
    """``module.Class`` of ``wrapper``: gymnasium's single-env and vector ``NormalizeObservation`` share a name."""
    return f"{type(wrapper).__module__}.{type(wrapper).__qualname__}"


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _local_states(chain: Iterator[Any]) -> list[dict[str, Any]]:
    """The running statistics of the normalization wrappers of ``chain`` (outermost first), each with its position
    in the chain and its class name, so that they go back to the same wrappers of an env built again."""
    states = []
    for position, wrapper in enumerate(chain):
        kept = {name: _plain(getattr(wrapper, name)) for name in _RUNNING if _keeps(wrapper, name)}
        if kept:
            states.append({"position": position, "wrapper": _class_path(wrapper), **kept})
    return states


def running_state(env: VectorEnv) -> dict[str, Any] | None:
    """The running statistics of every ``NormalizeObservation`` and ``NormalizeReward`` wrapper of ``env``, as plain
    data; None when it has none.

    What a full checkpoint keeps of an env it cannot keep whole (an :class:`AsyncVectorEnv`; one that does not
    pickle), so that the env built again when the run resumes standardises as it did (:func:`restore_running_state`):
    its agent learnt on observations (and rewards) scaled by these statistics. The wrappers are those of the vector
    env, of a :class:`SyncVectorEnv`'s sub-envs, and of an :class:`AsyncVectorEnv`'s (through ``get_attr``: the
    outermost of each kind in a sub-env). Their other state (``NormalizeReward``'s discounted sum of the episode in
    flight) is not kept: the episodes in flight are dropped, and a reset starts it again.
    """
    vector = _local_states(_chain(env, VectorWrapper))
    base: Any = env.unwrapped
    sync = [_local_states(_chain(sub, gym.Wrapper)) for sub in base.envs] if isinstance(base, SyncVectorEnv) else []
    remote = {}
    if isinstance(base, AsyncVectorEnv):
        for name in _RUNNING:
            if all(base.call("has_wrapper_attr", name)):
                remote[name] = [_plain(statistics) for statistics in base.get_attr(name)]
    if not vector and not any(sync) and not remote:
        return None
    return {"vector": vector, "sync": sync, "async": remote}


def restore_running_state(env: VectorEnv, state: dict[str, Any]) -> None:
    """Give the normalization wrappers of ``env`` (built again by the run's factory) the statistics
    :func:`running_state` took from the env of the run before it was cut off.

    Each saved wrapper's statistics go to the next wrapper of its class down the same chain (the vector env's, or a
    sub-env's). A saved wrapper the rebuilt env lacks (the factory builds another env now) is named in a warning.
    """
    missing: list[str] = []

    def put(chain: Iterator[Any], states: list[dict[str, Any]], where: str) -> None:
        # each saved wrapper goes to the next wrapper of its class down the chain: one the factory no longer builds
        # is skipped without moving the others (matched by position, dropping an outer one lost them all, V15)
        wrappers, start = list(chain), 0
        for entry in states:
            position, name = entry["position"], entry["wrapper"]
            found = next((k for k in range(start, len(wrappers)) if _class_path(wrappers[k]) == name), None)
            if found is None:
                missing.append(f"{_short(name)} at position {position} of {where}")
                continue
            start = found + 1
            for attribute in _RUNNING:
                if attribute in entry and hasattr(wrappers[found], attribute):
                    setattr(wrappers[found], attribute, _estimate(entry[attribute]))

    put(_chain(env, VectorWrapper), state["vector"], "the vector env's wrappers")
    base: Any = env.unwrapped
    subs = list(base.envs) if isinstance(base, SyncVectorEnv) else []
    for i, states in enumerate(state["sync"]):
        if i < len(subs):
            put(_chain(subs[i], gym.Wrapper), states, f"sub-env {i}'s wrappers")
        elif states:
            missing.append(f"{', '.join(_short(entry['wrapper']) for entry in states)} of sub-env {i}")
    for attribute, estimates in state["async"].items():
        if isinstance(base, AsyncVectorEnv) and all(base.call("has_wrapper_attr", attribute)):
            base.set_attr(attribute, [_estimate(estimate) for estimate in estimates])
        else:
            missing.append(f"{_WRAPPER_OF[attribute]} in the async sub-envs")
    if missing:
        logger.warning(
            "The resumed run's env was built again without normalization wrappers the run's env had (%s): their "
            "statistics in the checkpoint are not used, and the agent now acts on observations or rewards scaled "
            "otherwise than it learnt on. Resume with the env the experiment ran with.",
            "; ".join(missing),
        )
