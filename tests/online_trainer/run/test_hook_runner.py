"""Hooks: cadence, early stop, built-in stoppers, env changes, per-run copies across workers, failures."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from online_trainer import OnlineTrainer, RunsFailedError, load_runs
from online_trainer.callbacks import JsonlCallback
from online_trainer.hooks import Hook, StopOnNoImprovement, StopOnPlateau, StopOnReturn
from tests.conftest import RecordingAgent, make_counting_vec, scheduled_length

SEED = 0


def episode_returns(seed: int, count: int) -> list[float]:
    """CountingEnv's returns: episode k lasts L = 2 + (seed + k) % 4 steps and returns L(L+1)/2."""
    return [scheduled_length(seed, k) * (scheduled_length(seed, k) + 1) / 2 for k in range(count)]


def manifest(exp_dir):
    return json.loads((exp_dir / "manifest.json").read_text())


class StepRecorder(Hook):
    every_steps = 5
    calls: list[tuple[int, int, int]] = []  # class-level: each run works on its own copy of the hook

    def on_step(self, ctx):
        StepRecorder.calls.append((ctx.run, ctx.global_step, ctx.episodes))


def test_on_step_runs_every_n_env_steps_and_ctx_says_where_the_run_is():
    StepRecorder.calls = []
    OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        1, total_steps=23, seed_offset=SEED, progress=False, hooks=[StepRecorder()]
    )
    assert [step for _, step, _ in StepRecorder.calls] == [5, 10, 15, 20]
    assert all(run == 1 for run, _, _ in StepRecorder.calls)


class StopAtEpisode(Hook):
    def __init__(self, episode):
        self.episode = episode

    def on_episode_end(self, ctx, record):
        if record["episode_index"] == self.episode:
            ctx.stop(f"enough at episode {self.episode}")


def test_stop_ends_the_run_after_that_step_with_the_reason_recorded(tmp_path):
    exp_dir = tmp_path / "exp"
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir).multi_run(
        2, num_episodes=50, seed_offset=SEED, progress=False, checkpoint_freq=10, hooks=[StopAtEpisode(7)]
    )
    assert [len(run) for run in runs] == [7, 7]
    assert [r["ep_return"] for r in runs[0]] == episode_returns(SEED, 7)
    entries = manifest(exp_dir)["runs"]
    assert [e["status"] for e in entries] == ["stopped_early", "stopped_early"]
    assert entries[0]["stop_reason"] == "enough at episode 7" and entries[0]["episodes"] == 7
    assert entries[0]["global_step"] == sum(scheduled_length(SEED, k) for k in range(7))
    assert (exp_dir / "Run1_Last").exists() or list(exp_dir.glob("Run1_Last*"))  # final checkpoint as at a normal end
    table = load_runs(exp_dir)
    assert list(table["status"]) == ["stopped_early", "stopped_early"]
    assert list(table["stop_reason"]) == ["enough at episode 7"] * 2


def test_stop_on_return_needs_the_rolling_mean_over_the_window():
    returns = episode_returns(SEED, 40)
    window, threshold = 3, 8.0
    means = [sum(returns[i - window + 1 : i + 1]) / window for i in range(window - 1, len(returns))]
    expected = window + next(i for i, m in enumerate(means) if m >= threshold)
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        1, num_episodes=40, seed_offset=SEED, progress=False, hooks=[StopOnReturn(threshold, window=window)]
    )
    assert len(runs[0]) == expected < 40


def test_stop_on_return_with_patience_waits_for_consecutive_checks():
    returns = episode_returns(SEED, 40)
    held, expected = 0, None
    for index, value in enumerate(returns, start=1):
        held = held + 1 if value >= 6 else 0
        if held >= 2:
            expected = index
            break
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        1, num_episodes=40, seed_offset=SEED, progress=False, hooks=[StopOnReturn(6, window=1, patience=2)]
    )
    assert len(runs[0]) == expected


