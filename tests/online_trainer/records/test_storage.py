"""Metric streams survive crashes; loaders say what is missing."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from online_trainer import TruncatedMetricsWarning, load_all_run_metrics, load_args, load_config, load_run_metrics
from online_trainer.records import storage
from online_trainer.records.episode_table import dump_runs
from online_trainer.records.storage import MetricsStream
from tests.conftest import filled_table, same_values

same = same_values


def test_stream_is_chunked_and_exclusive(tmp_path):
    stream = MetricsStream(tmp_path / "metrics_run1.pkl", flush_every=3)
    for i in range(7):
        stream.append({"episode_index": i + 1})
    assert len(load_run_metrics(tmp_path, 1)) == 6  # two full chunks on disk before close
    stream.close()
    assert [r["episode_index"] for r in load_run_metrics(tmp_path, 1)] == list(range(1, 8))
    with pytest.raises(FileExistsError):
        MetricsStream(tmp_path / "metrics_run1.pkl")


def test_truncated_stream_yields_complete_chunks_with_warning(tmp_path):
    path = tmp_path / "metrics_run1.pkl"
    with open(path, "wb") as f:
        pickle.dump([{"episode_index": 1}, {"episode_index": 2}], f)
        pickle.dump([{"episode_index": 3}], f)
        partial = pickle.dumps([{"episode_index": 4, "payload": "x" * 100}])
        f.write(partial[: len(partial) // 2])
    with pytest.warns(TruncatedMetricsWarning, match=r"metrics_run1.pkl ends in an incomplete chunk"):
        records = load_run_metrics(tmp_path, 1)
    assert [r["episode_index"] for r in records] == [1, 2, 3]


def test_a_stream_damaged_in_its_middle_is_not_called_cut_by_a_kill(tmp_path):
    """8 bytes of garbage at byte 3000 of a stream: the loaders said it "ends in an incomplete chunk ... probably
    killed while writing", and left 95% of it unread (tester F3)."""
    path = tmp_path / "metrics_run1.pkl"
    chunks = [pickle.dumps([{"episode_index": i, "ep_return": float(i)}]) for i in range(1, 41)]
    data = bytearray(b"".join(chunks))
    at = sum(map(len, chunks[:3])) + 5
    data[at : at + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    with pytest.warns(TruncatedMetricsWarning) as said:
        records = load_run_metrics(tmp_path, 1)
    assert [r["episode_index"] for r in records] == [1, 2, 3]
    start = sum(map(len, chunks[:3]))
    assert (
        f"metrics_run1.pkl cannot be read from byte {start} on" in str(said[0].message)
        and f"and {len(data) - start} of its {len(data)} bytes are left unread" in str(said[0].message)
        and "the file is damaged there" in str(said[0].message)
        and "put back a copy" in str(said[0].message)
    )


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


def original_record(episode_index, ep_return, ep_length):
    """An episode record as the original OnlineTrainer wrote it (no global_step, no wall_time)."""
    return {
        "ep_return": ep_return,
        "ep_length": ep_length,
        "frames": [],
        "transitions": [],
        "actions": [0] * ep_length,
        "agent_seed": 0,
        "episode_index": episode_index,
        "agent_logs": None,
    }


def test_loaders_read_an_experiment_of_the_original_trainer(tmp_path):
    # The original appends one pickled list per flush to metrics_run{i}.pkl, runs numbered from 1, no manifest.
    for run, chunks in {1: [[(1, 10.0, 10), (2, 12.0, 12)], [(3, 9.0, 9)]], 2: [[(1, 30.0, 30)]]}.items():
        with open(tmp_path / f"metrics_run{run}.pkl", "ab") as f:
            for chunk in chunks:
                pickle.dump([original_record(*episode) for episode in chunk], f)
    first = load_run_metrics(tmp_path, 1)
    assert [(r["episode_index"], r["ep_return"]) for r in first] == [(1, 10.0), (2, 12.0), (3, 9.0)]
    assert [[r["ep_length"] for r in run] for run in load_all_run_metrics(tmp_path)] == [[10, 12, 9], [30]]


def streamed_record(index, length):
    return {
        "ep_return": float(length),
        "ep_length": length,
        "frames": [],
        "transitions": [],
        "actions": np.arange(length, dtype=np.int64) % 2,
        "agent_seed": 3,
        "episode_index": index,
        "agent_logs": None,
        "global_step": 5 * index,
        "wall_time": 0.25 * index,
    }


def write_stream(path, records, flush_every):
    stream = MetricsStream(path, flush_every=flush_every)
    for record in records:
        stream.append(record)
    stream.close()


def test_a_stream_cut_anywhere_in_its_last_chunk_loads_its_complete_chunks(tmp_path):
    records = [streamed_record(i, 3 + i % 7) for i in range(1, 26)]
    path = tmp_path / "metrics_run1.pkl"
    write_stream(path, records, flush_every=10)
    data = path.read_bytes()
    last = len(data) - len(pickle.dumps(records[20:], 5))
    assert same(load_run_metrics(tmp_path, 1), records)
    for cut in range(last + 1, len(data)):  # a run killed while its last chunk was being written
        path.write_bytes(data[:cut])
        with pytest.warns(TruncatedMetricsWarning, match="incomplete chunk"):
            assert same(load_run_metrics(tmp_path, 1), records[:20])


def test_all_metrics_holds_the_runs(tmp_path):
    runs = [[streamed_record(i, i % 4) for i in range(1, 24)], None, [], [streamed_record(1, 2)]]
    storage.write_all_metrics(tmp_path, runs)
    assert same(pickle.loads((tmp_path / storage.ALL_METRICS_FILE).read_bytes()), runs)


def test_all_metrics_is_pickled_straight_into_the_file_as_dump_runs_pickles_it(tmp_path):
    table, expected = filled_table("box")
    runs = [table, None, expected[:3]]
    storage.write_all_metrics(tmp_path, runs)
    written = (tmp_path / storage.ALL_METRICS_FILE).read_bytes()
    assert written == dump_runs(runs)
    assert same_values(pickle.loads(written), [expected, None, expected[:3]])


def test_write_atomic_takes_bytes_pieces_or_a_writer(tmp_path):
    path = tmp_path / "file.bin"
    storage.write_atomic(path, b"bytes")
    assert path.read_bytes() == b"bytes"
    storage.write_atomic(path, [b"pie", memoryview(b"ces")])
    assert path.read_bytes() == b"pieces"
    storage.write_atomic(path, lambda f: f.write(b"written"))
    assert path.read_bytes() == b"written"


def test_write_atomic_leaves_the_file_as_it_was_when_the_writer_fails(tmp_path):
    path = tmp_path / "file.bin"
    path.write_bytes(b"before")

    def half_then_fail(f):
        f.write(b"half")
        raise pickle.PicklingError("cannot pickle this")

    with pytest.raises(pickle.PicklingError, match="cannot pickle this"):
        storage.write_atomic(path, half_then_fail)
    assert path.read_bytes() == b"before" and sorted(p.name for p in tmp_path.iterdir()) == ["file.bin"]

    def full_disk(f):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match=r"could not write .*file.bin: No space left on device\. Free some space"):
        storage.write_atomic(path, full_disk)
    assert path.read_bytes() == b"before" and sorted(p.name for p in tmp_path.iterdir()) == ["file.bin"]


