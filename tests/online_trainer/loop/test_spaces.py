"""Every gymnasium space, in every autoreset mode: records checked against a hand-written loop.

The envs are used as users use them: MiniGrid (Dict observations holding a Box, a Discrete and
a custom mission space), Blackjack-v1 (Tuple observations) and two small envs with Dict and
Tuple actions (nested, and with nested observations). A hand-written loop over single envs,
seeded like the vector env's sub-envs, gives each episode's length, return, observations and
actions; the trainer's records and what its agent was handed must match them exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from online_trainer import OnlineTrainer
from online_trainer.loop.accounting import ActionHistory, EpisodeTracker
from online_trainer.loop.spaces import BatchSplitter, final_observations, infer_space

MODES = ["NextStep", "SameStep", "Disabled"]

Policy = Callable[[Any], Any]


# ---------------------------------------------------------------- envs with structured actions


class StructuredEnv(gym.Env):
    """Episodes of known length with Dict or Tuple (nested) actions and observations.

    Episode k after ``reset(seed=s)`` lasts ``2 + (s + k) % 4`` steps. The reward depends on
    every leaf of the action, so returns show which actions reached the env.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        if kind == "dict":
            self.action_space = spaces.Dict(
                {
                    "move": spaces.Discrete(3),
                    "aim": spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.MultiBinary(3))),
                }
            )
            self.observation_space = spaces.Dict(
                {
                    "t": spaces.Box(0, 100, (1,), np.float32),
                    "pair": spaces.Tuple((spaces.Discrete(10), spaces.MultiBinary(2))),
                }
            )
        else:
            self.action_space = spaces.Tuple(
                (
                    spaces.Discrete(4),
                    spaces.MultiDiscrete([2, 3]),
                    spaces.Dict({"x": spaces.Box(-1, 1, (1,), np.float64)}),
                )
            )
            self.observation_space = spaces.Tuple((spaces.Box(0, 100, (1,), np.float32), spaces.Discrete(50)))
        self._seed, self._episode, self._t, self._length = 0, -1, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self._seed, self._episode = seed, -1
        self._episode += 1
        self._t = 0
        self._length = 2 + (self._seed + self._episode) % 4
        return self._obs(), {}

    def step(self, action):
        assert self._t < self._length, "stepped a finished episode"
        assert self.action_space.contains(action), action
        self._t += 1
        if self.kind == "dict":
            reward = float(action["move"]) + float(np.sum(action["aim"][0])) + 0.5 * float(np.sum(action["aim"][1]))
        else:
            reward = float(action[0]) + 10.0 * float(np.sum(action[1])) + float(action[2]["x"][0])
        return self._obs(), reward, self._t >= self._length, False, {}

    def _obs(self):
        t = np.array([self._t], dtype=np.float32)
        if self.kind == "dict":
            return {"t": t, "pair": (np.int64(self._episode % 10), np.array([self._t % 2, 1], dtype=np.int8))}
        return (t, np.int64(self._episode % 50))


def structured_policy(kind: str) -> Policy:
    """A deterministic policy of the observation (so the hand-written loop can replay it)."""

    def policy(obs):
        if kind == "dict":
            t = int(obs["t"][0]) + 3 * int(obs["pair"][0])
            return {
                "move": np.int64(t % 3),
                "aim": (
                    np.array([t % 10 / 10, -(t % 10) / 20], dtype=np.float32),
                    np.array([t & 1, (t >> 1) & 1, 1], dtype=np.int8),
                ),
            }
        t = int(obs[0][0]) + int(obs[1])
        return (np.int64(t % 4), np.array([t % 2, t % 3], dtype=np.int64), {"x": np.array([t % 7 / 7])})

    return policy


def blackjack_policy(obs):
    return np.int64(obs[0] < 17)  # hit below 17


def minigrid_policy(obs):
    """Walk to the goal when it is in view (the agent sees from cell (3, 6), facing -y), else turn."""
    left, right, forward = 0, 1, 2
    goal = np.argwhere(obs["image"][..., 0] == 8)  # 8: the goal's object index
    if not len(goal):
        return np.int64(right)
    x, y = goal[0]
    if x == 3:
        return np.int64(forward)
    if y == 6:
        return np.int64(left if x < 3 else right)
    return np.int64(forward if obs["image"][3, 5, 0] == 1 else right)  # 1: an empty cell