def test_stop_on_no_improvement_counts_evaluations_without_a_new_best(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    runs = trainer.multi_run(
        1,
        total_steps=1000,
        seed_offset=SEED,
        progress=False,
        eval_freq=50,
        eval_episodes=4,
        hooks=[StopOnNoImprovement(patience=2)],
    )
    # the agent never learns: every evaluation (same eval seed) gives the same mean; the first sets the best
    evaluations = trainer.evaluations[0]
    # at 50, 100 and 150, the stop; the final evaluation is the one at the stop's step, not played twice
    assert [e["global_step"] for e in evaluations] == [50, 100, 150]
    assert manifest(tmp_path / "exp")["runs"][0]["global_step"] == 150
    assert "StopOnNoImprovement" in manifest(tmp_path / "exp")["runs"][0]["stop_reason"]
    assert runs[0][-1]["global_step"] <= 150


def test_stop_on_plateau_compares_blocks_relatively():
    # returns repeat with period 4, so blocks of 4 episodes have equal means: flat at blocks 2 and 3
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        1, num_episodes=100, seed_offset=SEED, progress=False, hooks=[StopOnPlateau(window=4, patience=2)]
    )
    assert len(runs[0]) == 12


class ShortenEpisodes(Hook):
    """A curriculum: from step 40, episodes are truncated after 2 steps."""

    every_steps = 40

    def on_step(self, ctx):
        if ctx.global_step == 40:
            ctx.env.set_attr("truncate_at", 2)


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_hook_that_changes_the_env_is_seen_in_the_records_the_same_with_workers(num_workers):
    runs = OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        2, total_steps=100, seed_offset=SEED, num_workers=num_workers, progress=False, hooks=[ShortenEpisodes()]
    )
    for run in runs:
        late = [r for r in run if r["global_step"] > 42]
        assert late and all(r["ep_length"] <= 2 for r in late)
        assert any(r["ep_length"] > 2 for r in run if r["global_step"] <= 40)
    signature = [[(r["ep_return"], r["ep_length"], r["global_step"]) for r in run] for run in runs]
    serial = OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        2, total_steps=100, seed_offset=SEED, progress=False, hooks=[ShortenEpisodes()]
    )
    assert signature == [[(r["ep_return"], r["ep_length"], r["global_step"]) for r in run] for run in serial]


class FailsInRunTwo(Hook):
    def on_episode_end(self, ctx, record):
        if ctx.run == 2 and record["episode_index"] == 3:
            raise RuntimeError("hook broke")


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_raising_hook_fails_only_its_run(tmp_path, num_workers, caplog):
    exp_dir = tmp_path / "exp"
    with caplog.at_level("ERROR"), pytest.raises(RunsFailedError, match="seed 10000") as caught:
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir).multi_run(
            3, num_episodes=6, seed_offset=SEED, num_workers=num_workers, progress=False, hooks=[FailsInRunTwo()]
        )
    # the hook that raised is named, with any number of workers (tester H2: the log said "failed: 'boom'")
    assert "run 2 (seed 10000): RuntimeError: hook broke (raised in hook FailsInRunTwo#0's on_episode_end)" in str(
        caught.value
    )
    assert [e["status"] for e in manifest(exp_dir)["runs"]] == ["finished", "failed", "finished"]
    # logged as it happened, from a worker too (tester R2: nothing until the end with workers)
    failed = [r.getMessage() for r in caplog.records if "failed: RuntimeError" in r.getMessage()]
    assert failed == [
        "run 2 (seed 10000) failed: RuntimeError: hook broke (raised in hook FailsInRunTwo#0's on_episode_end)"
    ]


class Counter(Hook):
    def __init__(self):
        self.episodes = 0

    def on_episode_end(self, ctx, record):
        self.episodes += 1
        ctx.log({"seen": self.episodes})

    def on_run_end(self, ctx):
        ctx.log({"total": self.episodes + ctx.rng.integers(0, 1)})


def test_each_run_has_its_own_copy_of_a_hook_and_logs_through_the_callback(tmp_path):
    hook = Counter()
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.call_back = JsonlCallback(tmp_path / "log.jsonl")
    trainer.multi_run(2, num_episodes=5, seed_offset=SEED, progress=False, hooks=[hook])
    assert hook.episodes == 0  # the user's instance is the template, never run
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    totals = {line["tag"]: line["values"]["total"] for line in lines if "total" in line["values"]}
    assert totals == {"hooks/run_1": 5, "hooks/run_2": 5}


