"""Bad input is refused before any env step and before exp_dir is touched, with a clear message."""

from __future__ import annotations

import functools
import json
import os
import re
import time

import gymnasium as gym
import numpy as np
import pytest

from online_trainer import ExecutionOptions, OnlineTrainer, RecordOptions
from online_trainer.hooks import Hook
from tests.conftest import RecordingAgent, make_counting_vec


class CountingFactory:
    """An env factory that counts the envs it builds and the steps they take."""

    def __init__(self):
        self.steps = 0
        self.built = 0

    def __call__(self):
        self.built += 1
        env = make_counting_vec(1)()
        original = env.step

        def step(actions):
            self.steps += 1
            return original(actions)

        env.step = step
        return env


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"num_episodes": 5, "total_steps": 10},
            r"exactly one of num_episodes and total_steps.*num_episodes=5, total_steps=10",
        ),
        ({}, r"num_episodes=None, total_steps=None"),
        ({"num_episodes": 0}, r"num_episodes=0, total_steps=None"),
        ({"total_steps": 2.5}, r"total_steps=2.5"),
        ({"num_episodes": True}, r"num_episodes=True"),
        ({"num_episodes": 3, "num_workers": 0}, r"num_workers must be a positive int, but got num_workers=0"),
        ({"num_episodes": 3, "seed_offset": -1}, r"seed_offset=-1"),
        ({"num_episodes": 3, "checkpoint_freq": 0}, r"checkpoint_freq=0"),
        ({"num_episodes": 3, "tuning_hp": ["lr"]}, r"tuning_hp=\['lr'\]"),
    ],
)
def test_bad_budget_and_options(tmp_path, kwargs, message):
    factory = CountingFactory()
    exp = tmp_path / "exp"
    with pytest.raises(ValueError, match=message):
        OnlineTrainer(factory, RecordingAgent, exp_dir=exp).multi_run(2, **kwargs)
    assert factory.steps == 0 and not exp.exists()


def test_a_seed_offset_whose_runs_seeds_pass_2_to_the_31_is_refused_before_any_run(tmp_path):
    """T19: seed_offset=2**32-5000 ran run 1, then run 2 failed on its seed 4294972296 in np.random.seed, with a note
    to resume that could not help; run seeds (and their sub-envs') stay below 2**31 (evaluations add 2**31)."""
    factory = CountingFactory()
    exp = tmp_path / "exp"
    highest = 2**31 - 3 * 10_000
    with pytest.raises(ValueError) as caught:
        OnlineTrainer(factory, RecordingAgent, exp_dir=exp).multi_run(3, num_episodes=1, seed_offset=highest + 1)
    assert str(caught.value) == (
        f"seed_offset={highest + 1} with num_runs=3 gives run 3 the seed {highest + 20_001}, and its sub-envs the "
        f"seeds up to {highest + 30_000} (seed + j, j below 10000), but training seeds must stay below 2**31 = "
        "2147483648: evaluations add 2**31 to them, and np.random.seed takes no seed of 2**32 or more. Use a "
        "seed_offset of at most 2147453648 (2**31 - 10000 * num_runs)."
    )
    assert factory.steps == 0 and not exp.exists()
    with pytest.raises(ValueError, match=r"seed_offset=4294967296 with num_runs=2 gives run 2 the seed 4294977296"):
        OnlineTrainer(factory, RecordingAgent, exp_dir=exp).sweep([{}], num_runs=2, num_episodes=1, seed_offset=2**32)
    assert factory.steps == 0 and not exp.exists()
    records = OnlineTrainer(factory, RecordingAgent, exp_dir=exp).multi_run(3, num_episodes=1, seed_offset=highest)
    assert [run[0]["agent_seed"] for run in records] == [highest, highest + 10_000, highest + 20_000]
    # V19: a sweep called again without seed_offset ran its recorded base with more seeds, past 2**31
    sweep = OnlineTrainer(factory, RecordingAgent, exp_dir=tmp_path / "sweep")
    sweep.sweep([{}], num_runs=2, num_episodes=1, seed_offset=2**31 - 20_000, progress=False)
    before = (tmp_path / "sweep" / "default" / "manifest.json").read_bytes()
    with pytest.raises(
        ValueError,
        match=r"runs from base seed 2147463648 \(recorded in sweep.json\), with which "
        r"num_runs=5 would give run 5 the seed 2147503648.*at most num_runs=2",
    ):
        sweep.sweep([{}], num_runs=5, num_episodes=1, progress=False)
    # V20: with its own seed_offset given, it was told to use a smaller one, which the sweep then refused as not its own
    with pytest.raises(ValueError, match=r"runs from base seed 2147463648 .*This sweep takes at most num_runs=2"):
        sweep.sweep([{}], num_runs=3, num_episodes=1, seed_offset=2**31 - 20_000, progress=False)
    assert (tmp_path / "sweep" / "default" / "manifest.json").read_bytes() == before


def test_a_drawn_base_seed_leaves_room_for_every_run():
    from online_trainer.loop import seeding

    draws = [seeding.draw_base_seed(5_000) for _ in range(200)]
    assert max(draws) + 5_000 * seeding.SEED_STRIDE <= seeding.SEED_LIMIT


