"""Resuming an interrupted experiment: the records, streams and sink files of an uninterrupted run."""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from online_trainer import (
    CheckpointOptions,
    EvaluationOptions,
    ExecutionOptions,
    OnlineTrainer,
    RecordOptions,
    RunsFailedError,
    load_episodes,
    load_evaluations,
)
from online_trainer.agents import DQNAgent, PPOAgent, QLearningAgent
from online_trainer.callbacks import EmptyCallBack, JsonlCallback, MultiCallback, TBCallBack
from online_trainer.envs import make_env
from online_trainer.hooks import Hook, StopOnPlateau, StopOnReturn
from online_trainer.records import storage
from online_trainer.run import full_checkpoint
from tests.conftest import RecordingAgent, make_counting_vec

COLUMNS = ["run", "seed", "episode_index", "ep_return", "ep_length", "global_step"]
WALL_CLOCK = ("stats", "timing")  # SPS and timing shares: wall-clock figures, logged at a cadence in seconds


def summary_iterator(path: str):
    return EventFileLoader(path).Load()


class Crash(Hook):
    """Raises ``error`` in run 1 at ``at`` env steps (a kill, from inside)."""

    every_steps = 50

    def __init__(self, at: int, error: type[BaseException] = KeyboardInterrupt) -> None:
        self.at, self.error = at, error

    def on_step(self, ctx) -> None:
        if ctx.run == 1 and ctx.global_step >= self.at:
            raise self.error(f"crash at step {ctx.global_step}")


def cartpole(num_envs: int = 2, mode: str = "sync"):
    return lambda: gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode=mode)


AGENTS = {
    "ppo": (cartpole(2), lambda env: PPOAgent(env, n_steps=64)),
    "dqn": (cartpole(1), lambda env: DQNAgent(env, learning_starts=100, save_buffer=True)),
    "q_learning": (
        lambda: gym.make_vec("CliffWalking-v1", num_envs=2, vectorization_mode="sync"),
        lambda env: QLearningAgent(env),
    ),
}


def trainer(root, name, env, agent):
    t = OnlineTrainer(env, agent, exp_dir=root / name)
    t.call_back = MultiCallback([TBCallBack(root / name, flush_every=1), JsonlCallback(root / name / "log.jsonl")])
    return t


def tb_scalars(exp_dir):
    acc = EventAccumulator(str(exp_dir), size_guidance={"scalars": 0})
    acc.Reload()
    # stats/ and timing/ (SPS, timing shares: wall-clock figures, logged at a cadence in seconds) differ by design
    return {
        tag: [(e.step, e.value) for e in acc.Scalars(tag)]
        for tag in acc.Tags()["scalars"]
        if tag.split("/")[0] not in ("stats", "timing")
    }


def jsonl(path):
    with open(path) as file:
        lines = [json.loads(line) for line in file]
    return sorted(
        (entry["tag"], entry["step"], json.dumps(entry["values"], sort_keys=True))
        for entry in lines
        if entry["tag"].split("/")[-2] not in ("stats", "timing")
    )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ppo", "dqn", "q_learning"])
def test_a_resumed_run_gives_the_records_and_logs_of_an_uninterrupted_one(tmp_path, name):
    env, agent = AGENTS[name]
    kw = dict(total_steps=1500, seed_offset=3, checkpoint_freq=300, eval_freq=500, eval_episodes=2, progress=False)
    reference = trainer(tmp_path, "ref", env, agent).multi_run(2, **kw)
    with pytest.raises(KeyboardInterrupt):
        trainer(tmp_path, "cut", env, agent).multi_run(2, hooks=[Crash(1000)], **kw)
    manifest = json.loads((tmp_path / "cut" / storage.MANIFEST_FILE).read_text())
    assert [r["status"] for r in manifest["runs"]] == ["interrupted", "pending"]
    header = full_checkpoint.read(tmp_path / "cut", 1, header_only=True)
    assert 900 <= header.global_step < 902 and header.env_kept  # at the checkpoint (2 sub-envs may overshoot)
    resumed = trainer(tmp_path, "cut", env, agent).multi_run(2, resume=True, **kw)
    for ref_run, run in zip(reference, resumed):
        assert [{k: r[k] for k in COLUMNS[2:]} for r in ref_run] == [{k: r[k] for k in COLUMNS[2:]} for r in run]
        assert all(np.array_equal(a["actions"], b["actions"]) for a, b in zip(ref_run, run))
    ref_df, cut_df = load_episodes(tmp_path / "ref"), load_episodes(tmp_path / "cut")
    assert ref_df[COLUMNS].equals(cut_df[COLUMNS])
    assert (
        load_evaluations(tmp_path / "ref")[["run", "global_step", "eval_return"]].values.tolist()
        == load_evaluations(tmp_path / "cut")[["run", "global_step", "eval_return"]].values.tolist()
    )
    assert tb_scalars(tmp_path / "ref") == tb_scalars(tmp_path / "cut")
    assert jsonl(tmp_path / "ref" / "log.jsonl") == jsonl(tmp_path / "cut" / "log.jsonl")
    assert not storage.resume_path(tmp_path / "cut", 1).exists()  # a finished run needs none


