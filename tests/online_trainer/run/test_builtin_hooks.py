"""The runner's jobs as built-in hooks: batched on_episodes, their order against user hooks, state_dict round
trips, keep_checkpoints and checkpoint_buffers."""

from __future__ import annotations

import dataclasses
import json
import logging
import os

import numpy as np
import pytest
import torch

from online_trainer import OnlineTrainer, RunsFailedError
from online_trainer.callbacks import JsonlCallback
from online_trainer.hooks import Hook
from online_trainer.loop.hook_protocol import HOOK_METHODS, RunContext, check_hooks
from online_trainer.options.groups import CheckpointOptions, RunPlan
from online_trainer.progress.display import NoProgress
from online_trainer.run import one_run as run_module
from online_trainer.run.events import run_events
from online_trainer.run.hook_runner import HookRunner
from tests.conftest import RecordingAgent, make_counting_vec

SEED = 0


def same(a, b) -> bool:
    """Deep equality of states that hold numpy arrays."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


class Batches(Hook):
    """Keeps what on_episodes and on_episode_end see, in the order they are called."""

    seen: list = []

    def on_episodes(self, ctx, first_index, returns, lengths):
        Batches.seen.append(
            (
                "batch",
                first_index,
                [float(r) for r in returns],
                [int(n) for n in lengths],
                ctx.global_step,
                ctx.episodes,
            )
        )

    def on_episode_end(self, ctx, record):
        Batches.seen.append(("episode", record["episode_index"], record["global_step"]))


@pytest.mark.parametrize("num_envs", [1, 3])
def test_on_episodes_gets_every_episode_batched_by_env_step_before_the_per_episode_calls(num_envs):
    Batches.seen = []
    (records,) = OnlineTrainer(make_counting_vec(num_envs), RecordingAgent).multi_run(
        1, num_episodes=40, seed_offset=SEED, progress=False, hooks=[Batches()]
    )
    batches = [entry for entry in Batches.seen if entry[0] == "batch"]
    assert [r for b in batches for r in b[2]] == [r["ep_return"] for r in records]
    assert [n for b in batches for n in b[3]] == [r["ep_length"] for r in records]
    index = 1
    for _, first, returns, _, step, last in batches:
        assert first == index and last == first + len(returns) - 1
        assert {r["global_step"] for r in records[first - 1 : last]} == {step}  # one env step per batch
        index = last + 1
    if num_envs == 3:
        assert any(len(b[2]) > 1 for b in batches)
    # each batch, then its episodes one by one
    expected = []
    for batch in batches:
        first, count, step = batch[1], len(batch[2]), batch[4]
        expected += [batch, *(("episode", first + j, step) for j in range(count))]
    assert Batches.seen == expected


def test_a_hook_with_only_on_episodes_is_a_hook():
    class OnlyBatches:
        def on_episodes(self, ctx, first_index, returns, lengths):
            pass

    assert len(check_hooks([OnlyBatches()])) == 1


class SeesBuiltins(Hook):
    """Checks, at each event, that the built-in job it follows is done."""

    notes: list = []

    def on_eval(self, ctx, result):
        from online_trainer.records.storage import iter_metrics_chunks

        on_disk = [r for chunk in iter_metrics_chunks(os.path.join(ctx.exp_dir, "eval_run1.pkl")) for r in chunk]
        SeesBuiltins.notes.append(("eval", result["global_step"], on_disk[-1]["global_step"] == result["global_step"]))
        SeesBuiltins.notes.append(("eval keys", sorted(result)))

    def on_episodes(self, ctx, first_index, returns, lengths):
        SeesBuiltins.notes.append(("episodes", type(returns), type(lengths)))

    def on_checkpoint(self, ctx, path):
        SeesBuiltins.notes.append(("checkpoint", os.path.basename(path), os.path.exists(path + ".txt")))

    def on_run_end(self, ctx):
        names = set(os.listdir(ctx.exp_dir))
        SeesBuiltins.notes.append(("end", ctx.global_step, {"Run1_Last.txt", "Run1_Best_agent.t"} <= names))


def test_user_hooks_see_evaluations_and_checkpoints_once_written_and_end_after_them(tmp_path):
    SeesBuiltins.notes = []
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path)
    trainer.multi_run(
        1,
        total_steps=100,
        seed_offset=SEED,
        progress=False,
        eval_freq=40,
        eval_episodes=2,
        checkpoint_freq=50,
        hooks=[SeesBuiltins()],
    )
    # as Hook.on_eval's and Hook.on_episodes' docstrings say (the API page and hooks.md said mean_return, numpy arrays)
    assert {tuple(n[1]) for n in SeesBuiltins.notes if n[0] == "eval keys"} == {
        tuple(
            sorted(
                ["mean", "std", "returns", "lengths", "global_step", "episodes_trained", "eval_index"]
                + ["scheduled", "wall_time"]
            )
        )
    }
    assert {n[1:] for n in SeesBuiltins.notes if n[0] == "episodes"} == {(list, list)}
    evals = [n for n in SeesBuiltins.notes if n[0] == "eval"]
    assert [n[1] for n in evals] == [e["global_step"] for e in trainer.evaluations[0]] and all(n[2] for n in evals)
    # the step budget ends the loop at step 100: no S100, as before (the end has Run1_Last)
    assert [n[1:] for n in SeesBuiltins.notes if n[0] == "checkpoint"] == [("Run1_S50", True), ("Run1_Last", True)]
    assert SeesBuiltins.notes[-1][0] == "end" and SeesBuiltins.notes[-1][2]
    assert SeesBuiltins.notes[-2][0] == "checkpoint"  # the last checkpoint, after the final evaluation


def test_a_stop_in_on_run_start_ends_the_run_before_its_first_step(tmp_path):
    class StopAtOnce(Hook):
        def on_run_start(self, ctx):
            ctx.stop("nothing to do")

    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=5, seed_offset=SEED, progress=False, hooks=[StopAtOnce()]
    )
    assert len(runs[0]) == 0
    entry = json.loads((tmp_path / "manifest.json").read_text())["runs"][0]
    assert entry["status"] == "stopped_early" and entry["stop_reason"] == "nothing to do"


class StopsWithoutAReason(Hook):
    every_steps = 3

    def on_step(self, ctx):
        ctx.stop(None)


def test_a_stop_without_a_reason_says_so(tmp_path):
    """ctx.stop(None) recorded the reason "None" (tester H3)."""
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=5, seed_offset=SEED, progress=False, hooks=[StopsWithoutAReason()]
    )
    entry = json.loads((tmp_path / "manifest.json").read_text())["runs"][0]
    assert entry["status"] == "stopped_early" and entry["stop_reason"] == "a hook stopped it without a reason"


class Counter(Hook):
    """A user hook with state: episodes seen, and a snapshot of the run's hooks at step 300."""

    every_steps = 100
    built: list = []
    snapshots: list = []

    def __init__(self):
        self.episodes = 0

    def on_episodes(self, ctx, first_index, returns, lengths):
        self.episodes += len(returns)

    def on_step(self, ctx):
        ctx.rng.random()  # the context's generator moves: its state is part of the hooks' state
        if 300 <= ctx.global_step < 400:
            Counter.snapshots.append(Counter.built[-1].hooks.state_dict())

    def state_dict(self):
        return {"episodes": self.episodes}

    def load_state_dict(self, state):
        self.episodes = state["episodes"]


