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
    shown.run_finished(2, "failed")  # redrawn now
    last = capsys.readouterr().err.splitlines()[-1]
    assert "81000/100000" in last and "1975.61steps/s" in last and "1/2 runs ended, 1 failed, 1 running" in last


def test_the_overall_bar_counts_runs_by_how_they_ended(clock, capsys):
    """Runs stopped by SIGTERM were counted as failed ("2 failed") where the manifest says interrupted."""
    shown = display.ProgressDisplay(5, 100, "steps")
    for key, status in enumerate(["interrupted", "finished", "failed", "interrupted", "stopped_early"], start=1):
        shown.open_run(key, f"run {key}", 100, "steps")
        shown.advance(key, 50, 1.0)
        shown.run_finished(key, status)
    shown.close_all()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "5/5 runs ended, 1 failed, 2 interrupted, 1 stopped early" in last
    # a finished run completes its share of the bar (+50); runs stopped early or failed take what they left off
    # the total (counted as done, it had the rate twice the real one; left in, a time still to go at the end);
    # interrupted runs leave the bar where the call was cut off
    assert "300/400" in last


def test_progress_made_before_the_display_followed_the_runs_counts_as_done_before(clock, capsys):
    """A Slurm handle's wait() read the steps its runs had made so far at once: 73,932,955 steps/s (an outside tester)."""
    shown = display.ProgressDisplay(2, 100_000, "steps")
    shown.open_run(1, "run 1", 100_000, "steps")
    with shown.done_before():
        shown.advance(1, 40_000, 1.0)  # what run 1 had done before
    drawn = capsys.readouterr().err.splitlines()
    # drawn from where it stood, with no rate yet: it was drawn as it came (millions of steps/s), then went back
    # to 0, then forward (tester L2)
    first = next(i for i, line in enumerate(drawn) if "40000/200000" in line)
    assert all("?steps/s" in line for line in drawn) and not any("| 0/200000" in line for line in drawn[first:])
    clock[0] += 40
    shown.advance(1, 2_000, 1.0)
    shown.run_finished(1, "interrupted")  # redrawn now
    last = capsys.readouterr().err.splitlines()[-1]
    assert "42000/200000" in last and "50.00steps/s" in last


@pytest.mark.parametrize("through", ["in-process", "worker"])
def test_a_resumed_run_starts_its_bars_where_its_checkpoint_left_it_not_counted_in_the_rates(clock, capsys, through):
    """A resumed run moved its bar and the overall bar by its checkpoint's 40,000 steps as if it had just run them:
    the rates read thousands of steps a second more than the run made, and the times to go were too short (S17)."""
    shown = display.ProgressDisplay(2, 100_000, "steps")
    if through == "in-process":
        run = shown.open_run(1, "run 1", 100_000, "steps")
        run.resume_at(40_000)
    else:  # what a worker's QueueRunProgress sends
        sent = []
        run = display.QueueProgress(type("Queue", (), {"put": staticmethod(sent.append)})()).open_run(
            1, "run 1", 100_000, "steps"
        )
        run.resume_at(40_000)
        for message in sent:
            shown.handle(message)
    clock[0] += 40
    shown.advance(1, 2_000, 1.0)
    shown.run_finished(1, "interrupted")  # redrawn now
    last = capsys.readouterr().err.splitlines()[-1]
    assert "42000/200000" in last and "50.00steps/s" in last, last


def test_runs_that_ended_before_the_display_followed_them_count_as_ended(clock, capsys):
    """S18: `online-trainer wait` after a queued job was cancelled followed 3 jobs but counted "2/2 runs ended", and
    never said the failed one."""
    shown = display.ProgressDisplay(3, 100, "steps")
    with shown.done_before():
        shown.ended_before("failed", 40)  # cancelled at step 40: what it left comes off the total
    for key in (1, 2):
        shown.open_run(key, f"run {key}", 100, "steps")
        shown.advance(key, 100, 1.0)
        shown.run_finished(key, "finished")
    shown.close_all()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "240/240" in last and "3/3 runs ended, 1 failed" in last, last


