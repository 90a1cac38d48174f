"""Sweeps: ranking by aggregate over seeds, resuming, growing the grid, errors, Optuna."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time

import numpy as np
import pytest
import yaml

import online_trainer.envs  # noqa: F401  (registers Corridor-v0)
from online_trainer import (
    ExecutionOptions,
    OnlineTrainer,
    RunsFailedError,
    load_agent_logs,
    load_episodes,
    optuna_objective,
    shutdown_workers,
)
from online_trainer.agents import QLearningAgent
from online_trainer.envs import make_env
from online_trainer.hooks import Hook
from online_trainer.orchestration.sweep import config_name, expand_grid
from online_trainer.records import storage
from tests.conftest import RecordingAgent, make_counting_vec


class CountingAgents:
    """An agent factory that counts the agents it builds."""

    def __init__(self):
        self.built = 0

    def __call__(self, env):
        self.built += 1
        return QLearningAgent(env)


def corridor_trainer(exp_dir, factory=None):
    return OnlineTrainer(make_env("Corridor-v0", num_envs=1), factory or CountingAgents(), exp_dir=exp_dir)


def test_expand_grid_and_names():
    assert expand_grid({"lr": [0.1, 0.2], "gamma": [0.9]}) == [{"lr": 0.1, "gamma": 0.9}, {"lr": 0.2, "gamma": 0.9}]
    assert expand_grid([{"lr": 0.1}, {"lr": 0.1}, {"lr": 0.3}]) == [{"lr": 0.1}, {"lr": 0.3}]
    assert config_name({"lr": 0.001, "net": [64, 64]}) == "lr=0.001,net=64-64"
    assert len(config_name({f"k{i}": "x" * 20 for i in range(10)})) <= 100
    with pytest.raises(ValueError, match=r"Each grid value must be a non-empty list, but got lr=0.1: write lr=\[0.1\]"):
        expand_grid({"lr": 0.1})
    with pytest.raises(
        ValueError, match=r"but got lr=\[\]: give the values to try, e.g. lr=\[0.001, 0.0003\], or leave"
    ):
        expand_grid({"lr": [], "gamma": [0.99]})  # O15: told to write lr=[[]]
    # M22: a list of non-dicts named tuning_hp, which the user never passed; {} ran one configuration, [] was refused
    with pytest.raises(
        ValueError, match=r"configurations\[0\] must be a dict of hyperparameter name to value, but got "
    ):
        expand_grid([1, 2])
    with pytest.raises(
        ValueError, match=r"The sweep has no configuration: .* as one configuration, pass \{\} or \[\{\}\]"
    ):
        expand_grid([])
    with pytest.raises(ValueError, match=r"configurations must be a grid .* but got configurations='lr'"):
        expand_grid("lr")
    assert expand_grid([{}]) == expand_grid({}) == [{}]  # the agent's defaults, as one configuration (first-sweep.md)


def test_the_known_best_configuration_ranks_first(tmp_path):
    ranking = corridor_trainer(tmp_path).sweep(
        {"lr": [1e-4, 0.5]}, num_runs=3, num_episodes=60, seed_offset=0, progress=False
    )
    assert ranking["lr"].tolist() == [0.5, 1e-4]
    assert ranking["rank"].tolist() == [1, 2]
    assert ranking["num_runs"].tolist() == [3, 3]
    assert (ranking["iqm_lo"] <= ranking["iqm"]).all() and (ranking["iqm"] <= ranking["iqm_hi"]).all()
    # every run of lr=0.5 beats every run of lr=1e-4: P = 1 [1, 1] from 3 seeds is flagged, with its true bound
    assert ranking["probability_of_improvement"].iloc[1] == 1.0 and ranking["degenerate"].tolist() == [False, True]
    assert 0.0 < ranking["separation_bound"].iloc[1] < 0.5 and np.isnan(ranking["separation_bound"].iloc[0])
    assert "Every run of lr=0.5 beats every run of lr=0.0001 (complete separation)" in ranking.attrs["note"]
    assert "no verdict either" not in ranking.attrs["note"]  # N24: read as taking back told_apart, where it held
    # 3 seeds a side: a separation that complete happens one time in ten between equal configurations
    assert ranking["told_apart"].tolist() == [False, False]
    assert "cannot be told apart: lr=0.5, lr=0.0001 (too few seeds for a verdict at 95%" in ranking.attrs["note"]
    # the seeds it names are those of the pair it names (V17: "would separate them" after a list of three)
    assert (
        "seeds per configuration would separate lr=0.5 from lr=0.0001 if the difference holds"
        in (ranking.attrs["note"])
    )
    assert (tmp_path / "sweep_results.csv").is_file()
    episodes = load_episodes(tmp_path)
    assert sorted(episodes["experiment"].unique()) == ["lr=0.0001", "lr=0.5"]
    assert set(episodes.groupby("experiment")["seed"].unique().map(tuple)) == {(0, 10000, 20000)}  # same seeds


def test_running_again_runs_nothing_new_and_a_bigger_grid_only_the_new(tmp_path, caplog):
    import pandas as pd

    factory = CountingAgents()
    trainer = corridor_trainer(tmp_path, factory)
    first = trainer.sweep({"lr": [0.1, 0.5]}, num_runs=2, num_episodes=20, seed_offset=3, progress=False)
    assert factory.built == 4  # 2 configurations x 2 seeds, once each
    streams = {p: p.read_bytes() for p in tmp_path.glob("*/metrics_run*.pkl")}
    again = trainer.sweep({"lr": [0.1, 0.5]}, num_runs=2, num_episodes=20, progress=False)
    assert factory.built == 4  # nothing new to run: no factory call
    assert again.drop(columns=[c for c in again if c.endswith(("_lo", "_hi"))]).equals(
        first.drop(columns=[c for c in first if c.endswith(("_lo", "_hi"))])
    )
    trainer.sweep({"lr": [0.1, 0.5, 0.9]}, num_runs=3, num_episodes=20, progress=False)
    assert factory.built == 4 + 2 + 3  # one more seed for the old two, three for the new one
    assert all(p.read_bytes() == data for p, data in streams.items())  # old results untouched
    trainer.sweep({"lr": [0.9]}, num_runs=4, num_episodes=20, progress=False)  # only lr=0.9 grows
    assert sorted(pd.read_csv(tmp_path / "sweep_results.csv")["num_runs"]) == [3, 3, 4]
    # O15: ranked side by side without a word
    assert "sweep: sweep_results.csv: The configurations ran different numbers of seeds: " in caplog.text


def test_a_sweep_called_with_fewer_seeds_than_it_ran_says_it_ranks_them_all(tmp_path, caplog):
    """Tester O15: num_runs=2 on a sweep of 3 seeds returned the 3-seed ranking without a word."""
    trainer = corridor_trainer(tmp_path)
    trainer.sweep({"lr": [0.1, 0.5]}, num_runs=3, num_episodes=5, seed_offset=3, progress=False)
    ranking = trainer.sweep({"lr": [0.1, 0.5]}, num_runs=2, num_episodes=5, progress=False)
    assert "sweep: num_runs=2, but lr=0.1 (3), lr=0.5 (3) ran more seeds earlier" in caplog.text
    assert ranking["num_runs"].tolist() == [3, 3]


def test_sweep_results_csv_ranks_every_configuration_of_the_directory(tmp_path):
    """After an Optuna study, or a sweep called again with a smaller grid, sweep_results.csv held one row: the
    ranking of the last call (an outside tester's find). The call still returns the ranking of its own grid."""
    import pandas as pd

    kw = {"num_runs": 3, "num_episodes": 30, "seed_offset": 0, "progress": False}
    whole = corridor_trainer(tmp_path).sweep({"lr": [1e-4, 0.1, 0.5]}, **kw)
    one = corridor_trainer(tmp_path).sweep({"lr": [0.1]}, **kw)
    assert one["experiment"].tolist() == ["lr=0.1"]
    written = pd.read_csv(tmp_path / "sweep_results.csv")
    assert written["experiment"].tolist() == whole["experiment"].tolist()
    assert written["probability_of_improvement"].equals(whole["probability_of_improvement"])


def test_the_ranking_against_the_top_has_the_figures_of_the_full_comparison(tmp_path):
    """rank() compares each configuration with the top one only (as many pairs as configurations)."""
    import pandas as pd

    from online_trainer.analysis.compare import CompareOptions, compare_scores

    rng = np.random.default_rng(0)
    scores = pd.DataFrame(
        [{"candidate": c, "raw_score": rng.normal(k, 1.0)} for k, c in enumerate("abcd") for _ in range(5)]
    )
    full = compare_scores(scores, CompareOptions()).improvement.set_index(["candidate", "versus"])
    top = compare_scores(scores, CompareOptions(), against="d").improvement.set_index(["candidate", "versus"])
    assert len(top) == 6 and all(("d" in pair) for pair in top.index)
    pd.testing.assert_frame_equal(top, full.loc[top.index])


def test_the_sweep_ranking_says_which_runs_a_hook_stopped_early(tmp_path):
    """compare and report warned that stopped runs score where they stopped; the sweep's own ranking did not."""
    kw = {"num_runs": 2, "num_episodes": 30, "seed_offset": 0, "progress": False}
    ranking = corridor_trainer(tmp_path).sweep({"lr": [0.1, 0.5]}, hooks=[StopAfterEpisodes(12)], **kw)
    note = ranking.attrs["note"]
    assert (
        "Some runs were stopped early by a hook, so their scores are of their last episodes before they stopped" in note
    )
    assert "lr=0.1: run 1 after 12 of 30 episodes (12 episodes), run 2 after 12 of 30 episodes" in note


def test_configurations_that_score_alike_are_not_called_a_complete_separation(tmp_path, caplog):
    """An agent that ignores the hyperparameter ties every run: P = 0.5 with a point interval was reported as
    "every run of lr=0.1 beats every run of lr=0.2 (complete separation)"."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    ranking = trainer.sweep({"lr": [0.1, 0.2]}, num_runs=3, num_episodes=12, seed_offset=0, progress=False)
    note = ranking.attrs["note"]
    assert ranking["degenerate"].tolist() == [False, True] and ranking["probability_of_improvement"].iloc[1] == 0.5
    assert "complete separation" not in note
    assert (
        "The runs of lr=0.2 score exactly as those of lr=0.1 (P = 0.5 with a point interval): check that the " in note
    )


@pytest.mark.parametrize("resume", [True, False])
def test_resuming_a_finished_sweep_writes_nothing(tmp_path, caplog, resume):
    kw = {"num_runs": 2, "num_episodes": 10, "seed_offset": 3, "progress": False}
    first = corridor_trainer(tmp_path).sweep({"lr": [0.1, 0.5]}, **kw)
    before = {k: v for k, v in files_with_times(tmp_path).items() if k != ".lock"}  # the lock holds the call's owner
    time.sleep(0.01)  # a file written again would get another modification time
    caplog.clear()
    again = corridor_trainer(tmp_path).sweep({"lr": [0.1, 0.5]}, resume=resume, **kw)
    assert {k: v for k, v in files_with_times(tmp_path).items() if k != ".lock"} == before
    assert "sweep_results.csv" in before and again.equals(first)
    # the cell run again said nothing: no display, no line (U17); said once, not per configuration
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "earlier call" in r.getMessage()]
    assert said == [
        "sweep: every run of its 2 configurations x 2 seeds ended in an earlier call (4 runs): nothing runs; the "
        f"ranking is read from {tmp_path}."
    ]


class FailsForLr(RecordingAgent):
    def update(self, *args, **kwargs):
        super().update(*args, **kwargs)
        if self.hp.get("lr") == 0.2 and self.updates == 3:
            raise RuntimeError("bad lr")


def test_failed_runs_are_reported_and_run_again(tmp_path, caplog):
    trainer = OnlineTrainer(make_counting_vec(1), FailsForLr, exp_dir=tmp_path)
    with pytest.raises(RunsFailedError, match="bad lr") as caught:
        trainer.sweep({"lr": [0.1, 0.2]}, num_runs=2, num_episodes=4, seed_offset=0, progress=False)
    # every configuration has a run 1: the error and the log name the configuration (they said "run 1 (seed 0)")
    assert [f.name for f in caught.value.failures] == ["lr=0.2 run 1", "lr=0.2 run 2"]
    assert "\n  lr=0.2 run 1 (seed 0): " in str(caught.value) and "\n  lr=0.2 run 2 (seed 10000): " in str(caught.value)
    assert "lr=0.2 run 1 (seed 0) failed: " in caplog.text
    assert caplog.text.count("left out of the ranking") == 1  # the ranking said it twice
    # V24: in the analysis's words, "Pass include_unfinished=True", which sweep does not take
    assert "sweep: 2 run(s) that did not finish are left out of the ranking: lr=0.2/run 1 (failed)" in caplog.text
    assert "include_unfinished" not in caplog.text and "df.attrs" not in caplog.text
    manifest = json.loads((tmp_path / "lr=0.2" / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["failed", "failed"]
    assert (tmp_path / "sweep_results.csv").is_file()  # the ranking of what finished
    # O15: the error's results were None; they are the ranking the call would have returned, of what finished
    ranking = caught.value.results
    assert (
        list(ranking["experiment"]) == ["lr=0.1", "lr=0.2"]
        and ranking.set_index("experiment").loc["lr=0.2", "num_excluded"] == 2
    )
    trainer.sweep({"lr": [0.1]}, num_runs=2, num_episodes=4, progress=False)  # nothing fails, nothing re-runs


def test_a_sweep_whose_every_run_failed_raises_their_errors(tmp_path):
    """R23: a sweep (and so an Optuna trial) whose every run failed raised "Every run was left out: ... Pass
    include_unfinished=True", which sweep does not take, instead of the runs' errors."""
    trainer = OnlineTrainer(make_counting_vec(1), FailsForLr, exp_dir=tmp_path)
    with pytest.raises(RunsFailedError, match="bad lr") as caught:
        trainer.sweep({"lr": [0.2]}, num_runs=2, num_episodes=4, seed_offset=0, progress=False)
    assert [f.name for f in caught.value.failures] == ["lr=0.2 run 1", "lr=0.2 run 2"]


def test_a_configuration_whose_runs_failed_is_left_out_of_the_comparisons_of_the_others(tmp_path, caplog):
    """Tester O15: one configuration whose runs all failed left probability_of_improvement NaN for every
    configuration of the sweep, without a word."""
    import pandas as pd

    trainer = OnlineTrainer(make_counting_vec(1), FailsForLr, exp_dir=tmp_path)
    with pytest.raises(RunsFailedError, match="bad lr"):
        trainer.sweep({"lr": [0.1, 0.2, 0.3]}, num_runs=2, num_episodes=4, seed_offset=0, progress=False)
    table = pd.read_csv(tmp_path / "sweep_results.csv").set_index("experiment")
    compared = [name for name in ("lr=0.1", "lr=0.3") if name != table.index[0]]
    assert table.loc[compared, "probability_of_improvement"].notna().all()
    assert np.isnan(table.loc["lr=0.2", "probability_of_improvement"])
    assert "Not compared: lr=0.2 (no run of it finished; see num_excluded)." in caplog.text
    # compare of the sweep refused for want of lr=0.2's scores (O15): the others are compared, lr=0.2 named
    from online_trainer.analysis.compare import compare
    from online_trainer.cli import main as cli

    comparison = compare(tmp_path, n_resamples=200)
    assert comparison.info["candidates"] == ["lr=0.1", "lr=0.3"] and "lr=0.2" not in set(comparison.scores["candidate"])
    assert comparison.info["unscored_note"].startswith("Not compared: lr=0.2 (no run of it has a score")
    assert "compare: Not compared: lr=0.2" in caplog.text
    assert cli.main(["compare", str(tmp_path), "--out", str(tmp_path / "cmp"), "--resamples", "200"]) == 0
    assert "**Candidates left out.** Not compared: lr=0.2" in (tmp_path / "cmp" / "comparison.md").read_text()
    with pytest.raises(ValueError, match=r"Every candidate must have scored runs on every task"):
        compare([tmp_path / "lr=0.1", tmp_path / "lr=0.2"])  # a single one with a score: refused, as before


def test_a_run_of_a_sweep_that_starts_again_is_named_with_its_configuration(tmp_path, caplog):
    trainer = OnlineTrainer(make_counting_vec(1), FailsForLr, exp_dir=tmp_path)
    kw = {"num_runs": 1, "num_episodes": 4, "seed_offset": 0, "progress": False}
    with pytest.raises(RunsFailedError, match="bad lr"):
        trainer.sweep({"lr": [0.1, 0.2]}, **kw)
    caplog.clear()
    with pytest.raises(RunsFailedError, match="bad lr"):
        trainer.sweep({"lr": [0.1, 0.2]}, **kw)
    # every configuration has a run 1: the warning said "run 1 (failed)"
    assert (
        "lr=0.2 run 1 (failed) starts again from step 0, as it has no full checkpoint to continue from" in caplog.text
    )


def test_a_sweep_called_again_without_resume_says_resume_would_continue_its_checkpointed_runs(tmp_path, caplog):
    """The warning said the interrupted runs had "no full checkpoint to continue from" beside their Run1_Resume.pkl:
    the reason they start again is that the call has no resume=True (an outside tester's find)."""
    kw = {"num_runs": 2, "total_steps": 600, "seed_offset": 0, "checkpoint_freq": 300}
    with pytest.raises(RunsFailedError, match="crash at step 400"):
        corridor_trainer(tmp_path).sweep({"lr": [0.1]}, hooks=[CrashRunOne(400)], **kw)
    assert (tmp_path / "lr=0.1" / "Run1_Resume.pkl").is_file()
    caplog.clear()
    corridor_trainer(tmp_path).sweep({"lr": [0.1]}, **kw)
    assert (
        "lr=0.1 run 1 (failed) starts again from step 0, as this call does not continue runs (resume=True would "
        "continue it from its full checkpoint), and replaces the records it has on disk" in caplog.text
    )


def test_a_sweep_called_again_with_other_hooks_is_refused_in_the_words_of_that_call(tmp_path):
    """The refusal of a sweep called again (no resume=True) said "resume=True continues ..." and offered
    overwrite=True, which sweep() does not take (an outside tester's find)."""
    kw = {"num_runs": 1, "total_steps": 300, "seed_offset": 0}
    corridor_trainer(tmp_path).sweep({"lr": [0.1]}, hooks=[StopAfterEpisodes(10**6)], **kw)
    with pytest.raises(ValueError) as refused:
        corridor_trainer(tmp_path).sweep({"lr": [0.1]}, **kw)
    message = str(refused.value)
    assert message.startswith(f"A sweep called again continues the experiment in {str(tmp_path / 'lr=0.1')!r}")
    assert "StopAfterEpisodes#0 is left out" in message and "overwrite=True" not in message
    assert message.endswith(
        "or sweep into another exp_dir (a sweep has no overwrite; deleting a configuration's directory runs it anew, "
        "and loses its results)."
    )


def test_a_refused_sweep_names_every_configuration_the_call_differs_from(tmp_path):
    """Tester H5: the refusal named the first configuration of the grid (whose runs had all finished) and told to
    delete it, as if it were the one in the way; the call differed from the other one too."""
    kw = {"num_runs": 1, "total_steps": 300, "seed_offset": 0}
    corridor_trainer(tmp_path).sweep({"lr": [0.1, 0.5]}, hooks=[StopAfterEpisodes(10**6)], **kw)
    with pytest.raises(ValueError) as refused:
        corridor_trainer(tmp_path).sweep({"lr": [0.1, 0.5]}, hooks=[StopAfterEpisodes(10**5)], **kw)
    message = str(refused.value)
    assert message.startswith(f"A sweep called again continues the experiment in {str(tmp_path / 'lr=0.1')!r}")
    assert message.endswith("The call differs from configuration(s) 'lr=0.5' of this sweep too.")
    assert "delete" not in message
    # said once: chained to the first refusal, a traceback printed its text twice (tester H10)
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_sweep_runs_share_one_worker_pool(tmp_path):
    serial = corridor_trainer(tmp_path / "a").sweep(
        {"lr": [0.1, 0.5]}, num_runs=2, num_episodes=15, seed_offset=1, progress=False
    )
    parallel = corridor_trainer(tmp_path / "b").sweep(
        {"lr": [0.1, 0.5]}, num_runs=2, num_episodes=15, seed_offset=1, num_workers=2, progress=False
    )
    assert serial.equals(parallel)


def test_sweep_errors(tmp_path):
    with pytest.raises(ValueError, match=r"exp_dir is None"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent).sweep({"lr": [0.1]}, num_runs=1, num_episodes=1)
    with pytest.raises(ValueError, match=r"unknown hyperparameters \['momentum'\]"):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "x").sweep(
            {"lr": [0.1], "momentum": [0.9]}, num_runs=1, num_episodes=1
        )
    assert not (tmp_path / "x").exists()
    with pytest.raises(ValueError, match=r"metric must be one of \('iqm', 'mean', 'median'\), but got metric='max'"):
        corridor_trainer(tmp_path / "y").sweep({"lr": [0.1]}, num_runs=1, num_episodes=1, metric="max")
    trainer = corridor_trainer(tmp_path / "z")
    trainer.sweep({"lr": [0.1]}, num_runs=1, num_episodes=2, seed_offset=5, progress=False)
    with pytest.raises(ValueError, match=r"ran with seed_offset=5, but got seed_offset=6"):
        trainer.sweep({"lr": [0.1]}, num_runs=1, num_episodes=2, seed_offset=6)
    with pytest.raises(ValueError, match=r"ran with \{'num_episodes': 2, 'total_steps': None\}"):
        trainer.sweep({"lr": [0.1]}, num_runs=1, num_episodes=3)
    # the natural fix of a resume is said, not only another exp_dir (R11); and a near miss of a metric is named
    with pytest.raises(ValueError, match=r"one budget. To go on with it, pass num_episodes=2; for another budget"):
        trainer.sweep({"lr": [0.1]}, num_runs=1, num_episodes=3, resume=True)
    with pytest.raises(ValueError, match=r"but got metric='iqn' \(did you mean 'iqm'\?\)"):
        corridor_trainer(tmp_path / "y").sweep({"lr": [0.1]}, num_runs=1, num_episodes=1, metric="iqn")


