"""One writer per experiment directory, and disk errors that name the file."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from online_trainer import OnlineTrainer, RunsFailedError
from online_trainer.errors import ExperimentInUseError
from online_trainer.experiment.lock import LOCK_FILE, ExperimentLock
from online_trainer.records import storage
from tests.conftest import RecordingAgent, make_counting_vec

SLOW_WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    class Slow(RecordingAgent):
        def update(self, *args, **kwargs):
            time.sleep(0.01)
            super().update(*args, **kwargs)

    OnlineTrainer(make_counting_vec(1), Slow, exp_dir={exp_dir!r}).multi_run(
        2, num_episodes=100000, seed_offset=0, progress=False)
""")


def start_writer(exp_dir):
    root = str(Path(__file__).resolve().parents[3])
    process = subprocess.Popen([sys.executable, "-c", SLOW_WRITER.format(root=root, exp_dir=str(exp_dir))])
    deadline = time.monotonic() + 60
    while not list(exp_dir.glob("metrics_run*.pkl")):
        assert process.poll() is None, "the writer exited"
        assert time.monotonic() < deadline, "the writer never started"
        time.sleep(0.1)
    return process


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_second_writer_is_refused_naming_the_owner(tmp_path, overwrite):
    writer = start_writer(tmp_path)
    try:
        manifest = (tmp_path / "manifest.json").read_bytes()
        with pytest.raises(ExperimentInUseError, match=rf"is being written by another call \(pid {writer.pid} on "):
            OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
                1, num_episodes=2, overwrite=overwrite, progress=False
            )
        assert (tmp_path / "manifest.json").read_bytes() == manifest
        assert writer.poll() is None
    finally:
        writer.kill()
        writer.wait()


def test_the_lock_of_a_killed_writer_is_taken_over_with_a_warning(tmp_path, caplog):
    writer = start_writer(tmp_path)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == writer.pid
    caplog.set_level(logging.WARNING, logger="online_trainer")
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=2, overwrite=True, progress=False
    )
    assert f"taking over the lock of pid {writer.pid}" in caplog.text
    assert (tmp_path / LOCK_FILE).read_text() == ""  # released at the end


def test_the_lock_is_held_during_the_call_and_released_after(tmp_path):
    seen = []

    class Probe(RecordingAgent):
        def update(self, *args, **kwargs):
            if not seen:
                with pytest.raises(ExperimentInUseError):
                    ExperimentLock(tmp_path).acquire()
                seen.append(json.loads((tmp_path / LOCK_FILE).read_text())["pid"])
            super().update(*args, **kwargs)

    OnlineTrainer(make_counting_vec(1), Probe, exp_dir=tmp_path).multi_run(1, num_episodes=2, progress=False)
    assert seen == [os.getpid()]
    with ExperimentLock(tmp_path):
        pass


def test_an_unwritable_exp_dir_is_refused_with_a_fix(tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(
        PermissionError,
        match=r"exp_dir='.*' cannot be written \(Permission denied\): choose a "
        r"directory you can write to",
    ):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(1, num_episodes=1)


class FullDisk:
    """A file object whose writes fail as on a full disk."""

    def __init__(self, real):
        self.real = real
        self.closed = False

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        pass

    def close(self):
        self.closed = True
        self.real.close()


def test_a_full_disk_names_the_file_and_the_run(tmp_path, monkeypatch):
    real_init = storage.MetricsStream.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self._file = FullDisk(self._file)

    monkeypatch.setattr(storage.MetricsStream, "__init__", init)
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(
        RunsFailedError,
        match=r"run 1 \(seed 0\): OSError: \[Errno 28\] could not write "
        r".*metrics_run1.pkl: No space left on device. Free some space",
    ):
        trainer.multi_run(1, num_episodes=20, seed_offset=0, metrics_flush_every=5, progress=False)


@pytest.mark.parametrize("full_at", [storage.CONFIG_FILE, storage.ARGS_FILE])
def test_a_full_disk_names_config_py_and_args_yaml(tmp_path, monkeypatch, full_at):
    """The disk fills up as the files that say what produced the experiment are written."""
    real_fsync = os.fsync

    def fsync(fd):
        if full_at in os.readlink(f"/proc/self/fd/{fd}"):  # the temporary file beside config.py / args.yaml
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    config = tmp_path / "my_config.py"
    config.write_text("lr = 0.1\n")
    exp_dir = tmp_path / "exp"
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir, config=config, args={"lr": 0.1})
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(
        OSError,
        match=rf"\[Errno 28\] could not write {exp_dir / full_at}: No space left on device\. "
        r"Free some space or choose another exp_dir\.",
    ):
        trainer.multi_run(1, num_episodes=2, seed_offset=0, progress=False)
    # nothing of the call is left (no input half-written or alone, no lock): the corrected call starts afresh
    assert not exp_dir.exists()


