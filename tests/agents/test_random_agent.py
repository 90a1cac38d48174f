"""RandomAgent: any action space, batched, seeded privately."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from online_trainer.agents import RandomAgent


class _SpacesEnv(gym.Env):
    def __init__(self, action_space: gym.Space) -> None:
        self.observation_space = spaces.Discrete(2)
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


ACTION_SPACES = [
    spaces.Discrete(3, start=2),
    spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32),
    spaces.MultiDiscrete([2, 5]),
    spaces.MultiBinary(4),
    spaces.Tuple((spaces.Discrete(2), spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32))),
    spaces.Dict({"move": spaces.Discrete(4), "power": spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)}),
]


def vector_env(space: gym.Space, num_envs: int) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([lambda: _SpacesEnv(space) for _ in range(num_envs)])


@pytest.mark.parametrize("space", ACTION_SPACES, ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("num_envs", [1, 3])
def test_actions_are_a_batch_in_the_vector_action_space(space, num_envs):
    env = vector_env(space, num_envs)
    agent = RandomAgent(env)
    agent.reset(0)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        actions = agent.act(obs)
        assert env.action_space.contains(actions)
        env.step(actions)


@pytest.mark.parametrize("space", ACTION_SPACES, ids=lambda s: type(s).__name__)
def test_state_round_trip_covers_nested_spaces(space):
    env = vector_env(space, 2)
    agent = RandomAgent(env)
    agent.reset(4)
    state = agent.save()
    first = [agent.act(None) for _ in range(3)]
    agent.load(state)
    again = [agent.act(None) for _ in range(3)]
    assert repr(first) == repr(again)


def test_the_envs_own_action_space_is_not_reseeded():
    env = vector_env(spaces.Discrete(10), 2)
    env.action_space.seed(1)
    expected = gym.vector.utils.batch_space(spaces.Discrete(10), 2)
    expected.seed(1)
    agent = RandomAgent(env)
    agent.reset(0)
    agent.act(None)
    np.testing.assert_array_equal(env.action_space.sample(), expected.sample())


def test_update_learns_nothing_but_counts_real_steps(corridor):
    env = corridor(3)
    agent = RandomAgent(env)
    agent.update(None, np.zeros(3), np.zeros(3, bool), np.zeros(3, bool), valid=np.array([True, False, True]))
    assert agent.steps == 2
    assert agent.log() is None


@pytest.mark.parametrize("space", ACTION_SPACES, ids=lambda s: type(s).__name__)
def test_a_batch_of_another_size_gets_as_many_actions_and_leaves_the_others_as_they_were(space):
    """An eval env with 1 sub-env beside a 3-env training env: RandomAgent answered every batch with 3 actions, so
    every run failed at its first evaluation."""
    train, evaluation = vector_env(space, 3), vector_env(space, 1)
    plain, interleaved = RandomAgent(train, seed=4), RandomAgent(train, seed=4)
    obs3, obs1 = np.zeros(3, dtype=np.int64), np.zeros(1, dtype=np.int64)
    expected = [plain.act(obs3) for _ in range(4)]
    got = [interleaved.act(obs3)]
    one = interleaved.act(obs1)
    assert evaluation.action_space.contains(one)
    state = interleaved.save()
    got += [interleaved.act(obs3) for _ in range(3)]
    assert repr(got) == repr(expected)  # the 3-env stream is untouched by the other size
    restored = RandomAgent(train, seed=0)
    restored.load(state)  # the 1-env batch's generator too: a resumed run's evaluations go on as they were
    assert repr(restored.act(obs1)) == repr(interleaved.act(obs1))


def test_a_run_evaluates_on_an_env_with_another_number_of_sub_envs(monkeypatch, caplog):
    """... and the warning meant for agents sized by set_num_env is not given for the library's agents."""
    import logging

    from online_trainer import EvaluationOptions, OnlineTrainer
    from online_trainer.run import one_run

    monkeypatch.setattr(one_run, "_told_of_eval_envs", False)  # said once a process
    caplog.set_level(logging.WARNING)
    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=2), RandomAgent)
    evaluation = EvaluationOptions(freq=50, episodes=2, env=lambda: gym.make_vec("CartPole-v1", num_envs=1))
    trainer.multi_run(1, total_steps=100, seed_offset=0, evaluation=evaluation, progress=False)
    assert [len(e["returns"]) for e in trainer.evaluations[0]] == [2, 2]
    assert "The eval env has" not in caplog.text