def test_hooks_are_checked_before_anything_runs(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(TypeError, match="has none of the hook methods"):
        trainer.multi_run(1, num_episodes=2, hooks=[object()])
    with pytest.raises(TypeError, match=r"hooks holds the class StopOnReturn: pass an instance"):
        trainer.multi_run(1, num_episodes=2, hooks=[StopOnReturn])
    # StopOnReturn("high") said "could not convert string to float"; NaN was taken and never stopped (tester H3)
    with pytest.raises(ValueError, match=r"threshold must be a finite number, but got threshold='high'\. Pass the"):
        StopOnReturn("high")
    with pytest.raises(ValueError, match=r"threshold must be a finite number, but got threshold=nan"):
        StopOnReturn(float("nan"))
    with pytest.raises(ValueError, match=r"rel_tol must be a positive finite number, but got rel_tol='0.1'"):
        StopOnPlateau(rel_tol="0.1")

    class NoCadence(Hook):
        def on_step(self, ctx):
            pass

    with pytest.raises(
        ValueError,
        match=r"must declare one of every_steps .* but got every_steps=None, "
        r"every_seconds=None",
    ):
        trainer.multi_run(1, num_episodes=2, hooks=[NoCadence()])

    class Every(Hook):
        def __init__(self, every):
            self.every_steps = every

        def on_step(self, ctx):
            pass

    # H22: which of two hooks of one class was wrong went unsaid, and numpy's integers were refused
    with pytest.raises(ValueError, match=r"hooks\[1\], a Every, has on_step, so it must declare .* every_steps=0, "):
        trainer.multi_run(1, num_episodes=2, hooks=[Every(np.int64(500)), Every(0)])
    with pytest.raises(TypeError, match=r"hooks\[1\]=42 has none of the hook methods"):
        trainer.multi_run(1, num_episodes=2, hooks=[Every(5), 42])

    class MissesTheRecord(Hook):  # failed at the first episode's end, after env steps, so the experiment stayed
        def on_episode_end(self, ctx):
            pass

    class TakesAnything(Hook):
        def on_eval(self, *args):
            pass

        def on_checkpoint(self, ctx, path, extra=None):
            pass

    with pytest.raises(
        TypeError,
        match=r"hook MissesTheRecord.on_episode_end\(ctx\) does not take what the runner passes \(too many "
        r"positional arguments\): write def on_episode_end\(self, ctx, record\)\.",
    ):
        trainer.multi_run(1, num_episodes=2, hooks=[TakesAnything(), MissesTheRecord()])

    class Blank(Hook):  # a subclass already: the message says where to define a method
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    # F17: "has none of the hook methods" of a subclass that inherits them all, which hooks.md says do nothing
    with pytest.raises(
        TypeError,
        match=r"^hooks\[0\], a Blank, overrides none of the hook methods .*: it would never act \(Hook's own methods do nothing; state_dict "
        r"and load_state_dict only keep a hook's state\)\. Define at least one in Blank, or leave the hook out\.$",
    ):
        trainer.multi_run(1, num_episodes=2, hooks=[Blank()])
    assert not (tmp_path / "exp").exists()
    assert len(trainer.multi_run(1, num_episodes=2, hooks=[TakesAnything()], progress=False)[0]) == 2


class HoldsALock(Hook):
    def __init__(self):
        self.lock = threading.Lock()

    def on_episode_end(self, ctx, record):
        pass


@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_hook_that_cannot_be_copied_is_refused_before_any_run_with_any_number_of_workers(tmp_path, num_workers):
    """With one worker a hook holding a lock failed every run at its copy; the refusal for workers advised
    ``num_workers=1`` and a factory, which hooks do not take (an outside tester's notebook)."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(
        TypeError,
        match=r"^hooks\[0\]=<.*HoldsALock object at .*> cannot be copied \(TypeError: cannot pickle '_thread.lock' "
        r"object\): each run gets its own deep copy of every hook, with any number of workers\. Keep locks, open "
        r"files, threads and processes out of the hook's __init__: create them in its on_run_start",
    ):
        trainer.multi_run(2, num_episodes=2, num_workers=num_workers, hooks=[HoldsALock()])
    assert not (tmp_path / "exp").exists()


def test_stats_and_timing_are_logged_through_the_callback(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.call_back = JsonlCallback(tmp_path / "log.jsonl")
    trainer.multi_run(1, total_steps=2000, seed_offset=SEED, progress=False, stats_every_steps=500, stats_window=10)
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    stats = [line for line in lines if line.get("tag") == "stats/run_1"]
    # every 500 env steps (two sub-envs: the first vector step at or past each multiple)
    assert [line["step"] // 500 for line in stats][:3] == [1, 2, 3] and all(line["step"] % 500 < 2 for line in stats)
    assert all(line["values"]["sps"] > 0 and 2 <= line["values"]["rolling_length"] <= 5 for line in stats)
    timing = [line["values"] for line in lines if line.get("tag") == "timing/run_1"]
    for shares in timing:
        assert set(shares) == {"act", "env_step", "update", "runner"} and abs(sum(shares.values()) - 1) < 1e-9
    entry = manifest(tmp_path / "exp")["runs"][0]
    assert entry["sps"] > 0 and entry["wall_time"] > 0


def test_the_phase_sampler_attributes_time_to_act_step_and_update(monkeypatch):
    import threading
    import time

    from online_trainer.run.builtin import run_stats

    class SlowAgent:
        def act(self, obs):
            time.sleep(0.03)

        def update(self, *args):
            time.sleep(0.01)

    class Env:
        def step(self, actions):
            pass

    monkeypatch.setattr(run_stats, "SAMPLE_SECONDS", 0.002)
    agent, env = SlowAgent(), Env()
    sampler = run_stats.PhaseSampler(agent, env, threading.get_ident())
    sampler.start()
    try:
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            agent.act(None)
            env.step(None)
            agent.update()
    finally:
        sampler.close()
    shares = sampler.shares()
    assert set(shares) == {"act", "env_step", "update", "runner"}
    assert shares["act"] > 0.55 and 0.1 < shares["update"] < 0.4 and shares["act"] > 2 * shares["update"]


def test_show_prints_each_runs_sps_and_why_it_stopped(tmp_path, capsys):
    from online_trainer.cli import main as cli

    exp_dir = tmp_path / "exp"
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir).multi_run(
        2, num_episodes=50, seed_offset=SEED, progress=False, hooks=[StopAtEpisode(7)]
    )
    assert cli.main(["show", str(exp_dir)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == [
        "run",
        "seed",
        "episodes",
        "env",
        "steps",
        "SPS",
        "final",
        "return",
        "status",
    ]
    assert "Stopped early: run 1: enough at episode 7" in out and "Stopped early: run 2: enough at episode 7" in out
    sps = json.loads((exp_dir / "manifest.json").read_text())["runs"][0]["sps"]
    assert f"{sps:,.0f}" in out.splitlines()[2]


@pytest.mark.parametrize(
    "hook, name",
    [(StopOnNoImprovement(patience=2), "StopOnNoImprovement"), (StopOnReturn(5, source="eval"), "StopOnReturn")],
)
@pytest.mark.parametrize("evaluation", [{}, {"eval_env": make_counting_vec(1)}])
def test_a_hook_on_evaluations_is_refused_without_eval_freq(tmp_path, hook, name, evaluation):
    """Without eval_freq no evaluation comes before the run's end (at most the final one): the hook would never act."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(
        ValueError,
        match=rf"hooks\[1\], a {name}, acts on the evaluations made during the run, but "
        r"evaluation.freq is None: .* Pass evaluation=EvaluationOptions\(freq=\.\.\.\)",
    ):
        trainer.multi_run(1, total_steps=500, hooks=[StopOnPlateau(), hook], progress=False, **evaluation)
    assert not (tmp_path / "exp").exists()