# ---------------------------------------------------------------- helpers


class LastStep(gym.vector.VectorWrapper):
    """Keeps the observations and infos of the last step, for the agent's checks."""

    def step(self, actions):
        out = super().step(actions)
        self.last_obs, self.last_info = out[0], out[4]
        return out


class StructuredAgent:
    """Acts by ``policy`` on each sub-env's observation; checks what ``update`` is handed.

    ``update`` must get the env's own observations, but for sub-envs whose episode ended under
    SAME_STEP, which must get ``info["final_obs"]``. ``log()`` gives one entry per sub-env.
    """

    def __init__(self, env, policy: Policy) -> None:
        self.env, self.policy = env, policy
        self.updates = 0
        self.final_checks = 0
        self.mismatches: list[str] = []

    def act(self, obs):
        items = [self.policy(o) for o in iterate(self.env.observation_space, obs)]
        space = self.env.single_action_space
        return concatenate(space, items, create_empty_array(space, len(items)))

    def update(self, next_obs, reward, terminated, truncated, call_back=None, valid=None):
        self.updates += 1
        same_step = self.env.metadata["autoreset_mode"] is AutoresetMode.SAME_STEP
        info = self.env.last_info
        seen = list(iterate(self.env.observation_space, next_obs))
        raw = list(iterate(self.env.observation_space, self.env.last_obs))
        for i, done in enumerate(terminated | truncated):
            if same_step and done:
                expected = info["final_obs"][i]
                self.final_checks += 1
            else:
                expected = raw[i]
            try:
                assert_same(seen[i], expected)
            except AssertionError as exc:
                self.mismatches.append(f"update {self.updates}, sub-env {i}: {exc}")

    def log(self):
        return [{"update": np.array([self.updates])} for _ in range(self.env.num_envs)]


