"""A second Ctrl-C while the runs stop after the first: said, and let pass once.

People press Ctrl-C twice when the first does not seem to stop at once. The first stops the runs, and
what follows writes what they leave: each run's last records, the workers' flushes, the manifest's
``interrupted`` entries and the sinks' buffered points. A second KeyboardInterrupt broke that off half
way: the manifest kept the runs ``running`` and the sinks lost what they held.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

logger = logging.getLogger(__name__)


_STILL_STOPPING = (
    "Still stopping: the runs' last records, the manifest and the logs are being written (seconds at most). "
    "Press Ctrl-C again to stop at once, leaving them as they are."
)


@contextlib.contextmanager
def one_stop_per_press() -> Iterator[None]:
    """For a whole call: the first Ctrl-C raises ``KeyboardInterrupt`` as usual; the next is logged and let pass
    while the runs stop; the one after raises again (each :func:`finishing_the_stop` block lets one pass anew).

    :func:`finishing_the_stop` covers the blocks that write what stopped runs leave; a second press that came between
    them (the first ``KeyboardInterrupt`` delayed by C code, then the second a few milliseconds later) broke off the
    stop all the same. This handler has no such gaps. Only in the main thread, while SIGINT has Python's own handler
    (a notebook kernel's too); otherwise the block runs as it is.
    """
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    presses = [0]

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        presses[0] += 1
        if presses[0] == 2:
            logger.warning(_STILL_STOPPING)
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    _call_presses.append(presses)
    try:
        yield
    finally:
        _call_presses.pop()
        signal.signal(signal.SIGINT, signal.default_int_handler)


_call_presses: list[list[int]] = []  # the presses counted by the call's one_stop_per_press, while one runs


@contextlib.contextmanager
def finishing_the_stop(error: BaseException) -> Iterator[None]:
    """While the block writes what stopped runs leave after ``error``, a Ctrl-C is logged and let pass once; the
    next one raises ``KeyboardInterrupt`` at once, as usual.

    Only for a ``KeyboardInterrupt`` (Ctrl-C, a notebook's stop button, a preemption), in the main thread, while
    SIGINT has Python's own handler (a notebook kernel's too); otherwise, and within another such block, the
    block runs as it is.
    """
    if isinstance(error, KeyboardInterrupt) and _call_presses and threading.current_thread() is threading.main_thread():
        # each block lets one press pass, as outside a call (a stop not begun by Ctrl-C, a preemption, too)
        _call_presses[-1][0] = 1
    if (
        not isinstance(error, KeyboardInterrupt)
        or threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    pressed = [False]

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        if pressed[0]:
            raise KeyboardInterrupt
        pressed[0] = True
        logger.warning(_STILL_STOPPING)

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