def test_an_experiment_moved_or_reached_by_another_path_resumes_its_logs_whole(tmp_path, monkeypatch):
    """The sinks' files are matched by name: a moved directory (or a relative path at resume) loses no entry."""
    import shutil

    env, agent = AGENTS["ppo"]
    kw = dict(total_steps=1500, seed_offset=3, checkpoint_freq=300, progress=False)
    trainer(tmp_path, "ref", env, agent).multi_run(2, **kw)
    with pytest.raises(KeyboardInterrupt):
        trainer(tmp_path, "cut", env, agent).multi_run(2, hooks=[Crash(1000)], **kw)
    shutil.move(tmp_path / "cut", tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    resumed = OnlineTrainer(env, agent, exp_dir="moved")  # relative, where the checkpoint has an absolute path
    resumed.call_back = MultiCallback([TBCallBack("moved", flush_every=1), JsonlCallback("moved/log.jsonl")])
    resumed.multi_run(2, resume=True, **kw)
    assert tb_scalars(tmp_path / "ref") == tb_scalars(tmp_path / "moved")
    assert jsonl(tmp_path / "ref" / "log.jsonl") == jsonl(tmp_path / "moved" / "log.jsonl")


def test_a_failed_run_resumes_from_its_checkpoint(tmp_path):
    env, agent = AGENTS["ppo"]
    kw = dict(total_steps=1200, seed_offset=5, checkpoint_freq=400, progress=False)
    reference = OnlineTrainer(env, agent, exp_dir=tmp_path / "ref").multi_run(1, **kw)
    with pytest.raises(RunsFailedError):
        OnlineTrainer(env, agent, exp_dir=tmp_path / "cut").multi_run(1, hooks=[Crash(1000, RuntimeError)], **kw)
    resumed = OnlineTrainer(env, agent, exp_dir=tmp_path / "cut").multi_run(1, resume=True, **kw)
    assert [r["ep_return"] for r in reference[0]] == [r["ep_return"] for r in resumed[0]]
    point = json.loads((tmp_path / "cut" / storage.MANIFEST_FILE).read_text())["runs"][0]["resumed_from"]
    assert 800 <= point["global_step"] < 802 and point["env_restored"] is True
    assert point["episodes"] == sum(r["global_step"] <= point["global_step"] for r in resumed[0])


def test_an_env_that_does_not_pickle_restarts_with_contiguous_indices(tmp_path):
    env = cartpole(2, mode="async")
    agent = lambda e: PPOAgent(e, n_steps=64)  # noqa: E731
    kw = dict(total_steps=1500, seed_offset=9, checkpoint_freq=500, progress=False)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(1, hooks=[Crash(1200)], **kw)
    assert not full_checkpoint.read(tmp_path, 1, header_only=True).env_kept
    run = OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(1, resume=True, **kw)[0]
    indices, steps = [r["episode_index"] for r in run], [r["global_step"] for r in run]
    assert indices == list(range(1, len(run) + 1))
    assert steps == sorted(steps)  # two sub-envs may end episodes on one step
    assert all(r["agent_seed"] == 9 for r in run)
    entry = json.loads((tmp_path / storage.MANIFEST_FILE).read_text())["runs"][0]
    assert entry["status"] == "finished" and entry["resumed_from"]["env_restored"] is False
    assert 1000 <= entry["resumed_from"]["global_step"] < 1002
    assert (
        full_checkpoint.restart_seed(9, 1000)
        == full_checkpoint.restart_seed(9, 1000)
        != full_checkpoint.restart_seed(9, 500)
    )


@pytest.mark.parametrize(
    "change,field",
    [
        ({"total_steps": 2000}, "total_steps"),
        ({"seed_offset": 4}, "seed_offset"),
        ({"checkpoint_freq": 500}, "checkpoint_freq"),
        ({"tuning_hp": {"lr": 0.1}}, "tuning_hp"),
        ({"dump_transitions": True}, "dump_transitions"),
        ({"evaluation": EvaluationOptions(freq=200)}, "evaluation"),
        ({"records": RecordOptions(stats_window=5)}, "records.stats_window"),
        ({"checkpoints": CheckpointOptions(buffers=True)}, "checkpoints.buffers"),
    ],
)
def test_a_call_that_differs_from_the_experiment_is_refused_naming_the_field(tmp_path, change, field):
    env, agent = AGENTS["q_learning"]
    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300, progress=False)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, hooks=[Crash(400)], **kw)
    before = files_with_times(tmp_path, lock=True)
    time.sleep(0.01)  # a file written again would get another modification time
    with pytest.raises(ValueError, match=rf"{field}=.*but this call has {field}="):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, resume=True, **{**kw, **change})
    assert files_with_times(tmp_path, lock=True) == before  # a refused call changes nothing, not even the lock's time


def test_a_resume_that_gives_evaluations_another_env_is_refused_and_a_new_factory_of_one_is_not(tmp_path):
    """Tester E4: evaluations on the training env's factory, resumed with evaluation.env given, were accepted (a
    factory is recorded as None, as no env is), and the run's later evaluations were of another env."""
    env, agent = AGENTS["q_learning"]
    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300, progress=False)
    for first, then, said in (
        (None, lambda: env(), "evaluation.env=None (the training env's factory), but this call has evaluation.env=an"),
        (lambda: env(), None, "evaluation.env=an env factory of its own, but this call has evaluation.env=None (the"),
    ):
        exp_dir = tmp_path / ("own" if first else "training")
        evaluation = EvaluationOptions(freq=200, episodes=2, env=first)
        with pytest.raises(KeyboardInterrupt):
            OnlineTrainer(env, agent, exp_dir=exp_dir).multi_run(2, hooks=[Crash(400)], evaluation=evaluation, **kw)
        before = files_with_times(exp_dir, lock=True)
        time.sleep(0.01)
        other = EvaluationOptions(freq=200, episodes=2, env=then)
        with pytest.raises(ValueError, match=re.escape(said)):
            OnlineTrainer(env, agent, exp_dir=exp_dir).multi_run(2, resume=True, evaluation=other, **kw)
        assert files_with_times(exp_dir, lock=True) == before
    again = EvaluationOptions(freq=200, episodes=2, env=lambda: env())  # another factory object: not comparable
    OnlineTrainer(env, agent, exp_dir=tmp_path / "own").multi_run(2, resume=True, evaluation=again, **kw)


def test_an_experiment_of_an_earlier_version_that_recorded_no_call_is_refused_unless_its_config_says_the_call(
    tmp_path,
):
    """A manifest of the 2026-11-23 version has no call record: resume=True accepted any call, and a resume with
    another budget replaced the runs' records with those of another experiment, without a word."""
    env, agent = AGENTS["q_learning"]
    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300, progress=False)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, hooks=[Crash(400)], **kw)
    manifest = json.loads((tmp_path / storage.MANIFEST_FILE).read_text())
    del manifest["call"]
    (tmp_path / storage.MANIFEST_FILE).write_text(json.dumps(manifest))
    before = files_with_times(tmp_path, lock=True)
    time.sleep(0.01)
    for call in (kw, {**kw, "total_steps": 8000}):
        with pytest.raises(ValueError, match=r"written by an earlier version of online_trainer that recorded neither"):
            OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, resume=True, **call)
    assert files_with_times(tmp_path, lock=True) == before
    # the command's config.yaml says how it was called: another budget is refused, the same one resumes
    (tmp_path / "config.yaml").write_text("total_steps: 600\nnum_episodes: null\ncheckpoint_freq: 300\n")
    with pytest.raises(ValueError, match=r"which ran with total_steps=600, but this call has total_steps=8000"):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, resume=True, **{**kw, "total_steps": 8000})
    OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, resume=True, **kw)
    assert [r["status"] for r in json.loads((tmp_path / storage.MANIFEST_FILE).read_text())["runs"]] == ["finished"] * 2


@pytest.mark.slow
def test_a_resumed_env_with_another_number_of_sub_envs_is_refused_and_execution_options_may_differ(tmp_path):
    _, agent = AGENTS["q_learning"]

    def cliff(num_envs):
        return lambda: gym.make_vec("CliffWalking-v1", num_envs=num_envs, vectorization_mode="sync")

    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(cliff(1), agent, exp_dir=tmp_path).multi_run(2, hooks=[Crash(400)], progress=False, **kw)
    before = files_with_times(tmp_path, lock=True)
    with pytest.raises(
        ValueError,
        match=r"which ran with num_envs \(of the env\)=1, but this call has num_envs "
        r"\(of the env\)=2",
    ):
        OnlineTrainer(cliff(2), agent, exp_dir=tmp_path).multi_run(2, resume=True, progress=False, **kw)
    assert files_with_times(tmp_path, lock=True) == before
    # what cannot change the records may differ: workers, progress, checkpoints kept, records held in memory
    runs = OnlineTrainer(cliff(1), agent, exp_dir=tmp_path).multi_run(
        2,
        resume=True,
        num_workers=2,
        checkpoints=CheckpointOptions(keep=1),
        records=RecordOptions(in_memory=False, keep_agents=False),
        execution=ExecutionOptions(progress=False),
        **kw,
    )
    assert runs == [None, None]
    assert [r["status"] for r in json.loads((tmp_path / storage.MANIFEST_FILE).read_text())["runs"]] == ["finished"] * 2


