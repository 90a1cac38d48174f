"""Progress display: the parent process owns it; runs report to it directly or over a queue.

The display has one overall bar (budget units of all runs together) and one bar per active
run, showing the last episode return. Bars of finished runs are removed (Jupyter widgets:
hidden, and reused by the next run), so the display stays as tall as the number of runs
going at once. ``tqdm.auto`` renders it as widgets in
Jupyter and as text in a terminal; only the parent writes, so lines never interleave. In
Jupyter without ipywidgets (``pip install online_trainer[notebook]`` adds it), and in a file
or a CI log, the display keeps to the overall bar, one line of text, since neither can move
the cursor; in a file or a log it redraws every 30 s and when a run ends, each state on a line of its own. While
bars are drawn in a terminal, console log lines are written above them (:class:`_LogsAboveBars`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any, Protocol

from tqdm.std import TqdmWarning

with warnings.catch_warnings():
    # In Jupyter without ipywidgets tqdm.auto warns on import, even for users who never show progress;
    # the display says so itself, once, when it draws (see ProgressDisplay).
    warnings.filterwarnings("ignore", message="IProgress not found", category=TqdmWarning)
    from tqdm.auto import tqdm

logger = logging.getLogger(__name__)
_told_about_widgets = False


def _text_bars() -> bool:
    """Whether ``tqdm.auto`` draws text (not Jupyter widgets).

    ``tqdm.auto.tqdm`` is never ``tqdm.std.tqdm`` itself: text bars are its asyncio subclass,
    widgets a subclass of ``tqdm.notebook.tqdm_notebook``.
    """
    return not any(cls.__module__ == "tqdm.notebook" for cls in tqdm.__mro__)


def _terminal() -> bool:
    """Whether stderr, where the bars go, is a terminal (not a file, a pipe or a CI log)."""
    return sys.stderr.isatty()


def _sizeless() -> bool:
    """Whether the terminal says it is 0 columns wide or 0 rows high (a pty nobody sized: ``script``, some CI
    runners), where tqdm draws nothing (tester F16)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return size.columns == 0 or size.lines == 0


def _bar(**kwargs: Any) -> Any:
    """A tqdm bar; written to a file or a CI log (no terminal), it redraws every 30 s, not 10 times a
    second, each state on a line of its own."""
    # the mean rate since the start: tqdm's moving average moves only at the redraws its updates make, so a redraw
    # for a run that starts or ends, between them, would show a rate (and an ETA) long out of date, and a run's last
    # rate after an evaluation that filmed a video was a seventh of its own (J13: 39.75 steps/s for 290)
    kwargs.setdefault("smoothing", 0)
    if _text_bars() and _terminal() and _sizeless():  # tqdm sized its bars to 0 columns and hid them below 0 rows
        kwargs.update(dynamic_ncols=False, ncols=kwargs.get("ncols") or 100, nrows=kwargs.get("nrows") or 40)
        return tqdm(**kwargs)
    if _text_bars() and not _terminal():
        in_notebook = _text_in_notebook()
        kwargs.setdefault("mininterval", 1.0 if in_notebook else 30.0)
        # tqdm's monitor thread redraws a bar not drawn for maxinterval (10 s by default): in a log, a line every
        # 10-20 s with nothing new (S21)
        kwargs.setdefault("maxinterval", max(kwargs["mininterval"], 10.0))
        if not in_notebook:  # a notebook's output redraws a line after "\r"; a log file does not
            kwargs.setdefault("file", _LogLines(sys.stderr))
    return tqdm(dynamic_ncols=True, **kwargs)


