"""The progress display where the cursor cannot move (a notebook without ipywidgets, a file, a CI
log): one line of text, no terminal escape codes; a bar per run in a terminal."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import types

import pytest
from tqdm.notebook import tqdm_notebook

from online_trainer.progress import display as progress


def drive(display: progress.ProgressDisplay) -> None:
    """Three runs, two at once, as the executors drive the display."""
    for key in (1, 2):
        display.open_run(key, f"run {key}", 10, "episodes")
    for _ in range(10):
        display.advance(1, 1, 1.5)
        display.advance(2, 1, -2.0)
    display.run_finished(1, "finished")
    display.open_run(3, "run 3", 10, "episodes")
    display.advance(3, 10, 0.5)
    display.run_finished(2, "failed")
    display.run_finished(3, "finished")
    display.close_all()


def test_text_bars_in_a_notebook_keep_to_one_line_without_escape_codes(monkeypatch, capsys, caplog, terminal):
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: True)
    monkeypatch.setattr(progress, "_told_about_widgets", False)
    with caplog.at_level(logging.WARNING, logger=progress.__name__):
        drive(progress.ProgressDisplay(3, 10, "episodes"))
        progress.ProgressDisplay(3, 10, "episodes").close_all()
    err = capsys.readouterr().err
    assert "\x1b[" not in err
    assert "all runs" in err and "run 1" not in err
    assert err.count("3/3 runs ended, 1 failed") == 1  # the final state is drawn once
    told = [r.getMessage() for r in caplog.records if "ipywidgets" in r.getMessage()]
    assert len(told) == 1 and "pip install ipywidgets" in told[0]  # once a process


def render(stream: str) -> list[str]:
    """The lines a notebook shows for ``stream``: "\r" goes back to the start of the line, which the rest overwrites."""
    lines = []
    for line in stream.split("\n"):
        shown = ""
        for part in line.split("\r"):
            shown = part + shown[len(part) :]
        lines.append(shown.rstrip())
    return lines


def test_log_lines_in_a_notebook_do_not_glue_to_the_text_bar(monkeypatch, capsys):
    """A hook's log lines were written after the bar's text on its line: "...1/3 runs ended, 2 running]run 3 starts"
    (an outside tester's notebook without ipywidgets)."""
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: True)
    monkeypatch.setattr(progress, "_told_about_widgets", True)
    log = logging.getLogger("a_users_hook")
    handler = logging.StreamHandler(sys.stderr)  # as logging.basicConfig() in the notebook
    log.addHandler(handler)
    log.propagate = False
    try:
        display = progress.ProgressDisplay(2, 10, "episodes")
        display.open_run(1, "run 1", 10, "episodes")
        display.advance(1, 3, 1.0)
        log.warning("run 1 passed its third episode")
        display.advance(1, 7, 1.0)
        display.run_finished(1, "finished")
        display.close_all()
    finally:
        log.removeHandler(handler)
    err = capsys.readouterr().err
    assert "\x1b[" not in err
    assert "run 1 passed its third episode" in render(err)  # a line of its own
    assert handler.stream is sys.stderr  # the user's handler is given back as it was


def test_text_bars_in_a_file_keep_to_one_line_drawn_once_a_state(monkeypatch, capsys):
    # pytest's captured stderr is no terminal: what a CI log or `python run.py 2> log.txt` gets
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: False)
    drive(progress.ProgressDisplay(3, 10, "episodes"))
    err = capsys.readouterr().err
    assert "\x1b[" not in err and "run 1" not in err
    assert err.count("0/3 runs ended]") == 1  # the bar is made with its postfix, not drawn twice
    assert err.count("3/3 runs ended, 1 failed") == 1
    lines = err.splitlines()  # a log keeps each state on a line of its own, none blank
    assert "\r" not in err and err.endswith("\n") and all(line.startswith("all runs") for line in lines)
    assert len(lines) == len(set(lines)) >= 3


def test_a_bar_in_a_log_writes_each_state_once_on_its_own_line():
    lines = []
    stream = progress._LogLines(types.SimpleNamespace(write=lines.append, flush=lambda: None))
    for text in ["\rall runs:   0%|", "\rall runs:  30%|   ", "\rall runs:  30%|", "", "\rall runs: 100%|", "\n"]:
        assert stream.write(text) == len(text)  # as tqdm writes: "\r" + state, padded; "\n" when it closes
    assert lines == ["all runs:   0%|\n", "all runs:  30%|\n", "all runs: 100%|\n"]
    stream.write("a message\n")  # anything else passes as it is
    assert lines[-1] == "a message\n"


def test_importing_in_jupyter_without_ipywidgets_warns_of_nothing():
    code = textwrap.dedent("""
        import sys, types, warnings
        sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")
        sys.modules["IPython"] = types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace())
        sys.modules["ipywidgets"] = None  # not installed
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import online_trainer.progress.display
        from tqdm.auto import tqdm
        print(tqdm.__module__, [str(w.message) for w in caught])
    """)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "tqdm.asyncio []"  # tqdm.auto fell back to text bars, silently