def test_the_hooks_state_after_load_is_the_state_saved_mid_run(tmp_path, monkeypatch):
    Counter.built, Counter.snapshots = [], []
    calls = []

    def spy(*args):
        calls.append(args)
        events = run_events(*args)
        Counter.built.append(events)
        return events

    monkeypatch.setattr(run_module, "run_events", spy)
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.call_back = JsonlCallback(tmp_path / "log.jsonl")
    trainer.multi_run(
        1,
        total_steps=500,
        seed_offset=SEED,
        progress=False,
        eval_freq=70,
        eval_episodes=2,
        checkpoint_freq=40,
        keep_checkpoints=2,
        stats_every_steps=30,
        stats_window=5,
        metrics_flush_every=7,
        hooks=[Counter()],
    )
    (saved,) = Counter.snapshots
    hooks = saved["hooks"]
    assert list(hooks) == ["metrics", "evaluations", "checkpoints", "progress", "stats", "preemption", "Counter#0"]
    # taken in the user's on_step at step 301 (two sub-envs), after the built-ins' at that step
    checkpoints = hooks["checkpoints"]
    assert checkpoints["state"]["saved"] == ["S240", "S280"] and checkpoints["next_step"] == 320
    assert checkpoints["state"]["next_step"] == 320 and checkpoints["state"]["best_state"] is not None
    evaluations = hooks["evaluations"]
    assert [r["global_step"] for r in evaluations["state"]["records"]] == [70, 140, 210, 280]
    assert evaluations["state"]["count"] == 4 and evaluations["next_step"] == 350
    assert hooks["progress"]["state"]["shown_steps"] == 301 and hooks["progress"]["next_step"] == 302
    assert hooks["progress"]["state"]["episodes"] == hooks["Counter#0"]["state"]["episodes"]
    assert hooks["metrics"]["next_step"] is None and hooks["metrics"]["state"]["flushed"] > 0
    assert len(hooks["stats"]["state"]["returns"]) == 5 and hooks["stats"]["next_step"] == 330
    assert hooks["Counter#0"]["next_step"] == 400 and hooks["Counter#0"]["state"]["episodes"] > 0

    spec, env, agent, _, tracker, evaluator, _ = calls[0]
    (tmp_path / "fresh").mkdir()
    fresh = run_events(
        dataclasses.replace(spec, exp_dir=str(tmp_path / "fresh")), env, agent, NoProgress(), tracker, evaluator
    )
    assert not same(fresh.hooks.state_dict(), saved)
    fresh.hooks.load_state_dict(saved)
    assert same(fresh.hooks.state_dict(), saved)
    assert fresh.hooks.next_step == min(e["next_step"] for e in hooks.values() if e["next_step"] is not None)
    fresh.hooks.close()