def test_write_atomic_names_the_file_and_leaves_no_temp_file(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=r"could not write .*manifest.json: No space left on device"):
        storage.write_manifest(tmp_path, {"runs": []})
    assert list(tmp_path.iterdir()) == []


def snapshot(root: Path) -> dict[str, tuple[bytes | None, int]]:
    """Every path under ``root`` (``root`` included): its bytes (None for a directory) and its mtime in ns."""
    return {
        os.fspath(p.relative_to(root)): (None if p.is_dir() else p.read_bytes(), p.stat().st_mtime_ns)
        for p in [root, *sorted(root.rglob("*"))]
    }


def earlier_experiment(exp_dir: Path, owner: dict | None = None) -> dict[str, tuple[bytes | None, int]]:
    """Run an experiment into ``exp_dir``, put ``owner`` in its lock, age every mtime; return its snapshot."""
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir, args={"lr": 0.1}).multi_run(
        1, num_episodes=2, seed_offset=0, progress=False
    )
    if owner is not None:  # the owner line a killed writer left behind
        (exp_dir / LOCK_FILE).write_text(json.dumps(owner))
    for path in [*exp_dir.rglob("*"), exp_dir]:
        os.utime(path, ns=(1_000_000_000_000_000_000, 1_000_000_000_000_000_000))  # 2001: any write would show
    return snapshot(exp_dir)


@pytest.mark.parametrize("owner", [None, {"pid": 999999, "host": "gone", "started": "2001-09-09T01:46:40+00:00"}])
def test_a_call_refused_for_an_earlier_experiment_changes_nothing_on_disk(tmp_path, caplog, owner):
    exp_dir = tmp_path / "exp"
    before = earlier_experiment(exp_dir, owner)
    with caplog.at_level(logging.WARNING), pytest.raises(FileExistsError, match="already holds an earlier experiment"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir, args={"lr": 0.2}).multi_run(
            1, num_episodes=2, seed_offset=0, progress=False
        )
    assert snapshot(exp_dir) == before  # byte for byte, mtimes included: the .lock and its owner line too
    assert "taking over the lock" not in caplog.text  # the refused call took nothing over
    # an input file of another content is refused the same way
    for path in exp_dir.iterdir():
        if path.name not in (LOCK_FILE, storage.ARGS_FILE):
            path.unlink()
    before = snapshot(exp_dir)
    with pytest.raises(FileExistsError, match=r"args.yaml already exists with other content"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir, args={"lr": 0.2}).multi_run(
            1, num_episodes=2, seed_offset=0, progress=False
        )
    assert snapshot(exp_dir) == before


