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


@contextlib.contextmanager
def finishing_the_stop(error: BaseException) -> Iterator[None]:
    """While the block writes what stopped runs leave after ``error``, a Ctrl-C is logged and let pass once; the
    next one raises ``KeyboardInterrupt`` at once, as usual.

    Only for a ``KeyboardInterrupt`` (Ctrl-C, a notebook's stop button, a preemption), in the main thread, while
    SIGINT has Python's own handler (a notebook kernel's too); otherwise, and within another such block, the
    block runs as it is.
    """
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
        logger.warning(
            "Still stopping: the runs' last records, the manifest and the logs are being written (seconds at most). "
            "Press Ctrl-C again to stop at once, leaving them as they are."
        )

    signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