def test_runs_that_fail_without_a_bar_take_what_they_left_off_the_total(clock, capsys):
    """S21: a job cancelled while queued under `online-trainer wait` kept its budget in the total: the bar ended at
    "80000/120000 ... 3/3 runs ended, 1 failed" with a time still to go. A run requeued and then cancelled keeps
    what it had done."""
    shown = display.ProgressDisplay(4, 100, "steps")
    for key in (1, 2):
        shown.open_run(key, f"run {key}", 100, "steps")
        shown.advance(key, 60, 1.0)
    shown.run_requeued(2)  # back in the queue at 60 steps, then cancelled there
    shown.run_finished(2, "failed")
    shown.run_finished(3, "failed")  # cancelled before it started
    shown.advance(1, 40, 1.0)
    shown.run_finished(1, "finished")
    shown.open_run(4, "run 4", 100, "steps")
    shown.advance(4, 100, 1.0)
    shown.run_finished(4, "finished")
    shown.close_all()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "260/260" in last and "4/4 runs ended, 2 failed" in last, last


def test_a_requeued_run_leaves_the_running_count_and_what_it_redoes_comes_off_once_it_starts_again(clock, capsys):
    """After ``scontrol requeue`` the display counted the run as running while its job waited in the queue ("3
    running" with 2 workers), and kept the steps its restart does again (tester S7); while it waits, its progress
    stays on the overall bar (taken off at once, the count fell from 322,002 to 176,000 with a checkpoint at
    163,958: tester V9)."""
    shown = display.ProgressDisplay(3, 100_000, "steps")
    for key in (1, 2):
        shown.handle(("start", key, f"run {key}"))
        shown.handle(("progress", key, 40_000, 1.0, None))
    shown.run_requeued(2)  # its job is back in the queue: its checkpoint was at 25,000 steps
    shown.run_requeued(3)  # not started: nothing to take back
    shown.handle(("start", 3, "run 3"))
    shown.overall.refresh()  # a log draws a run's start at its next line (every 30 s, or when a run ends)
    drawn = capsys.readouterr().err.splitlines()
    assert "80000/300000" in drawn[-1] and "0/3 runs ended, 2 running, 1 requeued" in drawn[-1]
    assert all("80000/300000" in line for line in drawn if "requeued" in line)
    shown.handle(("start", 2, "run 2"))  # started again: it reports its checkpoint's steps
    shown.overall.refresh()
    # what it showed stays until then (taken off at its start, the count fell for a redraw: tester S11)
    assert "80000/300000" in capsys.readouterr().err.splitlines()[-1]
    shown.handle(("progress", 2, 25_000, 1.0, None))
    shown.overall.refresh()
    drawn = capsys.readouterr().err.splitlines()
    assert "65000/300000" in drawn[-1] and not any("40000/300000" in line for line in drawn)
    shown.run_finished(1, "finished")
    last = capsys.readouterr().err.splitlines()[-1]
    assert "125000/300000" in last and "1/3 runs ended, 2 running" in last and "requeued" not in last


def test_a_run_started_again_without_a_requeue_seen_shows_what_it_reports_not_the_sum(clock, capsys):
    """A job requeued and started again between two looks at the queue: its restart reports the steps of its
    checkpoint, which were added to what the bar showed (overshooting the run's share)."""
    shown = display.ProgressDisplay(1, 100_000, "steps")
    shown.handle(("start", 1, "run 1"))
    shown.handle(("progress", 1, 60_000, 1.0, None))
    shown.handle(("start", 1, "run 1"))
    shown.handle(("progress", 1, 50_000, 1.0, None))
    shown.run_finished(1, "interrupted")
    shown.close_all()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "50000/100000" in last


def test_a_requeued_run_whose_progress_was_read_as_done_before_starts_again_from_its_checkpoint(clock, capsys):
    """A handle's wait() reads a requeued run's whole progress file at once: its first start, its progress, its
    restart and the checkpoint's steps."""
    shown = display.ProgressDisplay(1, 100_000, "steps")
    with shown.done_before():
        for message in [("start", 1, "run 1"), ("progress", 1, 60_000, 1.0, None)] * 2:
            shown.handle(message)
    clock[0] += 40
    shown.handle(("progress", 1, 2_000, 1.0, None))
    shown.run_finished(1, "interrupted")
    shown.close_all()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "62000/100000" in last and "50.00steps/s" in last


