"""Evaluations play with the training env's NormalizeObservation statistics, frozen; checkpoints keep them."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import NormalizeObservation, NormalizeReward
from gymnasium.wrappers.utils import RunningMeanStd
from gymnasium.wrappers.vector import NormalizeObservation as VectorNormalizeObservation
from gymnasium.wrappers.vector import NormalizeReward as VectorNormalizeReward

from online_trainer import EvaluationOptions, ExecutionOptions, OnlineTrainer
from online_trainer.loop.normalization import (
    evaluation_statistics,
    observation_statistics,
    read_statistics,
    restore_running_state,
    running_state,
    statistics_bytes,
    statistics_path,
)


def _sub_env_wrappers(num_envs: int = 2, mode: str = "sync"):
    return gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode=mode, wrappers=[NormalizeObservation])


def _vector_wrapper(num_envs: int = 2):
    return VectorNormalizeObservation(gym.make_vec("CartPole-v1", num_envs=num_envs))


ENVS = {
    "sync sub-env wrappers": _sub_env_wrappers,
    "async sub-env wrappers": lambda: _sub_env_wrappers(mode="async"),
    "vector wrapper": _vector_wrapper,
}


def _step(env, steps: int, seed: int = 0) -> None:
    """Step ``env`` with actions of a fixed stream."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    for _ in range(steps):
        env.step(rng.integers(2, size=env.num_envs))


def test_the_sub_envs_statistics_are_merged_into_one_estimate_of_every_observation_they_saw():
    env = _sub_env_wrappers(3)
    _step(env, 50)
    subs = [sub.obs_rms for sub in env.unwrapped.envs]
    merged = observation_statistics(env)
    assert merged is not None and merged not in subs  # a copy
    assert merged.count == pytest.approx(sum(s.count for s in subs))
    weights = np.array([s.count for s in subs]) / sum(s.count for s in subs)
    mean = sum(w * s.mean for w, s in zip(weights, subs))
    np.testing.assert_allclose(merged.mean, mean, rtol=1e-6)
    # the law of total variance: the within-sub-env variances and the spread of their means
    var = sum(w * (s.var + (s.mean - mean) ** 2) for w, s in zip(weights, subs))
    np.testing.assert_allclose(merged.var, var, rtol=1e-6)
    one = _vector_wrapper()
    _step(one, 20)
    exact = observation_statistics(one)
    assert (
        exact is not one.obs_rms and np.array_equal(exact.mean, one.obs_rms.mean) and exact.count == one.obs_rms.count
    )
    assert observation_statistics(gym.make_vec("CartPole-v1", num_envs=2)) is None


@pytest.mark.parametrize("name", [n for n in ENVS if "async" not in n])
def test_an_evaluation_standardises_with_the_statistics_given_frozen_and_puts_the_eval_envs_back(name):
    env = ENVS[name]()
    _step(env, 10)
    wrappers = (
        [env] if isinstance(env, VectorNormalizeObservation) else [sub for sub in env.unwrapped.envs]  # the NOs
    )
    own = [(w.obs_rms, w.update_running_mean) for w in wrappers]
    given = RunningMeanStd(shape=(4,))
    given.mean, given.var, given.count = np.array([0.1, 0.2, 0.3, 0.4]), np.array([4.0, 1.0, 0.25, 9.0]), 1234.0
    with evaluation_statistics(env, given):
        obs, *_ = env.step(np.zeros(env.num_envs, dtype=np.int64))
        for wrapper in wrappers:
            assert wrapper.obs_rms is not given and wrapper.obs_rms.count == 1234.0  # frozen: not one update
            assert not wrapper.update_running_mean
        raw = env.unwrapped.envs[0].unwrapped.state if hasattr(env.unwrapped, "envs") else None
        if raw is not None:  # what the sub-env's wrapper made of the raw state
            np.testing.assert_allclose(obs[0], (raw - given.mean) / np.sqrt(given.var + 1e-8), rtol=1e-5)
    assert [(w.obs_rms, w.update_running_mean) for w in wrappers] == own
    assert [w.obs_rms.count for w in wrappers] == [o.count for o, _ in own]  # the eval env's own, untouched


