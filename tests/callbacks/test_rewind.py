"""A file sink's position at a checkpoint is plain data, and rewinding to it cuts the run's entries back."""

from __future__ import annotations

import csv
import json
import pickle
from pathlib import Path

import pytest

from online_trainer.callbacks import JsonlCallback
from online_trainer.callbacks.store_points import StorePosition


def logged(path):
    return [(row["tag"], row["step"]) for row in map(json.loads, path.read_text().splitlines())]


def test_a_jsonl_position_is_plain_data_that_rewind_cuts_the_run_back_to(tmp_path):
    path = tmp_path / "log.jsonl"
    callback = JsonlCallback(path)
    callback({"ep_return": 1.0}, "ep_return/run_1", 1)
    callback({"ep_return": 5.0}, "ep_return/run_2", 1)
    position = callback.checkpoint("run_1")
    assert position == {
        "kind": "file",
        "path": str(path),
        "offset": path.stat().st_size,
        "others": {},
        "counts": {"ep_return/run_1": 1},
    }
    assert pickle.loads(pickle.dumps(position)) == position and type(position) is dict
    callback({"ep_return": 2.0}, "ep_return/run_1", 2)
    callback({"ep_return": 6.0}, "ep_return/run_2", 2)
    callback.close()

    callback.rewind("run_1", position)
    assert logged(path) == [("ep_return/run_1", 1), ("ep_return/run_2", 1), ("ep_return/run_2", 2)]
    callback.rewind("run_2", None)  # a run that starts again loses every entry
    assert logged(path) == [("ep_return/run_1", 1)]


def test_a_line_file_that_lost_lines_the_checkpoint_counted_is_said_when_it_is_cut_back(tmp_path, caplog):
    """F13: a callback.jsonl cut to a tenth of its size resumed without a word, its runs' lines missing."""
    path = tmp_path / "log.jsonl"
    callback = JsonlCallback(path)
    for step in (1, 2, 3):
        callback({"ep_return": float(step)}, "ep_return/run_1", step)
    position = callback.checkpoint("run_1")
    callback.close()
    path.write_text(path.read_text().splitlines(keepends=True)[0])  # cut short after the checkpoint was written
    with caplog.at_level("WARNING"):
        callback.rewind("run_1", position)
    assert f"{path} holds fewer entries of the resumed run than its checkpoint counted (ep_return/run_1: 1 of 3)" in (
        caplog.text
    )
    assert logged(path) == [("ep_return/run_1", 1)]


def test_a_position_of_another_sink_is_refused_and_the_file_kept(tmp_path):
    path = tmp_path / "log.jsonl"
    callback = JsonlCallback(path)
    callback({"ep_return": 1.0}, "ep_return/run_1", 1)
    callback.close()
    before = path.read_bytes()
    with pytest.raises(ValueError, match=r"not where its files stood: resume with the callbacks the experiment ran"):
        callback.rewind("run_1", StorePosition({"ep_return": (1, 1.0)}).to_state())
    assert path.read_bytes() == before


def test_a_position_of_another_file_sink_is_refused_by_the_check_and_by_rewind(tmp_path):
    """The position of another sink's file would empty this sink's file (taken for one made after the checkpoint)."""
    from online_trainer.callbacks import CSVCallback, MultiCallback, TBCallBack

    jsonl, csv = JsonlCallback(tmp_path / "log.jsonl"), CSVCallback(tmp_path / "log.csv")
    tb = TBCallBack(tmp_path)
    for sink in (jsonl, csv, tb):
        sink({"ep_return": 1.0}, "ep_return/run_1", 1)
    positions = [sink.checkpoint("run_1") for sink in (jsonl, csv, tb)]
    for sink in (jsonl, csv, tb):
        sink.close()
    for sink, own in zip((jsonl, csv, tb), positions):
        sink.check_position(own)
        sink.check_position(None)
        for other in positions:
            if other is not own:
                with pytest.raises(ValueError, match=r"holds the position of '.*' for this sink, which writes no such"):
                    sink.check_position(other)
    multi = MultiCallback([jsonl, tb])
    multi.check_position([positions[0], positions[2]])
    with pytest.raises(ValueError, match=r"TBCallBack\(.*\): the run's checkpoint holds the position of 'log.csv'"):
        multi.check_position([positions[0], positions[1]])
    before = (tmp_path / "log.jsonl").read_bytes()
    for wrong, held in (
        (positions[0], r"the position of the file log.jsonl"),
        ([positions[0]], r"the position of 1 sink \(the file log.jsonl\)"),
    ):
        sinks = r"2 sinks \(JsonlCallback, TBCallBack\)"
        with pytest.raises(ValueError, match=f"holds {held}, but this MultiCallback has {sinks}: resume with"):
            multi.check_position(wrong)
        with pytest.raises(ValueError, match=f"holds {held}, but this MultiCallback has {sinks}"):
            multi.rewind("run_1", wrong)  # it used to start every sink over: each lost the run's entries
    assert (tmp_path / "log.jsonl").read_bytes() == before