class Stateful(Hook):
    def __init__(self, n=1):
        self.n = n

    def on_episodes(self, ctx, first_index, returns, lengths):
        pass

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.n = state["n"]


class OtherStateful(Stateful):
    pass


def test_load_state_dict_refuses_other_user_hooks():
    ctx = RunContext(1, 0, None, None, None, None, "run_1")
    state = HookRunner([Stateful()], ctx).state_dict()
    assert set(state["hooks"]) == {"Stateful#0"}
    HookRunner([Stateful()], RunContext(1, 0, None, None, None, None, "run_1")).load_state_dict(state)
    with pytest.raises(
        ValueError,
        match=r"holds the user hooks \['Stateful#0'\], but this run's hooks with state "
        r"are \[\]",
    ):
        HookRunner([], ctx).load_state_dict(state)
    with pytest.raises(
        ValueError,
        match=r"holds the user hooks \['Stateful#0'\], but this run's hooks with state "
        r"are \['OtherStateful#0'\]: resume with the hooks the run was started",
    ):
        HookRunner([OtherStateful()], RunContext(1, 0, None, None, None, None, "run_1")).load_state_dict(state)


def test_user_hook_state_is_keyed_by_class_and_occurrence_so_classes_may_be_reordered():
    saved = HookRunner(
        [Stateful(1), OtherStateful(2), Stateful(3)], RunContext(1, 0, None, None, None, None, "run_1")
    ).state_dict()
    assert list(saved["hooks"]) == ["Stateful#0", "OtherStateful#0", "Stateful#1"]
    runner = HookRunner([OtherStateful(0), Stateful(0), Stateful(0)], RunContext(1, 0, None, None, None, None, "run_1"))
    runner.load_state_dict(saved)
    assert [(type(h).__name__, h.n) for h in runner.hooks] == [("OtherStateful", 2), ("Stateful", 1), ("Stateful", 3)]


