"""Episode book-keeping: the loop of one sub-env makes the calls and records of the general loop,
a sub-env is kept alike whatever the number of sub-envs, returns are summed in step order,
``log()`` is asked every step, and the best state is the one of the best episode."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from online_trainer import OnlineTrainer
from online_trainer.callbacks.base import CallBack
from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.steps import agent_log
from tests.conftest import CountingEnv, RecordingAgent, make_counting_vec

MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP, AutoresetMode.DISABLED]


class CallRecorder(CallBack):
    def __init__(self):
        self.calls = []

    def __call__(self, data, tag, step, force=False):
        self.calls.append((dict(data), tag, step, force))


ACTION_SPACES = {
    "discrete": gym.spaces.Discrete(2),
    "scalar_box": gym.spaces.Box(-1, 1, shape=(), dtype=np.float32),
    "box": gym.spaces.Box(-1, 1, shape=(2,), dtype=np.float32),
    "dict": gym.spaces.Dict(move=gym.spaces.Discrete(3), aim=gym.spaces.Box(-1, 1, shape=(2,))),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, shape=(), dtype=np.float32))),
}


def batch_of(space, n, k):
    """``n`` sub-envs' actions in ``space``, changing with ``k``."""
    if isinstance(space, gym.spaces.Dict):
        return {key: batch_of(sub, n, k) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(batch_of(sub, n, k) for sub in space.spaces)
    if isinstance(space, gym.spaces.Discrete):
        return np.full(n, k % space.n, dtype=np.int64)
    return np.full((n, *space.shape), (k % 7) / 10, dtype=space.dtype)


def plain(actions):
    """An episode's actions (an array, or a dict or tuple of them) as comparable values, dtypes and shapes."""
    if isinstance(actions, dict):
        return {key: plain(leaf) for key, leaf in actions.items()}
    if isinstance(actions, tuple):
        return tuple(plain(leaf) for leaf in actions)
    return actions.tolist(), actions.dtype, actions.shape


class ValidRecorder(RecordingAgent):
    """Logs its loss and one entry per step, notes the valid mask of every update, and acts
    in its env's action space with actions that change every step."""

    def __init__(self, env=None):
        super().__init__(env, log_every_step=True)
        self.valids = []
        self.space = env.single_action_space

    def act(self, obs):
        return batch_of(self.space, len(obs), self.updates)

    def update(self, next_obs, reward, terminated, truncated, call_back=None, valid=None):
        self.valids.append(valid.tolist())
        super().update(next_obs, reward, terminated, truncated, call_back, valid)


def fractional_counting_env(mode, action_space):
    """CountingEnv with rewards 0.1 t + 0.013, so that returns depend on the order of the sums."""

    def make():
        env = gym.wrappers.TransformReward(CountingEnv(truncate_at=4), lambda r: 0.1 * r + 0.013)
        env.action_space = action_space
        return env

    return lambda: gym.vector.SyncVectorEnv([make], autoreset_mode=AutoresetMode(mode))


@pytest.mark.parametrize("action", sorted(ACTION_SPACES))
@pytest.mark.parametrize("budget", [{"num_episodes": 9}, {"total_steps": 31}])
@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_single_env_loop_makes_the_calls_and_records_of_the_general_loop(mode, budget, action):
    """Keeping transitions (which keeps ``valid`` up to date at every step) changes no call and no record."""
    results = []
    for general in (False, True):
        callback = CallRecorder()
        trainer = OnlineTrainer(fractional_counting_env(mode, ACTION_SPACES[action]), ValidRecorder)
        trainer.call_back = callback
        (records,) = trainer.multi_run(1, seed_offset=2, dump_transitions=general, progress=False, **budget)
        agent = trainer.agents[0]
        fields = [
            (
                r["ep_return"],
                r["ep_length"],
                r["global_step"],
                r["episode_index"],
                plain(r["actions"]),
                r["agent_logs"]["t"].tolist(),
            )
            for r in records
        ]
        calls = [call for call in callback.calls if call[1].split("/")[0] not in ("stats", "timing")]  # wall-clock
        results.append((fields, agent.valids, agent.updates, calls, agent.final_obs_ok))
    assert results[0] == results[1]
    fields, valids, _, calls, final_obs_ok = results[0]
    assert final_obs_ok and len(fields) >= 9
    reset_steps = valids.count([False])  # one after each episode but, perhaps, the last
    assert len(fields) - 1 <= reset_steps <= len(fields) if mode == "NextStep" else reset_steps == 0


@pytest.mark.parametrize("mode", MODES)
def test_a_sub_env_is_kept_alike_whatever_the_number_of_sub_envs(mode):
    """A tracker of one sub-env keeps what a tracker of two keeps for sub-env 0."""
    one, two = EpisodeTracker(1, mode), EpisodeTracker(2, mode)
    rng = np.random.default_rng(1)
    got: dict[int, list] = {1: [], 2: []}
    for _ in range(600):
        actions = rng.integers(0, 5, size=(2, 3))
        reward = (rng.normal(size=2) * 1e3).astype(np.float32)
        valid = two.valid.copy()
        assert valid[0] == one.valid[0]
        terminated = (rng.random(2) < 0.15) & valid  # a reset step never ends an episode
        truncated = (rng.random(2) < 0.05) & valid & ~terminated
        real_one = one.observe(None, actions[:1], reward[:1], terminated[:1], truncated[:1])
        real_two = two.observe(None, actions, reward, terminated, truncated)
        assert real_one == int(valid[0]) and real_two == int(valid.sum())
        assert one.ended == bool(terminated[0] or truncated[0]) and two.ended == bool((terminated | truncated).any())
        for tracker, key in ((one, 1), (two, 2)):
            for i in np.flatnonzero(tracker.done):
                record = tracker.finish(int(i))
                if i == 0:
                    got[key].append(record)
            tracker.end_step(tracker.ended)
    assert len(got[1]) == len(got[2]) > 50
    for a, b in zip(got[1], got[2]):
        assert (a["ep_return"], a["ep_length"]) == (b["ep_return"], b["ep_length"])
        assert type(a["ep_return"]) is float and type(a["ep_length"]) is int
        np.testing.assert_array_equal(a["actions"], b["actions"])


@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("mode", MODES)
def test_lengths_and_returns_count_real_transitions_summed_in_float64_step_order(num_envs, mode):
    """Against a hand-written per-sub-env account: the reset step (NEXT_STEP) is not counted."""
    tracker = EpisodeTracker(num_envs, mode)
    rng = np.random.default_rng(7)
    account = [[0.0, 0, False] for _ in range(num_envs)]  # return, length, next step is a reset step
    expected, got = [], []
    for _ in range(500):
        reward = (rng.normal(size=num_envs) * 1e3).astype(np.float32)
        terminated = (rng.random(num_envs) < 0.2) & tracker.valid  # a reset step never ends an episode
        truncated = np.zeros(num_envs, dtype=bool)
        tracker.observe(None, np.zeros(num_envs, dtype=np.int64), reward, terminated, truncated)
        for i in range(num_envs):
            if account[i][2]:
                account[i][2] = False
                continue
            account[i][0] += float(reward[i])
            account[i][1] += 1
            if terminated[i]:
                expected.append((i, account[i][0], account[i][1]))
                account[i] = [0.0, 0, mode is AutoresetMode.NEXT_STEP]
        for i in np.flatnonzero(tracker.done):
            record = tracker.finish(int(i))
            got.append((int(i), record["ep_return"], record["ep_length"]))
            assert len(record["actions"]) == record["ep_length"]
        tracker.end_step(tracker.ended)
    assert sorted(got) == sorted(expected) and len(got) > 50


class NeverLogs:
    def log(self):
        """Nothing to log."""
        return None


class LogsAttribute:
    entries = None

    def log(self):
        return self.entries


def test_agent_log_is_any_callable_log_and_a_log_returning_none_keeps_nothing():
    class Passes:
        def log(self):
            pass

    assert agent_log(object()) is None
    for agent in (NeverLogs(), Passes(), LogsAttribute(), SometimesLogging(), RecordingAgent()):
        assert agent_log(agent) == agent.log
    notes = type("Notes", (RecordingAgent,), {})
    for attribute in ([], logging.getLogger("agent")):  # an attribute named log, not the protocol's method
        agent = notes(None)
        agent.log = attribute
        assert agent_log(agent) is None
        (records,) = OnlineTrainer(make_counting_vec(2), agent).multi_run(
            1, num_episodes=4, seed_offset=0, progress=False
        )
        assert len(records) == 4 and agent.log is attribute
    callable_object = type("Log", (), {"__call__": lambda self: None})()
    assert agent_log(type("A", (), {"log": callable_object})()) is callable_object
    quiet = type("Quiet", (RecordingAgent,), {"log": NeverLogs.log})
    (records,) = OnlineTrainer(make_counting_vec(2), quiet).multi_run(1, num_episodes=4, seed_offset=0, progress=False)
    assert len(records) == 4 and all(r["agent_logs"] is None for r in records)


class SometimesLogging(RecordingAgent):
    """Logs nothing for its first 40 updates, then one entry per sub-env on every third update."""

    def log(self):
        if self.updates <= 40 or self.updates % 3:
            return None
        return [{"u": np.array([self.updates])} for _ in range(self.num_envs)]


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_log_is_asked_every_step_however_long_it_returned_none(mode):
    agent = SometimesLogging()
    (records,) = OnlineTrainer(make_counting_vec(1, mode), agent).multi_run(
        1, num_episodes=40, seed_offset=0, progress=False
    )
    logged = np.concatenate([r["agent_logs"]["u"] for r in records if r["agent_logs"] is not None])
    # every third update after the 40th, except those of NEXT_STEP reset steps (not transitions)
    assert len(logged) > 10 and all(u > 40 and u % 3 == 0 for u in logged)
    reset_updates = set()
    if mode == "NextStep":  # the update after an episode's last step is its reset step
        updates = np.cumsum([r["ep_length"] + 1 for r in records])
        reset_updates = set(updates.tolist())
    wanted = [u for u in range(41, agent.updates + 1) if u % 3 == 0 and u not in reset_updates]
    assert logged.tolist() == wanted[: len(logged)] and len(wanted) - len(logged) <= 1


class InPlaceState(RecordingAgent):
    """``save()`` returns its own state object, which later updates change in place."""

    def __init__(self, env=None):
        super().__init__(env)
        self.state = {"episodes": torch.zeros(1, dtype=torch.int64)}

    def update(self, next_obs, reward, terminated, truncated, call_back=None, valid=None):
        super().update(next_obs, reward, terminated, truncated, call_back, valid)
        self.state["episodes"] += int(np.count_nonzero((terminated | truncated) & valid))

    def save(self, path=None):
        if path is not None:
            open(path + ".txt", "w").close()
        return self.state


def test_best_state_is_taken_at_the_best_episode_even_when_the_agent_reuses_its_state(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), InPlaceState, exp_dir=tmp_path)
    (records,) = trainer.multi_run(1, num_episodes=12, seed_offset=3, checkpoint_freq=5, progress=False)
    best = torch.load(tmp_path / "Run1_Best_agent.t", weights_only=True)
    best_index = int(np.argmax([r["ep_return"] for r in records]))
    assert int(best["episodes"]) == best_index + 1 < len(records)
