"""The sinks' small files: written whole or not at all, and a disk error names the file and leaves no temporary."""

from __future__ import annotations

import errno
import os

import pytest

from online_trainer.callbacks import JsonlCallback, files


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("write", [files.create_with, files.write_atomic])
def test_a_full_disk_names_the_file_and_leaves_no_temporary(tmp_path, monkeypatch, write):
    """A full disk left .events.out.tfevents.0.custom_scalars_layout.<pid>.tmp (0 bytes) in exp_dir for good, and
    the error said only "[Errno 28] No space left on device" (tester F3)."""
    path = tmp_path / "events.out.tfevents.0.custom_scalars_layout"
    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match=rf"could not write {path}: No space left on device. Free some space") as error:
        write(path, b"layout")
    assert error.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    write(path, b"layout")
    assert path.read_bytes() == b"layout" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_a_line_file_sink_names_its_file_on_a_full_disk(tmp_path, monkeypatch):
    sink = JsonlCallback(tmp_path / "log.jsonl")
    sink({"ep_return": 1.0}, "ep_return/run_1", 1, force=True)
    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(OSError, match=rf"could not write {tmp_path / 'log.jsonl'}: No space left on device"):
        sink({"ep_return": 2.0}, "ep_return/run_1", 2, force=True)
        sink.flush()
