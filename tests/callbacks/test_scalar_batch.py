"""Batched scalar encoding: the records ScalarEncoder writes, every scalar in call order, and
TBCallBack's batching (values read at call time, flushed when forced after max_delay and on close)."""

from __future__ import annotations

import pickle
import random
from collections import Counter, defaultdict

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2

from online_trainer.callbacks import TBCallBack
from online_trainer.callbacks.base import scalar_name
from online_trainer.callbacks.event_file import ScalarEncoder
from online_trainer.callbacks.scalar_batch import ScalarBatch
from online_trainer.callbacks.tb_layout import LAYOUT_FILE
from tests.callbacks.test_callbacks import read_scalars

STEPS = [0, 1, 127, 128, 300, 16383, 16384, 2**40, 2**63 - 1, -1, -(2**63)]
VALUES = [0.5, -1e30, 1e-45, float("nan"), float("inf"), -float("inf"), 3, np.float32(2.5), np.int64(-7), True, 1e38]


def split_records(stream: bytes) -> list[bytes]:
    records, at = [], 0
    while at < len(stream):
        size = int.from_bytes(stream[at : at + 8], "little")
        records.append(stream[at : at + 16 + size])
        at += 16 + size
    assert at == len(stream)
    return records


def series(records: list[bytes]) -> dict[str, list[tuple[int, float, float]]]:
    """Each scalar's (step, value, wall time) in file order."""
    out = defaultdict(list)
    for record in records:
        event = event_pb2.Event.FromString(record[12:-4])
        for value in event.summary.value:
            out[value.tag].append((event.step, np.float32(value.simple_value).tobytes(), event.wall_time))
    return dict(out)


def fill(batch, calls, monkeypatch):
    """Add ``calls`` ((data, tag, step, wall time)) to ``batch``; return the eager encoder's records."""
    encoder, expected = ScalarEncoder(), []
    for data, tag, step, wall in calls:
        monkeypatch.setattr("online_trainer.callbacks.scalar_batch._now", lambda wall=wall: wall)
        batch.add(data, tag, step)
        expected.append(encoder.encode(tuple(scalar_name(k, tag) for k in data), list(data.values()), step, wall))
    return expected


@pytest.mark.parametrize("seed", range(3))
def test_batch_gives_the_eager_records_with_every_scalar_in_call_order(seed, monkeypatch):
    rng = random.Random(seed)
    layouts = [
        ("agents/run_1", ("loss",)),
        ("ep_return/run_1", ("ep_return",)),
        ("x", ("a", "b", "c")),
        ("agents/run_2", ("q", "loss")),
    ]
    calls = []
    for k in range(2500):
        tag, keys = rng.choice(layouts)
        calls.append(
            (
                {key: rng.choice(VALUES) for key in keys},
                tag,
                rng.choice(STEPS + [rng.randrange(10**6)]),
                1.7e9 + k * 0.25,
            )
        )
    batch = ScalarBatch()
    expected = fill(batch, calls, monkeypatch)
    got = split_records(batch.encode())
    assert batch.count == 0 and batch.encode() == b""
    assert Counter(got) == Counter(expected)  # byte for byte the records of ScalarEncoder
    assert series(got) == series(expected)  # each scalar's points in call order


def test_layouts_sharing_a_scalar_keep_exact_call_order(monkeypatch):
    """{"loss"} and {"loss", "q"} under one tag interleave: every record goes to its place."""
    calls = [
        ({"loss": float(k)} if k % 3 else {"loss": float(k), "q": -1.0}, "agents/run_1", k * 50, 10.0 + k)
        for k in range(400)
    ]  # steps cross 128 and 16384: three varint widths
    batch = ScalarBatch()
    expected = fill(batch, calls, monkeypatch)
    assert batch.encode() == b"".join(expected)


def test_empty_data_logs_nothing_and_bad_input_raises_at_the_call():
    batch = ScalarBatch()
    assert batch.add({}, "t", 1) == 0
    with pytest.raises(TypeError):
        batch.add({"x": 1.0}, "t", 1.5)
    with pytest.raises((TypeError, ValueError)):
        batch.add({"x": 1.0, "y": "high"}, "t", 1)
    batch.add({"x": 2.0, "y": 3.0}, "t", 2)  # the failed call left nothing behind
    (record,) = split_records(batch.encode())
    assert record == ScalarEncoder().encode(
        ("t/x", "t/y"), [2.0, 3.0], 2, event_pb2.Event.FromString(record[12:-4]).wall_time
    )


def test_tb_reads_values_at_the_call(tmp_path):
    value = np.array(1.5)
    cb = TBCallBack(tmp_path)
    cb({"v": value}, "t", 1)
    value[()] = 99.0  # an agent reusing its array must not change what was logged
    cb({"v": value}, "t", 2)
    cb.close()
    assert read_scalars(tmp_path)["t/v"] == [(1, 1.5), (2, 99.0)]


