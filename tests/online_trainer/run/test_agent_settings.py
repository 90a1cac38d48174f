"""What an agent says of itself as it is built (agent.json), and the check of a resumed run's agent."""

from __future__ import annotations

import argparse
import dataclasses
import logging

import numpy as np
import pytest

from online_trainer.run import agent_settings


@dataclasses.dataclass
class Config:
    lr: float = 0.1
    sizes: tuple = (64, 64)
    schedule: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(3))


class NumpyAgent:
    def __init__(self, alpha: float = 0.5) -> None:
        self.alpha = np.float64(alpha)
        self.n_actions = np.int64(2)
        self.name = "tabular"
        self.greedy = False
        self.target = None
        self.gamma = float("nan")
        self.q = np.zeros((4, 2))  # data, not a setting
        self.table = list(range(100))  # likewise
        self.config = Config()
        self._rng = np.random.default_rng(0)


class Slotted:
    __slots__ = ("alpha",)

    def __init__(self) -> None:
        self.alpha = 0.5


def test_settings_are_the_plain_attributes_and_a_dataclass_s_plain_fields():
    assert agent_settings.agent_settings(NumpyAgent()) == {
        "class": f"{__name__}.NumpyAgent",
        "qualname": "NumpyAgent",
        "settings": {
            "alpha": 0.5,
            "config.lr": 0.1,
            "config.sizes": [64, 64],
            "gamma": "nan",
            "greedy": False,
            "n_actions": 2,
            "name": "tabular",
            "target": None,
        },
    }
    assert agent_settings.agent_settings(Slotted()) == {
        "class": f"{__name__}.Slotted",
        "qualname": "Slotted",
        "settings": {"alpha": 0.5},
    }


class Nested:
    """Settings as a lab keeps them (tester W10: slots, nested configs and argparse's Namespace were not looked into)."""

    def __init__(self, eps: float = 0.2, device: str = "cpu") -> None:
        self.args = argparse.Namespace(eps=eps, env_id="CartPole-v1")
        self.cfg = Outer()
        self.hparams = {"lr": 0.1, "layers": [8, 8]}
        self.device = device  # where it runs, not what it learns: a run may resume on another device
        self.policy_device = device


@dataclasses.dataclass
class Explore:
    epsilon: float = 0.5


@dataclasses.dataclass
class Outer:
    hidden: int = 16
    explore: Explore = dataclasses.field(default_factory=Explore)


def test_groups_of_settings_are_looked_into_and_the_device_is_left_out():
    assert agent_settings.agent_settings(Nested())["settings"] == {
        "args.env_id": "CartPole-v1",
        "args.eps": 0.2,
        "cfg.explore.epsilon": 0.5,
        "cfg.hidden": 16,
        "hparams.layers": [8, 8],
        "hparams.lr": 0.1,
    }
    assert agent_settings.agent_settings(Nested(device="cuda:1")) == agent_settings.agent_settings(Nested())


def test_the_class_is_compared_by_its_qualified_name(tmp_path):
    """Tester W10: a script's __main__ class, resumed by another driver that imports it, was refused."""
    recorded = agent_settings.agent_settings(NumpyAgent())
    recorded["class"] = "__main__.NumpyAgent"
    agent_settings.record_settings(tmp_path, recorded)
    agent_settings.check_settings(tmp_path, agent_settings.agent_settings(NumpyAgent()), "run 1")
    with pytest.raises(ValueError, match=rf"its class is {__name__}.Slotted \(it ran with __main__.NumpyAgent\)"):
        agent_settings.check_settings(tmp_path, agent_settings.agent_settings(Slotted()), "run 1")


def test_a_run_s_agent_is_checked_against_the_recorded_one(tmp_path):
    recorded = agent_settings.agent_settings(NumpyAgent())
    agent_settings.check_settings(tmp_path, recorded, "run 1")  # nothing recorded: nothing to check
    agent_settings.record_settings(tmp_path, recorded)
    agent_settings.record_settings(tmp_path, agent_settings.agent_settings(NumpyAgent(0.9)))  # the first one stays
    agent_settings.check_settings(tmp_path, agent_settings.agent_settings(NumpyAgent()), "run 2")  # nan == nan here
    changed = agent_settings.agent_settings(NumpyAgent(0.9))
    changed["settings"]["added_later"] = 1  # an attribute one side lacks is not compared
    with pytest.raises(ValueError) as refused:
        agent_settings.check_settings(tmp_path, changed, "run 2")
    assert str(refused.value).startswith(
        f"resume=True continues the experiment in {str(tmp_path)!r} with the agent it trained, but run 2's agent "
        "differs: alpha 0.9 (it ran with 0.5). Its runs would not all train the same agent."
    )
    assert str(refused.value).endswith(
        "(If a setting named here is not one you chose, such as a time or a random draw made when the agent is built, "
        f"remove {str(tmp_path / 'agent.json')!r}: the runs then resume unchecked.)"
    )


def test_a_sweep_configuration_without_a_record_is_checked_on_what_the_others_agree_on(tmp_path):
    """A setting that differs between configurations (a time) is no setting of the factory: left out (tester V10:
    removing each file the refusal named was refused against the next configuration's)."""
    (tmp_path / "sweep.json").write_text("{}")
    for name, created in (("lr=0.1", 1.0), ("lr=0.3", 2.0)):
        (tmp_path / name).mkdir()
        agent = NumpyAgent()
        agent.created = created
        agent_settings.record_settings(tmp_path / name, agent_settings.agent_settings(agent))
    new = tmp_path / "lr=0.5"
    new.mkdir()
    later = NumpyAgent()
    later.created = 3.0
    agent_settings.check_settings(new, agent_settings.agent_settings(later), "lr=0.5 run 1")  # time left out
    with pytest.raises(ValueError) as refused:
        agent_settings.check_settings(new, agent_settings.agent_settings(NumpyAgent(0.9)), "lr=0.5 run 1")
    assert "with the agent its sweep trained (configurations 'lr=0.1', 'lr=0.3'), but lr=0.5 run 1's agent " in str(
        refused.value
    )
    assert (
        f"remove {str(tmp_path / 'lr=0.1' / 'agent.json')!r} and {str(tmp_path / 'lr=0.3' / 'agent.json')!r}: the "
        "runs then resume unchecked.)"
    ) in str(refused.value)


def test_a_damaged_record_is_said_and_checks_nothing(tmp_path, caplog):
    (tmp_path / "agent.json").write_text("{not json")
    with caplog.at_level(logging.WARNING):
        agent_settings.check_settings(tmp_path, agent_settings.agent_settings(NumpyAgent(0.9)), "run 1")
    assert f"{tmp_path / 'agent.json'} is damaged (JSONDecodeError" in caplog.text
    assert "the agent is not checked. Put back a copy of it, or remove it" in caplog.text
