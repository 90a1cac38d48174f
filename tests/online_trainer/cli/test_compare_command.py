"""online-trainer compare: comparison.md lists every candidate, one PNG per figure; report's default x axis."""

from __future__ import annotations

import numpy as np
import pandas as pd

from online_trainer import OnlineTrainer
from online_trainer.analysis.compare import compare_scores
from online_trainer.analysis.compare_inputs import CompareOptions
from online_trainer.analysis.dataframes import load_episodes
from online_trainer.cli import main as cli
from online_trainer.cli.compare_command import _num, command_words, comparison_markdown, parse_normalize
from online_trainer.cli.report import default_x
from tests.conftest import RecordingAgent, make_counting_vec


def experiment(path, num_runs=3, **budget):
    budget = budget or {"num_episodes": 10}
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=path).multi_run(
        num_runs, seed_offset=1, progress=False, **budget
    )
    return path


def test_compare_writes_the_markdown_and_the_figures(tmp_path, capsys):
    a, b = experiment(tmp_path / "agent_a"), experiment(tmp_path / "agent_b", num_runs=4)
    out = tmp_path / "out"
    assert cli.main(["compare", str(a), str(b), "--out", str(out), "--resamples", "200"]) == 0
    for name in ("aggregates.png", "improvement.png", "profiles.png", "sample_efficiency.png"):
        assert (out / name).stat().st_size > 10_000, name
    text = (out / "comparison.md").read_text()
    assert "| agent_a | 3 | 1 |" in text and "| agent_b | 4 | 1 |" in text
    assert "`agent_a` and `agent_b` cannot be told apart" in text  # same seeds, same episodes
    assert "![Probability of improvement](improvement.png)" in text
    assert "Wrote" in capsys.readouterr().out


def test_compare_says_when_an_interval_is_degenerate_and_never_advises_fewer_seeds():
    # every run of strong beats every run of weak: every bootstrap resample gives P(weak > strong) = 0
    scores = pd.DataFrame(
        {
            "candidate": ["weak"] * 5 + ["strong"] * 5,
            "task": "t",
            "run": list(range(1, 6)) * 2,
            "raw_score": [1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        }
    )
    comparison = compare_scores(scores.assign(experiment=scores["candidate"]), CompareOptions(n_resamples=300))
    text = comparison_markdown(comparison, [])
    assert "| weak | strong | 0.000 [0.000, 0.000] (degenerate) |" in text
    assert (
        "every run of `strong` beats every run of `weak`, so every bootstrap resample gives 0, a certainty 5 "
        "seeds cannot give. Whatever the score distributions, P(weak > strong) ≤ 0.52 (97.5% one-sided bound "
        "after complete separation); were both from one distribution, a separation this complete would happen "
        "with probability 0.004 (1 in 252)."
    ) in text
    assert "`strong` is better on IQM" in text and "with 5 seeds per candidate" in text
    assert "would have sufficed" not in text


def test_compare_gives_no_verdict_on_too_few_seeds_and_says_how_many_would_do():
    scores = pd.DataFrame(
        {
            "candidate": ["weak", "weak", "strong", "strong"],
            "task": "t",
            "run": [1, 2, 1, 2],
            "raw_score": [1.0, 2, 50, 60],
        }
    )
    comparison = compare_scores(scores.assign(experiment=scores["candidate"]), CompareOptions(n_resamples=300))
    text = comparison_markdown(comparison, [])
    assert "| weak | strong |" in text and "| no | 4 |" in text
    assert (
        "`weak` and `strong` cannot be told apart with 2 seeds per candidate: the interval of the IQM difference "
        "excludes zero"
    ) in text
    assert (
        "too often for the 95% level (no exact rank test reaches it); run at least 4 seeds per candidate with a "
        "score (now 2)."
    ) in text
    assert "is better on" not in text
    # a run without a score is no seed of the verdict: "run at least 4" read wrong where 4 ran and 3 had none (Q2)
    unscored = pd.concat([scores, scores.iloc[:1].assign(run=3, raw_score=np.nan)], ignore_index=True)
    comparison = compare_scores(unscored.assign(experiment=unscored["candidate"]), CompareOptions(n_resamples=300))
    assert "run at least 4 seeds per candidate with a score (now 2)." in comparison_markdown(comparison, [])


def test_compare_refuses_a_single_candidate(tmp_path, capsys):
    assert cli.main(["compare", str(experiment(tmp_path / "only")), "--out", str(tmp_path / "o")]) == 2
    assert "compare needs at least two candidates" in capsys.readouterr().err
    assert cli.main(["compare", str(tmp_path / "only"), str(tmp_path / "only"), "--normalize", "x"]) == 2
    assert "--normalize 'x': give minmax, RANDOM,REFERENCE" in capsys.readouterr().err


def test_parse_normalize():
    assert parse_normalize(["minmax"]) == "minmax" and parse_normalize(None) is None
    assert parse_normalize(["0,500"]) == (0.0, 500.0)
    assert parse_normalize(["CartPole-v1=9,500", "Acrobot-v1=-500,-60"]) == {
        "CartPole-v1": (9.0, 500.0),
        "Acrobot-v1": (-500.0, -60.0),
    }


def test_report_x_axis_follows_the_budget(tmp_path):
    assert default_x(load_episodes(experiment(tmp_path / "episodes"))) == "episode_index"
    assert default_x(load_episodes(experiment(tmp_path / "steps", total_steps=40))) == "global_step"


def test_compare_scores_runs_over_the_configs_last_k_as_show_and_report_do(tmp_path):
    a, b = experiment(tmp_path / "a"), experiment(tmp_path / "b")
    for path in (a, b):
        (path / "config.yaml").write_text("last_k: 3\n")
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "out"), "--resamples", "100"]) == 0
    assert "the mean return of its last 3 training episodes" in (tmp_path / "out" / "comparison.md").read_text()
    assert (
        cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "k5"), "--resamples", "100", "--last-k", "5"]) == 0
    )
    assert "the mean return of its last 5 training episodes" in (tmp_path / "k5" / "comparison.md").read_text()