def test_resume_without_an_experiment_says_so(tmp_path):
    env, agent = AGENTS["q_learning"]
    with pytest.raises(FileNotFoundError, match="resume=True, but exp_dir="):
        OnlineTrainer(env, agent, exp_dir=tmp_path / "none").multi_run(1, total_steps=100, resume=True)
    assert not (tmp_path / "none").exists()  # refused before anything is created
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no experiment"):
        OnlineTrainer(env, agent, exp_dir=tmp_path / "empty").multi_run(1, total_steps=100, resume=True)
    assert list((tmp_path / "empty").iterdir()) == []  # no .lock either
    with pytest.raises(ValueError, match="resume=True writes into the experiment directory"):
        OnlineTrainer(env, agent).multi_run(1, total_steps=100, resume=True)


def test_a_full_checkpoint_holds_the_buffer_only_when_asked(tmp_path):
    env, _ = AGENTS["dqn"]
    kw = dict(total_steps=1200, seed_offset=3, checkpoint_freq=1000, progress=False)
    sizes = {}
    for buffers in (False, True):
        with pytest.raises(KeyboardInterrupt):
            OnlineTrainer(env, lambda e: DQNAgent(e, learning_starts=100), exp_dir=tmp_path / str(buffers)).multi_run(
                1, hooks=[Crash(1100)], checkpoint_buffers=buffers, **kw
            )
        sizes[buffers] = storage.resume_path(tmp_path / str(buffers), 1).stat().st_size
        agent = DQNAgent(env())
        agent.load(full_checkpoint.read(tmp_path / str(buffers), 1).agent["state"])
        assert agent.buffer.size == (1000 if buffers else 0)  # the buffer at the checkpoint, or an empty one
    assert sizes[False] < sizes[True]


def test_a_checkpoint_of_another_format_version_is_refused_before_any_run_starts(tmp_path, monkeypatch):
    env, agent = AGENTS["q_learning"]
    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300, progress=False)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, hooks=[Crash(400)], **kw)
    saved = full_checkpoint.read(tmp_path, 1)
    assert isinstance(saved, full_checkpoint.FullCheckpoint) and saved.version == full_checkpoint.FORMAT
    assert saved.loop.global_step == 300 and saved.tracker["num_envs"] == 2
    monkeypatch.setattr(full_checkpoint, "FORMAT", full_checkpoint.FORMAT + 1)  # this package now reads a newer layout
    before = files_with_times(tmp_path, lock=True)
    time.sleep(0.01)
    started = []
    monkeypatch.setattr(Hook, "on_run_start", lambda self, ctx: started.append(ctx.run), raising=False)
    with pytest.raises(
        ValueError,
        match=rf"Run1_Resume.pkl was written by another version of online_trainer "
        rf"\(format {full_checkpoint.FORMAT - 1}, this one reads {full_checkpoint.FORMAT}\).*remove it",
    ):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, resume=True, **kw)
    assert files_with_times(tmp_path, lock=True) == before and not started  # refused by the lock's check


def test_a_checkpoint_of_the_version_before_is_read_without_the_part_it_lacks(tmp_path):
    """Format 3 (before the normalization part) continues: a run checkpointed before an upgrade is not lost."""
    env, agent = AGENTS["q_learning"]
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(
            1, total_steps=600, seed_offset=3, checkpoint_freq=300, progress=False, hooks=[Crash(400)]
        )
    state = full_checkpoint.read(tmp_path, 1).to_state()
    del state["normalization"]
    older = full_checkpoint.FullCheckpoint.from_state({**state, "version": 3})
    assert older.normalization is None and older.version == 3 and older.loop.global_step == 300
    full_checkpoint.check_version(3, "a header")  # the header of such a file passes too
    with pytest.raises(ValueError, match=r"format 2, this one reads"):
        full_checkpoint.FullCheckpoint.from_state({**state, "version": 2})


def test_a_full_checkpoint_holds_plain_data_only(tmp_path):
    """The run's own parts (loop, episodes in progress, records, hooks) are saved as plain data: no object of
    online_trainer is pickled, so an attribute added to one of its classes cannot break a checkpoint."""
    import pickle
    import pickletools

    env, agent = AGENTS["ppo"]
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(
            1,
            total_steps=1500,
            seed_offset=3,
            checkpoint_freq=300,
            eval_freq=500,
            eval_episodes=2,
            progress=False,
            dump_metrics=False,
            hooks=[Crash(1000)],
        )
    saved = full_checkpoint.read(tmp_path, 1)
    assert saved.tracker["table"]["returns"] and saved.tracker["actions"]["t"] > 0  # records and actions are kept
    for part in (saved.loop.to_state(), saved.tracker, saved.events, saved.rng, saved.normalization):
        ops = pickletools.genops(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))
        strings = [arg for op, arg, _ in ops if isinstance(arg, str)]
        assert not [s for s in strings if s.startswith("online_trainer")]


