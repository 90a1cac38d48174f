"""Envs whose pickle leaves their simulator out (MuJoCo, Atari) are put back exactly from a full checkpoint."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

from online_trainer import CheckpointOptions, ExecutionOptions, OnlineTrainer
from online_trainer.agents import PPOAgent
from online_trainer.run import full_checkpoint
from tests.online_trainer.experiment.test_resume import COLUMNS, Crash


class Saved:
    def __init__(self, env):
        self.env = full_checkpoint.env_bytes(env)


def steps_alike(make, before: int, after: int) -> bool:
    """Whether the env restored from a checkpoint taken after ``before`` steps steps on as the original."""
    env = make()
    env.reset(seed=3)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(before + after)]
    for action in actions[:before]:
        env.step(action)
    copy = full_checkpoint.restored_env(Saved(env))
    for action in actions[before:]:
        ours, theirs = env.step(action), copy.step(action)
        if not all(np.array_equal(a, b) for a, b in zip(ours[:4], theirs[:4])):
            return False
    return True


def plain_copy_steps_alike(make, before: int, after: int) -> bool:
    """The same with the env's pickle alone (what a full checkpoint kept before)."""
    import cloudpickle

    env = make()
    env.reset(seed=3)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(before + after)]
    for action in actions[:before]:
        env.step(action)
    copy = cloudpickle.loads(cloudpickle.dumps(env))
    return all(np.array_equal(env.step(a)[0], copy.step(a)[0]) for a in actions[before:])


@pytest.mark.parametrize("env_id, num_envs", [("InvertedPendulum-v5", 2), ("Humanoid-v5", 1), ("HalfCheetah-v5", 1)])
def test_a_mujoco_env_steps_on_exactly_after_a_checkpoint(env_id, num_envs):
    """Through episode ends and resets (InvertedPendulum's random episodes last a few steps); Humanoid's reward
    reads positions the last step derived, which the integration state alone does not give back."""
    pytest.importorskip("mujoco")

    def make():
        return gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync")

    assert not plain_copy_steps_alike(make, 10, 50)  # the env's own pickle starts its bodies over
    assert steps_alike(make, 10, 300)


def test_an_atari_env_without_sticky_actions_steps_on_exactly_and_one_with_them_restarts():
    """The ALE's state leaves out the action sticky actions repeat: such an env is not kept (a resumed run
    restarts it from a seeded reset, as for an env that does not pickle)."""
    ale_py = pytest.importorskip("ale_py")
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

    gym.register_envs(ale_py)

    def make(sticky: float = 0.0):
        return gym.make_vec(
            "ALE/Pong-v5",
            num_envs=2,
            vectorization_mode="sync",
            frameskip=1,
            repeat_action_probability=sticky,
            wrappers=[lambda env: AtariPreprocessing(env, noop_max=30), lambda env: FrameStackObservation(env, 4)],
        )

    assert not plain_copy_steps_alike(make, 40, 20)
    assert steps_alike(make, 40, 300)
    assert full_checkpoint.env_bytes(make(0.25)) is None


@pytest.mark.slow
def test_a_mujoco_run_killed_and_resumed_records_what_an_uninterrupted_one_does(tmp_path):
    """An outside tester's case: InvertedPendulum resumed with 362 episodes against 365, diverging after the
    checkpoint, while the manifest said the env was restored."""
    pytest.importorskip("mujoco")
    from online_trainer import load_episodes

    def trainer(name):
        return OnlineTrainer(
            lambda: gym.make_vec("InvertedPendulum-v5", num_envs=2, vectorization_mode="sync"),
            lambda env: PPOAgent(env, n_steps=64),
            exp_dir=tmp_path / name,
        )

    kw = dict(
        total_steps=2000,
        seed_offset=3,
        checkpoint_freq=500,
        checkpoints=CheckpointOptions(keep=1),
        execution=ExecutionOptions(progress=False),
    )
    trainer("ref").multi_run(1, **kw)
    with pytest.raises(KeyboardInterrupt):
        trainer("cut").multi_run(1, hooks=[Crash(1200)], **kw)
    trainer("cut").multi_run(1, resume=True, **kw)
    manifest = json.loads((tmp_path / "cut" / "manifest.json").read_text())
    assert manifest["runs"][0]["resumed_from"]["env_restored"] is True
    assert load_episodes(tmp_path / "ref")[COLUMNS].equals(load_episodes(tmp_path / "cut")[COLUMNS])