class _LogLines:
    """A stream for tqdm that writes each state of a bar on a line of its own.

    tqdm redraws a bar by writing ``"\r" + state``: a terminal shows the last state, but a log
    file (a cluster job's output, ``2> log.txt``, a CI log) keeps them all on one growing line.
    Here every state ends its line instead, and a state drawn twice in a row is written once.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._last = ""

    def write(self, text: str) -> int:
        if text.startswith("\r"):
            state = text[1:].rstrip()
            if state and state != self._last:
                self._stream.write(state + "\n")
                self._last = state
        elif text.strip():  # not the newline tqdm ends a bar with (each state has its own)
            self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _text_in_notebook() -> bool:
    """True in a Jupyter kernel where ``tqdm.auto`` fell back to text bars (ipywidgets is not installed).

    Text bars other than the first move the cursor with terminal escape codes, which a
    notebook prints as garbage; the display then keeps to one line (see :class:`ProgressDisplay`).
    """
    if not _text_bars():
        return False
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython is not None else None
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:  # an IPython too old or too odd to ask: assume a terminal
        return False


class _Tally:
    """Counts a run's progress without drawing it (the one-line display)."""

    def __init__(self, total: int) -> None:
        self.n, self.total = 0, total

    def update(self, amount: int) -> None:
        self.n += amount

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


class RunProgress(Protocol):
    """What a run reports while it goes."""

    def advance(self, amount: int) -> None:
        """Count ``amount`` more episodes (episode budget) or env steps (step budget)."""

    def resume_at(self, amount: int) -> None:
        """The run resumes where its checkpoint left it, ``amount`` episodes or env steps in: counted as done before
        its bar started, not in the rates (advanced at once, a resumed run showed thousands of steps a second)."""

    def episode_end(self, ep_return: float) -> None:
        """Note the return of the episode that just ended."""

    def eval_end(self, mean_return: float) -> None:
        """An evaluation ended with this mean return (shown until the next one)."""

    def close(self) -> None:
        """The run ended."""


class Progress(Protocol):
    """Opens a :class:`RunProgress` per run."""

    def open_run(self, key: int, name: str, total: int, unit: str) -> RunProgress:
        """Start the display of the run known as ``key``, shown as ``name``, whose budget is ``total`` ``unit``."""


class NoProgress:
    """Displays nothing."""

    def open_run(self, key: int, name: str, total: int, unit: str) -> NoProgress:
        return self

    def advance(self, amount: int) -> None:
        pass

    def resume_at(self, amount: int) -> None:
        pass

    def episode_end(self, ep_return: float) -> None:
        pass

    def eval_end(self, mean_return: float) -> None:
        pass

    def close(self) -> None:
        pass

    def run_finished(self, key: int, status: str) -> None:
        pass

    def run_requeued(self, key: int) -> None:
        pass

    def ended_before(self, status: str, amount: int) -> None:
        pass

    def handle(self, message: tuple) -> None:
        pass

    @contextlib.contextmanager
    def done_before(self) -> Iterator[None]:
        yield

    def close_all(self) -> None:
        pass


def _widget(bar: Any, **settings: Any) -> None:
    """Set ``settings`` on the progress widget of a notebook's bar (tqdm's widget takes its ``max`` from ``total``
    only in ``reset()``, which also empties it; at ``close()`` it turns green unless told otherwise)."""
    container = getattr(bar, "container", None)
    if container is not None:
        for name, value in settings.items():
            setattr(container.children[1], name, value)


def _lower(bar: Any, amount: int) -> None:
    """Take ``amount`` off ``bar``'s count (and off what it counts as done before it started, where that is more)."""
    bar.n -= amount
    if not isinstance(bar, _Tally):
        bar.initial = min(bar.initial, bar.n)
        bar.last_print_n = bar.n


def _start_from(bar: Any, amount: int) -> None:
    """Move ``bar`` forward by ``amount`` counted as done before it started: not drawn, not in its rate."""
    bar.n += amount
    if not isinstance(bar, _Tally):
        bar.initial += amount
        bar.last_print_n = bar.n