def test_a_run_whose_setup_failed_stops_the_display_without_counting_it_as_ended(clock, capsys):
    """A script without its main guard showed "1/5 runs ended, 1 setup failed" though no run had run (an outside
    tester's find): the call stops at such a run, and the bar says so."""
    shown = display.ProgressDisplay(5, 30_000, "steps")
    shown.handle(("start", 1, "run 1"))
    shown.run_finished(1, "setup_failed")
    shown.close_all()
    last = capsys.readouterr().err.splitlines()[-1]
    assert "0/150000" in last and "stopped: a run failed before its first env step (the error follows)" in last
    assert "runs ended" not in last


def test_a_terminal_of_no_size_gets_bars_of_a_fixed_width(monkeypatch):
    """Tester F16: in a pty nobody sized (`script`, 0 columns and 0 rows) tqdm drew no bar at all, only blank
    lines."""
    import os
    import pty
    import sys

    master, slave = pty.openpty()  # a new pty is 0 x 0
    terminal = os.fdopen(slave, "w", encoding="utf-8")
    try:
        assert os.get_terminal_size(slave) == (0, 0)
        monkeypatch.setattr(sys, "stderr", terminal)
        shown = display.ProgressDisplay(1, 100, "steps")
        shown.open_run(1, "run 1", 100, "steps")
        shown.advance(1, 40, 1.0)
        shown.run_finished(1, "finished")
        shown.close_all()
        terminal.flush()
        err = _read_all(master).decode("utf-8", "replace")
    finally:
        terminal.close()
        os.close(master)
    assert "run 1:   0%|" in err and "all runs: 100%|" in err and "100/100" in err


def test_a_log_draws_no_line_for_a_run_that_starts_or_resumes_only_when_one_ends(clock, capsys):
    """S18: in a log, a requeued run that started again drew two lines a second apart (its start, then where it
    resumed), and a wait() that followed runs under way drew a line per run: a log gets a line when a run ends or
    goes back to the queue, and every 30 s."""
    shown = display.ProgressDisplay(3, 100_000, "steps")
    capsys.readouterr()  # the bar's first line
    with shown.done_before():  # wait() reading the progress of runs under way
        for key in (1, 2):
            shown.handle(("start", key, f"run {key}"))
            shown.handle(("progress", key, 30_000, 1.0, None))
    assert len(capsys.readouterr().err.splitlines()) == 1  # drawn once, at the end
    shown.handle(("start", 3, "run 3"))
    shown.handle(("resumed", 3, 10_000))
    assert capsys.readouterr().err == ""
    shown.run_requeued(2)
    assert "1 requeued" in capsys.readouterr().err.splitlines()[-1]
    shown.handle(("start", 2, "run 2"))
    shown.handle(("resumed", 2, 20_000))
    assert capsys.readouterr().err == ""
    shown.run_finished(1, "finished")
    last = capsys.readouterr().err.splitlines()
    assert len(last) == 1 and "1/3 runs ended, 2 running" in last[0] and "130000/300000" in last[0], last


def _read_all(fd: int) -> bytes:
    """Everything written to the pty ``fd`` is the master of: one read may return only its first chunk (a loaded
    machine's full suite saw the first line alone)."""
    import os
    import select

    data = b""
    while select.select([fd], [], [], 0.5)[0]:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def test_a_logs_bars_are_not_redrawn_by_tqdms_monitor_between_their_30_s_lines(clock):
    """S21: piped, the display wrote "0/3 runs ended, 2 running" at 0:30, 0:50, 1:00 and 1:20: tqdm's monitor thread
    redraws a bar not drawn for its maxinterval (10 s by default), under the log's 30 s interval."""
    shown = display.ProgressDisplay(2, 100, "steps")
    shown.open_run(1, "run 1", 100, "steps")
    assert shown.overall.mininterval == 30.0 and shown.overall.maxinterval >= 30.0