def test_comparison_md_gives_two_decimals_and_both_counts_of_seeds():
    """comparison.md printed 16.55 as 16.5 beside summary.md's 16.55, and "(now 4)" for candidates of 5 and 4
    seeds (an outside tester)."""
    scores = pd.DataFrame(
        {
            "candidate": ["a"] * 5 + ["b"] * 4,
            "task": "t",
            "run": [1, 2, 3, 4, 5, 1, 2, 3, 4],
            "raw_score": [16.55, 16.55, 16.55, 16.55, 1234.5, 16.0, 17.0, 15.0, 18.0],
        }
    )
    comparison = compare_scores(scores.assign(experiment=scores["candidate"]), CompareOptions(n_resamples=300))
    text = comparison_markdown(comparison, [])
    assert "| a | 5 | 1 | 16.55 [" in text and "1234.50" not in text.split("## Aggregate")[0]
    assert "seeds per candidate (now 5 and 4) would give it an interval that excludes zero" in text


def test_the_seeds_now_are_counted_per_task_as_the_seeds_needed():
    """With two tasks, "(now 10 and 8)" counted runs over both tasks beside seeds needed per task (an outside
    tester): a user read 11 needed for 10 run."""
    rows = []
    for candidate, seeds in (("a", 5), ("b", 4)):
        for task, base in (("t1", 0.0), ("t2", 100.0)):
            rows += [
                {"candidate": candidate, "task": task, "run": i, "raw_score": base + i + (candidate == "b")}
                for i in range(1, seeds + 1)
            ]
    scores = pd.DataFrame(rows)
    comparison = compare_scores(scores.assign(experiment=scores["candidate"] + scores["task"]), CompareOptions())
    text = comparison_markdown(comparison, [])
    assert "seeds per candidate (now 5 and 4)" in text


def test_a_verdict_on_candidates_of_other_seed_counts_gives_both(tmp_path, capsys):
    """ "is better on IQM ... with 3 seeds per candidate" for candidates of 5 and 3 seeds, and the printed verdict
    left out the degenerate interval's caveat that comparison.md gives (an outside tester)."""
    scores = pd.DataFrame(
        {
            "candidate": ["weak"] * 5 + ["strong"] * 3,
            "task": "t",
            "run": [1, 2, 3, 4, 5, 1, 2, 3],
            "raw_score": [1.0, 2, 3, 4, 5, 60, 70, 80],
        }
    )
    comparison = compare_scores(scores.assign(experiment=scores["candidate"]), CompareOptions(n_resamples=300))
    text = comparison_markdown(comparison, [])
    assert "`strong` is better on IQM" in text and "with 5 and 3 seeds." in text
    assert "seeds per candidate." not in text.split("`strong` is better on IQM")[1].split("\n")[0]
    weak, strong = tmp_path / "weak", tmp_path / "strong"
    experiment(weak, num_runs=5)
    experiment(strong, num_runs=3)
    assert cli.main(["compare", str(weak), str(strong), "--out", str(tmp_path / "out"), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "weak and strong cannot be told apart" in printed
    assert "The interval of P is degenerate" in printed  # the same runs: they tie, as comparison.md says


def test_the_command_names_its_own_flags_in_errors_and_notes(tmp_path, capsys, caplog):
    """The refusals said by=['lr'] and source='eval', arguments of the Python function (tester R3)."""
    a, b = experiment(tmp_path / "agent_a"), experiment(tmp_path / "agent_b")
    assert cli.main(["compare", str(a), str(b), "--by", "lr", "--by", "gamma"]) == 2
    err = capsys.readouterr().err
    assert "--by lr --by gamma names column(s) ['lr', 'gamma'] that the data does not have" in err and "by=" not in err
    assert command_words(
        "source='eval' compares evaluations, but a has none on record. Compare on training episodes "
        "(source='episodes'), or evaluate its checkpoints (OnlineTrainer.evaluate). Or pass normalize=(random, "
        "reference) per task, or normalize='minmax' (--normalize on the command line); include_unfinished=True."
    ) == (
        "--source eval compares evaluations, but a has none on record. Compare on training episodes "
        "(--source episodes), or evaluate its checkpoints (online-trainer eval). Or pass --normalize "
        "ENV_ID=RANDOM,REFERENCE per task, or --normalize minmax; --include-unfinished."
    )


def test_the_commands_notes_name_its_flags(tmp_path, caplog):
    a, b = experiment(tmp_path / "agent_a"), experiment(tmp_path / "agent_b")
    manifest = a / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"status": "finished"', '"status": "failed"', 1))
    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "out"), "--resamples", "100"]) == 0
    assert "Leaving out 1 run(s) that did not finish: agent_a/run 1 (failed). Pass --include-unfinished" in caplog.text
    assert "include_unfinished=" not in caplog.text