def files_with_times(root, lock=False):
    """Every file under ``root`` with its bytes and modification time (``.lock``'s time aside unless ``lock``: a
    call that goes ahead writes its owner into it, and empties it again when it ends)."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns if lock or p.name != ".lock" else None)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_resuming_a_finished_experiment_writes_nothing(tmp_path, caplog):
    env, agent = AGENTS["ppo"]
    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300, eval_freq=300, eval_episodes=2, progress=False)
    first = trainer(tmp_path, "exp", env, agent).multi_run(2, **kw)
    before = files_with_times(tmp_path / "exp")
    before_with_lock = files_with_times(tmp_path / "exp", lock=True)
    assert "all_metrics.pkl" in before and "log.jsonl" in before and all(len(run) > 5 for run in first)
    folder, log = (tmp_path / "exp").stat().st_mtime_ns, (tmp_path / "exp" / "log.jsonl").stat().st_ctime_ns
    time.sleep(0.01)  # a file written again would get another modification time
    again = trainer(tmp_path, "exp", env, agent).multi_run(2, resume=True, **kw)
    assert files_with_times(tmp_path / "exp") == before
    # nor a folder made and removed in it, with a link to the sink's file (tester V14)
    assert (tmp_path / "exp").stat().st_mtime_ns == folder and (
        tmp_path / "exp" / "log.jsonl"
    ).stat().st_ctime_ns == log
    # the lock's time too: its owner line came and went, and the time is put back (R11: a refused call changed it)
    assert files_with_times(tmp_path / "exp", lock=True) == before_with_lock
    assert [[r["ep_return"] for r in run] for run in again] == [[r["ep_return"] for r in run] for run in first]
    # and says so (U17: a notebook cell run again returned without a word)
    assert f"resume: every run of {tmp_path / 'exp'} ended in an earlier call (2 runs): nothing runs." in caplog.text


def test_resuming_a_finished_experiment_of_dump_metrics_false_runs_nothing_again(tmp_path):
    """Its runs keep no metrics_run{i}.pkl, and a finished run without one was taken for a run to do: every
    resume=True trained every run again from step 0, replacing their checkpoints and TensorBoard files (tester F3)."""
    kw = dict(total_steps=300, seed_offset=0, checkpoint_freq=100, dump_metrics=False, progress=False)
    built = []

    def agent(env):
        built.append(1)
        return QLearningAgent(env)

    OnlineTrainer(make_env("Corridor-v0", num_envs=1), agent, exp_dir=tmp_path).multi_run(2, **kw)
    before = files_with_times(tmp_path)
    assert len(built) == 2 and not any(name.startswith("metrics_run") for name in before)
    time.sleep(0.01)
    again = OnlineTrainer(make_env("Corridor-v0", num_envs=1), agent, exp_dir=tmp_path).multi_run(2, resume=True, **kw)
    assert len(built) == 2 and files_with_times(tmp_path) == before
    assert list(again) == [None, None]  # their records are nowhere


def test_a_finished_run_whose_stream_was_removed_runs_again_and_says_so(tmp_path, caplog):
    kw = dict(num_episodes=5, seed_offset=0, checkpoint_freq=10, progress=False)
    trainer = OnlineTrainer(make_env("Corridor-v0", num_envs=1), QLearningAgent, exp_dir=tmp_path)
    first = trainer.multi_run(2, **kw)
    (tmp_path / "metrics_run1.pkl").unlink()
    caplog.set_level("WARNING", logger="online_trainer")
    again = trainer.multi_run(2, resume=True, **kw)
    assert (
        "run 1 (finished) has no metrics_run1.pkl on disk (removed since it ended?): it runs again from step 0, and "
        "replaces its checkpoints and what the callback logged of it"
    ) in caplog.text
    assert [[r["ep_return"] for r in run] for run in again] == [[r["ep_return"] for r in run] for run in first]
    assert storage.load_run_metrics(tmp_path, 1) and "run 2" not in caplog.text


@pytest.mark.parametrize(
    "hooks, message",
    [
        (
            [],
            r"\(run 1, Run1_Resume.pkl\) holds the user hooks \['StopOnPlateau#0'\], but this run's hooks with state "
            r"are \[\]",
        ),
        (
            [StopOnPlateau(window=10**6), StopOnReturn(10**6)],
            r"holds the user hooks \['StopOnPlateau#0'\], but this run's hooks with state are \['StopOnPlateau#0', "
            r"'StopOnReturn#0'\]",
        ),
        (
            [StopOnReturn(10**6)],
            r"holds the user hooks \['StopOnPlateau#0'\], but this run's hooks with state are "
            r"\['StopOnReturn#0'\]",
        ),
    ],
)
def test_a_resumed_call_with_other_hooks_with_state_is_refused_before_anything_changes(tmp_path, hooks, message):
    env, agent = AGENTS["q_learning"]
    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300, progress=False)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, hooks=[StopOnPlateau(window=10**6), Crash(400)], **kw)
    assert full_checkpoint.read(tmp_path, 1, header_only=True) is not None
    manifest = storage.read_manifest(tmp_path)  # made before the call recorded its hooks: the checkpoints still say
    del manifest["call"]["hooks"]
    storage.write_manifest(tmp_path, manifest)
    before = files_with_times(tmp_path, lock=True)
    time.sleep(0.01)
    with pytest.raises(ValueError, match=message + r": resume with the hooks"):
        OnlineTrainer(env, agent, exp_dir=tmp_path).multi_run(2, resume=True, hooks=hooks, **kw)
    assert files_with_times(tmp_path, lock=True) == before  # refused by the lock's check: not even its time changes


@pytest.mark.parametrize(
    "first, then, message",
    [
        (
            lambda d: MultiCallback([TBCallBack(d), JsonlCallback(d / "log.jsonl")]),
            lambda d: TBCallBack(d),
            r"does not fit the callback TBCallBack\(.*\): the run's checkpoint holds the positions of 2 sinks \(the file "
            r"events.out.tfevents.*, the file log.jsonl\), but this call has this one sink",
        ),
        (
            lambda d: TBCallBack(d),
            lambda d: MultiCallback([TBCallBack(d), JsonlCallback(d / "log.jsonl")]),
            r"the run's checkpoint holds the position of the file events.out.tfevents.*, but this MultiCallback "
            r"has 2 sinks \(TBCallBack, JsonlCallback\)",
        ),
        (
            lambda d: MultiCallback([TBCallBack(d), JsonlCallback(d / "log.jsonl")]),
            lambda d: MultiCallback([JsonlCallback(d / "log.jsonl"), TBCallBack(d)]),
            r"the sinks are in another order than the experiment's \(its sink 2's position fits this call's sink 1\); "
            r"JsonlCallback\(.*\): the run's checkpoint holds the position of 'events.out.tfevents.* for this sink, which writes no "
            r"such file",
        ),
        (  # the sinks' files stayed as they stood when the run was cut off: neither cut back nor continued
            lambda d: MultiCallback([TBCallBack(d), JsonlCallback(d / "log.jsonl")]),
            lambda d: EmptyCallBack(),
            r"EmptyCallBack\(\): the run's checkpoint holds the positions of 2 sinks \(the file events.out.tfevents.*, "
            r"the file log.jsonl\), but EmptyCallBack logs nothing",
        ),
        (  # its folder's values after the checkpoint stayed, and the resumed run logged them again in the other one
            lambda d: TBCallBack(d),
            lambda d: TBCallBack(d / "tb"),
            r"TBCallBack\(log_dir='.*exp/tb'.*\): the run's checkpoint holds the position of 'events.out.tfevents.*' in "
            r"'.*exp', but this sink writes in '.*exp/tb', which has no such file",
        ),
    ],
)
def test_a_resume_with_other_callbacks_than_the_experiments_is_refused_before_anything_changes(
    tmp_path, first, then, message
):
    """A run that continues from its checkpoint needs the callback it checkpointed: with another, the sinks'
    files would be cut to a position that is not theirs (before, a MultiCallback given one sink's position
    removed every entry of the run from each of its sinks, and the resumed run logged only what came after)."""
    env, agent = AGENTS["ppo"]  # episodes end and the agent logs before the checkpoint: the sinks have files
    kw = dict(total_steps=600, seed_offset=3, checkpoint_freq=300, progress=False)
    exp = tmp_path / "exp"
    cut = OnlineTrainer(env, agent, exp_dir=exp)
    cut.call_back = first(exp)
    with pytest.raises(KeyboardInterrupt):
        cut.multi_run(2, hooks=[Crash(400)], **kw)
    assert full_checkpoint.read(exp, 1, header_only=True) is not None
    before = files_with_times(exp, lock=True)
    time.sleep(0.01)
    resumed = OnlineTrainer(env, agent, exp_dir=exp)
    resumed.call_back = then(exp)
    with pytest.raises(
        ValueError,
        match=r"The saved state \(run 1, Run1_Resume.pkl\) .*" + message + r".*resume with "
        r"the callbacks the experiment ran with",
    ):
        resumed.multi_run(2, resume=True, **kw)
    assert files_with_times(exp, lock=True) == before
    again = OnlineTrainer(env, agent, exp_dir=exp)  # with its own callbacks the experiment resumes
    again.call_back = first(exp)
    reference = OnlineTrainer(env, agent, exp_dir=tmp_path / "ref").multi_run(2, **kw)
    assert [[r["ep_return"] for r in run] for run in again.multi_run(2, resume=True, **kw)] == [
        [r["ep_return"] for r in run] for run in reference
    ]


def test_a_resumed_call_hands_back_every_run_alike_with_its_evaluations(tmp_path):
    """Runs kept from the earlier call, runs continued from a checkpoint and runs started now all come back as
    RunRecords (kept and continued ones used to be plain lists, without ``column``), and ``trainer.evaluations``
    holds the kept runs' evaluations too (read from ``eval_run{i}.pkl``; they used to be None)."""
    import online_trainer.envs  # noqa: F401  (registers Corridor-v0)
    from online_trainer import EvaluationOptions, RunRecords
    from online_trainer.agents import QLearningAgent
    from online_trainer.envs import make_env

    def trainer_for(exp_dir):
        return OnlineTrainer(make_env("Corridor-v0", num_envs=1), QLearningAgent, exp_dir=exp_dir)

    class CrashRun2(Crash):
        def on_step(self, ctx) -> None:
            if ctx.run == 2 and ctx.global_step >= self.at:
                raise self.error(f"crash at step {ctx.global_step}")

    kw = dict(
        total_steps=3000, seed_offset=3, checkpoint_freq=1000, evaluation=EvaluationOptions(freq=1000, episodes=2)
    )
    reference = trainer_for(tmp_path / "ref")
    expected = reference.multi_run(3, **kw)
    with pytest.raises(KeyboardInterrupt) as cut:
        trainer_for(tmp_path / "cut").multi_run(3, hooks=[CrashRun2(1500)], **kw)  # run 1 done, 2 cut, 3 pending
    assert (
        "their flushed records and full checkpoints are on disk. To go on, make the same call with resume=True."
        in (cut.value.__notes__[-1])
    )
    resumed = trainer_for(tmp_path / "cut")
    runs = resumed.multi_run(3, resume=True, **kw)
    assert all(isinstance(run, RunRecords) for run in runs)
    for run, ref in zip(runs, expected):
        assert run.column("ep_return").tolist() == ref.column("ep_return").tolist()
        assert run.column("episode_index").tolist() == list(range(1, len(ref) + 1))
        assert run[-1]["global_step"] == ref[-1]["global_step"] and len(run[1:3]) == 2
        assert all(np.array_equal(a, b) for a, b in zip(run.column("actions"), ref.column("actions")))
    assert [[e["mean"] for e in run] for run in resumed.evaluations] == [
        [e["mean"] for e in run] for run in reference.evaluations
    ]
    assert resumed.agents[0] is None and resumed.agents[2] is not None  # run 1 ran in the earlier call


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_resume_on_another_env_is_refused_before_any_step_and_keeps_the_experiment(tmp_path, workers):
    """A pending run of a resumed CartPole experiment ran wholly on Acrobot, and its env id became the experiment's
    (an outside tester's find)."""
    exp = tmp_path / "exp"
    dqn = lambda env: DQNAgent(env, learning_starts=50, save_buffer=True)  # noqa: E731
    options = dict(total_steps=600, seed_offset=0, checkpoint_freq=200)
    execution = ExecutionOptions(num_workers=workers, progress=False)
    with pytest.raises(KeyboardInterrupt):  # run 1 is cut off at step 300, runs 2 and 3 never start
        OnlineTrainer(cartpole(2), dqn, exp_dir=exp).multi_run(3, **options, hooks=[Crash(300)], progress=False)
    assert json.loads((exp / "env.json").read_text()) == {
        "env_id": "CartPole-v1",
        "num_envs": 2,
        "observation_space": ["Box", [4], "float32"],
        "action_space": ["Discrete", 2, 0],
    }
    before = _files(exp)
    acrobot = lambda: gym.make_vec("Acrobot-v1", num_envs=2, vectorization_mode="sync")  # noqa: E731
    with pytest.raises(ValueError) as refused:
        OnlineTrainer(acrobot, dqn, exp_dir=exp).multi_run(3, resume=True, **options, execution=execution)
    assert str(refused.value).endswith(
        "but this call's env differs: env id 'Acrobot-v1' (it ran with 'CartPole-v1'); observations Box of shape (6,), "
        "float32 (it ran with Box of shape (4,), float32); actions Discrete(3) (it ran with Discrete(2)). Call it with "
        "the env it was made with, or start a new experiment in another exp_dir."
    )
    assert _files(exp) == before  # refused before anything was written

    # a factory that gives the run another env than the call's check saw: each run checks its own, before its first step
    calls = []

    def changing():
        calls.append(1)
        return cartpole(2)() if len(calls) == 1 else acrobot()

    with pytest.raises(ValueError, match="but run 2's env differs: env id 'Acrobot-v1'") as refused:
        OnlineTrainer(changing, dqn, exp_dir=exp).multi_run(3, resume=True, **options, execution=execution)
    after, manifest = _files(exp), storage.read_manifest(exp)
    assert after[Path("env.json")] == before[Path("env.json")]
    assert "the manifest is as this call found it" in " ".join(getattr(refused.value, "__notes__", []))
    if workers == 1:  # run 1 resumed (on its checkpoint's env) and finished before run 2 was refused: only that is kept
        assert [entry["status"] for entry in manifest["runs"]] == ["finished", "pending", "pending"]
        # with what it wrote in this call: its last checkpoints were removed with the refused run's files
        assert {Path("Run1_S400.pt"), Path("Run1_Last.pt"), Path("Run1_Best_agent.t")} <= set(after) - set(before)
        assert not [name for name in set(after) - set(before) if str(name).startswith(("Run2", "Run3"))]
    else:  # runs 1 and 2 started together: the manifest as it was (run 1 goes on from its checkpoint next time)
        assert after[Path("manifest.json")] == before[Path("manifest.json")]
    OnlineTrainer(cartpole(2), dqn, exp_dir=exp).multi_run(3, resume=True, **options, execution=execution)
    uninterrupted = tmp_path / "uninterrupted"
    OnlineTrainer(cartpole(2), dqn, exp_dir=uninterrupted).multi_run(3, **options)
    assert load_episodes(exp)[COLUMNS].equals(load_episodes(uninterrupted)[COLUMNS])


