"""Envs nobody here wrote, as users run them: ALE (image observations) and MuJoCo (continuous actions).

Each is checked against a hand-written loop over single envs seeded like the sub-envs: the
runner's episode lengths, returns and actions must be the hand loop's, in every autoreset mode.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from online_trainer import OnlineTrainer

MODES = ["NextStep", "SameStep", "Disabled"]


def hand_loop(make, seed: int, episodes: int) -> list[tuple[int, float]]:
    """(length, return) of the first ``episodes`` episodes of one env reset with ``seed``, acting 0."""
    env = make()
    out = []
    env.reset(seed=seed)
    length, total = 0, 0.0
    while len(out) < episodes:
        _, reward, terminated, truncated, _ = env.step(zero_action(env.action_space))
        length, total = length + 1, total + float(reward)
        if terminated or truncated:
            out.append((length, total))
            length, total = 0, 0.0
            env.reset()
    env.close()
    return out


def zero_action(space):
    return np.zeros(space.shape, dtype=space.dtype) if isinstance(space, gym.spaces.Box) else 0


class ZeroAgent:
    def __init__(self, env):
        self.action = zero_action(env.single_action_space)
        self.num_envs = env.num_envs

    def act(self, obs):
        return np.stack([self.action] * self.num_envs)

    def update(self, *args, **kwargs):
        pass


@pytest.mark.parametrize("mode", MODES)
def test_mujoco_continuous_actions_are_counted_exactly(mode):
    pytest.importorskip("mujoco")

    def make():
        return gym.make("InvertedPendulum-v5")

    def vec():
        return gym.vector.SyncVectorEnv([make, make], autoreset_mode=gym.vector.AutoresetMode(mode))

    (records,) = OnlineTrainer(vec, ZeroAgent).multi_run(1, num_episodes=6, seed_offset=7, progress=False)
    expected = sorted(hand_loop(make, 7, 6) + hand_loop(make, 8, 6))
    got = [(r["ep_length"], r["ep_return"]) for r in records]
    assert set(got) <= set(expected) and len(got) == 6
    assert all(r["actions"].shape == (r["ep_length"], 1) and r["actions"].dtype == np.float32 for r in records)


@pytest.mark.parametrize("mode", MODES)
def test_ale_image_observations_are_counted_exactly(mode):
    ale_py = pytest.importorskip("ale_py")
    gym.register_envs(ale_py)

    def make():
        return gym.make("ALE/Breakout-v5", max_episode_steps=60)

    def vec():
        return gym.vector.SyncVectorEnv([make, make], autoreset_mode=gym.vector.AutoresetMode(mode))

    (records,) = OnlineTrainer(vec, ZeroAgent).multi_run(
        1, num_episodes=4, seed_offset=3, dump_transitions=True, progress=False
    )
    expected = hand_loop(make, 3, 2) + hand_loop(make, 4, 2)
    assert sorted((r["ep_length"], r["ep_return"]) for r in records) == sorted(expected)
    obs, action, *_ = records[0]["transitions"][0]
    assert obs.shape == (210, 160, 3) and obs.dtype == np.uint8 and action == 0
    assert len(records[0]["transitions"]) == records[0]["ep_length"]
