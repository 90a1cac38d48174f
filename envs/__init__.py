"""Env factories and toy envs whose right answers are known.

Importing this package registers ``Corridor-v0`` with gymnasium.
"""

from online_trainer.envs._corridor import (
    CORRIDOR_ID,
    DEFAULT_LENGTH,
    MAX_EPISODE_STEPS,
    CorridorEnv,
    optimal_episode_length,
    optimal_return,
    register_corridor,
)
from online_trainer.envs._factory import VECTORIZATIONS, VectorEnvFactory, make_env

register_corridor()

__all__ = [
    "CORRIDOR_ID",
    "CorridorEnv",
    "DEFAULT_LENGTH",
    "MAX_EPISODE_STEPS",
    "VECTORIZATIONS",
    "VectorEnvFactory",
    "make_env",
    "optimal_episode_length",
    "optimal_return",
    "register_corridor",
]