def test_text_bars_in_a_terminal_draw_a_bar_per_run(monkeypatch, capsys, terminal):
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: False)
    drive(progress.ProgressDisplay(3, 10, "episodes"))
    err = capsys.readouterr().err
    assert "run 1" in err and "\x1b[" in err  # the per-run bars move the cursor: fine in a terminal only


def test_a_jupyter_kernel_is_recognised(monkeypatch):
    shell = types.SimpleNamespace(config={"IPKernelApp": {}})
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert progress._text_in_notebook()
    shell.config = {"TerminalIPythonApp": {}}  # IPython in a terminal
    assert not progress._text_in_notebook()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None))
    assert not progress._text_in_notebook()


def test_tqdm_auto_is_recognised_as_text_bars_and_widgets_are_not(monkeypatch):
    # the class tqdm.auto gives outside Jupyter (or without ipywidgets) is a subclass of tqdm.std.tqdm,
    # not tqdm.std.tqdm itself: an identity test never recognised it
    assert progress._text_bars()
    monkeypatch.setattr(progress, "tqdm", type("tqdm", (tqdm_notebook, progress.tqdm), {}))  # as tqdm.auto builds it
    assert not progress._text_bars()
    assert not progress._text_in_notebook()


def test_bars_written_to_a_log_redraw_rarely(monkeypatch):
    # pytest's captured stderr is no terminal: a CI log, a file, a pipe
    bar = progress._bar(total=10)
    assert bar.mininterval == 30.0
    bar.close()
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: True)
    bar = progress._bar(total=10)
    assert bar.mininterval == 1.0
    bar.close()


def test_log_lines_go_above_the_bars_in_a_terminal_and_logging_is_put_back(monkeypatch, capsys, terminal, tmp_path):
    """A warning logged while the bars were drawn was written through them: the bar and the message on one line."""
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: False)
    root = logging.getLogger()
    console, to_file = logging.StreamHandler(sys.stderr), logging.FileHandler(tmp_path / "log.txt")
    console.setFormatter(logging.Formatter("LOG %(levelname)s %(message)s"))
    monkeypatch.setattr(root, "handlers", [console, to_file])
    last_resort = logging.lastResort
    written: list[str] = []
    monkeypatch.setattr(progress.tqdm, "write", classmethod(lambda cls, text, file=None, **_: written.append(text)))
    display = progress.ProgressDisplay(2, 10, "episodes")
    display.open_run(1, "run 1", 10, "episodes")
    assert root.handlers[1] is to_file  # a log file keeps its handler
    logging.getLogger("online_trainer.test").warning("careful")
    display.close_all()
    assert written == ["LOG WARNING careful"]  # through tqdm.write, with the program's own format
    to_file.close()
    assert "careful" in (tmp_path / "log.txt").read_text()
    assert root.handlers == [console, to_file] and logging.lastResort is last_resort
    monkeypatch.setattr(root, "handlers", [])  # a program that configured no logging: logging.lastResort's warnings
    display = progress.ProgressDisplay(2, 10, "episodes")
    logging.getLogger("online_trainer.test").warning("no handler")
    logging.getLogger("online_trainer.test").info("not shown")
    display.close_all()
    assert written[1:] == ["no handler"] and logging.lastResort is last_resort
    capsys.readouterr()


def test_logging_is_left_alone_where_bars_are_lines_of_a_log(monkeypatch, capsys):
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: False)
    handlers = list(logging.getLogger().handlers)
    display = progress.ProgressDisplay(2, 10, "episodes")  # pytest's stderr is a file
    assert logging.getLogger().handlers == handlers
    display.close_all()
    capsys.readouterr()


def test_named_loggers_go_above_the_bars_and_handlers_added_meanwhile_stay(monkeypatch, capsys, terminal, tmp_path):
    """A named logger's own console handler (propagate=False) still wrote through the bars, and a FileHandler a
    hook added to the root while the bars were up was dropped when they closed (an outside tester)."""
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: False)
    named = logging.getLogger("an_app_of_its_own")
    own = logging.StreamHandler(sys.stderr)
    monkeypatch.setattr(named, "handlers", [own])
    monkeypatch.setattr(named, "propagate", False)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    written: list[str] = []
    monkeypatch.setattr(progress.tqdm, "write", classmethod(lambda cls, text, file=None, **_: written.append(text)))
    display = progress.ProgressDisplay(2, 10, "episodes")
    named.warning("from the app")
    added = logging.FileHandler(tmp_path / "added.log")
    root.addHandler(added)  # what a hook's on_run_start may do
    display.close_all()
    assert written == ["from the app"]
    assert named.handlers == [own] and root.handlers == [added]
    added.close()
    capsys.readouterr()


