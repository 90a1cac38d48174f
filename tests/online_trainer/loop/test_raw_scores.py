"""Raw scores: RecordEpisodeStatistics inside ClipReward; records, evaluation, analysis and the score option."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import ClipReward, RecordEpisodeStatistics

from online_trainer import OnlineTrainer
from online_trainer.agents import RandomAgent
from online_trainer.analysis.dataframes import load_episodes
from online_trainer.analysis.stats import final_performance, summarize
from online_trainer.loop.raw_scores import has_episode_statistics
from tests.conftest import CountingEnv

MODES = ["NextStep", "SameStep", "Disabled"]


def clipped(statistics: bool = True):
    """A CountingEnv (reward t at step t: an episode of length L returns L(L+1)/2) with rewards clipped to 1."""
    env = CountingEnv()
    return ClipReward(RecordEpisodeStatistics(env) if statistics else env, max_reward=1)


def make_vec(num_envs=2, mode="NextStep", vectorization="sync", statistics=True):
    def factory():
        cls = gym.vector.SyncVectorEnv if vectorization == "sync" else gym.vector.AsyncVectorEnv
        return cls(
            [lambda: clipped(statistics) for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode(mode)
        )

    return factory


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("num_envs", [1, 3])
def test_records_keep_the_unclipped_sums_beside_the_clipped_ones(tmp_path, mode, num_envs):
    trainer = OnlineTrainer(make_vec(num_envs, mode), RandomAgent, exp_dir=tmp_path)
    records = list(trainer.multi_run(1, num_episodes=13, progress=False, seed_offset=0)[0])
    lengths = np.array([r["ep_length"] for r in records])
    assert len(records) == 13 and set(lengths) == {2, 3, 4, 5}
    assert [r["ep_return"] for r in records] == lengths.tolist()  # clipped: 1 a step
    assert [r["raw_return"] for r in records] == (lengths * (lengths + 1) / 2).tolist()
    assert [r["raw_length"] for r in records] == lengths.tolist()
    df = load_episodes(tmp_path)
    assert df["raw_return"].tolist() == (lengths * (lengths + 1) / 2).tolist()
    assert df["ep_return"].tolist() == lengths.tolist() and "score" not in df.attrs


def test_async_sub_envs_are_asked_once_for_the_wrapper(tmp_path):
    assert has_episode_statistics(make_vec(2, vectorization="async")()) is True
    trainer = OnlineTrainer(make_vec(2, "SameStep", "async"), RandomAgent)
    records = list(trainer.multi_run(1, num_episodes=6, progress=False, seed_offset=0)[0])
    assert all(r["raw_return"] == r["ep_length"] * (r["ep_length"] + 1) / 2 for r in records)


def test_without_the_wrapper_records_and_table_have_no_raw_columns(tmp_path):
    env = make_vec(2, statistics=False)()
    assert has_episode_statistics(env) is False
    env.close()
    trainer = OnlineTrainer(make_vec(2, statistics=False), RandomAgent, exp_dir=tmp_path)
    records = trainer.multi_run(1, num_episodes=4, progress=False)[0]
    assert "raw_return" not in records[0]
    with pytest.raises(KeyError, match="column\\('raw_return'\\): not a record key"):
        records.column("raw_return")
    assert "raw_return" not in load_episodes(tmp_path).columns


def test_score_raw_without_the_wrapper_fails_before_the_first_step(tmp_path):
    trainer = OnlineTrainer(make_vec(2, statistics=False), RandomAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(
        ValueError,
        match="score='raw' reports the episode statistics of a gymnasium.wrappers."
        "RecordEpisodeStatistics wrapper, but the sub-envs of the training env have "
        "none: add it inside each sub-env's reward wrappers",
    ) as refused:
        trainer.multi_run(1, num_episodes=4, progress=False, score="raw")
    assert not (tmp_path / "exp" / "metrics_run1.pkl").exists()
    # in the words of a config too (tester C10)
    assert str(refused.value).endswith(
        "In a config: records.score=raw needs gymnasium.wrappers:RecordEpisodeStatistics first in env.wrappers; or "
        "records.score=return."
    )
    vector_level = OnlineTrainer(
        lambda: gym.wrappers.vector.RecordEpisodeStatistics(make_vec(2, statistics=False)()),
        RandomAgent,
        exp_dir=tmp_path / "vector",
    )
    with pytest.raises(
        ValueError,
        match=r"have none \(the gymnasium.wrappers.vector.RecordEpisodeStatistics around the vector env is not "
        r"read\): add it inside each sub-env's reward wrappers",
    ):
        vector_level.multi_run(1, num_episodes=4, progress=False, score="raw")
    with pytest.raises(
        ValueError, match="records.score must be one of 'return', 'raw', but got records.score='game'. 'return' sums"
    ):
        trainer.multi_run(1, num_episodes=4, progress=False, score="game")


def test_score_raw_with_a_time_limit_outside_the_wrapper_fails_before_the_first_step(tmp_path, caplog):
    """C13: [RecordEpisodeStatistics, TimeLimit(20)] in env.wrappers: every episode the limit cut had a NaN raw
    score, left out of the table without a word (final returns 13.70 for 18.10), and the warning named ep_return."""
    from gymnasium.wrappers import TimeLimit

    def limited():
        return gym.vector.SyncVectorEnv([lambda: TimeLimit(RecordEpisodeStatistics(gym.make("CartPole-v1")), 20)])

    with pytest.raises(
        ValueError,
        match=r"but in the training env's sub-envs a TimeLimit\(max_episode_steps=20\) wraps it: the episodes it cuts "
        r"end without statistics \(a NaN raw score, left out of every statistic\). Put the time limit inside",
    ):
        OnlineTrainer(limited, RandomAgent, exp_dir=tmp_path / "exp").multi_run(1, total_steps=200, score="raw")
    assert not (tmp_path / "exp").exists()
    # score="return" records the raw columns beside: the analysis of them names the raw score, and why it is NaN
    OnlineTrainer(limited, RandomAgent, exp_dir=tmp_path / "ret").multi_run(1, total_steps=400, progress=False)
    with caplog.at_level("WARNING"):
        summarize(load_episodes(tmp_path / "ret"), score="raw")
    assert "episode(s) whose raw score (raw_return) is NaN or infinite" in caplog.text
    assert "cut by a wrapper outside it, such as a TimeLimit listed after it" in caplog.text


@pytest.mark.parametrize("mode", MODES)
def test_score_raw_evaluates_and_summarizes_raw_scores(tmp_path, mode):
    trainer = OnlineTrainer(make_vec(2, mode), RandomAgent, exp_dir=tmp_path)
    runs = trainer.multi_run(
        2, num_episodes=8, progress=False, score="raw", eval_freq=4, eval_episodes=4, seed_offset=0
    )
    evaluation = trainer.evaluations[0][-1]
    lengths = evaluation["lengths"]
    assert evaluation["score"] == "raw" and len(lengths) == 4
    assert evaluation["returns"].tolist() == (lengths * (lengths + 1) / 2).tolist()
    assert evaluation["mean"] == pytest.approx(float(np.mean(lengths * (lengths + 1) / 2)))
    df = load_episodes(tmp_path)
    assert df.attrs["score"] == "raw"
    raw = summarize(df, last_k=3, ci=None)
    clipped_sums = summarize(df, last_k=3, ci=None, score="return")
    finals = [np.mean([r["raw_return"] for r in run][-3:]) for run in runs]
    assert raw["mean"].iloc[0] == pytest.approx(np.mean(finals))
    assert clipped_sums["mean"].iloc[0] == pytest.approx(
        np.mean([np.mean([r["ep_return"] for r in run][-3:]) for run in runs])
    )
    assert not math.isclose(raw["mean"].iloc[0], clipped_sums["mean"].iloc[0])
    # final_performance (the command's per-run table, plot_final_performance, compare) reads the same score
    assert final_performance(df, last_k=3)["final_return"].tolist() == pytest.approx(finals)
    assert final_performance(df, last_k=3, score="return")["final_return"].tolist() == pytest.approx(
        [np.mean([r["ep_return"] for r in run][-3:]) for run in runs]
    )


def test_summarize_score_raw_needs_the_column(tmp_path):
    OnlineTrainer(make_vec(2, statistics=False), RandomAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=4, progress=False
    )
    with pytest.raises(ValueError, match="score='raw' needs the raw_return column, which this table lacks"):
        summarize(load_episodes(tmp_path), score="raw")


def test_progress_shows_the_raw_return_under_score_raw(tmp_path):
    from online_trainer.callbacks import EmptyCallBack
    from online_trainer.loop.factories import AgentFactory, EnvFactory
    from online_trainer.options.groups import RecordOptions, RunPlan
    from online_trainer.run.one_run import RunSpec, execute_run

    class Bar:
        def __init__(self):
            self.shown = []

        def open_run(self, *args):
            return self

        def episode_end(self, value):
            self.shown.append(value)

        def advance(self, n):
            pass

        def eval_end(self, value):
            pass

        def close(self):
            pass

    bar = Bar()
    spec = RunSpec(
        run_idx=1,
        seed=0,
        env_factory=EnvFactory(make_vec(1, "NextStep")),
        agent_factory=AgentFactory(RandomAgent),
        callback=EmptyCallBack(),
        options=RunPlan(num_episodes=5, dump_metrics=False, has_exp_dir=False, records=RecordOptions(score="raw")),
    )
    result = execute_run(spec, bar)
    lengths = [r["ep_length"] for r in result.records.records()]
    raw = [n * (n + 1) / 2 for n in lengths]
    assert bar.shown[:5] == raw and bar.shown[-1] == raw[-1]  # each episode's, then the last one at the end
    assert raw != [float(n) for n in lengths]


def test_evaluating_the_checkpoints_of_a_raw_score_experiment_reports_raw_scores(tmp_path):
    trainer = OnlineTrainer(make_vec(2), RandomAgent, exp_dir=tmp_path / "raw")
    trainer.multi_run(1, num_episodes=6, progress=False, score="raw", checkpoint_freq=6, seed_offset=0)
    episodes = trainer.evaluate("last", num_episodes=4, progress=False)
    lengths = episodes["ep_length"].to_numpy()
    assert episodes["ep_return"].tolist() == (lengths * (lengths + 1) / 2).tolist()  # not the clipped lengths
    plain = OnlineTrainer(make_vec(2), RandomAgent, exp_dir=tmp_path / "plain")
    plain.multi_run(1, num_episodes=6, progress=False, checkpoint_freq=6, seed_offset=0)
    episodes = plain.evaluate("last", num_episodes=4, progress=False)
    assert episodes["ep_return"].tolist() == episodes["ep_length"].tolist()


@pytest.mark.parametrize("mode", MODES)
def test_behind_dict_info_to_list_records_raw_scores_and_final_observations_are_exact(tmp_path, mode):
    """gymnasium's DictInfoToList hands a list of sub-env dicts: raw scores and SAME_STEP's final observations."""
    seen = []

    class FinalObs(RandomAgent):
        def update(self, next_obs, reward, terminated, truncated, call_back=None):
            done = np.logical_or(terminated, truncated)
            seen.extend(np.asarray(next_obs)[done].ravel().tolist())

    def factory():
        return gym.wrappers.vector.DictInfoToList(make_vec(3, mode)())

    trainer = OnlineTrainer(factory, FinalObs, exp_dir=tmp_path)
    records = list(trainer.multi_run(1, num_episodes=13, progress=False, seed_offset=0)[0])
    lengths = np.array([r["ep_length"] for r in records])
    assert len(records) == 13 and [r["ep_return"] for r in records] == lengths.tolist()
    assert [r["raw_return"] for r in records] == (lengths * (lengths + 1) / 2).tolist()
    assert [r["raw_length"] for r in records] == lengths.tolist()
    # the agent learns from each episode's last observation (its step count), not from a reset's 0 (SAME_STEP)
    assert len(seen) >= 13 and set(seen) <= {2, 3, 4, 5}