@pytest.mark.parametrize("num_runs", [0, -2, 1.5, None])
def test_non_positive_num_runs(num_runs):
    with pytest.raises(ValueError, match=rf"num_runs must be a positive int, but got num_runs={num_runs}"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(num_runs, num_episodes=1)


@pytest.mark.parametrize(
    ("kwargs", "wrong_type"),
    [
        ({"num_runs": "3"}, True),
        ({"num_runs": 0}, False),
        ({"num_episodes": "5"}, True),
        ({"num_episodes": -1}, False),
        ({"seed_offset": "1"}, True),
        ({"seed_offset": -1}, False),
        ({"resume": "yes"}, True),
        ({"tuning_hp": ["lr", 0.1]}, True),
        ({"num_workers": 2.0}, True),
    ],
)
def test_a_value_of_the_wrong_type_is_a_type_error_and_still_a_value_error(kwargs, wrong_type):
    """A carry-over of several testers: num_runs="3" raised a ValueError, where Python raises a TypeError. A wrong type
    raises ValueTypeError, both; a value out of its range stays a plain ValueError."""
    from online_trainer.errors import ValueTypeError

    call = {"num_runs": 1, "num_episodes": 2, **kwargs}
    with pytest.raises(ValueError) as caught:
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(**call)
    assert isinstance(caught.value, TypeError) is wrong_type
    assert isinstance(caught.value, ValueTypeError) is wrong_type


@pytest.mark.parametrize("option", [{"dump_metrics": True}, {"checkpoint_freq": 5}])
def test_disk_options_without_exp_dir(option):
    factory = CountingFactory()
    name, value = next(iter(option.items()))
    with pytest.raises(ValueError, match=rf"{name}={value} writes into the experiment directory, but exp_dir is None"):
        OnlineTrainer(factory, RecordingAgent).multi_run(1, num_episodes=1, **option)
    assert factory.steps == 0


def test_missing_config_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"config='.*nope.py' does not exist"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp", config=tmp_path / "nope.py")
    assert not (tmp_path / "exp").exists()


def test_a_config_that_is_not_python_and_an_exp_dir_that_is_not_a_path_are_refused_naming_them(tmp_path):
    """M22: a YAML config became exp_dir/config.py without a word; exp_dir=123 raised pathlib's TypeError."""
    (tmp_path / "c.yaml").write_text("lr: 0.1\n")
    with pytest.raises(ValueError, match=r"config='.*c.yaml' is not a .py file: config= copies a Python config file"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp", config=tmp_path / "c.yaml")
    with pytest.raises(TypeError, match=r"exp_dir must be a path \(a str or a pathlib.Path\), but got exp_dir=123: "):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=123)
    assert not (tmp_path / "exp").exists()


def test_agent_missing_methods_listed(tmp_path):
    class NoUpdate:
        def act(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

    factory = CountingFactory()
    with pytest.raises(TypeError, match=r"lacks the required method\(s\) update"):
        OnlineTrainer(factory, lambda env: NoUpdate(), exp_dir=tmp_path / "exp").multi_run(1, num_episodes=1)
    with pytest.raises(TypeError, match=r"which lacks: act, update"):
        OnlineTrainer(factory, object())
    assert factory.steps == 0 and not (tmp_path / "exp").exists()


class NoCallBack:
    def act(self, obs):
        return np.zeros(len(obs), dtype=np.int64)

    def update(self, obs, reward):
        pass


class ActWithoutObs(NoCallBack):
    def act(self):
        return np.zeros(1, dtype=np.int64)

    def update(self, next_obs, reward, terminated, truncated, call_back=None):
        pass


@pytest.mark.parametrize(
    "agent, message",
    [
        (
            NoCallBack,
            r"The agent NoCallBack .*has update\(obs, reward\), which the loop cannot call \(too many positional "
            r"arguments\): define it as update\(self, next_obs, reward, terminated, truncated, call_back=None\)",
        ),
        (
            ActWithoutObs,
            r"The agent ActWithoutObs .*has act\(\), which the loop cannot call .*define it as act\(self, obs\)",
        ),
    ],
)
def test_an_agent_method_the_loop_cannot_call_is_refused_before_the_first_step_leaving_nothing(
    tmp_path, agent, message
):
    factory = CountingFactory()
    with pytest.raises(TypeError, match=message):
        OnlineTrainer(factory, lambda env: agent(), exp_dir=tmp_path / "exp").multi_run(
            2, num_episodes=1, progress=False
        )
    assert factory.steps == 0 and not (tmp_path / "exp").exists()  # the corrected call finds nothing in its way


def test_an_update_taking_what_the_loop_passes_in_another_form_is_accepted():
    class Flexible(NoCallBack):
        def update(self, *transition, **extras):
            self.seen = (len(transition), sorted(extras))

    (run,) = OnlineTrainer(make_counting_vec(1), lambda env: Flexible()).multi_run(1, num_episodes=1, progress=False)
    assert len(run) == 1


def test_env_factory_returning_something_else(tmp_path):
    def bad_env():
        return "CartPole-v1"

    with pytest.raises(TypeError, match=r"env factory .*bad_env returned 'CartPole-v1' of type str, which is neither"):
        OnlineTrainer(bad_env, RecordingAgent, exp_dir=tmp_path / "exp").multi_run(1, num_episodes=1)
    assert not (tmp_path / "exp").exists()
    with pytest.raises(
        TypeError,
        match=r"env must be a gymnasium Env, a VectorEnv, a zero-argument factory of one "
        r"or a registered env id, but got env=42 of type int",
    ):
        OnlineTrainer(42, RecordingAgent)


def test_an_unknown_env_id_is_refused_at_once_naming_it(tmp_path):
    with pytest.raises(
        ValueError,
        match=r"env='Pendulm-v1' is not a registered gymnasium env id \(.*Did you mean: "
        r"`Pendulum`\?\): pass a registered id such as 'CartPole-v1'",
    ):
        OnlineTrainer("Pendulm-v1", RecordingAgent, exp_dir=tmp_path / "exp")
    assert not (tmp_path / "exp").exists()


def test_unknown_hyperparameter_is_raised_before_the_first_step(tmp_path):
    factory = CountingFactory()
    with pytest.raises(ValueError, match=r"unknown hyperparameters \['momentum'\]"):
        OnlineTrainer(factory, RecordingAgent, exp_dir=tmp_path / "exp").multi_run(
            1, num_episodes=1, tuning_hp={"momentum": 0.9}
        )
    assert factory.steps == 0 and not (tmp_path / "exp").exists()


def test_existing_experiment_is_not_replaced(tmp_path):
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=2, seed_offset=0, progress=False
    )
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    factory = CountingFactory()
    with pytest.raises(
        FileExistsError, match=r"already holds an earlier experiment \(.*manifest.json.*\): pass overwrite=True"
    ):
        OnlineTrainer(factory, RecordingAgent, exp_dir=tmp_path).multi_run(1, num_episodes=2)
    assert factory.steps == 0
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_cut_off_experiment_called_again_without_resume_is_told_to_resume(tmp_path):
    """The refusal said only to pass overwrite=True, which deletes the runs' checkpoints (tester J3)."""
    import json

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        3, num_episodes=2, seed_offset=0, progress=False
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["runs"][1]["status"], manifest["runs"][2]["status"] = "interrupted", "pending"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(FileExistsError) as refused:
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(3, num_episodes=2)
    assert str(refused.value).startswith(
        f"exp_dir={str(tmp_path)!r} already holds an experiment whose runs did not all end (1 of 3 did; manifest.json, "
    )
    assert "make the same call with resume=True to continue it, or pass overwrite=True to replace it (its records" in (
        str(refused.value)
    )


def test_different_args_in_reused_dir_refused(tmp_path):
    (tmp_path / "args.yaml").write_text("lr: 1\n")
    with pytest.raises(FileExistsError, match=r"args.yaml already exists with other content"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path, args={"lr": 2}).multi_run(
            1, num_episodes=1
        )
    assert (tmp_path / "args.yaml").read_text() == "lr: 1\n"


def test_keep_records_false_needs_disk():
    with pytest.raises(ValueError, match=r"records.in_memory=False needs dump_metrics=True"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
            1, num_episodes=1, records=RecordOptions(in_memory=False)
        )


def test_checkpoint_needs_save(tmp_path):
    class NoSave:
        def act(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

        def update(self, *a, **k):
            pass

    with pytest.raises(TypeError, match=r"checkpoint_freq=3 needs agent.save"):
        OnlineTrainer(make_counting_vec(1), NoSave(), exp_dir=tmp_path / "e").multi_run(
            1, num_episodes=1, checkpoint_freq=3
        )
    assert not (tmp_path / "e").exists()


class RejectsHyperparameters(RecordingAgent):
    def __init__(self, env=None):
        raise ValueError("lr=-1 must be positive")


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_setup_error_stops_every_run_with_that_error_and_leaves_nothing(tmp_path, num_workers):
    exp = tmp_path / "exp"
    trainer = OnlineTrainer(make_counting_vec(1), RejectsHyperparameters, exp_dir=exp)
    with pytest.raises(ValueError, match=r"^lr=-1 must be positive") as info:
        trainer.multi_run(4, num_episodes=50, seed_offset=0, num_workers=num_workers, progress=False)
    assert "before its first env step" in "".join(getattr(info.value, "__notes__", []))
    assert not exp.exists()  # the corrected call finds nothing in its way
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp).multi_run(2, num_episodes=2, progress=False)


def test_a_setup_error_keeps_what_was_there_before(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="lr=-1"):
        OnlineTrainer(make_counting_vec(1), RejectsHyperparameters, exp_dir=tmp_path, args={"lr": -1}).multi_run(
            1, num_episodes=1, progress=False
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


class Acting(RecordingAgent):
    """Returns what ``make_actions(obs)`` gives."""

    def __init__(self, make_actions):
        super().__init__()
        self.make_actions = make_actions

    def act(self, obs):
        return self.make_actions(obs)


@pytest.mark.parametrize(
    "make_actions, error, message",
    [
        (
            lambda obs: np.zeros(1, dtype=np.int64),
            ValueError,
            r"Acting's act\(obs\) returned actions of shape \(1,\) \(1 action\), but Discrete\(2\) with num_envs=3 "
            r"needs shape \(3,\)",
        ),
        (
            lambda obs: np.zeros(len(obs), dtype=np.float64),
            TypeError,
            r"returned actions of dtype float64 for the integer action space Discrete\(2\): return integers",
        ),
        (  # E17: said only that they were outside
            lambda obs: np.full(len(obs), 5),
            ValueError,
            r"returned \[5, 5, 5\], outside the action space Discrete\(2\): return one integer per sub-env, from 0 "
            r"to 1\.\n",
        ),
        (lambda obs: 0, ValueError, r"shape \(\) \(a scalar, not a batch of actions\)"),
        (  # X14: said "a scalar"
            lambda obs: None,
            TypeError,
            r"returned None, but Discrete\(2\) with num_envs=3 needs an array of shape \(3,\): does act end with return",
        ),
        (  # A16: a tensor on another device gave torch's "can't convert meta device type tensor to numpy"
            lambda obs: __import__("torch").zeros(len(obs), dtype=__import__("torch").int64, device="meta"),
            TypeError,
            r"Acting's act\(obs\) returned a Tensor on meta, which numpy cannot read \(TypeError: can't convert meta "
            r"device type tensor to numpy.*\): return a numpy array of actions \(a tensor on the meta device holds "
            r"no values: compute the actions on the CPU or a GPU, then actions.cpu\(\).numpy\(\)\)",
        ),
    ],
)
def test_first_actions_are_checked_before_the_first_step(tmp_path, make_actions, error, message):
    factory = CountingFactory()

    def env_factory():
        return make_counting_vec(3)()

    with pytest.raises(error, match=message):
        OnlineTrainer(env_factory, Acting(make_actions), exp_dir=tmp_path / "exp").multi_run(
            1, num_episodes=1, progress=False
        )
    assert factory.steps == 0 and not (tmp_path / "exp").exists()


class InvalidAt:
    """CartPole actions: 0, but ``bad`` at the ``at``-th call of ``act``."""

    def __init__(self, at: int, bad) -> None:
        self.at, self.bad, self.calls = at, bad, 0

    def __call__(self, obs):
        self.calls += 1
        return np.array([self.bad]) if self.calls == self.at else np.zeros(1, dtype=np.int64)


def test_an_invalid_action_later_in_a_run_is_named_with_the_agent_and_the_step(tmp_path):
    """gymnasium's CartPole says only ``AssertionError: [2] (<class 'numpy.ndarray'>) invalid``."""
    import gymnasium as gym

    from online_trainer import EvaluationOptions, RunsFailedError

    agent = Acting(InvalidAt(40, 2))
    with pytest.raises(RunsFailedError) as raised:
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), agent).multi_run(
            1, total_steps=500, seed_offset=0
        )
    (failure,) = raised.value.failures
    step = int(re.match(r"ValueError: At env step (\d+) of the run", failure.exception)[1])
    assert 30 <= step < 40  # its 40th act, less the reset steps
    assert failure.exception.endswith(
        " of the run: the agent Acting's act(obs) returned [2], outside the action space Discrete(2): return one "
        "integer per sub-env, from 0 to 1."
    )
    assert "AssertionError" in failure.traceback  # gymnasium's own error is the cause
    assert "with exp_dir=None the records of each up to its failure are in this error's failures[k].records" in str(
        raised.value
    )
    # the episodes finished before that step, as a run of the same seed with valid actions only records them
    valid = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), Acting(InvalidAt(0, 2))).multi_run(
        1, total_steps=step - 1, seed_offset=0, progress=False
    )

    def accounting(records):
        return [(r["episode_index"], r["global_step"], r["ep_return"], r["ep_length"]) for r in records]

    assert len(failure.records) >= 3 and accounting(failure.records) == accounting(valid[0])

    def eval_env():  # its observations are float64 (CartPole's are float32): the agent acts -1 on them
        return gym.wrappers.vector.DtypeObservation(gym.make_vec("CartPole-v1", num_envs=1), np.float64)

    agent = Acting(lambda obs: np.array([-1]) if obs.dtype == np.float64 else np.zeros(1, dtype=np.int64))
    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), agent, exp_dir=tmp_path)
    with pytest.raises(RunsFailedError) as raised:
        trainer.multi_run(1, total_steps=500, evaluation=EvaluationOptions(freq=100, episodes=1, env=eval_env))
    (failure,) = raised.value.failures
    assert failure.exception.startswith("ValueError: In an evaluation: the agent Acting's act(obs) returned [-1]")
    assert "the records of each up to its failure are on disk" in str(raised.value)