def test_an_async_eval_envs_sub_envs_get_the_statistics_through_set_attr():
    env = _sub_env_wrappers(mode="async")
    try:
        given = RunningMeanStd(shape=(4,))
        given.mean, given.count = np.full(4, 0.5), 777.0
        with evaluation_statistics(env, given):
            assert [s.count for s in env.get_attr("obs_rms")] == [777.0, 777.0]
            _step(env, 5)  # frozen there too: an evaluation's observations did update them (N13)
            assert [s.count for s in env.get_attr("obs_rms")] == [777.0, 777.0]
            assert list(env.get_attr("update_running_mean")) == [False, False]
        assert list(env.get_attr("update_running_mean")) == [True, True]
    finally:
        env.close()
    both = gym.make_vec(
        "CartPole-v1", num_envs=2, vectorization_mode="async", wrappers=[NormalizeObservation, NormalizeReward]
    )
    try:  # NormalizeReward's switch is the one set_attr reaches: left alone, the statistics given all the same
        with evaluation_statistics(both, given):
            assert [s.count for s in both.get_attr("obs_rms")] == [777.0, 777.0]
            assert list(both.get_attr("update_running_mean")) == [True, True]
    finally:
        both.close()


def test_statistics_of_another_shape_are_not_given_and_a_warning_says_why(caplog):
    env = _vector_wrapper()
    given = RunningMeanStd(shape=(17,))
    with caplog.at_level(logging.WARNING), evaluation_statistics(env, given):
        assert env.obs_rms.mean.shape == (4,)
    assert "have the shape (4,), the training env's (17,)" in caplog.text


def test_statistics_files_read_back_as_written_and_a_damaged_one_is_named(tmp_path):
    statistics = RunningMeanStd(shape=(3,))
    statistics.mean, statistics.var, statistics.count = np.array([1.0, 2, 3]), np.array([0.5, 1, 2]), 42.0001
    path = statistics_path(tmp_path / "Run1_S100")
    assert path.name == "Run1_S100_obs_statistics.npz"
    assert statistics_path(tmp_path / "Run1_Best_agent.t").name == "Run1_Best_obs_statistics.npz"
    assert read_statistics(tmp_path / "Run1_S100") is None
    path.write_bytes(statistics_bytes(statistics))
    back = read_statistics(tmp_path / "Run1_S100")
    assert np.array_equal(back.mean, statistics.mean) and np.array_equal(back.var, statistics.var)
    assert back.count == statistics.count
    path.write_bytes(b"not an npz")
    with pytest.raises(ValueError, match=r"Run1_S100_obs_statistics.npz does not read as the observation statistics"):
        read_statistics(tmp_path / "Run1_S100")


class FrozenLinear:
    """Learns nothing; pushes the cart by the sign of a linear function of the (standardised) observation, so what
    an evaluation scores depends on the statistics it standardises with."""

    def __init__(self, env):
        self.w = np.array([1.0, 0.0, 1.0, 0.0])

    def act(self, obs):
        return (np.asarray(obs) @ self.w > 0).astype(np.int64)

    def update(self, *args, **kwargs):
        pass

    def save(self, path=None):
        if path is None:
            return {"w": self.w.copy()}
        np.save(path + ".npy", self.w)

    def load(self, saved):
        self.w = saved["w"] if isinstance(saved, dict) else np.load(saved + ".npy")


