"""A per-run store's position at a checkpoint (MLflow, W&B) is plain data that reads back whole."""

from __future__ import annotations

import pickle

import pytest

from online_trainer.callbacks.rewind import FilePosition
from online_trainer.callbacks.store_points import PointLedger, StorePosition, as_position, check_store_position


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
        "sink": "",
    }
    assert as_position(pickle.loads(pickle.dumps(state))) == StorePosition(
        {"ep_return": (2, 2), "agents/loss": (1, 30)},
        {"ep_return": "episode"},
        (("agents/loss", 30, 0.5), ("ep_return", 2, 2.0)),
    )


def test_no_position_or_another_sinks_is_none():
    assert as_position(None) is None
    assert as_position(FilePosition("log.jsonl", 10).to_state()) is None


def test_a_store_sink_refuses_the_position_of_another_sink():
    """MLflow's and W&B's sinks took any position: sinks swapped on resume, or a TensorBoard experiment resumed with
    MLflow, went ahead and left the stores without the points before the checkpoint (tester J3)."""
    from online_trainer.callbacks import MLflowCallback, MultiCallback, WandbCallback

    mlflow_at, wandb_at = StorePosition({}, sink="MLflow").to_state(), StorePosition({}, sink="W&B").to_state()
    sinks = MultiCallback([MLflowCallback(), WandbCallback(mode="offline")])
    sinks.check_position([mlflow_at, wandb_at])
    sinks.check_position([StorePosition({}).to_state(), None])  # a checkpoint of an earlier version; none kept
    with pytest.raises(ValueError, match=r"holds the position of the W&B store, but this sink logs to MLflow"):
        sinks.check_position([wandb_at, mlflow_at])
    with pytest.raises(ValueError, match=r"holds the position of the file log.jsonl, but this sink logs to W&B"):
        check_store_position(FilePosition("log.jsonl", 10).to_state(), "W&B")
