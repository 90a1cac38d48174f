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