def assert_same(a, b) -> None:
    """Equal values in the same structure: dicts as dicts, tuples as tuples, arrays by value."""
    if isinstance(b, dict):
        assert isinstance(a, dict) and set(a) == set(b), f"{a!r} != {b!r}"
        for key in b:
            assert_same(a[key], b[key])
    elif isinstance(b, tuple):
        assert isinstance(a, tuple) and len(a) == len(b), f"{a!r} != {b!r}"
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(b, str):
        assert a == b, f"{a!r} != {b!r}"
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def stack(space: spaces.Space, actions: list):
    """One episode's actions as ActionHistory keeps them: leaves stacked along time."""
    if isinstance(space, spaces.Dict):
        return {key: stack(sub, [a[key] for a in actions]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(stack(sub, [a[j] for a in actions]) for j, sub in enumerate(space.spaces))
    return np.stack([np.asarray(a) for a in actions])


def reference(make_env: Callable[[], gym.Env], policy: Policy, seed: int, num_envs: int, mode: str, count: int):
    """The first ``count`` episodes of the vector env, by a hand-written loop over single envs.

    Returns dicts with the env.step call at which the episode ended, the sub-env, its length,
    return, ``(obs, action, reward, terminated, truncated)`` transitions and actions, in the
    order the trainer finishes them.
    """
    episodes = []
    for j in range(num_envs):
        env = make_env()
        obs, _ = env.reset(seed=seed + j)
        call, found = 0, 0
        while found < count:
            transitions = []
            while True:
                action = policy(obs)
                next_obs, reward, terminated, truncated, _ = env.step(action)
                transitions.append((obs, action, float(reward), bool(terminated), bool(truncated)))
                obs = next_obs
                if terminated or truncated:
                    break
                call += 1
            episodes.append(
                {
                    "call": call,
                    "env": j,
                    "length": len(transitions),
                    "return": sum(t[2] for t in transitions),
                    "transitions": transitions,
                    "actions": [t[1] for t in transitions],
                }
            )
            found += 1
            call += 2 if mode == "NextStep" else 1  # NEXT_STEP: the reset step is a call of its own
            obs, _ = env.reset()
        env.close()
    episodes.sort(key=lambda e: (e["call"], e["env"]))
    return episodes[:count]


def run_and_check(make_single, make_vec, policy, num_envs, mode, num_episodes, seed_offset=3, transitions=True):
    """Run the trainer once and check every record and the agent against the reference loop."""
    created = []

    def agent_factory(env):
        agent = StructuredAgent(env, policy)
        created.append(agent)
        return agent

    trainer = OnlineTrainer(lambda: LastStep(make_vec()), agent_factory)
    (records,) = trainer.multi_run(
        1, num_episodes=num_episodes, seed_offset=seed_offset, dump_transitions=transitions, progress=False
    )
    (agent,) = [a for a in created if a.updates]
    action_space = make_single().action_space
    expected = reference(make_single, policy, records[0]["agent_seed"], num_envs, mode, num_episodes)
    assert [(r["ep_length"], r["ep_return"]) for r in records] == [(e["length"], e["return"]) for e in expected]
    for record, episode in zip(records, expected):
        # transitions hold sub-env i's own observation and action, in the single-env structure
        assert len(record["transitions"]) == (episode["length"] if transitions else 0)
        for got, want in zip(record["transitions"], episode["transitions"]):
            assert_same(got[0], want[0])
            assert_same(got[1], want[1])
            assert got[2:] == want[2:]
        assert_same(record["actions"], stack(action_space, episode["actions"]))
        # only real transitions' log() entries belong to an episode
        assert len(record["agent_logs"]["update"]) == record["ep_length"]
    assert agent.mismatches == []
    if mode == "SameStep":
        assert agent.final_checks >= num_episodes
    return records


def vec_of(make_single, num_envs, mode, vectorization="sync", **kwargs):
    cls = gym.vector.SyncVectorEnv if vectorization == "sync" else gym.vector.AsyncVectorEnv
    return lambda: cls([make_single] * num_envs, autoreset_mode=AutoresetMode(mode), **kwargs)


# ---------------------------------------------------------------- through the trainer


@pytest.mark.parametrize("env_id", ["MiniGrid-Empty-5x5-v0", "Blackjack-v1"])
def test_same_step_update_gets_final_obs(env_id):
    """Under SAME_STEP, update gets info["final_obs"] of finished sub-envs (Dict and Tuple obs)."""
    if env_id.startswith("MiniGrid"):
        pytest.importorskip("minigrid")
    policy = minigrid_policy if env_id.startswith("MiniGrid") else blackjack_policy

    def make_vec():
        return gym.make_vec(
            env_id, num_envs=2, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP}
        )

    run_and_check(lambda: gym.make(env_id), make_vec, policy, 2, "SameStep", num_episodes=4, transitions=False)


@pytest.mark.parametrize("mode", MODES)
def test_minigrid_dict_observations(mode):
    pytest.importorskip("minigrid")
    env_id = "MiniGrid-Empty-5x5-v0"

    def make_vec():
        return gym.make_vec(
            env_id, num_envs=2, vectorization_mode="sync", vector_kwargs={"autoreset_mode": AutoresetMode(mode)}
        )

    records = run_and_check(lambda: gym.make(env_id), make_vec, minigrid_policy, 2, mode, num_episodes=4)
    assert isinstance(records[0]["transitions"][0][0], dict)
    assert any(r["ep_return"] > 0 for r in records), "no episode reached the goal: the check proves less"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_blackjack_tuple_observations(mode, vectorization):
    def make_vec():
        return gym.make_vec(
            "Blackjack-v1",
            num_envs=3,
            vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode(mode)},
        )

    records = run_and_check(lambda: gym.make("Blackjack-v1"), make_vec, blackjack_policy, 3, mode, num_episodes=12)
    assert isinstance(records[0]["transitions"][0][0], tuple)
    assert {r["ep_length"] for r in records} != {1}, "every episode lasted one step: the check proves less"


@pytest.mark.parametrize("kind", ["dict", "tuple"])
@pytest.mark.parametrize("mode", MODES)
def test_structured_actions(kind, mode):
    make_single = lambda: StructuredEnv(kind)  # noqa: E731
    records = run_and_check(make_single, vec_of(make_single, 3, mode), structured_policy(kind), 3, mode, num_episodes=9)
    actions = records[0]["actions"]
    if kind == "dict":
        assert isinstance(actions, dict) and isinstance(actions["aim"], tuple)
        assert actions["aim"][0].shape == (records[0]["ep_length"], 2)
    else:
        assert isinstance(actions, tuple) and isinstance(actions[2], dict)
        assert actions[1].shape == (records[0]["ep_length"], 2)