def test_a_run_shorter_than_the_stats_period_logs_its_stats_when_it_ends(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.call_back = JsonlCallback(tmp_path / "log.jsonl")
    runs = trainer.multi_run(2, total_steps=300, seed_offset=SEED, progress=False, stats_window=5)  # period: 10 s
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    for run, entry in enumerate(manifest(tmp_path / "exp")["runs"], start=1):
        stats = [line for line in lines if line.get("tag") == f"stats/run_{run}"]
        assert stats and stats[-1]["step"] == entry["global_step"] >= 300  # logged at the run's end
        assert len({line["step"] for line in stats}) == len(stats)  # never twice at one step
        values = stats[-1]["values"]
        assert values["sps"] > 0
        assert values["rolling_return"] == pytest.approx(sum(r["ep_return"] for r in runs[run - 1][-5:]) / 5)
        assert values["rolling_length"] == pytest.approx(sum(r["ep_length"] for r in runs[run - 1][-5:]) / 5)


def test_show_names_the_configuration_of_a_sweep_run_that_stopped_early(tmp_path, capsys):
    from online_trainer.cli import main as cli

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).sweep(
        {"lr": [0.1, 0.2]}, num_runs=1, num_episodes=50, seed_offset=SEED, progress=False, hooks=[StopAtEpisode(7)]
    )
    assert cli.main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Stopped early: lr=0.1 run 1: enough at episode 7" in out
    assert "Stopped early: lr=0.2 run 1: enough at episode 7" in out