def test_widget_bars_are_made_with_the_overall_bar_and_reused_run_after_run(monkeypatch):
    """A widget shows where the cell's output has reached when it is made: a run's bar made as the run started
    landed below the log lines written before it (an outside tester's notebook). The bars of the runs that can go
    at once are made with the overall bar, hidden while free, and reused."""
    pytest.importorskip("ipywidgets")
    import tqdm.notebook

    shown = []
    monkeypatch.setattr(tqdm.notebook, "display", lambda widget, **_: shown.append(widget))
    monkeypatch.setattr(progress, "tqdm", tqdm_notebook)
    display = progress.ProgressDisplay(3, 10, "episodes", slots=2)
    assert len(shown) == 3  # the overall bar and one bar for each worker, before any run starts
    overall, first, second = shown
    assert [first.layout.display, second.layout.display] == ["none", "none"]

    def described(box):
        return box.children[0].value.replace("\u2007", " ")

    display.open_run(1, "run 1", 10, "episodes")
    display.open_run(2, "run 2", 10, "episodes")
    assert [first.layout.display, second.layout.display] == [None, None]
    assert described(first).startswith("run 1") and described(second).startswith("run 2")
    display.advance(1, 10, 1.5)
    display.advance(2, 4, -2.0)
    assert display.bars[1].n == 10
    display.run_finished(1, "finished")
    assert first.layout.display == "none" and second.layout.display is None
    display.open_run(3, "run 3", 10, "episodes")
    assert len(shown) == 3  # no bar made below what the runs logged meanwhile
    assert first.layout.display is None and described(first).startswith("run 3")
    assert display.bars[3].n == 0 and first.children[1].value == 0  # nothing of run 1 left
    assert "return" not in first.children[2].value and first.children[0].value != "run 1"
    display.advance(3, 10, 0.5)
    display.run_finished(2, "failed")
    display.run_finished(3, "finished")
    assert first.layout.display == second.layout.display == "none"
    assert display.overall.n == display.overall.total == 24  # run 2 failed at 4 of its 10 episodes
    display.close_all()
    assert (
        "24/24" in overall.children[2].value
        and "3/3\u2007runs\u2007ended,\u20071\u2007failed" in overall.children[2].value
    )
    assert display.bars == {} and display._idle == []


def test_without_the_worker_count_widget_bars_are_made_as_runs_start(monkeypatch):
    pytest.importorskip("ipywidgets")
    import tqdm.notebook

    shown = []
    monkeypatch.setattr(tqdm.notebook, "display", lambda widget, **_: shown.append(widget))
    monkeypatch.setattr(progress, "tqdm", tqdm_notebook)
    display = progress.ProgressDisplay(2, 10, "episodes")  # a Slurm handle's wait(): its throttle is not known
    assert len(shown) == 1
    display.open_run(1, "run 1", 10, "episodes")
    display.run_finished(1, "finished")
    display.open_run(2, "run 2", 10, "episodes")
    assert len(shown) == 3
    display.close_all()


def test_the_overall_widget_shows_what_is_left_and_a_failure(monkeypatch):
    """A run that failed or stopped early lowers the overall total, which tqdm's widget took as its maximum only
    when made: the bar closed green at "100%", a quarter full (tester X2)."""
    pytest.importorskip("ipywidgets")
    monkeypatch.setattr(progress, "tqdm", tqdm_notebook)
    display = progress.ProgressDisplay(3, 10, "episodes")
    drive(display)  # run 2 failed at 10 of 10 episodes: nothing taken off
    widget = display.overall.container.children[1]
    assert (widget.value, widget.max, widget.bar_style) == (30, 30, "danger")
    display = progress.ProgressDisplay(2, 10, "episodes")
    display.open_run(1, "run 1", 10, "episodes")
    display.advance(1, 4, 1.0)
    display.run_finished(1, "stopped_early")
    display.open_run(2, "run 2", 10, "episodes")
    display.advance(2, 10, 1.0)
    display.run_finished(2, "finished")
    display.close_all()
    widget = display.overall.container.children[1]
    assert (widget.value, widget.max, widget.bar_style) == (14, 14, "success")


def test_a_widget_bar_keeps_its_last_state_and_the_mean_rate(monkeypatch):
    """J13: a saved notebook's hidden bar read "run 3: 93% | 5583/6000" for a run that finished (hidden before its
    last redraw), and a run's rate after an evaluation that filmed a video was 39.75 steps/s for its 290 (tqdm's
    moving average of the last redraws)."""
    pytest.importorskip("ipywidgets")
    import tqdm.notebook

    shown = []
    monkeypatch.setattr(tqdm.notebook, "display", lambda widget, **_: shown.append(widget))
    monkeypatch.setattr(progress, "tqdm", tqdm_notebook)
    display = progress.ProgressDisplay(1, 100, "steps", slots=1)
    _, box = shown
    display.open_run(1, "run 1", 100, "steps")
    display.advance(1, 50, 1.0)
    display.advance(1, 50, 1.0)  # within tqdm's mininterval of the last: not drawn by the update
    assert display.bars[1].smoothing == 0 and display.overall.smoothing == 0
    display.run_finished(1, "finished")
    assert box.layout.display == "none" and box.children[1].value == 100
    assert box.children[0].value.replace("\u2007", " ").endswith("100%") and "100/100" in box.children[2].value
    display.close_all()
