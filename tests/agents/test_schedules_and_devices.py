"""PPO's lr and clip-range schedules, DQN's random warm-up, device resolution, checkpoint footprint."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from online_trainer.agents import DQNAgent, PPOAgent, SACAgent
from online_trainer.agents._networks import flush_denormals, resolve_device
from online_trainer.agents._schedules import parse_schedule, progress_remaining
from tests.agents.conftest import run_loop
from tests.agents.toys import TargetEnv, vector


def test_linear_schedule_as_rl_zoo_writes_it():
    schedule = parse_schedule("lin_0.2", "clip_coef")
    assert (schedule(1.0), schedule(0.5), schedule(0.0)) == (0.2, 0.1, 0.0)
    assert parse_schedule(3e-4, "lr")(0.1) == 3e-4
    assert progress_remaining(25, 100) == 0.75 and progress_remaining(150, 100) == 0.0


@pytest.mark.parametrize("value", ["lin_", "linear_0.2", "lin_-1", "lin_x"])
def test_bad_schedule_names_the_value(value):
    with pytest.raises(
        ValueError, match=f"clip_coef must be a positive number or a linear schedule 'lin_<start>'.*clip_coef={value!r}"
    ):
        parse_schedule(value, "clip_coef")


def test_ppo_lr_and_clip_range_decay_linearly_with_the_transitions_seen(corridor):
    env = corridor(2)
    agent = PPOAgent(
        env, seed=0, lr="lin_0.001", clip_coef="lin_0.2", total_steps=64, n_steps=8, minibatch_size=8, hidden_sizes=(8,)
    )
    reports = []
    run_loop(env, agent, 24, call_back=lambda report: reports.append({**report, "steps": agent.steps}))
    assert [r["updates"] for r in reports] == [1, 2, 3]
    for report in reports:  # SB3's convention: the progress after the rollout just collected
        progress = 1 - report["steps"] / 64
        assert report["lr"] == pytest.approx(0.001 * progress)
        assert report["clip_range"] == pytest.approx(0.2 * progress)
    assert reports[0]["lr"] > reports[1]["lr"] > reports[2]["lr"]


def test_ppo_schedule_without_total_steps_is_an_error(corridor):
    with pytest.raises(ValueError, match="total_steps must be a positive int when clip_coef decay"):
        PPOAgent(corridor(1), clip_coef="lin_0.2")
    with pytest.raises(ValueError, match="anneal_lr must be False when lr is a schedule"):
        PPOAgent(corridor(1), lr="lin_0.001", anneal_lr=True, total_steps=100)


def test_dqn_learning_starts_acts_uniformly_at_random_without_updates(corridor):
    env = corridor(1)
    agent = DQNAgent(
        env, seed=0, learning_starts=300, epsilon_start=0.0, epsilon_end=0.0, batch_size=8, hidden_sizes=(8,)
    )
    greedy = agent.act(np.array([0]))[0]
    agent._pending = None
    actions = []
    for _ in range(300):
        assert agent.gradient_steps_done == 0
        actions.append(agent.act(np.array([0]))[0])
        agent.update(np.array([1]), np.array([-1.0]), np.zeros(1, bool), np.zeros(1, bool))
    assert 120 < np.count_nonzero(np.array(actions) == greedy) < 180  # epsilon 0, yet random: half each
    assert agent.gradient_steps_done == 1  # the 300th transition ends the warm-up


def test_device_auto_is_cuda_when_available_else_cpu(monkeypatch):
    assert resolve_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")


def test_unknown_device_names_the_value(corridor):
    with pytest.raises(
        ValueError, match="device must be 'auto', 'cpu', 'cuda' or 'cuda:<index>' but got device='gpu0'"
    ):
        PPOAgent(corridor(1), device="gpu0")


@pytest.mark.parametrize("cls", [DQNAgent, PPOAgent])
def test_agents_accept_device_auto(cls, corridor):
    agent = cls(corridor(1), device="auto")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    net = agent.q_net if cls is DQNAgent else agent.policy
    assert agent.device.type == expected and next(net.parameters()).device.type == expected


@pytest.mark.filterwarnings("ignore:.*meta parameter")  # the networks on the stand-in device load nothing
@pytest.mark.parametrize("cls", [DQNAgent, SACAgent])
def test_a_loaded_report_in_progress_is_on_the_agents_device(cls, corridor):
    """A checkpoint loads on the CPU; the sums of a report in progress must go to the agent's device, where its
    next update adds its losses (a resumed DQN on CUDA failed with 'Expected all tensors to be on the same device')."""
    env = corridor(1) if cls is DQNAgent else vector(TargetEnv, 1)
    small = {"learning_starts": 10, "batch_size": 8, "hidden_sizes": (8,), "log_interval": 1000}
    agent = cls(env, seed=0, **small)
    run_loop(env, agent, 40, call_back=lambda report: None)  # the sums are kept for a call_back
    state = agent.save()
    other = cls(env, seed=0, **small)
    other.device = torch.device("meta")  # stands in for a CUDA device: not the CPU the state was loaded on
    other.load(state)
    sums = [other._loss_sum, other._q_sum] if cls is DQNAgent else list(other._stats.values())
    assert sums and all(total.device.type == "meta" for total in sums)


def test_dqn_checkpoint_holds_the_buffer_only_when_asked(corridor, tmp_path):
    env = corridor(1)
    sizes = {}
    for save_buffer in (False, True):
        agent = DQNAgent(env, seed=0, learning_starts=10, batch_size=8, hidden_sizes=(8,), save_buffer=save_buffer)
        assert DQNAgent(env).config.save_buffer is False
        run_loop(env, agent, 500)
        sizes[save_buffer] = os.path.getsize(agent.save(str(tmp_path / f"dqn_{save_buffer}")))
        assert ("obs" in agent.save()["buffer"]) is save_buffer
    assert sizes[True] - sizes[False] > 500 * (8 + 8 + 8 + 4 + 1)  # two obs, action, reward, flag a transition


def _flushes() -> bool:
    return float(torch.tensor([1], dtype=torch.int32).view(torch.float32) * 1.0) == 0.0


def test_flush_denormals_flushes_inside_and_restores_the_mode_found():
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush denormals")
    with flush_denormals():
        assert _flushes()
        with flush_denormals():
            assert _flushes()
        assert _flushes()
    assert not _flushes()
    torch.set_flush_denormal(True)
    try:
        with flush_denormals():
            pass
        assert _flushes()
    finally:
        torch.set_flush_denormal(False)
