"""Tests of the ``online-trainer`` command: ``cli.main`` in-process on tiny Corridor-v0 configs."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from online_trainer.cli import main as cli
from online_trainer.config.loading import load_experiment_config, parse_override
from online_trainer.config.schema import ConfigError
from tests.conftest import record, write_experiment

TINY = """\
env:
  id: Corridor-v0
  num_envs: 2
agent:
  name: q_learning
  hyperparameters:
    lr: 0.5
num_runs: 2
num_episodes: 6
callback: empty
"""


def write_config(directory: Path, text: str = TINY, name: str = "tiny.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def run(*argv: str) -> int:
    return cli.main(["run", *argv, "--no-progress"])


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> Path:
    """One finished experiment (2 runs of 6 episodes, last_k 3), shared by the read-only tests."""
    root = tmp_path_factory.mktemp("cli")
    exp_dir = root / "sweep" / "lr_0.5"
    assert run(str(write_config(root)), f"exp_dir={exp_dir}", "last_k=3") == 0
    return exp_dir


def test_run_writes_the_experiment_and_prints_the_table(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path, TINY.replace("callback: empty", "callback: jsonl"))
    assert run(str(config)) == 0
    exp_dir = tmp_path / "runs" / "tiny"  # default: runs/<config file stem>
    for name in (
        "config.yaml",
        "args.yaml",
        "manifest.json",
        "metrics_run1.pkl",
        "metrics_run2.pkl",
        "all_metrics.pkl",
        "callback.jsonl",
    ):
        assert (exp_dir / name).is_file(), name
    resolved = yaml.safe_load((exp_dir / "config.yaml").read_text())
    assert resolved == yaml.safe_load((exp_dir / "args.yaml").read_text())
    assert resolved["env"] == {
        "id": "Corridor-v0",
        "num_envs": 2,
        "vectorization": "sync",
        "kwargs": {},
        "wrappers": [],
        "vector_kwargs": {},
    }
    assert resolved["exp_dir"] == "runs/tiny" and resolved["last_k"] == 10 and resolved["total_steps"] is None
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    assert manifest["seeds"] == [0, 10000] and [r["status"] for r in manifest["runs"]] == ["finished"] * 2
    out = capsys.readouterr().out
    # 6 episodes a run: the header does not claim 10 (tester Z1: "its last 100000 episodes" of runs of 315)
    assert "Final return of each run: mean return of all its episodes (every run has fewer than 10)" in out
    assert "IQM" in out and "95% CI" in out
    assert f"Experiment directory: {Path('runs', 'tiny')}" in out
    table = out[out.index("final return") :].splitlines()
    assert table[1].split()[:3] == ["1", "0", "6"] and table[2].split()[:3] == ["2", "10000", "6"]


def test_overrides_are_applied_and_recorded(tmp_path, capsys):
    exp_dir = tmp_path / "exp"
    overrides = [
        "num_runs=3",
        "env.num_envs=1",
        "agent.hyperparameters.lr=2.5e-1",
        "agent.hyperparameters.epsilon_decay=0.5",
        f"exp_dir={exp_dir}",
        "seed_offset=7",
    ]
    overrides += [
        "num_runs=3",
        "evaluation={freq: 3}",
        "evaluation.episodes=2",
    ]  # the same value again; a key of a section set before
    assert run(str(write_config(tmp_path)), *overrides) == 0
    text = (exp_dir / "config.yaml").read_text()
    assert "# with overrides: num_runs=3 env.num_envs=1" in text
    resolved = yaml.safe_load(text)
    assert resolved["num_runs"] == 3 and resolved["env"]["num_envs"] == 1 and resolved["seed_offset"] == 7
    assert resolved["agent"]["hyperparameters"] == {"lr": 0.25, "epsilon_decay": 0.5}
    assert resolved["evaluation"]["freq"] == 3 and resolved["evaluation"]["episodes"] == 2
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    assert manifest["num_runs"] == 3 and manifest["num_envs"] == 1 and manifest["seeds"][0] == 7
    assert "across runs" in capsys.readouterr().out.lower()


def test_an_earlier_experiment_is_kept_unless_overwrite(tmp_path, capsys):
    config, exp_dir = write_config(tmp_path), tmp_path / "exp"
    assert run(str(config), f"exp_dir={exp_dir}") == 0
    before = (exp_dir / "metrics_run1.pkl").read_bytes()
    assert run(str(config), f"exp_dir={exp_dir}", "num_runs=1") == 2
    assert "already holds an experiment" in capsys.readouterr().err
    assert (exp_dir / "metrics_run1.pkl").read_bytes() == before
    assert run(str(config), f"exp_dir={exp_dir}", "num_runs=1", "overwrite=true") == 0
    assert not (exp_dir / "metrics_run2.pkl").exists()
    assert yaml.safe_load((exp_dir / "config.yaml").read_text())["num_runs"] == 1
    # replaced from Python, it kept the command's config.yaml, which `online-trainer resume` then ran (tester S14)
    from online_trainer import OnlineTrainer
    from online_trainer.agents import QLearningAgent
    from online_trainer.envs import make_env

    OnlineTrainer(make_env("Corridor-v0", num_envs=1), QLearningAgent, exp_dir=exp_dir).multi_run(
        2, num_episodes=3, overwrite=True, progress=False
    )
    assert not (exp_dir / "config.yaml").exists() and not (exp_dir / "args.yaml").exists()
    assert cli.main(["resume", str(exp_dir)]) == 2
    assert "has no config.yaml: 'online-trainer resume' continues experiments made by" in capsys.readouterr().err
    # a sweep made from Python, or one of its configurations: the sweep's own call (F17: it said multi_run)
    sweep = tmp_path / "sweep"
    OnlineTrainer(make_env("Corridor-v0", num_envs=1), QLearningAgent, exp_dir=sweep).sweep(
        {"lr": [0.1]}, num_runs=1, num_episodes=2, seed_offset=0, progress=False
    )
    for given in (sweep, sweep / "lr=0.1"):
        assert cli.main(["resume", str(given)]) == 2
        assert (
            f"For one made from Python, call sweep(..., resume=True) on {sweep} with its grid as it was called."
        ) in capsys.readouterr().err


def test_the_same_command_after_a_cut_off_run_points_to_resume_first(tmp_path, capsys):
    """An outside tester's SIGTERMed run, then the same command again: the message offered only overwrite=true,
    which deletes the checkpointed runs that online-trainer resume would have continued."""
    config, exp_dir = write_config(tmp_path), tmp_path / "exp"
    assert run(str(config), f"exp_dir={exp_dir}") == 0
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    manifest["runs"][1]["status"] = "interrupted"
    (exp_dir / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run(str(config), f"exp_dir={exp_dir}/") == 2  # the same directory, as a shell completes it
    err = capsys.readouterr().err
    total = len(manifest["runs"])
    assert (
        f"already holds an experiment whose runs did not all end ({total - 1} of {total} did): continue it with\n"
        f"  online-trainer resume {exp_dir}/\nor add overwrite=true to replace it (its records and checkpoints are "
        "deleted), or exp_dir=<another path>." in err
    )


def test_a_changed_command_after_a_cut_off_run_is_told_resume_continues_the_experiment_as_made(tmp_path, capsys):
    """Resume reads the experiment's own config.yaml: pointing to it without a word let a user think the changed
    settings of the refused command would apply."""
    config, exp_dir = write_config(tmp_path), tmp_path / "exp"
    assert run(str(config), f"exp_dir={exp_dir}") == 0
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    manifest["runs"][1]["status"] = "interrupted"
    (exp_dir / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run(str(config), f"exp_dir={exp_dir}", "seed_offset=7") == 2
    err = capsys.readouterr().err
    assert (
        "continue it as it was made (not with this command's changed settings: seed_offset) with\n"
        "  online-trainer resume" in err
    )
    assert run(str(config), f"exp_dir={exp_dir}", "execution.num_workers=2") == 2  # resume takes an edited one
    err = capsys.readouterr().err
    assert (
        f"(not with this command's changed settings: execution.num_workers) with\n  online-trainer resume {exp_dir}\n"
        f"(to resume with these execution settings, set them in {exp_dir}/config.yaml first)\nor add overwrite" in err
    )


@pytest.mark.parametrize("command", ["show", "report"])
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(experiment, command, tmp_path):
    """`online-trainer show DIR | head -1` ended in a BrokenPipeError traceback and status 1."""
    out = ["--out", str(tmp_path)] if command == "report" else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "online_trainer", command, str(experiment), *out],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    process.stdout.close()  # before the command writes a line: its first write finds no reader
    with process.stderr:
        err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_show_prints_the_table_with_the_configured_last_k(experiment, capsys):
    assert cli.main(["show", str(experiment)]) == 0
    out = capsys.readouterr().out
    assert "mean return of its last 3 episodes" in out and "IQM" in out and "10000" in out
    assert cli.main(["show", str(experiment), "--last-k", "2"]) == 0
    assert "last 2 episodes" in capsys.readouterr().out


def test_report_writes_a_png_and_a_markdown_summary(experiment, tmp_path, capsys, monkeypatch):
    from online_trainer.cli import report

    titles = []
    plot = report.plot_learning_curves
    monkeypatch.setattr(report, "plot_learning_curves", lambda *a, **kw: titles.append(kw["title"]) or plot(*a, **kw))
    other = experiment.parent / "lr_0.1"
    assert run(str(write_config(tmp_path)), f"exp_dir={other}", "agent.hyperparameters.lr=0.1", "last_k=3") == 0
    capsys.readouterr()
    assert cli.main(["report", str(experiment), str(other), "--x", "episode_index"]) == 0
    sweep = experiment.parent  # the common parent of the two experiments
    png, md = sweep / "learning_curves.png", sweep / "summary.md"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    summary = md.read_text()
    assert "last 3 episodes" in summary and "IQM [95% CI]" in summary
    assert "| lr_0.1 | 2 |" in summary and "| lr_0.5 | 2 |" in summary
    assert str(png) in capsys.readouterr().out
    out_dir = tmp_path / "report"  # a sweep directory loads every experiment under it
    assert cli.main(["report", str(sweep), "--out", str(out_dir), "--last-k", "4", "--smooth", "3"]) == 0
    summary = (out_dir / "summary.md").read_text()
    assert "last 4 episodes" in summary and (out_dir / "learning_curves.png").is_file()
    # a sweep's configurations are ranked, best first, as sweep_results.csv ranks them (alphabetical before)
    assert "ranked by IQM, best first" in summary
    iqms = [float(line.split("|")[7].split("[")[0]) for line in summary.splitlines() if line.startswith("| lr_")]
    assert len(iqms) == 2 and iqms == sorted(iqms, reverse=True)
    # and so does the table printed by report and show, which listed them alphabetically (tester V9)
    ranked = [line.split("|")[1].strip() for line in summary.splitlines() if line.startswith("| lr_")]
    for command in (
        ["report", str(sweep), "--out", str(out_dir), "--last-k", "4"],
        ["show", str(sweep), "--last-k", "4"],
    ):
        capsys.readouterr()
        assert cli.main(command) == 0
        printed = capsys.readouterr().out
        across = printed[printed.index("(the configurations ranked by IQM, best first):") :]
        assert [line.split()[0] for line in across.splitlines()[1:] if line.startswith("lr_")] == ranked
    assert "ranked" not in md.read_text()  # experiments named one by one keep their order
    # experiments named one by one have no title (the legend names them); a sweep's plot is titled with its name, as
    # one experiment's is (an outside tester: a sweep's had none)
    assert titles == [None, "sweep", "sweep"]


def test_report_says_when_the_experiments_ran_on_different_budgets(tmp_path, caplog):
    """Tester Z1: report of a 30k- and a 15k-step experiment wrote their final returns side by side without a word
    (compare says "Budgets differ")."""
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    for name, steps in (("long", 90), ("short", 60)):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / name).multi_run(
            2, total_steps=steps, seed_offset=0, progress=False
        )
    caplog.set_level("WARNING")
    assert cli.main(["report", str(tmp_path / "long"), str(tmp_path / "short"), "--out", str(tmp_path / "r")]) == 0
    said = "The experiments ran on different budgets (long: 90 env steps; short: 60 env steps)"
    assert f"**Budgets differ.** {said}" in (tmp_path / "r" / "summary.md").read_text()
    assert said in caplog.text
    caplog.clear()
    # named one by one, they keep the order given, in both tables (R16: they came out by name)
    assert cli.main(["report", str(tmp_path / "short"), str(tmp_path / "long"), "--out", str(tmp_path / "r2")]) == 0
    text = (tmp_path / "r2" / "summary.md").read_text()
    assert [line.split("|")[1].strip() for line in text.splitlines() if line.startswith(("| long", "| short"))] == [
        "short",
        "long",
    ]
    caplog.clear()
    assert cli.main(["report", str(tmp_path / "long"), "--out", str(tmp_path / "one")]) == 0
    assert "Budgets differ" not in (tmp_path / "one" / "summary.md").read_text() and not caplog.text
    # show of their folder ranked them side by side without a word (Z11)
    assert cli.main(["show", str(tmp_path)]) == 0
    assert f"show: {said}" in caplog.text
    caplog.clear()
    assert cli.main(["show", str(tmp_path / "long")]) == 0
    assert not caplog.text


def test_show_of_a_folder_says_a_sweep_in_it_is_left_out(tmp_path, capsys, caplog):
    """Z11: a sweep's 12 runs were missing from `show runs` without a word (its configurations are a level deeper
    than the experiments read)."""
    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "plain").multi_run(
        2, num_episodes=3, progress=False
    )
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "swept").sweep(
        {"lr": [0.1, 0.2]}, num_runs=2, num_episodes=3, progress=False
    )
    caplog.set_level("WARNING")
    assert cli.main(["show", str(tmp_path)]) == 0
    assert "swept" not in capsys.readouterr().out
    said = [r.getMessage() for r in caplog.records if "also holds experiments of its own" in r.getMessage()]
    assert said == [
        f"{tmp_path / 'swept'} also holds experiments of its own (a sweep's configurations), one level below "
        f"those read from {tmp_path}: they are left out. Read it on its own "
        f"(load_episodes({str(tmp_path / 'swept')!r}), online-trainer show {tmp_path / 'swept'})."
    ]


def test_report_smooths_each_run_over_last_k_episodes_by_default_as_compare_does(experiment, tmp_path, monkeypatch):
    from online_trainer.cli import report

    windows = []
    plot = report.plot_learning_curves
    monkeypatch.setattr(report, "plot_learning_curves", lambda *a, **kw: windows.append(kw["smooth"]) or plot(*a, **kw))
    assert cli.main(["report", str(experiment), "--out", str(tmp_path / "default")]) == 0
    assert windows == [3]  # the experiment's last_k
    assert "each run smoothed by a trailing mean of 3 episodes" in (tmp_path / "default" / "summary.md").read_text()
    assert cli.main(["report", str(experiment), "--out", str(tmp_path / "raw"), "--smooth", "1"]) == 0
    assert windows == [3, 1]
    assert "bootstrap band; unsmoothed" in (tmp_path / "raw" / "summary.md").read_text()


@pytest.fixture
def mixed(tmp_path) -> Path:
    """A hand-written experiment: 2 finished runs, 1 failed, 1 interrupted before any episode, 1 finished with none."""

    def returns(values, length=10):
        return [record(i, v, step=length * i) for i, v in enumerate(values, start=1)]

    return write_experiment(
        tmp_path / "mixed",
        {
            1: ("finished", 11, returns([-50, -20, -10, -12])),
            2: ("finished", 22, returns([-60, -30, -14, -10, -11, -9, float("nan")], length=20)),  # a NaN at the end
            3: ("failed", 33, returns([-500])),
            4: ("interrupted", 44, None),
            5: ("finished", 55, []),
        },
    )


def test_wait_on_an_experiment_without_slurm_jobs_says_so_and_prints_the_table(experiment, capsys):
    """``online-trainer wait`` follows runs in Slurm jobs (tests/online_trainer/parallel/test_slurm.py); runs
    made here have none."""
    manifest = (experiment / "manifest.json").stat().st_mtime_ns
    assert cli.main(["wait", str(experiment)]) == 0
    out = capsys.readouterr().out
    assert f"No run of {experiment} is in a Slurm job: nothing to wait for." in out
    assert "Final return of each run" in out and "finished" in out and "IQM" in out
    assert (experiment / "manifest.json").stat().st_mtime_ns == manifest


def test_wait_after_a_ctrl_c_cancelled_every_job_before_it_began_names_the_runs_to_resume(tmp_path, capsys):
    """It said "No run ... was handed to a Slurm job" and exited 0: the jobs had been submitted, then cancelled, and
    a script's ``wait && report`` went on as if all were done (an outside tester's find)."""
    import json

    from online_trainer import OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, num_episodes=2, seed_offset=0, progress=False
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["backend"] = "slurm"  # as a Ctrl-C leaves runs whose queued jobs it cancelled: pending, in no job
    for entry in manifest["runs"]:
        entry.update(status="pending", episodes=0, global_step=None)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["wait", str(tmp_path), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert f"No run of {tmp_path} is in a Slurm job: nothing to wait for." in captured.out
    assert (
        f"online-trainer: {tmp_path}: runs 1, 2 did not finish and no Slurm job holds them (interrupted, or never "
        "started: the jobs were cancelled). Continue with: the call that made it again, with resume=True"
    ) in captured.err
    # both streams to one file (`wait DIR > log 2>&1`): its lines in the order they were said (S17: the note to
    # stderr came before the line printed ahead of it, which sat in stdout's buffer until the exit)
    done = subprocess.run(
        [sys.executable, "-m", "online_trainer", "wait", str(tmp_path), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        env={name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"},  # as users run it
    )
    lines = done.stdout.splitlines()
    said = [
        next(i for i, line in enumerate(lines) if text in line)
        for text in ("No run of", "did not finish", "Final return")
    ]
    assert done.returncode == 1 and said == sorted(said), done.stdout


def test_wait_on_an_experiment_whose_runs_failed_says_them_and_exits_1(tmp_path, capsys):
    """V18: `wait DIR && next-step` went on past an experiment whose runs had all failed: exit 0, no error said."""
    from online_trainer import OnlineTrainer, RunsFailedError
    from tests.conftest import RecordingAgent, make_counting_vec

    class Fails(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.updates == 3:
                raise RuntimeError("boom at update 3")

    with pytest.raises(RunsFailedError):
        OnlineTrainer(make_counting_vec(1), Fails, exp_dir=tmp_path).multi_run(
            2, num_episodes=3, seed_offset=0, progress=False
        )
    assert cli.main(["wait", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "online-trainer: 2 run(s) failed; the records of each up to its failure are on disk." in err
    assert "  run 1 (seed 0): RuntimeError: boom at update 3" in err and "with resume=True" in err


def test_wait_refuses_a_directory_without_an_experiment_and_a_poll_that_is_not_positive(tmp_path, experiment, capsys):
    assert cli.main(["wait", str(tmp_path)]) == 2
    assert f"online-trainer: error: {tmp_path} holds no experiment (no manifest.json)" in capsys.readouterr().err
    assert cli.main(["wait", str(experiment), "--poll", "0"]) == 2
    assert "argument --poll: expected a positive number of seconds, got '0'" in capsys.readouterr().err


def test_ctrl_c_stops_the_wait_not_the_jobs_and_says_how_to_wait_again(experiment, capsys, monkeypatch):
    from online_trainer.parallel.slurm_handle import SlurmRuns

    def interrupted(self, progress=True, poll_interval=2.0):
        raise KeyboardInterrupt

    monkeypatch.setattr(SlurmRuns, "of", classmethod(lambda cls, exp_dir: cls([(str(exp_dir), 1)], "slurm")))
    monkeypatch.setattr(SlurmRuns, "unended_job_ids", lambda self: ["812_0"])
    monkeypatch.setattr(SlurmRuns, "wait", interrupted)
    assert cli.main(["wait", str(experiment), "--no-progress"]) == 130
    captured = capsys.readouterr()
    assert f"Waiting for the Slurm jobs of {experiment}: 812_0" in captured.out
    assert f"stopped waiting; the jobs go on. Wait again with:\n  online-trainer wait {experiment}" in captured.err


def test_wait_on_slurm_jobs_that_have_all_ended_prints_the_table_alone(experiment, capsys, monkeypatch):
    """S21: `online-trainer wait` after the jobs ended printed an empty line before the table, setting it apart from
    nothing."""
    from online_trainer.parallel.slurm_handle import SlurmRuns

    monkeypatch.setattr(SlurmRuns, "of", classmethod(lambda cls, exp_dir: cls([(str(exp_dir), 1)], "slurm")))
    monkeypatch.setattr(SlurmRuns, "unended_job_ids", lambda self: [])
    monkeypatch.setattr(SlurmRuns, "wait", lambda self, progress=True, poll_interval=2.0: None)
    monkeypatch.setattr(SlurmRuns, "unfinished_notes", lambda self: [])
    assert cli.main(["wait", str(experiment), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Final return of each run"), out[:80]


def test_show_marks_left_out_runs_and_runs_without_episodes(mixed, capsys, caplog):
    with caplog.at_level("WARNING"):
        assert cli.main(["show", str(mixed), "--last-k", "2"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[1].split() == ["run", "seed", "episodes", "env", "steps", "SPS", "final", "return", "status"]
    # hand-written manifests hold no sps: '-'
    assert lines[2].split() == ["1", "11", "4", "40", "-", "-11.00", "finished"]
    assert lines[3].split() == ["2", "22", "7", "140", "-", "-10.00", "finished"]  # the last two finite returns
    # a run that did not finish: its steps and SPS as its records say (10 steps, the last at 0.1 s)
    assert lines[4].split() == ["3", "33", "1", "10", "100", "-500.00", "failed,", "left", "out"]
    assert lines[5].split() == ["4", "44", "0", "-", "-", "n/a", "interrupted,", "left", "out"]
    assert lines[6].split() == ["5", "55", "0", "-", "-", "n/a", "finished"]
    stats = lines[lines.index("Across runs, with 95% percentile-bootstrap confidence intervals:") + 2].split()
    assert stats[:4] == ["2", "1", "2", "-10.50"]  # runs, no return, left out, mean of -11 and -10
    assert "Left out (did not finish): run 3 (failed), run 4 (interrupted). Pass --include-unfinished" in captured.out
    assert "No final return (no finished episode with a finite return): run 5 (finished)." in captured.out
    assert caplog.text.count("Leaving out 2 run(s) that did not finish") == 1  # logged once
    assert caplog.text.count("Leaving out 1 episode(s) whose ep_return is NaN or infinite (run 2: 1)") == 1
    assert cli.main(["show", str(mixed), "--last-k", "2", "--include-unfinished"]) == 0
    out = capsys.readouterr().out
    stats = out.splitlines()[
        out.splitlines().index("Across runs, with 95% percentile-bootstrap confidence intervals:") + 2
    ].split()
    assert stats[:3] == ["3", "2", "-173.67"]  # runs 1, 2, 3; runs 4 and 5 have no return


def write_evaluations(exp_dir: Path, run: int, means: list[float], every: int = 20) -> None:
    """``eval_run{run}.pkl`` as the runner writes it: one chunk per evaluation."""
    import numpy as np

    with open(exp_dir / f"eval_run{run}.pkl", "wb") as f:
        for i, mean in enumerate(means, start=1):
            returns = np.array([mean - 1.0, mean + 1.0])
            pickle.dump(
                [
                    {
                        "eval_index": i,
                        "global_step": every * i,
                        "episodes_trained": 2 * i,
                        "returns": returns,
                        "lengths": np.array([5, 5]),
                        "mean": mean,
                        "std": 1.0,
                        "wall_time": 0.5 * i,
                    }
                ],
                f,
            )


def test_report_lists_left_out_runs_and_controls_the_y_axis(mixed, tmp_path, capsys):
    write_evaluations(mixed, 1, [-40.0, -12.0])
    write_evaluations(mixed, 2, [-50.0, -20.0, -8.0])
    write_evaluations(mixed, 3, [-90.0])  # the failed run: left out
    out_dir = tmp_path / "out"
    assert (
        cli.main(
            [
                "report",
                str(mixed),
                "--out",
                str(out_dir),
                "--last-k",
                "2",
                "--ylim",
                "-100",
                "0",
                "--yscale",
                "symlog",
                "--smooth",
                "2",
            ]
        )
        == 0
    )
    summary = (out_dir / "summary.md").read_text()
    assert "| mixed | 2 | 1 | 2 | -10.50" in summary
    assert "## Runs left out" in summary
    assert "| mixed | 3 | 33 | failed | 1 | RuntimeError: boom |" in summary
    assert "| mixed | 4 | 44 | interrupted | 0 |  |" in summary
    assert "## Runs without a final return" in summary and "run 5 (finished)" in summary
    assert "## Evaluation" in summary and "mean return of the 2 episodes of its last evaluation" in summary
    assert "| mixed | 2 | -10.00 [-12.00, -8.00] |" in summary and "-12.00 (40), -8.00 (60) |" in summary
    assert "![Evaluation curves](eval_curves.png)" in summary
    assert (out_dir / "eval_curves.png").read_bytes()[:4] == b"\x89PNG"
    assert f"Wrote {out_dir / 'eval_curves.png'}" in capsys.readouterr().out
    assert "trailing mean of 2 episodes" in summary and "x: the whole range some run covers" in summary
    assert (out_dir / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()
    assert cli.main(["report", str(mixed), "--out", str(out_dir), "--common-range", "--include-unfinished"]) == 0
    summary = (out_dir / "summary.md").read_text()
    assert "## Runs left out" not in summary and "x: the range every run covers" in summary
    # the runs let in say what they are: a failed run's return read as a finished one's (an outside tester)
    assert "| -23.00, -22.33, -500.00 (failed), n/a (interrupted), n/a |" in summary
    assert "## Runs in the statistics that did not use their whole budget" in summary
    assert "| mixed | 3 | 33 | failed | 1 | 10 | RuntimeError: boom |" in summary
    assert "| mixed | 4 | 44 | interrupted | 0 | - |  |" in summary
    assert "Runs without an evaluation, not in these statistics: run 4 (interrupted)" in summary


def test_report_refuses_a_bad_ylim_and_an_experiment_whose_every_run_failed(mixed, tmp_path, capsys):
    assert cli.main(["report", str(mixed), "--ylim", "0", "-1"]) == 2
    assert "--ylim 0 -1: give two finite numbers, LOW below HIGH" in capsys.readouterr().err
    failed = write_experiment(tmp_path / "failed", {1: ("failed", 1, [record(1, -3)])})
    assert cli.main(["report", str(failed)]) == 2
    err = capsys.readouterr().err
    assert "every run was left out: run 1 (failed) did not finish; pass --include-unfinished" in err
    assert cli.main(["report", str(failed), "--include-unfinished"]) == 0
    never = write_experiment(tmp_path / "never", {1: ("failed", 1, None), 2: ("interrupted", 2, [])})
    capsys.readouterr()
    assert cli.main(["show", str(never)]) == 0
    assert (
        "No run finished an episode: there is no final return to show. Runs: run 1 (failed), run 2 "
        "(interrupted)." in capsys.readouterr().out
    )
    assert cli.main(["report", str(never)]) == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["num_run=3"], "unknown key 'num_run' (did you mean 'num_runs'?); valid keys at the top level: env, agent, "),
        (["env.num_env=2"], "unknown key 'env.num_env' (did you mean 'env.num_envs'?)"),
        (
            ["agent.hyperparameters.lrr=0.1"],
            "agent 'q_learning': unknown key 'agent.hyperparameters.lrr' (did you "
            "mean 'agent.hyperparameters.lr'?); valid keys of agent.hyperparameters: "
            "lr, gamma, epsilon, ",
        ),
        (
            ["agent.hyperparameters.lr=1", "agent.hyperparameters.decay_unit=3"],
            "agent 'q_learning': agent.hyperparameters.decay_unit=3 has the wrong type: expected a string, got int.",
        ),
        (
            ["checkpoint_freq=1e4"],
            "checkpoint_freq=10000.0 has the wrong type: expected an int or null, got float "
            "(write 10000 or 10_000, without a decimal point or exponent).",
        ),
        (["train=1"], "train=1 has the wrong type: expected a bool (true or false), got int."),
        (["checkpoints.keep=0"], "checkpoints.keep must be a positive int, but got checkpoints.keep=0."),
        (["checkpoints.keep=0"], "checkpoints.keep must be a positive int, but got checkpoints.keep=0."),
        (["checkpoints.keep=2"], "checkpoints.keep=2 applies to periodic checkpoints, but checkpoint_freq is null"),
        (
            ["checkpoints.buffers=1"],
            "checkpoints.buffers=1 has the wrong type: expected a bool (true or false), got int.",
        ),
        (
            ["evaluation.freqq=5"],
            "unknown key 'evaluation.freqq' (did you mean 'evaluation.freq'?); valid keys of "
            "evaluation: env, freq, episodes, record_video.",
        ),
        (["evaluation.freq=0"], "evaluation.freq must be a positive int, but got evaluation.freq=0."),
        (
            ["execution.num_workers=two"],
            "execution.num_workers='two' has the wrong type: expected an int, got str (write a whole number, without quotes).",
        ),
        (["evaluation={freq: 1e4}"], "evaluation.freq=10000.0 has the wrong type: expected an int or null, got float"),
        (
            ["env=3"],
            "env=3 has the wrong type: expected a mapping with keys id, num_envs, vectorization, kwargs, "
            "wrappers, vector_kwargs, got int.",
        ),
        (["env.kwargs=[1]"], "env.kwargs=[1] has the wrong type: expected a mapping with string keys, got list."),
        (
            ["env={num_envs: 2}"],
            "missing key 'env.id' in env: A registered gymnasium id (CartPole-v1), or "
            "module:Env-v0 to import module first.",
        ),
        (
            ["num_runs=three"],
            "num_runs='three' has the wrong type: expected an int, got str (write a whole number, without quotes).",
        ),
        (  # T19: refused by run 2's np.random.seed once run 1 had run
            ["seed_offset=4294962296"],
            "seed_offset=4294962296 with num_runs=2 gives run 2 the seed 4294972296",
        ),
        (["total_steps=1e3", "num_episodes=null"], "total_steps=1000.0 has the wrong type: expected an int or null"),
        (["agent.name=dqm"], "unknown agent agent.name='dqm' (did you mean 'dqn'?); known agents: dqn, ppo, "),
        (
            ["env.id=Corridoor-v0"],
            "unknown env env.id='Corridoor-v0': it is not in gymnasium.registry; close matches: Corridor-v0",
        ),
        (
            ["total_steps=100"],
            "Give exactly one of num_episodes and total_steps, as a positive int, but got "
            "num_episodes=6, total_steps=100.",
        ),
        (["num_episodes=null"], "Give exactly one of num_episodes and total_steps"),
        (
            ["callback=tbb"],
            "callback must be one of 'tb', 'jsonl', 'basic', 'empty', 'csv', 'mlflow', 'wandb', but "
            "got callback='tbb' (did you mean 'tb'?)",
        ),
        (["callback=tensorbord"], "but got callback='tensorbord' (did you mean 'tb'?)."),  # C13: no hint
        (["callback=TensorBoard"], "but got callback='TensorBoard' (did you mean 'tb'?)."),
        (["agent.hyperparameters.lr=-1"], "agent 'q_learning': agent.hyperparameters: lr must be > 0 but got lr=-1.0."),
        (["num_runs"], "override 'num_runs' must look like key=value"),
        (
            ["num_runs=3", "num_runs=4"],
            "overrides 'num_runs=3' and 'num_runs=4' both set num_runs: give it once (the second would silently",
        ),
        (
            ["evaluation.freq=3", "evaluation={episodes: 2}"],
            "overrides 'evaluation.freq=3' and 'evaluation={episodes: 2}' both set evaluation.freq: give it once",
        ),
        (  # V13: the section first, then one of its keys set otherwise
            ["evaluation={freq: 5}", "evaluation.freq=6"],
            "overrides 'evaluation={freq: 5}' and 'evaluation.freq=6' both set evaluation.freq: give it once",
        ),
    ],
)
def test_config_errors_exit_2_before_anything_runs(tmp_path, capsys, overrides, message):
    exp_dir = tmp_path / "exp"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", *overrides) == 2
    err = capsys.readouterr().err
    assert err.startswith("online-trainer: error: ") and message in err
    assert "Traceback" not in err
    assert not exp_dir.exists()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["env.kwargs={render_mode: rgbarray}"],
            "env: render_mode='rgbarray' is not a render mode of Corridor-v0, "
            "which supports ['ansi']: pass one of them, or None.",
        ),
        (["agent.hyperparameters.lr=-1"], "lr must be > 0 but got lr=-1.0."),
        # known only once a run builds its agent on the env: what the call made is removed, runs/ included
        (["env.id=Pendulum-v1"], "needs a Discrete"),
        (["env.id=Pendulum-v1", "num_workers=2"], "needs a Discrete"),
    ],
)
def test_a_refused_run_creates_nothing_in_the_working_directory(tmp_path, monkeypatch, capsys, overrides, message):
    monkeypatch.chdir(tmp_path)
    config = write_config(tmp_path)
    assert run(str(config), *overrides) == 2  # exp_dir: runs/tiny by default
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == [config]  # no runs/, no runs/tiny


def test_missing_config_file_and_experiment_exit_2(tmp_path, capsys):
    assert run(str(tmp_path / "nope.yaml")) == 2
    assert f"online-trainer: error: config file '{tmp_path / 'nope.yaml'}' does not exist." in capsys.readouterr().err
    assert cli.main(["show", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["run"]) == 2  # argparse: CONFIG is required, the overrides are not
    err = capsys.readouterr().err
    assert err.endswith("online-trainer run: error: the following arguments are required: CONFIG\n")
    assert "usage: online-trainer run [-h] [--no-progress] CONFIG [KEY=VALUE ...]" in err
    assert cli.main(["resume", str(tmp_path / "missing")]) == 2
    assert f"{tmp_path / 'missing'} does not exist: give the experiment directory" in capsys.readouterr().err
    config = write_config(tmp_path)  # C17: a config file given to resume was said not to exist
    assert cli.main(["resume", str(config)]) == 2
    assert (
        f"{config} is a file, not an experiment directory: give the directory 'online-trainer run' wrote (its "
        f"exp_dir); to run a config, use: online-trainer run {config}"
    ) in capsys.readouterr().err
    assert cli.main(["run", str(write_config(tmp_path)), "exp_dir="]) == 2  # an unset shell variable, often
    assert (
        "override 'exp_dir=' has no value: give it one, or write exp_dir=null for null (the default)."
        in capsys.readouterr().err
    )
    for command in ("show", "report", "eval", "compare"):  # descriptions are not %-formatted: "95%", not "95%%"
        assert cli.main([command, "--help"]) == 0
        out = capsys.readouterr().out
        assert "%%" not in out and "95%" in out


def test_config_schema_parts(tmp_path):
    assert parse_override("agent.hyperparameters.hidden_sizes=[32, 32]") == (
        ("agent", "hyperparameters", "hidden_sizes"),
        [32, 32],
    )
    assert parse_override("agent.hyperparameters.lr=1e-3")[1] == 0.001
    with pytest.raises(ConfigError, match=r"cannot set num_runs\.x"):
        load_experiment_config(write_config(tmp_path), ["num_runs.x=1"])
    config = load_experiment_config(write_config(tmp_path), ["env={id: Corridor-v0, kwargs: {length: 4}}"])
    assert config.env.kwargs == {"length": 4} and config.env.num_envs == 1 and config.exp_dir == "runs/tiny"


def test_python_dash_m_help():
    result = subprocess.run(
        [sys.executable, "-m", "online_trainer", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: online-trainer")
    for command in ("run", "show", "report"):
        assert command in result.stdout


def test_eval_evaluates_the_checkpoints_and_prints_the_table(tmp_path, capsys):
    exp_dir = tmp_path / "exp"
    assert (
        run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", "checkpoint_freq=3", "eval_freq=3", "eval_episodes=4")
        == 0
    )
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["finished", "finished"]
    capsys.readouterr()
    assert cli.main(["eval", str(exp_dir), "--episodes", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "Greedy evaluation" in out and "last: mean" in out and "iqm" in out
    # every run's mean with 2 decimals, as the statistics under it (SAC's printed 6, PPO's 1: an outside tester)
    table = out.split("\n\n")[0].splitlines()[2:]
    assert len(table) == 2 and all(re.fullmatch(r"-?\d+\.\d\d", row.split()[-1]) for row in table)
    rows = (exp_dir / "evaluation_last.csv").read_text().splitlines()
    assert rows[0] == "run,seed,checkpoint,episode,ep_return,ep_length" and len(rows) == 1 + 2 * 4
    # the last checkpoint repeats each run's final evaluation during training
    from online_trainer import load_evaluations

    final = load_evaluations(exp_dir)
    assert not final.empty
    assert cli.main(["eval", str(exp_dir), "--episodes", "4", "--no-progress"]) == 2
    assert "holds an earlier evaluation: add --overwrite to replace it" in capsys.readouterr().err
    python_made = tmp_path / "python_made"
    python_made.mkdir()
    assert cli.main(["eval", str(python_made), "--no-progress"]) == 2
    assert "evaluates experiments made by 'online-trainer run'" in capsys.readouterr().err
    assert cli.main(["eval", str(tmp_path / "typo"), "--no-progress"]) == 2  # tester E4: it said "has no config.yaml"
    assert f"{tmp_path / 'typo'} does not exist: give the directory of an experiment" in capsys.readouterr().err
    # a damaged checkpoint: the file named, no traceback (tester R3: the agent's own error named none)
    (damaged,) = exp_dir.glob("Run1_Last.*")
    damaged.write_bytes(damaged.read_bytes()[:40])
    assert cli.main(["eval", str(exp_dir), "--episodes", "1", "--overwrite", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"Could not load the checkpoint {exp_dir / 'Run1_Last'} (the file {damaged.name}) into a " in err
    assert "The file may be damaged (put back a copy)" in err and "Traceback" not in err


def test_a_hyperparameter_of_the_wrong_type_is_a_config_error_before_anything_runs(tmp_path, capsys):
    exp_dir = tmp_path / "exp"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", "agent.hyperparameters.lr=abc") == 2
    captured = capsys.readouterr()
    assert (
        "agent 'q_learning': agent.hyperparameters.lr='abc' has the wrong type: expected a number, got str (write a number, without quotes)."
        in captured.err
    )
    assert "Running" not in captured.out and not exp_dir.exists()


@pytest.mark.parametrize("earlier_config", [None, "# the live writer's config\n"])
def test_run_is_refused_before_it_writes_anything_while_another_call_holds_the_lock(tmp_path, capsys, earlier_config):
    """Two commands started on one exp_dir: the second must not replace the first's config.yaml."""
    import fcntl
    import os

    exp_dir = tmp_path / "exp"
    exp_dir.mkdir()
    if earlier_config is not None:
        (exp_dir / "config.yaml").write_text(earlier_config)
    fd = os.open(exp_dir / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the live writer (as another process would hold it)
        os.write(fd, json.dumps({"pid": 4242, "host": "elsewhere", "started": "then"}).encode())
        overrides = ["overwrite=true"] if earlier_config is not None else []
        assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", *overrides) == 2
    finally:
        os.close(fd)
    captured = capsys.readouterr()
    assert "is being written by another call (pid 4242 on elsewhere, started then)" in captured.err
    assert "Running" not in captured.out
    assert sorted(p.name for p in exp_dir.iterdir()) == sorted([".lock"] + ["config.yaml"] * bool(earlier_config))
    if earlier_config is not None:
        assert (exp_dir / "config.yaml").read_text() == earlier_config


def test_evaluation_curves_stand_on_every_run_at_every_evaluation():
    """Runs evaluate on one schedule, each at the first step past the threshold (up to num_envs apart)."""
    from online_trainer.analysis.curves import curves
    from online_trainer.analysis.evaluation_curves import aligned_evaluations

    steps = [2000, 2002, 2003, 4001, 4000, 4003, 6002, 6001, 6000, 8002, 8003, 8003]
    evals = pd.DataFrame(
        {
            "run": [1, 2, 3] * 4,
            "seed": [0, 10000, 20000] * 4,
            "status": "finished",
            "eval_index": [k for k in (1, 2, 3, 4) for _ in range(3)],
            "global_step": steps,
            "episodes_trained": [s // 20 + run for s, run in zip(steps, [1, 2, 3] * 4)],
            "eval_return": [float(s % 7) for s in steps],
        }
    )
    as_episodes = {"eval_return": "ep_return", "eval_index": "episode_index"}
    raw = curves(evals.rename(columns=as_episodes), x="global_step", num_points=20)
    assert raw["num_runs"].iloc[0] < 3 and raw["num_runs"].iloc[-1] < 3  # what the report drew before
    aligned = aligned_evaluations(evals, "global_step")
    assert aligned.groupby("eval_index")["global_step"].nunique().eq(1).all()
    assert aligned["global_step"].tolist()[-3:] == [8003, 8003, 8003]
    points = curves(aligned.rename(columns=as_episodes), x="global_step", num_points=20)
    assert points["num_runs"].eq(3).all()
    assert points["value"].iloc[-1] == pytest.approx(aligned[aligned["eval_index"] == 4]["eval_return"].mean())
    # on an episode schedule the runs' steps differ widely; the curve aligns them on the evaluation index too
    # (unaligned, each run's points would draw its own thin segment under a legend counting every run)
    by_episode = evals.assign(
        episodes_trained=[10 * k for k in evals["eval_index"]],
        global_step=[s + 700 * r for s, r in zip(steps, [0, 1, 2] * 4)],
    )
    moved = aligned_evaluations(by_episode, "global_step")
    assert moved["global_step"].tolist() == [2702.0] * 3 + [4700.0] * 3 + [6701.0] * 3 + [8703.0] * 3
    assert curves(moved.rename(columns=as_episodes), x="global_step", num_points=20)["num_runs"].eq(3).all()
    # by episodes trained, a step schedule's k-th evaluations came after different numbers of episodes: every
    # point of the curve stood on one run (an outside tester's DQN report, --x episode_index)
    by_episodes = aligned_evaluations(evals, "episodes_trained")
    assert by_episodes.groupby("eval_index")["episodes_trained"].nunique().eq(1).all()
    assert by_episodes["episodes_trained"].tolist()[:3] == [102.0] * 3  # 101, 102, 103: their median
    assert by_episodes["global_step"].tolist() == steps


def test_show_gives_the_env_steps_each_run_took_not_those_of_its_last_episode(tmp_path):
    from online_trainer import OnlineTrainer, load_episodes
    from online_trainer.cli.report import final_table
    from tests.conftest import RecordingAgent, make_counting_vec

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, total_steps=101, seed_offset=0, progress=False
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    table = load_episodes(tmp_path)
    for entry in manifest["runs"]:
        assert entry["global_step"] == 101
        assert table[table["run"] == entry["run"]]["global_step"].max() < 101  # the budget ended mid-episode
    rows = [line.split() for line in final_table(table, last_k=3).splitlines()[2:4]]
    assert [row[3] for row in rows] == ["101", "101"]


def test_keep_checkpoints_and_checkpoint_buffers_reach_the_runs(tmp_path):
    exp_dir = tmp_path / "exp"
    assert (
        run(
            str(write_config(tmp_path)),
            f"exp_dir={exp_dir}",
            "checkpoint_freq=2",
            "checkpoints.keep=1",
            "checkpoints.buffers=true",
        )
        == 0
    )
    for i in (1, 2):
        assert sorted(p.name for p in exp_dir.glob(f"Run{i}_E*")) == [f"Run{i}_E6.pt"]
        assert (exp_dir / f"Run{i}_Last.pt").exists() and (exp_dir / f"Run{i}_Best_agent.t").exists()


def test_flat_config_keys_of_the_previous_release_load_with_a_warning_as_their_dotted_keys(tmp_path):
    from online_trainer.config.loading import load_experiment_config

    flat = write_config(
        tmp_path,
        TINY + "num_workers: 2\neval_freq: 3\neval_episodes: 4\nkeep_checkpoints: 1\n"
        "checkpoint_freq: 2\ntorch_threads: null\nscore: return\n",
        "flat.yaml",
    )
    dotted = write_config(
        tmp_path,
        TINY + "execution: {num_workers: 2, torch_threads: null}\n"
        "evaluation: {freq: 3, episodes: 4}\n"
        "checkpoints: {keep: 1}\ncheckpoint_freq: 2\n",
        "dotted.yaml",
    )
    with pytest.warns(DeprecationWarning, match=r"the key 'eval_freq' is deprecated .* write evaluation.freq"):
        old = load_experiment_config(flat, [f"exp_dir={tmp_path}"])
    assert old == load_experiment_config(dotted, [f"exp_dir={tmp_path}"])
    # eval_episodes without eval_freq never evaluated (the resolved config.yaml of the previous release has both)
    with pytest.warns(DeprecationWarning):
        quiet = load_experiment_config(write_config(tmp_path, TINY + "eval_freq: null\neval_episodes: 10\n", "q.yaml"))
    assert quiet.evaluation is None
    with pytest.warns(DeprecationWarning, match=r"override 'num_workers=3': the key 'num_workers' is deprecated"):
        assert load_experiment_config(dotted, ["num_workers=3"]).execution.num_workers == 3
    # a flat key and its dotted key that disagree in one file: the flat one won without a word (tester C10)
    both = write_config(tmp_path, TINY + "execution: {num_workers: 2}\nnum_workers: 1\n", "both.yaml")
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError) as refused:
        load_experiment_config(both)
    assert str(refused.value) == (
        f"config file {str(both)!r}: num_workers: 1 and execution.num_workers: 2 both set execution.num_workers: "
        "keep execution.num_workers (num_workers is deprecated)."
    )
    agreeing = write_config(tmp_path, TINY + "execution: {num_workers: 2}\nnum_workers: 2\n", "agreeing.yaml")
    with pytest.warns(DeprecationWarning):
        assert load_experiment_config(agreeing).execution.num_workers == 2
    # the same as two overrides: the later one won without a word, in either order (tester D19)
    for first, second, key in [
        ("num_workers=2", "execution.num_workers=1", "execution.num_workers"),
        ("execution.num_workers=1", "num_workers=2", "execution.num_workers"),
        ("eval_freq=5", "evaluation.freq=6", "evaluation.freq"),
        ("evaluation={freq: 6}", "eval_freq=5", "evaluation.freq"),
    ]:
        with pytest.raises(ConfigError) as refused:
            load_experiment_config(dotted, [first, second])
        assert str(refused.value) == (
            f"overrides {first!r} and {second!r} both set {key}: give it once (the second would silently replace "
            "the first)."
        )
    with pytest.warns(DeprecationWarning):
        assert load_experiment_config(dotted, ["num_workers=2", "execution.num_workers=2"]).execution.num_workers == 2


def test_a_key_given_twice_in_a_config_file_is_refused(tmp_path):
    """YAML kept the last of two total_steps without a word (tester C10)."""
    from online_trainer.config.loading import load_experiment_config

    twice = write_config(tmp_path, TINY + "seed_offset: 1\nexecution: {num_workers: 1, num_workers: 2}\n")
    with pytest.raises(ConfigError) as refused:
        load_experiment_config(twice)
    assert str(refused.value).startswith(
        f"config file {str(twice)!r} is not valid YAML: the key 'num_workers' is given twice in one mapping "
        f"(lines {TINY.count(chr(10)) + 2} and {TINY.count(chr(10)) + 2}): keep one"
    )


def test_the_command_says_which_keys_are_deprecated(tmp_path, capsys):
    """Python hides a DeprecationWarning raised outside __main__: the command said nothing of a flat key, though
    the docs say it warns."""
    exp_dir = tmp_path / "exp"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", "eval_freq=3") == 0
    err = capsys.readouterr().err
    assert (
        "online-trainer: warning: override 'eval_freq=3': the key 'eval_freq' is deprecated and will be removed in "
        "the next release: write evaluation.freq (evaluation: {freq: ...})." in err
    )
    assert "DeprecationWarning" not in err and "loading.py" not in err


@pytest.mark.slow
@pytest.mark.parametrize("target", ["the command", "its process group"])
def test_sigterm_prints_the_exact_resume_command_once_and_nothing_spurious(tmp_path, target):
    """SIGTERM to ``online-trainer run`` with 2 workers, alone (``kill PID``) or with its workers (as a cluster
    stops a job): one line for the signal, none from the workers, and the command that continues the experiment."""
    config = write_config(
        tmp_path, TINY.replace("num_episodes: 6", "total_steps: 100_000_000") + "execution: {num_workers: 2}\n"
    )
    exp_dir = Path("runs") / "cut"  # relative to the working directory, as users type it
    job = subprocess.Popen(
        [sys.executable, "-m", "online_trainer", "run", str(config), f"exp_dir={exp_dir}", "--no-progress"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(list((tmp_path / exp_dir).glob("metrics_run*.pkl"))) < 2 and job.poll() is None:
        assert time.monotonic() < deadline, "the runs did not start stepping within 120 s"
        time.sleep(0.05)
    (os.kill if target == "the command" else os.killpg)(job.pid, signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 128 + signal.SIGTERM, err
    assert (out + err).count(f"online-trainer resume {exp_dir}\n") == 1
    assert err.count("SIGTERM received") == 1
    assert "SIGUSR1" not in out + err and "Exception ignored" not in out + err and "Traceback" not in err
    manifest = json.loads((tmp_path / exp_dir / "manifest.json").read_text())
    assert [entry["status"] for entry in manifest["runs"]] == ["interrupted", "interrupted"]


def test_overwrite_keeps_the_earlier_experiment_and_its_config_when_no_run_starts(tmp_path, capsys):
    config, exp_dir = write_config(tmp_path), tmp_path / "exp"
    assert run(str(config), f"exp_dir={exp_dir}") == 0

    def files():
        return {p.relative_to(exp_dir).as_posix(): p.read_bytes() for p in sorted(exp_dir.rglob("*")) if p.is_file()}

    before = files()
    assert "config.yaml" in before and "metrics_run2.pkl" in before
    assert run(str(config), f"exp_dir={exp_dir}", "overwrite=true", "env.id=Pendulum-v1") == 2
    assert "needs a Discrete" in capsys.readouterr().err
    assert files() == before


def test_the_command_records_the_call_that_multi_run_records_for_the_same_config(tmp_path):
    """The command goes through multi_run's path: the same config gives the same manifest call record and seeds."""
    from online_trainer import OnlineTrainer
    from online_trainer.cli.run_command import multi_run_kwargs
    from online_trainer.config.builders import AgentBuilder, env_factory
    from online_trainer.config.schema import CALLBACKS

    path = write_config(tmp_path, TINY + "seed_offset: 7\ncheckpoint_freq: 3\n")
    assert run(str(path), f"exp_dir={tmp_path / 'command'}") == 0
    config = load_experiment_config(path, [])
    trainer = OnlineTrainer(
        env_factory(config.env), AgentBuilder(config.agent), exp_dir=tmp_path / "python", train=config.train
    )
    trainer.call_back = CALLBACKS[config.callback](tmp_path / "python")
    trainer.multi_run(config.num_runs, **multi_run_kwargs(config, progress=False))
    command, python = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("command", "python"))
    assert command["call"] == python["call"] and command["call"]["checkpoint_freq"] == 3
    for key in ("num_runs", "seeds", "base_seed", "train", "backend", "num_workers", "tuning_hp"):
        assert command[key] == python[key], key


def experiment_files(exp_dir: Path) -> dict[str, bytes]:
    """Every file under ``exp_dir`` (the lock's owner line left out), by its path there."""
    return {
        p.relative_to(exp_dir).as_posix(): p.read_bytes()
        for p in sorted(exp_dir.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.mark.parametrize("earlier_by", ["command", "python"])
def test_an_overwrite_whose_actions_have_the_wrong_shape_puts_back_the_earlier_experiment(
    tmp_path, capsys, monkeypatch, earlier_by
):
    """An ``overwrite=true`` run that fails at its first action keeps the earlier experiment byte for byte (its
    config.yaml, manifest and records), and leaves no config.yaml of its own beside one made from Python."""
    from online_trainer.agents import AGENTS, RandomAgent
    from online_trainer.config.builders import AgentBuilder, env_factory
    from online_trainer.orchestration.trainer import OnlineTrainer

    class OneActionTooFew(RandomAgent):
        def act(self, obs):
            return super().act(obs)[:-1]

    monkeypatch.setitem(AGENTS, "one_action_too_few", OneActionTooFew)
    config, exp_dir = write_config(tmp_path), tmp_path / "exp"
    if earlier_by == "command":
        assert run(str(config), f"exp_dir={exp_dir}") == 0
    else:
        resolved = load_experiment_config(config, [])
        OnlineTrainer(env_factory(resolved.env), AgentBuilder(resolved.agent), exp_dir=exp_dir).multi_run(
            2, num_episodes=4, seed_offset=0, progress=False
        )
    before = experiment_files(exp_dir)
    assert "manifest.json" in before and "metrics_run2.pkl" in before
    assert ("config.yaml" in before) == (earlier_by == "command")
    capsys.readouterr()
    assert run(str(config), f"exp_dir={exp_dir}", "overwrite=true", "agent={name: one_action_too_few}") == 2
    captured = capsys.readouterr()
    assert "Running 2 seed(s) of one_action_too_few" in captured.out and "Traceback" not in captured.err
    assert experiment_files(exp_dir) == before
    assert not (exp_dir / ".replaced").exists()


KILLED_AFTER_PREPARING = """\
import os, signal, sys
from online_trainer.cli import main
from online_trainer.cli.run_command import CommandTrainer

# killed once multi_run holds exp_dir: the earlier experiment is set aside, this call's input files are written
CommandTrainer._on_exp_dir_held = lambda self: os.kill(os.getpid(), signal.SIGKILL)
sys.exit(main.main(sys.argv[1:]))
"""


@pytest.mark.slow  # a kill trial in a subprocess
def test_an_overwrite_killed_before_its_runs_started_leaves_the_earlier_experiment_and_its_config(tmp_path, capsys):
    """The next call on the directory puts back what a killed ``overwrite=true`` call set aside, config.yaml included."""
    config, exp_dir = write_config(tmp_path), tmp_path / "exp"
    assert run(str(config), f"exp_dir={exp_dir}") == 0
    before = experiment_files(exp_dir)
    script = tmp_path / "killed.py"
    script.write_text(KILLED_AFTER_PREPARING)
    argv = [sys.executable, str(script), "run", str(config), f"exp_dir={exp_dir}", "num_runs=1", "overwrite=true"]
    killed = subprocess.run([*argv, "--no-progress"], capture_output=True, text=True, cwd=Path.cwd())
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (exp_dir / ".replaced" / "config.yaml").read_bytes() == before["config.yaml"]
    assert yaml.safe_load((exp_dir / "config.yaml").read_text())["num_runs"] == 1  # the killed call's
    capsys.readouterr()
    assert run(str(config), f"exp_dir={exp_dir}") == 2  # puts back what was set aside, then refuses
    assert "already holds an experiment (manifest.json, " in capsys.readouterr().err  # the telling file first
    assert experiment_files(exp_dir) == before


def test_the_line_before_the_runs_says_the_workers_multi_run_uses(tmp_path, capsys):
    config = write_config(tmp_path, TINY.replace("num_runs: 2", "num_runs: 1"))
    assert run(str(config), f"exp_dir={tmp_path / 'exp'}", "execution.num_workers=2") == 0
    out = capsys.readouterr().out
    assert "Running 1 seed(s) of q_learning on Corridor-v0 (x2), 6 episodes each into" in out
    assert "workers" not in out.splitlines()[0]  # one run uses no worker processes


def test_evaluation_curves_are_drawn_at_the_evaluations_with_a_marker_each(tmp_path):
    """Three evaluations a run: the curve's points are the evaluation steps (a 100-point grid between them drew
    kinks in the band where no evaluation was), each with a marker."""
    import argparse

    from online_trainer import EvaluationOptions, OnlineTrainer, load_evaluations
    from online_trainer.cli.report import plot_evaluations
    from tests.conftest import RecordingAgent, make_counting_vec

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        3, total_steps=300, seed_offset=0, evaluation=EvaluationOptions(freq=100, episodes=2)
    )
    args = argparse.Namespace(x="global_step", common_range=False, ylim=None, yscale="auto", include_unfinished=False)
    figure = plot_evaluations(load_evaluations(tmp_path), args, title=None)
    (line,) = [line for line in figure.axes[0].get_lines() if line.get_label().endswith("3 runs")]
    assert line.get_marker() == "o" and sorted(set(line.get_xdata())) == [100.0, 200.0, 300.0]
    low, high = figure.axes[0].get_xlim()  # the first and last markers whole, off the frame
    assert low < 100.0 and high > 300.0


def test_report_leaves_out_evaluations_without_a_return_and_says_why(tmp_path, caplog):
    """score='raw' with an eval env without a time limit: a greedy policy that never ends an episode is cut after
    10,000 steps, and RecordEpisodeStatistics reports no return for it (NaN). The report leaves those evaluations
    out, naming them, instead of failing to draw their curves."""
    import logging

    import gymnasium as gym
    import numpy as np
    from gymnasium.envs.classic_control import MountainCarEnv

    from online_trainer import EvaluationOptions, OnlineTrainer, RecordOptions, load_evaluations

    class StandStill:
        def __init__(self, env):
            self.num_envs = env.num_envs

        def reset(self, seed):
            pass

        def act(self, obs):
            return np.ones(self.num_envs, dtype=np.int64)  # never reaches the goal

        def update(self, *args, **kwargs):
            pass

    def train_env():
        return gym.make_vec("MountainCar-v0", num_envs=1, wrappers=[gym.wrappers.RecordEpisodeStatistics])

    def eval_env():  # no time limit
        return gym.vector.SyncVectorEnv([lambda: gym.wrappers.RecordEpisodeStatistics(MountainCarEnv())])

    exp = tmp_path / "exp"
    OnlineTrainer(train_env, StandStill, exp_dir=exp).multi_run(
        2,
        total_steps=400,
        seed_offset=0,
        records=RecordOptions(score="raw"),
        evaluation=EvaluationOptions(freq=200, episodes=1, env=eval_env),
        progress=False,
    )
    assert load_evaluations(exp)["eval_return"].isna().all()
    out = tmp_path / "report"
    with caplog.at_level(logging.WARNING):
        assert cli.main(["report", str(exp), "--out", str(out)]) == 0
    assert "Leaving out 4 of 4 evaluation(s) whose mean return is NaN or infinite (run 1, run 2)" in caplog.text
    assert (out / "learning_curves.png").is_file() and (out / "summary.md").is_file()
    assert not (out / "eval_curves.png").exists()


def test_run_takes_overrides_on_either_side_of_its_options(tmp_path, capsys):
    config = str(write_config(tmp_path))
    exp_dir = tmp_path / "exp"
    assert cli.main(["run", config, "num_runs=1", "--no-progress", f"exp_dir={exp_dir}", "num_episodes=3"]) == 0
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    assert manifest["num_runs"] == 1 and [run["episodes"] for run in manifest["runs"]] == [3]
    capsys.readouterr()
    assert cli.main(["run", config, "--no-progress", "num_runs=1", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "usage: online-trainer run" in err and "unrecognized arguments: num_runs=1 bogus" in err


def test_a_final_evaluation_off_the_schedule_is_no_point_of_the_curve(tmp_path):
    """A run stopped early is evaluated once more where it stopped: that evaluation is not the k-th of the
    schedule. Moved to the other runs' k-th, it drew run 1's step 50 at 55; at its own step, it was a curve point
    of that run alone, under a label of every run (an outside tester's IQM jumped to 500 there and back)."""
    from online_trainer import EvaluationOptions, OnlineTrainer, load_evaluations
    from online_trainer.analysis.evaluation_curves import aligned_evaluations
    from online_trainer.hooks import Hook
    from tests.conftest import RecordingAgent, make_counting_vec

    class StopRunOne(Hook):
        every_steps = 1

        def on_step(self, ctx):
            if ctx.run == 1 and ctx.global_step == 50:
                ctx.stop("enough")

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        2,
        total_steps=100,
        seed_offset=0,
        hooks=[StopRunOne()],
        evaluation=EvaluationOptions(freq=20, episodes=1),
        progress=False,
    )
    evals = load_evaluations(tmp_path)
    assert list(zip(evals["run"], evals["global_step"], evals["scheduled"])) == [
        (1, 20, True),
        (1, 40, True),
        (1, 50, False),
        *((2, step, True) for step in (20, 40, 60, 80, 100)),
    ]
    aligned = aligned_evaluations(evals, "global_step")
    assert aligned["global_step"].tolist() == [20, 40, 20, 40, 60, 80, 100]
    # the curve stands at each evaluation on the runs evaluated there: run 1 is not interpolated to step 60
    # (the report drew points no run was evaluated at, from the other runs' interpolation)
    from online_trainer.analysis.curves import curves

    table = aligned.rename(columns={"eval_return": "ep_return", "eval_index": "episode_index"})
    curve = curves(table, x="global_step", grid="observed", stat="mean", ci=None).set_index("global_step")
    assert curve["num_runs"].to_dict() == {20: 2, 40: 2, 60: 1, 80: 1, 100: 1}


def test_evaluation_curves_say_which_run_stopped_before_its_first_evaluation(tmp_path):
    """A run stopped before its first scheduled evaluation has no curve point: the legend counted 2 runs of 3 and
    only the report's log said why (tester H5). A note under the axes names the run."""
    import argparse

    from online_trainer import EvaluationOptions, OnlineTrainer, load_evaluations
    from online_trainer.cli.report import plot_evaluations
    from online_trainer.hooks import Hook
    from tests.conftest import RecordingAgent, make_counting_vec

    class StopRunTwo(Hook):
        every_steps = 1

        def on_step(self, ctx):
            if ctx.run == 2 and ctx.global_step == 10:
                ctx.stop("enough")

    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        3,
        total_steps=60,
        seed_offset=0,
        hooks=[StopRunTwo()],
        evaluation=EvaluationOptions(freq=20, episodes=1),
        progress=False,
    )
    evals = load_evaluations(tmp_path)
    assert evals.groupby("run")["scheduled"].sum().to_dict() == {1: 3, 2: 0, 3: 3}
    args = argparse.Namespace(x="global_step", common_range=False, ylim=None, yscale="auto", include_unfinished=False)
    figure = plot_evaluations(evals, args, None)
    notes = " ".join(t.get_text().replace("\n", " ") for t in figure.axes[0].texts)
    assert (
        "Not drawn: run 2, stopped before a scheduled evaluation (its final evaluation is in the report's table and load_evaluations)."
        in notes
    )
    assert figure.axes[0].get_legend().get_texts()[0].get_text() == "2 runs"
    figure = plot_evaluations(evals[evals["run"] != 2], args, None)
    assert not any("Not drawn" in t.get_text() for t in figure.axes[0].texts)


def test_the_command_warns_when_the_agents_schedule_and_the_budget_part(tmp_path, capsys):
    """configs/cartpole_ppo.yaml anneals its lr over agent.hyperparameters.total_steps: overriding total_steps alone
    left the schedule at 150,000 steps for a 4,000-step run, without a word."""
    config = write_config(
        tmp_path,
        "env:\n  id: Corridor-v0\nagent:\n  name: ppo\n  hyperparameters:\n    anneal_lr: true\n"
        "    total_steps: 64\n    n_steps: 16\nnum_runs: 1\ntotal_steps: 64\ncallback: empty\n",
    )
    assert run(str(config), f"exp_dir={tmp_path / 'same'}") == 0
    assert "warning" not in capsys.readouterr().err
    assert run(str(config), f"exp_dir={tmp_path / 'parted'}", "total_steps=32") == 0
    assert (
        "online-trainer: warning: agent.hyperparameters.total_steps=64 but total_steps=32: the agent's schedules "
        "(anneal_lr, lin_ rates) run over 64 steps, not over the run's budget. Override both (total_steps=32 "
        "agent.hyperparameters.total_steps=32) to keep them together." in capsys.readouterr().err
    )


def test_the_commands_the_output_suggests_quote_a_path_with_spaces(tmp_path, capsys):
    """'Plot it with: online-trainer report q dir/e 1' failed when pasted: the path was not quoted."""
    exp_dir = tmp_path / "q dir" / "e 1"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}") == 0
    out = capsys.readouterr().out
    assert f"Plot it with: online-trainer report '{exp_dir}'" in out


def test_run_with_a_failed_run_prints_the_command_that_runs_it_again(tmp_path, capsys, monkeypatch):
    """A run that failed ended the command with its error alone, where an interrupted one printed the command that
    continues the experiment (tester L2)."""
    from online_trainer.agents import AGENTS

    def broken_update(self, *args, **kwargs):
        raise RuntimeError("update broke")

    monkeypatch.setattr(AGENTS["q_learning"], "update", broken_update)
    exp_dir = tmp_path / "failing"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}") == 1
    err = capsys.readouterr().err
    assert "RuntimeError: update broke" in err
    assert "Once the cause is fixed, run the failed runs again" in err and f"online-trainer resume {exp_dir}\n" in err
    assert "resume=True" not in err  # the Python call's advice is not the command's
    monkeypatch.undo()
    capsys.readouterr()
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 0  # as it says
    assert capsys.readouterr().out.startswith(f"Resuming {exp_dir}\n")
    # a resume of an experiment whose runs all ended said "Resuming" and printed the table (tester D14)
    before = {p.name: p.stat().st_mtime_ns for p in exp_dir.iterdir()}
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Every run of {exp_dir} had ended (2 of 2): nothing to resume.\n") and "seed" in out
    assert {p.name: p.stat().st_mtime_ns for p in exp_dir.iterdir()} == before


def test_run_on_a_disk_that_fills_says_so_with_the_command_that_continues(tmp_path, capsys, monkeypatch):
    """A full disk as the manifest was written ended `online-trainer run` in two chained tracebacks (16 frames), with
    no resume command (tester F3)."""
    import errno

    from online_trainer.experiment.manifest import Experiment

    real = Experiment.on_result
    calls = []

    def full_at_run_2(self, result):
        calls.append(result.run_idx)
        if len(calls) == 2:
            error = OSError(errno.ENOSPC, f"could not write {self.exp_dir}/manifest.json: No space left on device.")
            raise error
        return real(self, result)

    monkeypatch.setattr(Experiment, "on_result", full_at_run_2)
    exp_dir = tmp_path / "full"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"online-trainer: error: [Errno 28] could not write {exp_dir}/manifest.json: No space left on device." in err
    assert (
        f"Once the cause is fixed (free some space), continue the experiment with:\n  online-trainer resume {exp_dir}"
        in err
    )
    monkeypatch.undo()
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 0  # as it says


def test_the_commands_failure_hint_continues_an_experiment_made_from_python_from_python(tmp_path, capsys):
    """`online-trainer wait` on runs submitted from Python ended with "run the failed runs again with: online-trainer
    resume DIR", which then refused it: that command continues only experiments `online-trainer run` made (Y2)."""
    from online_trainer.cli.run_command import failed
    from online_trainer.errors import RunFailure, RunsFailedError

    error = RunsFailedError([RunFailure(2, 10003, "RuntimeError: boom", "RuntimeError: boom")])
    assert failed(error, tmp_path) == 1
    hint = capsys.readouterr().err.splitlines()[-1]
    assert hint == (
        "  the call that made it again, with resume=True (it was made from Python, not by `online-trainer run`)"
    )
    (tmp_path / "config.yaml").write_text("env: {}\n")
    failed(error, tmp_path)
    assert capsys.readouterr().err.splitlines()[-1] == f"  online-trainer resume {tmp_path}"


def test_the_reports_error_cell_keeps_the_exception_of_a_run_a_hook_failed():
    """summary.md's "Runs left out" said only "(raised in hook FailRun2#0's on_step)": the traceback's last line
    is the note that names the hook, not the error (W3)."""
    from online_trainer.cli.report import _cell

    traceback = (
        "Traceback (most recent call last):\n  File \"/a.py\", line 3, in on_step\n    raise RuntimeError('boom')\n"
        "RuntimeError: boom in run 2 | 3\n(raised in hook FailRun2#0's on_step)\n"
    )
    assert _cell(traceback) == "RuntimeError: boom in run 2 \\| 3 (raised in hook FailRun2#0's on_step)"
    assert _cell("ValueError: x\n") == "ValueError: x" and _cell(None) == "" and _cell(float("nan")) == ""


def test_a_wrapper_that_fails_on_its_values_is_named_by_its_place_in_env_wrappers(tmp_path, capsys):
    """A value only the wrapper can judge ('ten' steps) was blamed on env.kwargs (an outside tester's find)."""
    exp_dir = tmp_path / "exp"
    wrappers = "env.wrappers=[{gymnasium.wrappers:TimeLimit: {max_episode_steps: ten}}]"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", wrappers) == 2
    err = capsys.readouterr().err
    assert "online-trainer: error: env.wrappers[0]: gymnasium.wrappers:TimeLimit(env, max_episode_steps='ten') " in err
    assert "env.kwargs" not in err and not exp_dir.exists()


def test_a_wrapper_that_does_not_fit_the_env_is_named_by_its_place_with_the_envs_spaces(tmp_path, capsys):
    """Tester X14: minigrid's ImgObsWrapper on Taxi ended the command in a 50-line traceback (exit 1) ending in
    AttributeError: 'Discrete' object has no attribute 'spaces', naming neither the entry nor a fix."""
    exp_dir = tmp_path / "exp"
    wrappers = "env.wrappers=[minigrid.wrappers:ImgObsWrapper]"  # made for Dict observations
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", wrappers) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "online-trainer: error: env.wrappers[0]: minigrid.wrappers:ImgObsWrapper(env) failed: AttributeError: "
    )
    assert "It wrapped an env of observation space Discrete(" in err and "Traceback" not in err
    assert not exp_dir.exists()


def test_resume_says_it_takes_no_overrides_and_where_execution_changes(tmp_path, capsys):
    exp_dir = tmp_path / "exp"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}") == 0
    capsys.readouterr()
    assert cli.main(["resume", str(exp_dir), "execution.num_workers=2"]) == 2
    err = capsys.readouterr().err
    assert "resume takes no overrides (execution.num_workers=2): it runs what EXP_DIR/config.yaml says." in err
    assert "edit it in that file, then resume" in err