def test_optuna_trials_aggregate_seeds(tmp_path):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trainer = corridor_trainer(tmp_path)
    objective = optuna_objective(
        trainer,
        lambda t: {"lr": t.suggest_float("lr", 1e-4, 0.9, log=True)},
        num_runs=2,
        num_episodes=30,
        progress=False,
    )
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=3)
    assert len(study.trials) == 3
    for trial in study.trials:
        assert trial.user_attrs["num_runs"] == 2
        assert trial.user_attrs["ci_low"] <= trial.value <= trial.user_attrs["ci_high"]
        manifest = json.loads((tmp_path / trial.user_attrs["experiment"] / "manifest.json").read_text())
        assert [r["status"] for r in manifest["runs"]] == ["finished", "finished"]


def test_float_names_keep_4_significant_digits():
    assert config_name({"lr": 0.3043617032940743, "gamma": 0.99}) == "lr=0.3044,gamma=0.99"
    assert (
        config_name({"lr": 1.0, "eps": 1e-05, "big": 100000.0, "tau": 0.1 + 0.2})
        == "lr=1.0,eps=1e-05,big=100000.0,tau=0.3"
    )
    assert config_name({"net": [0.123456, 2]}) == "net=0.1235-2"


def test_configurations_that_round_alike_get_directories_of_their_own(tmp_path):
    agents = CountingAgents()
    trainer = corridor_trainer(tmp_path, factory=agents)
    ranking = trainer.sweep(
        [{"lr": 0.30441}, {"lr": 0.30444}], num_runs=1, num_episodes=3, seed_offset=0, progress=False
    )
    names = sorted(ranking["experiment"])
    assert names[0] == "lr=0.3044" and re.fullmatch(r"lr=0\.3044-[0-9a-f]{8}", names[1])
    exact = {name: yaml.safe_load((tmp_path / name / "hyperparameters.yaml").read_text())["lr"] for name in names}
    assert sorted(exact.values()) == [0.30441, 0.30444]
    # called again, in the other order, each configuration finds its own directory and runs nothing
    again = trainer.sweep([{"lr": 0.30444}, {"lr": 0.30441}], num_runs=1, num_episodes=3, progress=False)
    assert dict(zip(again["experiment"], again["lr"])) == exact
    assert agents.built == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == names