def test_a_resume_whose_factory_builds_another_agent_is_refused_before_any_step(tmp_path):
    """A resumed sweep whose agent factory built DQN with another batch size was accepted: the configuration that
    had not started trained with it, the others with the old one, and the ranking flipped (an outside tester's
    find). Each run compares what its agent says of itself as built with the experiment's agent.json."""
    exp = tmp_path / "exp"
    options = dict(total_steps=600, seed_offset=0, checkpoint_freq=200, progress=False)

    def dqn(batch_size=64):
        return lambda env: DQNAgent(env, learning_starts=50, batch_size=batch_size, save_buffer=True)

    with pytest.raises(KeyboardInterrupt):  # run 1 is cut off at step 300, runs 2 and 3 never start
        OnlineTrainer(cartpole(2), dqn(), exp_dir=exp).multi_run(3, **options, hooks=[Crash(300)])
    recorded = json.loads((exp / "agent.json").read_text())
    assert recorded["class"] == "online_trainer.agents._dqn.DQNAgent"
    assert recorded["settings"]["config.batch_size"] == 64 and recorded["settings"]["config.hidden_sizes"] == [64, 64]
    before = _files(exp)
    with pytest.raises(ValueError) as refused:
        OnlineTrainer(cartpole(2), dqn(32), exp_dir=exp).multi_run(3, resume=True, **options)
    assert str(refused.value).startswith(
        f"resume=True continues the experiment in {str(exp)!r} with the agent it trained, but run 1's agent differs: "
        "config.batch_size 32 (it ran with 64). Its runs would not all train the same agent. Call it with the agent "
        "factory it was made with (the same arguments, the same code), or start a new experiment in another exp_dir."
    )
    assert "the manifest is as this call found it" in " ".join(getattr(refused.value, "__notes__", []))

    def unchanged():  # the TensorBoard points after run 1's checkpoint included: the cut made to resume is put back
        return _files(exp) == before  # (E12: a refused resume took 2,419 points out of a TensorBoard file)

    assert any("tfevents" in path.name for path in before)
    assert unchanged()
    with pytest.raises(ValueError, match="run 1's agent differs: its class is online_trainer.agents._ppo.PPOAgent"):
        OnlineTrainer(cartpole(2), PPOAgent, exp_dir=exp).multi_run(3, resume=True, **options)
    assert unchanged()
    OnlineTrainer(cartpole(2), dqn(), exp_dir=exp).multi_run(3, resume=True, **options)
    uninterrupted = tmp_path / "uninterrupted"
    OnlineTrainer(cartpole(2), dqn(), exp_dir=uninterrupted).multi_run(3, **options)
    assert load_episodes(exp)[COLUMNS].equals(load_episodes(uninterrupted)[COLUMNS])
    # a sweep's configurations are experiments: the same check, and hyperparameters the sweep gives through set_hp
    # are not the factory's (they come after, and the sweep checks its grid)
    sweep_dir = tmp_path / "sweep"
    grid = {"lr": [1e-3, 3e-3]}
    sweep_options = dict(num_runs=1, total_steps=600, seed_offset=0, checkpoint_freq=200, progress=False)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(cartpole(2), dqn(), exp_dir=sweep_dir).sweep(grid, **sweep_options, hooks=[Crash(300)])
    sweep_before = _files(sweep_dir)
    with pytest.raises(
        ValueError, match=r"but lr=0\.001 run 1's agent differs: config.batch_size 32 \(it ran with 64\)"
    ):
        OnlineTrainer(cartpole(2), dqn(32), exp_dir=sweep_dir).sweep(grid, **sweep_options, resume=True)
    assert _files(sweep_dir) == sweep_before  # its TensorBoard file too, cut for both configurations then put back
    OnlineTrainer(cartpole(2), dqn(), exp_dir=sweep_dir).sweep(grid, **sweep_options, resume=True)
    # a configuration that had not started is compared with another one's agent (the tester's: it was the one that
    # trained with the new batch size)
    wider = {"lr": [1e-3, 3e-3, 1e-2]}
    with pytest.raises(ValueError) as refused:
        OnlineTrainer(cartpole(2), dqn(32), exp_dir=sweep_dir).sweep(wider, **sweep_options, resume=True)
    assert str(refused.value).startswith(
        f"resume=True continues the experiment in {str(sweep_dir / 'lr=0.01')!r} with the agent its sweep trained "
        "(configuration 'lr=0.001'), but lr=0.01 run 1's agent differs: config.batch_size 32 (it ran with 64)."
    )
    assert not (sweep_dir / "lr=0.01" / "agent.json").exists()