@pytest.mark.parametrize("kind", ["dict", "tuple"])
def test_structured_actions_async(kind):
    make_single = lambda: StructuredEnv(kind)  # noqa: E731
    run_and_check(
        make_single, vec_of(make_single, 2, "SameStep", "async"), structured_policy(kind), 2, "SameStep", num_episodes=6
    )


@pytest.mark.parametrize("mode", MODES)
def test_log_entries_per_episode_equal_its_length(mode):
    """An agent logging one entry per sub-env per step: ep_length entries per episode."""
    from tests.conftest import RecordingAgent, make_counting_vec

    agent = lambda env: RecordingAgent(env, log_every_step=True)  # noqa: E731
    (records,) = OnlineTrainer(make_counting_vec(3, mode), agent).multi_run(
        1, num_episodes=10, seed_offset=0, progress=False
    )
    assert [len(r["agent_logs"]["t"]) for r in records] == [r["ep_length"] for r in records]


# ---------------------------------------------------------------- the building blocks


ALL_SPACES = {
    "box": spaces.Box(-1, 1, (2, 3), np.float32),
    "discrete": spaces.Discrete(5, start=-2),
    "multidiscrete": spaces.MultiDiscrete([3, 4]),
    "multibinary": spaces.MultiBinary(4),
    "dict": spaces.Dict({"a": spaces.Discrete(3), "b": spaces.Tuple((spaces.Box(0, 1, (2,)), spaces.MultiBinary(2)))}),
    "tuple": spaces.Tuple((spaces.Discrete(3), spaces.Dict({"x": spaces.MultiDiscrete([2, 2])}))),
    "text": spaces.Text(5),
    "sequence": spaces.Sequence(spaces.Discrete(4)),
    "graph": spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3)),
    "oneof": spaces.OneOf((spaces.Discrete(3), spaces.Box(0, 1, (2,)))),
    "dict_of_text": spaces.Dict({"img": spaces.Box(0, 255, (3, 3), np.uint8), "mission": spaces.Text(8)}),
    "tuple_of_text": spaces.Tuple((spaces.Discrete(3), spaces.Text(4))),
}


def _samples(space, n, seed=0):
    space.seed(seed)
    items = [space.sample() for _ in range(n)]
    return items, concatenate(space, items, create_empty_array(space, n))


@pytest.mark.parametrize("name", sorted(ALL_SPACES))
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("given", [True, False])
def test_final_observations_every_space(name, num_envs, given):
    space = ALL_SPACES[name]
    items, batch = _samples(space, num_envs)
    finals, _ = _samples(space, num_envs, seed=1)
    mask = np.zeros(num_envs, dtype=bool)
    mask[-1] = True
    final_obs = np.full(num_envs, None, dtype=object)
    final_obs[-1] = finals[-1]
    out = final_observations(batch, {"final_obs": final_obs, "_final_obs": mask}, space if given else None)
    expected = concatenate(space, items[:-1] + finals[-1:], create_empty_array(space, num_envs))
    assert_same(out, expected)
    assert_same(batch, concatenate(space, items, create_empty_array(space, num_envs)))  # left unchanged
    assert final_observations(batch, {}) is batch


@pytest.mark.parametrize("name", sorted(ALL_SPACES))
@pytest.mark.parametrize("given", [True, False])
def test_batch_splitter_every_space(name, given):
    space = ALL_SPACES[name]
    items, batch = _samples(space, 3)
    split = BatchSplitter(3, space if given else None)
    for _ in range(2):  # the second call reuses the batched space
        got = split(batch)
        assert len(got) == 3
        for g, want in zip(got, items):
            assert_same(g, want)


