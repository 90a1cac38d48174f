"""Finding a run's checkpoints, and saying why one is not there."""

from __future__ import annotations

import re

import pytest

from online_trainer.experiment.checkpoint_files import checkpoints
from tests.conftest import write_experiment


def test_an_interrupted_run_without_its_last_checkpoint_is_told_to_resume_not_to_set_checkpoint_freq(tmp_path):
    """Tester E4: load_agent(which="last") of an interrupted run that had checkpoint_freq said "was it run with
    checkpoint_freq=...?"."""
    write_experiment(tmp_path, {1: ("interrupted", 0, []), 2: ("finished", 1, [])})
    (tmp_path / "Run1_S20.txt").write_text("x")
    with pytest.raises(FileNotFoundError, match=re.escape("has no 'last' checkpoint: it is interrupted, and its last")):
        checkpoints(tmp_path, 1, "last")
    with pytest.raises(FileNotFoundError, match=re.escape("Resume the experiment first, or load one of its periodic")):
        checkpoints(tmp_path, 1, "last")
    assert checkpoints(tmp_path, 1, "all") == [("S20", tmp_path / "Run1_S20")]
    with pytest.raises(FileNotFoundError, match=re.escape("Run 2 in ") + ".*" + re.escape("has no checkpoint: was it")):
        checkpoints(tmp_path, 2, "all")  # not "no 'all' checkpoint"
    with pytest.raises(FileNotFoundError, match=re.escape("has no 'best' checkpoint: was it run with checkpoint_freq")):
        checkpoints(tmp_path, 2, "best")


def test_a_pending_run_without_checkpoints_is_said_to_be_pending(tmp_path):
    """E12: a run that never started was asked whether it ran with checkpoint_freq."""
    write_experiment(tmp_path, {1: ("interrupted", 0, []), 2: ("pending", 1, None)})
    with pytest.raises(
        FileNotFoundError, match=re.escape("has no 'best' checkpoint: it is pending (it never started)")
    ):
        checkpoints(tmp_path, 2, "best")


def test_an_agent_without_load_is_told_what_a_best_checkpoint_needs(tmp_path):
    """E12: the best agent's .t file was said to need agent.load(path); it is loaded with agent.load(state)."""
    from online_trainer.experiment.checkpoint_files import CheckpointAgent

    with pytest.raises(TypeError, match=re.escape("needs agent.load(state), with the state agent.save() returned")):
        CheckpointAgent(lambda env: object(), tmp_path / "Run1_Best_agent.t")(None)
    with pytest.raises(TypeError, match=re.escape("needs agent.load(path), which the agent")):
        CheckpointAgent(lambda env: object(), tmp_path / "Run1_S10")(None)


class BuildsInReset:
    """An agent whose weights exist only once reset(seed) made them, as seeds.md once advised."""

    def __init__(self, env):
        pass

    def reset(self, seed):
        self.weights = [0.0]

    def load(self, path):
        self.weights[:] = [1.0]


def test_a_checkpoint_an_agent_cannot_load_before_reset_is_told_so_not_only_damaged(tmp_path):
    """V22: evaluate() builds the agent and calls load without reset(); an agent following seeds.md's old advice had
    nothing to load into, and was told the file may be damaged."""
    from online_trainer.experiment.checkpoint_files import CheckpointAgent

    (tmp_path / "Run1_Last").write_text("x")
    with pytest.raises(ValueError, match=r"Or the agent builds what load\(\) fills in only in reset\(seed\), which is"):
        CheckpointAgent(BuildsInReset, tmp_path / "Run1_Last")(None)
