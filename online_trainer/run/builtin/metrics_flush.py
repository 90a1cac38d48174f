"""The built-in hook that moves a run's episode records to ``metrics_run{i}.pkl``: when, and in what chunks."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.hook_protocol import Hook, RunContext
from online_trainer.records import storage
from online_trainer.run.builtin.episode_log import EpisodeLog

FLUSH_SECONDS = 1.0  # while episodes end, records reach the disk at least this often
# Records per metrics chunk and sub-env, unless the user says how many. The one-second flush bounds what a crash
# loses; this bounds the records held between flushes (keep_records=False) and spares fast envs a chunk every few
# episodes (each chunk costs a pickle and a write: 10 per sub-env cost CartPole a point of overhead).
FLUSH_PER_SUB_ENV = 100


class MetricsFlush(Hook):
    """Writes the records of the run's table (``tracker.table``) to its metrics stream, in chunks.

    The records reach ``metrics_run{i}.pkl`` in chunks of ``flush_every`` records (episodes
    that end on one step share a chunk), at once when an episode kept frames (frames go to the
    stream only), at least every :data:`FLUSH_SECONDS` while episodes end, and when the run
    ends; each chunk's returns and lengths go to the run's callback then (``episode_log``).
    Without a stream or a callback, and with ``keep_records``, it looks at no episode: the
    table is sealed when the run ends. With ``keep_records=False`` the flushed records leave memory.

    Args:
        tracker: the run's episode tracker (its table holds the records).
        stream: the run's metrics stream, or None (no ``exp_dir``, or ``dump_metrics=False``).
        flush_every: records per chunk (default: :data:`FLUSH_PER_SUB_ENV` per sub-env).
        keep_records: the run hands its records back in memory.
        episode_log: sends each chunk's returns and lengths to the run's callback too (None: no callback).
    """

    def __init__(
        self,
        tracker: EpisodeTracker,
        stream: storage.MetricsStream | None,
        flush_every: int | None,
        keep_records: bool,
        episode_log: EpisodeLog | None = None,
    ) -> None:
        self.tracker, self.stream, self.keep_records, self.episode_log = tracker, stream, keep_records, episode_log
        self.flush_every = flush_every or FLUSH_PER_SUB_ENV * tracker.num_envs
        self.flushed = 0  # records of the table written to the stream (or sealed)
        self.next_flush = self.flush_every
        self.flush_deadline = time.monotonic() + FLUSH_SECONDS
        self.closed = False
        # records that stay in memory only, and reach no callback, are sealed when the run ends
        quiet = stream is None and keep_records and episode_log is None
        self.handles = frozenset({"on_run_end"} if quiet else {"on_episodes", "on_run_end"})

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        if ctx.episodes >= self.next_flush or self.tracker.new_frames or time.monotonic() >= self.flush_deadline:
            self.flush()

    def flush(self) -> None:
        """Write the records not yet in the stream as one chunk (frames then leave memory)."""
        tracker, table = self.tracker, self.tracker.table
        tracker.seal()
        if table.count > self.flushed:
            start, held = self.flushed, slice(self.flushed - table.first, table.count - table.first)
            try:
                if self.stream is not None:
                    self.stream.write(table.chunk(start, table.count))
            finally:
                self.flushed = table.count
                self.next_flush = table.count + self.flush_every
                self.flush_deadline = time.monotonic() + FLUSH_SECONDS
                if tracker.new_frames and self.stream is not None:  # frames are kept in the stream only
                    table.drop_extra("frames")
                tracker.new_frames = False
                # the chunk's episodes for the callback (list slices: copies, kept when the table is cleared)
                log = self.episode_log
                episodes = None if log is None else (table.returns[held], table.lengths[held], table.times[held])
                if not self.keep_records:
                    table.clear()
                if log is not None and episodes is not None:  # last: a sink that raises leaves the book-keeping done
                    log.send(start, *episodes)

    def on_run_end(self, ctx: RunContext) -> None:
        """Every record is on disk before the rest of the run's ending (and the user's ``on_run_end``)."""
        self.flush()

    def close(self) -> None:
        """Flush what is left and close the stream, however the run ended (once)."""
        if self.closed:
            return
        self.closed = True
        try:
            self.flush()
        finally:
            if self.stream is not None:
                self.stream.close()

    def state_dict(self) -> dict[str, Any]:
        """``flushed``: records written so far; ``next_flush``: the record count that makes the next chunk."""
        return {"flushed": self.flushed, "next_flush": self.next_flush}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.flushed, self.next_flush = int(state["flushed"]), int(state["next_flush"])