class Stamped(DQNAgent):
    """An agent that keeps the time it was built: a setting no one chose, different in every run."""

    def __init__(self, env):
        super().__init__(env, learning_starts=50, save_buffer=True)
        self.created = time.time()


def test_removing_agent_json_lets_a_resume_of_several_runs_through(tmp_path):
    """Tester V10: with two runs to restart, the first one recorded agent.json again and the second was refused
    against it, so the refusal's advice (remove agent.json) did not work. A resumed call records nothing."""
    exp = tmp_path / "exp"
    options = dict(total_steps=600, seed_offset=0, checkpoint_freq=200, progress=False)
    with pytest.raises(KeyboardInterrupt):  # run 1 is cut off at step 300, runs 2 and 3 never start
        OnlineTrainer(cartpole(2), Stamped, exp_dir=exp).multi_run(3, **options, hooks=[Crash(300)])
    with pytest.raises(ValueError, match=r"run 1's agent differs: created [0-9.]+ \(it ran with [0-9.]+\)"):
        OnlineTrainer(cartpole(2), Stamped, exp_dir=exp).multi_run(3, resume=True, **options)
    (exp / "agent.json").unlink()
    OnlineTrainer(cartpole(2), Stamped, exp_dir=exp).multi_run(3, resume=True, **options)
    assert not (exp / "agent.json").exists()
    assert [run["status"] for run in storage.read_manifest(exp)["runs"]] == ["finished"] * 3


class Decay(Hook):
    """A hook with state, made with an argument."""

    def __init__(self, factor: float = 0.5) -> None:
        self.factor, self.calls = factor, 0

    def on_episode_end(self, ctx, record) -> None:
        self.calls += 1

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = state["calls"]


def test_a_resume_with_other_hooks_with_state_is_refused_even_before_any_checkpoint(tmp_path):
    """Hooks were checked against full checkpoints only, and their arguments never: a resume with Decay(0.9) for
    Decay(0.5), or without Decay when no checkpoint had been written, was accepted (an outside tester's finds)."""
    from tests.conftest import RecordingAgent

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt) as cut:  # run 1 cut off with no checkpoint: only the manifest says what ran
        trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=[Decay(0.5), Crash(60)], progress=False)
    assert cut.value.__notes__[-1] == (  # no full checkpoint was written: the note does not promise one
        "online_trainer: the runs were stopped; their flushed records are on disk. To go on, make the same call with "
        "resume=True (runs without a full checkpoint start again; checkpoint_freq writes them)."
    )
    before = storage.read_manifest(tmp_path)
    assert before["call"]["hooks"] == {"Decay#0": {"class": "Decay", "params": {"factor": 0.5}}}
    refusals = {
        "Decay#0 was made with factor=0.5, this call's with factor=0.9": [Decay(0.9)],
        "Decay#0 is left out": [],
        "StopOnReturn#0 is added": [Decay(0.5), StopOnReturn(1e9)],
    }
    for difference, hooks in refusals.items():
        with pytest.raises(ValueError, match=f"hooks with state differ: {difference}. Call it with the hooks"):
            trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=hooks, progress=False, resume=True)
        assert storage.read_manifest(tmp_path) == before
    # the same hooks resume, in any order of classes; a hook without state may come and go
    trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=[Crash(10**9), Decay(0.5)], progress=False, resume=True)
    assert [entry["status"] for entry in storage.read_manifest(tmp_path)["runs"]] == ["finished", "finished"]


