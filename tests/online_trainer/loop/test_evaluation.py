"""Evaluating a trained agent through the trainer (``train=False``) gives its true greedy returns.

The reference is a hand-written greedy loop on a plain env reset with the same seed: an agent
evaluated through the trainer must score exactly what it scores there, whether it is the
trained instance itself, or a fresh agent that loads ``Run1_Last`` or ``Run1_Best_agent.t``.
"""

from __future__ import annotations

import json
import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from online_trainer import EvaluationOptions, ExecutionOptions, OnlineTrainer
from online_trainer.agents import PPOAgent, QLearningAgent
from online_trainer.hooks import Hook
from online_trainer.loop.evaluation import eval_seed

EVAL_SEED = 12345
EVAL_EPISODES = 5


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Small networks on a shared machine: one thread is several times faster than two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def greedy_returns(agent, env_id: str, seed: int, episodes: int) -> list[float]:
    """Returns of ``episodes`` greedy episodes on ``gym.make(env_id)``, the first reset with ``seed``."""
    agent.eval()
    env = gym.make(env_id)
    returns = []
    obs, _ = env.reset(seed=seed)
    for _ in range(episodes):
        total, done = 0.0, False
        while not done:
            action = agent.act(np.asarray(obs)[None])[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
        obs, _ = env.reset()
    env.close()
    return returns


def through_trainer(agent_or_factory, env_id: str) -> list[float]:
    (records,) = OnlineTrainer(lambda: gym.make_vec(env_id, num_envs=1), agent_or_factory, train=False).multi_run(
        1, num_episodes=EVAL_EPISODES, seed_offset=EVAL_SEED, progress=False
    )
    return [r["ep_return"] for r in records]


def loading(cls, path):
    def factory(env):
        agent = cls(env)
        agent.load(path)
        return agent

    return factory


def loading_best(cls, path):
    def factory(env):
        agent = cls(env)
        agent.load(torch.load(path, weights_only=True))
        return agent

    return factory


CASES = {
    "q_learning": (
        QLearningAgent,
        "CliffWalking-v1",
        {"num_episodes": 150},
        {"lr": 0.5, "epsilon_decay": 0.95, "decay_unit": "episode"},
    ),
    "ppo": (
        PPOAgent,
        "CartPole-v1",
        {"total_steps": 6000},
        {"lr": 1e-3, "n_steps": 128, "n_epochs": 4, "minibatch_size": 64},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_a_trained_agent_scores_through_the_trainer_what_it_scores_by_hand(tmp_path, name):
    cls, env_id, budget, hp = CASES[name]
    trainer = OnlineTrainer(lambda: gym.make_vec(env_id, num_envs=1), lambda env: cls(env, **hp), exp_dir=tmp_path)
    trainer.multi_run(1, seed_offset=0, checkpoint_freq=10**9, progress=False, **budget)
    (trained,) = trainer.agents
    state_before = trained.save()

    by_hand = greedy_returns(trained, env_id, EVAL_SEED, EVAL_EPISODES)
    untrained = greedy_returns(cls(gym.make_vec(env_id, num_envs=1), **hp), env_id, EVAL_SEED, EVAL_EPISODES)
    assert by_hand != untrained  # the test can tell a trained agent from a fresh one

    assert through_trainer(trained, env_id) == by_hand
    after = trained.save()
    assert after["steps"] == state_before["steps"]  # evaluation neither reset nor trained it
    assert through_trainer(loading(cls, tmp_path / "Run1_Last"), env_id) == by_hand

    best = cls(gym.make_vec(env_id, num_envs=1), **hp)
    best.load(torch.load(tmp_path / "Run1_Best_agent.t", weights_only=True))
    assert through_trainer(loading_best(cls, tmp_path / "Run1_Best_agent.t"), env_id) == greedy_returns(
        best, env_id, EVAL_SEED, EVAL_EPISODES
    )


def test_evaluation_never_calls_reset_nor_update():
    class Trained:
        def __init__(self):
            self.calls = []

        def reset(self, seed):
            self.calls.append("reset")

        def train(self):
            self.calls.append("train")

        def eval(self):
            self.calls.append("eval")

        def act(self, obs):
            return np.zeros(len(obs), dtype=np.int64)

        def update(self, *args, **kwargs):
            self.calls.append("update")

    agent = Trained()
    OnlineTrainer(gym.make_vec("CartPole-v1", num_envs=2), agent, train=False).multi_run(
        2, num_episodes=4, seed_offset=0, progress=False
    )
    assert agent.calls == []  # two runs in this process: each evaluated a copy; the instance is untouched
    OnlineTrainer(gym.make_vec("CartPole-v1", num_envs=2), agent, train=False).multi_run(
        1, num_episodes=4, seed_offset=0, progress=False
    )
    assert agent.calls == ["eval"]


# ------------------------------------------------------------------ evaluation during training

import gymnasium.spaces as spaces  # noqa: E402

from online_trainer.loop.evaluation import EVAL_SEED_SHIFT, play_episodes  # noqa: E402
from tests.conftest import RecordingAgent, make_counting_vec, read_videos, scheduled_length  # noqa: E402


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_play_episodes_counts_real_transitions_and_spreads_episodes(mode):
    env = make_counting_vec(3, mode)()
    returns, lengths = play_episodes(env, RecordingAgent(), 7, seed=100)
    # sub-envs play 2, 2 and 3 episodes (7 spread over 3), each from its own seed
    expected = sorted(scheduled_length(100 + j, k) for j, share in enumerate([2, 2, 3]) for k in range(share))
    assert sorted(lengths.tolist()) == expected
    assert sorted(returns.tolist()) == sorted(n * (n + 1) / 2 for n in expected)


class NeverEnds(gym.Env):
    observation_space = spaces.Box(0, 1, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(1, dtype=np.float32), 1.0, False, False, {}


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
def test_an_evaluation_episode_that_never_ends_is_cut(mode, caplog):
    env = gym.vector.SyncVectorEnv([NeverEnds] * 2, autoreset_mode=gym.vector.AutoresetMode(mode))
    returns, lengths = play_episodes(env, RecordingAgent(), 3, seed=0, max_episode_steps=50)
    assert lengths.tolist() == [50, 50, 50] and returns.tolist() == [50.0] * 3
    assert "evaluation episodes cut after 50 steps" in caplog.text


class Bandit(gym.Env):
    """One-step episodes whose reward is the action: the greedy return is the agent's choice."""

    observation_space = spaces.Box(0, 1, shape=(1,), dtype=np.float32)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        return np.zeros(1, dtype=np.float32), float(action), True, False, {}


class Drifting(RecordingAgent):
    """Greedy action (0, 1 or 2) drifts with the number of updates: evaluations differ."""

    def act(self, obs):
        if self.mode == "eval":
            return np.full(len(obs), (self.updates // 7) % 3, dtype=np.int64)
        return np.zeros(len(obs), dtype=np.int64)


def test_best_agent_is_the_state_at_the_best_evaluation(tmp_path):
    same_step = gym.vector.AutoresetMode.SAME_STEP  # one env step per transition: updates == global_step
    trainer = OnlineTrainer(
        lambda: gym.vector.SyncVectorEnv([Bandit], autoreset_mode=same_step), Drifting, exp_dir=tmp_path
    )
    trainer.multi_run(
        1, total_steps=60, seed_offset=0, eval_freq=5, eval_episodes=2, checkpoint_freq=1000, progress=False
    )
    (evaluations,) = trainer.evaluations
    means = [e["mean"] for e in evaluations]
    assert len(set(means)) == 3  # the evaluations differ
    best = evaluations[int(np.argmax(means))]
    state = torch.load(tmp_path / "Run1_Best_agent.t", weights_only=True)
    assert state["updates"] == best["global_step"]  # one update per env step before it
    assert [e["global_step"] for e in evaluations] == list(range(5, 65, 5))
    from online_trainer.records.storage import iter_metrics_chunks

    on_disk = [r for chunk in iter_metrics_chunks(tmp_path / "eval_run1.pkl") for r in chunk]
    assert [r["mean"] for r in on_disk] == means


def strip_evaluations(trainer):
    return [
        [(e["global_step"], e["episodes_trained"], e["returns"].tolist(), e["lengths"].tolist()) for e in run]
        for run in trainer.evaluations
    ]


def cliff_trainer(exp_dir=None):
    return OnlineTrainer(
        lambda: gym.make_vec("CliffWalking-v1", num_envs=2, max_episode_steps=200),
        lambda env: QLearningAgent(env, lr=0.5, epsilon_decay=0.9, decay_unit="episode"),
        exp_dir=exp_dir,
    )


def test_evaluation_leaves_training_records_unchanged_and_is_the_same_with_workers(tmp_path):
    plain = cliff_trainer().multi_run(2, num_episodes=40, seed_offset=3, progress=False)
    serial = cliff_trainer()
    evaluated = serial.multi_run(2, num_episodes=40, seed_offset=3, eval_freq=10, eval_episodes=3, progress=False)

    def records(runs):
        return [[(r["ep_return"], r["ep_length"], r["actions"].tolist()) for r in run] for run in runs]

    assert records(evaluated) == records(plain)
    assert [len(run) for run in serial.evaluations] == [4, 4]
    in_workers = cliff_trainer(tmp_path)
    in_workers.multi_run(
        2, num_episodes=40, seed_offset=3, eval_freq=10, eval_episodes=3, num_workers=2, progress=False
    )
    assert strip_evaluations(in_workers) == strip_evaluations(serial)


def test_evaluating_the_last_checkpoint_repeats_the_final_evaluation(tmp_path):
    trainer = cliff_trainer(tmp_path)
    trainer.multi_run(
        2, num_episodes=30, seed_offset=0, eval_freq=10, eval_episodes=4, checkpoint_freq=10, progress=False
    )
    episodes = trainer.evaluate("last", num_episodes=4, progress=False)
    for run, evaluations in enumerate(trainer.evaluations, start=1):
        mine = episodes[episodes["run"] == run]
        assert mine["ep_return"].tolist() == evaluations[-1]["returns"].tolist()
        assert mine["ep_length"].tolist() == evaluations[-1]["lengths"].tolist()
    assert (tmp_path / "evaluation_last.csv").is_file()
    with pytest.raises(FileExistsError, match=r"evaluation_last.csv holds an earlier evaluation: pass overwrite=True"):
        trainer.evaluate("last", num_episodes=4, progress=False)
    every = trainer.evaluate("all", num_episodes=2, num_workers=2, progress=False)
    assert sorted(set(every["checkpoint"])) == ["E10", "E20", "E30", "best", "last"]


def test_evaluate_says_which_of_the_evaluation_options_given_do_not_apply(tmp_path, caplog):
    """Tester E4: evaluate(evaluation=EvaluationOptions(episodes=2, freq=5)) took freq without a word."""
    trainer = cliff_trainer(tmp_path)
    trainer.multi_run(1, num_episodes=10, seed_offset=0, checkpoint_freq=10, progress=False)
    caplog.set_level("WARNING")
    table = trainer.evaluate("last", evaluation=EvaluationOptions(episodes=2, freq=5, record_video=1), progress=False)
    assert len(table) == 2
    assert "evaluation.freq=5 and evaluation.record_video=1 do not apply" in caplog.text


def test_an_evaluation_that_fails_before_its_first_step_names_its_evaluation_seed(tmp_path):
    """Tester D15: the note said "raised by run 2, seed 4020992879", the run's evaluation seed (its seed + 2**31),
    which the manifest does not hold."""
    trainer = cliff_trainer(tmp_path)
    trainer.multi_run(1, num_episodes=10, seed_offset=0, checkpoint_freq=10, progress=False)
    for path in tmp_path.glob("Run1_Last*"):
        path.write_bytes(b"damaged")
    with pytest.raises(Exception) as info:
        trainer.evaluate("last", progress=False)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert f"(raised by run 1, evaluation seed {eval_seed(0)}, before its first env step" in notes


class StopsRunTwo(Hook):
    """Stops the run of seed 10000 (run 2) at its 10th episode: it ends by design, as a stopper's run does."""

    def on_episode_end(self, ctx, record):
        if ctx.seed == 10000 and ctx.episodes >= 10:
            ctx.stop("enough")


def test_evaluate_includes_runs_a_hook_stopped_and_names_the_runs_it_leaves_out(tmp_path, caplog):
    """Runs stopped early by a hook were left out of evaluate() without a word (they end by design, and have their
    checkpoints); with every run stopped it raised 'has no finished run to evaluate'."""
    trainer = cliff_trainer(tmp_path)
    trainer.multi_run(3, num_episodes=30, seed_offset=0, hooks=[StopsRunTwo()], checkpoint_freq=10, progress=False)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished", "stopped_early", "finished"]
    episodes = trainer.evaluate("last", num_episodes=2, progress=False)
    assert sorted(set(episodes["run"])) == [1, 2, 3]
    # a run that did not end (interrupted, say) is left out, with a warning naming it
    manifest["runs"][2]["status"] = "interrupted"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        episodes = trainer.evaluate("best", num_episodes=2, progress=False)
    assert sorted(set(episodes["run"])) == [1, 2]
    assert "Evaluating the runs that ended; left out: run 3 (interrupted)." in caplog.text
    # a writer killed as run 3 ran left it "running": it is an interrupted run (tester H3)
    manifest["runs"][2]["status"] = "running"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        trainer.evaluate("best", num_episodes=2, progress=False, overwrite=True)
    assert "Evaluating the runs that ended; left out: run 3 (interrupted)." in caplog.text
    for entry in manifest["runs"]:
        entry["status"] = "interrupted"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        FileNotFoundError,
        match=r"has no run that ended \(finished, or stopped early by a hook\) to "
        r"evaluate: run 1 \(interrupted\), run 2 \(interrupted\), run 3 \(interrupted\)\. Resume",
    ):
        trainer.evaluate("all", num_episodes=2, progress=False)


def test_evaluating_the_last_checkpoint_uses_the_eval_env_of_the_training_runs(tmp_path):
    def eval_env():  # not the training env: one sub-env, a shorter step limit
        return gym.make_vec("CliffWalking-v1", num_envs=1, max_episode_steps=30)

    trainer = cliff_trainer(tmp_path)
    trainer.multi_run(
        2,
        num_episodes=30,
        seed_offset=0,
        eval_env=eval_env,
        eval_freq=10,
        eval_episodes=3,
        checkpoint_freq=10,
        progress=False,
    )
    episodes = trainer.evaluate("last", num_episodes=3, progress=False)
    for run, evaluations in enumerate(trainer.evaluations, start=1):
        assert episodes[episodes["run"] == run]["ep_length"].tolist() == evaluations[-1]["lengths"].tolist()
    assert episodes["ep_length"].max() <= 30
    # a new trainer knows no eval env of its own: it evaluates on the training env unless given one
    fresh = cliff_trainer(tmp_path).evaluate("last", num_episodes=3, overwrite=True, progress=False)
    again = cliff_trainer(tmp_path).evaluate("last", num_episodes=3, eval_env=eval_env, overwrite=True, progress=False)
    assert again["ep_length"].tolist() == episodes["ep_length"].tolist()
    assert fresh["ep_length"].max() > 30


def test_eval_seeds_never_equal_training_seeds():
    seen = []

    class Spy(gym.Wrapper):
        def reset(self, *, seed=None, options=None):
            if seed is not None:
                seen.append(seed)
            return self.env.reset(seed=seed, options=options)

    OnlineTrainer(
        lambda: gym.vector.SyncVectorEnv([lambda: Spy(gym.make("CartPole-v1"))] * 2), RecordingAgent
    ).multi_run(2, num_episodes=4, seed_offset=0, eval_freq=2, eval_episodes=2, progress=False)
    training = {0, 1, 10000, 10001}
    assert training <= set(seen)
    assert set(seen) - training == {
        EVAL_SEED_SHIFT,
        EVAL_SEED_SHIFT + 1,
        EVAL_SEED_SHIFT + 10000,
        EVAL_SEED_SHIFT + 10001,
    }


def test_load_agent_gives_the_trained_agent(tmp_path):
    from online_trainer.orchestration.checkpoint_eval import load_agent

    trainer = cliff_trainer(tmp_path)
    trainer.multi_run(1, num_episodes=20, seed_offset=0, checkpoint_freq=10, progress=False)

    def make(env):
        return QLearningAgent(env)

    agent = load_agent(tmp_path, 1, "last", agent_factory=make, env=lambda: gym.make_vec("CliffWalking-v1", num_envs=2))
    assert agent.steps == trainer.agents[0].steps
    np.testing.assert_array_equal(agent.q_table, trainer.agents[0].q_table)
    with pytest.raises(ValueError, match=r"which must be 'last' or 'best', but got which='all'"):
        load_agent(tmp_path, 1, "all", agent_factory=make)
    # a run the experiment does not have, or a sweep's folder: said so (it was "no 'last' checkpoint")
    with pytest.raises(ValueError, match=r"run=2, but .* has runs 1 to 1: give a run's number, counted from 1\."):
        load_agent(tmp_path, 2, agent_factory=make)
    with pytest.raises(ValueError, match=r"run=0, but"):
        load_agent(tmp_path, 0, agent_factory=make)
    sweep = tmp_path / "sweep"
    cliff_trainer(sweep / "lr=0.1").multi_run(1, num_episodes=2, seed_offset=0, checkpoint_freq=1, progress=False)
    with pytest.raises(ValueError, match=r"sweep is a sweep: each of its configurations \(lr=0\.1\) is an experiment"):
        load_agent(sweep, 1, agent_factory=make)


def test_record_video_films_the_first_episode_of_every_nth_evaluation(tmp_path):
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    pytest.importorskip("pygame")
    trainer = OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), RecordingAgent, exp_dir=tmp_path)
    trainer.multi_run(
        1,
        total_steps=40,
        seed_offset=0,
        eval_freq=10,
        eval_episodes=2,
        record_video=2,
        eval_env=lambda: gym.make_vec("CartPole-v1", num_envs=2, render_mode="rgb_array"),
        progress=False,
    )
    (evaluations,) = trainer.evaluations
    filmed = [e for e in evaluations if "video" in e]
    assert [e["eval_index"] for e in filmed] == [2, 4]
    for record in filmed:
        num_frames, _ = imageio_ffmpeg.count_frames_and_secs(record["video"])  # decodes the whole file
        # sub-env 0's episode (one of the two): its reset frame, then one frame per step
        assert num_frames - 1 in record["lengths"].tolist()
    assert sorted(p.name for p in (tmp_path / "videos" / "run1").iterdir()) == ["eval2_step20.mp4", "eval4_step40.mp4"]


def test_evaluation_videos_go_to_tensorboard_as_gifs_of_every_frame(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)  # the default TBCallBack
    trainer.multi_run(
        1,
        total_steps=40,
        seed_offset=0,
        eval_freq=10,
        eval_episodes=2,
        record_video=2,
        eval_env=make_counting_vec(1, render_mode="rgb_array"),
        progress=False,
    )
    (evaluations,) = trainer.evaluations
    filmed = [e for e in evaluations if "video" in e]
    videos = read_videos(tmp_path)
    assert list(videos) == ["eval/video/run_1"]
    assert [step for step, _ in videos["eval/video/run_1"]] == [e["global_step"] for e in filmed] == [20, 40]
    for record, (_, frames) in zip(filmed, videos["eval/video/run_1"]):
        # the first episode (one sub-env): its reset frame (t=0), then one frame per step (t=1..L)
        assert [int(frame[0, 0, 0]) for frame in frames] == list(range(int(record["lengths"][0]) + 1))
    assert not any("frames" in e for e in evaluations)


def test_record_video_needs_an_rgb_array_eval_env(tmp_path):
    with pytest.raises(ValueError, match=r"record_video=1 needs an eval env made with render_mode='rgb_array'"):
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, total_steps=20, eval_freq=10, record_video=1, progress=False
        )
    # EvaluationOptions(record_video=...) alone evaluates at the end, on the training env's factory
    with pytest.raises(ValueError, match=r"record_video=2 needs an eval env made with render_mode='rgb_array'"):
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=1), RecordingAgent, exp_dir=tmp_path).multi_run(
            1, total_steps=20, evaluation=EvaluationOptions(record_video=2), progress=False
        )


