"""``online-trainer run`` with env.wrappers, env.vector_kwargs and score: from a config file to the records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from online_trainer.analysis.dataframes import load_episodes
from online_trainer.cli import main as cli
from online_trainer.config.loading import load_experiment_config
from online_trainer.config.schema import ConfigError, EnvConfig

CONFIG = """\
env:
  id: Corridor-v0
  num_envs: 2
  vectorization: async
  kwargs: {length: 4}
  vector_kwargs: {shared_memory: false}
  wrappers:
    - gymnasium.wrappers:RecordEpisodeStatistics
    - gymnasium.wrappers:ClipReward: {min_reward: -0.5, max_reward: 0.5}
agent:
  name: random
num_runs: 1
num_episodes: 6
callback: empty
records: {score: raw}
evaluation: {freq: 3, episodes: 2}
"""


def write(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "wrapped.yaml"
    path.write_text(text)
    return path


def test_config_keys_reach_the_env_and_round_trip(tmp_path, capsys):
    exp_dir = tmp_path / "exp"
    assert cli.main(["run", str(write(tmp_path)), f"exp_dir={exp_dir}", "--no-progress"]) == 0
    resolved = yaml.safe_load((exp_dir / "config.yaml").read_text())
    assert resolved["env"]["wrappers"] == [
        "gymnasium.wrappers:RecordEpisodeStatistics",
        {"gymnasium.wrappers:ClipReward": {"min_reward": -0.5, "max_reward": 0.5}},
    ]
    assert resolved["env"]["vector_kwargs"] == {"shared_memory": False} and resolved["records"]["score"] == "raw"
    # the resolved config loads back to the same config
    assert load_experiment_config(exp_dir / "config.yaml").to_dict() == resolved
    df = load_episodes(exp_dir)
    assert df.attrs["score"] == "raw"
    assert (df["ep_return"] == -0.5 * df["ep_length"]).all()  # the agent's reward: clipped
    assert (df["raw_return"] == -df["ep_length"]).all() and (df["raw_length"] == df["ep_length"]).all()
    out = capsys.readouterr().out
    table = out[out.index("final return") :].splitlines()
    assert float(table[1].split()[-2]) == pytest.approx(df["raw_return"].mean(), abs=0.01)  # before the status
    # the table says what its returns are (tester C10: "mean return" over raw scores)
    assert cli.main(["show", str(exp_dir)]) == 0
    assert (
        "Final return of each run: mean raw return (the env's raw scores, from RecordEpisodeStatistics) of all its episodes"
        in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "env.wrappers=[gymnasium.wrappers:ClipRewards]",
            "env.wrappers[0]='gymnasium.wrappers:ClipRewards': 'gymnasium.wrappers' has no attribute 'ClipRewards' "
            "(did you mean 'ClipReward'?)",
        ),
        (
            "env.wrappers=[{gymnasium.wrappers:ClipReward: {low: 1}}]",
            "env.wrappers[0]: gymnasium.wrappers:ClipReward cannot be called as",
        ),
        (
            "env.wrappers=gymnasium.wrappers:ClipReward",
            "env.wrappers='gymnasium.wrappers:ClipReward' has the wrong type: expected a list, got str.",
        ),
        (
            "env.vector_kwargs={copy: false, shared_memry: false}",
            "AsyncVectorEnv (vectorization='async') takes no argument 'shared_memry'",
        ),
        ("records.score=game", "records.score must be one of 'return', 'raw', but got records.score='game'"),
        (
            "env.id=ALE/Pong-v5",
            "unknown env env.id='ALE/Pong-v5': it is not in gymnasium.registry. Ids of ale_py are "
            "registered when it is imported: try 'ale_py:ALE/Pong-v5'",
        ),
    ],
)
def test_bad_wrapper_keys_exit_2_before_anything_runs(tmp_path, capsys, monkeypatch, override, message):
    import gymnasium as gym

    for env_id in [key for key in gym.registry if key.startswith("ALE/")]:  # as before another test imported ale_py
        monkeypatch.delitem(gym.registry, env_id)
    exp_dir = tmp_path / "exp"
    assert cli.main(["run", str(write(tmp_path)), f"exp_dir={exp_dir}", override, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not exp_dir.exists()


def test_score_raw_without_the_wrapper_fails_before_anything_is_kept(tmp_path, capsys):
    exp_dir = tmp_path / "exp"
    text = CONFIG.replace("    - gymnasium.wrappers:RecordEpisodeStatistics\n", "")
    assert cli.main(["run", str(write(tmp_path, text)), f"exp_dir={exp_dir}", "--no-progress"]) != 0
    assert "score='raw' reports the episode statistics" in capsys.readouterr().err
    assert not (exp_dir / "metrics_run1.pkl").exists()


def test_wrapper_entries_are_checked_in_the_schema():
    with pytest.raises(ConfigError, match=r"env.wrappers\[1\]=.*must be a mapping with one key"):
        EnvConfig(id="Corridor-v0", wrappers=["gymnasium.wrappers:RecordEpisodeStatistics", {"a:B": {}, "c:D": {}}])


def test_resume_makes_the_call_the_config_made_score_and_checkpoint_keys_included(tmp_path, capsys):
    import json

    from online_trainer.records import storage

    exp_dir = tmp_path / "exp"
    overrides = [f"exp_dir={exp_dir}", "checkpoint_freq=2", "checkpoints.keep=1", "seed_offset=4"]
    assert cli.main(["run", "--no-progress", str(write(tmp_path)), *overrides]) == 0
    before = load_episodes(exp_dir)
    manifest = json.loads((exp_dir / storage.MANIFEST_FILE).read_text())
    manifest["runs"][0]["status"] = "interrupted"  # as if it was cut off before its first full checkpoint
    (exp_dir / storage.MANIFEST_FILE).write_text(json.dumps(manifest))
    for path in exp_dir.glob("Run1_*"):
        path.unlink()
    # the call must match the manifest: score='raw' and the checkpoint keys come from config.yaml
    capsys.readouterr()
    assert cli.main(["resume", "--no-progress", str(exp_dir)]) == 0
    out = capsys.readouterr().out  # what run prints at its end, resume prints too
    assert f"Experiment directory: {exp_dir}" in out and f"Plot it with: online-trainer report {exp_dir}" in out
    after = load_episodes(exp_dir)
    columns = ["run", "episode_index", "global_step", "ep_return", "ep_length", "raw_return"]
    assert before[columns].equals(after[columns])
    assert sorted(path.name for path in exp_dir.glob("Run1_E*")) == ["Run1_E6.pt"]  # keep_checkpoints=1 applied


@pytest.mark.parametrize(
    "old, new, named",
    [
        ("kwargs: {length: 4}", "kwargs: {length: 5}", r"env.kwargs.length is 5 there, but the runs were built with 4"),
        ("name: random", "name: dqn", r"agent.name is 'dqn' there, but the runs were built with 'random'"),
        (
            "kwargs: {length: 4}",
            "kwargs: {length: 4, slip: 0.1}",
            r"env.kwargs.slip is 0.1 there, but the runs were built without it \(its default\)",
        ),
        (  # S14: a key set to null was said "not set"
            "kwargs: {length: 4}",
            "kwargs: {length: null}",
            r"env.kwargs.length is null there, but the runs were built with 4",
        ),
        (
            "  - gymnasium.wrappers:RecordEpisodeStatistics\n",
            "  - gymnasium.wrappers:RecordEpisodeStatistics\n  - gymnasium.wrappers:TimeAwareObservation\n",
            r"env.wrappers is \[.*TimeAwareObservation.*\] there",
        ),
    ],
)
def test_resume_refuses_a_config_yaml_edited_to_build_other_envs_or_agents(tmp_path, capsys, old, new, named):
    """An outside tester edited agent.hyperparameters.lr before resuming: the runs that started again trained at the
    new rate, those continued from checkpoints at the old one, and config.yaml then named only the new one."""
    import json

    from online_trainer.records import storage

    exp_dir = tmp_path / "exp"
    assert cli.main(["run", "--no-progress", str(write(tmp_path)), f"exp_dir={exp_dir}"]) == 0
    manifest = json.loads((exp_dir / storage.MANIFEST_FILE).read_text())
    manifest["runs"][0]["status"] = "interrupted"
    (exp_dir / storage.MANIFEST_FILE).write_text(json.dumps(manifest))
    config = exp_dir / "config.yaml"
    text = config.read_text()
    assert old in text, text
    config.write_text(text.replace(old, new))
    files = {path: path.stat().st_mtime_ns for path in exp_dir.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert cli.main(["resume", "--no-progress", str(exp_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{config} was edited since the experiment ran: " in err and "(args.yaml)" in err
    assert re.search(named, err), err
    assert f"online-trainer run {config} exp_dir=<another path>" in err
    assert {path: path.stat().st_mtime_ns for path in exp_dir.rglob("*") if path.is_file()} == files
    # execution is free to change, and the values put back resume the experiment
    config.write_text(text.replace("num_workers: 1", "num_workers: 2"))
    assert cli.main(["resume", "--no-progress", str(exp_dir)]) == 0


def test_resume_refuses_an_edited_budget_in_the_words_of_the_command(tmp_path, capsys):
    """The refusal said only "call it as it was called" (an outside tester: the command's user calls nothing)."""
    import json

    from online_trainer.records import storage

    exp_dir = tmp_path / "exp"
    assert cli.main(["run", "--no-progress", str(write(tmp_path)), f"exp_dir={exp_dir}"]) == 0
    manifest = json.loads((exp_dir / storage.MANIFEST_FILE).read_text())
    manifest["runs"][0]["status"] = "interrupted"
    (exp_dir / storage.MANIFEST_FILE).write_text(json.dumps(manifest))
    config = exp_dir / "config.yaml"
    config.write_text(config.read_text().replace("num_episodes: 6", "num_episodes: 8"))
    capsys.readouterr()
    assert cli.main(["resume", "--no-progress", str(exp_dir)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{config} was edited since the experiment ran: it ran with num_episodes=6, the file now says num_episodes=8. "
        "Put the value back to resume" in err
    )
    assert "call it as it was called" not in err and "resume=True" not in err  # V21: the command's words only


def test_an_env_that_cannot_be_built_is_said_of_the_env_section_with_the_shared_memory_fix():
    """Tester C10: an async env whose Dict observations do not fit shared memory was blamed on env.kwargs (empty);
    the fix is env.vector_kwargs."""
    from online_trainer.config.builders import EnvBuilder
    from online_trainer.config.schema import ConfigError

    def async_minigrid():
        raise ValueError("Using AsyncVector(..., shared_memory=True) caused an error, you can disable this feature")

    with pytest.raises(ConfigError) as refused:
        EnvBuilder(async_minigrid)()
    message = str(refused.value)
    assert message.startswith("env: could not build the env ") and "env.kwargs:" not in message
    assert message.endswith("In a config: env.vector_kwargs: {shared_memory: false}.")


def test_an_env_kwargs_value_the_env_looks_up_in_vain_is_a_config_error_naming_the_section(tmp_path, capsys):
    """C17: FrozenLake's map_name='9x9' raised KeyError: '9x9' inside the run: a traceback of 40 lines and exit 1,
    where every other bad env.kwargs value gave the one-line error and exit 2."""
    config = write(
        tmp_path,
        "env: {id: FrozenLake-v1, num_envs: 2, kwargs: {map_name: 9x9}}\nagent: {name: random}\nnum_runs: 1\n"
        "num_episodes: 5\n",
    )
    exp_dir = tmp_path / "exp"
    assert cli.main(["run", str(config), f"exp_dir={exp_dir}", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "online-trainer: error: env: could not build the env make_env('FrozenLake-v1'" in err
    assert "KeyError: '9x9'. Check env.id, env.kwargs and env.vector_kwargs." in err and "Traceback" not in err
    assert not exp_dir.exists()


def test_a_report_of_raw_and_plain_experiments_says_which_score_it_compares(tmp_path, capsys):
    """Tester V10: beside an experiment without raw scores, a records.score=raw experiment was scored by its clipped
    return under a header that said nothing of it."""
    raw, plain = tmp_path / "raw", tmp_path / "plain"
    assert cli.main(["run", str(write(tmp_path)), f"exp_dir={raw}", "--no-progress"]) == 0
    assert cli.main(["run", str(write(tmp_path)), f"exp_dir={plain}", "records.score=return", "--no-progress"]) == 0
    capsys.readouterr()
    out = tmp_path / "report"
    assert cli.main(["report", str(raw), str(plain), "--out", str(out)]) == 0
    said = (
        "the mean return (the return each agent learned from, for every experiment: raw ran with records.score=raw, "
        "the others did not; report them alone for their raw scores)"
    )
    assert said in (out / "summary.md").read_text()


def test_the_raw_scores_of_runs_scored_by_their_return_are_named_and_read_on_demand(tmp_path, capsys, caplog):
    """N16: with NormalizeReward (or a reward clip) the tables and curves showed the sums of the rewards the agent
    learned from under a plain "return", though the records held raw scores; plot_learning_curves had no score=,
    which the docs promised."""
    from online_trainer.analysis.plotting import plot_learning_curves

    exp_dir = tmp_path / "exp"
    config = write(
        tmp_path, CONFIG.replace("records: {score: raw}\n", "").replace("num_episodes: 6", "num_episodes: 8")
    )
    assert cli.main(["run", str(config), f"exp_dir={exp_dir}", "--no-progress"]) == 0
    df = load_episodes(exp_dir)
    note = "Returns: sums of the rewards the agent learned from; its runs' raw scores (RecordEpisodeStatistics) differ"
    capsys.readouterr()
    caplog.clear()
    assert cli.main(["show", str(exp_dir)]) == 0
    assert f"show: {note}" in caplog.text
    clipped = capsys.readouterr().out
    caplog.clear()
    assert cli.main(["show", str(exp_dir), "--score", "raw"]) == 0
    raw = capsys.readouterr().out
    assert "mean raw return" in raw and "mean raw return" not in clipped and note not in caplog.text
    final = float(raw[raw.index("final return") :].splitlines()[1].split()[-2])
    assert final == pytest.approx(df.groupby("run")["raw_return"].apply(lambda r: r.tail(10).mean()).iloc[0], abs=0.01)
    assert cli.main(["report", str(exp_dir), "--score", "raw", "--out", str(tmp_path / "r")]) == 0
    assert cli.main(["report", str(exp_dir), "--out", str(tmp_path / "r2")]) == 0  # V16: only logged and on the plot
    assert f"**Raw scores differ.** {note}" in (tmp_path / "r2" / "summary.md").read_text()
    figure = plot_learning_curves(df, score="raw", ci=None)
    assert figure.axes[0].get_ylabel().startswith("Episode raw score")
    assert figure.axes[0].get_lines()[0].get_ydata().min() < -0.5  # raw: below the clip

    def under(fig):  # the notes under the axes, their lines joined
        return " ".join(" ".join(t.get_text().split()) for t in fig.axes[0].texts)

    assert note in under(plot_learning_curves(df, ci=None)) and note not in under(figure)
    # runs without raw scores: --score raw is refused (exit 2), saying how to go on
    plain = tmp_path / "plain"
    no_raw = CONFIG.replace("    - gymnasium.wrappers:RecordEpisodeStatistics\n", "").replace(
        "records: {score: raw}\n", ""
    )
    assert cli.main(["run", str(write(tmp_path, no_raw)), f"exp_dir={plain}", "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["show", str(plain), "--score", "raw"]) == 2
    assert "--score raw: these runs recorded no raw scores" in capsys.readouterr().err


def test_score_return_reads_the_returns_of_an_experiment_scored_raw(tmp_path, capsys):
    """Tester V16: `show --score return` (and report, and plot_learning_curves(score="return")) of an experiment run
    with records.score=raw printed and drew its raw scores."""
    from online_trainer.analysis.plotting import plot_learning_curves
    from online_trainer.analysis.stats import summarize

    exp_dir = tmp_path / "exp"
    assert cli.main(["run", str(write(tmp_path)), f"exp_dir={exp_dir}", "--no-progress"]) == 0
    df = load_episodes(exp_dir)
    capsys.readouterr()
    assert cli.main(["show", str(exp_dir), "--score", "return"]) == 0
    out = capsys.readouterr().out
    assert "mean return of" in out and "raw return" not in out
    final = float(out[out.index("final return") :].splitlines()[1].split()[-2])
    assert final == pytest.approx(df["ep_return"].mean(), abs=0.01) != pytest.approx(df["raw_return"].mean(), abs=0.01)
    figure = plot_learning_curves(df, score="return", ci=None)
    assert figure.axes[0].get_ylabel().startswith("Episode return")
    drawn = figure.axes[0].get_lines()[0].get_ydata()
    assert drawn.min() >= df["ep_return"].min() > df["raw_return"].min()  # the clipped rewards' sums
    assert summarize(df, score="return")["mean"].iloc[0] == pytest.approx(df["ep_return"].mean())
