"""make_env(wrappers=..., vector_kwargs=...): entries by class, import path or mapping; errors before any env is built."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from gymnasium.vector import AsyncVectorEnv
from gymnasium.wrappers import ClipReward, RecordEpisodeStatistics

from online_trainer.envs import CORRIDOR_ID, make_env

RIGHT = np.ones(2, dtype=np.int64)


def _first_rewards(factory):
    env = factory()
    try:
        env.reset(seed=0)
        return env.step(RIGHT)[1].tolist()
    finally:
        env.close()


def _chain(env):
    """The wrapper classes of sub-env 0, outermost first."""
    names, inner = [], env.envs[0]
    while hasattr(inner, "env"):
        names.append(type(inner).__name__)
        inner = inner.env
    return names


@pytest.mark.parametrize(
    "entry",
    [
        {"gymnasium.wrappers:ClipReward": {"min_reward": -0.25, "max_reward": 1}},
        {ClipReward: {"min_reward": -0.25, "max_reward": 1}},
        (ClipReward, {"min_reward": -0.25, "max_reward": 1}),
    ],
)
def test_an_entry_with_kwargs_by_path_mapping_or_class_wraps_every_sub_env(entry):
    assert _first_rewards(make_env(CORRIDOR_ID, num_envs=2, wrappers=[entry])) == [-0.25, -0.25]


@pytest.mark.parametrize(
    "entry",
    [
        "gymnasium.wrappers:RecordEpisodeStatistics",
        "gymnasium.wrappers.RecordEpisodeStatistics",
        RecordEpisodeStatistics,
        {"gymnasium.wrappers:RecordEpisodeStatistics": None},
    ],
)
def test_an_entry_without_kwargs_by_path_or_class(entry):
    env = make_env(CORRIDOR_ID, num_envs=2, wrappers=[entry])()
    assert [type(sub) for sub in env.envs] == [RecordEpisodeStatistics] * 2
    env.close()


def test_wrappers_apply_in_order_first_innermost_and_the_factory_pickles():
    factory = make_env(
        CORRIDOR_ID,
        num_envs=2,
        wrappers=[
            "gymnasium.wrappers:RecordEpisodeStatistics",
            {"gymnasium.wrappers:ClipReward": {"min_reward": -0.5, "max_reward": 0.5}},
        ],
    )
    clone = pickle.loads(pickle.dumps(factory))
    env = clone()
    assert _chain(env)[:2] == ["ClipReward", "RecordEpisodeStatistics"]
    env.close()
    assert _first_rewards(clone) == [-0.5, -0.5]
    assert (
        "wrappers=[gymnasium.wrappers:RecordEpisodeStatistics(env), gymnasium.wrappers:ClipReward(env, "
        "min_reward=-0.5, max_reward=0.5)]" in repr(factory)
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "gymnasium.wrappers:ClipRewards",
            r"wrappers\[0\]='gymnasium.wrappers:ClipRewards': 'gymnasium.wrappers' has no "
            r"attribute 'ClipRewards' \(did you mean 'ClipReward'\?\)",
        ),
        (
            "no_such_package.wrappers:W",
            r"wrappers\[0\]='no_such_package.wrappers:W': cannot import module "
            r"'no_such_package.wrappers' \(No module named 'no_such_package'\); install the package that provides it, "
            r"fix the path, or run from the directory that holds it \(the current one is .*: 'online-trainer run', "
            r"'resume' and 'eval' import the modules of the directory they run in\)\.",  # C17
        ),
        ("ClipReward", r"wrappers\[0\]='ClipReward' is not an import path: write 'package.module:Name'"),
        (
            {"gymnasium.wrappers:ClipReward": {"min_rewad": -1}},
            r"wrappers\[0\]: gymnasium.wrappers:ClipReward cannot be called as .*unexpected keyword argument 'min_rewad'; "
            r"it takes min_reward, max_reward",
        ),
        (
            {"gymnasium.wrappers:ClipReward": {}, "gymnasium.wrappers:RecordEpisodeStatistics": {}},
            r"wrappers\[0\]=.* must be a mapping with one key",
        ),
        ({"gymnasium.wrappers:ClipReward": [1, 2]}, r"keyword arguments of a wrapper must be a mapping"),
        ("gymnasium:__version__", r"wrappers\[0\]='gymnasium:__version__' is not a wrapper"),
    ],
)
def test_bad_wrapper_entries_are_named_before_any_env_is_built(entry, message):
    with pytest.raises(ValueError, match=message):
        make_env(CORRIDOR_ID, wrappers=["gymnasium.wrappers:RecordEpisodeStatistics", entry][1:])


def test_wrappers_must_be_a_list():
    with pytest.raises(
        ValueError,
        match=r"wrappers must be a list of wrapper entries but got "
        r"wrappers='gymnasium.wrappers:ClipReward': write wrappers=\[...\]",
    ):
        make_env(CORRIDOR_ID, wrappers="gymnasium.wrappers:ClipReward")


def test_vector_kwargs_reach_the_async_vector_env_not_the_env():
    pytest.importorskip("minigrid")
    # MiniGrid's Dict observation holds a mission string, which shared memory cannot hold.
    factory = make_env(
        "minigrid:MiniGrid-Empty-5x5-v0",
        num_envs=2,
        vectorization="async",
        vector_kwargs={"shared_memory": False, "context": "spawn"},
    )
    env = pickle.loads(pickle.dumps(factory))()
    try:
        assert isinstance(env, AsyncVectorEnv) and env.shared_memory is False
        obs, _ = env.reset(seed=0)
        assert list(obs["mission"]) == ["get to the green goal square"] * 2
        assert env.step(np.zeros(2, dtype=np.int64))[1].tolist() == [0.0, 0.0]
    finally:
        env.close()


def test_minigrid_image_wrapper_by_path():
    pytest.importorskip("minigrid")
    env = make_env("minigrid:MiniGrid-Empty-5x5-v0", num_envs=2, wrappers=["minigrid.wrappers:ImgObsWrapper"])()
    try:
        assert env.single_observation_space.shape == (7, 7, 3)
        assert env.reset(seed=0)[0].shape == (2, 7, 7, 3)
    finally:
        env.close()


@pytest.mark.parametrize(
    ("vectorization", "kwargs", "message"),
    [
        (
            "sync",
            {"shared_memory": False},
            r"vector_kwargs=\{'shared_memory': False\}: SyncVectorEnv "
            r"\(vectorization='sync'\) takes no argument 'shared_memory' \(it is an "
            r"AsyncVectorEnv option: add vectorization='async'\); it takes copy",
        ),
        (
            "async",
            {"length": 3},
            r"AsyncVectorEnv \(vectorization='async'\) takes no argument 'length'.*Keyword "
            r"arguments of the env itself go to make_env\(..., \*\*env_kwargs\)",
        ),
        ("sync", {"autoreset_mode": "same_step"}, r"pass autoreset_mode=... to make_env itself"),
        ("sync", ["copy"], r"vector_kwargs must be a mapping with string keys but got vector_kwargs=\['copy'\]"),
    ],
)
def test_bad_vector_kwargs_are_named(vectorization, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_env(CORRIDOR_ID, vectorization=vectorization, vector_kwargs=kwargs)


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("ALE/Pong-v5", r"try 'ale_py:ALE/Pong-v5' \(pip install ale-py if it is missing\)"),
        ("MiniGrid-Empty-5x5-v1", r"try 'minigrid:MiniGrid-Empty-5x5-v1'"),
        ("Acme/Robot-v0", r"write '<module>:Acme/Robot-v0'"),
    ],
)
def test_unknown_namespaced_id_suggests_the_module_prefix(env_id, message, monkeypatch):
    import gymnasium

    # as in a fresh process, whatever earlier tests here imported (ale_py and minigrid register their ids on import)
    family = env_id.split("/")[0] + "/" if "/" in env_id else env_id.split("-")[0] + "-"
    for registered in [key for key in gymnasium.registry if key.startswith(family)]:
        monkeypatch.delitem(gymnasium.registry, registered)
    with pytest.raises(ValueError, match=message):
        make_env(env_id)


def test_record_episode_statistics_sees_the_unclipped_rewards_when_inside():
    env = make_env(
        CORRIDOR_ID,
        num_envs=2,
        length=3,
        wrappers=[RecordEpisodeStatistics, {ClipReward: {"min_reward": -0.5, "max_reward": 0.5}}],
    )()
    env.reset(seed=0)
    env.step(RIGHT)
    _, reward, terminated, _, info = env.step(RIGHT)
    assert terminated.all() and reward.tolist() == [-0.5, -0.5]
    assert info["episode"]["r"].tolist() == [-2.0, -2.0]
    env.close()
