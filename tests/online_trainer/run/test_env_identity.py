"""The env an experiment ran on, and the check that a resumed call brings it."""

from __future__ import annotations

import json
import logging

import pytest

from online_trainer import OnlineTrainer
from online_trainer.run import env_identity
from tests.conftest import RecordingAgent, make_counting_vec


def test_a_damaged_env_json_is_named_and_the_manifest_still_checks_the_env(tmp_path, caplog):
    """env.json replaced with '{"id": "Acrobot' switched the check off without a word (tester F3)."""
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(1, num_episodes=2, progress=False)
    recorded = json.loads((tmp_path / "env.json").read_text())
    (tmp_path / "env.json").write_text('{"id": "Acrobot')
    caplog.set_level(logging.WARNING, logger="online_trainer")
    assert env_identity.recorded_identity(tmp_path) == {"num_envs": 2}  # what the manifest says
    assert f"{tmp_path / 'env.json'} is damaged (JSONDecodeError" in caplog.text
    assert "Put back a copy of it, or remove it" in caplog.text
    with pytest.raises(ValueError, match=r"sub-envs 3 \(it ran with 2\)"):
        env_identity.check_identity(tmp_path, {**recorded, "num_envs": 3}, "run 1")
    caplog.clear()
    (tmp_path / "env.json").unlink()
    env_identity.recorded_identity(tmp_path)
    assert caplog.text == ""  # no env.json (an experiment of an earlier version): nothing to say


def test_a_resumed_call_says_once_that_env_json_is_damaged(tmp_path, caplog):
    """The warning came four times in a resumed two-run call: twice from the call's check, once from each run (R3)."""
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.multi_run(2, num_episodes=2, progress=False, dump_metrics=False)
    (tmp_path / "env.json").write_text('{"id": "Acrobot')
    (tmp_path / "manifest.json").write_text(
        (tmp_path / "manifest.json").read_text().replace('"status": "finished"', '"status": "pending"')
    )
    caplog.set_level(logging.WARNING, logger="online_trainer")
    trainer.multi_run(2, num_episodes=2, progress=False, dump_metrics=False, resume=True)
    assert caplog.text.count("env.json is damaged") == 1