def test_an_env_step_error_that_is_not_the_agents_is_raised_as_it_is():
    class Broken(RecordingAgent):
        pass

    def env_factory():
        env = make_counting_vec(1)()
        step = env.step

        def failing(actions):
            if env.calls >= 5:
                raise RuntimeError("the simulator lost its licence")
            env.calls += 1
            return step(actions)

        env.calls = 0
        env.step = failing
        return env

    from online_trainer import RunsFailedError

    with pytest.raises(RunsFailedError, match=r"RuntimeError: the simulator lost its licence") as info:
        OnlineTrainer(env_factory, Broken).multi_run(1, total_steps=50)
    assert "resume=True" not in str(info.value)  # without exp_dir nothing is kept to resume


def test_call_back_must_be_a_callback(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(TypeError, match=r"trainer.call_back must be a callback object .* but got 'tensorboard'"):
        trainer.call_back = "tensorboard"


def test_more_workers_than_runs_are_capped(caplog):
    import logging

    caplog.set_level(logging.INFO, logger="online_trainer")
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        1, num_episodes=2, num_workers=10**9, progress=False
    )
    assert len(runs) == 1 and "num_workers=1000000000 is more than num_runs=1" in caplog.text


def test_a_render_mode_the_env_lacks_is_refused(tmp_path):
    import gymnasium as gym

    with pytest.raises(
        ValueError,
        match=r"render_mode='rgbarray' is not a render mode of this env, which supports "
        r"\['rgb_array'\]: make the env with one of them",
    ):
        OnlineTrainer(
            lambda: gym.make_vec("CartPole-v1", num_envs=1, render_mode="rgbarray"),
            RecordingAgent,
            exp_dir=tmp_path / "exp",
        ).multi_run(1, num_episodes=1, progress=False)
    assert not (tmp_path / "exp").exists()


