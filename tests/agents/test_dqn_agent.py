"""DQNAgent: replay buffer contents, targets, schedules, checkpoints, and learning the Corridor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from online_trainer import envs
from online_trainer.agents import DQNAgent
from tests.conftest import feed

SMALL = {
    "learning_starts": 8,
    "batch_size": 8,
    "train_freq": 1,
    "target_update_interval": 5,
    "exploration_steps": 10,
    "hidden_sizes": (8,),
    "buffer_size": 100,
}


def agent_on(env, seed=0, **hp):
    agent = DQNAgent(env, **{**SMALL, **hp})
    agent.reset(seed)
    return agent


def test_reset_steps_never_reach_the_replay_buffer(corridor):
    agent = agent_on(corridor(3))
    feed(agent, [0, 1, 2], [1, 2, 3], [1234.0] * 3, valid=np.array([False, False, False]))
    assert len(agent.buffer) == 0 and agent.steps == 0
    feed(
        agent,
        [0, 1, 2],
        [1, 2, 3],
        [1.0, 1234.0, 1234.0],
        terminated=[False, True, False],
        valid=np.array([True, False, False]),
    )
    assert len(agent.buffer) == 1
    assert agent.buffer.rewards[:1].tolist() == [1.0]
    assert agent.buffer.obs[0] == 0 and agent.buffer.next_obs[0] == 1
    assert 1234.0 not in agent.buffer.rewards


def test_content_of_reset_steps_does_not_change_learning(corridor, params):
    runs = []
    for junk in (0.0, 1e6):
        agent = agent_on(corridor(2))
        rng = np.random.default_rng(0)
        for t in range(40):
            obs = rng.integers(5, size=2)
            next_obs = np.minimum(obs + 1, 4)
            if t % 3 == 0:  # what the agent sees and gets at a reset step must not matter
                obs[1], next_obs[1] = (4, 0) if junk else (0, 4)
            reward = np.array([-1.0, junk if t % 3 == 0 else -1.0])
            feed(agent, obs, next_obs, reward, valid=np.array([True, t % 3 != 0]))
        runs.append(params(agent))
    for x, y in zip(*runs):
        np.testing.assert_array_equal(x, y)


def test_buffer_stores_termination_but_not_truncation(corridor):
    agent = agent_on(corridor(2))
    feed(agent, [3, 2], [4, 3], [-1.0, -1.0], terminated=[True, False], truncated=[False, True])
    assert agent.buffer.terminated[:2].tolist() == [True, False]


@pytest.mark.parametrize("double_dqn", [False, True])
def test_td_targets_bootstrap_unless_terminated(double_dqn, corridor):
    agent = agent_on(corridor(1), gamma=0.5, double_dqn=double_dqn)
    next_obs = torch.as_tensor(agent.encoder(np.array([1, 1])))
    target_q = agent.target_net(next_obs).detach()
    online_best = agent.q_net(next_obs).argmax(dim=1)
    best = online_best if double_dqn else target_q.argmax(dim=1)
    expected = torch.tensor([1.0, 1.0]) + 0.5 * torch.tensor([1.0, 0.0]) * target_q[[0, 1], best]
    got = agent.td_targets(torch.tensor([1.0, 1.0]), next_obs, torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(got, expected)


def test_epsilon_falls_linearly_then_stays(corridor):
    agent = agent_on(corridor(1), epsilon_start=1.0, epsilon_end=0.2, exploration_steps=10, learning_starts=1000)
    assert agent.epsilon == 1.0
    for _ in range(5):
        feed(agent, [0], [1], [-1.0])
    assert agent.epsilon == pytest.approx(0.6)
    for _ in range(10):
        feed(agent, [0], [1], [-1.0])
    assert agent.epsilon == pytest.approx(0.2)


def test_hard_target_update_every_interval(corridor):
    agent = agent_on(corridor(1), target_update_interval=10, learning_starts=2, batch_size=2)

    def synced():
        return all(torch.equal(a, b) for a, b in zip(agent.q_net.parameters(), agent.target_net.parameters()))

    for _ in range(9):
        feed(agent, [0], [1], [-1.0])
    assert not synced()
    feed(agent, [0], [1], [-1.0])
    assert synced()


def test_polyak_target_update(corridor):
    agent = agent_on(corridor(1), tau=0.25, target_update_interval=1, learning_starts=1000)
    with torch.no_grad():
        for p in agent.q_net.parameters():
            p.add_(1.0)
    old = [p.clone() for p in agent.target_net.parameters()]
    feed(agent, [0], [1], [-1.0])
    for p, o in zip(agent.target_net.parameters(), old):
        torch.testing.assert_close(p, o + 0.25)


def test_trains_every_train_freq_with_gradient_steps(corridor):
    agent = agent_on(corridor(2), learning_starts=4, batch_size=2, train_freq=4, gradient_steps=3)
    for _ in range(5):
        feed(agent, [0, 1], [1, 2], [-1.0, -1.0])
    assert agent.steps == 10
    assert agent.gradient_steps_done == 3 * 2  # crossings at 4 and 8 transitions


def test_call_back_reports_every_log_interval_gradient_steps(corridor):
    agent = agent_on(corridor(1), learning_starts=2, batch_size=2, log_interval=5)
    reports = []
    for _ in range(1 + 12):
        feed(agent, [0], [1], [-1.0], call_back=reports.append)
    assert agent.gradient_steps_done == 12
    assert len(reports) == 2
    assert set(reports[0]) == {"loss", "q_mean", "epsilon", "gradient_steps"}
    assert reports[1]["gradient_steps"] == 10


def test_checkpoint_loads_weights_only_with_buffer_and_counters(corridor, tmp_path):
    env = corridor(1)
    agent = agent_on(env, save_buffer=True)
    for i in range(30):
        feed(agent, [i % 4], [i % 4 + 1], [-1.0])
    path = agent.save(str(tmp_path / "dqn"))
    raw = torch.load(path, weights_only=True)
    assert {"q_net", "target_net", "optimizer", "buffer", "np_rng", "torch_rng", "steps"} <= set(raw)
    other = agent_on(env, seed=5)
    other.load(str(tmp_path / "dqn"))
    assert (other.steps, other.gradient_steps_done, len(other.buffer)) == (30, 23, 30)
    np.testing.assert_array_equal(other.buffer.obs[:30], agent.buffer.obs[:30])
    assert other.optimizer.state_dict()["state"][0]["step"] == agent.optimizer.state_dict()["state"][0]["step"]


def test_without_saved_buffer_counters_still_round_trip(corridor):
    env = corridor(1)
    agent = agent_on(env, save_buffer=False)
    for i in range(20):
        feed(agent, [i % 4], [i % 4 + 1], [-1.0])
    other = agent_on(env)
    other.load(agent.save())
    assert (other.steps, len(other.buffer), other.epsilon) == (20, 0, agent.epsilon)


def test_cuda_request_without_cuda_is_a_clear_error(corridor):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(ValueError, match="device='cuda' was requested but CUDA is not available"):
        DQNAgent(corridor(1), device="cuda")


def test_structural_hp_change_rebuilds_the_network(corridor):
    agent = agent_on(corridor(1))
    agent.set_hp({"hidden_sizes": [12, 6]})
    assert agent.config.hidden_sizes == (12, 6)
    assert agent.q_net[0].out_features == 12


def test_learns_the_corridor(corridor, loop, greedy):
    env = corridor(2, length=6)
    agent = agent_on(
        env,
        lr=1e-2,
        hidden_sizes=(32,),
        learning_starts=50,
        batch_size=32,
        train_freq=2,
        target_update_interval=50,
        exploration_steps=600,
        buffer_size=5000,
    )
    returns = loop(env, agent, n_steps=1200)
    assert np.mean(returns[-10:]) > np.mean(returns[:10])
    assert greedy(agent, corridor(1, length=6)) == envs.optimal_return(6)


def test_learning_rate_is_constant_by_default(corridor):
    agent = agent_on(corridor(1), lr=0.01, learning_starts=2, batch_size=2)
    for _ in range(20):
        feed(agent, [0], [1], [-1.0])
    assert agent.learning_rate == 0.01
    assert agent.optimizer.param_groups[0]["lr"] == 0.01


def test_learning_rate_falls_linearly_then_stays(corridor):
    agent = agent_on(corridor(1), lr=0.01, lr_end=0.002, lr_decay_steps=10, learning_starts=2, batch_size=2)
    assert agent.learning_rate == pytest.approx(0.01)
    for _ in range(5):
        feed(agent, [0], [1], [-1.0])
    assert agent.learning_rate == pytest.approx(0.006)
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(0.006)
    for _ in range(10):
        feed(agent, [0], [1], [-1.0])
    assert agent.learning_rate == pytest.approx(0.002)
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(0.002)


def test_learning_rate_schedule_survives_save_and_load(corridor):
    env = corridor(1)
    agent = agent_on(env, lr=0.01, lr_end=0.0, lr_decay_steps=20, learning_starts=2, batch_size=2)
    for i in range(5):
        feed(agent, [i % 4], [i % 4 + 1], [-1.0])
    other = agent_on(env)
    other.load(agent.save())
    assert (other.config.lr_end, other.config.lr_decay_steps) == (0.0, 20)
    assert other.learning_rate == pytest.approx(0.0075)
    assert other.optimizer.param_groups[0]["lr"] == pytest.approx(0.0075)
    for i in range(5):
        feed(other, [i % 4], [i % 4 + 1], [-1.0])
    assert other.optimizer.param_groups[0]["lr"] == pytest.approx(0.005)


def test_learning_rate_schedule_hyperparameters_are_validated(corridor):
    with pytest.raises(ValueError, match="lr_end must be >= 0"):
        DQNAgent(corridor(1), lr_end=-1.0)
    with pytest.raises(ValueError, match="lr_decay_steps must be >= 0"):
        DQNAgent(corridor(1), lr_decay_steps=-5)


def test_set_hp_of_the_lr_schedule_applies_at_once(corridor):
    agent = agent_on(corridor(1), lr=0.01)
    agent.set_hp({"lr_decay_steps": 10, "lr_end": 0.0})
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(0.01)
    for _ in range(10):
        feed(agent, [0], [1], [-1.0])
    agent.set_hp({"lr": 0.02})
    assert agent.optimizer.param_groups[0]["lr"] == pytest.approx(0.0)
