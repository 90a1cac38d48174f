"""The episode log: every episode reaches the callback once, in order, in the metrics hook's batches, with its wall time."""

from __future__ import annotations

import json
import time

import gymnasium as gym
import numpy as np
import pytest

from online_trainer import OnlineTrainer
from online_trainer.callbacks import CallBack, JsonlCallback, MultiCallback, TBCallBack
from online_trainer.callbacks.base import takes_wall_times
from online_trainer.hooks import Hook
from online_trainer.options.groups import RecordOptions
from tests.callbacks.test_callbacks import read_scalars
from tests.conftest import RecordingAgent, make_counting_vec

SEED = 0


class Series(CallBack):
    """Keeps every series call: (key, values, steps, wall_times)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def series(self, key, tag, values, steps, wall_times=None):
        self.calls.append((key, tag, list(values), list(steps), None if wall_times is None else list(wall_times)))


class OldSeries(CallBack):
    """A sink written before ``wall_times``: its ``series`` has the four arguments only."""

    def __init__(self) -> None:
        self.points: list[tuple] = []

    def series(self, key, tag, values, steps):
        self.points += [(key, value, step) for value, step in zip(values, steps)]


class Calls:
    """A callable sink with no ``series``: one forced call a value."""

    def __init__(self) -> None:
        self.points: list[tuple] = []

    def __call__(self, data, tag, step, force=False):
        for key, value in data.items():
            self.points.append((key, value, type(value), step, force))

    def reset(self) -> None:
        pass

    def close(self) -> None:
        pass


def episodes(runs):
    return [(r["ep_return"], r["ep_length"]) for r in runs[0]]


def test_every_episode_reaches_a_series_once_in_order_with_its_wall_time(tmp_path):
    sink = Series()
    trainer = OnlineTrainer(make_counting_vec(3), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = sink
    start = time.time()
    runs = trainer.multi_run(1, total_steps=600, seed_offset=SEED, progress=False)
    returns = [c for c in sink.calls if c[0] == "ep_return"]
    lengths = [c for c in sink.calls if c[0] == "ep_length"]
    assert [v for c in returns for v in c[2]] == [r for r, _ in episodes(runs)]
    assert [v for c in lengths for v in c[2]] == [n for _, n in episodes(runs)]
    assert [s for c in returns for s in c[3]] == list(range(1, len(runs[0]) + 1))
    walls = [w for c in returns for w in c[4]]
    assert start <= walls[0] and walls == sorted(walls) and walls[-1] <= time.time()
    # the wall time is each episode's own (its record's time since the run started), not the batch's
    offsets = np.array(walls) - np.array([r["wall_time"] for r in runs[0]])
    assert np.ptp(offsets) < 1e-3
    assert all(c[4] == r[4] for c, r in zip(lengths, returns))


def test_episodes_reach_the_callback_while_the_run_goes_on_not_only_at_its_end():
    """Without an experiment directory too: the metrics hook seals the table in batches for the callback."""
    sink = Series()
    seen_during = []

    class Watch(Hook):
        every_steps = 100

        def on_step(self, ctx):
            seen_during.append(sum(len(c[2]) for c in sink.calls if c[0] == "ep_return"))

    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent)
    trainer.call_back = sink
    trainer.multi_run(
        1, total_steps=1000, seed_offset=SEED, progress=False, hooks=[Watch()], records=RecordOptions(flush_every=10)
    )
    assert 0 < seen_during[2] < seen_during[-1]  # batches of about ten, as the records are sealed


@pytest.mark.parametrize("sink", [OldSeries, Calls])
def test_a_sink_without_wall_times_gets_every_episode(sink):
    callback = sink()
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent)
    trainer.call_back = callback
    runs = trainer.multi_run(1, total_steps=300, seed_offset=SEED, progress=False)
    got = [p for p in callback.points if p[0] == "ep_length"]
    assert [p[1] for p in got] == [n for _, n in episodes(runs)]
    if sink is Calls:  # Python numbers, forced, as each episode's own call
        assert {(p[2], p[4]) for p in got} == {(int, True)}
        assert {p[2] for p in callback.points if p[0] == "ep_return"} == {float}


def test_multicallback_passes_wall_times_to_the_sinks_that_take_them(tmp_path):
    timed, old = Series(), OldSeries()
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = MultiCallback([timed, old, JsonlCallback(tmp_path / "log.jsonl")])
    runs = trainer.multi_run(1, total_steps=300, seed_offset=SEED, progress=False)
    walls = [w for c in timed.calls if c[0] == "ep_return" for w in c[4]]
    assert len(walls) == len(runs[0]) and [p[1] for p in old.points if p[0] == "ep_return"] == [
        r for r, _ in episodes(runs)
    ]
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    jsonl = [line["wall_time"] for line in lines if line["tag"] == "ep_return/run_1"]
    assert jsonl == walls  # the JSONL lines carry each episode's time, not the time of their batch


def test_a_failed_run_sends_the_episodes_it_finished(tmp_path):
    class Fails(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.updates == 250:
                raise RuntimeError("agent broke")

    trainer = OnlineTrainer(make_counting_vec(2), Fails, exp_dir=tmp_path)
    with pytest.raises(Exception, match="agent broke"):
        trainer.multi_run(1, total_steps=1000, seed_offset=SEED, progress=False)
    points = read_scalars(tmp_path)["ep_return/run_1"]
    assert [step for step, _ in points] == list(range(1, len(points) + 1)) and len(points) > 50


def test_rolling_statistics_count_the_episodes_not_yet_sent(tmp_path):
    """The rolling means read the last window across what the callback got and what the tracker holds."""
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = JsonlCallback(tmp_path / "log.jsonl")
    runs = trainer.multi_run(
        1, total_steps=400, seed_offset=SEED, progress=False, stats_every_steps=100, stats_window=7
    )
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    stats = [line for line in lines if line["tag"] == "stats/run_1"]
    for line in stats:  # the 7 episodes that ended last by then
        ended = [r for r in runs[0] if r["global_step"] <= line["step"]][-7:]
        assert line["values"]["rolling_length"] == pytest.approx(np.mean([r["ep_length"] for r in ended]))


def test_takes_wall_times():
    assert takes_wall_times(Series().series) and takes_wall_times(TBCallBack("x").series)
    assert not takes_wall_times(OldSeries().series)
    assert takes_wall_times(lambda key, tag, values, steps, **kwargs: None)
    assert not takes_wall_times(len)  # no signature: not passed


def test_tensorboard_points_carry_the_episode_wall_times(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = OnlineTrainer(gym.make_vec("CartPole-v1", num_envs=4), RecordingAgent, exp_dir=tmp_path)
    runs = trainer.multi_run(1, total_steps=2000, seed_offset=SEED, progress=False)
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    accumulator.Reload()
    events = accumulator.Scalars("ep_return/run_1")
    assert [e.step for e in events] == list(range(1, len(runs[0]) + 1))
    offsets = np.array([e.wall_time for e in events]) - np.array([r["wall_time"] for r in runs[0]])
    assert np.ptp(offsets) < 1e-3  # one clock offset: each point has its episode's time


def test_a_sink_that_raises_leaves_the_metrics_stream_whole(tmp_path):
    """The episodes go to the callback after the chunk is on disk and counted: a failing sink fails the run
    without writing a chunk twice."""

    class Breaks(Series):
        def series(self, key, tag, values, steps, wall_times=None):
            raise ConnectionError("tracking server gone")

    from online_trainer import load_run_metrics

    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = Breaks()
    with pytest.raises(Exception, match="tracking server gone"):
        trainer.multi_run(1, total_steps=300, seed_offset=SEED, progress=False)
    records = load_run_metrics(tmp_path, 1)
    assert [r["episode_index"] for r in records] == list(range(1, len(records) + 1)) and records


def test_a_flush_that_fails_after_the_run_failed_is_logged_with_its_type(tmp_path, caplog):
    """T19: a MemoryError in the last flush of a run that had failed was logged as "could not flush its records after
    it failed: " and nothing more (its text is empty)."""

    class Fails(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.updates == 50:
                raise RuntimeError("agent broke")

    class OutOfMemory(Series):
        def series(self, key, tag, values, steps, wall_times=None):
            raise MemoryError()

    trainer = OnlineTrainer(make_counting_vec(2), Fails, exp_dir=tmp_path)
    trainer.call_back = OutOfMemory()
    with pytest.raises(RuntimeError, match="agent broke"):
        trainer.multi_run(1, total_steps=300, seed_offset=SEED, progress=False)
    said = [r.getMessage() for r in caplog.records if "could not flush" in r.getMessage()]
    assert said == ["run 1: could not flush its records after it failed: MemoryError: "], said
