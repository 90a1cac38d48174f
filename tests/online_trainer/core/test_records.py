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
from online_trainer.core import storage
from online_trainer.core.actions import ActionHistory
from online_trainer.core.episodes import EpisodeTracker
from online_trainer.core.records import READ_BLOCK, RECORD_KEYS, EpisodeTable, RunRecords, as_records, dump_runs
from tests.conftest import same_values


def expected_record(position, ep_return, length, step, actions, seed=3, **extras):
    record = {"ep_return": ep_return, "ep_length": length, "frames": [], "transitions": [], "actions": actions,
              "agent_seed": seed, "episode_index": position + 1, "agent_logs": None, "global_step": step,
              "wall_time": 0.5 * step}
    record.update(extras)
    return record


def filled_table(kind: str) -> tuple[EpisodeTable, list[dict]]:
    """A table of 40 episodes added one by one and in batches, with extras here and there."""
    rng = np.random.default_rng(0)
    table, expected = EpisodeTable(3), []

    def actions_of(length):
        if kind == "discrete":
            return rng.integers(0, 4, size=length)
        if kind == "box":
            return rng.normal(size=(length, 2)).astype(np.float32)
        if kind == "dict":
            return {"move": rng.integers(0, 2, size=length), "aim": rng.normal(size=(length, 3))}
        return None

    while table.count < 40:
        lengths = rng.integers(1, 9, size=int(rng.integers(1, 4))).tolist()
        returns = rng.normal(size=len(lengths)).tolist()
        step = 10 * table.count
        episode_actions = [actions_of(n) for n in lengths]
        first = table.count
        if len(lengths) == 1 and rng.random() < 0.5:
            table.add_one(returns[0], lengths[0], step, 0.5 * step, episode_actions[0])
        else:
            batch = (np.concatenate(episode_actions) if kind in ("discrete", "box")
                     else None if kind == "none" else episode_actions)
            table.add(np.array(returns), np.array(lengths), [step] * len(lengths), [0.5 * step] * len(lengths), batch)
        for j, (ret, n, acts) in enumerate(zip(returns, lengths, episode_actions)):
            extras = {}
            if (first + j) % 7 == 3:
                extras["agent_logs"] = {"loss": np.arange(n, dtype=np.float32)}
                table.set_extra("agent_logs", first + j, extras["agent_logs"])
            if (first + j) % 11 == 5:
                extras["frames"] = [np.full((2, 2, 3), first + j, dtype=np.uint8)]
                table.set_extra("frames", first + j, extras["frames"])
            if (first + j) % 13 == 0:
                extras["transitions"] = [(np.zeros(2), 0, 1.0, False, False)] * n
                table.set_extra("transitions", first + j, extras["transitions"])
            expected.append(expected_record(first + j, ret, n, step, acts, **extras))
    return table, expected


KINDS = ["discrete", "box", "dict", "none"]


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


def same_read(a, b):
    """same_values for what a RunRecords hands out: its action arrays are read-only views."""
    return same_values(a, b, writeable=False)


def test_as_records_takes_tables_lists_and_none():
    table, expected = filled_table("box")
    run = as_records(table)
    assert isinstance(run, RunRecords) and same_read(list(run), expected)
    assert as_records(expected) is expected and as_records(None) is None


@pytest.mark.parametrize("kind", ["discrete", "box", "dict", "none"])
def test_run_records_read_like_the_list_of_records(kind):
    table, expected = filled_table(kind)
    run = RunRecords(table)
    assert len(run) == len(expected) == table.count
    assert same_read(list(run), expected)
    assert same_read(run[0], expected[0]) and same_read(run[-1], expected[-1]) and same_read(run[17], expected[17])
    assert same_read(run[5:12], expected[5:12]) and same_read(run[::7], expected[::7])
    assert same_read(run[-3:], expected[-3:]) and run[30:10] == [] and same_read(run[38:99], expected[38:])
    assert same_read(run[::-1], expected[::-1])
    assert run == RunRecords(table) and run != expected[:-1] and run != "not records" and (run == 3) is False
    if kind == "none":  # records with arrays compare as a list of them does: numpy refuses ==
        assert run == expected and expected == run and tuple(expected) == run and expected[4] in run
        changed = [dict(r) for r in expected]
        changed[9]["ep_length"] += 1
        assert run != changed and changed != run
    assert same_read(run + [{"x": 1}], expected + [{"x": 1}]) and same_read([{"x": 1}] + run, [{"x": 1}] + expected)
    n = len(expected)
    with pytest.raises(IndexError, match=f"record index {n} out of range: the run has {n} episode records"):
        run[n]
    with pytest.raises(IndexError, match=f"record index {-n - 1} out of range"):
        run[-n - 1]
    with pytest.raises(TypeError):
        run["ep_return"]
    with pytest.raises(TypeError, match="unhashable"):
        hash(run)


def test_run_records_build_fresh_dicts_on_every_read():
    table, expected = filled_table("discrete")
    run = RunRecords(table)
    first = run[0]
    first["ep_return"] = 1e9
    assert run[0]["ep_return"] == expected[0]["ep_return"] and run[0] is not run[0]
    mine = list(run)
    mine[0]["note"] = "kept"
    assert mine[0]["note"] == "kept" and "note" not in run[0]


def test_run_records_actions_are_read_only_views():
    """A read hands out views of the run's actions: they cannot change what the next read sees."""
    table, expected = filled_table("discrete")
    run = RunRecords(table)
    mine = list(run)
    with pytest.raises(ValueError, match="read-only"):
        mine[0]["actions"][:] = 9
    copy = mine[0]["actions"].copy()
    copy[:] = 9
    assert same_read(run[0]["actions"], expected[0]["actions"])
    assert pickle.loads(pickle.dumps(run))[0]["actions"].flags.writeable


