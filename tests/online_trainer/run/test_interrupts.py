"""A second Ctrl-C while the runs stop after the first is said and let pass once; a third stops at once."""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest

from online_trainer import OnlineTrainer
from online_trainer.callbacks import JsonlCallback
from online_trainer.records.storage import load_all_run_metrics
from online_trainer.run.interrupts import finishing_the_stop
from tests.conftest import RecordingAgent, make_counting_vec


@pytest.fixture
def python_sigint():
    """SIGINT with Python's own handler, as in a script started from a terminal (a suite run in the background of
    a shell may have it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_second_ctrl_c_is_said_and_let_pass_and_a_third_stops_at_once(python_sigint, caplog):
    caplog.set_level(logging.WARNING, logger="online_trainer")
    with pytest.raises(KeyboardInterrupt) as third:
        with finishing_the_stop(KeyboardInterrupt()):
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C: said, the block goes on
            assert "Still stopping" in caplog.text and "Press Ctrl-C again to stop at once" in caplog.text
            os.kill(os.getpid(), signal.SIGINT)
    assert third.value.__traceback__ is not None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was


def test_another_error_or_a_custom_sigint_handler_is_left_alone(python_sigint):
    with finishing_the_stop(ValueError("a run failed")):
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with finishing_the_stop(KeyboardInterrupt()):
        handler = signal.getsignal(signal.SIGINT)
        assert handler is not signal.default_int_handler
        with finishing_the_stop(KeyboardInterrupt()):  # within another such block: as it is
            assert signal.getsignal(signal.SIGINT) is handler


class InterruptedAt(RecordingAgent):
    """Sends its process SIGINT at its 30th update, as a Ctrl-C does."""

    updates = 0

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        type(self).updates += 1
        if type(self).updates == 30:
            os.kill(os.getpid(), signal.SIGINT)


class PressedAgain(JsonlCallback):
    """A Ctrl-C pressed again while the stopped run's sink is closed, and again while the call closes the sinks."""

    def end_run(self, run_idx, status):
        super().end_run(run_idx, status)
        if status == "interrupted":
            os.kill(os.getpid(), signal.SIGINT)

    def close(self):
        os.kill(os.getpid(), signal.SIGINT)
        super().close()


def test_ctrl_c_pressed_again_while_the_runs_stop_leaves_their_records_and_manifest_whole(
    tmp_path, python_sigint, caplog
):
    """A Ctrl-C pressed twice broke off what the first one's stop writes (tester T2 saw a traceback from a worker
    on its way out; here, in the main process, the manifest kept the runs "running")."""
    caplog.set_level(logging.WARNING, logger="online_trainer")
    InterruptedAt.updates = 0
    sink = PressedAgain(tmp_path / "log.jsonl")
    trainer = OnlineTrainer(make_counting_vec(1), InterruptedAt, exp_dir=tmp_path / "exp")
    trainer.call_back = sink
    with pytest.raises(KeyboardInterrupt) as first:
        trainer.multi_run(2, num_episodes=10**6, seed_offset=0, progress=False)
    assert "make the same call with resume=True" in str(getattr(first.value, "__notes__", []))  # the first one
    assert caplog.text.count("Still stopping") == 2  # in the run, then in the call
    manifest = json.loads((tmp_path / "exp" / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["interrupted", "pending"]  # serial: run 2 never began
    (run1,) = load_all_run_metrics(tmp_path / "exp")[:1]
    assert sum(r["ep_length"] for r in run1) == manifest["runs"][0]["global_step"] > 0  # flushed to the last episode
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert sum('"ep_return/run_1"' in line for line in lines) == len(run1)  # the sink's buffer was written