def test_a_run_refused_at_its_setup_leaves_none_of_the_directories_it_made(tmp_path):
    import gymnasium as gym

    exp_dir = tmp_path / "runs" / "sweeps" / "exp"
    with pytest.raises(ValueError, match=r"render_mode='rgbarray' is not a render mode of this env"):
        OnlineTrainer(
            lambda: gym.make_vec("CartPole-v1", num_envs=1, render_mode="rgbarray"), RecordingAgent, exp_dir=exp_dir
        ).multi_run(1, num_episodes=1, progress=False)
    assert list(tmp_path.iterdir()) == []  # runs/ and runs/sweeps/ too


def test_a_hyperparameter_of_the_wrong_type_is_named(tmp_path):
    import gymnasium as gym

    from online_trainer.agents import DQNAgent

    with pytest.raises(
        ValueError,
        match=r"DQNAgent hyperparameters: lr='0.001' has the wrong type: expected a "
        r"number, got str \(write 0.001, without quotes\)\.",
    ):
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), DQNAgent).multi_run(
            1, num_episodes=1, tuning_hp={"lr": "0.001"}, progress=False
        )


def test_nan_in_the_first_observation_is_warned_about(caplog):
    import gymnasium as gym

    class NanObs(gym.ObservationWrapper):
        def observation(self, obs):
            return np.full_like(obs, np.nan)

    OnlineTrainer(lambda: NanObs(gym.make("CartPole-v1")), RecordingAgent).multi_run(1, num_episodes=1, progress=False)
    assert "run 1: the env's first observation holds NaN" in caplog.text


class NoArgAgent(RecordingAgent):
    def __init__(self):
        super().__init__()


@pytest.mark.parametrize("factory", [lambda: RecordingAgent(), NoArgAgent, lambda env, config: RecordingAgent()])
def test_an_agent_factory_that_cannot_take_the_env_is_explained(tmp_path, factory):
    env = CountingFactory()
    with pytest.raises(
        TypeError,
        match=r"The agent factory agent=.* cannot be called with one argument .*, but it is "
        r"called with the run's env, once per run.*lambda env: MyAgent\(env\)",
    ):
        OnlineTrainer(env, factory, exp_dir=tmp_path / "exp").multi_run(1, num_episodes=1)
    assert env.built == 0 and not (tmp_path / "exp").exists()


class EnvOfSize:
    def __init__(self, num_envs):
        self.num_envs = num_envs


@pytest.mark.parametrize(
    "factory", [lambda num_envs: make_counting_vec(num_envs), EnvOfSize, lambda *, seed: make_counting_vec(1)]
)
def test_an_env_factory_that_needs_arguments_is_explained_before_anything_is_written(tmp_path, factory):
    with pytest.raises(
        TypeError,
        match=r"The env factory env=.* cannot be called without arguments .*, but it is called with none, once "
        r"per run: env=lambda: gym.make_vec\('CartPole-v1', num_envs=4\)",
    ):
        OnlineTrainer(factory, RecordingAgent, exp_dir=tmp_path / "exp").multi_run(1, num_episodes=1)
    assert not (tmp_path / "exp").exists()


def test_an_env_factory_with_defaults_or_extra_arguments_is_accepted():
    records = OnlineTrainer(lambda num_envs=2, **kw: make_counting_vec(num_envs)(), RecordingAgent).multi_run(
        1, num_episodes=2, progress=False
    )
    assert len(records[0]) == 2


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"resume": "yes"}, ValueError, r"resume must be True or False, but got resume='yes'"),
        ({"resume": 1}, ValueError, r"resume must be True or False, but got resume=1"),
        ({"overwrite": "no"}, ValueError, r"overwrite must be True or False, but got overwrite='no'"),
        ({"overwrite": 0}, ValueError, r"overwrite must be True or False, but got overwrite=0"),
        (
            {"resume": True, "overwrite": True},
            ValueError,
            r"resume=True continues the experiment in exp_dir and overwrite=True replaces it: pass only one of them",
        ),
    ],
)
def test_resume_and_overwrite_are_flags_and_exclusive(tmp_path, kwargs, error, message):
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(1, num_episodes=2, progress=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    factory = CountingFactory()
    with pytest.raises(error, match=message):
        OnlineTrainer(factory, RecordingAgent, exp_dir=tmp_path).multi_run(1, num_episodes=2, progress=False, **kwargs)
    assert factory.built == 0 and {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"dump_transitions": "no"}, r"dump_transitions must be True or False, but got dump_transitions='no'"),
        ({"dump_metrics": "no"}, r"dump_metrics must be True or False, but got dump_metrics='no'"),
        ({"dump_metrics": 1}, r"dump_metrics must be True or False, but got dump_metrics=1"),
    ],
)
def test_dump_options_are_flags(tmp_path, kwargs, message):
    """R16: the string "no" turned dump_transitions and dump_metrics on, without a word."""
    factory = CountingFactory()
    with pytest.raises(ValueError, match=message):
        OnlineTrainer(factory, RecordingAgent, exp_dir=tmp_path / "exp").multi_run(1, 2, **kwargs)
    if "dump_transitions" in kwargs:  # sweep has no dump_metrics
        with pytest.raises(ValueError, match=message):
            OnlineTrainer(factory, RecordingAgent, exp_dir=tmp_path / "sweep").sweep(
                {"lr": [0.1]}, 1, num_episodes=2, **kwargs
            )
    assert factory.built == 0 and not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match=r"train must be True or False, but got train='no'"):
        OnlineTrainer(factory, RecordingAgent, train="no")