def test_a_run_that_starts_again_is_cut_after_the_runs_that_continue_in_its_event_file(tmp_path):
    """A process's event file holds its runs one after the other: removing every event of run 1 (failed, no
    checkpoint) first moved run 2's events, and run 2's checkpoint offset then fell inside one of them."""
    import types

    from online_trainer.experiment.resuming import rewind_outputs

    sink = TBCallBack(tmp_path)
    sink.start_run(1, 0, {}, str(tmp_path))
    for step in range(1, 6):
        sink({"loss": float(step)}, "agents/run_1", step)
    sink.start_run(2, 1, {}, str(tmp_path))
    for step in range(1, 6):
        sink({"loss": float(step)}, "agents/run_2", step)
    header = types.SimpleNamespace(callback_position=sink.checkpoint("run_2"))
    for step in range(6, 9):
        sink({"loss": float(step)}, "agents/run_2", step)
    sink.close()
    manifest = {"runs": [{"run": 1, "status": "failed"}, {"run": 2, "status": "interrupted"}]}
    rewind_outputs(TBCallBack(tmp_path), manifest, {1: None, 2: header})
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    events.Reload()
    assert events.Tags()["scalars"] == ["agents/loss/run_2"]
    assert [e.step for e in events.Scalars("agents/loss/run_2")] == [1, 2, 3, 4, 5]


class GlobalRandomAgent:
    """Acts with the global generators, as CleanRL and Stable-Baselines3 agents do (``np.random``, ``random``, torch),
    seeded in ``reset``; nothing else in its state."""

    def __init__(self, env) -> None:
        self.n = int(env.single_action_space.n)

    def reset(self, seed: int) -> None:
        import random

        import torch

        np.random.seed(seed)
        random.seed(seed)
        torch.manual_seed(seed)

    def act(self, obs):
        import random

        import torch

        low = np.random.randint(0, self.n, size=len(obs))
        return (low + random.randrange(2) + int(torch.randint(0, 2, ()))) % self.n

    def update(self, next_obs, reward, terminated, truncated, call_back=None) -> None:
        pass

    def save(self, path=None):
        return {}

    def load(self, state) -> None:
        pass


def test_an_agent_on_the_global_generators_resumes_to_the_records_of_an_uninterrupted_run(tmp_path):
    """The checkpoint's global generators were put back after the resumed run's first act, which drew from the
    generators as the process had them: the records parted from the uninterrupted run's at the resume (tester A2)."""
    kw = dict(total_steps=3000, seed_offset=3, checkpoint_freq=500, progress=False)
    env = cartpole(4)
    reference = OnlineTrainer(env, GlobalRandomAgent, exp_dir=tmp_path / "ref").multi_run(2, **kw)
    with pytest.raises(KeyboardInterrupt):
        OnlineTrainer(env, GlobalRandomAgent, exp_dir=tmp_path / "cut").multi_run(2, hooks=[Crash(1200)], **kw)
    np.random.seed(12345)  # the resuming process's generators stand elsewhere
    resumed = OnlineTrainer(env, GlobalRandomAgent, exp_dir=tmp_path / "cut").multi_run(2, resume=True, **kw)
    assert json.loads((tmp_path / "cut" / storage.MANIFEST_FILE).read_text())["runs"][0]["resumed_from"]["env_restored"]
    for ref_run, run in zip(reference, resumed):
        assert [{k: r[k] for k in COLUMNS[2:]} for r in ref_run] == [{k: r[k] for k in COLUMNS[2:]} for r in run]
        assert all(np.array_equal(a["actions"], b["actions"]) for a, b in zip(ref_run, run))


def test_a_hook_argument_that_is_a_numpy_number_is_recorded_and_checked_on_resume(tmp_path):
    """``Decay(np.float64(0.5))`` (a grid's value) was not plain data to the record: a resume with another value was
    accepted, and the experiment mixed two configurations (tester H2). A record of an earlier version, which left such
    an argument out, still resumes with it."""
    from tests.conftest import RecordingAgent

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    grid = np.linspace(0.5, 0.9, 5)
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=[Decay(grid[0]), Crash(60)], progress=False)
    manifest = storage.read_manifest(tmp_path)
    assert manifest["call"]["hooks"] == {"Decay#0": {"class": "Decay", "params": {"factor": 0.5}}}
    with pytest.raises(ValueError, match="Decay#0 was made with factor=0.5, this call's with factor=0.9"):
        trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=[Decay(grid[-1])], progress=False, resume=True)
    manifest["call"]["hooks"]["Decay#0"]["params"] = {}  # as an earlier version recorded it
    storage.write_manifest(tmp_path, manifest)
    trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=[Decay(grid[0])], progress=False, resume=True)
    assert [entry["status"] for entry in storage.read_manifest(tmp_path)["runs"]] == ["finished", "finished"]


def test_a_hook_made_with_nan_resumes_with_nan(tmp_path):
    """NaN != NaN: the same call was refused ("made with factor=nan, this call's with factor=nan") (tester R2)."""
    from tests.conftest import RecordingAgent

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=[Decay(float("nan")), Crash(60)], progress=False)
    trainer.multi_run(2, num_episodes=40, seed_offset=0, hooks=[Decay(np.nan)], progress=False, resume=True)
    assert [entry["status"] for entry in storage.read_manifest(tmp_path)["runs"]] == ["finished", "finished"]


@pytest.mark.parametrize("crash_at", [1000, 100])  # after run 1's checkpoint at 900; before any (it starts again)
def test_a_resume_keeps_another_experiments_entries_in_files_they_share(tmp_path, crash_at):
    """Two experiments logged to one JSONL and one CSV file (and one TensorBoard folder), under the same tags
    (``ep_return/run_1``). Resuming the second removed the first's entries as its own (tester T2: 236 JSONL lines and
    598 CSV rows of a finished experiment gone)."""
    from online_trainer.callbacks import CSVCallback

    env, agent = AGENTS["ppo"]
    shared = tmp_path / "shared"
    kw = dict(total_steps=1500, checkpoint_freq=300, progress=False)

    def experiment(name, **more):
        t = OnlineTrainer(env, agent, exp_dir=tmp_path / name)
        t.call_back = MultiCallback(
            [JsonlCallback(shared / "log.jsonl"), CSVCallback(shared / "log.csv"), TBCallBack(shared, flush_every=1)]
        )
        return t.multi_run(2, **kw, **more)

    def entries():
        rows = csv.DictReader((shared / "log.csv").read_text().splitlines())
        kept = sorted((r["tag"], r["step"], r["value"]) for r in rows if r["tag"].split("/")[-2] not in WALL_CLOCK)
        points = []  # every event file's points, read raw: TensorBoard's reader drops points it takes for stale
        for file in sorted(shared.glob("events.out.tfevents.*")):
            for event in summary_iterator(str(file)):
                points += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
        return jsonl(shared / "log.jsonl"), kept, sorted(p for p in points if p[0].split("/")[0] not in WALL_CLOCK)

    experiment("first", seed_offset=0)
    first = entries()
    experiment("second", seed_offset=5)
    both = entries()
    for name in ("first", "second"):
        shutil.rmtree(tmp_path / name)
    shutil.rmtree(shared)

    experiment("first", seed_offset=0)
    with pytest.raises(KeyboardInterrupt):
        experiment("second", seed_offset=5, hooks=[Crash(crash_at)])
    assert storage.resume_path(tmp_path / "second", 1).exists() == (crash_at > 900)
    experiment("second", seed_offset=5, resume=True)
    after = entries()
    assert after == both  # the first experiment's entries all there, the second's once each
    assert all(set(mine) < set(together) for mine, together in zip(first, after))


