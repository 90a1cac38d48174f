"""A run's records held as columns: handed out, pickled into chunks and all_metrics.pkl, as the same dicts."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from online_trainer import TruncatedMetricsWarning, load_run_metrics
from online_trainer.loop.accounting import EpisodeTracker
from online_trainer.loop.action_history import ActionHistory
from online_trainer.records import storage
from online_trainer.records.episode_table import RECORD_KEYS, EpisodeTable, dump_runs
from tests.conftest import expected_record, filled_table, same_values

KINDS = ["discrete", "box", "dict", "none", "slabs"]


@pytest.mark.parametrize("kind", KINDS)
def test_records_chunks_and_all_metrics_hold_the_same_dicts(kind):
    table, expected = filled_table(kind)
    assert same_values(table.records(), expected)
    assert list(table.records()[0]) == list(RECORD_KEYS)
    for start, stop in [(0, table.count), (0, 1), (5, 17), (17, table.count), (39, 40), (40, table.count)]:
        assert same_values(pickle.loads(table.chunk(start, stop)), expected[start:stop])
        assert same_values(table.records(start, stop), expected[start:stop])
    assert same_values(pickle.loads(dump_runs([table, None, expected[:2]])), [expected, None, expected[:2]])
    assert same_values(pickle.loads(pickle.dumps(table)).records(), expected)  # how a worker sends it back


def test_every_record_gets_its_own_lists():
    table, _ = filled_table("discrete")
    for records in (table.records(), pickle.loads(table.chunk(0, table.count))):
        records[0]["frames"].append("x")
        records[0]["transitions"].append("y")
        assert all(r["frames"] == [] for r in records[1:4]) and all(r["transitions"] == [] for r in records[1:4])


def test_clear_forgets_held_records_and_numbering_goes_on():
    table, expected = filled_table("discrete")
    count = table.count
    table.clear()
    assert len(table) == 0 and table.count == count == len(expected) and table.records() == []
    table.add_one(1.0, 2, 500, 250.0, np.array([1, 0]))
    assert same_values(table.records(), [expected_record(count, 1.0, 2, 500, np.array([1, 0]))])
    assert same_values(pickle.loads(table.chunk(count, count + 1)), table.records())
    with pytest.raises(IndexError, match="not held"):
        table.records(count - 1, count + 1)


@pytest.mark.parametrize(
    "actions",
    [
        np.array([0, 1, 1, 0, 1, 0], dtype=np.int64),  # Discrete: int64, values that fit a byte
        np.array([-5, 300, 0, 7, -128, 127], dtype=np.int64),
        np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0, 1, 2, 3], dtype=np.int64),
        np.array([np.iinfo(np.uint64).max, 0, 1, 2, 3, 4], dtype=np.uint64),
        np.array([0, 1, 2, 3, 2, 1], dtype=np.dtype(">i4")),
        np.array([30000, -30000, 1, 2, 3, 4], dtype=np.dtype(">i2")),  # nothing narrower: kept as it is
        np.array([1, 0, 1, 1, 0, 0], dtype=np.int8),  # MultiBinary
        np.array([0.5, -1.0, 2.0, 0.0, 1.0, 3.0], dtype=np.float32),
    ],
)
def test_integer_actions_are_stored_narrow_and_load_with_their_own_dtype(actions):
    one, two = EpisodeTable(0), EpisodeTable(0)  # the episodes added at once, and one by one
    one.add([1.0, 2.0], [4, 2], [4, 6], [0.1, 0.2], actions)
    two.add([1.0], [4], [4], [0.1], actions[:4])
    two.add([2.0], [2], [6], [0.2], actions[4:])
    for table in (one, two):
        for loaded in (pickle.loads(table.chunk(0, 2)), pickle.loads(dump_runs([table]))[0]):
            assert same_values([r["actions"] for r in loaded], [actions[:4], actions[4:]])
        assert same_values(pickle.loads(table.chunk(1, 2))[0]["actions"], actions[4:])


def test_discrete_actions_take_a_byte_each_in_the_files():
    table = EpisodeTable(0)
    actions = np.random.default_rng(0).integers(2, size=20_000)  # int64, as Discrete samples them
    table.add([1.0] * 1000, [20] * 1000, list(range(20, 20_001, 20)), [0.0] * 1000, actions)
    wide = actions.nbytes  # 160 kB as int64, 20 kB as bytes; the other columns take about 26 kB
    assert len(table.chunk(0, 1000)) < wide / 3 and len(dump_runs([table])) < wide / 3
    assert same_values(np.concatenate([r["actions"] for r in pickle.loads(table.chunk(0, 1000))]), actions)


@pytest.mark.parametrize("kind", ["discrete", "slabs"])
@pytest.mark.parametrize("name", ["chunk.pkl", "all_metrics.pkl"])
def test_chunks_and_all_metrics_load_with_pickle_alone(tmp_path, kind, name):
    """The files do not need this package: they build their dicts with builtins and numpy."""
    table, expected = filled_table(kind)
    table.drop_extra("frames")  # all_metrics.pkl then holds the chunks themselves
    path = tmp_path / name
    chunk = table.chunk(0, table.count)
    path.write_bytes(chunk if name == "chunk.pkl" else dump_runs([table]))
    code = (
        "import sys, pickle; sys.modules['online_trainer'] = None; "
        f"records = pickle.load(open({str(path)!r}, 'rb')); "
        f"records = records[0] if {name == 'all_metrics.pkl'} else records; "
        "print(len(records), records[1]['episode_index'], records[1]['actions'].tolist(), "
        "'online_trainer' in sys.modules and sys.modules['online_trainer'] is not None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == [str(len(expected)), "2"] and out[-1] == "False"
    assert "".join(out[2:-1]) == str(expected[1]["actions"].tolist()).replace(" ", "")


@pytest.mark.parametrize("kind", KINDS)
def test_all_metrics_holds_the_chunks_when_they_hold_the_whole_run_without_frames(kind):
    table, expected = filled_table(kind)
    table.drop_extra("frames")
    expected = [{**record, "frames": []} for record in expected]
    chunks = [table.chunk(start, stop) for start, stop in [(0, 12), (12, 30), (30, table.count)]]
    written = dump_runs([table, None])
    assert all(chunk in written for chunk in chunks)  # copied, not pickled again
    assert same_values(pickle.loads(written), [expected, None])
    table.release_chunks()  # after all_metrics.pkl is written: from the columns again
    assert not any(chunk in dump_runs([table]) for chunk in chunks)
    assert same_values(pickle.loads(dump_runs([table]))[0], expected)


def test_all_metrics_is_pickled_from_the_columns_when_the_chunks_do_not_hold_the_run():
    with_frames, expected = filled_table("discrete")  # a chunk with frames (they stay in the stream only)
    chunk = with_frames.chunk(0, with_frames.count)
    assert chunk not in dump_runs([with_frames]) and same_values(pickle.loads(dump_runs([with_frames]))[0], expected)
    for ranges in ([(0, 12), (30, 40)], [(0, 12), (0, 12)], [(0, 12)]):  # a gap, twice the same, not to the end
        table, expected = filled_table("discrete")
        table.drop_extra("frames")
        chunks = [table.chunk(start, stop) for start, stop in ranges]
        assert not any(chunk in dump_runs([table]) for chunk in chunks)
        assert same_values(pickle.loads(dump_runs([table]))[0], [{**r, "frames": []} for r in expected])


def test_a_stream_of_table_chunks_cut_anywhere_in_its_last_chunk_loads_its_complete_chunks(tmp_path):
    table, expected = filled_table("box")
    path = storage.metrics_path(tmp_path, 1)
    stream = storage.MetricsStream(path)
    for start, stop in [(0, 12), (12, 30), (30, table.count)]:
        stream.write(table.chunk(start, stop))
    stream.close()
    data = path.read_bytes()
    last = len(data) - len(table.chunk(30, table.count))
    assert same_values(load_run_metrics(tmp_path, 1), expected)
    for cut in range(last + 1, len(data), 7):
        path.write_bytes(data[:cut])
        with pytest.warns(TruncatedMetricsWarning, match="incomplete chunk"):
            assert same_values(load_run_metrics(tmp_path, 1), expected[:30])


ACTION_BATCHES = {  # num_envs actions a step, of the dtypes and ranges agents return
    "int64 pairs": lambda rng, n: rng.integers(0, 100, size=(n, 2)),
    "int64 needing 32 bits": lambda rng, n: rng.integers(-(2**20), 2**20, size=n) * rng.integers(0, 2, size=n),
    "big-endian int32": lambda rng, n: rng.integers(-300, 300, size=n).astype(">i4"),
    "uint64 extremes": lambda rng, n: rng.choice(np.array([0, 1, 2**64 - 1], dtype=np.uint64), size=n),
    "float32 boxes": lambda rng, n: rng.normal(size=(n, 3)).astype(np.float32),
    "int8 multibinary": lambda rng, n: rng.integers(0, 2, size=(n, 4)).astype(np.int8),
}


@pytest.mark.parametrize("batch", list(ACTION_BATCHES))
@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_episodes_closed_together_keep_their_actions_through_buffer_compactions(mode, batch):
    """Episodes closed in batches, their actions copied out late (after the buffer was compacted and grown)."""
    num_envs, rng = 5, np.random.default_rng(4)
    tracker = EpisodeTracker(num_envs, mode)
    tracker.actions = ActionHistory(num_envs, capacity=4)  # compacts and grows often
    current = [[] for _ in range(num_envs)]
    expected = []
    for step in range(1, 400):
        actions = ACTION_BATCHES[batch](rng, num_envs)
        valid = tracker.valid.copy()
        ends = rng.random(num_envs) < (0.02 if step < 100 else 0.3)  # long episodes first, then short ones
        terminated = ends & valid
        tracker.observe(None, actions, np.ones(num_envs), terminated, np.zeros(num_envs, dtype=bool))
        for i in np.flatnonzero(valid):
            current[i].append(actions[i])
        if tracker.ended:
            envs = tracker.done.nonzero()[0].tolist()
            returns, lengths = tracker.close(envs, step)
            assert lengths == [len(current[i]) for i in envs] and returns == lengths
            for i in envs:
                kept = np.array(current[i], dtype=actions.dtype).reshape(-1, *actions.shape[1:])
                expected.append((len(current[i]), kept, step))
                current[i] = []
        tracker.end_step(tracker.ended)
        if step % 37 == 0:
            tracker.seal()
    tracker.seal()
    records = tracker.table.records()
    assert len(records) == len(expected) > 100 and max(n for n, _, _ in expected) > 20
    count = tracker.table.count
    assert same_values(pickle.loads(tracker.table.chunk(0, count)), records)
    for start, stop in [(0, 1), (3, 40), (40, count - 1), (count - 1, count)]:
        assert same_values(pickle.loads(tracker.table.chunk(start, stop)), records[start:stop])
    assert same_values(pickle.loads(dump_runs([tracker.table]))[0], records)
    assert same_values(pickle.loads(pickle.dumps(tracker.table)).records(), records)
    for index, (record, (length, actions, step)) in enumerate(zip(records, expected), start=1):
        assert record["episode_index"] == index and record["global_step"] == step and record["ep_length"] == length
        np.testing.assert_array_equal(record["actions"], actions)
        assert record["actions"].dtype == actions.dtype


def test_action_history_copies_closed_episodes_into_a_narrow_slab_and_skips_empty_ones():
    history = ActionHistory(3, capacity=8)
    rows = [np.arange(6).reshape(3, 2) + 10 * t for t in range(5)]  # (num_envs, 2) actions a step
    for row in rows[:3]:
        history.append(row)
    assert history.close([0, 2], 0) == [3, 3]
    assert history.close([0], 0) == [0]  # sub-env 0 closes again before its next action
    for row in rows[3:]:
        history.append(row)
    with pytest.raises(ValueError, match=r"envs=\[1, 0\] must be ascending"):
        history.close([1, 0], 1)
    lengths = [3, 3, 0] + history.close([0, 1], 1)
    assert lengths == [3, 3, 0, 2, 5]
    slabs = history.take()  # two: the empty episode made the first episodes leave the buffer early
    expected = [
        [rows[t][0] for t in range(3)],
        [rows[t][2] for t in range(3)],
        [],
        [rows[t][0] for t in range(3, 5)],
        [rows[t][1] for t in range(5)],
    ]
    got, episode = [], 0
    for slab in slabs:
        assert slab.dtype == np.int64 and slab.data.dtype == np.uint8  # the values fit a byte
        for end in slab.ends:
            got.append(slab.data[end - lengths[episode] : end].astype(slab.dtype))
            episode += 1
    assert same_values(got, [np.array(e, dtype=np.int64).reshape(-1, 2) for e in expected])
    assert [len(slab.data) for slab in slabs] == [3 + 3, 2 + 5]  # each sub-env's rows once a slab
    assert history.take() == []


def test_the_stream_gets_a_chunk_per_flush_every_records_and_at_least_every_second(tmp_path, monkeypatch):
    from online_trainer import OnlineTrainer
    from online_trainer.run.builtin import metrics_flush
    from tests.conftest import RecordingAgent, make_counting_vec

    def chunk_sizes(exp_dir):
        return [len(c) for c in storage.iter_metrics_chunks(storage.metrics_path(exp_dir, 1))]

    trainer = OnlineTrainer(make_counting_vec(3), RecordingAgent, exp_dir=tmp_path / "default")
    (records,) = trainer.multi_run(1, num_episodes=700, seed_offset=0, progress=False)
    sizes = chunk_sizes(tmp_path / "default")
    assert (
        sum(sizes) == 700 and len(sizes) >= 3 and all(size >= 300 for size in sizes[:-1])
    )  # 100 per sub-env, whole steps
    monkeypatch.setattr(metrics_flush, "FLUSH_SECONDS", 0.0)  # a slow run: every step's episodes at once
    trainer = OnlineTrainer(make_counting_vec(3), RecordingAgent, exp_dir=tmp_path / "slow")
    (slow,) = trainer.multi_run(1, num_episodes=100, seed_offset=0, progress=False, metrics_flush_every=1000)
    sizes = chunk_sizes(tmp_path / "slow")
    assert sum(sizes) == 100 and len(sizes) == len({r["global_step"] for r in slow})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert same_values(load_run_metrics(tmp_path / "slow", 1), slow)
