"""The public names of the envs package."""

from online_trainer import envs


def test_all_is_sorted_and_complete():
    assert envs.__all__ == sorted(envs.__all__)
    assert {"make_env", "CorridorEnv", "optimal_return", "CORRIDOR_ID"} <= set(envs.__all__)
    assert all(hasattr(envs, name) for name in envs.__all__)