@pytest.mark.parametrize("name", list(ENVS))
def test_evaluating_the_last_checkpoint_repeats_the_final_evaluation_on_an_env_with_normalize_observation(
    tmp_path, name
):
    """N13, C13: the eval env's NormalizeObservation kept statistics of its own, carried from one evaluation to the
    next: evaluate("last") of a fresh eval env gave 534.9 where the final evaluation gave 1000.0, and a resumed
    run's evaluations differed from an uninterrupted run's (its eval env was built again)."""
    exp_dir = tmp_path / "exp"
    trainer = OnlineTrainer(ENVS[name], FrozenLinear, exp_dir=exp_dir)
    kw = dict(total_steps=3000, seed_offset=0, checkpoint_freq=1000, execution=ExecutionOptions(progress=False))
    trainer.multi_run(2, evaluation=EvaluationOptions(freq=1000, episodes=4), **kw)
    for run in (1, 2):
        for label in ("S1000", "S2000", "Last", "Best"):
            assert (exp_dir / f"Run{run}_{label}_obs_statistics.npz").is_file()
    final = [run[-1]["mean"] for run in trainer.evaluations]
    table = trainer.evaluate(
        "last", evaluation=EvaluationOptions(episodes=4), execution=ExecutionOptions(progress=False)
    )
    assert table.groupby("run")["ep_return"].mean().tolist() == final
    table = trainer.evaluate(
        "all", evaluation=EvaluationOptions(episodes=4), execution=ExecutionOptions(progress=False)
    )
    for run, evaluations in enumerate(trainer.evaluations, start=1):  # each periodic checkpoint: its evaluation
        means = table[table["run"] == run].groupby("checkpoint", sort=False)["ep_return"].mean()
        assert [means["S1000"], means["S2000"]] == [evaluations[0]["mean"], evaluations[1]["mean"]]


def test_a_resumed_run_evaluates_as_the_uninterrupted_one_on_an_env_with_normalize_observation(tmp_path):
    from tests.online_trainer.run.test_full_checkpoint import Crash

    kw = dict(
        total_steps=3000,
        seed_offset=3,  # a seed whose evaluations the statistics change
        checkpoint_freq=1000,
        evaluation=EvaluationOptions(freq=500, episodes=4),
        execution=ExecutionOptions(progress=False),
    )
    reference = OnlineTrainer(_sub_env_wrappers, FrozenLinear, exp_dir=tmp_path / "ref")
    reference.multi_run(1, **kw)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(_sub_env_wrappers, FrozenLinear, exp_dir=tmp_path / "cut").multi_run(1, hooks=[Crash(1700)], **kw)
    resumed = OnlineTrainer(_sub_env_wrappers, FrozenLinear, exp_dir=tmp_path / "cut")
    resumed.multi_run(1, resume=True, hooks=[Crash(10**9)], **kw)
    assert len(resumed.evaluations[0]) == len(reference.evaluations[0]) == 6
    for got, expected in zip(resumed.evaluations[0], reference.evaluations[0]):
        assert np.array_equal(got["returns"], expected["returns"]) and got["global_step"] == expected["global_step"]
    assert len({e["mean"] for e in reference.evaluations[0]}) > 1  # the statistics changed what it scored


def _both(mode: str):
    """Observation and reward statistics in every place they can be: per sub-env and around the vector env."""
    env = gym.make_vec(
        "CartPole-v1", num_envs=2, vectorization_mode=mode, wrappers=[NormalizeObservation, NormalizeReward]
    )
    return VectorNormalizeReward(VectorNormalizeObservation(env))


def _estimates(env) -> list[tuple[float, list[float]]]:
    """(count, mean) of every running estimate of ``env``, in a fixed order."""
    found = [env.return_rms, env.env.obs_rms]
    base = env.unwrapped
    if hasattr(base, "envs"):
        found += [s for sub in base.envs for s in (sub.return_rms, sub.env.obs_rms)]
    else:
        found += [*base.get_attr("return_rms"), *base.get_attr("obs_rms")]
    return [(float(s.count), np.atleast_1d(s.mean).tolist()) for s in found]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_running_statistics_of_an_env_go_to_the_same_wrappers_of_one_built_again(mode):
    """N13: an env rebuilt on resume (an async one, or one that does not pickle) started its NormalizeObservation and
    NormalizeReward statistics again, so the agent met observations standardised otherwise than it learnt on."""
    env, again = _both(mode), _both(mode)
    try:
        _step(env, 40)
        state = running_state(env)

        def plain(value) -> bool:
            if isinstance(value, dict):
                return all(isinstance(k, str) and plain(v) for k, v in value.items())
            if isinstance(value, list):
                return all(plain(v) for v in value)
            return isinstance(value, (str, int, float, np.ndarray)) and getattr(value, "dtype", None) != np.dtype(
                object
            )

        assert plain(state)  # numbers, strings, arrays: no object of gymnasium's or ours
        assert _estimates(again) != _estimates(env)
        restore_running_state(again, state)
        assert _estimates(again) == _estimates(env)
        assert running_state(gym.make_vec("CartPole-v1", num_envs=2)) is None
    finally:
        env.close()
        again.close()


