"""Agent state objects: deep copies that torch.load(weights_only=True) reads back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from online_trainer.agents._state import pack_state, read_state, state_file, unpack_state, write_state


def sample_state():
    return {
        "weights": torch.arange(3.0),
        "table": np.arange(6, dtype=np.float64).reshape(2, 3),
        "flags": np.array([True, False]),
        "rng": np.random.default_rng(0).bit_generator.state,
        "nested": [(1, 2.5, None, "x"), {"k": np.int64(4)}],
    }


def test_pack_unpack_round_trip_without_sharing_memory():
    state = sample_state()
    packed = pack_state(state)
    state["table"][0, 0] = 99.0
    state["weights"][0] = 99.0
    out = unpack_state(packed)
    assert out["table"].dtype == np.float64 and out["table"][0, 0] == 0.0
    assert out["weights"][0] == 0.0
    assert out["flags"].tolist() == [True, False]
    assert out["rng"] == np.random.default_rng(0).bit_generator.state
    assert out["nested"] == [(1, 2.5, None, "x"), {"k": 4}]
    out["table"][1, 1] = -1.0
    assert unpack_state(packed)["table"][1, 1] == 4.0


def test_written_state_loads_with_weights_only(tmp_path):
    target = write_state(str(tmp_path / "agent"), pack_state(sample_state()))
    assert target == str(tmp_path / "agent.pt") == state_file(tmp_path / "agent")
    assert state_file(target) == target
    raw = torch.load(target, weights_only=True)
    np.testing.assert_array_equal(unpack_state(raw)["table"], sample_state()["table"])
    np.testing.assert_array_equal(unpack_state(read_state(tmp_path / "agent"))["flags"], [True, False])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.pt"]


def test_unstorable_leaves_are_named():
    with pytest.raises(TypeError, match="dtype=object"):
        pack_state({"a": np.array([object()])})
    with pytest.raises(TypeError, match="of type set"):
        pack_state({"a": {1, 2}})


def test_a_state_that_cannot_be_written_names_its_file_not_a_temporary_one(tmp_path, monkeypatch):
    """A full disk gave torch's "[enforce fail at inline_container.cc:672] . unexpected pos 13376 vs 13328" or an
    OSError with no path; a read-only directory named the temporary file ".tmp-2xw4xcih.pt" (tester F2)."""
    import errno
    import shutil

    from online_trainer.agents import _state

    target = _state.state_file(tmp_path / "Run1_S500")

    def torch_on_a_full_disk(state, file):
        file.write(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 13376 vs 13328")

    monkeypatch.setattr(_state.torch, "save", torch_on_a_full_disk)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 0))
    with pytest.raises(OSError, match=rf"could not write the agent's state {target}: RuntimeError: .* Free some space"):
        _state.write_state(tmp_path / "Run1_S500", {"w": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the temporary file is removed

    def no_space(state, file):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_state.torch, "save", no_space)
    with pytest.raises(OSError, match=rf"could not write the agent's state {target}: No space left on device\. Free"):
        _state.write_state(tmp_path / "Run1_S500", {"w": 1})

    def read_only(path, flags, mode):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(_state.os, "open", read_only)
    with pytest.raises(OSError, match=rf"could not write the agent's state {target}: Permission denied\.$"):
        _state.write_state(tmp_path / "Run1_S500", {"w": 1})


def test_a_state_file_takes_the_umask_like_the_experiments_other_files(tmp_path):
    """The periodic checkpoints were 0600 (mkstemp's mode) where the best state and the records were 0644 (tester
    D14): a group that reads the experiment could not load them."""
    import os

    umask = os.umask(0o022)
    try:
        target = write_state(tmp_path / "Run1_S500", pack_state(sample_state()))
        assert os.stat(target).st_mode & 0o777 == 0o644
        os.umask(0o002)
        target = write_state(tmp_path / "Run1_S600", pack_state(sample_state()))
        assert os.stat(target).st_mode & 0o777 == 0o664
    finally:
        os.umask(umask)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Run1_S500.pt", "Run1_S600.pt"]
