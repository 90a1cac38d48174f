"""Exact episode accounting in every gymnasium 1.x autoreset mode, in both budget modes."""

from __future__ import annotations

import numpy as np
import pytest

from online_trainer import OnlineTrainer
from online_trainer.loop.seeding import run_seed
from tests.conftest import RecordingAgent, make_counting_vec, scheduled_length

MODES = ["NextStep", "SameStep", "Disabled"]


def expected_episodes(seed: int, num_envs: int, mode: str, truncate_at=None, calls: int = 200):
    """Simulate the vector env by hand: (call index, sub-env, length, return, global step, truncated)."""
    ends = []
    for j in range(num_envs):
        t, k = 0, 0
        while t < calls:
            length = scheduled_length(seed + j, k)
            if truncate_at is not None and length > truncate_at:
                length, trunc = truncate_at, True
            else:
                trunc = False
            t += length
            ends.append((t - 1, j, length, length * (length + 1) / 2, trunc))
            if mode == "NextStep":
                t += 1  # the reset step
            k += 1
    ends = sorted(e for e in ends if e[0] < calls)
    # real transitions up to and including each env.step call
    real = np.full(calls, num_envs)
    if mode == "NextStep":
        for call, _j, *_ in ends:
            if call + 1 < calls:
                real[call + 1] -= 1
    cumulative = np.cumsum(real)
    return [(call, j, length, ret, int(cumulative[call]), trunc) for call, j, length, ret, trunc in ends]


def _agents_factory(created):
    def factory(env):
        agent = RecordingAgent()
        created.append(agent)
        return agent

    return factory


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("truncate_at", [None, 3])
def test_episode_budget_is_exact(mode, num_envs, truncate_at):
    created = []
    trainer = OnlineTrainer(make_counting_vec(num_envs, mode, truncate_at=truncate_at), _agents_factory(created))
    runs = trainer.multi_run(2, num_episodes=7, seed_offset=5, progress=False)
    assert len(created) == 2  # the agent factory is called once per run, by nothing else
    for run_idx, records in enumerate(runs, start=1):
        seed = run_seed(5, run_idx)
        expected = expected_episodes(seed, num_envs, mode, truncate_at)[:7]
        assert [r["episode_index"] for r in records] == list(range(1, 8))
        assert [r["ep_length"] for r in records] == [e[2] for e in expected]
        assert [r["ep_return"] for r in records] == [e[3] for e in expected]
        assert [r["global_step"] for r in records] == [e[4] for e in expected]
        assert [len(r["actions"]) for r in records] == [e[2] for e in expected]
        assert all(r["agent_seed"] == seed for r in records)
        agent = created[run_idx - 1]
        assert agent.final_obs_ok
        # the agent was told exactly which entries were real: as many as the run's env steps
        last_call = expected[-1][0]
        assert agent.updates == last_call + 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_step_budget_counts_real_transitions(mode, vectorization):
    num_envs, total = 3, 40
    created = []
    trainer = OnlineTrainer(make_counting_vec(num_envs, mode, vectorization), _agents_factory(created))
    (records,) = trainer.multi_run(1, total_steps=total, seed_offset=11, progress=False)
    expected = expected_episodes(run_seed(11, 1), num_envs, mode)
    (agent,) = created
    # the run stops at the first env.step call at which the real-transition count reaches the budget
    assert total <= agent.real < total + num_envs
    finished = [e for e in expected if e[4] <= agent.real and e[0] < agent.updates]
    assert [(r["ep_length"], r["ep_return"], r["global_step"]) for r in records] == [
        (e[2], e[3], e[4]) for e in finished
    ]
    assert sum(r["ep_length"] for r in records) <= agent.real
    assert agent.final_obs_ok


def test_reset_step_is_flagged_invalid_only_under_next_step():
    seen = []

    class Spy(RecordingAgent):
        def update(self, next_obs, reward, terminated, truncated, call_back=None, valid=None):
            seen.append((valid.copy(), (terminated | truncated).copy(), reward.copy()))
            super().update(next_obs, reward, terminated, truncated, call_back, valid)

    OnlineTrainer(make_counting_vec(2, "NextStep"), Spy).multi_run(1, num_episodes=6, seed_offset=0, progress=False)
    for (valid, _, reward), (_, prev_done, _) in zip(seen[1:], seen[:-1]):
        np.testing.assert_array_equal(valid, ~prev_done)
        assert np.all(reward[~valid] == 0)
    seen.clear()
    OnlineTrainer(make_counting_vec(2, "SameStep"), Spy).multi_run(1, num_episodes=6, seed_offset=0, progress=False)
    assert all(valid.all() for valid, _, _ in seen)


def test_agent_without_valid_keyword_still_runs():
    class Plain:
        def __init__(self):
            self.n = 0

        def act(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

        def update(self, next_obs, reward, terminated, truncated, call_back=None):
            self.n += 1

    (records,) = OnlineTrainer(make_counting_vec(2, "NextStep"), Plain()).multi_run(
        1, num_episodes=4, seed_offset=0, progress=False
    )
    expected = expected_episodes(0, 2, "NextStep")[:4]
    assert [r["ep_length"] for r in records] == [e[2] for e in expected]


@pytest.mark.parametrize("mode", MODES)
def test_logs_of_an_agent_without_valid_keyword_leave_out_reset_steps(mode):
    """The loop keeps ``valid`` for log() even when the agent's update does not take it."""

    class LogsEveryStep:
        def act(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

        def update(self, next_obs, reward, terminated, truncated, call_back=None):
            self.obs = next_obs

        def log(self):
            return [{"obs": float(o[0])} for o in self.obs]

    (records,) = OnlineTrainer(make_counting_vec(2, mode), LogsEveryStep()).multi_run(
        1, num_episodes=12, seed_offset=0, progress=False
    )
    expected = expected_episodes(0, 2, mode)[:12]
    assert [r["ep_length"] for r in records] == [e[2] for e in expected]
    for record in records:  # one entry per real transition: the step counts 1..L (the reset step's 0 left out)
        assert record["agent_logs"]["obs"].tolist() == list(range(1, record["ep_length"] + 1))