def test_builtin_hooks_declare_the_events_they_take_and_are_never_rewired(tmp_path):
    """What a built-in takes is data read by the runner (``handles``, ``every_steps``); no method is set on an
    instance, and evaluations and checkpoints reach every hook through the context."""
    seen: list = []

    class Sees(Hook):
        def on_eval(self, ctx, result):
            seen.append(("eval", result["global_step"]))

        def on_checkpoint(self, ctx, path):
            seen.append(("checkpoint", os.path.basename(path)))

    built = []
    original = run_module.run_events

    def spy(*args):
        events = original(*args)
        built.append(events)
        return events

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "run_events", spy)
        OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
            1,
            num_episodes=6,
            seed_offset=SEED,
            progress=False,
            eval_freq=3,
            eval_episodes=1,
            checkpoint_freq=3,
            hooks=[Sees()],
        )
    runner = built[0].hooks
    for hook in runner.hooks:
        overridden = set(vars(hook)) & set(HOOK_METHODS)
        assert not overridden, f"{type(hook).__name__} sets {overridden} on the instance"
    by_name = dict(zip(runner.keys, runner.hooks))
    assert by_name["evaluations"].handles == {"on_run_end", "on_episodes"}
    assert by_name["checkpoints"].handles == {"on_run_end", "on_episodes", "on_eval"}
    assert by_name["progress"].every_steps is None and set(runner.cadences) == {"stats", "preemption"}
    assert seen == [
        ("eval", seen[0][1]),
        ("checkpoint", "Run1_E3"),
        ("eval", seen[2][1]),
        ("checkpoint", "Run1_E6"),
        ("checkpoint", "Run1_Last"),
    ]


def periodic(exp_dir, run=1):
    return sorted(
        (p.name for p in exp_dir.iterdir() if p.name.startswith((f"Run{run}_S", f"Run{run}_E"))),
        key=lambda name: int(name.split("_")[1][1:].split(".")[0]),
    )


@pytest.mark.parametrize("budget", [{"total_steps": 200}, {"num_episodes": 30}])
def test_keep_checkpoints_leaves_the_last_periodic_ones_and_never_last_or_best(tmp_path, budget):
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        2,
        seed_offset=SEED,
        progress=False,
        checkpoint_freq=5 if "num_episodes" in budget else 30,
        keep_checkpoints=2,
        **budget,
    )
    for run in (1, 2):
        expected = (
            ["Run{}_E25.txt", "Run{}_E30.txt"] if "num_episodes" in budget else ["Run{}_S150.txt", "Run{}_S180.txt"]
        )
        assert periodic(tmp_path, run) == [name.format(run) for name in expected]
        assert (tmp_path / f"Run{run}_Last.txt").exists() and (tmp_path / f"Run{run}_Best_agent.t").exists()


def test_keep_checkpoints_and_checkpoint_buffers_are_checked(tmp_path):
    with pytest.raises(ValueError, match=r"checkpoints.keep must be a positive int, but got checkpoints.keep=0"):
        CheckpointOptions(keep=0)
    with pytest.raises(
        ValueError,
        match=r"checkpoints.keep=2 applies to periodic checkpoints, but checkpoint_freq "
        r"is None",
    ):
        RunPlan(total_steps=10, checkpoints=CheckpointOptions(keep=2))
    with pytest.raises(
        ValueError,
        match=r"checkpoints.buffers=True writes into the experiment directory, but exp_dir "
        r"is None",
    ):
        RunPlan(total_steps=10, checkpoints=CheckpointOptions(buffers=True), has_exp_dir=False, dump_metrics=False)
    with pytest.raises(ValueError, match=r"checkpoints.buffers must be True or False, but got checkpoints.buffers='y'"):
        CheckpointOptions(buffers="y")
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(ValueError, match="checkpoints.keep=1 applies"):
        trainer.multi_run(1, total_steps=10, checkpoints=CheckpointOptions(keep=1))
    assert not (tmp_path / "exp").exists()


def dqn_factory(save_buffer=False):
    from online_trainer.agents import DQNAgent

    return lambda env: DQNAgent(
        env, learning_starts=20, batch_size=8, buffer_size=500, hidden_sizes=(8,), save_buffer=save_buffer
    )


@pytest.mark.parametrize("save_buffer", [False, True])
def test_dqn_periodic_checkpoints_hold_the_buffer_as_the_agent_says_and_the_best_state_never(tmp_path, save_buffer):
    import gymnasium as gym

    from online_trainer.agents._state import unpack_state

    def has_buffer(path):
        return "obs" in unpack_state(torch.load(path, weights_only=True))["buffer"]

    for asked in (False, True):  # checkpoint_buffers is for the full checkpoint (test_resume), not these
        exp_dir = tmp_path / f"asked_{asked}"
        OnlineTrainer(
            lambda: gym.make_vec("CartPole-v1", num_envs=2), dqn_factory(save_buffer), exp_dir=exp_dir
        ).multi_run(1, total_steps=300, seed_offset=SEED, progress=False, checkpoint_freq=100, checkpoint_buffers=asked)
        assert has_buffer(exp_dir / "Run1_S200.pt") == save_buffer
        assert has_buffer(exp_dir / "Run1_Last.pt") == save_buffer
        best = unpack_state(torch.load(exp_dir / "Run1_Best_agent.t", weights_only=True))
        assert "obs" not in best["buffer"] and best["buffer"]["size"] > 0  # counters only
        assert not (exp_dir / "Run1_Resume.pkl").exists()  # a finished run is not resumed


