"""Metric streams survive crashes; loaders say what is missing."""

from __future__ import annotations

import pickle

import pytest

from online_trainer import TruncatedMetricsWarning, load_all_run_metrics, load_args, load_config, load_run_metrics
from online_trainer.storage import MetricsStream


def test_stream_is_chunked_and_exclusive(tmp_path):
    stream = MetricsStream(tmp_path / "metrics_run0.pkl", flush_every=3)
    for i in range(7):
        stream.append({"episode_index": i + 1})
    assert len(load_run_metrics(tmp_path, 0)) == 6  # two full chunks on disk before close
    stream.close()
    assert [r["episode_index"] for r in load_run_metrics(tmp_path, 0)] == list(range(1, 8))
    with pytest.raises(FileExistsError):
        MetricsStream(tmp_path / "metrics_run0.pkl")


def test_truncated_stream_yields_complete_chunks_with_warning(tmp_path):
    path = tmp_path / "metrics_run0.pkl"
    with open(path, "wb") as f:
        pickle.dump([{"episode_index": 1}, {"episode_index": 2}], f)
        pickle.dump([{"episode_index": 3}], f)
        partial = pickle.dumps([{"episode_index": 4, "payload": "x" * 100}])
        f.write(partial[: len(partial) // 2])
    with pytest.warns(TruncatedMetricsWarning, match=r"metrics_run0.pkl ends in an incomplete chunk"):
        records = load_run_metrics(tmp_path, 0)
    assert [r["episode_index"] for r in records] == [1, 2, 3]


def test_missing_things_raise_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"Experiment directory .*nowhere does not exist"):
        load_all_run_metrics(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"No metrics stream at .*metrics_run3.pkl"):
        load_run_metrics(tmp_path, 3)
    with pytest.raises(FileNotFoundError, match=r"No metrics_run\*.pkl in"):
        load_all_run_metrics(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"No args.yaml at"):
        load_args(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"No config.py at"):
        load_config(tmp_path)
