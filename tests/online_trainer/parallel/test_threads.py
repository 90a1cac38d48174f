"""Thread limits: runs in this process use torch_threads threads in every pool, and give the caller's back."""

from __future__ import annotations

import os

import pytest
import threadpoolctl
import torch

from online_trainer import ExecutionOptions, OnlineTrainer
from online_trainer.parallel.ray_backend import task_options
from online_trainer.parallel.threads import THREAD_VARIABLES, limited_threads
from tests.conftest import (
    RecordingAgent,
    ReportPools,
    make_counting_vec,
    pool_reports,
    pool_threads,
)


@pytest.fixture
def callers_threads():
    """The caller's own settings, 3 threads in every pool, put back as they were after the test."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with threadpoolctl.threadpool_limits(limits=3):
            yield 3
    finally:
        torch.set_num_threads(before)


def all_pools() -> set[int]:
    return {torch.get_num_threads(), *(pool["num_threads"] for pool in threadpoolctl.threadpool_info())}


def test_runs_in_this_process_use_torch_threads_and_give_the_callers_back(tmp_path, callers_threads):
    variables = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        2, num_episodes=2, torch_threads=1, hooks=[ReportPools(tmp_path)], progress=False
    )
    assert pool_threads(pool_reports(tmp_path)) == {1}  # during each run
    assert all_pools() == {callers_threads}  # after them
    assert {name: os.environ.get(name) for name in THREAD_VARIABLES} == variables


def test_torch_threads_none_leaves_every_pool_as_it_is(tmp_path, callers_threads):
    OnlineTrainer(make_counting_vec(1), RecordingAgent).multi_run(
        1, num_episodes=2, execution=ExecutionOptions(torch_threads=None, progress=False), hooks=[ReportPools(tmp_path)]
    )
    assert pool_threads(pool_reports(tmp_path)) == {callers_threads}


def test_the_callers_settings_come_back_when_a_run_raises(callers_threads):
    with pytest.raises(RuntimeError, match="in the runs"), limited_threads(1):
        assert all_pools() == {1}
        raise RuntimeError("in the runs")
    assert all_pools() == {callers_threads}


def test_ray_tasks_start_with_the_limit_in_their_environment():
    """Ray starts each task's worker with the variables set (numpy's BLAS reads them as it loads); the caller's
    other variables stay, torch_threads replaces theirs for the thread pools."""
    resources = {"num_cpus": 1, "runtime_env": {"env_vars": {"OMP_NUM_THREADS": "8", "MY_FLAG": "1"}}}
    options = task_options(resources, 2)
    assert options["num_cpus"] == 1
    assert options["runtime_env"]["env_vars"] == {**dict.fromkeys(THREAD_VARIABLES, "2"), "MY_FLAG": "1"}
    assert resources["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] == "8"  # the caller's dict is not changed
    assert task_options({"num_cpus": 1}, None) == {"num_cpus": 1}
