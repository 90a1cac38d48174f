"""The public names of the agents package."""

from online_trainer import agents


def test_all_is_sorted_and_complete():
    assert agents.__all__ == sorted(agents.__all__)
    assert {"RandomAgent", "QLearningAgent", "DQNAgent", "PPOAgent", "SACAgent", "SACConfig", "AGENTS"} <= set(
        agents.__all__
    )
    assert all(hasattr(agents, name) for name in agents.__all__)


def test_registry_keys():
    assert sorted(agents.AGENTS) == ["dqn", "ppo", "q_learning", "random", "sac"]
