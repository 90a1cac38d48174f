"""The interface every logging sink implements."""

from __future__ import annotations

from typing import Any, Mapping, Sequence


class CallBack:
    """A logging sink: ``cb(data, tag, step, force=False)``, ``reset()``, ``close()``.

    Subclasses open their writer lazily on the first write, so a callback can be pickled
    (or cloudpickled to a worker process) until then; a pickled copy never carries an open
    file and opens its own on its first write.
    """

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        """Log the scalars of ``data`` as ``{key}/{tag}`` at ``step``.

        Args:
            data: metric name to a number (Python or numpy scalar).
            tag: the group the values belong to, for example ``run_0`` or ``agents/run_0``.
            step: the x value of the point (env step or episode index).
            force: write these values as they are, bypassing any averaging; a sink that
                buffers may still hold them until its next flush (``TBCallBack`` flushes
                on such a call once ``max_delay`` seconds have passed since the last).
        """

    def series(self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int]) -> None:
        """Log ``values[j]`` of the scalar ``key`` at ``steps[j]``, each as a forced point.

        The runner logs the returns and lengths of the episodes that ended on one env step
        this way (``ep_return`` under ``ep_return/run_{i}``, with the episode indices as steps).
        This default makes one call per value; sinks that buffer take them all at once.
        """
        for value, step in zip(values, steps):
            self({key: value}, tag, step, force=True)

    def video(self, tag: str, frames: Sequence[Any], fps: float, step: int) -> None:
        """Log a video: ``frames`` (H x W x 3 uint8 arrays) to play at ``fps``, at ``step``.

        Optional: the runner calls it, when the callback has it, with each evaluation video
        (``record_video``) under ``eval/video/run_{i}`` at the env step. This one drops it;
        :class:`online_trainer.callbacks.TBCallBack` writes an animated GIF.
        """

    def reset(self) -> None:
        """Drop values averaged but not yet written (called when a run starts)."""

    def close(self) -> None:
        """Write everything buffered and release files. The callback may be used again."""

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self._unpicklable:
            state[name] = None
        return state

    _unpicklable: tuple[str, ...] = ()


def scalar_name(key: str, tag: str) -> str:
    """Name under which ``key`` logged with ``tag`` appears.

    ``loss`` with ``agents/run_1`` is ``loss/agents/run_1``; a tag that already holds the key
    as one of its parts names the scalar itself: ``ep_return`` with ``ep_return/run_1`` is
    ``ep_return/run_1``, and with ``eval/ep_return/run_1`` it is ``eval/ep_return/run_1``.
    """
    if not tag or tag == key:
        return key
    return tag if key in tag.split("/") else f"{key}/{tag}"