def test_the_progress_bar_shows_the_last_evaluation_mean(monkeypatch, terminal):
    from online_trainer.progress import display as progress_module

    postfixes = []
    real_bar = progress_module._bar

    def recording_bar(**kwargs):
        bar = real_bar(**kwargs)
        original = bar.set_postfix_str
        bar.set_postfix_str = lambda text, refresh=True: (postfixes.append(text), original(text, refresh))
        return bar

    monkeypatch.setattr(progress_module, "_bar", recording_bar)
    OnlineTrainer(lambda: gym.vector.SyncVectorEnv([Bandit]), Drifting).multi_run(
        1, total_steps=400, seed_offset=0, eval_freq=100, eval_episodes=2, progress=True
    )
    assert any(text.startswith("return=") and ", eval=" in text for text in postfixes)


def test_the_evaluation_step_limit_never_cuts_before_the_envs_own_time_limit():
    from online_trainer.loop.evaluation import MAX_EPISODE_STEPS, episode_step_limit

    assert episode_step_limit(gym.make_vec("CartPole-v1", num_envs=2)) == 501
    assert episode_step_limit(gym.vector.SyncVectorEnv([lambda: gym.make("CliffWalking-v1")])) == MAX_EPISODE_STEPS
    assert episode_step_limit(gym.vector.SyncVectorEnv([NeverEnds])) == MAX_EPISODE_STEPS


