"""Reading the result files Slurm jobs and Ray tasks leave in an experiment."""

from __future__ import annotations

import logging
import sys

import cloudpickle

from online_trainer.experiment.job_results import read_job_result, result_path
from online_trainer.run.one_run import RunResult

USER_MODULE = """
class UserAgent:
    def __init__(self):
        self.weights = [1.0, 2.0]

class UserError(Exception):
    pass
"""


def _write_result_of_user_classes(tmp_path, monkeypatch) -> None:
    """A result whose agent and error are of classes of a module importable only while it is written."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "user_agents_for_wait.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(code))
    import user_agents_for_wait as user  # noqa: PLC0415  (made above)

    result = RunResult(
        run_idx=2,
        seed=1,
        records=[{"episode_index": 1, "ep_return": 9.0, "ep_length": 9}],
        episodes=1,
        global_step=9,
        status="failed",
        error="Traceback ...",
        agent=user.UserAgent(),
        extra={"exception": "UserError: boom", "exception_object": user.UserError("boom")},
    )
    path = result_path(tmp_path / "exp", 2)
    path.parent.mkdir(parents=True)
    path.write_bytes(cloudpickle.dumps(result))
    monkeypatch.delitem(sys.modules, "user_agents_for_wait")
    sys.path.remove(str(code))


def test_a_result_whose_agent_this_process_cannot_import_is_read_without_it(tmp_path, monkeypatch, caplog):
    # online-trainer wait, run away from the user's code: the result still ends the run's manifest entry
    _write_result_of_user_classes(tmp_path, monkeypatch)
    with caplog.at_level(logging.WARNING):
        result = read_job_result(tmp_path / "exp", 2)
    assert result is not None
    assert (result.run_idx, result.status, result.episodes, result.global_step) == (2, "failed", 1, 9)
    assert result.records == [{"episode_index": 1, "ep_return": 9.0, "ep_length": 9}]
    assert result.agent is None
    assert "user_agents_for_wait" in result.extra["agent_not_loaded"]
    assert "exception_object" not in result.extra  # the error is named by its text
    assert result.extra["exception"] == "UserError: boom"
    assert not caplog.records


def test_a_result_file_that_is_not_a_result_is_none_and_said(tmp_path, caplog):
    path = result_path(tmp_path, 1)
    path.parent.mkdir()
    path.write_bytes(b"\x80\x05cut off")
    with caplog.at_level(logging.WARNING):
        assert read_job_result(tmp_path, 1) is None
    assert f"could not read {path}" in caplog.text
    assert read_job_result(tmp_path, 3) is None  # no file: none, said by nobody
