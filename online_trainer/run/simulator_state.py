"""What an env's pickle leaves out: the state of the simulators behind MuJoCo and Atari envs.

A full checkpoint keeps the run's env pickled, so that a resumed run steps on exactly as an
uninterrupted one (the wrappers, the sub-envs' random generators, the episodes in progress). Two
simulators do not travel that way: a MuJoCo env unpickles with its ``MjData`` rebuilt from the
model (the bodies back at their initial pose), and an Atari env with its emulator started afresh
(``tests/online_trainer/run/test_simulator_state.py`` shows both). Their own APIs keep everything a step depends on: a copy of MuJoCo's ``MjData`` (the state, the solver's
warm start, and the quantities the last step derived from it, which rewards read before the next
step: the integration state alone gives Humanoid another reward), put back with ``mj_copyData``; and
the ALE's ``cloneState(include_rng=True)``. They are saved beside the pickle, with each sub-env's
``np_random``, and put back into the unpickled env.
"""

from __future__ import annotations

import copy
import sys
from typing import Any


class NotRestorable(Exception):
    """The env cannot be put back exactly as it was: a resumed run restarts it from a seeded reset."""


def sub_envs(env: Any) -> list[Any]:
    """The sub-envs of a vector env that keeps them in this process (a ``SyncVectorEnv``, through vector
    wrappers), with their wrappers; [] for any other (their state, if any, is not reachable here)."""
    while not hasattr(env, "envs") and hasattr(env, "env"):
        env = env.env
    return list(getattr(env, "envs", None) or [])


def _is_mujoco(env: Any) -> bool:
    mujoco = sys.modules.get("mujoco")
    return mujoco is not None and isinstance(getattr(env, "data", None), mujoco.MjData)


def _is_atari(env: Any) -> bool:
    return type(env).__module__.startswith("ale_py") and callable(getattr(env, "clone_state", None))


def capture(env: Any) -> list[tuple[str, Any, Any] | None]:
    """Per sub-env, what its pickle leaves out: ``("mujoco", MjData copy, np_random)``, ``("ale", ALEState,
    np_random)``, or None.

    Both envs pickle by their constructor's arguments (gymnasium's ``EzPickle``), so their
    ``np_random``, which the next reset draws from, is lost as well.

    Raises:
        NotRestorable: an Atari env with sticky actions (the ALE's state leaves out the last action,
            which it repeats with ``repeat_action_probability``).
    """
    states: list[tuple[str, Any, Any] | None] = []
    for wrapped in sub_envs(env):
        sub = getattr(wrapped, "unwrapped", wrapped)
        if _is_mujoco(sub):
            states.append(("mujoco", copy.deepcopy(sub.data), sub.np_random))
        elif _is_atari(sub):
            if sub.ale.getFloat("repeat_action_probability") > 0:
                raise NotRestorable(
                    "an Atari env with sticky actions (repeat_action_probability > 0): the ALE's saved state "
                    "does not hold the action it may repeat"
                )
            states.append(("ale", sub.clone_state(include_rng=True), sub.np_random))
        else:
            states.append(None)
    return states


def restore(env: Any, states: list[tuple[str, Any, Any] | None]) -> None:
    """Put the states :func:`capture` took back into the unpickled ``env``.

    Raises:
        ValueError: the env's sub-envs are not those the states were taken from.
    """
    subs = sub_envs(env)
    if len(subs) != len(states):
        raise ValueError(
            f"the checkpoint holds the simulator states of {len(states)} sub-envs, the env has {len(subs)}"
        )
    for wrapped, saved in zip(subs, states):
        if saved is None:
            continue
        sub = getattr(wrapped, "unwrapped", wrapped)
        kind, state, generator = saved
        if kind == "mujoco" and _is_mujoco(sub):
            import mujoco

            mujoco.mj_copyData(sub.data, sub.model, state)
        elif kind == "ale" and _is_atari(sub):
            sub.restore_state(state)
        else:
            raise ValueError(f"the checkpoint holds a {kind} state for a sub-env of type {type(sub).__name__}")
        sub.np_random = generator