def test_sweep_resume_is_a_flag(tmp_path):
    with pytest.raises(ValueError, match=r"resume must be True or False, but got resume='yes'"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "sweep").sweep(
            {"lr": [0.1]}, 1, num_episodes=2, resume="yes"
        )
    assert not (tmp_path / "sweep").exists()


def test_a_bad_eval_env_is_named_as_the_evaluation_env(tmp_path):
    from online_trainer import EvaluationOptions

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(
        TypeError, match=r"The evaluation.env factory .*<lambda> returned 3 of type int, which is neither"
    ):
        trainer.multi_run(1, num_episodes=2, evaluation=EvaluationOptions(freq=1, env=lambda: 3))
    assert not (tmp_path / "exp").exists()
    with pytest.raises(TypeError, match=r"evaluation.env must be a gymnasium Env, .* but got evaluation.env=3 of type"):
        trainer.multi_run(1, num_episodes=2, evaluation=EvaluationOptions(freq=1, env=3))
    with pytest.raises(ValueError, match=r"evaluation.env='CartPole-v9' is not a registered gymnasium env id"):
        trainer.multi_run(1, num_episodes=2, evaluation=EvaluationOptions(freq=1, env="CartPole-v9"))


def test_actions_in_a_list_that_a_numpy_vectorised_env_cannot_step_are_named(tmp_path):
    """CartPole's vector env computes with its actions: a list fails there with ``'list' and 'float'``."""
    import gymnasium as gym

    agent = Acting(lambda obs: [0] * len(obs))
    with pytest.raises(TypeError) as raised:  # at the first step: raised as it is, every run stopped
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=2), agent).multi_run(1, total_steps=50)
    message = str(raised.value)
    assert message.startswith("At env step 1 of the run: the agent Acting's act(obs) returned")
    assert "a list, and the env's step failed on it (TypeError: " in message
    assert message.endswith("return a numpy array, e.g. np.asarray(actions).")
    # a SyncVectorEnv takes the same list
    sync = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"), agent)
    (records,) = sync.multi_run(1, total_steps=50)
    assert len(records) >= 1


class Logging(RecordingAgent):
    """``log()`` returns what ``make_logs()`` gives."""

    def __init__(self, make_logs):
        super().__init__()
        self.make_logs = make_logs

    def log(self):
        return self.make_logs()


@pytest.mark.parametrize(
    "make_logs, what",
    [(lambda: [{"x": 1}], "1 entries"), (lambda: {"x": 1}, "a value of type dict"), (lambda: 3, "a value of type int")],
)
def test_a_log_that_is_not_one_entry_per_sub_env_fails_the_run_and_says_what_to_return(make_logs, what):
    from online_trainer import RunsFailedError

    with pytest.raises(RunsFailedError) as raised:
        OnlineTrainer(make_counting_vec(3), Logging(make_logs)).multi_run(1, num_episodes=4, progress=False)
    (failure,) = raised.value.failures
    assert failure.exception == (
        f"TypeError: agent.log() returned {what}, but it must return None or a list of "
        "one entry per sub-env (num_envs=3): [entry_0, ..., entry_2], each a dict or None."
    )


def test_a_failure_shows_its_traceback_from_the_start_of_a_frame():
    """The end of a run's traceback began mid-frame, with a bare ``^^^^`` line (an outside tester's find)."""
    from online_trainer.errors import RunFailure

    traceback = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/a.py", line 1, in f',
            "    x = g()",
            "        ^^^",
            '  File "/b.py", line 2, in g',
            '    raise ValueError("boom")',
            "    ^^^^^^^^^^^^^^^^^^^^^^^^",
            "ValueError: boom",
        ]
    )
    assert RunFailure(1, 0, "ValueError: boom", traceback).tail(6).splitlines()[0] == '  File "/a.py", line 1, in f'
    assert RunFailure(1, 0, "ValueError: boom", traceback).tail(4).splitlines()[0] == '  File "/b.py", line 2, in g'


def test_a_failure_whose_details_repeat_its_summary_says_it_once():
    """A cancelled Slurm job's failure printed its ``SlurmJobEnded`` line twice (an outside tester's find)."""
    from online_trainer.errors import RunFailure, RunsFailedError

    summary = "SlurmJobEnded: run 1 (seed 0) has no result, and its Slurm job 5 ended CANCELLED; its log: /x"
    text = str(RunsFailedError([RunFailure(1, 0, summary, f"{summary}\nThe end of that log:\n(the log is empty)")]))
    assert text.count("SlurmJobEnded") == 1 and text.endswith("\n    The end of that log:\n    (the log is empty)")


class FailsAtTheEnd(Hook):
    """Raises once the run's whole budget is spent (as a final evaluation that fails would)."""

    def on_run_end(self, ctx):
        if ctx.run == 2:
            raise RuntimeError("failed after its budget")


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_run_failing_after_its_budget_without_exp_dir_keeps_its_records_in_the_error(num_workers):
    """With exp_dir=None a run that failed at its final evaluation lost every episode it had trained."""
    from online_trainer import ExecutionOptions, RunsFailedError

    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent)
    execution = ExecutionOptions(num_workers=num_workers, progress=False)
    expected = trainer.multi_run(2, num_episodes=7, seed_offset=0, execution=execution)
    with pytest.raises(RunsFailedError) as raised:
        trainer.multi_run(2, num_episodes=7, seed_offset=0, execution=execution, hooks=[FailsAtTheEnd()])
    (failure,) = raised.value.failures
    assert failure.run_idx == 2 and "failed after its budget" in failure.exception
    assert [(r["ep_return"], r["ep_length"]) for r in failure.records] == [
        (r["ep_return"], r["ep_length"]) for r in expected[1]
    ]
    assert raised.value.results[1] is None and len(raised.value.results[0]) == 7


