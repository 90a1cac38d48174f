"""The public API's annotations: what users' type checkers see of ``env`` and ``agent``."""

import textwrap
import typing
from pathlib import Path

import pytest

from online_trainer.loop.protocol import AgentLike, AgentMaker, EnvLike
from online_trainer.orchestration.checkpoint_eval import load_agent
from online_trainer.orchestration.trainer import OnlineTrainer

ROOT = Path(__file__).resolve().parents[3]


def test_trainer_and_load_agent_annotate_env_and_agent_with_the_unions():
    hints = typing.get_type_hints(OnlineTrainer.__init__)
    assert hints["env"] == EnvLike
    assert hints["agent"] == AgentLike
    hints = typing.get_type_hints(load_agent)
    assert hints["env"] == EnvLike | None
    assert hints["agent_factory"] == AgentMaker | None


@pytest.mark.slow  # runs mypy over the package
def test_mypy_accepts_documented_calls_and_rejects_a_non_env_and_a_non_agent(tmp_path):
    api = pytest.importorskip("mypy.api")
    user = tmp_path / "user_code.py"
    user.write_text(
        textwrap.dedent("""
        import gymnasium as gym
        import numpy as np
        from online_trainer.agents import DQNAgent, RandomAgent, SACAgent
        from online_trainer.orchestration.checkpoint_eval import load_agent
        from online_trainer.orchestration.trainer import OnlineTrainer

        class Mine:
            def act(self, obs: np.ndarray) -> np.ndarray:
                return obs

            def update(self, next_obs, reward, terminated, truncated, call_back=None, valid=None) -> None:
                pass

        OnlineTrainer("Pendulum-v1", lambda env: SACAgent(env))
        OnlineTrainer(gym.make("CartPole-v1"), lambda env: DQNAgent(env))
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=2), RandomAgent)
        OnlineTrainer("CartPole-v1", Mine())
        load_agent("runs/x", env="CartPole-v1", agent_factory=lambda env: Mine()).act(np.zeros(3))
        OnlineTrainer(3, Mine())
        OnlineTrainer("CartPole-v1", object())
    """)
    )
    stdout, _, _ = api.run(["--config-file", str(ROOT / "pyproject.toml"), str(user)])
    errors = [line for line in stdout.splitlines() if "user_code.py" in line]
    assert len(errors) == 2, stdout
    assert 'Argument 1 to "OnlineTrainer" has incompatible type "int"' in errors[0]
    assert 'Argument 2 to "OnlineTrainer" has incompatible type "object"' in errors[1]
