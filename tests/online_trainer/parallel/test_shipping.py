"""Specs travel to workers with their code's file names: a failure in a worker names the user's file and line."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import cloudpickle

from online_trainer.parallel import shipping


def main_module_function(path: Path):
    """``f`` defined in a script run as ``__main__`` (so that cloudpickle pickles it by value), at ``path``."""
    namespace = {"__name__": "__main__"}
    exec(compile("def f(x):\n    return 1 / x\n", str(path), "exec"), namespace)
    return namespace["f"]


def test_code_pickled_by_value_keeps_its_file_name(tmp_path):
    f = main_module_function(tmp_path / "user_script.py")
    assert pickle.loads(cloudpickle.dumps(f)).__code__.co_filename == "<dynamic-code>"  # why shipping exists
    g = pickle.loads(shipping.dumps(f))
    assert g.__code__.co_filename == str(tmp_path / "user_script.py")
    assert g(4) == 0.25 and g.__code__.co_firstlineno == 1


def test_nested_code_keeps_its_file_name_too(tmp_path):
    namespace = {"__name__": "__main__"}
    source = "class Agent:\n    def update(self):\n        return [i for i in range(3)]\n"
    exec(compile(source, str(tmp_path / "agent.py"), "exec"), namespace)
    agent_class = pickle.loads(shipping.dumps(namespace["Agent"]))
    update = agent_class.update.__code__
    assert update.co_filename == str(tmp_path / "agent.py")
    comprehension = next(c for c in update.co_consts if hasattr(c, "co_filename"))
    assert comprehension.co_filename == str(tmp_path / "agent.py")
    assert agent_class().update() == [0, 1, 2]


FAILING_AGENT = """
import sys
sys.path.insert(0, {root!r})
from online_trainer import OnlineTrainer, RunsFailedError
from tests.conftest import RecordingAgent, make_counting_vec


class BrokenAgent(RecordingAgent):
    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        if self.updates == 3:
            raise RuntimeError("boom at update 3")


if __name__ == "__main__":
    try:
        OnlineTrainer(make_counting_vec(1), BrokenAgent).multi_run(2, num_episodes=4, num_workers=2, progress=False)
    except RunsFailedError as exc:
        print(exc)
"""


def test_a_run_failed_in_a_worker_shows_the_users_file_and_line(tmp_path):
    script = tmp_path / "my_experiment.py"
    script.write_text(FAILING_AGENT.format(root=str(Path(__file__).resolve().parents[3])))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert "2 run(s) failed" in done.stdout, done.stdout + done.stderr
    assert f'File "{script}", line 12, in update' in done.stdout
    assert 'raise RuntimeError("boom at update 3")' in done.stdout
    assert "<dynamic-code>" not in done.stdout
