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