def test_an_env_whose_close_raises_leaves_finished_runs_finished(tmp_path, caplog):
    """Runs whose records and last checkpoints were written were marked failed for their env's close(), and a resume
    did each of them again from step 0 (tester F2)."""
    import json

    from online_trainer import load_runs

    def env():
        vec = make_counting_vec(1)()

        def close(**kwargs):
            raise RuntimeError("the simulator's socket is gone")

        vec.close = close
        return vec

    with caplog.at_level("ERROR"):
        runs = OnlineTrainer(env, RecordingAgent, exp_dir=str(tmp_path)).multi_run(
            2, num_episodes=5, seed_offset=0, progress=False
        )
    assert [len(run) for run in runs] == [5, 5]
    statuses = [entry["status"] for entry in json.loads((tmp_path / "manifest.json").read_text())["runs"]]
    assert statuses == ["finished", "finished"] and list(load_runs(tmp_path)["status"]) == statuses
    assert "run 1 (seed 0): its env's close() raised RuntimeError: the simulator's socket is gone" in caplog.text


def test_a_factory_that_returns_the_same_agent_for_every_run_is_refused(tmp_path):
    """``shared = A(env); agent=lambda env: shared`` ran every seed on one object: run 2 started from what run 1
    learned, and trainer.agents held one agent three times (tester A2)."""
    env = make_counting_vec(1)
    shared = RecordingAgent()
    with pytest.raises(
        TypeError, match=r"returned an agent object an earlier run was given .* Build the agent inside"
    ) as no:
        OnlineTrainer(env, lambda env: shared, exp_dir=str(tmp_path / "exp")).multi_run(
            3, num_episodes=3, seed_offset=0, progress=False
        )
    # refused before run 2's first step; run 1 had ended, and the note says what is kept and how to go on
    assert no.value.__notes__ == [
        "(raised by run 2, seed 10000, before its first env step; every run was stopped, and what the run(s) 1 that "
        "ended in this call wrote is kept: once it is fixed, make the same call with resume=True to do the others, or "
        "with overwrite=True to start again)"
    ]
    import json

    statuses = [e["status"] for e in json.loads((tmp_path / "exp" / "manifest.json").read_text())["runs"]]
    assert statuses == ["finished", "pending", "pending"]  # run 2 was left "running", read as killed (tester R2)
    runs = OnlineTrainer(env, lambda env: RecordingAgent(), exp_dir=str(tmp_path / "exp")).multi_run(
        3, num_episodes=3, seed_offset=0, progress=False, resume=True
    )
    assert [len(run) for run in runs] == [3, 3, 3]
    with pytest.raises(
        TypeError, match=r"returned an agent object an earlier run was given"
    ) as no:  # nowhere on disk: nothing kept
        OnlineTrainer(env, lambda env: shared, exp_dir=None).multi_run(3, num_episodes=3, seed_offset=0, progress=False)
    assert no.value.__notes__[0].endswith("every run was stopped, and nothing was kept on disk)")  # not "resume" (A4)
    # an instance is copied for each run, and evaluation (train=False) may use one object for every run
    OnlineTrainer(env, shared, exp_dir=None).multi_run(3, num_episodes=3, seed_offset=0, progress=False)
    OnlineTrainer(env, lambda env: shared, exp_dir=None, train=False).multi_run(
        3, num_episodes=3, seed_offset=0, progress=False
    )


_SHARED_AGENT = RecordingAgent()


def shared_agent(env):
    """A factory in an importable module returning one agent built at import: one per worker process."""
    return _SHARED_AGENT


def test_a_factory_that_returns_its_workers_one_agent_is_refused_with_workers(tmp_path):
    """Each worker imports the factory's module, so each has its own _SHARED_AGENT, which its runs shared: the
    refusal looked only at the runs of the factory object that built it, and each run had its own copy (A4)."""
    with pytest.raises(TypeError, match=r"returned an agent object an earlier run was given") as failed:
        OnlineTrainer(make_counting_vec(1), shared_agent, exp_dir=None).multi_run(
            4, num_episodes=2, seed_offset=0, progress=False, num_workers=2
        )
    assert "before its first env step; every run was stopped" in failed.value.__notes__[-1]


def test_a_factory_that_returns_the_agent_an_earlier_call_trained_is_refused():
    """Called again (a notebook's cell run twice), each run of the second call started from what the first call's
    runs learned: the check looked at the runs of one call only (tester R4)."""
    module_level = RecordingAgent()
    OnlineTrainer(make_counting_vec(1), lambda env: module_level).multi_run(1, num_episodes=2, progress=False)
    with pytest.raises(TypeError, match=r"returned an agent object an earlier run was given"):
        OnlineTrainer(make_counting_vec(1), lambda env: module_level).multi_run(1, num_episodes=2, progress=False)


def test_a_first_env_step_that_raises_stops_every_run_and_keeps_nothing(tmp_path):
    """act() returning a list passes the first actions' check, and gymnasium's CartPole vector env raises at its first
    step: each run failed on its own (RunsFailedError), and the experiment left behind refused the corrected call
    (ExperimentExistsError) (tester A2)."""
    import gymnasium as gym

    class ListActions(RecordingAgent):
        def act(self, obs):
            return [0] * len(obs)

    def env():
        return gym.make_vec("CartPole-v1", num_envs=2)

    exp = tmp_path / "exp"
    with pytest.raises(Exception, match=r"act\(obs\) returned a list") as raised:
        OnlineTrainer(env, ListActions, exp_dir=str(exp)).multi_run(3, total_steps=50, seed_offset=0, progress=False)
    assert "every run was stopped, and nothing was kept on disk" in raised.value.__notes__[-1]
    # it came from the first step, not before it: "At env step 1 ... before its first env step" (tester A4)
    assert str(raised.value).startswith("At env step 1 of the run:")
    assert raised.value.__notes__[-1].startswith("(raised by run 1, seed 0, at its first env step;")
    assert not exp.exists()
    runs = OnlineTrainer(env, RecordingAgent, exp_dir=str(exp)).multi_run(
        3, total_steps=50, seed_offset=0, progress=False
    )
    assert len(runs) == 3


class LoadsNothing(RecordingAgent):
    def load(self, state):
        raise ValueError("my checkpoint format changed")