def test_videos_of_evaluations_after_the_checkpoint_are_removed_on_resume(tmp_path):
    """Tester E4: a resumed run whose env restarted left videos/ with mp4 files of evaluations the resume had cut
    back (eval9_step18001.mp4 beside the new eval9_step18000.mp4)."""
    pytest.importorskip("imageio_ffmpeg")
    pytest.importorskip("pygame")
    evaluation = EvaluationOptions(
        freq=50,
        episodes=1,
        record_video=1,
        env=lambda: gym.make_vec("CartPole-v1", num_envs=1, render_mode="rgb_array"),
    )
    kw = dict(total_steps=300, seed_offset=0, checkpoint_freq=100, evaluation=evaluation, progress=False)
    trainer = OnlineTrainer(cartpole(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(1, hooks=[Crash(150)], **kw)  # evaluations at 50, 100, 150; the checkpoint at 100
    videos = tmp_path / "videos" / "run1"
    assert sorted(p.name for p in videos.iterdir()) == ["eval1_step50.mp4", "eval2_step100.mp4", "eval3_step150.mp4"]
    (videos / "eval3_step150.mp4").rename(videos / "eval3_step151.mp4")  # as a restarted env's later steps name it
    trainer.multi_run(1, resume=True, **kw)
    filmed = sorted(p.name for p in videos.iterdir())
    assert filmed == [f"eval{k}_step{50 * k}.mp4" for k in range(1, 7)]
    assert {Path(e["video"]).name for e in trainer.evaluations[0]} == set(filmed)
    # a run that starts again from step 0 keeps none of its earlier videos
    (videos / "eval6_step300.mp4").rename(videos / "eval6_step301.mp4")
    manifest = json.loads((tmp_path / storage.MANIFEST_FILE).read_text())
    manifest["runs"][0]["status"] = "interrupted"
    (tmp_path / storage.MANIFEST_FILE).write_text(json.dumps(manifest))
    trainer.multi_run(1, resume=True, **kw)
    assert sorted(p.name for p in videos.iterdir()) == filmed


def test_the_note_of_a_stop_before_the_first_full_checkpoint_does_not_ask_for_checkpoint_freq(tmp_path):
    """F13: a Ctrl-C before the first of the checkpoint_freq checkpoints was told "checkpoint_freq writes them"."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt) as cut:
        trainer.multi_run(1, num_episodes=40, seed_offset=0, checkpoint_freq=30, hooks=[Crash(20)], progress=False)
    assert cut.value.__notes__[-1].endswith(
        "make the same call with resume=True (runs start again: none had reached its first full checkpoint yet)."
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_a_resume_averages_on_from_the_calls_a_tb_point_was_waiting_for(tmp_path, workers):
    """Tester V16: with TBCallBack(flush_every=3) the calls waiting for their point at a checkpoint were lost on
    resume, and every later point of the agent's values was a window shifted from an uninterrupted run's."""
    from tests.conftest import RecordingAgent, make_counting_vec

    def run(name, hooks=(), resume=False):
        t = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / name)
        t.call_back = TBCallBack(tmp_path / name, flush_every=3)
        t.multi_run(
            2, total_steps=400, seed_offset=0, checkpoint_freq=100, hooks=list(hooks), resume=resume, progress=False
        )

    run("whole")
    with pytest.raises(KeyboardInterrupt):
        run("cut", [Crash(160)])  # 100 env steps (50 vector steps, 50 updates) at its checkpoint: 2 calls waiting
    run("cut", resume=True)
    whole, cut = tb_scalars(tmp_path / "whole"), tb_scalars(tmp_path / "cut")
    assert len(whole["agents/loss/run_1"]) > 60 and whole == cut


class Lines:
    """A sink of one's own without checkpoint() and rewind(), as write-a-sink.md's first example: it keeps lines."""

    def __init__(self) -> None:
        self.lines: list[tuple] = []

    def __call__(self, data, tag, step, force=False):
        self.lines += [(tag, step, key) for key in data]

    def reset(self):
        pass

    def close(self):
        pass


def test_a_resume_with_a_sink_that_cannot_be_cut_back_says_so_naming_it_and_the_runs(tmp_path, caplog):
    """W19: write-a-sink.md's own TsvCallBack lost 101 episodes of a run after a kill and a resume, and a sink with
    neither checkpoint() nor rewind() held 34 episodes twice: nothing said so."""
    import logging

    kw = dict(total_steps=600, seed_offset=0, checkpoint_freq=200, progress=False)
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = [JsonlCallback(tmp_path / "log.jsonl"), Lines()]
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(2, hooks=[Crash(450)], **kw)
    caplog.set_level(logging.WARNING, logger="online_trainer")
    trainer.multi_run(2, resume=True, **kw)
    said = [r.getMessage() for r in caplog.records if "cannot be cut back" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "Lines cannot be cut back to the runs' checkpoints (it has no checkpoint() and rewind() of its own): what it "
        "logged of run_1 after its last checkpoint is held twice once it runs again"
    ), said


def test_a_sink_with_rewind_but_no_checkpoint_is_refused_when_it_is_given():
    """W19: a sink whose checkpoint() was left at the base's (None) had rewind(run_tag, None) called for a run that
    continued from its checkpoint, which removed every point before it: 1,392 rows gone without a word."""
    from online_trainer.callbacks import CallBack

    class RewindOnly(CallBack):
        def rewind(self, run_tag, position, since=None):
            pass

    class CheckpointOnly(CallBack):
        def checkpoint(self, run_tag):
            return {"rows": 0}

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    with pytest.raises(TypeError, match=r"trainer.call_back: .*RewindOnly defines rewind\(\) but not checkpoint\(\): "):
        trainer.call_back = RewindOnly()
    with pytest.raises(TypeError, match=r"trainer.call_back\[1\]: .*CheckpointOnly defines checkpoint\(\) but not "):
        trainer.call_back = [TBCallBack("unused"), CheckpointOnly()]

    class NoClose:
        def __call__(self, data, tag, step, force=False):
            pass

        def reset(self):
            pass

    with pytest.raises(TypeError, match=r"lacks close\(\): subclass online_trainer.callbacks.CallBack"):
        trainer.call_back = NoClose()
