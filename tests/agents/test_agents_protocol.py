"""Every reference agent against the agent protocol, on the Corridor env."""

from __future__ import annotations

import dataclasses
import inspect
import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from online_trainer.agents import AGENTS, DQNAgent, PPOAgent, QLearningAgent, RandomAgent, SACAgent
from online_trainer.loop.protocol import OPTIONAL_METHODS, missing_methods

# Small settings so that a few dozen steps already exercise learning.
FAST_HP = {
    RandomAgent: {},
    QLearningAgent: {"lr": 0.5},
    DQNAgent: {
        "learning_starts": 8,
        "batch_size": 8,
        "train_freq": 2,
        "target_update_interval": 10,
        "exploration_steps": 50,
        "hidden_sizes": (16,),
        "buffer_size": 200,
        "save_buffer": True,
    },
    PPOAgent: {"n_steps": 8, "minibatch_size": 8, "n_epochs": 2, "hidden_sizes": (16,)},
}
# A hyperparameter each agent has, and a new valid value for it.
HP_CHANGE = {QLearningAgent: ("gamma", 0.5), DQNAgent: ("gamma", 0.5), PPOAgent: ("gamma", 0.5)}
ALL = list(FAST_HP)
LEARNING = [QLearningAgent, DQNAgent, PPOAgent]


def build(cls, env, seed=0, **hp):
    agent = cls(env, **{**FAST_HP[cls], **hp})
    agent.reset(seed)
    agent.set_num_env(env.num_envs)
    agent.train()
    return agent


def actions_of(agent, env, n_steps=20, seed=5):
    """Actions taken (and learning done) over ``n_steps`` NEXT_STEP-aware steps."""
    obs, _ = env.reset(seed=seed)
    done = np.zeros(env.num_envs, dtype=bool)
    taken = []
    for _ in range(n_steps):
        action = agent.act(obs)
        taken.append(np.array(action, copy=True))
        obs, reward, terminated, truncated, _ = env.step(action)
        agent.update(obs, reward, terminated, truncated, valid=~done)
        done = terminated | truncated
    return np.stack(taken)


@pytest.mark.parametrize("cls", ALL)
def test_has_every_protocol_method_and_takes_valid(cls, corridor):
    agent = build(cls, corridor())
    assert missing_methods(agent) == []
    assert all(callable(getattr(agent, name)) for name in OPTIONAL_METHODS)
    assert "valid" in inspect.signature(agent.update).parameters


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("num_envs", [1, 3])
def test_act_returns_one_action_per_sub_env_in_the_action_space(cls, num_envs, corridor):
    env = corridor(num_envs)
    agent = build(cls, env)
    obs, _ = env.reset(seed=0)
    for mode in ("train", "eval"):
        getattr(agent, mode)()
        actions = agent.act(obs)
        assert actions.shape == (num_envs,)
        assert np.issubdtype(actions.dtype, np.integer)
        assert env.action_space.contains(actions)


def test_agent_factory_lambda_builds_from_a_vector_env(corridor):
    factory = lambda env: DQNAgent(env, lr=1e-3)  # noqa: E731
    agent = factory(corridor(2))
    assert agent.config.lr == 1e-3
    assert agent.num_envs == 2
    assert agent.device == torch.device("cpu")


def test_registry_names_the_five_agents():
    assert AGENTS == {
        "random": RandomAgent,
        "q_learning": QLearningAgent,
        "dqn": DQNAgent,
        "ppo": PPOAgent,
        "sac": SACAgent,
    }


@pytest.mark.parametrize("cls", ALL)
def test_same_seed_same_actions_and_parameters(cls, corridor, params):
    runs = []
    for seed in (7, 7, 8):
        env = corridor(2)
        agent = build(cls, env, seed=seed)
        runs.append((actions_of(agent, env, n_steps=60), params(agent) if cls is not RandomAgent else []))
    (a1, p1), (a2, p2), (a3, p3) = runs
    np.testing.assert_array_equal(a1, a2)
    for x, y in zip(p1, p2):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a1, a3) or any(not np.array_equal(x, y) for x, y in zip(p1, p3))


