"""Reference agents that follow the agent protocol of :mod:`online_trainer.loop.protocol`.

Each agent is built from the env it will act in, so a lambda is an agent factory::

    from online_trainer.agents import DQNAgent
    agent_factory = lambda env: DQNAgent(env, lr=1e-3)

:data:`AGENTS` maps short names (as used in configs) to the classes.
"""

from online_trainer.agents._dqn import DQNAgent, DQNConfig
from online_trainer.agents._ppo import PPOAgent, PPOConfig
from online_trainer.agents._q_learning import QLearningAgent, QLearningConfig
from online_trainer.agents._random import RandomAgent
from online_trainer.agents._sac import SACAgent, SACConfig

AGENTS: dict[str, type] = {
    "dqn": DQNAgent,
    "ppo": PPOAgent,
    "q_learning": QLearningAgent,
    "random": RandomAgent,
    "sac": SACAgent,
}
"""Agent classes by name."""

__all__ = [
    "AGENTS",
    "DQNAgent",
    "DQNConfig",
    "PPOAgent",
    "PPOConfig",
    "QLearningAgent",
    "QLearningConfig",
    "RandomAgent",
    "SACAgent",
    "SACConfig",
]
