"""QLearningAgent: the update rule, reset steps, epsilon decay, and learning the Corridor."""

from __future__ import annotations

import numpy as np
import pytest

from online_trainer import envs
from online_trainer.agents import QLearningAgent


def agent_on(env, **hp):
    agent = QLearningAgent(env, **hp)
    agent.reset(0)
    return agent


def one_step(agent, obs, next_obs, reward, terminated=None, truncated=None, valid=None):
    n = len(obs)
    agent.act(np.asarray(obs))
    agent.update(
        np.asarray(next_obs),
        np.asarray(reward, dtype=float),
        np.zeros(n, bool) if terminated is None else np.asarray(terminated),
        np.zeros(n, bool) if truncated is None else np.asarray(truncated),
        valid=valid,
    )


def test_update_follows_the_q_learning_rule(corridor):
    agent = agent_on(corridor(1), lr=0.5, gamma=0.9, epsilon=0.0, epsilon_min=0.0)
    agent.q_table[2] = [1.0, 3.0]
    agent.q_table[1] = [0.0, 2.0]
    one_step(agent, [1], [2], [-1.0])  # greedy action in state 1 is 1 (right)
    assert agent.q_table[1, 1] == pytest.approx(2.0 + 0.5 * (-1.0 + 0.9 * 3.0 - 2.0))


def test_termination_does_not_bootstrap_but_truncation_does(corridor):
    agent = agent_on(corridor(2), lr=1.0, gamma=0.9, epsilon=0.0, epsilon_min=0.0, q_init=1.0)
    agent.q_table[:, 1] = 2.0  # greedy action: right, everywhere
    one_step(agent, [0, 2], [1, 3], [-1.0, -1.0], terminated=[True, False], truncated=[False, True])
    assert agent.q_table[0, 1] == pytest.approx(-1.0)
    assert agent.q_table[2, 1] == pytest.approx(-1.0 + 0.9 * 2.0)


def test_same_state_action_in_two_sub_envs_adds_both_increments(corridor):
    agent = agent_on(corridor(2), lr=0.5, gamma=1.0, epsilon=0.0, epsilon_min=0.0)
    agent.q_table[:, 1] = 1.0
    one_step(agent, [0, 0], [1, 1], [-1.0, 3.0])
    assert agent.q_table[0, 1] == pytest.approx(1.0 + 0.5 * (-1.0 + 1.0 - 1.0) + 0.5 * (3.0 + 1.0 - 1.0))


def test_reset_steps_never_touch_the_table(corridor):
    agent = agent_on(corridor(3), lr=1.0)
    before = agent.q_table.copy()
    one_step(
        agent,
        [0, 1, 2],
        [1, 2, 3],
        [1e6, 1e6, 1e6],
        terminated=[True, True, True],
        valid=np.array([False, False, False]),
    )
    np.testing.assert_array_equal(agent.q_table, before)
    one_step(agent, [0, 1, 2], [1, 2, 3], [1e6, 1e6, 1e6], valid=np.array([False, True, False]))
    changed = np.argwhere(agent.q_table != before)
    assert changed[:, 0].tolist() == [1]


def test_valid_array_is_not_kept_by_reference(corridor):
    agent = agent_on(corridor(2), log_step_values=True)
    valid = np.array([True, False])
    one_step(agent, [0, 0], [1, 1], [-1.0, -1.0], valid=valid)
    valid[:] = True
    assert agent.log()[1] is None


def test_epsilon_decays_per_finished_episode(corridor):
    agent = agent_on(corridor(3), epsilon=1.0, epsilon_decay=0.5, epsilon_min=0.1)
    one_step(
        agent,
        [0, 0, 0],
        [1, 1, 1],
        [-1] * 3,
        terminated=[True, False, False],
        truncated=[False, True, False],
        valid=np.array([True, True, True]),
    )
    assert agent.epsilon == pytest.approx(0.25)
    assert agent.episodes == 2
    one_step(agent, [0, 0, 0], [1, 1, 1], [-1] * 3, terminated=[True, True, True], valid=np.array([False] * 3))
    assert agent.epsilon == pytest.approx(0.25)
    one_step(agent, [0, 0, 0], [1, 1, 1], [-1] * 3, terminated=[True, True, True])
    assert agent.epsilon == pytest.approx(0.1)


def test_epsilon_decays_per_step(corridor):
    agent = agent_on(corridor(2), epsilon=1.0, epsilon_decay=0.5, epsilon_min=0.0, decay_unit="step")
    one_step(agent, [0, 0], [1, 1], [-1, -1], valid=np.array([True, False]))
    assert agent.epsilon == pytest.approx(0.5)


def test_set_hp_epsilon_sets_the_current_rate(corridor):
    agent = agent_on(corridor(1))
    agent.set_hp({"epsilon": 0.3})
    assert agent.epsilon == 0.3
    with pytest.raises(ValueError, match="decay_unit must be 'episode' or 'step' but got decay_unit='epoch'"):
        agent.set_hp({"decay_unit": "epoch"})


def test_greedy_breaks_ties_at_random_but_reproducibly(corridor):
    agent = agent_on(corridor(1))
    picks = {int(agent.greedy(np.array([0]))[0]) for _ in range(50)}
    assert picks == {0, 1}


@pytest.mark.parametrize("num_envs", [1, 4])
def test_learns_the_optimal_corridor_return(num_envs, corridor, loop, greedy):
    env = corridor(num_envs, length=8)
    agent = agent_on(env, lr=0.5, epsilon_decay=0.95)
    loop(env, agent, n_steps=4000 // num_envs)
    assert greedy(agent, corridor(1, length=8)) == envs.optimal_return(8)