@pytest.mark.parametrize("name", sorted(ALL_SPACES))
@pytest.mark.parametrize("given", [True, False])
def test_action_history_every_space(name, given):
    """Episodes of different lengths across buffer compactions and growth."""
    space = ALL_SPACES[name]
    num_envs = 2
    history = ActionHistory(num_envs, capacity=4, **({"space": space} if given else {}))
    steps = [_samples(space, num_envs, seed=s) for s in range(11)]
    lengths = {0: [3, 8], 1: [11]}
    ends = {0: {3, 11}, 1: {11}}
    got = {0: [], 1: []}
    for t, (_, batch) in enumerate(steps, start=1):
        history.append(batch)
        for i in range(num_envs):
            if t in ends[i]:
                got[i].append(history.episode(i))
                history.restart(i, 0)
    for i in range(num_envs):
        start = 0
        for length, episode in zip(lengths[i], got[i]):
            want = [items[i] for items, _ in steps[start : start + length]]
            if isinstance(
                space,
                (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Dict, spaces.Tuple),
            ):
                assert_same(episode, stack(space, want))
            else:  # items of Text, Sequence, Graph, OneOf: an object array along time
                assert episode.dtype == object and episode.shape == (length,)
                for g, w in zip(episode, want):
                    assert_same(g, w)
            start += length


def test_action_history_array_actions_take_one_buffer():
    history = ActionHistory(3, capacity=2)
    for t in range(5):
        history.append(np.full((3, 2), t, dtype=np.float32))
    assert len(history.buffers) == 1 and history.buffers[0].dtype == np.float32
    np.testing.assert_array_equal(history.episode(1), np.repeat(np.arange(5, dtype=np.float32), 2).reshape(5, 2))
    listed = ActionHistory(2)
    listed.append([1, 0])
    np.testing.assert_array_equal(listed.episode(0), [1])


def test_infer_space_reads_gymnasium_layouts():
    n = 2
    assert isinstance(infer_space(np.zeros((n, 3)), n), spaces.Box)
    inferred = infer_space({"image": np.zeros((n, 2, 2), np.uint8), "mission": ("a", "b")}, n)
    assert isinstance(inferred, spaces.Dict) and list(inferred.spaces) == ["image", "mission"]
    assert inferred["image"].shape == (2, 2) and inferred["image"].dtype == np.uint8
    assert type(inferred["mission"]) is spaces.Space  # a tuple of items, one per sub-env
    assert isinstance(infer_space((np.zeros(n), np.zeros((n, 4))), n), spaces.Tuple)
    assert type(infer_space(((0, np.zeros(2)), (1, np.zeros(2))), n)) is spaces.Space  # OneOf items
    with pytest.raises(TypeError, match="sub-envs"):
        infer_space(np.zeros((3, 2)), n)


@pytest.mark.parametrize(
    "obs_name, act_name", [("tuple", "tuple"), ("dict", "dict"), ("dict_of_text", "multidiscrete")]
)
def test_tracker_transitions_hold_sub_env_items(obs_name, act_name):
    """Each transition holds sub-env i's own obs and action, in the single-env structure."""
    obs_space, act_space = ALL_SPACES[obs_name], ALL_SPACES[act_name]
    tracker = EpisodeTracker(3, AutoresetMode.NEXT_STEP, keep_transitions=True, keep_actions=False)
    obs_items, obs = _samples(obs_space, 3)
    act_items, actions = _samples(act_space, 3)
    tracker.observe(obs, actions, np.array([1.0, 2.0, 3.0]), np.array([False, True, False]), np.zeros(3, dtype=bool))
    for i in range(3):
        ((o, a, r, term, trunc),) = tracker.transitions[i]
        assert_same(o, obs_items[i])
        assert_same(a, act_items[i])
        assert (r, term, trunc) == (i + 1.0, i == 1, False)


def test_tracker_transitions_with_given_spaces():
    """With the spaces given, transitions hold each sub-env's own obs and action."""
    obs_space, act_space = ALL_SPACES["tuple_of_text"], ALL_SPACES["dict"]
    tracker = EpisodeTracker(
        2, AutoresetMode.SAME_STEP, keep_transitions=True, observation_space=obs_space, action_space=act_space
    )
    obs_items, obs = _samples(obs_space, 2)
    act_items, actions = _samples(act_space, 2)
    tracker.observe(obs, actions, np.array([1.0, 2.0]), np.array([True, False]), np.array([False, False]))
    tracker.add_logs([{"x": np.array([1])}, None])
    record = tracker.finish(0, global_step=2)
    ((o, a, r, term, trunc),) = record["transitions"]
    assert_same(o, obs_items[0])
    assert_same(a, act_items[0])
    assert (r, term, trunc) == (1.0, True, False)
    assert_same(record["actions"], stack(act_space, [act_items[0]]))
    assert record["agent_logs"]["x"].tolist() == [1]
