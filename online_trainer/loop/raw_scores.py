"""Raw scores: the episode statistics of a ``RecordEpisodeStatistics`` inside each sub-env's wrappers.

Atari users clip rewards (``ClipReward``) for learning but report game scores. With
``gymnasium.wrappers.RecordEpisodeStatistics`` wrapped inside the reward wrappers, every sub-env
reports its episode's unclipped return and length in ``info["episode"]`` on the step the
episode ends. A run detects the wrapper once, at its start (:func:`has_episode_statistics`);
when it is there, :class:`RawScores` reads those values on the steps where an episode ended
only, and the records keep them as ``raw_return`` and ``raw_length`` beside ``ep_return`` and
``ep_length`` (which sum the rewards the agent learns from).

Where the values are in a vector env's ``info`` (gymnasium 1.x merges the sub-envs' infos
into arrays with a ``_key`` mask): ``info["episode"]["r"][i]`` (mask ``info["_episode"][i]``)
under NEXT_STEP and DISABLED autoreset, ``info["final_info"]["episode"]["r"][i]`` under
SAME_STEP (the step's own info is the reset's). Behind gymnasium's ``DictInfoToList`` the info is
a list of the sub-envs' own dicts: ``info[i]["episode"]["r"]``, or ``info[i]["final_info"]["episode"]["r"]``
under SAME_STEP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit

from online_trainer.errors import value_error

SCORES: tuple[str, ...] = ("return", "raw")
"""Accepted values of the ``score`` option: the sum of the rewards the agent learns from, or the raw score."""

RAW_KEYS: tuple[str, ...] = ("raw_return", "raw_length")
"""Record keys of the raw scores (in the records of runs whose sub-envs have ``RecordEpisodeStatistics``)."""


def check_score(score: Any) -> str:
    """Return ``score`` when it is one of :data:`SCORES`; raise ValueError naming it otherwise."""
    if score not in SCORES:
        raise value_error(score, str)(
            f"score must be one of {', '.join(map(repr, SCORES))} but got score={score!r}: 'return' "
            "sums the rewards the agent learns from, 'raw' uses the episode statistics of a "
            "RecordEpisodeStatistics wrapper inside the env's wrappers."
        )
    return score


def _in_chain(env: Any) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RecordEpisodeStatistics):
            return True
        env = env.env
    return False


def has_episode_statistics(env: VectorEnv) -> bool:
    """Whether every sub-env of ``env`` has a ``RecordEpisodeStatistics`` among its wrappers.

    Sub-envs held in this process (``SyncVectorEnv``) are inspected directly; those of an
    ``AsyncVectorEnv`` are asked once (``has_wrapper_attr("return_queue")``, an attribute the
    wrapper alone has). Other vector envs are taken to have none.
    """
    base = env.unwrapped if isinstance(env, gym.vector.VectorWrapper) else env
    subs = getattr(base, "envs", None)
    if subs is not None:
        return len(subs) > 0 and all(_in_chain(sub) for sub in subs)
    if isinstance(base, gym.vector.AsyncVectorEnv):
        return all(base.call("has_wrapper_attr", "return_queue"))
    return False


def _time_limit_outside(env: Any) -> TimeLimit | None:
    """The ``TimeLimit`` that wraps the ``RecordEpisodeStatistics`` of the sub-env ``env``, if one does."""
    limit = None
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RecordEpisodeStatistics):
            return limit
        if limit is None and isinstance(env, TimeLimit):
            limit = env
        env = env.env
    return None


def require_episode_statistics(env: VectorEnv, what: str) -> None:
    """Raise ValueError for ``score='raw'`` when ``env`` (``what``: which env) has no ``RecordEpisodeStatistics``,
    or a ``TimeLimit`` outside it (the episodes it cuts would end without statistics: NaN raw scores)."""
    section = "evaluation.env" if what == "eval env" else "env"  # the config's section of that env
    base = env.unwrapped if isinstance(env, gym.vector.VectorWrapper) else env
    limits = [_time_limit_outside(sub) for sub in getattr(base, "envs", ())]
    limit = next((limit for limit in limits if limit is not None), None)
    if limit is not None:
        raise ValueError(
            f"score='raw' reports the episode statistics of a gymnasium.wrappers.RecordEpisodeStatistics wrapper, "
            f"but in the {what}'s sub-envs a TimeLimit(max_episode_steps={limit._max_episode_steps}) wraps it: the "
            "episodes it cuts end without statistics (a NaN raw score, left out of every statistic). Put the time "
            "limit inside: gym.make(..., max_episode_steps=...), or TimeLimit before RecordEpisodeStatistics in the "
            f"wrappers. In a config: {section}.kwargs: {{max_episode_steps: N}}, or list gymnasium.wrappers:TimeLimit "
            f"before gymnasium.wrappers:RecordEpisodeStatistics in {section}.wrappers."
        )
    if not has_episode_statistics(env):
        vector_level = ""
        layer = env
        while isinstance(layer, gym.vector.VectorWrapper):
            if isinstance(layer, gym.wrappers.vector.RecordEpisodeStatistics):
                vector_level = (
                    " (the gymnasium.wrappers.vector.RecordEpisodeStatistics around the vector env is not read)"
                )
            layer = layer.env
        raise ValueError(
            f"score='raw' reports the episode statistics of a gymnasium.wrappers.RecordEpisodeStatistics "
            f"wrapper, but the sub-envs of the {what} have none{vector_level}: add it inside each sub-env's reward "
            "wrappers, e.g. "
            "make_env(..., wrappers=['gymnasium.wrappers:RecordEpisodeStatistics', "
            "{'gymnasium.wrappers:ClipReward': {'min_reward': -1, 'max_reward': 1}}]), or use "
            "score='return'. In a config: records.score=raw needs gymnasium.wrappers:RecordEpisodeStatistics "
            "first in env.wrappers; or records.score=return."
        )


def episode_statistics(
    info: dict[str, Any] | list[dict[str, Any]], envs: Sequence[int], same_step: bool
) -> tuple[list[float], list[Any]]:
    """The raw returns and lengths of sub-envs ``envs``, whose episodes ended at the step of ``info``.

    A sub-env whose info holds no statistics (an episode the runner cut) gets NaN for both.
    ``info``: the vector env's info dict, or the list of sub-env dicts of ``DictInfoToList``.
    """
    if isinstance(info, list):
        returns, lengths = [], []
        for i in envs:
            sub = info[i].get("final_info", info[i]) if same_step else info[i]
            stats = sub.get("episode")
            returns.append(math.nan if stats is None else float(stats["r"]))
            lengths.append(math.nan if stats is None else int(stats["l"]))
        return returns, lengths
    source = info.get("final_info", info) if same_step else info
    stats, mask = source.get("episode"), source.get("_episode")
    if stats is None or mask is None:
        nan = [math.nan] * len(envs)
        return nan, list(nan)
    r, n = stats["r"], stats["l"]
    returns = [float(r[i]) if mask[i] else math.nan for i in envs]
    lengths = [int(n[i]) if mask[i] else math.nan for i in envs]
    return returns, lengths


class RawScores:
    """Reads the raw scores of the episodes that end and hands them to the run's episode table.

    Args:
        table: the run's :class:`~online_trainer.records.episode_table.EpisodeTable`.
        mode: the vector env's autoreset mode.

    Attributes:
        last: the raw returns of the episodes that ended last (what the progress display shows
            under ``score='raw'``).
    """

    __slots__ = ("table", "same_step", "last")

    last: Sequence[float]

    def __init__(self, table: Any, mode: AutoresetMode) -> None:
        self.table, self.same_step, self.last = table, mode is AutoresetMode.SAME_STEP, ()
        table.add_raw([], [])  # from now on the records have raw_return and raw_length

    def __call__(self, info: dict[str, Any], envs: Sequence[int]) -> None:
        """Record the raw scores of sub-envs ``envs`` (the episodes just closed, in that order)."""
        returns, lengths = episode_statistics(info, envs, self.same_step)
        self.table.add_raw(returns, lengths)
        self.last = returns


def detect(env: VectorEnv, score: str, what: str) -> bool:
    """Whether ``env``'s sub-envs report raw scores; with ``score='raw'`` they must (ValueError otherwise)."""
    if score == "raw":
        require_episode_statistics(env, what)
        return True
    return has_episode_statistics(env)