def test_statistics_of_wrappers_the_env_built_again_lacks_are_named_in_a_warning(caplog):
    env = _both("sync")
    _step(env, 5)
    state = running_state(env)
    other = _vector_wrapper()  # no NormalizeReward, and no wrapper in the sub-envs
    with caplog.at_level(logging.WARNING):
        restore_running_state(other, state)
    assert "built again without normalization wrappers the run's env had (NormalizeReward at position 0 of the " in (
        caplog.text
    )
    assert (  # NormalizeObservation found one position up; CartPole's own vector env has no sub-env to take theirs
        "wrappers the run's env had (NormalizeReward at position 0 of the vector env's wrappers; NormalizeReward, "
        "NormalizeObservation of sub-env 0; NormalizeReward, NormalizeObservation of sub-env 1)" in caplog.text
    )
    async_env, without = _both("async"), gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="async")
    try:
        _step(async_env, 5)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            restore_running_state(without, running_state(async_env))
        assert "NormalizeObservation in the async sub-envs; NormalizeReward in the async sub-envs)" in caplog.text
    finally:
        async_env.close()
        without.close()
    assert other.obs_rms.count == env.env.obs_rms.count  # one position up now: restored all the same (V15)


def test_a_resumed_run_whose_async_env_is_built_again_goes_on_with_its_statistics(tmp_path):
    from tests.online_trainer.run.test_full_checkpoint import Crash

    kw = dict(total_steps=3000, seed_offset=3, checkpoint_freq=1000, execution=ExecutionOptions(progress=False))
    make = lambda: _sub_env_wrappers(mode="async")  # noqa: E731
    OnlineTrainer(make, FrozenLinear, exp_dir=tmp_path / "ref").multi_run(1, **kw)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(make, FrozenLinear, exp_dir=tmp_path / "cut").multi_run(1, hooks=[Crash(1700)], **kw)
    OnlineTrainer(make, FrozenLinear, exp_dir=tmp_path / "cut").multi_run(1, resume=True, hooks=[Crash(10**9)], **kw)
    at_1000 = read_statistics(tmp_path / "cut" / "Run1_S1000").count
    assert read_statistics(tmp_path / "ref" / "Run1_S1000").count == at_1000
    reference, resumed = (read_statistics(tmp_path / name / "Run1_S2000").count for name in ("ref", "cut"))
    # every observation since step 0, not only those since the resume (about reference - at_1000): the steps after
    # the checkpoint differ (the env restarts from a reset, its episodes in flight dropped), by a few
    assert abs(resumed - reference) < 0.02 * reference and resumed > at_1000 + 900


def test_an_eval_env_with_normalize_observation_when_the_training_env_has_none_is_frozen_with_a_warning(caplog):
    """Tester V15: the eval env's own statistics, updated by every evaluation, made a frozen agent's evaluations
    differ (18.167, 15.333, 15.167)."""
    for env in (_sub_env_wrappers(), _sub_env_wrappers(mode="async"), _vector_wrapper()):
        try:
            counts = []
            with caplog.at_level(logging.WARNING):
                for _ in range(2):
                    with evaluation_statistics(env, None):
                        _step(env, 5)
                    counts.append(observation_statistics(env).count)
            assert counts[0] == counts[1]  # nothing the evaluations saw was added
            assert "The eval env has NormalizeObservation but the training env has none" in caplog.text
        finally:
            env.close()