def test_optuna_trial_directories_have_short_names_and_exact_records(tmp_path):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    objective = optuna_objective(
        corridor_trainer(tmp_path),
        lambda t: {"lr": t.suggest_float("lr", 0.05, 0.9)},
        num_runs=1,
        num_episodes=3,
        progress=False,
    )
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(objective, n_trials=2)
    for trial in study.trials:
        lr = trial.params["lr"]
        name = trial.user_attrs["experiment"]
        assert name == f"lr={lr:.4g}" and len(repr(lr)) > len(name) - 3
        exp_dir = tmp_path / name
        assert yaml.safe_load((exp_dir / "hyperparameters.yaml").read_text()) == {"lr": lr}
        assert json.loads((exp_dir / "manifest.json").read_text())["tuning_hp"] == {"lr": lr}
        assert load_episodes(exp_dir)["lr"].unique().tolist() == [lr]


def test_an_optuna_objective_on_a_sweep_of_another_budget_is_refused_before_any_trial(tmp_path):
    pytest.importorskip("optuna")
    trainer = corridor_trainer(tmp_path)
    trainer.sweep([{"lr": 0.1}], num_runs=1, num_episodes=3, seed_offset=0, progress=False)
    with pytest.raises(ValueError) as in_a_trial:  # what each trial of the study would fail with
        trainer.sweep([{"lr": 0.2}], num_runs=1, total_steps=5000, seed_offset=0, progress=False)
    with pytest.raises(ValueError, match=r"ran with \{'num_episodes': 3, 'total_steps': None\}") as built:
        optuna_objective(trainer, lambda t: {"lr": t.suggest_float("lr", 0.05, 0.9)}, num_runs=1, total_steps=5000)
    assert str(built.value) == str(in_a_trial.value)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["lr=0.1"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"metric": "iqr"}, r"metric must be one of \('iqm', 'mean', 'median'\), but got metric='iqr'"),
        ({"last_k": 0}, r"last_k must be a positive int.*last_k=0"),
        ({"num_runs": 0}, r"num_runs must be a positive int.*num_runs=0"),
    ],
)
def test_an_optuna_objective_of_a_bad_ranking_is_refused_before_any_trial(tmp_path, given, message):
    """A metric the ranking does not have was refused by the first trial, which a saved study kept as failed (an
    outside tester's find)."""
    pytest.importorskip("optuna")
    arguments = {"num_runs": 2, "num_episodes": 3, **given}
    with pytest.raises(ValueError, match=message):
        optuna_objective(corridor_trainer(tmp_path), lambda t: {"lr": t.suggest_float("lr", 0.05, 0.9)}, **arguments)
    assert not list(tmp_path.iterdir())


