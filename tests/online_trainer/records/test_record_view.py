"""RunRecords: a run's records as multi_run hands them back, read like the list of dicts they stand for."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from online_trainer.records.episode_table import EpisodeTable
from online_trainer.records.record_view import READ_BLOCK, LoadedRecords, RunRecords, as_records
from tests.conftest import filled_table, same_values


def same_read(a, b):
    """same_values for what a RunRecords hands out: its action arrays are read-only views."""
    return same_values(a, b, writeable=False)


def test_as_records_takes_tables_lists_and_none():
    table, expected = filled_table("box")
    run = as_records(table)
    assert isinstance(run, RunRecords) and same_read(list(run), expected)
    assert as_records(None) is None and as_records(run) is run
    loaded = as_records(expected)  # records read from a metrics file, or sent back by a worker
    assert isinstance(loaded, LoadedRecords) and isinstance(loaded, RunRecords) and same_read(list(loaded), expected)


@pytest.mark.parametrize("kind", ["discrete", "box", "dict", "none"])
def test_loaded_records_read_like_run_records(kind):
    table, expected = filled_table(kind)
    run, loaded = RunRecords(table), LoadedRecords([dict(r) for r in expected])
    assert len(loaded) == len(run) and repr(loaded) == repr(run)
    assert same_read(list(loaded), expected) and same_read(loaded[-1], expected[-1])
    assert same_read(loaded[5:12], expected[5:12]) and same_read(loaded[::-1], expected[::-1])
    for key in ("ep_return", "ep_length", "global_step", "wall_time", "episode_index", "agent_seed"):
        assert np.array_equal(loaded.column(key), run.column(key)) and loaded.column(key).dtype == run.column(key).dtype
    with pytest.raises(KeyError, match=r"column\('loss'\): not a record key"):
        loaded.column("loss")
    n = len(expected)
    with pytest.raises(IndexError, match=f"record index {n} out of range: the run has {n} episode records"):
        loaded[n]
    first = loaded[0]
    first["ep_return"] = 1e9
    assert loaded[0]["ep_return"] == expected[0]["ep_return"]  # each read gives fresh dicts
    copied = pickle.loads(pickle.dumps(loaded))
    assert type(copied) is list and same_values(copied, expected)
    if kind == "none":
        assert loaded == expected and loaded == run and run == loaded
    assert LoadedRecords([]).column("ep_return").shape == (0,) and len(LoadedRecords([])) == 0


@pytest.mark.parametrize("kind", ["discrete", "box", "dict", "none", "slabs"])
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


def test_structured_actions_are_read_only_too():
    table, expected = filled_table("dict")
    run = RunRecords(table)
    with pytest.raises(ValueError, match="read-only"):
        run[3]["actions"]["move"][:] = 7
    with pytest.raises(ValueError, match="read-only"):
        run[3]["actions"]["aim"][0] = 7.0
    assert same_read(list(run), expected)


def test_run_records_actions_are_read_only_views():
    """A read hands out views of the run's actions: they cannot change what the next read sees."""
    table, expected = filled_table("discrete")
    run = RunRecords(table)
    mine = list(run)
    with pytest.raises(ValueError, match="read-only"):
        mine[0]["actions"][:] = 9
    changed = mine[0]["actions"].copy()
    changed[:] = 9
    assert same_read(run[0]["actions"], expected[0]["actions"])
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):  # protocol 5 keeps a read-only flag
        loaded = pickle.loads(pickle.dumps(run, protocol))
        assert loaded[0]["actions"].flags.writeable and same_read(loaded, expected)
    assert copy.deepcopy(run)[0]["actions"].flags.writeable


def test_run_records_columns_without_dicts():
    table, expected = filled_table("box")
    run = RunRecords(table)
    for key, dtype in (
        ("ep_return", np.float64),
        ("ep_length", np.int64),
        ("global_step", np.int64),
        ("wall_time", np.float64),
        ("episode_index", np.int64),
    ):
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
    table.add(
        np.arange(count, dtype=np.float64),
        np.ones(count, dtype=np.int64),
        np.arange(count),
        np.zeros(count),
        np.arange(count),
    )
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


@pytest.mark.parametrize("kind", ["discrete", "box"])
def test_loaded_records_hand_out_read_only_actions_too(kind):
    """The runs a resume=True call kept were read back as dicts sharing their arrays: an in-place change to one
    read's actions reached every later read, where a run done in the call raised (an outside tester)."""
    _, expected = filled_table(kind)
    loaded = LoadedRecords([dict(r) for r in expected])
    with pytest.raises(ValueError, match="read-only"):
        loaded[0]["actions"][...] = 9
    with pytest.raises(ValueError, match="read-only"):
        next(iter(loaded))["actions"][...] = 9
    assert same_read(list(loaded), expected)
    assert pickle.loads(pickle.dumps(loaded))[0]["actions"].flags.writeable  # a plain list: the user's


def test_loaded_records_of_structured_actions_are_read_only_views():
    actions = {"move": np.arange(3), "aim": (np.zeros((3, 2)), np.ones(3))}
    loaded = LoadedRecords([{"ep_return": 1.0, "actions": actions}])
    with pytest.raises(ValueError, match="read-only"):
        loaded[0]["actions"]["aim"][0][0, 0] = 7.0
    assert loaded[0]["actions"]["move"].tolist() == [0, 1, 2]
