"""A per-run store's position at a checkpoint (MLflow, W&B) is plain data that reads back whole."""

from __future__ import annotations

import pickle

from online_trainer.callbacks.rewind import FilePosition
from online_trainer.callbacks.store_points import PointLedger, StorePosition, as_position


def test_a_store_position_is_plain_data_that_reads_back_whole():
    ledger = PointLedger(tail=2)
    ledger.axes["ep_return"] = "episode"
    for name, x, value in [("ep_return", 1, 1.0), ("agents/loss", 30, 0.5), ("ep_return", 2, 2.0)]:
        ledger.add(name, x, value)
    state = ledger.position().to_state()
    assert state == {
        "kind": "store",
        "counts": {"ep_return": [2, 2], "agents/loss": [1, 30]},
        "axes": {"ep_return": "episode"},
        "tail": [["agents/loss", 30, 0.5], ["ep_return", 2, 2.0]],
    }
    assert as_position(pickle.loads(pickle.dumps(state))) == StorePosition(
        {"ep_return": (2, 2), "agents/loss": (1, 30)},
        {"ep_return": "episode"},
        (("agents/loss", 30, 0.5), ("ep_return", 2, 2.0)),
    )


def test_no_position_or_another_sinks_is_none():
    assert as_position(None) is None
    assert as_position(FilePosition("log.jsonl", 10).to_state()) is None