def test_an_optuna_objective_every_trial_of_which_would_fail_is_refused_before_the_first(tmp_path):
    """R23: a search_space given as a grid, a trainer without exp_dir and a keyword sweep does not take were each
    accepted, then failed every trial (the first without naming search_space)."""
    pytest.importorskip("optuna")
    import optuna

    space = lambda t: {"lr": t.suggest_float("lr", 0.05, 0.9)}  # noqa: E731
    with pytest.raises(TypeError, match=r"search_space must be a function of an Optuna trial .* got search_space="):
        optuna_objective(corridor_trainer(tmp_path), {"lr": [0.1]}, num_runs=1, num_episodes=2)
    with pytest.raises(ValueError, match=r"optuna_objective needs a trainer with an exp_dir"):
        optuna_objective(OnlineTrainer(make_env("Corridor-v0", num_envs=1), CountingAgents()), space, 1, 2)
    with pytest.raises(TypeError, match=r"optuna_objective\(\) got an unexpected keyword argument 'overwrite'"):
        optuna_objective(corridor_trainer(tmp_path), space, num_runs=1, num_episodes=2, overwrite=True)
    assert not list(tmp_path.iterdir())
    objective = optuna_objective(corridor_trainer(tmp_path), lambda t: [t.suggest_float("lr", 0.05, 0.9)], 1, 2)
    with pytest.raises(TypeError, match=r"search_space\(trial\) must return a dict of hyperparameter name to value"):
        objective(optuna.create_study(direction="maximize").ask())