class SharesItsLock(HoldsALock):
    """Copies share the lock: fine in this process, but a worker process cannot be sent one."""

    def __deepcopy__(self, memo):
        copied = type(self).__new__(type(self))
        copied.lock = self.lock
        return copied


def test_a_hook_that_cannot_travel_is_told_where_to_make_what_cannot(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(
        TypeError,
        match=r"hooks\[1\]=<.*SharesItsLock.* cannot be sent to worker processes .*lock.*\. Create a hook's locks, "
        r"open files, threads and processes in its on_run_start, not in its __init__, or use num_workers=1\.$",
    ):  # the hook named among several (tester H3)
        trainer.multi_run(2, num_episodes=2, num_workers=2, hooks=[StopOnReturn(1e9), SharesItsLock()])
    assert not (tmp_path / "exp").exists()
    assert [len(run) for run in trainer.multi_run(2, num_episodes=2, hooks=[SharesItsLock()], progress=False)] == [2, 2]


def test_a_hook_with_state_dict_and_no_load_state_dict_is_refused_before_any_step(tmp_path):
    """It ran to its first checkpoint and was refused only when a resume gave its state back (tester H2)."""

    class SavesOnly(Hook):
        def on_episode_end(self, ctx, record):
            pass

        def state_dict(self):
            return {}

    class LoadsOnly(SavesOnly):
        state_dict = None

        def load_state_dict(self, state):
            pass

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    for hook, has, lacks in [
        (SavesOnly(), "state_dict", r"load_state_dict\(state\)"),
        (LoadsOnly(), "load_state_dict", r"state_dict\(\)"),
    ]:
        with pytest.raises(
            TypeError, match=rf"hooks\[0\], a {type(hook).__name__}, has {has} but no {lacks}: .* Define both"
        ):
            trainer.multi_run(1, num_episodes=2, hooks=[hook], progress=False)
        assert not (tmp_path / "exp").exists()


def test_a_run_stopped_by_a_hook_says_so_in_the_log(tmp_path, caplog):
    """The line went missing behind another branch's raise (tester R2)."""

    class Enough(Hook):
        def on_episode_end(self, ctx, record):
            if record["episode_index"] == 2:
                ctx.stop("two are enough")

    with caplog.at_level("INFO", logger="online_trainer"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp").multi_run(
            1, num_episodes=6, seed_offset=SEED, progress=False, hooks=[Enough()]
        )
    assert "run 1 (seed 0) stopped early at step" in caplog.text and "two are enough" in caplog.text