def refused_resume_after_editing(tmp_path: Path, capsys: Any, old: str, new: str) -> tuple[Path, Any]:
    """Run the tiny config, replace ``old`` by ``new`` in the experiment's config.yaml, and resume: refused (exit 2).
    Returns the config's path and what the resume printed."""
    exp_dir = tmp_path / "exp"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}") == 0
    config = exp_dir / "config.yaml"
    config.write_text(config.read_text().replace(old, new))
    capsys.readouterr()
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 2
    return config, capsys.readouterr()


def test_resume_of_an_edited_config_with_a_typo_names_the_file(tmp_path, capsys):
    config, captured = refused_resume_after_editing(tmp_path, capsys, "num_workers:", "num_worker:")
    assert f"online-trainer: error: {config}: unknown key 'execution.num_worker'" in captured.err


def test_the_report_says_each_number_of_evaluation_episodes_of_the_experiments_it_compares(tmp_path):
    """Tester A7: two experiments evaluated over 2 and 4 episodes read "the mean return of the 2, 4 episodes"."""
    from online_trainer import EvaluationOptions, ExecutionOptions, OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    for name, episodes in (("two", 2), ("four", 4)):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / name).multi_run(
            2,
            total_steps=40,
            seed_offset=0,
            evaluation=EvaluationOptions(freq=20, episodes=episodes),
            execution=ExecutionOptions(progress=False),
        )
    out = tmp_path / "report"
    assert cli.main(["report", str(tmp_path / "two"), str(tmp_path / "four"), "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "the mean return of the episodes of its last evaluation, 2 or 4 by experiment (the agent" in summary


def test_the_report_writes_counts_and_steps_as_integers_when_an_experiment_has_no_evaluations(tmp_path):
    """Tester C10: beside an experiment without evaluations, summary.md read "the 2.0 episodes" and "0.00 (1501.0)"."""
    from online_trainer import EvaluationOptions, ExecutionOptions, OnlineTrainer
    from tests.conftest import RecordingAgent, make_counting_vec

    for name, evaluation in (("evaluated", EvaluationOptions(freq=20, episodes=2)), ("plain", None)):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / name).multi_run(
            2, total_steps=40, seed_offset=0, evaluation=evaluation, execution=ExecutionOptions(progress=False)
        )
    out = tmp_path / "report"
    assert cli.main(["report", str(tmp_path / "evaluated"), str(tmp_path / "plain"), "--out", str(out)]) == 0
    summary = (out / "summary.md").read_text()
    assert "the mean return of the 2 episodes of its last evaluation" in summary
    evaluated = next(line for line in summary.splitlines() if line.startswith("| evaluated | 2 |") and "(40" in line)
    assert "(40)" in evaluated and ".0)" not in evaluated


def test_a_config_evaluates_on_its_evaluation_env_section(tmp_path, capsys):
    """C-type testers: a command-line config had no way to evaluate on another env than the training one (an
    Atari game's eval env with a time limit, one without NormalizeReward): evaluation.env is a section like env's."""
    from online_trainer import load_evaluations

    exp_dir = tmp_path / "exp"
    # the eval corridor ends its episodes at 5 steps, where the training one's take 9 or more
    eval_env = "evaluation={freq: 3, episodes: 2, env: {id: Corridor-v0, kwargs: {max_episode_steps: 5}}}"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", eval_env, "checkpoint_freq=3") == 0
    resolved = yaml.safe_load((exp_dir / "config.yaml").read_text())
    assert resolved["evaluation"]["env"] == {
        "id": "Corridor-v0",
        "num_envs": 1,
        "vectorization": "sync",
        "kwargs": {"max_episode_steps": 5},
        "wrappers": [],
        "vector_kwargs": {},
    }
    evaluations = load_evaluations(exp_dir)
    assert len(evaluations) == 2 * 2  # 2 runs, evaluated at 3 and 6 episodes
    assert (evaluations["eval_return"] == -5).all()  # 9 steps at least in the training env's 10 cells
    capsys.readouterr()
    assert cli.main(["eval", str(exp_dir), "--episodes", "2", "--no-progress"]) == 0  # on the same eval env
    lengths = pd.read_csv(exp_dir / "evaluation_last.csv")["ep_length"]
    assert len(lengths) == 4 and (lengths == 5).all()
    # a resume of the config edited there is refused, as an edited env section is
    text = (exp_dir / "config.yaml").read_text()
    (exp_dir / "config.yaml").write_text(
        text.replace("kwargs: {max_episode_steps: 5}", "kwargs: {max_episode_steps: 6}")
    )
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 2
    assert (
        "was edited since the experiment ran: evaluation.env.kwargs.max_episode_steps is 6 there, but the runs were "
        "built with 5" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "evaluation.env.idd=Corridor-v0",
            "unknown key 'evaluation.env.idd' (did you mean 'evaluation.env.id'?); valid keys of evaluation.env: id, ",
        ),
        ("evaluation.env.num_envs=0", "evaluation.env.num_envs must be a positive int, but got evaluation.env.num_env"),
        ("evaluation.env.id=Coridor-v0", "unknown env evaluation.env.id='Coridor-v0': it is not in gymnasium.registry"),
        ("evaluation.env=3", "evaluation.env=3: give the eval env as a section like env's, e.g. evaluation.env: {id: "),
        ("evaluation.env.wrappers=[nope:X]", "evaluation.env.wrappers[0]='nope:X': cannot import module 'nope'"),
        (
            "evaluation.env.kwargs={length: 1}",
            "evaluation.env: could not build the env make_env('Corridor-v0', num_envs=1, vectorization='sync', ",
        ),
    ],
)
def test_the_evaluation_env_sections_mistakes_name_its_keys(tmp_path, capsys, override, message):
    exp_dir = tmp_path / "exp"
    config = write_config(tmp_path, TINY + "evaluation: {freq: 3, env: {id: Corridor-v0}}\n")
    assert run(str(config), f"exp_dir={exp_dir}", override) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not exp_dir.exists()


