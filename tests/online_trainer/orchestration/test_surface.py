"""The public signatures: the seed's nine positional parameters of multi_run, then option objects; the previous
release's flat keywords still work, each with a DeprecationWarning, from one table."""

from __future__ import annotations

import inspect
import json
import pickle

import pytest

from online_trainer import CheckpointOptions, EvaluationOptions, ExecutionOptions, OnlineTrainer, RecordOptions
from online_trainer.orchestration.trainer import legacy_keywords
from tests.conftest import RecordingAgent, make_counting_vec

SEED_PARAMETERS = [
    "num_runs",
    "num_episodes",
    "total_steps",
    "seed_offset",
    "dump_metrics",
    "checkpoint_freq",
    "dump_transitions",
    "num_workers",
    "tuning_hp",
]
GROUPS = {"evaluation", "checkpoints", "records", "execution"}


def positional(method) -> list[str]:
    return [
        p.name
        for p in inspect.signature(method).parameters.values()
        if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "self"
    ]


def keyword_only(method) -> set[str]:
    return {p.name for p in inspect.signature(method).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_multi_run_keeps_the_seeds_parameters_in_order_and_the_rest_is_option_objects():
    assert positional(OnlineTrainer.multi_run) == SEED_PARAMETERS
    assert keyword_only(OnlineTrainer.multi_run) == GROUPS | {"hooks", "resume", "overwrite"}


@pytest.mark.parametrize(("method", "bound"), [("multi_run", 16), ("sweep", 16), ("evaluate", 10)])
def test_the_signatures_stay_within_their_bounds(method, bound):
    parameters = [name for name in inspect.signature(getattr(OnlineTrainer, method)).parameters if name != "self"]
    assert len(parameters) <= bound, parameters


def test_sweep_and_evaluate_take_the_same_objects():
    assert positional(OnlineTrainer.sweep) == ["configurations", "num_runs"]
    assert GROUPS <= keyword_only(OnlineTrainer.sweep)
    assert positional(OnlineTrainer.evaluate) == ["which"]
    assert {"evaluation", "execution"} <= keyword_only(OnlineTrainer.evaluate)


def test_an_option_after_tuning_hp_cannot_be_given_by_position(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    with pytest.raises(TypeError, match="positional argument"):
        trainer.multi_run(1, 2, None, 0, None, None, False, 1, None, True)


# ------------------------------------------------------------------ the previous release's flat keywords

ENV = make_counting_vec(1)
EXECUTION = {
    "progress": False,
    "start_method": "forkserver",
    "torch_threads": 2,
    "backend": "ray",
    "ray_address": "auto",
    "ray_resources": {"num_cpus": 1},
}
"""Flat execution keywords of multi_run, sweep and evaluate, with a valid value each."""
CASES = [
    *[("multi_run", name, value, f"execution.{name}") for name, value in EXECUTION.items()],
    ("multi_run", "keep_records", False, "records.in_memory"),
    ("multi_run", "keep_agents", False, "records.keep_agents"),
    ("multi_run", "metrics_flush_every", 7, "records.flush_every"),
    ("multi_run", "frames_trigger", 3, "records.frames_trigger"),
    ("multi_run", "stats_window", 5, "records.stats_window"),
    ("multi_run", "stats_every_steps", 50, "records.stats_every_steps"),
    ("multi_run", "score", "raw", "records.score"),
    ("multi_run", "eval_env", ENV, "evaluation.env"),
    ("multi_run", "eval_freq", 5, "evaluation.freq"),
    ("multi_run", "eval_episodes", 3, "evaluation.episodes"),
    ("multi_run", "record_video", 2, "evaluation.record_video"),
    ("multi_run", "keep_checkpoints", 2, "checkpoints.keep"),
    ("multi_run", "checkpoint_buffers", True, "checkpoints.buffers"),
    ("sweep", "keep_checkpoints", 2, "checkpoints.keep"),
    ("sweep", "checkpoint_buffers", True, "checkpoints.buffers"),
    *[("sweep", name, value, f"execution.{name}") for name, value in {**EXECUTION, "num_workers": 2}.items()],
    ("evaluate", "num_episodes", 4, "evaluation.episodes"),
    ("evaluate", "eval_env", ENV, "evaluation.env"),
    *[("evaluate", name, value, f"execution.{name}") for name, value in {**EXECUTION, "num_workers": 2}.items()],
]
NEEDS = {"ray_resources": {"backend": "ray"}, "ray_address": {"backend": "ray"}, "eval_episodes": {"eval_freq": 5}}
"""Keywords that are valid only with another (the Ray options apply to Ray; eval_episodes alone never evaluated)."""


def _stand_in(method: str):
    """A function with the signature of ``OnlineTrainer.<method>`` that returns what it was called with."""

    def call(self, *args, **kwargs):
        return kwargs

    call.__name__ = method
    call.__signature__ = inspect.signature(getattr(OnlineTrainer, method))
    return legacy_keywords(call)


@pytest.mark.parametrize(("method", "old", "value", "new"), CASES, ids=[f"{m}-{o}" for m, o, _, _ in CASES])
def test_every_flat_keyword_of_the_previous_release_still_works_and_warns(method, old, value, new):
    section, name = new.split(".")
    with pytest.warns(
        DeprecationWarning,
        match=rf"{method}\({old}=.*\) is deprecated .* pass {section}="
        rf"\w+Options\({name}=",
    ):
        called = _stand_in(method)(None, **{old: value}, **NEEDS.get(old, {}))
    assert getattr(called[section], name) == value
    assert old not in called


def test_flat_keywords_run_as_they_did_and_give_the_records_of_the_option_objects(tmp_path):
    def run(exp_dir, **kwargs):
        trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=exp_dir)
        runs = trainer.multi_run(2, num_episodes=6, seed_offset=3, checkpoint_freq=2, **kwargs)
        records = [[(r["ep_return"], r["ep_length"], r["global_step"]) for r in run] for run in runs]
        return records, [[(e["global_step"], e["mean"]) for e in run] for run in trainer.evaluations]

    with pytest.warns(DeprecationWarning):
        flat = run(tmp_path / "flat", eval_freq=3, eval_episodes=2, keep_checkpoints=1, progress=False)
    grouped = run(
        tmp_path / "grouped",
        evaluation=EvaluationOptions(freq=3, episodes=2),
        checkpoints=CheckpointOptions(keep=1),
        execution=ExecutionOptions(progress=False),
    )
    assert flat == grouped
    assert [len(evaluations) for evaluations in flat[1]] == [2, 2]  # after episodes 3 and 6 (the end)
    assert sorted(p.name for p in (tmp_path / "flat").glob("Run1_E*")) == ["Run1_E6.txt"]


def test_a_flat_keyword_that_disagrees_with_its_object_is_refused_before_anything_runs(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with (
        pytest.raises(
            ValueError,
            match=r"eval_freq=5 disagrees with evaluation.freq=3: give it once, as "
            r"evaluation=EvaluationOptions\(freq=...\)",
        ),
        pytest.warns(DeprecationWarning),
    ):
        trainer.multi_run(2, num_episodes=2, eval_freq=5, evaluation=EvaluationOptions(freq=3))
    with pytest.raises(ValueError, match=r"num_workers=1 disagrees with execution.num_workers=2"):
        trainer.multi_run(2, num_episodes=2, num_workers=1, execution=ExecutionOptions(num_workers=2))
    # given at its default is given too: the keyword does not win silently
    with pytest.raises(
        ValueError, match=r"num_workers=2 disagrees with execution.num_workers=1: give num_workers once"
    ):
        trainer.multi_run(2, num_episodes=2, num_workers=2, execution=ExecutionOptions(num_workers=1))
    with pytest.raises(
        TypeError, match=r"execution must be an ExecutionOptions, but got execution=\{'num_workers': 2\}"
    ):
        trainer.multi_run(2, num_episodes=2, execution={"num_workers": 2})
    with pytest.raises(TypeError, match=r"records must be a RecordOptions, but got records=\{'score': 'raw'\}"):
        trainer.multi_run(2, num_episodes=2, records={"score": "raw"})
    with pytest.raises(TypeError, match=r"evaluation must be an EvaluationOptions, but got evaluation=\{'freq': 2\}"):
        trainer.multi_run(2, num_episodes=2, evaluation={"freq": 2})
    with (
        pytest.raises(TypeError, match=r"evaluate\(\) got an unexpected keyword argument 'keep_checkpoints'"),
        pytest.warns(DeprecationWarning),
    ):
        trainer.evaluate(keep_checkpoints=2)
    assert not (tmp_path / "exp").exists()


def test_a_misspelled_keyword_names_the_nearest_one_before_anything_is_written(tmp_path):
    from online_trainer import CheckpointOptions, RecordOptions, SlurmOptions

    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(
        TypeError,
        match=r"^multi_run\(\) got an unexpected keyword argument 'num_worker' \(did you mean 'num_workers'\?\); "
        r"its keywords: num_runs, num_episodes, total_steps, seed_offset, ",
    ):
        trainer.multi_run(2, num_episodes=2, num_worker=2)
    with pytest.raises(
        TypeError,
        match=r"^sweep\(\) got an unexpected keyword argument 'num_episode' \(did you mean 'num_episodes'\?\)",
    ):
        trainer.sweep({"lr": [0.1]}, 1, num_episode=1)
    with pytest.raises(
        TypeError, match=r"^OnlineTrainer\(\) got an unexpected keyword argument 'exp_dri' \(did you mean 'exp_dir'\?\)"
    ):
        OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dri=tmp_path / "exp")
    with pytest.raises(TypeError, match=r"^multi_run\(\) got an unexpected keyword argument 'colour'; its keywords"):
        trainer.multi_run(2, num_episodes=2, colour="red")
    for make, message in [
        (
            lambda: EvaluationOptions(frq=100),
            r"EvaluationOptions\(\) got .* 'frq' \(did you mean 'freq'\?\); its keywords: env, freq",
        ),
        (
            lambda: ExecutionOptions(num_wokers=2),
            r"ExecutionOptions\(\) got .* 'num_wokers' \(did you mean 'num_workers'\?\)",
        ),
        (lambda: CheckpointOptions(kep=2), r"CheckpointOptions\(\) got .* 'kep' \(did you mean 'keep'\?\)"),
        (lambda: RecordOptions(scor="raw"), r"RecordOptions\(\) got .* 'scor' \(did you mean 'score'\?\)"),
        (lambda: SlurmOptions(partiton="debug"), r"SlurmOptions\(\) got .* 'partiton' \(did you mean 'partition'\?\)"),
    ]:
        with pytest.raises(TypeError, match=message):
            make()
    assert not (tmp_path / "exp").exists()


def test_the_num_workers_keyword_fills_an_execution_built_without_it(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    trainer.multi_run(2, num_episodes=2, num_workers=2, execution=ExecutionOptions(progress=False))
    manifest = json.loads((tmp_path / "exp" / "manifest.json").read_text())
    assert manifest["num_workers"] == 2
    options = ExecutionOptions(num_workers=1)
    assert options.given("num_workers") and not options.given("progress")
    assert options == ExecutionOptions() and repr(options) == repr(ExecutionOptions())  # not a field
    assert pickle.loads(pickle.dumps(options)).given("num_workers")


def test_option_objects_are_frozen_and_name_the_dotted_key_of_a_bad_value():
    with pytest.raises(
        ValueError,
        match=r"execution.backend must be one of 'local', 'ray', 'slurm', but got "
        r"execution.backend='rey' \(did you mean 'ray'\?\)",
    ):
        ExecutionOptions(backend="rey")
    with pytest.raises(
        ValueError,
        match=r"execution.num_workers must be a positive int, but got "
        r"execution.num_workers=0. Use 1 to run in this process.",
    ):
        ExecutionOptions(num_workers=0)
    with pytest.raises(ValueError, match=r"evaluation.freq must be a positive int, but got evaluation.freq=0"):
        EvaluationOptions(freq=0)
    with pytest.raises(ValueError, match=r"checkpoints.buffers must be True or False, but got checkpoints.buffers='y'"):
        CheckpointOptions(buffers="y")
    with pytest.raises(ValueError, match=r"records.score must be one of 'return', 'raw', but got records.score='raws'"):
        RecordOptions(score="raws")
    options = RecordOptions()
    with pytest.raises(AttributeError):
        options.score = "raw"  # type: ignore[misc]
    with pytest.raises(TypeError):
        RecordOptions("raw")  # keyword-only


def test_run_options_of_the_previous_release_still_build_and_warn():
    import online_trainer

    with pytest.warns(DeprecationWarning, match="RunOptions is deprecated"):
        plan = online_trainer.RunOptions(total_steps=10, eval_freq=5, keep_records=False)
    assert plan.evaluation.freq == 5 and plan.records.in_memory is False and plan.total_steps == 10


def test_a_flat_keyword_fills_a_field_its_group_was_built_without(tmp_path):
    """M22: sweep(num_workers=2, execution=ExecutionOptions(progress=False)) was refused as num_workers=2 disagreeing
    with execution.num_workers=1, a field the user never gave (multi_run took the same pair)."""
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "sweep")
    with pytest.warns(DeprecationWarning, match=r"sweep\(num_workers=2\) is deprecated"):
        trainer.sweep({"lr": [0.1]}, 2, num_episodes=2, num_workers=2, execution=ExecutionOptions(progress=False))
    manifest = json.loads(next((tmp_path / "sweep").glob("*/manifest.json")).read_text())
    assert manifest["num_workers"] == 2
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    with pytest.warns(DeprecationWarning):
        trainer.multi_run(1, num_episodes=4, eval_freq=2, evaluation=EvaluationOptions(episodes=3), progress=False)
    assert [(e["episodes_trained"], len(e["returns"])) for e in trainer.evaluations[0]] == [(2, 3), (4, 3)]