@pytest.mark.parametrize("metric", ["mean", "median", "iqm"])
def test_optuna_value_is_the_metric_asked_for(tmp_path, metric):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    objective = optuna_objective(
        corridor_trainer(tmp_path),
        lambda t: {"lr": t.suggest_float("lr", 0.05, 0.9)},
        num_runs=4,
        num_episodes=12,
        metric=metric,
        last_k=3,
        progress=False,
    )
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=1))
    study.optimize(objective, n_trials=1)
    trial = study.trials[0]
    episodes = load_episodes(tmp_path / trial.user_attrs["experiment"])
    finals = np.sort(episodes.groupby("run")["ep_return"].apply(lambda r: r.iloc[-3:].mean()).to_numpy())
    expected = {"mean": finals.mean(), "median": np.median(finals), "iqm": finals[1:3].mean()}[metric]
    assert trial.value == pytest.approx(expected)


class PidLogging(QLearningAgent):
    """Q-learning that logs the pid of the process it runs in."""

    def log(self):
        return [{"pid": np.array([os.getpid()])}] * self.num_envs


def test_sweep_runs_share_one_worker_pool_for_every_configuration(tmp_path):
    shutdown_workers()
    trainer = corridor_trainer(tmp_path, factory=PidLogging)
    trainer.sweep({"lr": [0.1, 0.3, 0.5]}, num_runs=2, num_episodes=3, seed_offset=1, num_workers=2, progress=False)
    pids = {
        int(pid)
        for name in sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
        for run in load_agent_logs(tmp_path / name)
        for logs in run
        if logs
        for pid in logs["pid"]
    }
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids


class StopAfterEpisodes(Hook):
    """Stops a run after ``episodes`` finished episodes, counted in its state (restored on resume)."""

    def __init__(self, episodes):
        self.episodes, self.seen = episodes, 0

    def on_episode_end(self, ctx, record):
        self.seen += 1
        if self.seen >= self.episodes:
            ctx.stop(f"{self.seen} episodes")

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = state["seen"]


class CrashRunOne(Hook):
    """Raises in run 1 of every configuration at env step ``at`` (after a checkpoint)."""

    every_steps = 1

    def __init__(self, at):
        self.at = at

    def on_step(self, ctx):
        if ctx.run == 1 and ctx.global_step == self.at:
            raise RuntimeError(f"crash at step {ctx.global_step}")


def test_a_resumed_sweep_with_a_stateful_hook_and_2_workers_records_what_an_uninterrupted_one_does(tmp_path):
    """The sweep goes through the one orchestration path: lock, pool, manifests, resume and user hook state."""
    kw = dict(
        num_runs=2,
        total_steps=1500,
        seed_offset=0,
        checkpoint_freq=300,
        execution=ExecutionOptions(num_workers=2, progress=False),
    )
    grid = {"lr": [0.1, 0.5]}
    corridor_trainer(tmp_path / "ref").sweep(grid, hooks=[StopAfterEpisodes(25)], **kw)
    cut = corridor_trainer(tmp_path / "cut")
    with pytest.raises(RunsFailedError, match="crash at step 700"):
        cut.sweep(grid, hooks=[StopAfterEpisodes(25), CrashRunOne(700)], **kw)
    for name in ("lr=0.1", "lr=0.5"):
        runs = json.loads((tmp_path / "cut" / name / storage.MANIFEST_FILE).read_text())["runs"]
        assert [r["status"] for r in runs] == ["failed", "stopped_early"]
    corridor_trainer(tmp_path / "cut").sweep(grid, hooks=[StopAfterEpisodes(25)], resume=True, **kw)
    columns = ["experiment", "run", "seed", "episode_index", "ep_return", "ep_length", "global_step"]
    reference, resumed = load_episodes(tmp_path / "ref")[columns], load_episodes(tmp_path / "cut")[columns]
    assert reference.groupby(["experiment", "run"]).size().tolist() == [25] * 4  # the hook stopped every run
    assert resumed.equals(reference)
    for name in ("lr=0.1", "lr=0.5"):
        runs = json.loads((tmp_path / "cut" / name / storage.MANIFEST_FILE).read_text())["runs"]
        assert [r["status"] for r in runs] == ["stopped_early"] * 2
        assert runs[0]["resumed_from"]["global_step"] == 600  # continued from its checkpoint, not started again


