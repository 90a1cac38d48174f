"""SACAgent: learning a continuous toy, reset steps, warm-up, targets, checkpoints and errors."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from online_trainer.agents import AGENTS, SACAgent
from tests.agents.conftest import run_loop
from tests.agents.toys import TargetEnv, vector
from tests.conftest import feed

SMALL = {"learning_starts": 16, "batch_size": 16, "hidden_sizes": (16,), "buffer_size": 500, "log_interval": 5}


def agent_on(env, seed=0, **hp):
    return SACAgent(env, seed=seed, **{**SMALL, **hp})


def test_registered_as_sac():
    assert AGENTS["sac"] is SACAgent


def test_learns_the_best_continuous_action():
    env = vector(TargetEnv, 2)
    agent = SACAgent(env, seed=0, lr=3e-3, learning_starts=64, batch_size=64, hidden_sizes=(32, 32), buffer_size=2000)
    run_loop(env, agent, 700)
    agent.eval()
    x = np.linspace(-0.9, 0.9, 19, dtype=np.float32).reshape(-1, 1)
    agent.set_num_env(len(x))
    error = np.abs(agent.act(x).reshape(-1) - 2 * x.reshape(-1))
    assert error.mean() < 0.15, error


def test_reset_steps_never_reach_the_buffer_or_the_counters():
    agent = agent_on(vector(TargetEnv, 2))
    feed(agent, [[0.1], [0.2]], [[0.1], [0.2]], [1234.0, 1234.0], valid=np.array([False, False]))
    assert len(agent.buffer) == 0 and agent.steps == 0
    feed(agent, [[0.1], [0.2]], [[0.3], [0.4]], [-1.0, 1234.0], terminated=[True, False], valid=np.array([True, False]))
    assert (len(agent.buffer), agent.steps) == (1, 1)
    assert agent.buffer.rewards[0] == -1.0 and agent.buffer.terminated[0]
    np.testing.assert_array_equal(agent.buffer.next_obs[0], np.float32([0.3]))


def test_warm_up_acts_uniformly_within_bounds_without_learning():
    env = vector(TargetEnv, 1)
    agent = agent_on(env, learning_starts=400, batch_size=8)
    actions = []
    for _ in range(400):
        assert agent.gradient_steps_done == 0
        actions.append(agent.act(np.zeros((1, 1), np.float32))[0, 0])
        agent.update(np.zeros((1, 1), np.float32), np.zeros(1), np.ones(1, bool), np.zeros(1, bool))
    actions = np.array(actions)
    assert agent.gradient_steps_done == 1  # the 400th transition ends the warm-up: learning starts
    assert actions.min() >= -2.0 and actions.max() <= 2.0
    counts, _ = np.histogram(actions, bins=4, range=(-2, 2))
    assert counts.min() > 70  # uniform over [-2, 2]: 100 expected per quarter


def test_critic_target_bootstraps_unless_terminated_and_targets_follow_by_polyak():
    agent = agent_on(vector(TargetEnv, 1), tau=0.5, gamma=0.5, ent_coef=0.1)
    with torch.no_grad():
        for p in agent.critic.parameters():
            p.add_(0.1)
    online = [p.detach().clone() for p in agent.critic.parameters()]
    old_target = [p.detach().clone() for p in agent.critic_target.parameters()]
    obs = torch.zeros(2, 1)
    noise = torch.zeros(2, 2, 1)
    next_actions, next_log_prob = agent.actor.sample(obs, noise[1])
    next_q = agent.critic_target(obs, next_actions).min(dim=0).values - 0.1 * next_log_prob
    expected = torch.tensor([1.0, 1.0]) + 0.5 * torch.tensor([1.0, 0.0]) * next_q
    q_before = agent.critic(obs, torch.zeros(2, 1)).detach()
    stats = agent._gradient_step(
        obs, torch.zeros(2, 1), torch.ones(2), obs, torch.tensor([1.0, 0.0]), noise[0], noise[1]
    )
    torch.testing.assert_close(stats["critic_loss"], 0.5 * (q_before - expected.detach()).pow(2).mean(1).sum())
    torch._foreach_lerp_(list(agent.critic_target.parameters()), list(agent.critic.parameters()), 0.5)
    new_online = list(agent.critic.parameters())
    for target, old, now in zip(agent.critic_target.parameters(), old_target, new_online):
        torch.testing.assert_close(target, 0.5 * old + 0.5 * now)
    assert not all(torch.equal(a, b) for a, b in zip(online, new_online))


def test_entropy_coefficient_is_tuned_only_when_auto():
    env = vector(TargetEnv, 1)
    tuned, fixed = agent_on(env, ent_coef="auto_0.5"), agent_on(env, ent_coef=0.2)
    assert tuned.ent_coef == pytest.approx(0.5) and fixed.ent_coef == pytest.approx(0.2)
    assert tuned.target_entropy == -1.0
    run_loop(env, tuned, 60)
    run_loop(env, fixed, 60)
    assert tuned.ent_coef != pytest.approx(0.5) and fixed.ent_coef == pytest.approx(0.2)


def test_call_back_reports_losses():
    env = vector(TargetEnv, 1)
    agent = agent_on(env)
    reports = []
    run_loop(env, agent, 60, call_back=reports.append)
    assert reports and set(reports[0]) == {
        "actor_loss",
        "critic_loss",
        "ent_coef",
        "ent_coef_loss",
        "q_mean",
        "gradient_steps",
    }
    assert reports[0]["gradient_steps"] == 5 and all(np.isfinite(v) for v in reports[-1].values())


@pytest.mark.parametrize("via", ["state", "path"])
def test_save_load_gives_the_same_future(via, tmp_path):
    env = vector(TargetEnv, 2)
    agent = agent_on(env, save_buffer=True)
    run_loop(env, agent, 40, seed=1)
    saved = agent.save() if via == "state" else agent.save(str(tmp_path / "sac"))
    if via == "path":
        assert {"actor", "critic", "critic_target", "log_ent_coef", "ent_optimizer", "buffer"} <= set(
            torch.load(saved, weights_only=True)
        )
    expected = run_loop(env, agent, 40, seed=2)
    expected_params = [p.detach().clone() for p in agent.actor.parameters()]
    other = agent_on(env, seed=9)
    other.load(saved if via == "state" else str(tmp_path / "sac"))
    assert run_loop(env, other, 40, seed=2) == expected
    assert all(torch.equal(a, b) for a, b in zip(expected_params, other.actor.parameters()))
    assert (other.steps, other.gradient_steps_done, other.ent_coef) == (
        agent.steps,
        agent.gradient_steps_done,
        agent.ent_coef,
    )


def test_checkpoint_without_the_buffer_is_smaller_and_resumes_with_an_empty_one(tmp_path):
    env = vector(TargetEnv, 2)
    sizes = {}
    for save_buffer in (False, True):
        agent = agent_on(env, save_buffer=save_buffer)
        run_loop(env, agent, 200)
        path = agent.save(str(tmp_path / f"sac_{save_buffer}"))
        sizes[save_buffer] = os.path.getsize(path)
        other = agent_on(env, seed=3)
        other.load(path)
        assert len(other.buffer) == (len(agent.buffer) if save_buffer else 0)
        assert other.steps == agent.steps
    assert sizes[False] < sizes[True] - 200 * 4 * 4


def test_discrete_actions_are_an_error():
    with pytest.raises(ValueError, match="SACAgent needs a Box action space.*use DQNAgent or PPOAgent"):
        SACAgent(gym.make_vec("CartPole-v1", num_envs=1))


def test_unbounded_actions_are_an_error():
    env = vector(TargetEnv, 1)
    env.single_action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    with pytest.raises(ValueError, match="bounded Box action space.*RescaleAction"):
        SACAgent(env)


@pytest.mark.parametrize("value", ["automatic", "auto_-1", -0.1])
def test_bad_ent_coef_names_the_value(value):
    with pytest.raises(ValueError, match=f"ent_coef.*ent_coef={value!r}"):
        agent_on(vector(TargetEnv, 1), ent_coef=value)
