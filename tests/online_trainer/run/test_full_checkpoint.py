"""The full checkpoint file: plain data only, a typed header, checked when it is read."""

from __future__ import annotations

import pickle
import re
import shutil
import warnings

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


def _cut(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path):
    path.write_bytes(bytes(range(256)) * (path.stat().st_size // 256 + 1))


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40  # one bit inside the body: the size and both pickles' framing as they were
    path.write_bytes(bytes(data))


def _zero_start(path):
    data = bytearray(path.read_bytes())
    data[:64] = bytes(64)  # a block lost to a power cut: the size as it was
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "file", "says"),
    [
        (_cut, "Run1_Resume.pkl", r"is damaged \(it was cut short or added to"),
        (_garbage, "Run1_Resume.pkl", r"is damaged \(its header does not load"),
        (_flip, "Run1_Resume.pkl", r"is damaged \(its bytes do not match the checksum written with them\)"),
        (_zero_start, "metrics_run1.pkl", r"does not hold what run 1's full checkpoint Run1_Resume.pkl recorded: "),
        (_cut, "metrics_run1.pkl", r"does not hold what run 1's full checkpoint .* fewer than the"),
        (lambda path: path.unlink(), "metrics_run1.pkl", r"does not hold .*: it does not exist"),
    ],
)
def test_a_damaged_checkpoint_or_stream_is_refused_naming_it_before_any_run_starts(
    interrupted, tmp_path, damage, file, says
):
    """A full checkpoint cut short, garbage or with a changed byte, or a metrics stream cut short, lost, or zeroed at its
    start, was found only as the run loaded it (a bare UnpicklingError, after the sinks' files were cut back), or not
    at all: a stream zeroed at its start was continued, and the resumed run's records could not be read past it."""
    exp_dir = tmp_path / "exp"
    shutil.copytree(interrupted, exp_dir)
    damage(exp_dir / file)
    before = {p.name: p.read_bytes() for p in exp_dir.iterdir() if p.is_file() and p.name != ".lock"}
    with pytest.raises(ValueError, match=re.escape(str(exp_dir / file)) + " " + says) as refused:
        trainer(exp_dir).multi_run(1, hooks=[Crash(10**6)], resume=True, **KW)
    assert "emove" in str(refused.value) and "start the run again" in str(refused.value)
    after = {p.name: p.read_bytes() for p in exp_dir.iterdir() if p.is_file() and p.name != ".lock"}
    assert after == before  # refused at planning: no file cut back or created
    # as the message says: without the checkpoint the run starts again, and its records are whole
    storage.resume_path(exp_dir, 1).unlink()
    runs = trainer(exp_dir).multi_run(1, resume=True, **KW)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no chunk left unreadable
        on_disk = [
            record for chunk in storage.iter_metrics_chunks(storage.metrics_path(exp_dir, 1)) for record in chunk
        ]
    assert len(on_disk) == len(runs[0]) > 0 and [r["ep_return"] for r in on_disk] == [r["ep_return"] for r in runs[0]]


def test_a_checkpoint_written_before_it_had_a_trailer_still_loads(interrupted, tmp_path):
    exp_dir = tmp_path / "exp"
    shutil.copytree(interrupted, exp_dir)
    path = storage.resume_path(exp_dir, 1)
    with open(path, "rb") as file:
        header, body = pickle.load(file), pickle.load(file)
    del header["sealed"]
    path.write_bytes(pickle.dumps(header) + pickle.dumps(body))
    assert full_checkpoint.read(exp_dir, 1, verify=True).header() == full_checkpoint.read(interrupted, 1).header()


class LockInState(Hook):
    """A hook whose state_dict returns what does not pickle."""

    def on_episode_end(self, ctx, record) -> None:
        pass

    def state_dict(self):
        import threading

        return {"lock": threading.Lock()}

    def load_state_dict(self, state) -> None:
        pass


def test_a_checkpoint_part_that_does_not_pickle_is_named_with_the_fix(tmp_path):
    """A hook's state_dict() or the agent's save() returning a lock failed the run with a bare "cannot pickle
    '_thread.lock' object" that named neither (testers A2 and H2)."""
    from online_trainer import RunsFailedError

    # said before the first env step, not at the first checkpoint after the training up to it (tester H3)
    with pytest.raises(TypeError) as failed:
        trainer(tmp_path).multi_run(1, hooks=[LockInState()], **KW)
    assert str(failed.value).startswith(
        "what hook LockInState#0's state_dict() returned does not pickle (TypeError: cannot pickle '_thread.lock' "
        "object), so no full checkpoint of the run could be written: return plain data"
    )
    assert (
        "before its first env step; every run was stopped, and nothing was kept on disk" in failed.value.__notes__[-1]
    )
    assert not tmp_path.exists() or not list(tmp_path.glob("metrics_run*"))

    class LockedPPO(PPOAgent):
        def save(self, path=None, **kwargs):
            import threading

            state = super().save(path, **kwargs)
            return None if state is None else {**state, "lock": threading.Lock()}

    t = OnlineTrainer(env, lambda e: LockedPPO(e, n_steps=64), exp_dir=tmp_path / "agent")
    with pytest.raises(RunsFailedError) as failed:
        t.multi_run(1, **KW)
    assert "what the agent's save() returned does not pickle (TypeError: cannot pickle '_thread.lock' object)" in str(
        failed.value
    )


