"""What multi_run writes is what it returns: the metric streams and all_metrics.pkl hold the records."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from online_trainer import OnlineTrainer, load_all_run_metrics
from online_trainer.callbacks import EmptyCallBack
from online_trainer.experiment import ownership
from online_trainer.records import storage
from tests.conftest import CountingEnv, RecordingAgent, make_counting_vec, same_values


class RandomAgent:
    def __init__(self, env):
        self.space = env.action_space
        self.num_envs = env.num_envs

    def reset(self, seed):
        self.space.seed(seed)

    def act(self, obs):
        return self.space.sample()

    def update(self, next_obs, reward, terminated, truncated, call_back=None):
        pass


@pytest.mark.parametrize("num_workers", [1, 2])
def test_all_metrics_and_streams_hold_the_returned_records(tmp_path, num_workers):
    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=8), RandomAgent, exp_dir=tmp_path)
    trainer.call_back = EmptyCallBack()
    runs = trainer.multi_run(
        2, total_steps=3000, seed_offset=0, num_workers=num_workers, progress=False, metrics_flush_every=7
    )
    assert len(runs[0]) > 100 and runs[0][0]["actions"].dtype == np.int64
    assert same_values(pickle.loads((tmp_path / storage.ALL_METRICS_FILE).read_bytes()), runs)
    assert same_values(load_all_run_metrics(tmp_path), runs)


def test_all_metrics_is_written_while_the_experiment_lock_is_held(tmp_path, monkeypatch):
    """No second writer can take the directory between the last run and all_metrics.pkl."""
    held = []
    write = storage.write_all_metrics

    def probing_write(exp_dir, runs):
        held.append(ownership.is_held(ownership.lock_path(exp_dir)))
        write(exp_dir, runs)

    monkeypatch.setattr(storage, "write_all_metrics", probing_write)
    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=2), RandomAgent, exp_dir=tmp_path)
    trainer.call_back = EmptyCallBack()
    runs = trainer.multi_run(2, num_episodes=5, seed_offset=0, progress=False)
    assert held == [True]
    assert same_values(pickle.loads((tmp_path / storage.ALL_METRICS_FILE).read_bytes()), runs)
    assert not ownership.is_held(ownership.lock_path(tmp_path))


class DictActionCountingEnv(CountingEnv):
    """CountingEnv (known lengths) whose actions are a Dict: structured actions kept per episode."""

    def __init__(self):
        super().__init__()
        self.action_space = spaces.Dict({"move": spaces.Discrete(3), "aim": spaces.Box(-1.0, 1.0, (2,))})


def leaves(actions):
    return list(actions.values()) if isinstance(actions, dict) else [actions]


@pytest.mark.parametrize("actions", ["discrete", "dict"])
def test_returned_actions_are_read_only_and_files_hold_writeable_ones(tmp_path, actions):
    """One read cannot change the next, and nothing of that reaches the files (one segment of actions here)."""
    if actions == "dict":
        factory = lambda: gym.vector.SyncVectorEnv([DictActionCountingEnv] * 2)  # noqa: E731
    else:
        factory = make_counting_vec(2)
    trainer = OnlineTrainer(factory, RandomAgent, exp_dir=tmp_path)
    trainer.call_back = EmptyCallBack()
    (run,) = trainer.multi_run(1, num_episodes=12, seed_offset=0, progress=False, metrics_flush_every=1000)
    assert [r["ep_length"] for r in run] == [len(leaves(r["actions"])[0]) for r in run]
    for record in run:
        for leaf in leaves(record["actions"]):
            assert not leaf.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                leaf[...] = 0
    on_disk = pickle.loads((tmp_path / storage.ALL_METRICS_FILE).read_bytes())[0]
    streamed = load_all_run_metrics(tmp_path)[0]
    for records in (on_disk, streamed):
        assert same_values(records, run, writeable=False)
        for record in records:
            for leaf in leaves(record["actions"]):
                assert leaf.flags.writeable
                leaf[...] = 0  # the user's own copy


def test_all_metrics_holds_records_with_transitions_and_logs(tmp_path):
    trainer = OnlineTrainer(
        make_counting_vec(3), lambda env: RecordingAgent(env, log_every_step=True), exp_dir=tmp_path
    )
    runs = trainer.multi_run(2, num_episodes=9, seed_offset=0, dump_transitions=True, progress=False)
    assert runs[0][0]["transitions"] and runs[0][0]["agent_logs"]["t"].size
    assert same_values(pickle.loads((tmp_path / storage.ALL_METRICS_FILE).read_bytes()), runs)