def test_agent_save_buffers_keyword_overrides_save_buffer():
    import gymnasium as gym

    env = gym.make_vec("CartPole-v1", num_envs=1)
    for save_buffer in (False, True):
        agent = dqn_factory(save_buffer)(env)
        agent.reset(0)
        assert ("obs" in agent.save()["buffer"]) is save_buffer
        assert "obs" in agent.save(buffers=True)["buffer"] and "obs" not in agent.save(buffers=False)["buffer"]


def test_the_stoppers_state_round_trips_and_resumes_their_count():
    from online_trainer.hooks import StopOnNoImprovement, StopOnPlateau, StopOnReturn

    ctx = RunContext(1, 0, None, None, None, None, "run_1")
    hooks = [StopOnReturn(100, window=3, patience=2), StopOnNoImprovement(patience=2), StopOnPlateau(window=2)]
    runner = HookRunner(hooks, ctx)
    runner.on_episodes(1, np.array([1.0, 2.0, 4.0, 4.0, 5.0]), np.array([1, 2, 3, 4, 5]), 10)
    runner.on_eval({"mean": 3.0})
    runner.on_eval({"mean": 2.0})
    state = runner.state_dict()
    assert state["hooks"]["StopOnReturn#0"]["state"] == {"returns": [4.0, 4.0, 5.0], "held": 0}
    assert state["hooks"]["StopOnNoImprovement#0"]["state"] == {"best": 3.0, "evals": 2, "without": 1}
    assert state["hooks"]["StopOnPlateau#0"]["state"] == {"block": [5.0], "previous": 4.0, "flat": 0}
    fresh = HookRunner(hooks, RunContext(1, 0, None, None, None, None, "run_1"))
    fresh.load_state_dict(state)
    assert same(fresh.state_dict(), state)
    fresh.on_eval({"mean": 1.0})  # the second evaluation in a row without a new best
    assert fresh.ctx.stop_reason is not None and "StopOnNoImprovement" in fresh.ctx.stop_reason


class FailsAtStep(RecordingAgent):
    """Raises in its ``fail_at``-th update."""

    fail_at = 1237

    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        self.steps_seen = getattr(self, "steps_seen", 0) + 1
        if self.steps_seen == self.fail_at:
            raise RuntimeError("the agent's bug")


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_run_that_ends_between_ticks_shows_on_its_bar_the_step_it_reached(tmp_path, monkeypatch, error):
    """The bars move at ticks (every total_steps // 200 env steps): a run that failed or was interrupted between two
    stood at the last tick, behind its manifest's count. A failed run's bar now shows its manifest's count; an
    interrupted one's, the step the loop reached (its manifest says how far its records and checkpoint got)."""
    from online_trainer.loop.steps import failed_at
    from online_trainer.parallel import executors

    shown: list[int] = []

    class Recording(executors.ProgressDisplay):
        def run_finished(self, key, status):
            shown.append(self.bars[key].n)
            super().run_finished(key, status)

    class Fails(FailsAtStep):
        def update(self, *args, **kwargs):
            try:
                super().update(*args, **kwargs)
            except RuntimeError:
                raise error("stop") from None

    monkeypatch.setattr(executors, "ProgressDisplay", Recording)
    trainer = OnlineTrainer(make_counting_vec(1), Fails, exp_dir=str(tmp_path))
    with pytest.raises((RuntimeError, KeyboardInterrupt)) as raised:
        trainer.multi_run(1, total_steps=10_000, seed_offset=SEED, progress=True)
    entry = json.loads((tmp_path / "manifest.json").read_text())["runs"][0]
    if error is RuntimeError:
        reached = entry["global_step"]
        assert entry["status"] == "failed"
    else:
        reached = failed_at(raised.value)[0]
        assert entry["status"] == "interrupted" and reached - 1 <= entry["global_step"] <= reached
    assert reached % 50 and 0 < reached < 10_000  # between two ticks (every 50 steps)
    assert shown == [reached]  # before: the last tick's step