def test_a_callback_checkpoint_that_does_not_pickle_is_named_with_the_fix(tmp_path):
    """W19: a sink's checkpoint() returning a lock failed the run with "cannot pickle '_thread.lock' object", from
    the checkpoint's header, naming neither the sink nor checkpoint()."""
    import threading

    from online_trainer import RunsFailedError
    from online_trainer.callbacks import CallBack

    class Locked(CallBack):
        def __call__(self, data, tag, step, force=False):
            pass

        def checkpoint(self, run_tag):
            return {"where": threading.Lock()}

        def rewind(self, run_tag, position, since=None):
            pass

    t = trainer(tmp_path)
    t.call_back = Locked()
    with pytest.raises(RunsFailedError) as failed:
        t.multi_run(1, **KW)
    assert (
        "what the callback's checkpoint() (test_a_callback_checkpoint_that_does_not_pickle_is_named_with_the_fix."
        "<locals>.Locked) returned does not pickle (TypeError: cannot pickle '_thread.lock'" in str(failed.value)
    )


class SaveOnly(PPOAgent):
    """An agent with save() and no load() (PPOAgent's load hidden)."""

    load = None


def test_an_agent_without_load_gets_no_full_checkpoint_and_a_warning_once(tmp_path, caplog):
    """Its full checkpoints were written, and the resume then failed with AttributeError: 'A' object has no
    attribute 'load' (tester A3). Now none is written, the call says why once, and a resume starts again."""
    caplog.set_level("WARNING", logger="online_trainer")
    make = OnlineTrainer(env, SaveOnly, exp_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        make.multi_run(2, hooks=[Crash(700)], **{**KW, "total_steps": 900})
    assert not list(tmp_path.glob("Run*_Resume*"))  # cut off at 700, past the checkpoint steps 300 and 600
    assert caplog.text.count("The agent SaveOnly has save() but no load(): with checkpoint_freq=300") == 1
    assert "a resumed run starts again from step 0" in caplog.text
    caplog.clear()
    runs = make.multi_run(2, **{**KW, "total_steps": 900}, resume=True)
    assert "run 1 (interrupted) starts again from step 0, as it has no full checkpoint" in caplog.text
    assert "has save() but no load()" not in caplog.text  # said once an experiment
    fresh = OnlineTrainer(env, SaveOnly, exp_dir=tmp_path / "fresh").multi_run(2, **{**KW, "total_steps": 900})
    assert caplog.text.count("The agent SaveOnly has save() but no load()") == 1  # another experiment: said again
    assert [[(r["ep_return"], r["global_step"]) for r in run] for run in runs] == [
        [(r["ep_return"], r["global_step"]) for r in run] for run in fresh
    ]


def test_a_full_checkpoint_refuses_an_agent_that_lost_its_load():
    with pytest.raises(TypeError, match=r"the agent SaveOnly has no load\(\) to take it back: add load"):
        full_checkpoint.load_agent(SaveOnly(env()), {"state": {}})


def test_an_agent_whose_save_writes_nothing_is_told_so_and_its_resume_does_not_claim_its_state(tmp_path, caplog):
    """Tester A16: a save(path) that wrote nothing went unremarked through training; evaluate("last") then asked
    whether checkpoint_freq was set (it was), and a resume called load() with a path that held no file."""
    from tests.conftest import RecordingAgent, make_counting_vec

    loads = []

    class SavesNothing(RecordingAgent):
        def save(self, path=None):
            return None  # and writes nothing

        def load(self, path):
            loads.append(path)

    class StopAt(Hook):
        every_steps = 10

        def on_step(self, ctx):
            if ctx.global_step >= 25:
                raise KeyboardInterrupt

    trainer = OnlineTrainer(make_counting_vec(1), SavesNothing, exp_dir=tmp_path)
    with caplog.at_level("WARNING"), pytest.raises(KeyboardInterrupt):
        trainer.multi_run(1, total_steps=40, seed_offset=0, checkpoint_freq=10, progress=False, hooks=[StopAt()])
    said = "SavesNothing.save('" + str(tmp_path / "Run1_") + "Best') returned no state and wrote no file or folder"
    assert said in caplog.text and caplog.text.count("returned no state and wrote no file") == 1  # once a run
    caplog.clear()
    with caplog.at_level("WARNING"):
        trainer.multi_run(1, total_steps=40, seed_offset=0, checkpoint_freq=10, progress=False, resume=True)
    assert loads == [] and "holds no file (the agent's save(path) wrote none): SavesNothing goes on as built" in (
        caplog.text
    )
    with pytest.raises(FileNotFoundError, match=r"though it ran with checkpoint_freq=10: its agent's save\(path\)"):
        trainer.evaluate("last")