def test_an_eval_env_of_other_sub_envs_is_named_before_the_first_step_and_in_the_failure(tmp_path, caplog, monkeypatch):
    """write-an-agent.md's agent sized its actions by set_num_env(n): with a one-env eval env beside a two-env
    training env, the run failed at its final evaluation, after its whole budget, with a shape error alone."""
    from online_trainer.errors import RunsFailedError

    class SizedBySetNumEnv:
        def set_num_env(self, n):
            self.n = n

        def act(self, obs):
            return np.zeros(self.n, dtype=np.int64)

        def update(self, *args, **kwargs):
            pass

    from online_trainer.run import one_run

    monkeypatch.setattr(one_run, "_told_of_eval_envs", False)  # said once a process
    caplog.set_level(logging.WARNING)
    with pytest.raises(RunsFailedError) as failed:
        OnlineTrainer(lambda: gym.make_vec("CartPole-v1", num_envs=2), lambda env: SizedBySetNumEnv()).multi_run(
            1,
            total_steps=50,
            seed_offset=0,
            evaluation=EvaluationOptions(episodes=1, env=lambda: gym.make("CartPole-v1")),
            progress=False,
        )
    assert "The eval env has 1 sub-env(s) and the training env 2, the number set_num_env gives the agent" in caplog.text
    assert "In an evaluation (the eval env has 1 sub-env(s), the training env 2" in str(failed.value)
    assert "size act's actions by its obs, len(obs), or give an eval env of num_envs=2" in str(failed.value)