def files_with_times(root):
    """Every file under ``root`` (``.lock`` included) with its bytes and modification time."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(
    "change, message",
    [
        ({"dump_transitions": True}, r"which ran with dump_transitions=False, but this call has dump_transitions=True"),
        ({"hooks": []}, r"hooks with state differ: StopAfterEpisodes#0 is left out"),
        ({"seed_offset": 1}, r"ran with seed_offset=0, but got seed_offset=1"),
        ({"total_steps": 900}, r"ran with \{'num_episodes': None, 'total_steps': 600\}, but got"),
    ],
)
def test_a_resumed_sweep_that_differs_is_refused_before_anything_changes_even_the_lock_time(tmp_path, change, message):
    """The sweep's call is checked by its lock before the lock writes its owner line, as a ``multi_run``'s is."""
    kw = {"num_runs": 2, "total_steps": 600, "seed_offset": 0, "checkpoint_freq": 300}
    grid = {"lr": [0.1, 0.5]}
    with pytest.raises(RunsFailedError, match="crash at step 400"):
        corridor_trainer(tmp_path).sweep(grid, hooks=[StopAfterEpisodes(10**6), CrashRunOne(400)], **kw)
    before = files_with_times(tmp_path)
    assert ".lock" in before and "lr=0.1/Run1_Resume.pkl" in before
    time.sleep(0.01)  # a file written again would get another modification time
    with pytest.raises(ValueError, match=message):
        corridor_trainer(tmp_path).sweep(grid, resume=True, **{**kw, "hooks": [StopAfterEpisodes(10**6)], **change})
    assert files_with_times(tmp_path) == before


def test_a_resumed_sweep_refused_for_its_hooks_names_the_configuration_of_the_run(tmp_path):
    kw = {"num_runs": 2, "total_steps": 600, "seed_offset": 0, "checkpoint_freq": 300, "progress": False}
    with pytest.raises(RunsFailedError, match="crash at step 400"):
        corridor_trainer(tmp_path).sweep({"lr": [0.1]}, hooks=[StopAfterEpisodes(10**6), CrashRunOne(400)], **kw)
    # as made before the call recorded its hooks: only the checkpoints say which they were
    manifest = storage.read_manifest(tmp_path / "lr=0.1")
    del manifest["call"]["hooks"]
    storage.write_manifest(tmp_path / "lr=0.1", manifest)
    # every configuration has a run 1 and a Run1_Resume.pkl: the refusal said "(run 1, Run1_Resume.pkl)"
    with pytest.raises(ValueError, match=r"^The saved state \(lr=0\.1 run 1, Run1_Resume\.pkl\) holds the user hooks"):
        corridor_trainer(tmp_path).sweep({"lr": [0.1]}, resume=True, **kw)


def test_a_configuration_with_no_finished_episode_ranks_last_and_a_sweep_with_none_says_what_to_do(tmp_path, caplog):
    """CountingEnv's episodes last 2 to 5 steps: a budget of 1 step finishes none (the ranking used to fail at
    the end of the sweep with "The data is empty", or leave such a configuration out of the table)."""
    import logging

    from online_trainer.orchestration.sweep import rank

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "none")
    with pytest.raises(
        RuntimeError,
        match=r"No configuration of the sweep in .* finished an episode, so none has a "
        r"return to rank it by: sweep again into another exp_dir with a budget of episodes "
        r"\(num_episodes=...\)",
    ):
        trainer.sweep({"lr": [0.1, 0.2]}, num_runs=2, total_steps=1, seed_offset=0)
    assert load_episodes(tmp_path / "none").empty and (tmp_path / "none" / "lr=0.1" / "metrics_run1.pkl").is_file()

    root = tmp_path / "mixed"
    for lr, budget in (
        (0.1, {"total_steps": 1}),
        (0.2, {"num_episodes": 12}),
        (0.3, {"num_episodes": 12}),
        (0.4, {"total_steps": 1}),
    ):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=root / f"lr={lr}").multi_run(
            3, seed_offset=0, tuning_hp={"lr": lr}, **budget
        )
    manifest = json.loads((root / "lr=0.4" / "manifest.json").read_text())
    for entry in manifest["runs"]:
        entry["status"] = "interrupted"  # as Ctrl-C leaves runs cut off before their first episode
    (root / "lr=0.4" / "manifest.json").write_text(json.dumps(manifest))
    caplog.set_level(logging.WARNING, logger="online_trainer")
    table = rank(root, ["lr=0.1", "lr=0.2", "lr=0.3", "lr=0.4"])
    assert table["experiment"].tolist() == ["lr=0.2", "lr=0.3", "lr=0.1", "lr=0.4"]
    assert table["rank"].tolist() == [1, 2, 3, 4] and table["lr"].tolist() == [0.2, 0.3, 0.1, 0.4]
    assert table["num_runs"].tolist() == [3, 3, 0, 0] and np.isnan(table["iqm"].iloc[2])
    # why a configuration has no score, as summarize counts it (they were NaN: tester T2)
    assert table["num_missing"].tolist() == [0, 0, 3, 0] and table["num_excluded"].tolist() == [0, 0, 0, 3]
    assert not np.isnan(table["probability_of_improvement"].iloc[1])  # the scored ones are still compared
    assert "2 configuration(s) finished no episode and are ranked last, with no score: lr=0.1, lr=0.4" in caplog.text
    caplog.clear()
    assert rank(root, ["lr=0.1", "lr=0.2", "lr=0.3", "lr=0.4"], log=False).equals(table)
    assert not caplog.records  # the directory's ranking, written after each Optuna trial, says nothing
    assert logging.getLogger("online_trainer.analysis").level == logging.NOTSET


def test_a_sweep_call_of_one_configuration_warns_of_its_own_runs_only(tmp_path, caplog):
    """An Optuna search called again after a kill repeated, at each earlier trial, the warnings of the trial whose
    run was cut off ("1 of 12 run(s) have no episode ... (running)"), before the trial that resumes it (tester L2):
    they came from the whole directory's ranking, written to sweep_results.csv after every call."""
    import logging

    kw = {"num_runs": 2, "num_episodes": 12, "seed_offset": 0, "progress": False}
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path)
    trainer.sweep({"lr": [0.1, 0.2]}, **kw)
    manifest_file = tmp_path / "lr=0.2" / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    manifest["runs"][1]["status"] = "running"  # as a kill leaves it; the sweep's lock is free
    manifest_file.write_text(json.dumps(manifest))
    (tmp_path / "lr=0.2" / "metrics_run2.pkl").unlink()
    caplog.set_level(logging.WARNING, logger="online_trainer")
    caplog.clear()
    ranking = trainer.sweep([{"lr": 0.1}], resume=True, **kw)  # the first trial again: nothing to run
    assert ranking["experiment"].tolist() == ["lr=0.1"]
    assert "lr=0.2" not in caplog.text, caplog.text
    written = (tmp_path / "sweep_results.csv").read_text()
    assert "lr=0.2" in written and "lr=0.1" in written


def test_a_sweep_resumed_on_another_env_is_refused_before_anything_changes(tmp_path):
    """A configuration's pending run ran wholly on another env, which then ranked it last (an outside tester's find)."""
    kw = {"num_runs": 2, "total_steps": 600, "seed_offset": 0, "checkpoint_freq": 300}
    with pytest.raises(RunsFailedError, match="crash at step 400"):
        corridor_trainer(tmp_path).sweep({"lr": [0.1, 0.5]}, hooks=[CrashRunOne(400)], **kw)
    before = files_with_times(tmp_path)
    other = OnlineTrainer(make_env("FrozenLake-v1", num_envs=1), CountingAgents(), exp_dir=tmp_path)
    with pytest.raises(
        ValueError, match=r"but this call's env differs: env id 'FrozenLake-v1' \(it ran with 'Corridor-v0'\)"
    ):
        other.sweep({"lr": [0.1, 0.5]}, resume=True, **kw)
    assert files_with_times(tmp_path) == before