def test_run_records_columns_without_dicts():
    table, expected = filled_table("box")
    run = RunRecords(table)
    for key, dtype in (("ep_return", np.float64), ("ep_length", np.int64), ("global_step", np.int64),
                       ("wall_time", np.float64), ("episode_index", np.int64)):
        column = run.column(key)
        assert isinstance(column, np.ndarray) and column.dtype == dtype
        assert column.tolist() == [r[key] for r in expected]
    assert run.column("agent_seed").tolist() == [3] * len(expected)
    assert same_read(run.column("actions"), [r["actions"] for r in expected])
    assert same_read(run.column("agent_logs"), [r["agent_logs"] for r in expected])
    with pytest.raises(KeyError, match="column\\('return'\\): not a record key; the keys are"):
        run.column("return")


def test_run_records_pickle_as_a_plain_list_and_iterate_in_blocks():
    table = EpisodeTable(5)
    count = 2 * READ_BLOCK + 3
    table.add(np.arange(count, dtype=np.float64), np.ones(count, dtype=np.int64), np.arange(count), np.zeros(count),
              np.arange(count))
    run = RunRecords(table)
    records = list(run)
    assert [r["episode_index"] for r in records] == list(range(1, count + 1))
    assert [int(r["actions"][0]) for r in records] == list(range(count))
    loaded = pickle.loads(pickle.dumps(run))
    assert type(loaded) is list and same_read(loaded, records)
    assert repr(run) == f"<RunRecords: {count} episode records of the run with seed 5>"


def test_run_records_of_a_table_that_forgot_its_first_records():
    table, expected = filled_table("discrete")
    table.clear()
    table.add_one(2.0, 1, 900, 450.0, np.array([3]))
    run = RunRecords(table)
    n = len(expected)
    assert len(run) == 1 and run[0]["episode_index"] == n + 1 and run[-1]["ep_return"] == 2.0
    assert run.column("episode_index").tolist() == [n + 1]
    assert [r["episode_index"] for r in run] == [n + 1]


def test_chunks_load_with_pickle_alone(tmp_path):
    """The files do not need this package: the chunk builds its dicts with builtins and numpy."""
    table, expected = filled_table("discrete")
    path = tmp_path / "chunk.pkl"
    path.write_bytes(table.chunk(0, table.count))
    code = ("import sys, pickle; sys.modules['online_trainer'] = None; "
            f"records = pickle.load(open({str(path)!r}, 'rb')); "
            "print(len(records), records[1]['episode_index'], records[1]['actions'].tolist(), "
            "'online_trainer' in sys.modules and sys.modules['online_trainer'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:2] == [str(len(expected)), "2"] and out[-1] == "False"
    assert "".join(out[2:-1]) == str(expected[1]["actions"].tolist()).replace(" ", "")


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


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_episodes_closed_together_keep_their_actions_through_buffer_compactions(mode):
    """Episodes closed in batches, with their actions gathered late (after the buffer was compacted and grown)."""
    num_envs, rng = 5, np.random.default_rng(4)
    tracker = EpisodeTracker(num_envs, mode)
    tracker.actions = ActionHistory(num_envs, capacity=4)  # compacts and grows often
    current = [[] for _ in range(num_envs)]
    expected = []
    for step in range(1, 400):
        actions = rng.integers(0, 100, size=(num_envs, 2))
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
                expected.append((len(current[i]), np.array(current[i]).reshape(-1, 2), step))
                current[i] = []
        tracker.end_step(tracker.ended)
        if step % 37 == 0:
            tracker.seal()
    tracker.seal()
    records = tracker.table.records()
    assert len(records) == len(expected) > 100 and max(n for n, _, _ in expected) > 20
    for index, (record, (length, actions, step)) in enumerate(zip(records, expected), start=1):
        assert record["episode_index"] == index and record["global_step"] == step and record["ep_length"] == length
        np.testing.assert_array_equal(record["actions"], actions)


def test_the_stream_gets_a_chunk_per_flush_every_records_and_at_least_every_second(tmp_path, monkeypatch):
    from online_trainer import OnlineTrainer
    from online_trainer.core import run_events
    from tests.conftest import RecordingAgent, make_counting_vec

    def chunk_sizes(exp_dir):
        return [len(c) for c in storage.iter_metrics_chunks(storage.metrics_path(exp_dir, 1))]

    trainer = OnlineTrainer(make_counting_vec(3), RecordingAgent, exp_dir=tmp_path / "default")
    (records,) = trainer.multi_run(1, num_episodes=100, seed_offset=0, progress=False)
    sizes = chunk_sizes(tmp_path / "default")
    assert sum(sizes) == 100 and all(size >= 30 for size in sizes[:-1])  # 10 per sub-env, whole steps
    monkeypatch.setattr(run_events, "FLUSH_SECONDS", 0.0)  # a slow run: every step's episodes at once
    trainer = OnlineTrainer(make_counting_vec(3), RecordingAgent, exp_dir=tmp_path / "slow")
    (slow,) = trainer.multi_run(1, num_episodes=100, seed_offset=0, progress=False, metrics_flush_every=1000)
    sizes = chunk_sizes(tmp_path / "slow")
    assert sum(sizes) == 100 and len(sizes) == len({r["global_step"] for r in slow})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert same_values(load_run_metrics(tmp_path / "slow", 1), slow)