def test_a_sink_pointed_at_another_folder_is_refused_and_a_moved_one_accepted(tmp_path):
    """A TBCallBack resumed with another log_dir left the first folder's values after the checkpoint in place and
    logged them again in its own: every one twice (an outside tester's find). A moved experiment still resumes."""
    import shutil

    from online_trainer.callbacks import CSVCallback, TBCallBack

    for make in (
        lambda d: TBCallBack(d),
        lambda d: CSVCallback(d / "scalars.csv"),
        lambda d: JsonlCallback(d / "l.jsonl"),
    ):
        first = tmp_path / "first"
        sink = make(first)
        sink({"ep_return": 1.0}, "ep_return/run_1", 1)
        position = sink.checkpoint("run_1")
        sink.close()
        with pytest.raises(
            ValueError, match=r"holds the position of '.*' in '.*first', but this sink writes in '.*other'"
        ):
            make(tmp_path / "other").check_position(position)
        shutil.move(first, tmp_path / "moved")  # the experiment moved, its files with it
        make(tmp_path / "moved").check_position(position)
        shutil.rmtree(tmp_path / "moved")


def lines_of(path, sink_type):
    if sink_type == "jsonl":
        return [(row["tag"], row["step"]) for row in map(json.loads, path.read_text().splitlines())]
    rows = list(csv.DictReader(path.read_text().splitlines()))
    return [(row["tag"], int(row["step"])) for row in rows]


@pytest.mark.parametrize("order", [(1, 2), (2, 1)])
@pytest.mark.parametrize("sink_type", ["jsonl", "csv"])
def test_runs_sharing_a_line_file_are_cut_back_exactly_resume_after_resume(tmp_path, sink_type, order):
    """Two runs append to one file. Cutting run 1 back moved run 2's later lines, so run 2's checkpoint offset then
    kept some of its lines from after its checkpoint, or cut one in half (an outside tester's JSONL after a kill)."""
    from online_trainer.callbacks import CSVCallback

    path = tmp_path / f"log.{sink_type}"
    parent = JsonlCallback(path, flush_every=1) if sink_type == "jsonl" else CSVCallback(path, flush_rows=1)

    def log(sink, run, step):
        sink({"x": float(step)}, f"a/run_{run}", step)
        sink({"y": float(step)}, f"b/run_{run}", step)
        sink.flush()

    # the first attempt: each run in a worker of its own, writing the shared file in turns
    workers = {run: pickle.loads(pickle.dumps(parent)) for run in (1, 2)}
    positions = {}
    for step in range(1, 9):
        for run in (1, 2):
            log(workers[run], run, step)
            if (run, step) in ((1, 2), (2, 6)):  # run 1 checkpoints early, run 2 late
                positions[run] = workers[run].checkpoint(f"run_{run}")
    for worker in workers.values():
        worker.close()  # killed after step 8

    def expected(upto):
        return [
            (f"{tag}/run_{run}", step) for step in range(1, 9) for run in (1, 2) for tag in "ab" if step <= upto[run]
        ]

    for run in order:
        parent.rewind(f"run_{run}", positions[run])
    assert lines_of(path, sink_type) == expected({1: 2, 2: 6})

    # the resume: both runs go on from their checkpoints; run 1 checkpoints again at step 4, run 2 never
    workers = {run: pickle.loads(pickle.dumps(parent)) for run in (1, 2)}
    for step in range(3, 8):
        log(workers[1], 1, step)
        if step == 4:
            positions[1] = workers[1].checkpoint("run_1")
        if step >= 7:
            log(workers[2], 2, step)
    for worker in workers.values():
        worker.close()  # killed again
    parent = pickle.loads(pickle.dumps(parent))
    for run in order:
        parent.rewind(f"run_{run}", positions[run])
    got = lines_of(path, sink_type)
    assert sorted(got) == sorted(expected({1: 4, 2: 6})) and len(got) == len(set(got))


def test_a_tensorboard_sink_resumed_with_another_flush_every_is_refused(tmp_path):
    """Accepted, it left every point before the checkpoint and means of 10 after it (an outside tester's find)."""
    from online_trainer.callbacks import TBCallBack

    sink = TBCallBack(tmp_path)
    sink({"loss": 1.0}, "agents/run_1", 1)
    position = sink.checkpoint("run_1")
    sink.close()
    TBCallBack(tmp_path).check_position(position)
    with pytest.raises(
        ValueError,
        match=r"written with flush_every=1, but this TBCallBack has flush_every=10: .* "
        r"Resume with TBCallBack\(..., flush_every=1\)",
    ):
        TBCallBack(tmp_path, flush_every=10).check_position(position)
    position.pop("flush_every")  # a checkpoint of an earlier version: nothing to check it against
    TBCallBack(tmp_path, flush_every=10).check_position(position)