class SavesToFilesOnly(RecordingAgent):
    """Stable-Baselines3's habit: ``save(path)`` writes files and returns None; ``save()`` does nothing."""

    def save(self, path=None):
        if path is not None:
            with open(path + ".txt", "w") as f:
                f.write(json.dumps({"updates": self.updates, "seed": self.seed}))

    def load(self, path):
        with open(os.fspath(path) + ".txt") as f:
            self.loaded = json.loads(f.read())


def test_an_agent_that_saves_to_files_only_keeps_its_best_and_leaves_no_resume_files(tmp_path):
    """Its save() returned None, which was kept as the best state: Run1_Best_agent.t held None, load_agent(which=
    "best") failed inside the agent, and Run1_Resume_agent.* stayed after the run finished (tester A4)."""
    from online_trainer import load_agent

    trainer = OnlineTrainer(make_counting_vec(1), SavesToFilesOnly, exp_dir=tmp_path)
    runs = trainer.multi_run(2, total_steps=60, seed_offset=SEED, checkpoint_freq=20, progress=False)
    for run, records in enumerate(runs, start=1):
        assert not (tmp_path / f"Run{run}_Best_agent.t").exists() and (tmp_path / f"Run{run}_Best.txt").is_file()
        assert not list(tmp_path.glob(f"Run{run}_Resume*"))  # the full checkpoint and its agent files went with it
        best = max(records, key=lambda r: r["ep_return"])  # the first of the best returns: a tie is no new best
        assert json.loads((tmp_path / f"Run{run}_Best.txt").read_text())["updates"] >= best["global_step"]
        agent = load_agent(tmp_path, run=run, which="best", agent_factory=SavesToFilesOnly, env=make_counting_vec(1))
        assert agent.loaded == json.loads((tmp_path / f"Run{run}_Best.txt").read_text())
    table = trainer.evaluate(which="best", execution=None)
    assert set(table["checkpoint"]) == {"best"} and sorted(set(table["run"])) == [1, 2]


def test_the_best_checkpoint_of_a_run_that_did_not_finish_is_loaded_with_a_warning(tmp_path, caplog):
    """E12: load_agent(which="best") of an interrupted run gave its best so far without a word."""
    from online_trainer import load_agent
    from online_trainer.records import storage

    trainer = OnlineTrainer(make_counting_vec(1), SavesToFilesOnly, exp_dir=tmp_path)
    trainer.multi_run(2, total_steps=60, seed_offset=SEED, checkpoint_freq=20, progress=False)
    with caplog.at_level(logging.WARNING, logger="online_trainer"):
        load_agent(tmp_path, run=1, which="best", agent_factory=SavesToFilesOnly, env=make_counting_vec(1))
    assert not caplog.records  # a finished run's best is what training found
    manifest = storage.read_manifest(tmp_path)
    manifest["runs"][1]["status"] = "interrupted"
    storage.write_manifest(tmp_path, manifest)
    with caplog.at_level(logging.WARNING, logger="online_trainer"):
        load_agent(tmp_path, run=2, which="best", agent_factory=SavesToFilesOnly, env=make_counting_vec(1))
    (message,) = [r.getMessage() for r in caplog.records]
    assert message == (
        f"Run 2 of {tmp_path} is interrupted at env step 60: its best checkpoint is from part way through training, "
        "not from a finished run. resume=True (online-trainer resume) finishes it."
    )


class SavesWithASuffixOfItsOwn(RecordingAgent):
    """``save(path)`` writes ``path + "_model.zip"``, as some libraries' ``model.save`` name their files."""

    def save(self, path=None):
        if path is not None:
            with open(f"{path}_model.zip", "w") as f:
                f.write(json.dumps({"updates": self.updates}))

    def load(self, path):
        with open(f"{os.fspath(path)}_model.zip") as f:
            self.loaded = json.loads(f.read())


