"""TensorBoard's custom-scalars layout: one chart per metric with every run overlaid.

The layout is a ``tensorboard.plugins.custom_scalar.layout_pb2.Layout`` in a string tensor
summary tagged ``custom_scalars__config__`` whose metadata names the plugin
``custom_scalars``: what ``tensorboard.plugins.custom_scalar.summary.pb`` makes (with
TensorFlow), built here from TensorBoard's own protos and framed as the other events.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from pathlib import Path

from online_trainer.callbacks.event_file import _record, version_record
from online_trainer.callbacks.files import create_with

LAYOUT_FILE = "events.out.tfevents.0.custom_scalars_layout"
"""The event file holding the layout (its name sorts first; ``overwrite=True`` removes it with the others)."""
LAYOUT_METRICS = ("ep_return", "ep_length", "eval/ep_return", "eval/ep_length")
"""The runner's own metrics, charted by default."""
CATEGORY = "runs overlaid"


def chart_regex(metric: str) -> str:
    """The regex of the scalars of ``metric`` in every run: ``ep_return/run_1``, ``ep_return/lr=0.1/run_2``..."""
    return rf"{re.escape(metric)}/(.+/)?run_\d+$"


def layout_event(metrics: Sequence[str], wall_time: float) -> bytes:
    """A framed event holding a layout with one multiline chart per metric."""
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    layout = layout_pb2.Layout(
        category=[
            layout_pb2.Category(
                title=CATEGORY,
                chart=[
                    layout_pb2.Chart(
                        title=metric, multiline=layout_pb2.MultilineChartContent(tag=[chart_regex(metric)])
                    )
                    for metric in metrics
                ],
            )
        ]
    )
    tensor = tensor_pb2.TensorProto(
        dtype=types_pb2.DT_STRING,
        string_val=[layout.SerializeToString()],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(),
    )
    summary = summary_pb2.Summary(
        value=[
            summary_pb2.Summary.Value(
                tag=metadata.CONFIG_SUMMARY_TAG, metadata=metadata.create_summary_metadata(), tensor=tensor
            )
        ]
    )
    return _record(event_pb2.Event(wall_time=wall_time, step=0, summary=summary).SerializeToString())


def write_layout(log_dir: str | os.PathLike, metrics: Sequence[str]) -> bool:
    """Write the layout of ``metrics`` into ``log_dir`` unless one is there; return whether this call wrote it."""
    if (Path(log_dir) / LAYOUT_FILE).exists():
        return False
    Path(log_dir).mkdir(parents=True, exist_ok=True)
    now = time.time()
    return create_with(Path(log_dir) / LAYOUT_FILE, version_record(now) + layout_event(metrics, now))
