"""make_env: picklable factories of vector envs, checked when made."""

from __future__ import annotations

import pickle

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import RecordEpisodeStatistics, TimeLimit, TransformReward

from online_trainer.envs import CORRIDOR_ID, VectorEnvFactory, make_env


def test_returns_a_factory_of_sync_vector_envs():
    factory = make_env("CartPole-v1", num_envs=3)
    assert isinstance(factory, VectorEnvFactory)
    env = factory()
    assert isinstance(env, SyncVectorEnv) and env.num_envs == 3
    assert env is not factory()
    env.close()


def test_factory_pickles_and_builds_after_unpickling():
    factory = make_env(CORRIDOR_ID, num_envs=2, wrappers=[(TimeLimit, {"max_episode_steps": 3})], length=7)
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        env = loads(dumps(factory))()
        assert env.single_observation_space == gym.spaces.Discrete(7)
        env.close()


def test_async_vectorization():
    env = make_env(CORRIDOR_ID, num_envs=2, vectorization="async", length=3)()
    try:
        assert isinstance(env, AsyncVectorEnv)
        env.reset(seed=0)
        _, _, terminated, _, _ = env.step(np.ones(2, dtype=np.int64))
        _, _, terminated, _, _ = env.step(np.ones(2, dtype=np.int64))
        assert terminated.all()
    finally:
        env.close()


def test_bad_vectorization_names_the_value_and_the_allowed_ones():
    message = "vectorization must be one of 'sync', 'async' but got vectorization='threads'"
    with pytest.raises(ValueError, match=message):
        make_env("CartPole-v1", vectorization="threads")


@pytest.mark.parametrize("env_id", ["CartPol-v1", "CartPole-v99", "no_such_module:Thing-v0"])
def test_unknown_env_id_fails_at_make_env_time(env_id):
    with pytest.raises(ValueError, match=f"Unknown env id env_id='{env_id}'"):
        make_env(env_id)


def test_module_prefixed_id_is_accepted():
    env = make_env(f"envs:{CORRIDOR_ID}")()
    assert env.single_action_space == gym.spaces.Discrete(2)
    env.close()


@pytest.mark.parametrize("num_envs", [0, -1, 1.5, True])
def test_bad_num_envs_is_named(num_envs):
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        make_env("CartPole-v1", num_envs=num_envs)


def test_wrappers_as_classes_and_class_kwargs_pairs_apply_to_each_sub_env():
    factory = make_env(
        CORRIDOR_ID, num_envs=2, length=4, wrappers=[(TransformReward, {"func": np.negative}), RecordEpisodeStatistics]
    )
    env = factory()
    env.reset(seed=0)
    _, reward, *_ = env.step(np.ones(2, dtype=np.int64))
    assert reward.tolist() == [1.0, 1.0]
    env.close()
    with pytest.raises(ValueError, match=r"wrappers\[0\]=42 is not a wrapper: give a wrapper class, an import path"):
        make_env(CORRIDOR_ID, wrappers=[42])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (None, AutoresetMode.NEXT_STEP),
        ("same_step", AutoresetMode.SAME_STEP),
        ("Disabled", AutoresetMode.DISABLED),
        (AutoresetMode.SAME_STEP, AutoresetMode.SAME_STEP),
    ],
)
def test_autoreset_mode(mode, expected):
    env = make_env(CORRIDOR_ID, autoreset_mode=mode)()
    assert env.metadata["autoreset_mode"] is expected
    env.close()


def test_bad_autoreset_mode_is_named():
    with pytest.raises(
        ValueError,
        match="autoreset_mode must be None, an AutoresetMode or one of .* but got autoreset_mode='sometimes'",
    ):
        make_env(CORRIDOR_ID, autoreset_mode="sometimes")


def test_render_mode_and_env_kwargs_reach_the_sub_envs():
    env = make_env(CORRIDOR_ID, num_envs=2, render_mode="ansi", length=3)()
    env.reset(seed=0)
    assert env.render() == ("A.G", "A.G")
    env.close()


def test_a_render_mode_the_env_class_lacks_is_refused_before_any_env_is_built():
    with pytest.raises(
        ValueError,
        match=r"render_mode='rgbarray' is not a render mode of CartPole-v1, which supports "
        r"\['human', 'rgb_array'\]: pass one of them, or None\.",
    ):
        make_env("CartPole-v1", render_mode="rgbarray")
    with pytest.raises(ValueError, match=r"render_mode='human' is not a render mode of .*Corridor-v0"):
        make_env(CORRIDOR_ID, length=3, render_mode="human")  # as an env kwarg too: make_env(..., **env_kwargs)
    with pytest.raises(ValueError, match=r"render_mode='human' is not a render mode of .*Corridor-v0"):
        make_env(CORRIDOR_ID, **{"render_mode": "human"})
    # what gymnasium.make derives from the declared modes is accepted: RenderCollection, HumanRendering
    env = make_env("CartPole-v1", render_mode="rgb_array_list")()
    assert env.render_mode == "rgb_array_list"
    env.close()
    make_env(CORRIDOR_ID, render_mode="ansi_list")
    make_env("CartPole-v1", render_mode="human")


def test_repr_shows_the_id_and_num_envs():
    text = repr(make_env("CartPole-v1", num_envs=4, autoreset_mode="same_step"))
    assert "'CartPole-v1'" in text and "num_envs=4" in text and "SAME_STEP" in text