def test_eval_of_every_checkpoint_lists_their_statistics_in_training_order(tmp_path, capsys):
    """V13: the summary lines came in text order (S1200, S400, S800, best, last), the table in training order."""
    exp_dir = tmp_path / "exp"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", "num_episodes=12", "checkpoint_freq=3") == 0
    capsys.readouterr()
    assert cli.main(["eval", str(exp_dir), "--which", "all", "--episodes", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    summary = [line.split(":")[0] for line in out.splitlines() if "(95% CI over" in line]
    table = list(dict.fromkeys(line.split()[0] for line in out.split("\n\n")[0].splitlines()[2:]))
    assert summary == table == ["E3", "E6", "E9", "E12", "last", "best"]


def test_a_raw_score_refusal_for_the_eval_env_names_its_section(tmp_path, capsys):
    """V13: the refusal of a TimeLimit outside RecordEpisodeStatistics in the eval env told to fix env.kwargs."""
    exp_dir = tmp_path / "exp"
    config = write_config(
        tmp_path,
        TINY
        + "records: {score: raw}\n"
        + "evaluation:\n  freq: 3\n  env:\n    id: Corridor-v0\n    wrappers:\n"
        + "      - gymnasium.wrappers:RecordEpisodeStatistics\n"
        + "      - gymnasium.wrappers:TimeLimit: {max_episode_steps: 5}\n",
    )
    text = config.read_text().replace(
        "  num_envs: 2\n", "  num_envs: 2\n  wrappers: [gymnasium.wrappers:RecordEpisodeStatistics]\n", 1
    )
    config.write_text(text)
    assert run(str(config), f"exp_dir={exp_dir}") == 2
    err = capsys.readouterr().err
    assert "in the eval env's sub-envs a TimeLimit(max_episode_steps=5) wraps it" in err
    assert "In a config: evaluation.env.kwargs: {max_episode_steps: N}, or list gymnasium.wrappers:TimeLimit" in err
    assert "in evaluation.env.wrappers." in err


def test_resume_of_a_folder_holding_a_config_alone_says_to_run_it(tmp_path, capsys):
    """C21: it printed "Resuming", then multi_run's words: "resume=True, but exp_dir=... holds no experiment", an
    option the command has not."""
    folder = tmp_path / "fake"
    folder.mkdir()
    (folder / "config.yaml").write_text(TINY)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir())
    assert cli.main(["resume", str(folder), "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "Resuming" not in captured.out and "resume=True" not in captured.err
    assert (
        f"{folder} holds config.yaml but no experiment (no manifest.json): nothing was run there to resume. Run it "
        f"with: online-trainer run {folder / 'config.yaml'} exp_dir={folder}" in captured.err
    )
    assert sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir()) == before


def test_resume_of_an_edited_budget_gives_the_commands_spelling(tmp_path, capsys):
    """C21: the refusal of an edited total budget advised `overwrite=True`, Python's spelling."""
    config, captured = refused_resume_after_editing(tmp_path, capsys, "num_episodes: 6", "num_episodes: 7")
    assert (
        f"{config} was edited since the experiment ran: it ran with num_episodes=6, the file now says num_episodes=7. "
        f"Put the value back to resume, or run the edited config as a new experiment: online-trainer run {config} "
        "exp_dir=<another path>." in captured.err
    )
    # V21: no Python words, and no "nothing to resume" before the refusal
    assert "resume=True" not in captured.err and "as it was called" not in captured.err
    assert "nothing to resume" not in captured.out


def test_a_run_into_a_folder_with_another_configs_input_files_alone_is_not_told_it_holds_an_experiment(
    tmp_path, capsys
):
    """C21: a folder holding the user's own notes.txt, config.yaml and args.yaml "already holds an experiment"."""
    exp_dir = tmp_path / "mine"
    exp_dir.mkdir()
    for name in ("notes.txt", "config.yaml", "args.yaml"):
        (exp_dir / name).write_text("mine\n")
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}") == 2
    err = capsys.readouterr().err
    assert f"exp_dir={str(exp_dir)!r} holds no experiment but input files of another config (" in err
    assert "move them out, add overwrite=true to replace them, or exp_dir=<another path>." in err
    assert {p.name: p.read_text() for p in exp_dir.iterdir()} == dict.fromkeys(
        ("notes.txt", "config.yaml", "args.yaml"), "mine\n"
    )


TERMINATED_AS_IT_PRINTS = """\
import os, signal, sys
from online_trainer.cli import main, resume_command, run_command

def outcome(*args, _print=run_command.print_outcome):
    os.kill(os.getpid(), signal.SIGTERM)  # as a cluster stops the job, once every run has ended
    _print(*args)

run_command.print_outcome = resume_command.print_outcome = outcome
status = main.main()  # the process's own command line, as the console script calls it
os.kill(os.getpid(), signal.SIGTERM)  # and again as the interpreter shuts down (V21: 143, the runs all finished)
sys.exit(status)
"""


@pytest.mark.slow  # a subprocess of the command
@pytest.mark.parametrize("command", ["run", "resume"])
def test_a_sigterm_once_every_run_ended_leaves_the_command_its_own_exit_status(tmp_path, command):
    """C21: SIGTERM after the last run finished ended `run` (and `resume`) by its default action, status 143, the
    preempted one, without a word: a wrapper that requeues on 143 requeued a finished experiment."""
    config, exp_dir = write_config(tmp_path), tmp_path / "exp"
    if command == "resume":
        assert run(str(config), f"exp_dir={exp_dir}") == 0
    script = tmp_path / "terminated.py"
    script.write_text(TERMINATED_AS_IT_PRINTS)
    argv = [command, str(config), f"exp_dir={exp_dir}"] if command == "run" else [command, str(exp_dir)]
    done = subprocess.run([sys.executable, str(script), *argv, "--no-progress"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Final return of each run" in done.stdout
    assert "SIGTERM received after every run had ended: nothing to stop" in done.stderr
    assert [entry["status"] for entry in json.loads((exp_dir / "manifest.json").read_text())["runs"]] == [
        "finished",
        "finished",
    ]


def test_a_config_logs_to_every_sink_its_callback_lists(tmp_path, capsys):
    """C21: a config took one sink (`callback=[jsonl, csv]` had the wrong type); Python's trainer takes a list."""
    exp_dir = tmp_path / "exp"
    config = write_config(tmp_path, TINY.replace("callback: empty", "callback: [jsonl, csv]"))
    assert run(str(config), f"exp_dir={exp_dir}") == 0
    lines = [json.loads(line) for line in (exp_dir / "callback.jsonl").read_text().splitlines()]
    jsonl = sorted(
        (line["tag"], line["step"], line["values"]["ep_return"]) for line in lines if "ep_return" in line["values"]
    )
    rows = pd.read_csv(exp_dir / "scalars.csv")
    rows = rows[rows["key"] == "ep_return"]
    assert len(jsonl) == 12 and len(rows) == 12  # 2 runs of 6 episodes in each sink
    assert sorted(zip(rows["tag"], rows["step"], rows["value"])) == jsonl
    episodes = pickle.loads((exp_dir / "all_metrics.pkl").read_bytes())
    assert sorted(round(value, 9) for *_, value in jsonl) == sorted(
        round(float(r["ep_return"]), 9) for run in episodes for r in run
    )
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 0  # the same two sinks again: nothing to do
    for wrong, said in [
        ("callback=[jsonl, jsonl]", "callback=['jsonl', 'jsonl'] names jsonl more than once: list each sink once."),
        ("callback=[jsnl]", "callback[0]='jsnl' (did you mean 'jsonl'?)"),
        ("callback=[]", "callback=[] names no sink"),
        (
            "callback=[tb, basic]",
            "names tb and basic, which both write TensorBoard files into the experiment directory",
        ),
    ]:
        capsys.readouterr()
        assert run(str(config), f"exp_dir={tmp_path / 'other'}", wrong) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


COUNTING_HOOK = """\
import json, os
from online_trainer.hooks import Hook


class Count(Hook):
    def __init__(self, out):
        self.out, self.episodes = out, 0

    def on_episode_end(self, ctx, record):
        self.episodes += 1

    def state_dict(self):
        return {"episodes": self.episodes}

    def load_state_dict(self, state):
        self.episodes = state["episodes"]

    def on_run_end(self, ctx):
        with open(os.path.join(self.out, f"count_{ctx.run}.json"), "w") as f:
            json.dump(self.episodes, f)
"""


def test_a_config_gives_hooks_by_name_with_their_keyword_arguments(tmp_path, capsys, monkeypatch):
    """C21: hooks could not be given in a config (`unknown key 'hooks'`): a lab running everything from YAML could
    not stop early or count."""
    (tmp_path / "labhooks.py").write_text(COUNTING_HOOK)
    monkeypatch.syspath_prepend(str(tmp_path))
    exp_dir, out = tmp_path / "exp", tmp_path / "out"
    out.mkdir()
    hooks = (
        "hooks:\n"
        "  - {name: StopOnReturn, kwargs: {threshold: -1000, window: 2}}\n"
        f"  - {{name: 'labhooks:Count', kwargs: {{out: {str(out)!r}}}}}\n"
    )
    config = write_config(tmp_path, TINY.replace("num_episodes: 6", "num_episodes: 50") + hooks)
    assert run(str(config), f"exp_dir={exp_dir}") == 0
    manifest = json.loads((exp_dir / "manifest.json").read_text())
    episodes = pickle.loads((exp_dir / "all_metrics.pkl").read_bytes())
    assert [entry["status"] for entry in manifest["runs"]] == ["stopped_early", "stopped_early"]
    assert all(
        entry["stop_reason"].startswith("StopOnReturn: mean return of the last 2 episodes")
        for entry in manifest["runs"]
    )
    assert [json.loads((out / f"count_{i}.json").read_text()) for i in (1, 2)] == [len(run) for run in episodes]
    assert all(len(run) < 50 for run in episodes)
    assert yaml.safe_load((exp_dir / "config.yaml").read_text())["hooks"][0] == {
        "name": "StopOnReturn",
        "kwargs": {"threshold": -1000, "window": 2},
    }
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 0  # the same hooks again: nothing to do
    for wrong, said in [
        ("hooks=[{name: StopOnRetrun}]", "unknown hook hooks[0].name='StopOnRetrun' (did you mean 'StopOnReturn'?)"),
        (
            "hooks=[{name: StopOnReturn, kwargs: {thresh: 3}}]",
            "hooks[0].kwargs has 'thresh', which StopOnReturn does not take (did you mean 'threshold'?); it takes: ",
        ),
        ("hooks=[{name: 'labhooks:Nope'}]", "hooks[0].name='labhooks:Nope': 'labhooks' has no attribute 'Nope'."),
        ("hooks=[{nme: StopOnReturn}]", "unknown key 'hooks[0].nme' (did you mean 'hooks[0].name'?)"),
        # V21: a function, or a class that is no hook, is named by its key; a hook that needs evaluations says the key
        ("hooks=[{name: 'json:dumps'}]", "hooks[0].name='json:dumps' is a function, not a hook class"),
        (
            "hooks=[{name: 'collections:OrderedDict'}]",
            "hooks[0] (collections:OrderedDict) has none of the hook methods",
        ),
        ("hooks=[{name: StopOnNoImprovement, kwargs: {patience: 2}}]", "Set evaluation.freq"),
    ]:
        capsys.readouterr()
        assert run(str(config), f"exp_dir={tmp_path / 'other'}", wrong) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err  # C24: a misspelt key was also said missing, on a second line
    assert not (tmp_path / "other").exists()


def test_a_resume_of_a_config_whose_sinks_were_edited_is_refused_in_the_configs_words(tmp_path, capsys):
    """C24: `callback: [tb, jsonl, csv]` edited to `callback: tb` was refused in Python's words (the saved state does
    not fit the callback TBCallBack(...), resume with the callbacks ... a MultiCallback), naming neither the key nor
    config.yaml; a list of one sink is that sink."""
    exp_dir = tmp_path / "exp"
    assert run(str(write_config(tmp_path)), f"exp_dir={exp_dir}", "callback=[tb, jsonl]") == 0
    text = (exp_dir / "config.yaml").read_text()
    assert "callback: [tb, jsonl]\n" in text
    (exp_dir / "config.yaml").write_text(text.replace("callback: [tb, jsonl]\n", "callback: [tb]\n"))
    before = sorted((p.name, p.stat().st_mtime_ns) for p in exp_dir.iterdir())
    capsys.readouterr()
    assert cli.main(["resume", str(exp_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert (
        "config.yaml was edited since the experiment ran: callback is ['tb'] there, but the runs were built with "
        in err
    )
    assert "['tb', 'jsonl']" in err and "MultiCallback" not in err
    assert sorted((p.name, p.stat().st_mtime_ns) for p in exp_dir.iterdir()) == before