@pytest.mark.parametrize("cls", ALL)
def test_reset_reinitialises_and_reseeds(cls, corridor):
    env = corridor(2)
    agent = build(cls, env, seed=3)
    first = actions_of(agent, env)
    agent.reset(3)
    np.testing.assert_array_equal(actions_of(agent, env), first)


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("via", ["state", "path"])
def test_save_load_round_trip_gives_identical_future(cls, via, corridor, tmp_path, params):
    env = corridor(2)
    agent = build(cls, env, seed=1)
    actions_of(agent, env, n_steps=37)  # mid-way through rollouts and schedules
    saved = agent.save() if via == "state" else agent.save(str(tmp_path / "ckpt"))
    expected = actions_of(agent, env, n_steps=40, seed=9)
    expected_params = params(agent) if cls is not RandomAgent else []

    other = build(cls, env, seed=99)
    other.load(saved if via == "state" else str(tmp_path / "ckpt"))
    np.testing.assert_array_equal(actions_of(other, env, n_steps=40, seed=9), expected)
    for x, y in zip(params(other) if cls is not RandomAgent else [], expected_params):
        np.testing.assert_array_equal(x, y)
    assert other.steps == agent.steps


@pytest.mark.parametrize("cls", ALL)
def test_saved_state_is_a_deep_copy(cls, corridor, params):
    env = corridor(2)
    agent = build(cls, env)
    state = agent.save()
    before = actions_of(agent, env, n_steps=30)
    agent.load(state)
    np.testing.assert_array_equal(actions_of(agent, env, n_steps=30), before)


@pytest.mark.parametrize("cls", ALL)
def test_checkpoint_files_start_with_the_path_and_load_weights_only(cls, corridor, tmp_path):
    agent = build(cls, corridor())
    written = agent.save(str(tmp_path / "Run0_Last"))
    assert written == str(tmp_path / "Run0_Last.pt")
    assert [p.name for p in tmp_path.iterdir()] == ["Run0_Last.pt"]
    torch.load(written, weights_only=True)


@pytest.mark.parametrize("cls", ALL)
def test_load_of_a_missing_path_names_it(cls, corridor, tmp_path):
    agent = build(cls, corridor())
    with pytest.raises(FileNotFoundError, match="nothing_here"):
        agent.load(str(tmp_path / "nothing_here"))


def test_load_refuses_another_agents_state(corridor):
    env = corridor()
    with pytest.raises(ValueError, match="agent='QLearningAgent'"):
        build(DQNAgent, env).load(build(QLearningAgent, env).save())


@pytest.mark.parametrize("cls", LEARNING)
def test_set_hp_changes_the_value(cls, corridor):
    agent = build(cls, corridor())
    name, value = HP_CHANGE[cls]
    agent.set_hp({name: value})
    assert getattr(agent.config, name) == value


@pytest.mark.parametrize("cls", ALL)
def test_set_hp_unknown_key_names_it_and_lists_the_valid_ones(cls, corridor):
    agent = build(cls, corridor())
    valid = ", ".join(field.name for field in dataclasses.fields(cls.Config)) or "none"
    with pytest.raises(
        ValueError,
        match=rf"^{cls.__name__} hyperparameters: unknown key 'learning_rate'.*; valid "
        rf"keys: {re.escape(valid)}\.$",
    ):
        agent.set_hp({"learning_rate": 0.1})
    with pytest.raises(ValueError, match=f"^{cls.__name__} hyperparameters: unknown key 'bogus'; valid keys: "):
        cls(corridor(), bogus=1)


@pytest.mark.parametrize(
    ("cls", "theirs", "ours"),
    [
        (PPOAgent, "learning_rate", "lr"),
        (PPOAgent, "clip_range", "clip_coef"),
        (PPOAgent, "batch_size", "minibatch_size"),
        (DQNAgent, "exploration_final_eps", "epsilon_end"),
        (DQNAgent, "net_arch", "hidden_sizes"),
        (SACAgent, "learning_rate", "lr"),
    ],
)
def test_another_librarys_name_of_a_hyperparameter_is_answered_with_ours(cls, theirs, ours, corridor):
    """A19: set_hp({"learning_rate": ...}) listed the valid keys without naming lr (agents.md maps SB3's names)."""
    env = gym.make_vec("Pendulum-v1", num_envs=1) if cls is SACAgent else corridor()
    with pytest.raises(ValueError) as refused:
        cls(env, **{theirs: 1})  # set_hp builds the hyperparameters the same way
    assert f"unknown key {theirs!r} (did you mean {ours!r}? {theirs!r} is another library's name for it)" in str(
        refused.value
    )
    assert all(name in {f.name for f in dataclasses.fields(cls.Config)} for name in cls.Config.KNOWN_AS.values())