def test_a_refused_command_changes_nothing_on_disk(tmp_path, monkeypatch, capsys):
    """``online-trainer run`` into an experiment that a writer finished after the command started, before its lock:
    the one check, under the lock, refuses it in the command's words, and nothing changes on disk."""
    from online_trainer.cli import main as cli
    from online_trainer.cli.run_command import CommandTrainer

    config = tmp_path / "c.yaml"
    config.write_text(
        "env: {id: Corridor-v0, kwargs: {length: 3}}\nagent: {name: random}\nnum_runs: 1\n"
        "num_episodes: 2\ncallback: empty\n"
    )
    exp_dir = tmp_path / "exp"
    real_inputs, before = CommandTrainer.input_files, {}

    def inputs_then_a_writer_finishes(self):  # multi_run reads its inputs; an experiment lands before the lock
        assert not exp_dir.exists()
        before.update(earlier_experiment(exp_dir))
        return real_inputs(self)

    monkeypatch.setattr(CommandTrainer, "input_files", inputs_then_a_writer_finishes)
    assert cli.main(["run", str(config), f"exp_dir={exp_dir}", "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert f"exp_dir={os.fspath(exp_dir)!r} already holds an experiment (" in captured.err
    assert "add overwrite=true to replace it, or exp_dir=<another path>." in captured.err
    assert "Running" not in captured.out
    assert before and snapshot(exp_dir) == before


def test_a_lock_refused_by_its_check_leaves_what_it_found(tmp_path):
    class Refused(Exception):
        pass

    def refuse():
        raise Refused("earlier experiment")

    new = tmp_path / "runs" / "exp"
    with pytest.raises(Refused):
        ExperimentLock(new, check=refuse).acquire()
    assert list(tmp_path.iterdir()) == []  # neither the lock file nor the directories it made
    with ExperimentLock(new, check=lambda: None):
        assert json.loads((new / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert (new / LOCK_FILE).read_bytes() == b""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_process_forked_under_the_lock_does_not_keep_it(tmp_path):
    """A flock belongs to the open file, which fork shares: a child forked while the lock is held (a warm worker of
    start_method="fork") kept the experiment locked after the call ended, "owner unknown"."""
    lock = ExperimentLock(tmp_path)
    lock.acquire()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child waits until the parent has tried again
        os.close(write)
        os.read(read, 1)
        os._exit(0)
    os.close(read)
    try:
        lock.release()
        with ExperimentLock(tmp_path):  # the child lives, and holds no copy of the lock
            pass
    finally:
        os.close(write)
        os.waitpid(child, 0)


@pytest.mark.slow
def test_two_calls_with_warm_fork_workers_share_an_exp_dir(tmp_path):
    from online_trainer import ExecutionOptions, shutdown_workers

    shutdown_workers()
    execution = ExecutionOptions(num_workers=2, start_method="fork", progress=False)
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    try:
        first = trainer.multi_run(2, num_episodes=3, seed_offset=0, execution=execution)
        second = trainer.multi_run(2, num_episodes=3, seed_offset=0, overwrite=True, execution=execution)
    finally:
        shutdown_workers()
    assert [len(run) for run in second] == [len(run) for run in first] == [3, 3]


def test_a_full_disk_at_the_lock_names_the_lock_file_and_leaves_nothing(tmp_path, monkeypatch):
    """`OSError: [Errno 28] No space left on device` named no file, and a new experiment's directory kept a .lock
    (tester F2)."""
    import errno

    from online_trainer import OnlineTrainer
    from online_trainer.experiment import lock
    from tests.conftest import RecordingAgent, make_counting_vec

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lock.os, "pwrite", full)
    exp = tmp_path / "new" / "exp"
    with pytest.raises(OSError, match=rf"could not write {exp / '.lock'}: No space left on device\. Free some space"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=str(exp)).multi_run(
            1, num_episodes=1, progress=False
        )
    assert list(tmp_path.iterdir()) == []


def test_every_file_of_an_experiment_takes_the_umask(tmp_path):
    """Tester V14: the lock files and the JSONL sink's file were created 0644 whatever the umask, so a group sharing
    an experiment directory (umask 002) could not take its lock or append to its log."""
    from online_trainer.callbacks import CSVCallback, JsonlCallback, MultiCallback, TBCallBack
    from online_trainer.hooks import Hook

    class Holds(Hook):  # the files that exist while the call runs (the lock's, the sinks')
        def on_run_end(self, ctx) -> None:
            seen.update({p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")})

    seen: dict[str, int] = {}
    umask = os.umask(0o002)
    try:
        trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
        trainer.call_back = MultiCallback(
            [JsonlCallback(tmp_path / "log.jsonl"), CSVCallback(tmp_path / "log.csv"), TBCallBack(tmp_path)]
        )
        trainer.multi_run(1, num_episodes=3, seed_offset=0, progress=False, hooks=[Holds()])
    finally:
        os.umask(umask)
    seen.update({p.relative_to(tmp_path).as_posix(): p.stat().st_mode & 0o777 for p in tmp_path.rglob("*")})
    assert {".lock", ".log.jsonl.lock", ".log.csv.lock", "log.jsonl", "log.csv", "metrics_run1.pkl"} <= set(seen)
    assert {name: mode for name, mode in seen.items() if mode not in (0o664, 0o775)} == {}
