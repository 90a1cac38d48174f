"""PPOAgent: masked GAE, reset steps, Box actions, normalisation, reports and learning."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from online_trainer import envs
from online_trainer.agents import PPOAgent
from online_trainer.agents._rollout import masked_gae
from tests.conftest import feed

SMALL = {"n_steps": 4, "minibatch_size": 4, "n_epochs": 2, "hidden_sizes": (8,)}


def agent_on(env, seed=0, **hp):
    agent = PPOAgent(env, **{**SMALL, **hp})
    agent.reset(seed)
    return agent


def reference_gae(rewards, values, terminated, truncated, final_values, valid, last_value, gamma, lam):
    """One sub-env, written episode by episode after dropping the invalid entries."""
    keep = np.flatnonzero(valid)
    adv = np.zeros(len(rewards))
    running = 0.0
    for k in range(len(keep) - 1, -1, -1):
        t = keep[k]
        if terminated[t]:
            next_value, running = 0.0, 0.0
        elif truncated[t]:
            next_value, running = final_values[t], 0.0
        else:
            next_value = values[keep[k + 1]] if k + 1 < len(keep) else last_value
        running = rewards[t] + gamma * next_value - values[t] + gamma * lam * running
        adv[t] = running
    return adv


def test_masked_gae_skips_reset_steps_and_bootstraps_truncation():
    rng = np.random.default_rng(0)
    n = 12
    rewards, values, final_values = rng.normal(size=(3, n, 2)).astype(np.float32)
    terminated = np.zeros((n, 2), bool)
    truncated = np.zeros((n, 2), bool)
    valid = np.ones((n, 2), bool)
    terminated[3, 0] = True
    valid[4, 0] = False  # NEXT_STEP reset step after the termination
    rewards[4, 0] = 1e6
    truncated[7, 1] = True
    valid[8, 1] = False
    rewards[8, 1] = -1e6
    terminated[10, 1] = truncated[10, 1] = True  # terminated wins over truncated
    valid[11, 1] = False
    last = np.array([0.3, -0.7], dtype=np.float32)
    adv, ret = masked_gae(rewards, values, terminated, truncated, final_values, valid, last, 0.9, 0.8)
    for i in range(2):
        expected = reference_gae(
            rewards[:, i],
            values[:, i],
            terminated[:, i],
            truncated[:, i],
            final_values[:, i],
            valid[:, i],
            last[i],
            0.9,
            0.8,
        )
        np.testing.assert_allclose(adv[:, i], expected, rtol=1e-5, atol=1e-5)
    assert np.all(adv[~valid] == 0) and np.all(ret[~valid] == 0)
    np.testing.assert_allclose(ret[valid], (adv + values)[valid], rtol=1e-6)


def test_reset_steps_are_masked_out_of_the_rollout(corridor):
    agent = agent_on(corridor(2), n_steps=10)
    feed(agent, [0, 3], [1, 4], [-1.0, -1.0], terminated=[False, True])
    feed(agent, [1, 4], [2, 0], [-1.0, 5e5], valid=np.array([True, False]))
    assert agent.rollout.pos == 2
    assert agent.rollout.valid[:2].tolist() == [[True, True], [True, False]]
    adv, ret = agent.rollout.advantages(np.zeros(2, np.float32), 0.99, 0.95)
    assert np.abs(ret).max() < 100


def test_content_of_reset_steps_does_not_change_learning(corridor, params):
    runs = []
    for junk in (0.0, 1e6):
        agent = agent_on(corridor(2))
        rng = np.random.default_rng(0)
        reports = []
        for t in range(24):
            obs = rng.integers(5, size=2)
            reset_step = t % 5 == 1
            if reset_step:  # what the agent sees and gets at a reset step must not matter
                obs[1] = 4 if junk else 0
            done = np.array([False, t % 5 == 0])
            next_obs = np.where([False, reset_step], [0, 4 if junk else 0], np.minimum(obs + 1, 4))
            reward = np.array([-1.0, junk if reset_step else -1.0])
            feed(
                agent,
                obs,
                next_obs,
                reward,
                terminated=done,
                valid=np.array([True, not reset_step]),
                call_back=reports.append,
            )
        assert len(reports) == 6
        runs.append(params(agent))
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)


def test_truncation_stores_the_value_of_the_true_final_obs(corridor):
    agent = agent_on(corridor(2), n_steps=10)
    feed(agent, [2, 2], [3, 3], [-1.0, -1.0], truncated=[True, False])
    assert agent.rollout.final_values[0, 0] == pytest.approx(float(agent._values(agent._features(np.array([3])))[0]))
    assert agent.rollout.final_values[0, 1] == 0.0


def test_call_back_gets_the_losses_after_each_update_phase(corridor, loop):
    env = corridor(2)
    agent = agent_on(env)
    reports = []
    loop(env, agent, n_steps=12, call_back=reports.append)
    assert len(reports) == 3
    assert {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"} <= set(reports[0])
    assert all(np.isfinite(reports[-1][k]) for k in ("policy_loss", "value_loss", "entropy"))


def test_lr_is_annealed_over_total_steps(corridor, loop):
    env = corridor(1)
    agent = agent_on(env, lr=1e-2, anneal_lr=True, total_steps=16)
    reports = []
    loop(env, agent, n_steps=12, call_back=reports.append)
    assert [r["lr"] for r in reports] == pytest.approx([1e-2, 1e-2 * 0.75, 1e-2 * 0.5])
    with pytest.raises(ValueError, match="total_steps must be a positive int when anneal_lr=True"):
        agent.set_hp({"total_steps": None})


def test_target_kl_stops_the_epochs_early(corridor, loop):
    env = corridor(1)
    agent = agent_on(env, n_epochs=50, target_kl=1e-9, lr=1e-2)
    reports = []
    loop(env, agent, n_steps=4, call_back=reports.append)
    assert agent.optimizer.state_dict()["state"][0]["step"] < 50


@pytest.fixture
def pendulum():
    env = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    yield env
    env.close()


def test_box_actions_are_clipped_for_the_env_but_stored_unclipped(pendulum, loop):
    agent = agent_on(pendulum, log_std_init=2.0, n_steps=50)
    obs, _ = pendulum.reset(seed=0)
    for _ in range(20):
        actions = agent.act(obs)
        assert actions.shape == (2, 1) and actions.dtype == np.float32
        assert pendulum.action_space.contains(actions)
        obs, reward, terminated, truncated, _ = pendulum.step(actions)
        agent.update(obs, reward, terminated, truncated)
    stored = agent.rollout.actions[:20]
    assert np.abs(stored).max() > 2.0


def test_gaussian_eval_actions_are_the_clipped_mean(pendulum):
    agent = agent_on(pendulum)
    agent.eval()
    obs, _ = pendulum.reset(seed=0)
    np.testing.assert_array_equal(agent.act(obs), agent.act(obs))


def test_normalisation_statistics_round_trip(pendulum, loop, tmp_path):
    agent = agent_on(pendulum, normalize_obs=True, normalize_reward=True, n_steps=16)
    loop(pendulum, agent, n_steps=40)
    assert agent.obs_rms.count > 1 and agent.reward_scaler.rms.count > 1
    agent.save(str(tmp_path / "ppo"))
    other = agent_on(pendulum, seed=3)
    other.load(str(tmp_path / "ppo"))
    np.testing.assert_array_equal(other.obs_rms.mean, agent.obs_rms.mean)
    np.testing.assert_array_equal(other.reward_scaler.returns, agent.reward_scaler.returns)
    assert other.config.normalize_obs and other.rollout.pos == agent.rollout.pos == 40 % 16
    obs, _ = pendulum.reset(seed=1)
    agent.eval()
    other.eval()
    np.testing.assert_array_equal(other.act(obs), agent.act(obs))


def test_learns_the_corridor(corridor, loop, greedy):
    env = corridor(4, length=6)
    agent = agent_on(env, n_steps=32, minibatch_size=32, n_epochs=4, lr=3e-3, hidden_sizes=(32,), ent_coef=0.01)
    returns = loop(env, agent, n_steps=1000)
    assert np.mean(returns[-10:]) > np.mean(returns[:10])
    assert greedy(agent, corridor(1, length=6)) == envs.optimal_return(6)


def test_a_minibatch_larger_than_a_rollout_is_a_logged_warning_naming_the_sizes(caplog):
    env = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with caplog.at_level("WARNING", logger="online_trainer.agents._ppo"):
        PPOAgent(env, n_steps=16, minibatch_size=100_000)
    assert "minibatch_size=100000 is more than a rollout's n_steps * num_envs = 16 * 2 = 32 transitions" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="online_trainer.agents._ppo"):
        PPOAgent(env, n_steps=16, minibatch_size=32)
    assert not caplog.text
