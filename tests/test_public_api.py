"""The public names are what users type."""

import online_trainer


def test_exports_are_sorted_and_importable():
    assert online_trainer.__all__ == sorted(online_trainer.__all__)
    for name in online_trainer.__all__:
        assert hasattr(online_trainer, name), name


def test_core_names():
    expected = {
        "OnlineTrainer",
        "RunRecords",
        "load_run_metrics",
        "load_all_run_metrics",
        "load_transitions",
        "load_agent_logs",
        "load_args",
        "load_config",
    }
    assert expected <= set(online_trainer.__all__)


def test_evaluation_and_analysis_names():
    expected = {"load_agent", "load_evaluations", "load_runs", "load_episodes", "summarize", "ExperimentInUseError"}
    assert expected <= set(online_trainer.__all__)