def test_tb_forced_write_after_max_delay_reaches_the_file_and_close_writes_the_rest(tmp_path):
    cb = TBCallBack(tmp_path, max_delay=3600.0)
    cb({"ep_return": 1.0}, "ep_return/run_1", 1, force=True)  # the first forced write flushes
    for step in range(1, 101):
        cb({"loss": step * 0.5}, "agents/run_1", step)
    cb({"ep_return": 2.0}, "ep_return/run_1", 2, force=True)  # within max_delay: kept
    assert read_scalars(tmp_path) == {"ep_return/run_1": [(1, 1.0)]}
    cb.max_delay = 0.0
    cb({"ep_return": 3.0}, "ep_return/run_1", 3, force=True)
    on_disk = read_scalars(tmp_path)
    assert on_disk["ep_return/run_1"] == [(1, 1.0), (2, 2.0), (3, 3.0)] and len(on_disk["agents/loss/run_1"]) == 100
    for step in range(101, 3001):  # past a batch: written without close
        cb({"loss": step * 0.5}, "agents/run_1", step)
    assert len(read_scalars(tmp_path)["agents/loss/run_1"]) >= 2048
    cb.close()
    assert read_scalars(tmp_path)["agents/loss/run_1"] == [(s, s * 0.5) for s in range(1, 3001)]


def test_tb_copy_made_with_values_kept_carries_none_of_them(tmp_path):
    cb = TBCallBack(tmp_path)
    cb({"x": 1.0}, "t", 1)
    copy = pickle.loads(pickle.dumps(cb))
    copy({"x": 2.0}, "t", 2)
    copy.close()
    cb.close()
    own_files = [p for p in tmp_path.glob("events.out.tfevents.*") if p.name != LAYOUT_FILE]  # + the layout
    assert len(own_files) == 2
    assert sorted(read_scalars(tmp_path)["t/x"]) == [(1, 1.0), (2, 2.0)]


@pytest.mark.parametrize("crash", [RuntimeError, KeyboardInterrupt])
def test_a_run_that_crashes_leaves_every_scalar_logged_before_readable(tmp_path, crash):
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    class Crashing(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)  # logs loss = updates
            if self.updates == 300:
                raise crash("boom")

    trainer = OnlineTrainer(make_counting_vec(1), Crashing, exp_dir=tmp_path)  # default TBCallBack
    with pytest.raises(Exception if crash is RuntimeError else KeyboardInterrupt):
        trainer.multi_run(1, num_episodes=10_000, seed_offset=0, progress=False)
    scalars = read_scalars(tmp_path)
    assert [value for _, value in scalars["agents/loss/run_1"]] == list(range(1, 301))
    returns = scalars["ep_return/run_1"]
    assert [step for step, _ in returns] == list(range(1, len(returns) + 1)) and len(returns) > 50


def test_a_series_gives_the_records_of_one_call_a_value(monkeypatch):
    """add_series (a step's episode returns at once) writes what one add() per value writes, in order."""
    monkeypatch.setattr("online_trainer.callbacks.scalar_batch._now", lambda: 1234.5)
    one_by_one, at_once = ScalarBatch(), ScalarBatch()
    values, steps = [0.5, 3, np.float32(2.5), -1e30], [7, 8, 200, 2**40]
    for value, step in zip(values, steps):
        one_by_one.add({"ep_return": value}, "ep_return/run_1", step)
    at_once.add({"loss": 1.0}, "agents/run_1", 6)
    assert at_once.add_series("ep_return", "ep_return/run_1", values, steps) == 5
    expected = split_records(one_by_one.encode())
    records = split_records(at_once.encode())
    assert records[1:] == expected and len(records) == 5
    with pytest.raises(TypeError):
        at_once.add_series("ep_return", "ep_return/run_1", [1.0], [1.5])
    with pytest.raises(ValueError, match="2 values for 1 steps"):
        at_once.add_series("ep_return", "ep_return/run_1", [1.0, 2.0], [1])


def test_tbcallback_series_and_one_call_a_value_read_back_alike(tmp_path):
    values, steps = [1.0, 2.5, -3.0], [1, 2, 3]
    for name, log in (
        ("series", lambda cb: cb.series("ep_return", "ep_return/run_1", values, steps)),
        ("calls", lambda cb: [cb({"ep_return": v}, "ep_return/run_1", s, force=True) for v, s in zip(values, steps)]),
    ):
        cb = TBCallBack(tmp_path / name)
        log(cb)
        cb.close()
        assert read_scalars(tmp_path / name) == {"ep_return/run_1": list(zip(steps, values))}