@pytest.mark.parametrize("num_workers", [1, 2])
def test_an_evaluation_whose_agent_cannot_load_its_checkpoint_raises_the_agents_error(tmp_path, num_workers):
    """trainer.evaluate() and `online-trainer eval` raised "AttributeError: 'list' object has no attribute 'items'"
    from the note that says what was kept, and hid the agent's own error (tester A4)."""
    env = make_counting_vec(1)
    OnlineTrainer(env, RecordingAgent, exp_dir=tmp_path).multi_run(
        2, num_episodes=3, seed_offset=0, checkpoint_freq=2, progress=False
    )
    trainer = OnlineTrainer(env, LoadsNothing, exp_dir=tmp_path)
    with pytest.raises(ValueError, match="my checkpoint format changed") as error:
        trainer.evaluate(execution=ExecutionOptions(num_workers=num_workers, progress=False))
    # the worker's frames first, where there is a worker (they came without their traceback), then what was done
    assert error.value.__notes__[-1].startswith("(raised by run ") and "before its first env step" in str(
        error.value.__notes__
    )
    assert len(error.value.__notes__) == num_workers
    assert error.value.__notes__[-1].endswith(
        "before its first env step; every run was stopped, and nothing was kept on disk)"
    )
    assert not list(tmp_path.glob("evaluation_*.csv"))


class BoxActing:
    """Pendulum actions from ``make(len(obs))``."""

    def __init__(self, make):
        self.make = make

    def act(self, obs):
        return self.make(len(obs))

    def update(self, *args, **kwargs):
        pass


def test_box_actions_that_are_nan_are_refused_and_outside_the_bounds_said_once(tmp_path, caplog, monkeypatch):
    """NaN actions ran to the end with ep_return = nan, and actions of 50.0 on Pendulum (bounds 2) without a word,
    where the docs said the first actions' range is checked (tester A4). Out of bounds is not refused: an env may
    clip them, and policies rely on it."""
    import gymnasium as gym

    from online_trainer.loop import factories

    def env():
        return gym.make_vec("Pendulum-v1", num_envs=2)

    with pytest.raises(ValueError, match=r"BoxActing's act\(obs\) returned NaN actions .* Check the policy's outputs"):
        OnlineTrainer(
            env, BoxActing(lambda n: np.full((n, 1), np.nan, np.float32)), exp_dir=tmp_path / "nan"
        ).multi_run(1, total_steps=10, progress=False)
    assert not (tmp_path / "nan").exists()
    monkeypatch.setattr(factories, "_WARNED_OF_BOUNDS", [])
    caplog.set_level("WARNING", logger="online_trainer")
    runs = OnlineTrainer(env, BoxActing(lambda n: np.full((n, 1), 50.0, np.float32)), exp_dir=None).multi_run(
        2, total_steps=10, progress=False
    )
    assert len(runs) == 2
    said = [r.getMessage() for r in caplog.records if "outside the bounds" in r.getMessage()]
    assert len(said) == 1 and "(2 of 2, the first: 50.0)" in said[0] and "np.clip(actions" in said[0]


def test_an_agent_is_named_by_its_class_not_its_default_repr(tmp_path):
    """ "the agent <__main__.NoSave object at 0x7fef...> lacks" where other messages said "The agent UpdTransition"
    (tester A4)."""

    class NoSave:
        def act(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

        def update(self, next_obs, reward, terminated, truncated, call_back=None):
            pass

    with pytest.raises(TypeError, match=r"needs agent.save\(path=None\), which the agent .*NoSave lacks: add it") as no:
        OnlineTrainer(make_counting_vec(1), lambda env: NoSave(), exp_dir=tmp_path).multi_run(
            1, num_episodes=1, checkpoint_freq=1, progress=False
        )
    assert " object at 0x" not in str(no.value)


class MisspeltOnStart(Hook):
    def on_run_start(self, ctx):
        ctx.env.pole_lenght  # noqa: B018  (a misspelt attribute: raises AttributeError)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_hook_that_raises_in_on_run_start_stops_every_run_and_keeps_nothing(tmp_path, num_workers):
    """on_run_start comes before the first env step, yet each run failed on its own (RunsFailedError) and the
    experiment left behind refused the corrected call (tester H3)."""
    exp_dir = tmp_path / "exp"
    with pytest.raises(AttributeError, match="pole_lenght") as raised:
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir).multi_run(
            3, num_episodes=2, seed_offset=0, progress=False, hooks=[MisspeltOnStart()], num_workers=num_workers
        )
    assert "(raised in hook MisspeltOnStart#0's on_run_start)" in raised.value.__notes__
    assert any("before its first env step; every run was stopped" in note for note in raised.value.__notes__)
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir).multi_run(
        3, num_episodes=2, seed_offset=0, progress=False
    )
    assert [len(run) for run in runs] == [2, 2, 2]


class FailsOrSlowsBySeed(gym.Wrapper):
    """CartPole whose first step raises for the seed ``fail`` (while the file ``armed`` exists), and whose every
    step sleeps 2 ms for the seed ``slow``: a later seed's own error while an earlier seed is under way."""

    def __init__(self, env, fail: int, slow: int, armed: str) -> None:
        super().__init__(env)
        self.fail, self.slow, self.armed, self.seed = fail, slow, armed, None

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.seed = seed
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        if self.seed == self.fail and os.path.exists(self.armed):
            raise ValueError(f"no step for seed {self.fail}")
        if self.seed == self.slow:
            time.sleep(0.002)
        return self.env.step(action)


def _failing_by_seed(armed: str):
    return gym.make_vec(
        "CartPole-v1",
        num_envs=1,
        vectorization_mode="sync",
        wrappers=[functools.partial(FailsOrSlowsBySeed, fail=20000, slow=10000, armed=armed)],
    )


