"""CSVCallback read back with pandas, MultiCallback's fan-out, and overriding __call__ of a sink seeing every value."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal

import pandas as pd
import pytest

from online_trainer import OnlineTrainer
from online_trainer.callbacks import CallBack, CSVCallback, EmptyCallBack, JsonlCallback, MultiCallback, TBCallBack
from tests.callbacks.test_callbacks import read_scalars
from tests.conftest import RecordingAgent, make_counting_vec


def episode_table(records):
    return [(r["episode_index"], float(r["ep_return"]), float(r["ep_length"])) for r in records]


@pytest.mark.parametrize("num_workers", [1, 2])
def test_csv_holds_every_value_the_runner_logged(tmp_path, num_workers):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = CSVCallback(tmp_path / "scalars.csv")
    runs = trainer.multi_run(
        2, num_episodes=7, seed_offset=0, num_workers=num_workers, eval_freq=3, eval_episodes=2, progress=False
    )

    df = pd.read_csv(tmp_path / "scalars.csv")
    assert list(df.columns) == ["run", "metric", "step", "value", "tag", "key", "wall_time", "experiment"]
    assert df["experiment"].isna().all()  # no sweep: no configuration
    assert df["value"].dtype == float and df["step"].dtype == "int64" and df["run"].dtype == "int64"
    for run in (1, 2):
        own = df[df.run == run]
        returns = own[own.tag == f"ep_return/run_{run}"]
        assert set(returns.key) == set(returns.metric) == {"ep_return"}
        lengths = own[own.metric == "ep_length"].set_index("step")["value"]
        assert [(s, v, lengths[s]) for s, v in zip(returns.step, returns.value)] == episode_table(runs[run - 1])
        evals = own[own.metric == "eval/ep_return"]
        assert set(evals.tag) == {f"eval/ep_return/run_{run}"}
        assert list(zip(evals.step, evals.value)) == [
            (e["global_step"], e["mean"]) for e in trainer.evaluations[run - 1]
        ]
        losses = own[own.tag == f"agents/run_{run}"]
        assert set(losses.key) == {"loss"} and set(losses.metric) == {"agents/loss"}
        assert list(losses.value) == [float(k) for k in range(1, len(losses) + 1)]
    pivot = df[df.metric == "ep_return"].pivot(index="step", columns="run", values="value")
    assert list(pivot.columns) == [1, 2] and len(pivot) == 7


def test_a_sweeps_csv_tells_its_configurations_apart(tmp_path):
    """The runs of a sweep are numbered from 1 in every configuration: the experiment column tells them apart
    (without it the docs' pivot failed on duplicate entries, and a groupby on step mixed configurations)."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = CSVCallback(tmp_path / "scalars.csv")
    trainer.sweep({"lr": [0.1, 0.5]}, num_runs=2, num_episodes=5, seed_offset=0, progress=False)
    df = pd.read_csv(tmp_path / "scalars.csv")
    returns = df[df.metric == "ep_return"]
    assert sorted(set(zip(returns.experiment, returns.run))) == [
        ("lr=0.1", 1),
        ("lr=0.1", 2),
        ("lr=0.5", 1),
        ("lr=0.5", 2),
    ]
    assert all(tag == f"ep_return/{e}/run_{r}" for tag, e, r in zip(returns.tag, returns.experiment, returns.run))
    pivot = returns.pivot(index="step", columns=["experiment", "run"], values="value")
    assert pivot.shape == (5, 4)


def test_a_csv_written_before_the_experiment_column_is_appended_to_as_it_is(tmp_path):
    path = tmp_path / "s.csv"
    path.write_text("run,metric,step,value,tag,key,wall_time\n1,x,0,1.0,t/run_1,x,0.0\n")
    cb = CSVCallback(path)
    cb.start_run(2, 0, {}, None, "run_2")
    cb({"x": 2.0}, "t/run_2", 1)
    cb.close()
    df = pd.read_csv(path)
    assert list(df.columns) == ["run", "metric", "step", "value", "tag", "key", "wall_time"]
    assert df["value"].tolist() == [1.0, 2.0] and df["run"].tolist() == [1, 2]


def test_csv_quotes_odd_names_and_reads_back_non_finite_values(tmp_path):
    cb = CSVCallback(tmp_path / "sub" / "s.csv")
    cb({"a,b": float("nan"), 'say "hi"': float("inf"), "low": -math.inf}, "t/x", 3)
    cb.close()
    df = pd.read_csv(tmp_path / "sub" / "s.csv", keep_default_na=False, na_values=["nan"])
    assert list(df.key) == ["a,b", 'say "hi"', "low"]
    assert list(df.metric) == ["t/x/a,b", 't/x/say "hi"', "t/x/low"]
    assert math.isnan(df.value[0]) and df.value[1] == math.inf and df.value[2] == -math.inf
    assert list(df.run) == [""] * 3  # logged outside a run


def _write_then_die(path, flushed_event):
    cb = CSVCallback(path, flush_rows=10)
    for step in range(25):  # 20 rows written in two flushes, 5 kept in memory
        cb({"x": float(step)}, "t", step)
    flushed_event.set()
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.slow
def test_a_killed_writer_leaves_a_readable_file_with_every_flushed_row(tmp_path):
    path = tmp_path / "s.csv"
    context = multiprocessing.get_context("spawn")
    event = context.Event()
    process = context.Process(target=_write_then_die, args=(path, event))
    process.start()
    process.join(60)
    assert event.is_set() and process.exitcode == -signal.SIGKILL
    df = pd.read_csv(path)
    assert list(df.step) == list(range(20)) and list(df.value) == [float(s) for s in range(20)]


def _append_rows(path, run, start):
    cb = CSVCallback(path, flush_rows=7)
    cb.start_run(run, 0, {}, None)
    start.wait()
    for step in range(500):
        cb({"x": float(step)}, f"run_{run}", step)
    cb.close()


@pytest.mark.slow
def test_several_processes_share_one_file_with_one_header_and_whole_lines(tmp_path):
    path = tmp_path / "s.csv"
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    processes = [context.Process(target=_append_rows, args=(path, run, start)) for run in (1, 2, 3)]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(60)
    df = pd.read_csv(path)
    for run in (1, 2, 3):
        assert list(df[df.run == run].step) == list(range(500))


def test_csv_rejects_bad_options(tmp_path):
    with pytest.raises(ValueError, match=r"flush_rows must be a positive int, but got flush_rows=0"):
        CSVCallback(tmp_path / "s.csv", flush_rows=0)
    with pytest.raises(ValueError, match=r"max_delay must be a number of seconds >= 0, but got max_delay=-1"):
        CSVCallback(tmp_path / "s.csv", max_delay=-1)


class Recorder(CallBack):
    def __init__(self):
        self.calls = []

    def __call__(self, data, tag, step, force=False):
        self.calls.append(("call", dict(data), tag, step, force))

    def series(self, key, tag, values, steps):
        self.calls.append(("series", key, tag, list(values), list(steps)))

    def video(self, tag, frames, fps, step):
        self.calls.append(("video", tag, len(frames), fps, step))

    def setup(self, exp_dir, runs):
        self.calls.append(("setup", exp_dir, dict(runs)))

    def start_run(self, run_idx, seed, params, exp_dir, run_tag=""):
        self.calls.append(("start_run", run_idx, seed, dict(params), run_tag))

    def end_run(self, run_idx, status):
        self.calls.append(("end_run", run_idx, status))

    def reset(self):
        self.calls.append(("reset",))

    def close(self):
        self.calls.append(("close",))


class PlainSink:
    """A callable with reset and close only: no series, no video, no lifecycle."""

    def __init__(self):
        self.values = []

    def __call__(self, data, tag, step, force=False):
        self.values.append((dict(data), tag, step))

    def reset(self):
        pass

    def close(self):
        pass


def test_multi_callback_hands_every_call_to_each_sink():
    first, second, plain = Recorder(), Recorder(), PlainSink()
    multi = MultiCallback([first, second, plain])
    multi.setup("d", {1: 5})
    multi.start_run(1, 5, {"lr": 0.1}, "d", "run_1")
    multi({"loss": 1.0}, "agents/run_1", 3)
    multi.series("ep_return", "ep_return/run_1", [1.0, 2.0], range(1, 3))
    multi.video("eval/video/run_1", [0, 0], 30.0, 4)
    multi.end_run(1, "finished")
    multi.reset()
    multi.close()
    expected = [
        ("setup", "d", {1: 5}),
        ("start_run", 1, 5, {"lr": 0.1}, "run_1"),
        ("call", {"loss": 1.0}, "agents/run_1", 3, False),
        ("series", "ep_return", "ep_return/run_1", [1.0, 2.0], [1, 2]),
        ("video", "eval/video/run_1", 2, 30.0, 4),
        ("end_run", 1, "finished"),
        ("reset",),
        ("close",),
    ]
    assert first.calls == expected and second.calls == expected
    assert plain.values == [
        ({"loss": 1.0}, "agents/run_1", 3),
        ({"ep_return": 1.0}, "ep_return/run_1", 1),
        ({"ep_return": 2.0}, "ep_return/run_1", 2),
    ]


def test_multi_callback_closes_every_sink_then_raises_the_first_error():
    class Broken(Recorder):
        def close(self):
            raise OSError("disk full")

    after = Recorder()
    with pytest.raises(OSError, match="disk full"):
        MultiCallback([Broken(), after]).close()
    assert after.calls == [("close",)]


def test_a_list_of_callbacks_logs_to_each(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = [TBCallBack(tmp_path), CSVCallback(tmp_path / "scalars.csv")]
    assert isinstance(trainer.call_back, MultiCallback)
    runs = trainer.multi_run(1, num_episodes=4, seed_offset=0, progress=False)
    expected = [(i, r) for i, r, _ in episode_table(runs[0])]
    assert read_scalars(tmp_path)["ep_return/run_1"] == expected
    df = pd.read_csv(tmp_path / "scalars.csv")
    assert list(zip(df[df.metric == "ep_return"].step, df[df.metric == "ep_return"].value)) == expected


def test_a_list_with_a_wrong_element_is_refused_naming_it():
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    with pytest.raises(TypeError, match=r"trainer.call_back\[1\] must be a callback object .* but got 'csv'"):
        trainer.call_back = [EmptyCallBack(), "csv"]
    trainer.call_back = []
    assert isinstance(trainer.call_back, EmptyCallBack)


class WatchReturns(TBCallBack):
    """What a new user writes to see returns: override __call__ of the default callback."""

    def __init__(self, log_dir):
        super().__init__(log_dir)
        self.seen = []

    def __call__(self, data, tag, step, force=False):
        if "ep_return" in data:
            self.seen.append((step, float(data["ep_return"])))
        super().__call__(data, tag, step, force)


def test_overriding_call_of_tbcallback_sees_every_return_and_still_writes_them(tmp_path):
    assert WatchReturns.series is CallBack.series and TBCallBack.series is not CallBack.series
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    watcher = trainer.call_back = WatchReturns(tmp_path)
    runs = trainer.multi_run(1, num_episodes=6, seed_offset=0, progress=False)
    expected = [(i, r) for i, r, _ in episode_table(runs[0])]
    assert watcher.seen == expected
    assert read_scalars(tmp_path)["ep_return/run_1"] == expected


def test_a_subclass_overriding_both_keeps_its_own_series():
    class Both(CSVCallback):
        def __call__(self, data, tag, step, force=False):
            pass

        def series(self, key, tag, values, steps):
            pass

    assert Both.series is not CallBack.series
    assert CSVCallback.series is not CallBack.series  # the sink's own fast path stays


class WatchAgentValues(EmptyCallBack):
    def __init__(self):
        self.losses = []

    def __call__(self, data, tag, step, force=False):
        if "loss" in data:
            self.losses.append(data["loss"])


def test_a_subclass_of_empty_callback_gets_the_agents_values():
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    watcher = trainer.call_back = WatchAgentValues()
    trainer.multi_run(1, num_episodes=3, seed_offset=0, progress=False)
    assert watcher.losses and watcher.losses == [float(k) for k in range(1, len(watcher.losses) + 1)]


def test_lifecycle_calls_reach_the_callback_in_order(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    recorder = trainer.call_back = Recorder()
    trainer.multi_run(2, num_episodes=2, seed_offset=0, tuning_hp={"lr": 0.5}, progress=False)
    lifecycle = [c for c in recorder.calls if c[0] in ("setup", "start_run", "end_run", "close")]
    assert lifecycle == [
        ("setup", tmp_path, {1: 0, 2: 10000}),
        ("start_run", 1, 0, {"lr": 0.5}, "run_1"),
        ("end_run", 1, "finished"),
        ("start_run", 2, 10000, {"lr": 0.5}, "run_2"),
        ("end_run", 2, "finished"),
        ("close",),
    ]


def test_a_failing_run_ends_its_sink_run_as_failed(tmp_path):
    from online_trainer.errors import RunsFailedError
    from tests.conftest import FailsOnThirdRun

    trainer = OnlineTrainer(make_counting_vec(1), FailsOnThirdRun, exp_dir=tmp_path)
    recorder = trainer.call_back = Recorder()
    with pytest.raises(RunsFailedError):
        trainer.multi_run(3, num_episodes=8, seed_offset=0, progress=False)
    ends = [c for c in recorder.calls if c[0] == "end_run"]
    assert ends == [("end_run", 1, "finished"), ("end_run", 2, "finished"), ("end_run", 3, "failed")]


def test_a_sink_whose_setup_raises_stops_before_any_run_and_keeps_nothing(tmp_path):
    class NoStore(Recorder):
        def setup(self, exp_dir, runs):
            raise ValueError("tracking server unreachable: check tracking_uri")

    exp_dir = tmp_path / "exp"
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir, args={"lr": 0.1})
    sink = trainer.call_back = NoStore()
    with pytest.raises(ValueError, match="tracking server unreachable"):
        trainer.multi_run(2, num_episodes=2, seed_offset=0, progress=False)
    assert not exp_dir.exists()
    assert not [c for c in sink.calls if c[0] in ("start_run", "call", "series")]


@pytest.mark.parametrize("sink, example", [(CSVCallback, "scalars.csv"), (JsonlCallback, "scalars.jsonl")])
def test_a_file_sink_given_a_directory_says_to_name_a_file_in_it(tmp_path, sink, example):
    """CSVCallback(exp_dir) failed every run at its end, with IsADirectoryError from the first write."""
    with pytest.raises(
        ValueError,
        match=rf"log_path is the path of the file the sink writes, but got log_path='{tmp_path}', which is a "
        rf"directory: pass a file in it, e.g. log_path='{tmp_path / example}'",
    ):
        sink(tmp_path)


@pytest.mark.parametrize("sink, example", [(CSVCallback, "scalars.csv"), (JsonlCallback, "scalars.jsonl")])
def test_a_file_sink_given_the_new_experiments_directory_is_refused_before_any_run(tmp_path, sink, example):
    """JsonlCallback(exp_dir) for a new experiment, as one writes TBCallBack(exp_dir): the directory did not exist
    when the sink was made, and every run failed at its end with IsADirectoryError (an outside tester's find)."""
    exp_dir = tmp_path / "exp"
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir)
    trainer.call_back = MultiCallback([TBCallBack(exp_dir), sink(exp_dir)])
    with pytest.raises(
        ValueError,
        match=rf"log_path is the path of the file the sink writes, but got log_path='{exp_dir}', which is the "
        rf"experiment directory: pass a file in it, e.g. log_path='{exp_dir / example}'",
    ):
        trainer.multi_run(2, num_episodes=2, progress=False)
    assert not exp_dir.exists()
    with pytest.raises(ValueError, match=r"which is a directory: pass a file in it"):
        sink(f"{tmp_path}/logs/")  # a folder still to be made
