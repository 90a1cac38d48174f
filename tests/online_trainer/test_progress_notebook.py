"""The progress display in a notebook without ipywidgets: one line of text, no terminal escape codes."""

from __future__ import annotations

import sys
import types

from tqdm.notebook import tqdm_notebook

from online_trainer.core import progress


def drive(display: progress.ProgressDisplay) -> None:
    """Three runs, two at once, as the executors drive the display."""
    for key in (1, 2):
        display.open_run(key, f"run {key}", 10, "episodes")
    for _ in range(10):
        display.advance(1, 1, 1.5)
        display.advance(2, 1, -2.0)
    display.run_finished(1, failed=False)
    display.open_run(3, "run 3", 10, "episodes")
    display.advance(3, 10, 0.5)
    display.run_finished(2, failed=True)
    display.run_finished(3, failed=False)
    display.close_all()


def test_text_bars_in_a_notebook_keep_to_one_line_without_escape_codes(monkeypatch, capsys):
    monkeypatch.setattr(progress, "_text_in_notebook", lambda: True)
    drive(progress.ProgressDisplay(3, 10, "episodes"))
    err = capsys.readouterr().err
    assert "\x1b[" not in err
    assert "all runs" in err and "run 1" not in err
    assert "3/3 runs done, 1 failed" in err


def test_text_bars_in_a_terminal_draw_a_bar_per_run(monkeypatch, capsys):
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