def test_a_difference_close_to_zero_is_said_so_not_a_number_of_seeds_to_run():
    """Z11: "would need about 94291 seeds per candidate" of a difference of 0.23 read as advice to run them."""
    scores = pd.DataFrame(
        {
            "candidate": ["a"] * 3 + ["b"] * 3,
            "task": "t",
            "run": [1, 2, 3] * 2,
            "raw_score": [100.0, 150, 200, 100.1, 150.1, 200.2],
        }
    )
    comparison = compare_scores(scores.assign(experiment=scores["candidate"]), CompareOptions(n_resamples=300))
    assert comparison.improvement["seeds_needed"].iloc[0] > 1000
    text = comparison_markdown(comparison, [])
    assert "the observed difference is close to zero: only about " in text
    assert "seeds per candidate (now 3) would give it an interval that excludes zero, so read the two as equal" in text
    assert "would need about" not in text


def test_compare_of_an_experiment_whose_runs_were_left_out_says_how_to_include_them(tmp_path, capsys):
    """Z11: a killed experiment's runs were left out as unfinished; the error said only "resume an experiment cut
    off" (the flag was in a warning above it)."""
    done = experiment(tmp_path / "done")
    cut = experiment(tmp_path / "cut")
    manifest = cut / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text.replace('"status": "finished"', '"status": "interrupted"'))
    assert cli.main(["compare", str(cut), str(done), "--out", str(tmp_path / "o"), "--resamples", "100"]) == 2
    err = capsys.readouterr().err
    assert "runs that did not finish are left out unless --include-unfinished)." in err


def test_compare_on_evaluations_when_no_candidate_has_one_names_them(tmp_path, capsys):
    """Z11: "There is nothing to compare: no evaluation in the data." named neither experiment."""
    a, b = experiment(tmp_path / "a"), experiment(tmp_path / "b")
    assert cli.main(["compare", str(a), str(b), "--source", "eval", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "compares evaluations, but a, b have none on record: their runs ran none" in err


def test_the_improvement_plot_gives_p_as_the_table_does():
    """D11: improvement.png said "0.24 [0.02, 0.49]" beside the table's 0.245 [0.020, 0.495]."""
    from online_trainer.analysis.compare_plots import plot_improvement

    scores = pd.DataFrame(
        {
            "candidate": ["a"] * 5 + ["b"] * 5,
            "task": "t",
            "run": [1, 2, 3, 4, 5] * 2,
            "raw_score": [1.0, 5, 3, 8, 2, 4, 6, 2, 9, 7],
        }
    )
    comparison = compare_scores(scores.assign(experiment=scores["candidate"]), CompareOptions(n_resamples=300))
    row = comparison.improvement.iloc[0]
    said = f"{row['probability_of_improvement']:.3f} [{row['probability_of_improvement_lo']:.3f}, "
    assert said in comparison_markdown(comparison, [])
    texts = [t.get_text() for t in plot_improvement(comparison).axes[0].texts]
    assert any(text.startswith(said) for text in texts), texts


def test_a_verdict_whose_candidates_intervals_overlap_says_that_the_overlap_does_not_make_them_equal():
    """Tester D16: compare.md promised that comparison.md says when the candidates' intervals overlap; it said so
    only when they could not be told apart."""
    a = [float(x) for x in range(1, 11)]
    scores = pd.DataFrame(
        {
            "candidate": ["a"] * 10 + ["b"] * 10,
            "task": "t",
            "run": list(range(1, 11)) * 2,
            "raw_score": a + [x + 4 for x in a],
        }
    )
    comparison = compare_scores(scores.assign(experiment=scores["candidate"]), CompareOptions(n_resamples=1000))
    row = comparison.improvement.iloc[0]
    assert row["distinguishable"] and row["intervals_overlap"]
    text = comparison_markdown(comparison, [])
    assert "`b` is better on IQM" in text
    assert (
        "Their own intervals overlap, which does not make them equal: the interval of their difference tells." in text
    )


def test_a_bound_that_rounds_to_zero_is_written_without_a_sign():
    """A22: a tie's difference interval read [-0.000, 31.60] in comparison.md."""
    assert [_num(v) for v in (-0.0, -0.0001, 0.0004, -0.5, 20.554, -0.004, float("nan"))] == [
        "0.000", "0.000", "0.000", "-0.500", "20.55", "-0.004", "n/a",
    ]  # fmt: skip
