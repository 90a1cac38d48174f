"""A config names the user's own agent as 'package.module:Name', from a module of the directory the command runs in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from online_trainer.cli import main as cli
from online_trainer.config.schema import AgentConfig, ConfigError

AGENT_MODULE = '''\
import numpy as np

LIMIT = 3


class ParityAgent:
    """A numpy agent of a lab: acts from its seeded generator, counts its updates."""

    def __init__(self, env, bias=0.5, scale=1.0):
        self.n, self.num_envs, self.bias = env.single_action_space.n, env.num_envs, bias
        self.rng = np.random.default_rng(0)

    def reset(self, seed):
        self.rng = np.random.default_rng(seed)

    def act(self, obs):
        return (self.rng.random(self.num_envs) < self.bias).astype(np.int64)

    def update(self, obs, reward, terminated, truncated, call_back=None):
        pass

    def train(self):
        pass

    def eval(self):
        pass
'''

CONFIG = """\
env: {id: CartPole-v1, num_envs: 2}
agent: {name: "labagents.parity:ParityAgent", hyperparameters: {bias: 0.3}}
num_runs: 2
total_steps: 600
callback: empty
exp_dir: runs/own
"""


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """A working directory with the lab's agent package in it, not installed."""
    (tmp_path / "labagents").mkdir()
    (tmp_path / "labagents" / "__init__.py").write_text("")
    (tmp_path / "labagents" / "parity.py").write_text(AGENT_MODULE)
    (tmp_path / "own.yaml").write_text(CONFIG)
    return tmp_path


def console(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed console script: its sys.path does not hold the working directory by itself."""
    script = Path(sys.executable).parent / "online-trainer"
    return subprocess.run([str(script), *argv], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_the_console_script_runs_and_resumes_an_agent_of_the_working_directory_with_2_workers(lab):
    done = console("run", "own.yaml", "execution.num_workers=2", "--no-progress", cwd=lab)
    assert done.returncode == 0, done.stderr
    exp_dir = lab / "runs" / "own"
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished", "finished"]
    assert yaml.safe_load((exp_dir / "config.yaml").read_text())["agent"]["name"] == "labagents.parity:ParityAgent"
    from online_trainer import load_run_metrics

    records = [r for run in (1, 2) for r in load_run_metrics(exp_dir, run)]
    # bias 0.3: the agent's own actions, about three in ten a 1, are what the records hold
    ones = sum(int(r["actions"].sum()) for r in records) / sum(r["ep_length"] for r in records)
    assert 0.2 < ones < 0.4
    resumed = console("resume", "runs/own", "--no-progress", cwd=lab)  # builds the agent again: nothing left to run
    assert resumed.returncode == 0, resumed.stderr
    shown = console("show", "runs/own", cwd=lab)
    assert shown.returncode == 0 and "finished" in shown.stdout


@pytest.mark.parametrize(
    ("name", "hyperparameters", "message"),
    [
        (
            "labagents.parity:ParityAgnt",
            {},
            "agent.name='labagents.parity:ParityAgnt': 'labagents.parity' has no attribute 'ParityAgnt' "
            "(did you mean 'ParityAgent'?).",
        ),
        ("labagent.parity:ParityAgent", {}, "agent.name='labagent.parity:ParityAgent': cannot import module"),
        ("labagents.parity:LIMIT", {}, "agent.name='labagents.parity:LIMIT' is a int, not an agent class"),
        (
            "labagents.parity:ParityAgent",
            {"gamma": 0.9},
            "agent.hyperparameters={'gamma': 0.9}: labagents.parity:ParityAgent(env, **hyperparameters) cannot be "
            "called (got an unexpected keyword argument 'gamma'); it takes bias, scale.",
        ),
        ("parity", {}, "known agents: dqn, ppo, q_learning, random, sac, or your own as 'package.module:ClassName'"),
    ],
)
def test_a_wrong_agent_name_or_hyperparameter_is_refused_naming_the_key(
    lab, monkeypatch, name, hyperparameters, message
):
    monkeypatch.syspath_prepend(str(lab))
    with pytest.raises(ConfigError) as raised:
        AgentConfig(name=name, hyperparameters=hyperparameters)
    assert message in str(raised.value)


def test_a_refused_agent_stops_the_command_before_anything_is_written(lab, monkeypatch, capsys):
    monkeypatch.chdir(lab)
    monkeypatch.syspath_prepend(str(lab))
    assert cli.main(["run", "own.yaml", "agent.hyperparameters.gamma=0.9", "--no-progress"]) == 2
    assert "it takes bias, scale." in capsys.readouterr().err
    assert not (lab / "runs").exists()


def test_an_agent_without_update_is_named_by_its_config_key(lab, monkeypatch, capsys):
    """The message named the command's internal factory, 'made by AgentBuilder' (tester C10)."""
    # a package of its own: the tests before it imported the other labs' labagents, which this one is not
    (lab / "labnoupdate").mkdir()
    (lab / "labnoupdate" / "__init__.py").write_text("")
    (lab / "labnoupdate" / "parity.py").write_text(AGENT_MODULE.replace("def update(", "def learn("))
    monkeypatch.chdir(lab)
    monkeypatch.syspath_prepend(str(lab))
    assert cli.main(["run", "own.yaml", "agent.name=labnoupdate.parity:ParityAgent", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (
        "The agent ParityAgent (made by agent.name='labnoupdate.parity:ParityAgent') lacks the required method(s) update"
        in err
    )
    assert "AgentBuilder" not in err and not (lab / "runs").exists()


def test_a_resume_whose_agent_code_changed_says_so_in_the_command_s_words(lab, monkeypatch, capsys):
    """Tester W10: the refusal told to put a value back in config.yaml, where the agent's code had changed."""
    import sys

    package = lab / "labedited"
    package.mkdir()
    (package / "__init__.py").write_text("")
    cut = "        if self.cut and self.updates == 50:\n            raise KeyboardInterrupt\n"
    code = AGENT_MODULE.replace(
        "self.rng = np.random.default_rng(0)\n",
        "self.rng = np.random.default_rng(0)\n        self.hidden, self.updates, self.cut = [8, 8], 0, True\n",
    ).replace(
        "    def update(self, obs, reward, terminated, truncated, call_back=None):\n        pass\n",
        "    def update(self, obs, reward, terminated, truncated, call_back=None):\n        self.updates += 1\n" + cut,
    )
    (package / "agent.py").write_text(code)
    monkeypatch.chdir(lab)
    monkeypatch.syspath_prepend(str(lab))
    assert cli.main(["run", "own.yaml", "agent.name=labedited.agent:ParityAgent", "--no-progress"]) == 130
    (package / "agent.py").write_text(code.replace("[8, 8], 0, True", "[16, 16], 0, False"))
    monkeypatch.delitem(sys.modules, "labedited.agent")
    capsys.readouterr()
    assert cli.main(["resume", "runs/own", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "run 1's agent differs: cut False (it ran with True); hidden [16, 16] (it ran with [8, 8])." in err
    assert err.rstrip().endswith(
        f"Here the agent is the one {Path('runs/own/config.yaml')}'s agent section builds, which is as the experiment "
        "ran: if the agent's code changed since, put it back."
    )