def test_checkpoints_whose_files_continue_the_prefix_after_an_underscore_are_found_and_pruned(tmp_path):
    """``Run1_S20_model.zip`` was not taken for the checkpoint ``Run1_S20``: keep=1 left every periodic one on
    disk, ``evaluate(which="all")`` and ``load_agent(which="best")`` did not find them."""
    from online_trainer import load_agent
    from online_trainer.experiment.checkpoint_files import checkpoints

    trainer = OnlineTrainer(make_counting_vec(1), SavesWithASuffixOfItsOwn, exp_dir=tmp_path)
    trainer.multi_run(1, total_steps=100, seed_offset=SEED, checkpoint_freq=20, keep_checkpoints=1, progress=False)
    assert sorted(p.name for p in tmp_path.glob("Run1_*.zip")) == [
        "Run1_Best_model.zip",
        "Run1_Last_model.zip",
        "Run1_S80_model.zip",
    ]
    assert [label for label, _ in checkpoints(tmp_path, 1, "all")] == ["S80", "last", "best"]
    agent = load_agent(tmp_path, run=1, which="best", agent_factory=SavesWithASuffixOfItsOwn, env=make_counting_vec(1))
    assert agent.loaded == json.loads((tmp_path / "Run1_Best_model.zip").read_text())


def test_the_runners_best_state_is_not_taken_for_files_of_the_best_prefix(tmp_path):
    from online_trainer.records import storage
    from online_trainer.run.builtin.checkpoint_writer import remove_checkpoint

    for name in ("Run1_Best_agent.t", "Run1_Best.pt", "Run1_Best_model.zip", "Run1_Bestx", "Run1_Best"):
        (tmp_path / name).write_text("x")
    prefix = storage.best_agent_prefix(tmp_path, 1)
    assert [p.name for p in storage.saved_by(prefix)] == ["Run1_Best", "Run1_Best.pt", "Run1_Best_model.zip"]
    remove_checkpoint(prefix)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Run1_Best_agent.t", "Run1_Bestx"]


class AnnouncesItsOwn(Hook):
    """Evaluates its own way, on another scale, every 30 env steps, and announces it."""

    every_steps = 30

    def on_step(self, ctx):
        ctx.evaluated({"mean": 1e6 + ctx.global_step})


class AnnouncesNoMean(Hook):
    every_steps = 30

    def on_step(self, ctx):
        ctx.evaluated({"score": 1.0})


def test_an_evaluation_a_hook_announces_does_not_choose_the_best_agent(tmp_path):
    """Run1_Best_agent.t held the agent at a hook's announced evaluation, recorded nowhere, where evaluate.md says
    it is the state at the best evaluation mean (tester H3)."""
    kw = dict(total_steps=100, seed_offset=SEED, progress=False, eval_freq=40, eval_episodes=2, checkpoint_freq=50)
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / "plain")
    trainer.multi_run(1, **kw)
    announced = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / "announced")
    announced.multi_run(1, hooks=[AnnouncesItsOwn()], **kw)
    assert [e["mean"] for e in announced.evaluations[0]] == [e["mean"] for e in trainer.evaluations[0]]
    best = [
        torch.load(d / "Run1_Best_agent.t", weights_only=False) for d in (tmp_path / "plain", tmp_path / "announced")
    ]
    assert best[0] == best[1]  # the state at the best of the runner's evaluations
    with pytest.raises(
        RunsFailedError, match=r"ctx.evaluated\(result\) takes a dict with 'mean'.* got dict \['score'\]"
    ):
        OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=None).multi_run(
            1, hooks=[AnnouncesNoMean()], **{**kw, "checkpoint_freq": None}
        )


def test_one_hook_given_without_its_list_is_told_how_to_pass_it():
    """M22: hooks=StopOnReturn(100) was told "hooks must be a list of hook objects" without a fix."""
    from online_trainer.hooks import StopOnReturn

    with pytest.raises(
        TypeError, match=r"hooks must be a list .*: pass a list of one, hooks=\[StopOnReturn\(\.\.\.\)\]"
    ):
        check_hooks(StopOnReturn(100))
    with pytest.raises(TypeError, match=r"but got hooks='x': pass e.g. hooks=\[StopOnReturn\(475\)\]"):
        check_hooks("x")