def test_existing_experiment_files_are_the_experiments_names_and_no_others(tmp_path):
    """M22: ``metrics_run*.pkl`` globbed a user's ``metrics_run1_old.pkl``, which overwrite=True then deleted."""
    ours = [
        "manifest.json", "all_metrics.pkl", "metrics_run3.pkl", "eval_run1.pkl", "Run2_E30", "Run1_S500.t",
        "Run1_Last_agent.t", "Run1_Last", "Run1_Best_agent.t", "Run4_Resume.pkl", "Run4_Resume_agent.pt",
        "events.out.tfevents.1.host.2.000000", "log.jsonl", "scores.csv", "mlflow.db", "wandb", "slurm", "videos",
    ]  # fmt: skip
    theirs = [
        ".lock", ".hidden.csv", "notes.txt", "config.yaml", "run1.pkl", "metrics_run1_old.pkl", "metrics_run2-copy.pkl",
        "metrics_run1.pkl.orig", "all_metrics_old.pkl", "eval_runs.pkl", "Run1_Evaluation.txt", "Run1_Lastly",
        "Run1_Resume.pkl.bak", "RunA_Last", "manifest.json.bak",
    ]  # fmt: skip
    for name in ours + theirs:
        (tmp_path / name).write_text("x")
    assert storage.existing_experiment_files(tmp_path) == sorted(tmp_path / name for name in ours)
    assert storage.existing_experiment_files(tmp_path / "missing") == []
    assert storage.existing_experiment_files(tmp_path / "notes.txt") == []
