"""TensorBoard callbacks: averaged and buffered (:class:`TBCallBack`) or direct (:class:`BasicCallBack`)."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from online_trainer.callbacks.base import AgentLogger, CallBack, StepLogger, scalar_name
from online_trainer.callbacks.event_file import EventFileWriter, ScalarEncoder, image_event
from online_trainer.callbacks.rewind import (
    as_file_position,
    belongs,
    check_file_position,
    event_records,
    position,
    rewind_files,
)
from online_trainer.callbacks.scalar_batch import ScalarBatch
from online_trainer.callbacks.tb_layout import LAYOUT_FILE, LAYOUT_METRICS, write_layout
from online_trainer.options import validation


class TBCallBack(CallBack):
    """Writes scalars to TensorBoard event files, averaging each tag over ``flush_every`` calls.

    Values of one ``tag`` are summed per key; on every ``flush_every``-th call with that tag
    their means are written at the step of that call. ``force=True`` writes the given values
    at once, unaveraged (episode summaries use it). Written values are kept as numbers and
    encoded in batches (:mod:`online_trainer.callbacks.scalar_batch`, well under a microsecond a scalar);
    they reach the file every 1024 scalars (50 to 64 KiB), at least every ``max_delay``
    seconds when a forced write comes, and on :meth:`close`. The event file is created by the
    first of these writes.

    Args:
        log_dir: directory of the event files (created on the first write).
        flush_every: number of calls per tag averaged into one point; 1 writes every call. The calls since a
            tag's last point when its run ends are averaged into one more, at the step of the last of them.
        max_delay: seconds after which a forced write also flushes the file, so TensorBoard
            shows progress while a run goes on.
        layout_metrics: the metrics of TensorBoard's Custom Scalars tab, one chart each with every
            run overlaid (the chart of ``ep_return`` shows ``ep_return/run_.*``). Names are the
            metrics' (as CSV, MLflow and W&B name them): ``"agents/loss"`` charts the agent's ``loss``. The
            layout is written once per ``log_dir``, with the first event file (by whichever
            process opens one first), in ``events.out.tfevents.0.custom_scalars_layout``; the
            scalars keep their own tags.
    """

    _unpicklable = ("_writer", "_batch")
    _BATCH_EVENTS = 1024
    """Events kept before they are encoded and written to the file (50 to 64 KiB of records)."""

    def __init__(
        self,
        log_dir: str | os.PathLike,
        flush_every: int = 1,
        max_delay: float = 2.0,
        layout_metrics: Sequence[str] = LAYOUT_METRICS,
    ) -> None:
        flush_every = validation.positive_int("flush_every", flush_every)
        if isinstance(layout_metrics, str) or not all(isinstance(m, str) and m for m in layout_metrics):
            raise ValueError(
                f"layout_metrics must be a list of metric names, but got layout_metrics={layout_metrics!r}:"
                " e.g. ['ep_return', 'agents/loss']."
            )
        self.layout_metrics = tuple(layout_metrics)
        self.log_dir = os.fspath(log_dir)
        self.flush_every = flush_every
        self.max_delay = max_delay
        self._writer: EventFileWriter | None = None
        self._batch = ScalarBatch()
        self._pending: dict[str, tuple[dict[str, float], list[int]]] = {}
        self._restored: set[str] = set()  # tags whose pending sums a resumed run's rewind gave back (see reset)
        self._last_flush = 0.0

    def start_run(
        self, run_idx: int, seed: int, params: Mapping[str, Any], exp_dir: str | None, run_tag: str = ""
    ) -> None:
        """Name the run's scalars after its tag part (``agents/loss/lr=0.1/run_1`` in a sweep)."""
        self._batch.run_tag = run_tag or f"run_{run_idx}"

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        if force:
            self._batch.add(data, tag, step)
            now = time.time()
            if now - self._last_flush > self.max_delay:
                self._flush()
                self._last_flush = now
            return
        if self.flush_every > 1:
            means = self._average(data, tag, step)
            if means is None:
                return
            data = means
        if self._batch.add(data, tag, step) >= self._BATCH_EVENTS:
            self._write_batch()

    def step_logger(self, tag: str) -> AgentLogger:
        """The agent's ``call_back`` (see :meth:`online_trainer.callbacks.CallBack.step_logger`): with
        ``flush_every=1``, one that keeps each dict in the batch in one call."""
        if self.flush_every > 1:
            return StepLogger(self, tag)
        return self._batch.step_logger(tag, self._BATCH_EVENTS, self._write_batch)

    def series(
        self, key: str, tag: str, values: Sequence[Any], steps: Sequence[int], wall_times: Sequence[float] | None = None
    ) -> None:
        """Keep every value of ``key`` as a forced point, at once (see :meth:`online_trainer.callbacks.CallBack.series`)."""
        if len(values) == 0:
            return
        self._batch.add_series(key, tag, values, steps, wall_times)
        now = time.time()
        if now - self._last_flush > self.max_delay:
            self._flush()
            self._last_flush = now

    def _average(self, data: Mapping[str, Any], tag: str, step: int) -> dict[str, float] | None:
        """Add ``data`` to the sums of ``tag``; on its ``flush_every``-th call return the means."""
        pending = self._pending.get(tag)
        if pending is None:
            pending = self._pending[tag] = ({}, [0, step])
        sums, count = pending
        for key, value in data.items():
            sums[key] = sums.get(key, 0.0) + value
        count[0] += 1
        count[1] = step
        if count[0] < self.flush_every:
            return None
        means = {key: total / count[0] for key, total in sums.items()}
        sums.clear()
        count[0] = 0
        return means

    def _add_partial_means(self, run_tag: str | None = None) -> None:
        """Keep the means of the calls of each tag since its last point (fewer than ``flush_every``: a run's last
        values were never written, tester D16), at the step of the last of them: of the tags of ``run_tag``, or of
        every tag (None)."""
        for tag, (sums, count) in self._pending.items():
            if count[0] and (run_tag is None or belongs(tag, run_tag)):
                self._batch.add({key: total / count[0] for key, total in sums.items()}, tag, count[1])
                sums.clear()
                count[0] = 0
                self._restored.discard(tag)

    def _write_batch(self) -> EventFileWriter:
        """Encode the values kept and write them to the file (opened on the first write); return its writer."""
        writer = self._writer
        if writer is None:
            self._open_layout()
            writer = self._writer = EventFileWriter(self.log_dir, buffer_bytes=0)  # the batch is the buffer
        writer.write(self._batch.encode())
        return writer

    def _open_layout(self) -> None:
        """Write the custom-scalars layout into ``log_dir`` unless one is there (see ``layout_metrics``)."""
        if self.layout_metrics:
            write_layout(self.log_dir, self.layout_metrics)

    def video(self, tag: str, frames: Sequence[Any], fps: float, step: int) -> None:
        """Write ``frames`` as an animated GIF under ``tag`` (TensorBoard's Images tab plays it).

        TensorBoard has no video summary; an animated GIF in an image summary is what
        ``torch.utils.tensorboard``'s ``add_video`` writes too (with moviepy; here Pillow, which
        matplotlib installs). It goes to the file at once, with the scalars kept so far.
        """
        if len(frames) == 0:
            return
        encoded, (height, width, channels) = encode_gif(frames, fps)
        writer = self._write_batch()  # opens the file if needed, and keeps the events in order
        writer.write(image_event(tag, encoded, height, width, channels, step, time.time()))
        writer.flush()

    def _flush(self) -> None:
        """Write everything kept to the file and flush it to the operating system."""
        self._write_batch().flush()

    def reset(self) -> None:
        """Drop the sums of calls pending from an earlier run, but those a resumed run's :meth:`rewind` gave back."""
        self._pending = {tag: pending for tag, pending in self._pending.items() if tag in self._restored}

    def end_run(self, run_idx: int, status: str) -> None:
        """Write everything kept: the manifest says a run finished only once its points are in the file (a process
        killed between two runs kept up to 1023 of them, whose run no resume redoes), the means of fewer than
        ``flush_every`` calls since the last point included."""
        self._add_partial_means(self._batch.run_tag or None)
        if self._batch.count:
            self._flush()

    def checkpoint(self, run_tag: str) -> dict[str, Any]:
        """Write everything kept; the position is this process's event file and its size, and the
        other event files of ``log_dir`` as they are (see :mod:`online_trainer.callbacks.rewind`)."""
        if self._batch.count or self._writer is not None:
            self._flush()
        path = None if self._writer is None else self._writer.path
        state = position(path, self._event_files()).to_state()
        state["flush_every"] = self.flush_every  # what the points are: each value, or means of so many
        # the calls of the run's tags since their last point: a resume averages on from them (tester V16: without
        # them every later window was shifted, and the resumed run's points differed from an uninterrupted run's)
        state["pending"] = {
            tag: [dict(sums), count[0], count[1]]
            for tag, (sums, count) in self._pending.items()
            if count[0] and belongs(tag, run_tag)
        }
        return state

    def check_position(self, position: Mapping[str, Any] | None) -> None:
        """Raise ``ValueError`` unless ``position`` is None or where this sink's files stood, written with this
        ``flush_every``."""
        check_file_position(position, is_event_file, self.log_dir)
        held = None if position is None else position.get("flush_every")
        if held is not None and held != self.flush_every:
            raise ValueError(
                f"the run's checkpoint was written with flush_every={held}, but this TBCallBack has "
                f"flush_every={self.flush_every}: the run's points after the checkpoint would be "
                f"{'means of ' + str(self.flush_every) + ' values' if self.flush_every > 1 else 'every value'}, "
                f"and those before it {'means of ' + str(held) + ' values' if held > 1 else 'every value'}. "
                f"Resume with TBCallBack(..., flush_every={held})."
            )

    def rewind(self, run_tag: str, position: Mapping[str, Any] | None, since: float | None = None) -> None:
        """Remove the run's events written after ``position`` (all of them when None) from the event files; events
        written before ``since`` (the Unix time the run's experiment was created) are not the run's, whatever their
        tag (a ``log_dir`` experiments share)."""
        # Another process may be writing an event file (a restarted Slurm job cuts back while others run): its last
        # record may be on its way, not torn. The run's own files are written by no one any more.
        at = as_file_position(position)
        rewind_files(self._event_files(), run_tag, at, event_records, drop_torn=False, since=since)
        for tag in [tag for tag in self._pending if belongs(tag, run_tag)]:
            del self._pending[tag]
            self._restored.discard(tag)
        for tag, (sums, count, step) in ((position or {}).get("pending") or {}).items():
            self._pending[tag] = ({str(k): float(v) for k, v in sums.items()}, [int(count), int(step)])
            self._restored.add(tag)

    def written_files(self) -> list[str]:
        """The event files of ``log_dir`` (see :meth:`online_trainer.callbacks.CallBack.written_files`)."""
        return [str(path) for path in self._event_files() if path.stat().st_size > 0]

    def _event_files(self) -> list[Path]:
        if not os.path.isdir(self.log_dir):
            return []
        return sorted(path for path in Path(self.log_dir).glob("events.out.tfevents.*") if is_event_file(path.name))

    def close(self) -> None:
        try:
            self._add_partial_means()
            if self._batch.count:
                self._write_batch()
        finally:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                writer.close()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_restored", set())  # pickled by a release that kept none
        self._batch = ScalarBatch()  # values kept by the original belong to its own file

    def __repr__(self) -> str:
        return f"{type(self).__name__}(log_dir={self.log_dir!r}, flush_every={self.flush_every})"