class _BarSafeHandler(logging.StreamHandler):
    """A console handler that writes each log line above the bars (``tqdm.write``), not through them."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


class _LogsAboveBars:
    """While bars are drawn in a terminal, console log lines of this process go above them instead of through them.

    Every logger's handlers that write to stdout or stderr (the root's, and those of named loggers that do not
    propagate) are swapped for :class:`_BarSafeHandler` copies (same level, format, filters and stream), and so is
    ``logging.lastResort``, which writes the warnings of a program that configured no logging. Other handlers (log
    files) are left as they are; :meth:`restore` puts the originals back in place of the copies, leaving any
    handler added or removed meanwhile so. tqdm's own ``logging_redirect_tqdm`` also adds a console handler where
    there was none, which would echo to the terminal what a program logs to a file only. The local pool's workers
    send their records here (:class:`~online_trainer.parallel.worker_process.ToParent`), to these handlers.
    """

    def __init__(self) -> None:
        self._originals: dict[logging.Handler, logging.Handler] = {}  # copy -> original
        loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        for logger in loggers:
            if isinstance(logger, logging.Logger) and any(_is_console(h) for h in logger.handlers):
                logger.handlers = [self._above_bars(h) if _is_console(h) else h for h in logger.handlers]
        self._last_resort = logging.lastResort
        if self._last_resort is not None:
            logging.lastResort = self._above_bars(self._last_resort)

    def _above_bars(self, handler: logging.Handler) -> logging.Handler:
        copy = _BarSafeHandler(getattr(handler, "stream", None) or sys.stderr)
        copy.setLevel(handler.level)
        copy.setFormatter(handler.formatter)
        for log_filter in handler.filters:
            copy.addFilter(log_filter)
        self._originals[copy] = handler
        return copy

    def restore(self) -> None:
        originals = self._originals
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
            if isinstance(logger, logging.Logger) and any(h in originals for h in logger.handlers):
                logger.handlers = [originals.get(h, h) for h in logger.handlers]
        logging.lastResort = self._last_resort


def _is_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) in (sys.stdout, sys.stderr)


class ProgressDisplay:
    """The parent's display: an overall bar plus a bar per active run.

    Args:
        num_runs: runs in the experiment.
        total: budget of one run, in ``unit``.
        unit: ``episodes`` or ``steps``.
        slots: how many runs can go at once (the workers), where it is known.
    """

    def __init__(self, num_runs: int, total: int, unit: str, slots: int | None = None) -> None:
        global _told_about_widgets
        self.num_runs, self.total, self.unit = num_runs, total, unit
        # Text bars in a notebook without ipywidgets, or written to a file or a CI log, keep to the overall
        # bar: the per-run bars move the cursor with escape codes, which only a terminal understands.
        in_notebook = _text_in_notebook()
        self.one_line = in_notebook or (_text_bars() and not _terminal())
        # A log (a file, a CI log) gets a line when a run ends or goes back to the queue, and every 30 s: a run's start
        # and where it resumes show at the next one (drawn each, a requeued run's restart made two lines a second
        # apart, and a wait() that followed runs under way a line per run: tester S18).
        self.quiet_starts = self.one_line and not in_notebook
        if in_notebook and not _told_about_widgets:
            _told_about_widgets = True
            logger.warning(
                "Jupyter without ipywidgets: the progress display keeps to one line of text; "
                "pip install ipywidgets (the package's `notebook` extra) for a bar per run."
            )
        self.bars: dict[int, Any] = {}
        self.positions: dict[int, int] = {}
        # A log line goes above the bars in a terminal, and, in a notebook, after the text bar's line is cleared:
        # written as it comes, it was glued to the bar's text. A file gets each bar state on a line of its own.
        self._logs = _LogsAboveBars() if _text_bars() and (in_notebook or (_terminal() and not self.one_line)) else None
        self.done = 0
        self.requeued: dict[int, int] = {}  # runs whose job went back to the queue after they started: their progress
        self.restarting: dict[int, int] = {}  # requeued runs started again: their progress until they first report
        self.stopped = False  # a run failed before its first env step: the call stops
        self.ended_as: dict[str, int] = {}  # runs that did not finish, by their status
        self._before = False  # inside done_before(): progress counts as made before the bars started
        self.overall = _bar(
            total=num_runs * total,
            unit=unit,
            desc="all runs",
            postfix=self._overall_postfix(),
            **({} if self.one_line else {"position": 0}),
        )
        # A Jupyter widget shows where the cell's output has reached when it is made: a run's bar made as the run
        # started landed below the log lines written before it. Widget bars are made here, below the overall bar,
        # one for each run that can go at once; hidden while no run holds them, and reused run after run.
        self._idle: list[tuple[int, Any]] = []  # (slot, bar), the highest slot first
        if not _text_bars() and slots:
            for slot in range(1, min(slots, num_runs) + 1):
                bar = _bar(total=total, unit=unit, desc="", position=slot, leave=False)
                bar.container.layout.display = "none"
                self._idle.append((slot, bar))
        self._slots: dict[int, int] = {}  # run key -> the slot its bar came from

    def open_run(self, key: int, name: str, total: int, unit: str) -> DirectRunProgress:
        """Show a run (in-process runs report through the returned object)."""
        self._start(key, name)
        return DirectRunProgress(self, key)

    def _start(self, key: int, name: str) -> None:
        # its job runs again: what it showed stays on the overall bar until it reports where it stands (its
        # checkpoint), then comes off in the same redraw (taken off here, the count dropped for a redraw: S11)
        restarting = self.requeued.pop(key, None)
        if restarting is not None:
            self.restarting[key] = restarting
        if key in self.bars:  # started again (its Slurm job requeued): it reports where it stands, from its checkpoint
            bar = self.bars[key]
            self._take_back(bar)
            return
        taken = set(self.positions.values())
        position = next(p for p in range(1, len(taken) + 2) if p not in taken)
        self.positions[key] = position
        if self.one_line:
            self.bars[key] = _Tally(self.total)
            if not self.quiet_starts:
                self._refresh_overall()
            else:
                self.overall.set_postfix_str(self._overall_postfix(), refresh=False)
            return
        if self._idle:
            self._slots[key], bar = self._idle.pop(0)
            bar.reset(total=self.total)
            bar.set_postfix_str("", refresh=False)
            bar.set_description(name, refresh=True)
            bar.container.layout.display = None
            self.bars[key] = bar
            return
        self.bars[key] = _bar(total=self.total, unit=self.unit, desc=name, position=position, leave=False)

    def advance(self, key: int, amount: int, last_return: float | None, last_eval: float | None = None) -> None:
        """Move run ``key`` forward by ``amount`` and show its last return (and last evaluation mean)."""
        bar = self.bars.get(key)
        if bar is None:
            return
        restarting = self.restarting.pop(key, 0)
        if restarting:  # a requeued run's first report: what it showed before comes off as what it reports goes on
            _lower(self.overall, restarting)
        if last_return is not None:
            evaluated = f", eval={last_eval:.4g}" if last_eval is not None else ""
            bar.set_postfix_str(f"return={last_return:.4g}{evaluated}", refresh=False)
        amount = min(amount, bar.total - bar.n)  # a step budget overshoots by less than num_envs steps
        if amount > 0 and self._before:
            for shown in (bar, self.overall):
                _start_from(shown, amount)
        elif amount > 0:
            bar.update(amount)
            self.overall.update(amount)
        elif not self._before:
            bar.refresh()
        if (
            restarting and not self._before and not self.quiet_starts
        ):  # drawn now: the count it showed is replaced, not waiting for a tick
            self.overall.refresh()

    def resume_at(self, key: int, amount: int) -> None:
        """Run ``key`` resumes ``amount`` in (its checkpoint): counted as done before its bar and the overall bar
        started, so that their rates and times are those of the steps run now."""
        bar = self.bars.get(key)
        if bar is None:
            return
        restarting = self.restarting.pop(key, 0)
        if restarting:  # a requeued run resuming: what it showed before comes off as where it resumes goes on
            _lower(self.overall, restarting)
        amount = min(amount, bar.total - bar.n)
        if amount > 0:
            for shown in (bar, self.overall):
                _start_from(shown, amount)
        if not self._before and not self.quiet_starts:
            bar.refresh()
            self.overall.refresh()

    def run_finished(self, key: int, status: str) -> None:
        """Remove run ``key``'s bar and count it on the overall bar by its manifest ``status`` (``"finished"``,
        ``"stopped_early"`` by a hook, ``"failed"``, ``"interrupted"``); ``"setup_failed"`` (before its first env
        step) stops the call, and the bar says so."""
        restarting = self.restarting.pop(key, 0)
        if restarting:  # started again and ended before it reported: its bar counts what it did
            _lower(self.overall, restarting)
        bar = self.bars.get(key)
        if bar is not None:
            if status == "finished" and bar.n < bar.total:  # step budgets may end a few steps early on the bar
                self.overall.update(bar.total - bar.n)
            elif (
                status in ("stopped_early", "failed") and bar.n < bar.total
            ):  # stopped by a hook, or failed: what it left is
                # not to come (counted as done, it made the rate look twice as fast; left in, a time still to go)
                self.overall.total -= bar.total - bar.n
                _widget(self.overall, max=self.overall.total)
            self._remove_bar(key)
        elif status in ("stopped_early", "failed"):  # it never started (a Slurm job cancelled while queued), or was
            # requeued and then cancelled: what it did not do is not to come (S21: the bar ended at 67%)
            self.overall.total -= self.total - self.requeued.get(key, 0)
            _widget(self.overall, max=self.overall.total)
        self.requeued.pop(key, None)
        if status == "setup_failed":  # the call stops here: no run ended, none will
            self.stopped = True
            self._refresh_overall()
            return
        self.done += 1
        if status != "finished":
            self.ended_as[status] = self.ended_as.get(status, 0) + 1
        self._refresh_overall()

    def ended_before(self, status: str, amount: int) -> None:
        """A run that had ended before this display followed its runs (a Slurm handle's ``wait()`` made later) counts
        as ended by its manifest ``status``, ``amount`` episodes or env steps in: a finished run's budget as done before
        the bars started; what a run that failed or stopped early left off the total, as :meth:`run_finished` does (S18:
        a job cancelled while queued was left out of the runs counted, and of the failed)."""
        done = self.total if status == "finished" else min(max(int(amount), 0), self.total)
        _start_from(self.overall, done)
        if status in ("stopped_early", "failed") and done < self.total:
            self.overall.total -= self.total - done
            _widget(self.overall, max=self.overall.total)
        self.done += 1
        if status != "finished":
            self.ended_as[status] = self.ended_as.get(status, 0) + 1
        if not self._before:
            self._refresh_overall()

    def run_requeued(self, key: int) -> None:
        """Run ``key`` started, and its Slurm job is back in the queue (``scontrol requeue``, a preemption, a time
        limit): its bar goes and it is counted as requeued, its progress kept on the overall bar until the run
        starts again and reports where it stands (its checkpoint). Nothing for a run without a bar (not started, or
        ended)."""
        bar = self.bars.get(key)
        if bar is None:
            return
        self.requeued[key] = bar.n + self.restarting.pop(key, 0)  # requeued again before it reported
        self._remove_bar(key)
        self._refresh_overall()

    def _take_back(self, bar: Any) -> None:
        """Take ``bar``'s progress off it and off the overall bar (work the run will report again)."""
        amount = bar.n
        _lower(bar, amount)
        self._take_off_overall(amount)

    def _take_off_overall(self, amount: int) -> None:
        _lower(self.overall, amount)
        if not self._before and not self.quiet_starts:
            self.overall.refresh()

    def _remove_bar(self, key: int) -> None:
        bar = self.bars.pop(key)
        self.positions.pop(key, None)
        if key in self._slots:
            bar.refresh()  # its last state, as a saved notebook keeps it (J13: a finished run's label read 73%)
            bar.container.layout.display = "none"
            self._idle.append((self._slots.pop(key), bar))
            self._idle.sort(key=lambda idle: idle[0])
        else:
            bar.close()

    def _overall_postfix(self) -> str:
        if self.stopped:
            return "stopped: a run failed before its first env step (the error follows)"
        how = "".join(f", {count} {status.replace('_', ' ')}" for status, count in sorted(self.ended_as.items()))
        running = f", {len(self.bars)} running" if self.one_line and self.bars else ""
        queued = f", {len(self.requeued)} requeued" if self.requeued else ""
        return f"{self.done}/{self.num_runs} runs ended{how}{running}{queued}"

    def _refresh_overall(self) -> None:
        # After the last run, close_all() draws the final state: drawn here too, a log would show it twice.
        self.overall.set_postfix_str(self._overall_postfix(), refresh=self.done < self.num_runs)

    def handle(self, message: tuple) -> None:
        """Apply a message sent by :class:`QueueRunProgress` from a worker."""
        kind, key, *payload = message
        if kind == "start":
            self._start(key, *payload)
        elif kind == "progress":
            self.advance(key, *payload)
        elif kind == "resumed":
            self.resume_at(key, *payload)

    @contextlib.contextmanager
    def done_before(self) -> Iterator[None]:
        """Progress reported inside counts as done before now: the bars start from it, their rates and times from
        here, drawn once at the end (runs under way that this process began to follow read their progress so far at
        once: drawn as it came, a bar showed millions of steps a second, then went back to 0)."""
        self._before = True
        try:
            yield
        finally:
            self._before = False
            for bar in (self.overall, *self.bars.values()):
                bar.refresh()

    def close_all(self) -> None:
        """Close every bar."""
        for bar in [*self.bars.values(), *(bar for _, bar in self._idle)]:
            bar.close()
        self.bars.clear()
        self._idle.clear()
        if self.ended_as.get("failed"):  # not the green of a call whose every run finished
            _widget(self.overall, bar_style="danger")
        self.overall.close()
        if self._logs is not None:
            self._logs.restore()
            self._logs = None


class DirectRunProgress:
    """A run in this process reporting straight to the display."""

    def __init__(self, display: ProgressDisplay, key: int) -> None:
        self.display, self.key = display, key
        self.last_return: float | None = None
        self.last_eval: float | None = None

    def advance(self, amount: int) -> None:
        self.display.advance(self.key, amount, self.last_return, self.last_eval)

    def resume_at(self, amount: int) -> None:
        self.display.resume_at(self.key, amount)

    def episode_end(self, ep_return: float) -> None:
        self.last_return = ep_return

    def eval_end(self, mean_return: float) -> None:
        self.last_eval = mean_return

    def close(self) -> None:
        if self.last_return is not None:
            self.display.advance(self.key, 0, self.last_return, self.last_eval)


class QueueProgress:
    """Worker side: runs report over ``queue`` to the parent's :class:`ProgressDisplay`."""

    def __init__(self, queue: Any, interval: float = 0.2) -> None:
        self.queue, self.interval = queue, interval

    def open_run(self, key: int, name: str, total: int, unit: str) -> QueueRunProgress:
        self.queue.put(("start", key, name))
        return QueueRunProgress(self.queue, key, self.interval)


class QueueRunProgress:
    """Sends a run's progress at most every ``interval`` seconds."""

    def __init__(self, queue: Any, key: int, interval: float) -> None:
        self.queue, self.key, self.interval = queue, key, interval
        self.pending = 0
        self.last_return: float | None = None
        self.last_eval: float | None = None
        self.last_sent = 0.0

    def advance(self, amount: int) -> None:
        self.pending += amount
        now = time.monotonic()
        if now - self.last_sent >= self.interval:
            self._send(now)

    def resume_at(self, amount: int) -> None:
        self.queue.put(("resumed", self.key, amount))

    def episode_end(self, ep_return: float) -> None:
        self.last_return = ep_return

    def eval_end(self, mean_return: float) -> None:
        self.last_eval = mean_return

    def _send(self, now: float) -> None:
        self.queue.put(("progress", self.key, self.pending, self.last_return, self.last_eval))
        self.pending = 0
        self.last_sent = now

    def close(self) -> None:
        self._send(time.monotonic())
