"""Keeping a per-run store (MLflow, W&B) exact across a kill and a resume.

Such a store cannot be cut back the way a file is (:mod:`online_trainer.callbacks.rewind`):
MLflow deletes no metric point, W&B none of a run's history. So a sink that writes to one
keeps a :class:`PointLedger` of what the run has logged; at a full checkpoint it sends what
it buffered and hands back the ledger's :class:`StorePosition` as plain data
(:meth:`StorePosition.to_state`, which the run's full checkpoint keeps). When the run resumes, the
sink reads what the store holds for it and makes a :class:`Resumption` of it:

- points past the checkpoint that the store holds already (sent before the interruption)
  are not sent again when the resumed run logs them (matched by name, x and order at that x);
- points up to the checkpoint that the store lacks (a store that writes behind, as W&B's
  service, loses what it had not written when it is killed) are sent again from the
  position's tail, the last points sent before the checkpoint;
- what cannot be made exact is logged as a warning naming the sink, the run, the metric and
  the range: points lost before the tail, points held twice, and points past the checkpoint
  that the store holds with another value than the resumed run logs (a resumed run that is
  not deterministic).

The steps of a metric must not decrease (the runner's never do: episode index, env step).
``stats/`` and ``timing/`` values are wall-clock figures logged every so many seconds: the
store keeps those of the interrupted attempt past the checkpoint as well, without a warning.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from online_trainer.callbacks.rewind import held_by

logger = logging.getLogger(__name__)

Point = tuple[str, float, float]
"""``(name, x, value)``: a metric point as a store holds it."""

WALL_CLOCK = ("stats/", "timing/")
"""Name prefixes of values that differ between any two runs (SPS, timing shares)."""


@dataclass(frozen=True)
class StorePosition:
    """What a per-run store held at a run's checkpoint (the sink's ``checkpoint`` returns its :meth:`to_state`).

    Attributes:
        counts: metric name -> (points logged so far, x of the last one).
        axes: metric name -> what its x is (``episode`` or ``step``), for messages.
        tail: the last points sent before the checkpoint, oldest first (a store that writes behind).
        sink: the kind of store (``MLflow``, ``W&B``); empty in checkpoints written before it was kept.
    """

    counts: dict[str, tuple[int, float]]
    axes: dict[str, str] = field(default_factory=dict)
    tail: tuple[Point, ...] = ()
    sink: str = ""

    KIND: ClassVar[str] = "store"
    """The ``kind`` of its :meth:`to_state`, which tells it from another sink's position."""

    def to_state(self) -> dict[str, Any]:
        """The position as plain data: dicts, lists, strings and numbers."""
        return {
            "kind": self.KIND,
            "counts": {name: [count, x] for name, (count, x) in self.counts.items()},
            "axes": dict(self.axes),
            "tail": [[name, x, value] for name, x, value in self.tail],
            "sink": self.sink,
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> StorePosition:
        """The position :meth:`to_state` described."""
        return cls(
            {str(name): (int(count), x) for name, (count, x) in state["counts"].items()},
            {str(name): str(axis) for name, axis in state["axes"].items()},
            tuple((str(name), x, value) for name, x, value in state["tail"]),
            str(state.get("sink", "")),
        )


class PointLedger:
    """The points a run has logged so far, per metric name; the last ``tail`` of them when asked."""

    def __init__(self, tail: int = 0, position: StorePosition | None = None) -> None:
        self.counts: dict[str, tuple[int, float]] = dict(position.counts) if position is not None else {}
        self.axes: dict[str, str] = dict(position.axes) if position is not None else {}
        self.tail: collections.deque[Point] | None = (
            collections.deque(position.tail if position is not None else (), maxlen=tail) if tail else None
        )

    def add(self, name: str, x: float, value: float) -> None:
        """Count one point (sent or already held)."""
        count = self.counts.get(name)
        self.counts[name] = (1 if count is None else count[0] + 1, x)
        if self.tail is not None:
            self.tail.append((name, x, value))

    def position(self) -> StorePosition:
        return StorePosition(dict(self.counts), dict(self.axes), tuple(self.tail) if self.tail is not None else ())


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class Resumption:
    """What a resumed run sends again, and what it must not send twice (see the module docstring).

    Args:
        sink: the sink's name, for messages (``MLflow run 'abc'``).
        run_tag: the run's tag (``run_3``).
        held: every point the store holds for the run, in the order it holds them.
        position: the checkpoint's :class:`StorePosition`; None: the run starts again from its first step.
    """

    def __init__(self, sink: str, run_tag: str, held: Iterable[Point], position: StorePosition | None) -> None:
        self.sink, self.run_tag = sink, run_tag
        self.axes = dict(position.axes) if position is not None else {}
        counts = position.counts if position is not None else {}
        before: collections.Counter[tuple[str, float]] = collections.Counter()
        held_before: collections.Counter[str] = collections.Counter()
        self.skip: dict[str, dict[float, list[float]]] = {}
        for name, x, value in held:
            mark = counts.get(name)
            if mark is not None and x <= mark[1]:
                before[(name, x)] += 1
                held_before[name] += 1
            else:
                self.skip.setdefault(name, {}).setdefault(x, []).append(value)
        self.resend: list[Point] = []
        for name, x, value in position.tail if position is not None else ():
            if before[(name, x)] > 0:
                before[(name, x)] -= 1
            else:
                self.resend.append((name, x, value))
        resent = collections.Counter(name for name, _, _ in self.resend)
        first_in_tail: dict[str, float] = {}
        for name, x, _ in position.tail if position is not None else ():
            first_in_tail.setdefault(name, x)
        for name, (count, last) in counts.items():
            missing = count - held_before[name] - resent[name]
            if missing > 0:
                bound = (
                    f"before {self.axis(name)} {first_in_tail[name]:g}"
                    if name in first_in_tail
                    else f"up to {self.axis(name)} {last:g}"
                )
                logger.warning(
                    "%s, %s: the store lacks %d of the %d points of %r logged %s (the run resumes from "
                    "its checkpoint at %s %g); they are in neither the store nor the checkpoint, and are not "
                    "sent again",
                    sink,
                    run_tag,
                    missing,
                    count,
                    name,
                    bound,
                    self.axis(name),
                    last,
                )
            elif missing < 0:
                logger.warning(
                    "%s, %s: the store holds %d points of %r logged up to %s %g, %d more than the run "
                    "logged: some were sent twice before this resume and stay there",
                    sink,
                    run_tag,
                    held_before[name] + resent[name],
                    name,
                    self.axis(name),
                    last,
                    -missing,
                )
        self.mismatched: dict[str, list[float]] = {}  # name -> [first x, last x, count]

    def axis(self, name: str) -> str:
        return self.axes.get(name, "step")

    def keep(self, name: str, x: float, value: float) -> bool:
        """Whether to send a point the resumed run logs (False: the store holds it already)."""
        at = self.skip.get(name)
        if at is None:
            return True
        held = at.get(x)
        if not held:
            return True
        if not _same(held.pop(0), value) and not name.startswith(WALL_CLOCK):
            seen = self.mismatched.get(name)
            if seen is None:
                self.mismatched[name] = [x, x, 1]
            else:
                seen[1], seen[2] = x, seen[2] + 1
        if not held:
            del at[x]
            if not at:
                del self.skip[name]
        return False

    @property
    def done(self) -> bool:
        """Whether every point held past the checkpoint was met (nothing left to skip)."""
        return not self.skip

    def report(self) -> None:
        """Warn about points held past the checkpoint with another value than the resumed run logged."""
        for name, (first, last, count) in self.mismatched.items():
            logger.warning(
                "%s, %s: %d points of %r from %s %g to %g were in the store already, sent before the "
                "interruption, with other values than the resumed run logged (it is not deterministic); "
                "the store keeps the earlier values",
                self.sink,
                self.run_tag,
                count,
                name,
                self.axis(name),
                first,
                last,
            )
        self.mismatched = {}


def check_store_position(position: object, sink: str) -> None:
    """Raise ``ValueError`` unless ``position`` is None or what a ``sink`` store's checkpoint returned (a position
    of another kind of store, or of a file sink: the run resumes with other callbacks than it ran with, and the
    store would lack every point before the checkpoint)."""
    if position is None:
        return
    if isinstance(position, Mapping) and position.get("kind") == StorePosition.KIND:
        if position.get("sink", "") in ("", sink):
            return
    raise ValueError(
        f"the run's checkpoint holds {held_by(position)}, but this sink logs to {sink}: resume with the callbacks "
        "the experiment ran with, in the same order."
    )


def as_position(state: object) -> StorePosition | None:
    """The :class:`StorePosition` a checkpoint kept for a sink (its :meth:`~StorePosition.to_state`); None when it
    kept none, or another kind of position (the run's points are then matched as those of a run that starts again)."""
    if isinstance(state, Mapping) and state.get("kind") == StorePosition.KIND:
        return StorePosition.from_state(state)
    return None
