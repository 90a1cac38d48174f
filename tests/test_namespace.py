"""One import name: ``online_trainer``. A user's own ``callbacks.py``, ``agents.py`` and ``envs.py`` stay theirs."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BARE = ("callbacks", "agents", "envs")
SOURCE_FOLDERS = ("online_trainer", "callbacks", "agents", "envs", "tests", "bench", "examples")


def bare_imports(path: Path) -> list[str]:
    """The ``import callbacks`` / ``from agents import ...`` statements of a Python file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in BARE]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] in BARE:
            found.append(node.module)
    return found


def test_the_distribution_installs_one_import_name():
    top_level = metadata.distribution("online_trainer").read_text("top_level.txt")
    assert top_level is not None and top_level.split() == ["online_trainer"]


def test_no_code_of_ours_imports_the_bare_names():
    offenders = {}
    for folder in SOURCE_FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "test_namespace.py":
                continue
            if found := bare_imports(path):
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_checker_sees_bare_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import agents\nfrom callbacks.base import CallBack\ndef f():\n    from envs import make_env\n")
    assert bare_imports(module) == ["agents", "callbacks.base", "envs"]


def test_code_in_docs_uses_the_package_names():
    texts = [ROOT / "README.md", *sorted((ROOT / "examples").glob("*.ipynb")), *sorted((ROOT / "docs").rglob("*.md"))]
    offenders = [
        str(p.relative_to(ROOT))
        for p in texts
        if any(f"from {name} import" in p.read_text() or f"import {name}\n" in p.read_text() for name in BARE)
    ]
    assert offenders == []


USER_MODULES = {
    "callbacks.py": "WHO = 'the user callbacks'\n",
    "agents.py": "WHO = 'the user agents'\n",
    "envs.py": "WHO = 'the user envs'\n",
}

SCRIPT = """
import gymnasium as gym
import callbacks, agents, envs
from online_trainer import OnlineTrainer, load_episodes
from online_trainer.agents import QLearningAgent
from online_trainer.callbacks import JsonlCallback
from online_trainer.envs import make_env

if __name__ == "__main__":
    trainer = OnlineTrainer(make_env("CliffWalking-v1", num_envs=1), lambda env: QLearningAgent(env), exp_dir="runs/x")
    trainer.call_back = JsonlCallback("runs/x/log.jsonl")
    runs = trainer.multi_run(2, num_episodes=5, seed_offset=0, num_workers=2, progress=False)
    episodes = load_episodes("runs/x")
    assert len(runs) == 2 and len(episodes) == 10, (len(runs), len(episodes))
    assert sorted(set(episodes["run"])) == [1, 2]
    print(callbacks.WHO, agents.WHO, envs.WHO, sep="|")
"""

CONFIG = """
env: {id: CliffWalking-v1, num_envs: 1}
agent: {name: q_learning}
num_runs: 2
num_episodes: 3
seed_offset: 0
num_workers: 2
callback: jsonl
"""


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    for name, text in USER_MODULES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def run_in(folder: Path, *command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ""}  # the folder itself is on sys.path, as for `python script.py`
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_notebook_style_script_beside_a_users_own_modules(user_folder):
    (user_folder / "experiment.py").write_text(textwrap.dedent(SCRIPT))
    done = run_in(user_folder, sys.executable, "experiment.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "the user callbacks|the user agents|the user envs"


@pytest.mark.slow
def test_the_command_beside_a_users_own_modules(user_folder):
    (user_folder / "cliff.yaml").write_text(CONFIG)
    command = Path(sys.executable).with_name("online-trainer")
    done = run_in(user_folder, str(command), "run", "cliff.yaml", "exp_dir=runs/cliff")
    assert done.returncode == 0, done.stderr
    assert (user_folder / "runs" / "cliff" / "metrics_run1.pkl").is_file()
    assert (user_folder / "runs" / "cliff" / "metrics_run2.pkl").is_file()
    for name, text in USER_MODULES.items():
        assert (user_folder / name).read_text() == text