def test_an_eval_env_that_cannot_draw_a_frame_fails_the_run_before_its_first_step(tmp_path):
    """With the video extra alone, CartPole's render() lacked pygame: record_video failed the run at its final
    evaluation, after its whole budget (an outside tester)."""
    from tests.conftest import CountingEnv, RecordingAgent, make_counting_vec

    class NoPygame(gym.Wrapper):
        def render(self):
            raise gym.error.DependencyNotInstalled("pygame is not installed")

    def eval_env():
        return gym.vector.SyncVectorEnv([lambda: NoPygame(CountingEnv(render_mode="rgb_array"))])

    built = []

    class Counts(RecordingAgent):
        def update(self, *args, **kwargs):
            built.append(1)
            return super().update(*args, **kwargs)

    with pytest.raises(
        RuntimeError,
        match=r"record_video=1 films the eval env, whose render\(\) failed: "
        r"DependencyNotInstalled: pygame is not installed\. Install what it names",
    ):
        OnlineTrainer(make_counting_vec(1), Counts, exp_dir=tmp_path).multi_run(
            1,
            total_steps=20,
            seed_offset=0,
            progress=False,
            evaluation=EvaluationOptions(episodes=1, env=eval_env, record_video=1),
        )
    assert built == []  # not one step of training


def test_an_eval_env_without_opengl_is_told_of_mujoco_gl(tmp_path):
    """E12: MuJoCo's "an OpenGL platform library has not been loaded" was answered with pygame's install."""
    from online_trainer.loop.evaluation import Evaluator
    from tests.conftest import CountingEnv

    class NoOpenGL(gym.Wrapper):
        def render(self):
            raise RuntimeError("FatalError: an OpenGL platform library has not been loaded into this process")

    env = gym.vector.SyncVectorEnv([lambda: NoOpenGL(CountingEnv(render_mode="rgb_array"))])
    with pytest.raises(RuntimeError, match=r"set MUJOCO_GL=egl \(or osmesa\) in the environment before Python starts"):
        Evaluator(env, RecordingAgent(env), 0, 1, video_dir=tmp_path, video_every=1)