def test_a_later_seeds_setup_error_keeps_a_run_under_way_as_interrupted_and_its_resume_is_exact(tmp_path):
    """F13: run 3's error at its first step (run 1 finished, run 2 under way) removed run 2's records and checkpoints,
    marked it pending and left its points in the shared JSONL and TensorBoard files: the resume held 498 of them
    twice. Run 2 is now stopped as Ctrl-C stops it, and goes on from its full checkpoint."""
    from online_trainer.agents import RandomAgent
    from online_trainer.callbacks import JsonlCallback

    armed = tmp_path / "armed"
    armed.touch()
    env = functools.partial(_failing_by_seed, str(armed))

    def trainer(exp_dir):
        t = OnlineTrainer(env, RandomAgent, exp_dir=exp_dir)
        t.call_back = JsonlCallback(exp_dir / "log.jsonl")
        return t

    kw = dict(
        total_steps=3000, seed_offset=0, checkpoint_freq=300, execution=ExecutionOptions(num_workers=2, progress=False)
    )
    with pytest.raises(ValueError, match="no step for seed 20000") as no:
        trainer(tmp_path / "exp").multi_run(3, **kw)
    assert (
        "run(s) 2, under way, stopped as Ctrl-C stops them (interrupted, with what they flushed)"
        in (no.value.__notes__[-1])
    )
    manifest = json.loads((tmp_path / "exp" / "manifest.json").read_text())
    assert [e["status"] for e in manifest["runs"]] == ["finished", "interrupted", "pending"]
    armed.unlink()
    runs = trainer(tmp_path / "exp").multi_run(3, resume=True, **kw)
    reference = trainer(tmp_path / "ref").multi_run(3, **kw)
    for run, expected in zip(runs, reference):
        assert run.column("ep_return").tolist() == expected.column("ep_return").tolist()
    for exp_dir in ("exp", "ref"):
        lines = [json.loads(line) for line in (tmp_path / exp_dir / "log.jsonl").read_text().splitlines()]
        points = [(line["tag"], line["step"]) for line in lines if "ep_return" in line["values"]]
        assert len(points) == len(set(points)) == sum(len(run) for run in reference)  # none twice, none missing


@pytest.mark.parametrize(
    ("eval_env", "message"),
    [
        (
            lambda: gym.make_vec("Acrobot-v1", num_envs=1),
            "The eval env's observation space is Box(",
        ),
        (
            lambda: gym.make_vec("CartPole-v1", num_envs=1, vectorization_mode="sync", max_episode_steps=50),
            None,  # the same spaces: accepted
        ),
    ],
)
def test_an_eval_env_on_other_spaces_is_refused_before_the_first_step(tmp_path, eval_env, message):
    """N13: a HalfCheetah eval env for an InvertedPendulum run failed at the first evaluation, after training went
    on; actions rescaled in the eval env ran silently."""
    from online_trainer import EvaluationOptions
    from online_trainer.agents import RandomAgent

    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), RandomAgent, exp_dir=tmp_path / "exp")
    evaluation = EvaluationOptions(env=eval_env, freq=100, episodes=1)
    if message is None:
        trainer.multi_run(1, total_steps=200, evaluation=evaluation, progress=False)
        return
    with pytest.raises(ValueError, match=re.escape(message)) as no:
        trainer.multi_run(1, total_steps=200, evaluation=evaluation, progress=False)
    assert "the training env's Box(" in str(no.value) and "EvaluationOptions(env=...)" in str(no.value)
    assert not (tmp_path / "exp").exists()
    rescaled = OnlineTrainer(
        lambda: gym.make_vec("Pendulum-v1", num_envs=1), RandomAgent, exp_dir=tmp_path / "pendulum"
    )
    with pytest.raises(ValueError, match=r"The eval env's action space is Box\(-1.0, 1.0, \(1,\), float32\)"):
        rescaled.multi_run(
            1,
            total_steps=200,
            evaluation=EvaluationOptions(
                env=lambda: gym.wrappers.vector.RescaleAction(
                    gym.make_vec("Pendulum-v1", num_envs=1), np.float32(-1), np.float32(1)
                ),
                freq=100,
            ),
            progress=False,
        )


def test_an_agent_that_fails_on_dict_observations_is_told_what_the_env_gives(tmp_path):
    """Tester X14: MiniGrid's dict observations given to an agent written for arrays ended in the agent's own
    "float() argument must be a string or a real number, not 'dict'", with nothing about the env's space."""
    import gymnasium as gym

    class WantsArrays:
        def __init__(self, env):
            self.num_envs = env.num_envs

        def act(self, obs):
            return np.asarray(obs, dtype=np.float64).argmax(-1)  # TypeError on a dict

        def update(self, *args, **kwargs):
            pass

    def env():
        return gym.make_vec(
            "CartPole-v1",
            num_envs=2,
            vectorization_mode="sync",
            wrappers=[
                lambda e: gym.wrappers.TransformObservation(
                    e, lambda o: {"state": o}, gym.spaces.Dict({"state": e.observation_space})
                )
            ],
        )

    with pytest.raises(TypeError) as info:
        OnlineTrainer(env, WantsArrays, exp_dir=tmp_path / "exp").multi_run(1, num_episodes=1, progress=False)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert (
        "The env's observations are a dict of arrays, one per key, not one array: its single_observation_space "
        in notes
    )
    assert "gymnasium.wrappers.FlattenObservation" in notes and not (tmp_path / "exp").exists()

    # N16: an agent that reads the observation space's shape as it is built failed there, without the note
    class ShapedByTheSpace(WantsArrays):
        def __init__(self, env):
            super().__init__(env)
            self.obs_dim = int(np.prod(env.single_observation_space.shape))  # a Dict space's shape is None

    with pytest.raises(TypeError) as info:
        OnlineTrainer(env, ShapedByTheSpace, exp_dir=tmp_path / "exp").multi_run(1, num_episodes=1, progress=False)
    assert "The env's observations are a dict of arrays" in "\n".join(getattr(info.value, "__notes__", []))


class CannotDraw(gym.Wrapper):
    """An env made with render_mode='rgb_array' whose render() raises: CartPole without pygame."""

    def render(self):
        raise ModuleNotFoundError("pygame is not installed")


@pytest.mark.parametrize(("num_workers", "trigger"), [(1, None), (2, None), (1, 2)])
def test_an_env_whose_first_render_raises_stops_every_run_and_keeps_nothing(tmp_path, num_workers, trigger):
    """D19: the first frame is drawn before the first env step, yet each run failed on its own (RunsFailedError, global
    step 0), left 0-byte metrics files and an experiment that refused the corrected call."""
    exp_dir = tmp_path / "exp"

    def make():
        return gym.vector.SyncVectorEnv([lambda: CannotDraw(gym.make("CartPole-v1", render_mode="rgb_array"))])

    with pytest.raises(ModuleNotFoundError, match="pygame is not installed") as raised:
        OnlineTrainer(make, RecordingAgent, exp_dir=exp_dir).multi_run(  # V19: a trigger keeping no first frame
            2,
            num_episodes=2,
            seed_offset=0,
            progress=False,
            num_workers=num_workers,
            records=RecordOptions(frames_trigger=trigger),
        )
    notes = raised.value.__notes__
    assert any(
        "raised by the env's render(), which the run calls to keep frames: render_mode='rgb_array'" in note
        for note in notes
    ), notes
    assert any("before its first env step; every run was stopped" in note for note in notes), notes
    assert not exp_dir.exists()
