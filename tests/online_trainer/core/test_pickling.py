"""Records are pickled once: chunks and all_metrics.pkl load as the records, byte layout aside."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from online_trainer.core import pickling
from online_trainer.core.pickling import ChunkEncoder, EncodedRecords, dump_runs


def same(a, b):
    """Equal in type and value at every level; arrays also in dtype, shape and writeability."""
    return pickling.same_values(a, b)


def episode_record(index, length=3, dtype=np.int64, **extra):
    """A record as EpisodeTracker.finish builds it."""
    return {"ep_return": float(length), "ep_length": length, "frames": [], "transitions": [],
            "actions": np.arange(length).astype(dtype), "agent_seed": 7, "episode_index": index, "agent_logs": None,
            "global_step": 10 * index, "wall_time": 0.5 * index, **extra}


ARRAYS = [
    np.arange(5), np.arange(6, dtype=np.float32).reshape(2, 3), np.array(3.5), np.zeros(0, np.int8),
    np.ones((2, 2), order="F"), np.arange(10)[::3], np.array(["ab", "c"]), np.array([None, 1], dtype=object),
    np.arange(4, dtype=">i4"), np.zeros(2, dtype=[("a", "<i4"), ("b", "<f8")]), np.ma.masked_array([1, 2], [0, 1]),
    np.arange(4, dtype=np.float16), np.array([1 + 2j]), np.array([True, False]), np.arange(3).astype("M8[s]"),
]


def test_record_pickles_are_those_of_pickle_byte_for_byte():
    readonly = np.arange(3)
    readonly.flags.writeable = False
    for value in [*ARRAYS, readonly, ARRAYS, [episode_record(1), episode_record(2)]]:  # ARRAYS: memo shared
        assert pickling.dumps(value) == pickle.dumps(value, 5)


def test_the_fast_paths_are_in_use_with_this_python_and_numpy():
    assert pickling._fast_arrays and pickling._PREAMBLE is not None  # else the import-time check turned them off


@pytest.mark.parametrize("count", [1, 2, 3, 4, 10, 1001])
def test_a_chunk_loads_as_its_records(count):
    records = [episode_record(i, length=i % 5, dtype=[np.int64, np.float32, np.int8, np.uint16][i % 4])
               for i in range(count)]
    records[0]["agent_logs"] = {"loss": np.linspace(0, 1, 4), "name": "x"}
    chunk = ChunkEncoder().encode(records)
    assert pickling.RECORD_KEYS[0] in chunk[:600].decode("latin-1")  # the shareable layout, not a plain pickle
    loaded = pickle.loads(chunk)
    assert type(loaded) is list and same(loaded, records)
    assert all(r["actions"].flags.writeable for r in loaded)
    assert same(pickle._loads(chunk), records)  # the pure-Python unpickler agrees


def test_chunks_the_layout_cannot_hold_are_plain_pickles():
    cyclic = episode_record(1)
    cyclic["agent_logs"] = {"self": cyclic}
    big = episode_record(2, length=20_000)  # more than one 64 KiB frame
    encoder = ChunkEncoder()
    for records in ([cyclic], [big, episode_record(3)]):
        chunk = encoder.encode(records)
        assert chunk == pickle.dumps(records, 5)  # a plain pickle
        loaded = pickle.loads(chunk)
        assert same(loaded[-1]["actions"], records[-1]["actions"]) and len(loaded) == len(records)
    (loaded,) = pickle.loads(encoder.encode([cyclic]))
    assert loaded["agent_logs"]["self"] is loaded
    assert same(pickle.loads(encoder.encode([big])), [big])
    assert same(pickle.loads(encoder.encode([episode_record(4)])), [episode_record(4)])  # the encoder still works
    with pytest.raises(TypeError, match="pickle"):
        encoder.encode([episode_record(5, agent_logs=(x for x in ()))])  # what pickle cannot hold is still an error


def test_an_object_twice_in_a_chunk_loads_as_two_equal_objects():
    shared = {"a": np.arange(3)}
    records = [episode_record(1, info=shared), episode_record(2, info=shared)]
    loaded = pickle.loads(ChunkEncoder().encode(records))
    assert same(loaded, records)
    assert loaded[0]["info"] is not loaded[1]["info"]


def test_all_metrics_loads_as_the_runs():
    run1 = [episode_record(i) for i in range(1, 24)]
    run3 = [episode_record(1, length=0), episode_record(2, dtype=np.float64, agent_logs={"q": np.ones(2)})]
    runs = [run1, None, run3, []]
    data = b"".join(dump_runs(runs, batch=10))
    assert pickling.RECORD_KEYS[0] in data[:600].decode("latin-1")  # the shared layout, not a plain pickle
    assert same(pickle.loads(data), runs)
    assert same(pickle._loads(data), runs)  # the pure-Python unpickler agrees


def test_all_metrics_holds_records_too_big_for_a_frame():
    big = episode_record(2, length=20_000)  # alone, more than one 64 KiB frame
    medium = [episode_record(i, length=1_000) for i in range(30)]  # together, more than a frame
    pieces = dump_runs([medium])
    assert len(pieces) > 1 and same(pickle.loads(b"".join(pieces)), [medium])
    runs = [[episode_record(1)], [big, episode_record(3)]]
    assert dump_runs(runs) == [pickle.dumps(runs, 5)]  # pickled as pickle does


def test_all_metrics_reuses_the_opcodes_of_the_very_records_streamed():
    records = [episode_record(i) for i in range(1, 26)]
    kept, encoder = EncodedRecords(), ChunkEncoder()
    for start in range(0, 25, 10):
        encoder.encode(records[start:start + 10], kept)
    reused = [ops for _, ops, _ in kept.batches]
    kept_in_memory = list(records)
    kept_in_memory[12] = {**records[12], "ep_return": -1.0}  # another object: pickled from memory
    kept_in_memory.append(episode_record(26))  # not streamed
    pieces = dump_runs([kept_in_memory, None], [kept, None])
    assert [any(piece is ops for piece in pieces) for ops in reused] == [True, False, True]
    assert same(pickle.loads(b"".join(pieces)), [kept_in_memory, None])
    assert same(pickle.loads(b"".join(dump_runs([records[:5]], [kept]))), [records[:5]])  # fewer: not reused


def test_streamed_frames_are_not_held_and_the_opcodes_do_not_travel():
    with_frames = episode_record(1, frames=[np.zeros((2, 2, 3), np.uint8)])
    kept = EncodedRecords()
    records = [episode_record(0), with_frames]
    assert ChunkEncoder().encode(records, kept) == pickle.dumps(records, 5)  # pickled once, plainly
    assert kept.batches == [(None, None, 2)]  # the frames are in the stream file only
    kept.add([episode_record(2)], b"N")
    assert pickle.loads(pickle.dumps(kept)).batches == []