def is_event_file(name: str) -> bool:
    """Whether ``name`` is that of an event file of scalars (the custom-scalars layout file aside)."""
    return name.startswith("events.out.tfevents.") and name != LAYOUT_FILE


def encode_gif(frames: Sequence[Any], fps: float) -> tuple[bytes, tuple[int, int, int]]:
    """``frames`` (H x W x 3 or 4 uint8 arrays, or H x W grey) as a looping GIF; return it and its shape.

    A frame the same as the one before it is merged into it (their durations add up), so a
    still scene decodes to fewer frames that play as long. Browsers slow down GIFs faster than
    50 frames a second, so ``fps`` is capped there.
    """
    from PIL import Image

    images = []
    for frame in frames:
        array = np.asarray(frame)
        if array.ndim == 3:
            array = array[..., :3] if array.shape[2] >= 3 else array[..., 0]
        images.append(Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8)))
    buffer = io.BytesIO()
    images[0].save(
        buffer, format="GIF", save_all=True, append_images=images[1:], loop=0, duration=max(20, round(1000 / fps))
    )
    channels = 3 if images[0].mode == "RGB" else 1
    return buffer.getvalue(), (images[0].height, images[0].width, channels)


class BasicCallBack(TBCallBack):
    """Writes every value to TensorBoard as it comes, with no averaging and no buffering.

    Slower than :class:`TBCallBack`; use it when every point must be on disk at once.
    """

    series = CallBack.series  # one write per value, as it comes

    def __init__(self, log_dir: str | os.PathLike) -> None:
        super().__init__(log_dir, flush_every=1, max_delay=0.0)
        self._encoder = ScalarEncoder()
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        if not data:
            return
        writer = self._writer
        if writer is None:
            self._open_layout()
            writer = self._writer = EventFileWriter(self.log_dir)
        key = (tag, *data)
        names = self._names.get(key)
        if names is None:
            names = self._names[key] = tuple(scalar_name(k, tag, self._batch.run_tag) for k in data)
        writer.write(self._encoder.encode(names, data.values(), step, time.time()))
        writer.flush()

    def __repr__(self) -> str:
        return f"BasicCallBack(log_dir={self.log_dir!r})"