class _AlwaysLeft:
    """A frozen agent: the same action whatever it sees, so only the env can change an evaluation."""

    def act(self, obs):
        return np.zeros(len(obs), dtype=np.int64)

    def update(self, *args, **kwargs):
        pass


def _vector_normalized():
    return gym.wrappers.vector.NormalizeReward(gym.make_vec("CartPole-v1", num_envs=2))


def _single_normalized():
    return gym.wrappers.NormalizeReward(gym.wrappers.NormalizeObservation(gym.make("CartPole-v1")))


def _single_reward_normalized():
    return gym.wrappers.NormalizeReward(gym.make("CartPole-v1"))


STATEFUL_ENVS = {
    "vector wrapper": _vector_normalized,
    "sync sub-env wrappers": lambda: gym.vector.SyncVectorEnv([_single_normalized] * 2),
    "async sub-env wrappers": lambda: gym.vector.AsyncVectorEnv([_single_reward_normalized] * 2),
}


@pytest.mark.parametrize("name", list(STATEFUL_ENVS))
def test_evaluations_of_a_frozen_agent_are_equal_on_an_env_with_running_statistics(tmp_path, name):
    """NormalizeReward updates its statistics as it steps, unless frozen: an evaluation freezes the eval env's, so
    every evaluation of an agent that does not change scores the same (A11: 207.0, then 3.97, 3.88 for the same
    episodes), and the training env's go on updating."""
    trainer = OnlineTrainer(STATEFUL_ENVS[name], lambda env: _AlwaysLeft(), exp_dir=tmp_path / "exp")
    trainer.multi_run(1, total_steps=600, evaluation=EvaluationOptions(freq=200, episodes=4), progress=False)
    means = [e["mean"] for e in trainer.evaluations[0]]
    assert len(means) == 3
    assert means[0] == means[1] == means[2]
    lengths = np.asarray(trainer.evaluations[0][0]["lengths"], dtype=float)
    # statistics as built: NormalizeReward's scale is 1/sqrt(1 + epsilon), the returns are the lengths
    np.testing.assert_allclose(sorted(trainer.evaluations[0][0]["returns"]), sorted(lengths), rtol=1e-6)
    (records,) = trainer.multi_run(1, total_steps=600, progress=False, overwrite=True)
    assert records[-1]["ep_return"] != pytest.approx(records[-1]["ep_length"])  # training still normalizes


def test_an_async_eval_env_whose_reward_statistics_cannot_be_reached_is_said(tmp_path, caplog):
    def both():
        return gym.vector.AsyncVectorEnv([_single_normalized] * 2)

    trainer = OnlineTrainer(both, lambda env: _AlwaysLeft(), exp_dir=tmp_path / "exp")
    with caplog.at_level(logging.WARNING):
        trainer.multi_run(1, total_steps=200, evaluation=EvaluationOptions(freq=100, episodes=2), progress=False)
    assert "both NormalizeReward and NormalizeObservation" in caplog.text
    assert "gymnasium.wrappers.vector.NormalizeReward" in caplog.text
    assert len(trainer.evaluations[0]) == 2  # the evaluations still ran
    # N16: it did not say that the observation statistics are not frozen either, nor that raw scores are not scaled;
    # and with workers each said it (once per process)
    assert "its observations, and its returns unless they are raw scores" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        trainer.multi_run(
            2,
            total_steps=200,
            evaluation=EvaluationOptions(freq=100, episodes=2),
            overwrite=True,
            execution=ExecutionOptions(num_workers=2, progress=False),
        )
    assert caplog.text.count("both NormalizeReward and NormalizeObservation") == 1