def test_event_files_of_one_process_sort_in_the_order_they_were_made(tmp_path, monkeypatch):
    """TensorBoard reads event files in name order: the 10th file of a second must not come before the 9th
    (a resumed run's file read first would make TensorBoard drop the earlier points as a restart)."""
    from online_trainer.callbacks.event_file import EventFileWriter

    monkeypatch.setattr("online_trainer.callbacks.event_file.time.time", lambda: 1_700_000_000.5)
    writers = [EventFileWriter(tmp_path) for _ in range(12)]
    for writer in writers:
        writer.close()
    assert sorted(writer.path.name for writer in writers) == [writer.path.name for writer in writers]


def test_tb_step_logger_keeps_what_a_call_a_dict_keeps(tmp_path, monkeypatch):
    """The agent's call_back of TBCallBack writes the records tb(data, tag, step) writes, key sets changing."""
    monkeypatch.setattr("online_trainer.callbacks.scalar_batch._now", lambda: 99.5)
    dicts = [{"loss": float(k)} if k % 3 else {"loss": float(k), "q": np.float32(k / 2)} for k in range(3000)]
    files = {}
    for way in ("calls", "logger"):
        cb = TBCallBack(tmp_path / way, layout_metrics=())
        cb.start_run(1, 0, {}, None)
        logger = cb.step_logger("agents/run_1")
        for k, data in enumerate(dicts):
            if way == "calls":
                cb(data, "agents/run_1", k * 10)
            else:
                logger.step = k * 10
                logger(data)
        cb.close()
        (path,) = (tmp_path / way).glob("events.out.tfevents.*")
        files[way] = split_records(path.read_bytes())[1:]  # the version record has its own time
    assert files["logger"] == files["calls"] and len(files["calls"]) == 3000


def test_tb_step_logger_refuses_a_bad_value_and_keeps_the_batch_aligned(tmp_path):
    cb = TBCallBack(tmp_path, layout_metrics=())
    logger = cb.step_logger("agents/run_1")
    logger.step = 1
    with pytest.raises(TypeError):
        logger({"loss": 1.0, "q": None})
    logger({"loss": 2.0, "q": 3.0})
    logger({})  # nothing
    cb.close()
    assert read_scalars(tmp_path) == {"agents/loss/run_1": [(1, 2.0)], "agents/q/run_1": [(1, 3.0)]}


def test_a_subclass_that_overrides_call_sees_the_agent_values_and_the_episodes(tmp_path):
    seen = []

    class Counting(TBCallBack):
        def __call__(self, data, tag, step, force=False):
            seen.append(tag)
            super().__call__(data, tag, step, force)

    cb = Counting(tmp_path)
    logger = cb.step_logger("agents/run_1")
    logger({"loss": 1.0})
    cb.series("ep_return", "ep_return/run_1", np.array([1.0, 2.0]), range(1, 3), wall_times=[5.0, 6.0])
    cb.close()
    assert seen == ["agents/run_1", "ep_return/run_1", "ep_return/run_1"]


def test_a_series_takes_arrays_and_wall_times_and_refuses_what_is_not_a_number(monkeypatch):
    monkeypatch.setattr("online_trainer.callbacks.scalar_batch._now", lambda: 1234.5)
    batch, expected = ScalarBatch(), ScalarBatch()
    batch.add_series("ep_length", "ep_length/run_1", np.array([3, 4]), range(1, 3), wall_times=np.array([7.0, 8.0]))
    for value, step, wall in ((3, 1, 7.0), (4, 2, 8.0)):
        monkeypatch.setattr("online_trainer.callbacks.scalar_batch._now", lambda wall=wall: wall)
        expected.add({"ep_length": value}, "ep_length/run_1", step)
    assert batch.encode() == expected.encode()
    for values, steps in (([None], [1]), (["x"], [1]), ([1.0], [1.5]), ([1.0], np.array([1.5]))):
        with pytest.raises((TypeError, ValueError)):
            batch.add_series("ep_return", "ep_return/run_1", values, steps)
    with pytest.raises(ValueError, match="2 values for 2 steps and 1 wall times"):
        batch.add_series("ep_return", "ep_return/run_1", [1.0, 2.0], [1, 2], wall_times=[3.0])
    assert batch.count == 0 and batch.encode() == b""  # nothing kept of the refused calls


def test_an_empty_series_keeps_nothing_and_the_batch_still_encodes(monkeypatch):
    """A chunk of no episodes (a sink called with empty arrays) adds nothing: encode() used to fail on the empty group."""
    monkeypatch.setattr("online_trainer.callbacks.scalar_batch._now", lambda: 1234.5)
    batch, expected = ScalarBatch(), ScalarBatch()
    assert batch.add_series("ep_return", "ep_return/run_1", np.array([]), range(1, 1)) == 0
    assert batch.encode() == b""
    batch.add_series("ep_return", "ep_return/run_1", np.array([]), np.array([], dtype=np.int64), wall_times=[])
    batch.add({"loss": 2.0}, "agents/run_1", 5)
    expected.add({"loss": 2.0}, "agents/run_1", 5)
    assert batch.count == 1 and batch.encode() == expected.encode()