@pytest.mark.parametrize("cls", LEARNING)
def test_set_hp_rejects_bad_values(cls, corridor):
    agent = build(cls, corridor())
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\] but got gamma=1.5"):
        agent.set_hp({"gamma": 1.5})
    assert agent.config.gamma != 1.5


@pytest.mark.parametrize("cls", LEARNING)
def test_set_hp_is_saved_with_the_state(cls, corridor):
    env = corridor()
    agent = build(cls, env)
    agent.set_hp({"gamma": 0.5})
    other = build(cls, env)
    other.load(agent.save())
    assert other.config.gamma == 0.5


@pytest.mark.parametrize("cls", LEARNING)
def test_update_without_act_is_an_error(cls, corridor):
    env = corridor()
    agent = build(cls, env)
    obs, _ = env.reset(seed=0)
    with pytest.raises(RuntimeError, match="without a preceding act"):
        agent.update(obs, np.zeros(1), np.zeros(1, bool), np.zeros(1, bool))


@pytest.mark.parametrize("cls", LEARNING)
def test_eval_mode_ignores_update_and_is_greedy(cls, corridor, params):
    env = corridor(3)
    agent = build(cls, env)
    actions_of(agent, env, n_steps=30)
    agent.eval()
    before = params(agent)
    steps = agent.steps
    obs, _ = env.reset(seed=0)
    first = agent.act(obs)
    agent.update(obs, np.ones(3), np.zeros(3, bool), np.zeros(3, bool))
    for x, y in zip(params(agent), before):
        np.testing.assert_array_equal(x, y)
    assert agent.steps == steps
    np.testing.assert_array_equal(agent.act(obs), first)


@pytest.mark.parametrize("cls", ALL)
def test_set_num_env_changes_the_batch_size(cls, corridor):
    agent = build(cls, corridor(1))
    env = corridor(4)
    agent.set_num_env(4)
    actions = actions_of(agent, env, n_steps=20)
    assert actions.shape == (20, 4)
    with pytest.raises(ValueError, match="num_envs must be a positive int but got num_envs=0"):
        agent.set_num_env(0)


@pytest.mark.parametrize("cls", LEARNING)
def test_valid_none_counts_every_entry_as_real(cls, corridor):
    env = corridor(3)
    agent = build(cls, env)
    obs, _ = env.reset(seed=0)
    obs2, reward, terminated, truncated, _ = env.step(agent.act(obs))
    agent.update(obs2, reward, terminated, truncated)
    assert agent.steps == 3


@pytest.mark.parametrize("cls", LEARNING)
def test_reset_steps_are_not_counted(cls, corridor):
    env = corridor(3)
    agent = build(cls, env)
    obs, _ = env.reset(seed=0)
    agent.act(obs)
    agent.update(obs, np.full(3, 99.0), np.zeros(3, bool), np.zeros(3, bool), valid=np.array([True, False, False]))
    assert agent.steps == 1


@pytest.mark.parametrize("cls", LEARNING)
def test_log_returns_none_by_default_and_per_sub_env_entries_on_request(cls, corridor):
    env = corridor(3)
    agent = build(cls, env)
    actions_of(agent, env, n_steps=5)
    assert agent.log() is None
    agent.set_hp({"log_step_values": True})
    obs, _ = env.reset(seed=0)
    obs2, reward, terminated, truncated, _ = env.step(agent.act(obs))
    agent.update(obs2, reward, terminated, truncated, valid=np.array([True, False, True]))
    entries = agent.log()
    assert len(entries) == 3 and entries[1] is None
    assert all(isinstance(v, np.ndarray) and v.shape == (1,) for v in entries[0].values())


def test_agents_do_not_touch_global_random_state(corridor):
    torch.manual_seed(0)
    np.random.seed(0)
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()
    for cls in ALL:
        env = corridor(2)
        actions_of(build(cls, env), env, n_steps=30)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.random.get_state()[1].tolist() == numpy_state[1].tolist()


def test_unsupported_spaces_are_rejected_naming_the_space():
    pendulum = gym.make_vec("Pendulum-v1", num_envs=1, vectorization_mode="sync")
    for cls in (QLearningAgent, DQNAgent):
        with pytest.raises(ValueError, match=r"needs a Discrete \w+ space but got \w+_space=Box"):
            cls(pendulum)
    pendulum.close()
    blackjack = gym.make_vec("Blackjack-v1", num_envs=1, vectorization_mode="sync")
    for cls in (DQNAgent, PPOAgent):
        with pytest.raises(ValueError, match="observation_space=Tuple"):
            cls(blackjack)
    blackjack.close()