def test_each_configuration_has_all_metrics_pkl_as_multi_run_writes_it(tmp_path):
    """A configuration's directory is an experiment like multi_run's: all_metrics.pkl holds its runs, and a second
    call with more seeds writes it again with every run (it had none: an outside tester's find)."""
    import pickle

    trainer = corridor_trainer(tmp_path)
    trainer.sweep({"lr": [0.1, 0.5]}, num_runs=2, num_episodes=12, seed_offset=0, progress=False)
    for name in ("lr=0.1", "lr=0.5"):
        with open(tmp_path / name / storage.ALL_METRICS_FILE, "rb") as f:
            runs = pickle.load(f)
        assert len(runs) == 2
        for run, records in enumerate(runs, start=1):
            kept = storage.load_run_metrics(tmp_path / name, run)
            assert [r["ep_return"] for r in records] == [r["ep_return"] for r in kept] and len(records) == 12
    trainer.sweep({"lr": [0.1, 0.5]}, num_runs=3, num_episodes=12, progress=False)
    with open(tmp_path / "lr=0.5" / storage.ALL_METRICS_FILE, "rb") as f:
        assert [len(run) for run in pickle.load(f)] == [12, 12, 12]


class SignalsAtEpisode(Hook):
    """Sends SIGTERM to the calling process at episode ``episode`` of run 1: a preemption mid-sweep."""

    def __init__(self, parent: int, episode: int = 200):
        self.parent, self.episode = parent, episode

    def on_episode_end(self, ctx, record):
        if ctx.run == 1 and ctx.episodes == self.episode:
            os.kill(self.parent, signal.SIGTERM)


def test_a_preempted_sweep_names_each_run_with_its_configuration(tmp_path):
    """Tester H5: a SIGTERM in a sweep said "run 2 saved a full checkpoint ...; run 1 saved one ...", and every
    configuration has a run 1 and a run 2."""
    from online_trainer import Preempted

    trainer = corridor_trainer(tmp_path)
    kw = {"num_runs": 2, "total_steps": 3_000_000, "seed_offset": 0, "execution": ExecutionOptions(num_workers=2)}
    with pytest.raises(Preempted) as stopped:
        trainer.sweep({"lr": [0.5]}, hooks=[SignalsAtEpisode(os.getpid())], **kw)
    said = str(stopped.value)
    assert said.startswith("preempted (SIGTERM or SIGUSR1): lr=0.5 run ")
    assert re.findall(r"(\S+) run \d", said) == ["lr=0.5"] * said.count(" run ")  # every run named with it
    assert stopped.value.name in ("lr=0.5 run 1", "lr=0.5 run 2")
    statuses = {r["status"] for r in json.loads((tmp_path / "lr=0.5" / "manifest.json").read_text())["runs"]}
    assert "interrupted" in statuses


class Wide(RecordingAgent):
    """A RecordingAgent with a setting of its own, as a network's width."""

    def __init__(self, env, width=64):
        super().__init__(env)
        self.width = width


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("num_workers", [1, 2])
def test_a_sweep_called_again_with_more_seeds_and_another_agent_is_refused_and_keeps_what_it_found(
    tmp_path, resume, num_workers
):
    """N19: called again with more seeds and an agent built otherwise, a sweep trained the new seeds with the other
    agent and pooled them in its ranking without a word (without resume=True), or, with resume=True and 2 workers,
    computed the refusal and lost it to an IndexError, leaving a configuration's run 'running' in its manifest."""
    kw = dict(num_episodes=3, seed_offset=0, execution=ExecutionOptions(num_workers=num_workers, progress=False))
    grid = {"lr": [0.1, 0.5]}
    OnlineTrainer(make_counting_vec(1), lambda env: Wide(env), exp_dir=tmp_path).sweep(grid, num_runs=1, **kw)
    before = {p.name: (p / "manifest.json").read_bytes() for p in tmp_path.iterdir() if p.is_dir()}
    again = OnlineTrainer(make_counting_vec(1), lambda env: Wide(env, width=16), exp_dir=tmp_path)
    with pytest.raises(ValueError) as refused:
        again.sweep(grid, num_runs=2, resume=resume, **kw)
    how = "resume=True" if resume else "A sweep called again"
    assert str(refused.value).startswith(f"{how} continues the experiment in ")
    assert "agent differs: width 16 (it ran with 64)" in str(refused.value)
    after = {p.name: (p / "manifest.json").read_bytes() for p in tmp_path.iterdir() if p.is_dir()}
    assert after == before  # as the call found them: no run 2, none left running
    assert not any(storage.metrics_path(tmp_path / name, 2).exists() for name in before)


def test_an_optuna_trial_whose_runs_fail_says_how_a_study_runs_them_again(tmp_path):
    """V24: a trial's RunsFailedError said "the same sweep call with resume=True", a call the study's user never made."""
    pytest.importorskip("optuna")
    import optuna

    trainer = OnlineTrainer(make_counting_vec(1), FailsForLr, exp_dir=tmp_path)
    objective = optuna_objective(trainer, lambda t: {"lr": 0.2}, 1, 4, execution=ExecutionOptions(progress=False))
    with pytest.raises(RunsFailedError, match="bad lr") as caught:
        objective(optuna.create_study(direction="maximize").ask())
    assert "the objective made again with resume=True and this trial's parameters enqueued" in str(caught.value)
    assert "sweep call" not in str(caught.value)
