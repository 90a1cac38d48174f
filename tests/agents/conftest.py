"""Shared fixtures for the agent tests: a hand-written NEXT_STEP-aware training loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from online_trainer import envs

torch.set_num_threads(1)


def make_corridor(num_envs: int = 1, length: int = 5, **kwargs: Any):
    """A NEXT_STEP vector env of ``Corridor-v0``."""
    return envs.make_env(envs.CORRIDOR_ID, num_envs=num_envs, length=length, **kwargs)()


def run_loop(env, agent, n_steps: int, seed: int = 0, call_back: Callable | None = None) -> list[float]:
    """Train ``agent`` for ``n_steps`` env steps; return the finished episodes' returns.

    Under NEXT_STEP autoreset the step after a done is not a transition: ``valid`` is
    False there, and it counts neither in returns nor in the agent's updates.
    """
    obs, _ = env.reset(seed=seed)
    done = np.zeros(env.num_envs, dtype=bool)
    ep_return = np.zeros(env.num_envs)
    returns: list[float] = []
    for _ in range(n_steps):
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
        valid = ~done
        agent.update(obs, reward, terminated, truncated, call_back=call_back, valid=valid)
        ep_return += np.where(valid, reward, 0.0)
        done = terminated | truncated
        for i in np.flatnonzero(done):
            returns.append(float(ep_return[i]))
            ep_return[i] = 0.0
    return returns


def greedy_return(agent, env, seed: int = 123) -> float:
    """Return of one greedy episode of sub-env 0 (the agent is put back in training mode)."""
    agent.eval()
    obs, _ = env.reset(seed=seed)
    total = 0.0
    while True:
        obs, reward, terminated, truncated, _ = env.step(agent.act(obs))
        total += float(reward[0])
        if terminated[0] or truncated[0]:
            break
    agent.train()
    return total


def parameters_of(agent) -> list[np.ndarray]:
    """The agent's learned numbers as numpy arrays, for comparisons."""
    if hasattr(agent, "q_table"):
        return [agent.q_table.copy()]
    net = agent.q_net if hasattr(agent, "q_net") else agent.policy
    return [p.detach().cpu().numpy().copy() for p in net.parameters()]


@pytest.fixture
def corridor() -> Callable[..., Any]:
    """Factory ``corridor(num_envs=1, length=5, **kwargs)`` of Corridor vector envs."""
    made = []

    def build(num_envs: int = 1, length: int = 5, **kwargs: Any):
        env = make_corridor(num_envs, length, **kwargs)
        made.append(env)
        return env

    yield build
    for env in made:
        env.close()


@pytest.fixture
def loop() -> Callable[..., list[float]]:
    """The hand-written training loop :func:`run_loop`."""
    return run_loop


@pytest.fixture
def greedy() -> Callable[..., float]:
    """:func:`greedy_return`."""
    return greedy_return


@pytest.fixture
def params() -> Callable[[Any], list[np.ndarray]]:
    """:func:`parameters_of`."""
    return parameters_of
