"""The public signatures: the seed's positional parameters of multi_run, keyword-only options, ``execution=``."""

from __future__ import annotations

import inspect

import pytest

from online_trainer import ExecutionOptions, OnlineTrainer, RunOptions
from tests.conftest import RecordingAgent, make_counting_vec

SEED_PARAMETERS = ["num_runs", "num_episodes", "total_steps", "seed_offset", "dump_metrics", "checkpoint_freq",
                   "dump_transitions", "num_workers", "tuning_hp"]
EXECUTION_KEYWORDS = {"num_workers", "progress", "start_method", "torch_threads", "backend", "ray_address",
                      "ray_resources"}


def positional(method) -> list[str]:
    return [p.name for p in inspect.signature(method).parameters.values()
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.name != "self"]


def keyword_only(method) -> set[str]:
    return {p.name for p in inspect.signature(method).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_multi_run_keeps_the_seeds_parameters_in_order_and_the_rest_is_keyword_only():
    assert positional(OnlineTrainer.multi_run) == SEED_PARAMETERS
    assert {"keep_records", "overwrite", "eval_env", "execution"} <= keyword_only(OnlineTrainer.multi_run)
    assert EXECUTION_KEYWORDS - {"num_workers"} <= keyword_only(OnlineTrainer.multi_run)


def test_sweep_and_evaluate_take_the_same_execution_options():
    assert positional(OnlineTrainer.sweep) == ["configurations", "num_runs"]
    assert positional(OnlineTrainer.evaluate) == ["which"]
    for method in (OnlineTrainer.sweep, OnlineTrainer.evaluate):
        assert {"execution"} | EXECUTION_KEYWORDS <= keyword_only(method), method.__name__


def test_an_option_after_tuning_hp_cannot_be_given_by_position(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    with pytest.raises(TypeError, match="positional argument"):
        trainer.multi_run(1, 2, None, 0, None, None, False, 1, None, True)


def test_execution_options_and_flat_keywords_give_the_same_records():
    def records(**kwargs):
        runs = OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(2, num_episodes=5, seed_offset=3, **kwargs)
        return [[(r["ep_return"], r["ep_length"], r["global_step"]) for r in run] for run in runs]

    flat = records(num_workers=2, progress=False)
    grouped = records(execution=ExecutionOptions(num_workers=2, progress=False))
    both = records(num_workers=2, execution=ExecutionOptions(num_workers=2, progress=False))
    assert flat == grouped == both
    assert len(flat) == 2 and all(len(run) == 5 for run in flat)


def test_a_keyword_that_disagrees_with_execution_is_refused_before_anything_runs(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path / "exp")
    with pytest.raises(ValueError, match=r"num_workers=1 disagrees with execution.num_workers=2: give num_workers "
                                         r"once"):
        trainer.multi_run(2, num_episodes=2, num_workers=1, execution=ExecutionOptions(num_workers=2))
    with pytest.raises(TypeError, match=r"execution must be an ExecutionOptions, but got execution=\{'num_workers': 2\}"):
        trainer.multi_run(2, num_episodes=2, execution={"num_workers": 2})
    with pytest.raises(ValueError, match=r"num_workers must be a positive int"):
        trainer.multi_run(2, num_episodes=2, num_workers=0, progress=False)
    assert not (tmp_path / "exp").exists()


def test_option_objects_are_frozen_and_validated():
    with pytest.raises(ValueError, match=r"backend must be one of \('local', 'ray', 'slurm'\), but got backend='dask'"):
        ExecutionOptions(backend="dask")
    with pytest.raises(ValueError, match=r"Give exactly one of num_episodes and total_steps, as a positive int, but got num_episodes=3, total_steps=10"):
        RunOptions(num_episodes=3, total_steps=10)
    options = RunOptions(total_steps=10)
    with pytest.raises(AttributeError):
        options.total_steps = 5  # type: ignore[misc]
