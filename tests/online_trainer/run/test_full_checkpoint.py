"""The full checkpoint file: plain data only, a typed header, checked when it is read."""

from __future__ import annotations

import pickle
import re
import shutil

import gymnasium as gym
import pytest

from online_trainer import ExecutionOptions, OnlineTrainer
from online_trainer.agents import PPOAgent
from online_trainer.callbacks import CSVCallback, JsonlCallback, MultiCallback, TBCallBack
from online_trainer.hooks import Hook
from online_trainer.records import storage
from online_trainer.run import full_checkpoint

KW = dict(total_steps=900, seed_offset=3, checkpoint_freq=300, execution=ExecutionOptions(progress=False))


class Crash(Hook):
    """Raises KeyboardInterrupt in run 1 at ``at`` env steps (a kill, from inside)."""

    every_steps = 50

    def __init__(self, at: int) -> None:
        self.at = at

    def on_step(self, ctx) -> None:
        if ctx.run == 1 and ctx.global_step >= self.at:
            raise KeyboardInterrupt(f"crash at step {ctx.global_step}")


def env():
    return gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")


def agent(e):
    return PPOAgent(e, n_steps=64)


def trainer(exp_dir):
    t = OnlineTrainer(env, agent, exp_dir=exp_dir)
    t.call_back = MultiCallback(
        [JsonlCallback(exp_dir / "log.jsonl"), CSVCallback(exp_dir / "log.csv"), TBCallBack(exp_dir)]
    )
    return t


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """An experiment whose run 1 was cut off after its full checkpoint at step 600, with JSONL, CSV and TB sinks."""
    exp_dir = tmp_path_factory.mktemp("cut")
    with pytest.raises(KeyboardInterrupt):
        trainer(exp_dir).multi_run(1, hooks=[Crash(700)], **KW)
    return exp_dir


class PackageRefusingUnpickler(pickle.Unpickler):
    """Loads plain data and the classes of other libraries (numpy, torch); refuses any class of this package."""

    def find_class(self, module: str, name: str):
        if module.split(".")[0] in ("online_trainer", "callbacks"):
            raise pickle.UnpicklingError(f"the checkpoint holds an object of this package: {module}.{name}")
        return super().find_class(module, name)


def test_a_full_checkpoint_file_holds_no_object_of_the_package_with_the_built_in_sinks(interrupted):
    """Plain data only, the sinks' positions included: the file loads where none of the package's classes
    import, and a change to one of them cannot break a checkpoint."""
    with open(storage.resume_path(interrupted, 1), "rb") as file:
        header = PackageRefusingUnpickler(file).load()
        state = PackageRefusingUnpickler(file).load()
    assert header["format"] == state["version"] == full_checkpoint.FORMAT
    assert 600 <= header["global_step"] < 602  # at the checkpoint (2 sub-envs may overshoot)
    jsonl, csv, tensorboard = header["outputs"]["callback"]  # the MultiCallback's sinks, in order
    assert state["outputs"]["callback"] == [jsonl, csv, tensorboard]
    assert jsonl == {
        "kind": "file",
        "path": str(interrupted / "log.jsonl"),
        "offset": jsonl["offset"],
        "others": {},
        "counts": jsonl["counts"],
    }
    counts = jsonl["counts"]  # the run's lines then, by tag (stats/ and timing/ ones depend on the clock)
    assert counts["ep_return/run_1"] == counts["ep_length/run_1"] == 25 and counts["agents/run_1"] == 4
    assert all(tag.endswith("/run_1") for tag in counts)
    assert csv["path"] == str(interrupted / "log.csv") and tensorboard["path"].startswith(str(interrupted))
    assert tensorboard["flush_every"] == 1
    assert 0 < jsonl["offset"] < (interrupted / "log.jsonl").stat().st_size  # the run logged on after it


def test_the_header_is_typed_and_is_the_checkpoints(interrupted):
    header = full_checkpoint.read(interrupted, 1, header_only=True)
    saved = full_checkpoint.read(interrupted, 1)
    assert isinstance(header, full_checkpoint.CheckpointHeader) and header == saved.header()
    assert (header.run, header.seed, header.num_envs) == (1, 3, 2) and 600 <= header.global_step < 602
    assert header.env_kept and header.hooks == {} and header.version == full_checkpoint.FORMAT
    assert header.callback_position == saved.outputs["callback"]
    assert full_checkpoint.CheckpointHeader.from_state(header.to_state()) == header


def test_a_header_that_lacks_a_field_is_refused_naming_the_file_before_any_run_starts(interrupted, tmp_path):
    exp_dir = tmp_path / "exp"
    shutil.copytree(interrupted, exp_dir)
    path = storage.resume_path(exp_dir, 1)
    with open(path, "rb") as file:
        header, rest = pickle.load(file), file.read()
    del header["episodes"]
    path.write_bytes(pickle.dumps(header) + rest)  # the state after it is whole
    before = {p.name: p.read_bytes() for p in exp_dir.iterdir() if p.is_file() and p.name != ".lock"}
    started = []

    class Started(Hook):
        def on_run_start(self, ctx) -> None:
            started.append(ctx.run)

    with pytest.raises(
        ValueError,
        match=rf"{re.escape(str(path))} lacks \['episodes'\] in its header: it is damaged; remove it to start the run again",
    ):
        trainer(exp_dir).multi_run(1, hooks=[Crash(10**6), Started()], resume=True, **KW)
    after = {p.name: p.read_bytes() for p in exp_dir.iterdir() if p.is_file() and p.name != ".lock"}
    assert after == before and not started  # refused at planning: no run started, nothing changed