@pytest.mark.parametrize("sink_type", ["jsonl", "csv"])
def test_a_run_cut_back_while_another_process_appends_loses_none_of_its_lines(tmp_path, sink_type):
    """A restarted Slurm job cuts its run back while the other jobs write: the cut file was swapped in under their
    open descriptors, and every line they wrote after it went to the file swapped out."""
    from online_trainer.callbacks import CSVCallback

    path = tmp_path / f"log.{sink_type}"
    parent = JsonlCallback(path, flush_every=1) if sink_type == "jsonl" else CSVCallback(path, flush_rows=1)
    job1, job2 = pickle.loads(pickle.dumps(parent)), pickle.loads(pickle.dumps(parent))
    for step in range(1, 4):
        job1({"x": 1.0}, "a/run_1", step)
        job2({"x": 2.0}, "a/run_2", step)
        job1.flush(), job2.flush()
    position = job1.checkpoint("run_1")
    job1({"x": 1.0}, "a/run_1", 4)
    job1.flush()  # job 1 is preempted here
    restarted = pickle.loads(pickle.dumps(parent))
    restarted.rewind("run_1", position)  # job 2 still has the file open
    for step in range(4, 7):
        job2({"x": 2.0}, "a/run_2", step)
        job2.flush()
    restarted({"x": 1.0}, "a/run_1", 4)
    restarted.close(), job2.close()
    got = lines_of(path, sink_type)
    assert sorted(got) == sorted(
        [(f"a/run_{run}", step) for run in (1, 2) for step in range(1, 7) if run == 2 or step <= 4]
    )
    assert len(got) == len(set(got))


def test_a_torn_last_line_is_dropped_when_a_run_is_cut_back(tmp_path):
    """A writer killed in the middle of a long write leaves part of a line: the next line would be glued to it."""
    path = tmp_path / "log.jsonl"
    sink = JsonlCallback(path, flush_every=1)
    sink({"x": 1.0}, "a/run_1", 1)
    sink({"x": 2.0}, "a/run_2", 1)
    position = sink.checkpoint("run_1")
    sink.close()
    with open(path, "ab") as file:
        file.write(b'{"tag": "a/run_2", "st')
    JsonlCallback(path).rewind("run_1", position)
    assert lines_of(path, "jsonl") == [("a/run_1", 1), ("a/run_2", 1)]


def test_an_event_file_another_process_is_writing_is_left_alone(tmp_path):
    """Its last record may be on its way: taken for torn, the file was swapped out under its writer."""
    from online_trainer.callbacks import TBCallBack

    job1, job2 = TBCallBack(tmp_path), TBCallBack(tmp_path)
    job1({"x": 1.0}, "a/run_1", 1)
    position = job1.checkpoint("run_1")
    job1.close()
    job2({"x": 2.0}, "a/run_2", 1)
    other = Path(job2.checkpoint("run_2")["path"])
    assert other.name != Path(position["path"]).name
    with open(other, "ab") as file:
        file.write(b"\x10\x00\x00")  # the start of job 2's next record
    before = other.stat().st_ino, other.read_bytes()
    TBCallBack(tmp_path).rewind("run_1", position)
    assert (other.stat().st_ino, other.read_bytes()) == before
    job2.close()


def test_a_rewind_given_since_leaves_what_was_logged_before_it_and_a_sink_without_since_still_rewinds(tmp_path):
    """Entries under the run's tags written before its experiment began are another experiment's (a file they share)."""
    import time

    from online_trainer.callbacks import CSVCallback, MultiCallback
    from online_trainer.callbacks.base import CallBack
    from online_trainer.experiment.manifest import Experiment, created_at

    class OldSink(CallBack):  # a user's sink, written before rewind took since
        def __init__(self) -> None:
            self.calls = []

        def checkpoint(self, run_tag):
            return {"lines": 0}

        def rewind(self, run_tag, position):
            self.calls.append((run_tag, position))

    for make in (lambda: JsonlCallback(tmp_path / "log.jsonl"), lambda: CSVCallback(tmp_path / "log.csv")):
        earlier = make()
        earlier({"ep_return": 1.0}, "ep_return/run_1", 1)  # the other experiment's run 1
        earlier.close()
        time.sleep(0.01)
        since = time.time()
        sink, old = make(), OldSink()
        sink({"ep_return": 2.0}, "ep_return/run_1", 1)
        position = sink.checkpoint("run_1")
        sink({"ep_return": 3.0}, "ep_return/run_1", 2)
        sink.close()
        path = Path(sink.log_path)
        MultiCallback([sink, old]).rewind("run_1", [position, None], since=since)
        assert [step for _, step in lines_of(path, path.suffix[1:])] == [1, 1]  # the other's and the run's first
        MultiCallback([sink, old]).rewind("run_1", None, since=since)  # the run starts again
        assert [step for _, step in lines_of(path, path.suffix[1:])] == [1]
        assert old.calls == [("run_1", None)] * 2
        sink.rewind("run_1", None)  # without since (an experiment of unknown age): every line under its tags
        assert lines_of(path, path.suffix[1:]) == []
    manifest = Experiment.new_manifest(1, 0, 0, {})
    assert abs(created_at(manifest) - time.time()) < 5
    del manifest["created_at"]  # a manifest of an earlier version: its creation to the second
    assert created_at(manifest) == int(created_at(manifest)) and abs(created_at(manifest) - time.time()) < 5
    assert created_at({}) is None
