"""The progress display written to a file or a log (no terminal): one line a state, redrawn every 30 s."""

from __future__ import annotations

import pytest
import tqdm.std

from online_trainer.progress import display


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    monkeypatch.setattr(display, "_terminal", lambda: False)
    return now


def test_a_log_shows_the_rate_of_the_whole_run_at_every_line_not_one_left_from_an_earlier_redraw(clock, capsys):
    """A redraw for a run that starts or ends showed tqdm's moving average as the last update-driven redraw left it:
    the same rate (and ETA) for minutes in a log while the real one was twice as fast."""
    shown = display.ProgressDisplay(2, 100_000, "steps")
    shown.open_run(1, "run 1", 100_000, "steps")
    shown.open_run(2, "run 2", 100_000, "steps")
    clock[0] += 31
    shown.advance(1, 31_000, 1.0)  # past the 30 s interval: redrawn at 1,000 steps/s
    clock[0] += 10
    shown.advance(1, 50_000, 1.0)  # 5,000 steps/s since, but within the interval: not redrawn
    shown.run_finished(2, failed=True)  # redrawn now
    last = capsys.readouterr().err.splitlines()[-1]
    assert "81000/200000" in last and "1975.61steps/s" in last and "1/2 runs ended, 1 failed, 1 running" in last
