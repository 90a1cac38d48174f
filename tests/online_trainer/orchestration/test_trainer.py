"""OnlineTrainer.multi_run end to end: records, seeds, agent calls, files on disk, loaders."""

from __future__ import annotations

import argparse
import json
import pickle

import gymnasium as gym
import numpy as np
import pytest
import torch

from online_trainer import (
    OnlineTrainer,
    load_agent_logs,
    load_all_run_metrics,
    load_args,
    load_config,
    load_run_metrics,
    load_transitions,
)
from online_trainer.callbacks import CallBack, EmptyCallBack, JsonlCallback
from online_trainer.loop.seeding import SEED_STRIDE
from tests.conftest import CountingEnv, RecordingAgent, SamplingAgent, make_counting_vec

RECORD_KEYS = {
    "ep_return",
    "ep_length",
    "frames",
    "transitions",
    "actions",
    "agent_seed",
    "episode_index",
    "agent_logs",
    "global_step",
    "wall_time",
}


def collecting(created, **kwargs):
    def factory(env):
        agent = RecordingAgent(**kwargs)
        created.append(agent)
        return agent

    return factory


def test_records_have_every_field_and_runs_get_distinct_seeds(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path / "exp")
    runs = trainer.multi_run(3, num_episodes=5, seed_offset=100, progress=False)
    assert len(runs) == 3 and all(len(r) == 5 for r in runs)
    assert set(runs[0][0]) == RECORD_KEYS
    assert isinstance(runs[0][0]["actions"], np.ndarray)
    assert [r[0]["agent_seed"] for r in runs] == [100, 100 + SEED_STRIDE, 100 + 2 * SEED_STRIDE]
    manifest = json.loads((tmp_path / "exp" / "manifest.json").read_text())
    assert manifest["seeds"] == [100, 100 + SEED_STRIDE, 100 + 2 * SEED_STRIDE]
    assert [r["status"] for r in manifest["runs"]] == ["finished"] * 3
    assert manifest["num_envs"] == 2 and manifest["autoreset_mode"] == "NEXT_STEP"


def test_same_seed_offset_repeats_and_random_seed_is_recorded(tmp_path):
    def env():
        return gym.make_vec("CartPole-v1", num_envs=2)

    first = OnlineTrainer(env, SamplingAgent).multi_run(2, num_episodes=6, seed_offset=3, progress=False)
    again = OnlineTrainer(env, SamplingAgent).multi_run(2, num_episodes=6, seed_offset=3, progress=False)

    def strip(runs):
        return [[(r["ep_return"], r["global_step"], r["actions"].tolist()) for r in run] for run in runs]

    assert strip(first) == strip(again)
    assert strip(first)[0] != strip(first)[1]
    drawn = OnlineTrainer(env, SamplingAgent, exp_dir=tmp_path).multi_run(2, num_episodes=3, progress=False)
    seed = json.loads((tmp_path / "manifest.json").read_text())["base_seed"]
    assert drawn[0][0]["agent_seed"] == seed
    replay = OnlineTrainer(env, SamplingAgent).multi_run(2, num_episodes=3, seed_offset=seed, progress=False)
    assert strip(replay) == strip(drawn)


def test_agent_protocol_calls_in_order_and_the_seeds_callback_calls(tmp_path):
    created = []
    calls = []

    class Spy(CallBack):
        def __call__(self, data, tag, step, force=False):
            calls.append((dict(data), tag, step, force))

    trainer = OnlineTrainer(make_counting_vec(3), collecting(created), exp_dir=tmp_path)
    trainer.call_back = Spy()
    runs = trainer.multi_run(1, num_episodes=4, seed_offset=7, tuning_hp={"lr": 0.5}, progress=False)
    (agent,) = created
    assert agent.calls == [("reset", 7), ("set_num_env", 3), ("set_hp", {"lr": 0.5}), ("train",)]
    assert trainer.agents == [agent]
    episodes = [call for call in calls if not call[1].startswith(("agents/", "stats/", "timing/"))]
    expected = []
    for record in runs[0]:
        i = record["episode_index"]
        expected += [
            ({"ep_return": record["ep_return"]}, "ep_return/run_1", i, True),
            ({"ep_length": record["ep_length"]}, "ep_length/run_1", i, True),
        ]
    for tag in ("ep_return/run_1", "ep_length/run_1"):  # each scalar's points in episode order
        assert [c for c in episodes if c[1] == tag] == [c for c in expected if c[1] == tag]
    assert len(episodes) == len(expected)
    agent_calls = [call for call in calls if call[1] == "agents/run_1"]
    assert len(agent_calls) == agent.updates
    assert agent_calls[-1][0] == {"loss": float(agent.updates)}


def test_jsonl_names_follow_the_seed(tmp_path):
    trainer = OnlineTrainer(make_counting_vec(3), RecordingAgent, exp_dir=tmp_path)
    trainer.call_back = JsonlCallback(tmp_path / "log.jsonl", flush_every=5)
    trainer.multi_run(2, num_episodes=4, seed_offset=7, progress=False)
    lines = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    # timing/ comes once the sampling thread has looked (every 250 ms): not in a run this short, or so
    assert {line["tag"] for line in lines if not line["tag"].startswith("timing/")} == {
        f"{kind}/run_{i}" for kind in ("ep_return", "ep_length", "agents", "stats") for i in (1, 2)
    }
    assert [line["step"] for line in lines if line["tag"] == "ep_return/run_2"] == [1, 2, 3, 4]


def test_factories_are_called_once_per_run(tmp_path):
    envs_built, agents_built = [], []

    def env_factory():
        envs_built.append(1)
        return make_counting_vec(2)()

    trainer = OnlineTrainer(env_factory, collecting(agents_built), exp_dir=tmp_path)
    trainer.multi_run(3, num_episodes=2, seed_offset=0, checkpoint_freq=1, tuning_hp={"lr": 0.1}, progress=False)
    assert len(envs_built) == 3 and len(agents_built) == 3
    assert trainer.agents == agents_built


def test_eval_mode_uses_the_agent_as_given():
    created = []
    OnlineTrainer(make_counting_vec(2), collecting(created), train=False).multi_run(1, num_episodes=3, progress=False)
    (agent,) = created
    assert agent.updates == 0 and agent.mode == "eval"
    assert agent.calls == [("set_num_env", 2), ("eval",)]  # never reset(seed) nor train()


def test_an_agent_instance_trains_in_place_when_it_is_the_only_run():
    agent = RecordingAgent()
    trainer = OnlineTrainer(make_counting_vec(1), agent)
    trainer.multi_run(1, num_episodes=2, seed_offset=0, progress=False)
    assert agent.updates > 0 and agent.calls[0] == ("reset", 0)
    assert trainer.agents == [agent]


def test_an_agent_instance_is_copied_for_several_runs_and_the_trained_copies_are_kept(caplog):
    prototype = RecordingAgent()
    trainer = OnlineTrainer(make_counting_vec(1), prototype)
    trainer.multi_run(2, num_episodes=2, seed_offset=0, progress=False)
    assert prototype.updates == 0 and prototype.calls == []
    assert "copied for each of the 2 runs" in caplog.text
    first, second = trainer.agents
    assert first is not prototype and second is not first
    assert first.seed == 0 and second.seed == SEED_STRIDE and first.updates > 0 and second.updates > 0


def test_keep_agents_false_keeps_none():
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent)
    trainer.multi_run(2, num_episodes=2, seed_offset=0, keep_agents=False, progress=False)
    assert trainer.agents == [None, None]


def test_an_env_instance_is_used_in_place_and_left_open():
    env = make_counting_vec(2, vectorization="async")()
    try:
        runs = OnlineTrainer(env, RecordingAgent).multi_run(2, num_episodes=3, seed_offset=0, progress=False)
        reference = OnlineTrainer(make_counting_vec(2), RecordingAgent).multi_run(
            2, num_episodes=3, seed_offset=0, progress=False
        )
        assert [[r["ep_length"] for r in run] for run in runs] == [[r["ep_length"] for r in run] for run in reference]
        env.reset(seed=0)  # still open: the user owns it
    finally:
        env.close()


def test_an_async_env_instance_cannot_go_to_workers_and_says_so():
    env = make_counting_vec(2, vectorization="async")()
    try:
        with pytest.raises(TypeError, match=r"env=.* cannot be sent to worker processes.*Pass a factory"):
            OnlineTrainer(env, RecordingAgent).multi_run(2, num_episodes=3, num_workers=2, progress=False)
        env.reset(seed=0)  # the check did not break it
    finally:
        env.close()


def test_a_registered_env_id_runs_like_make_env_of_it():
    from online_trainer.envs import make_env

    by_id = OnlineTrainer("CartPole-v1", RecordingAgent).multi_run(2, num_episodes=3, seed_offset=5, progress=False)
    by_factory = OnlineTrainer(make_env("CartPole-v1"), RecordingAgent).multi_run(
        2, num_episodes=3, seed_offset=5, progress=False
    )
    assert [run.column("ep_length").tolist() for run in by_id] == [
        run.column("ep_length").tolist() for run in by_factory
    ]
    assert [len(run) for run in by_id] == [3, 3]


def test_single_env_is_wrapped():
    (records,) = OnlineTrainer(CountingEnv(), RecordingAgent).multi_run(
        1, num_episodes=3, seed_offset=0, progress=False
    )
    assert [r["ep_length"] for r in records] == [2, 3, 4]


def test_files_on_disk_and_loaders(tmp_path):
    config = tmp_path / "my_config.py"
    config.write_text("LR = 0.25\n")
    args = argparse.Namespace(lr=0.25, layers=(64, 64), name="x", tags=["a"])
    exp = tmp_path / "exp"
    trainer = OnlineTrainer(
        make_counting_vec(2), collecting([], log_every_step=True), exp_dir=exp, config=config, args=args
    )
    runs = trainer.multi_run(2, num_episodes=4, seed_offset=0, dump_transitions=True, progress=False)
    assert load_args(exp) == args
    assert load_config(exp).LR == 0.25
    assert _same(load_run_metrics(exp, 2), runs[1])
    assert _same(pickle.loads((exp / "all_metrics.pkl").read_bytes())[0], runs[0])
    loaded = load_all_run_metrics(exp)
    assert [len(r) for r in loaded] == [4, 4]
    transitions = load_transitions(exp)
    assert [len(t) for t in transitions[0]] == [r["ep_length"] for r in runs[0]]
    obs, action, reward, terminated, truncated = transitions[0][0][-1]
    assert terminated and not truncated and reward == runs[0][0]["ep_length"]
    logs = load_agent_logs(exp)
    assert logs[0][0]["t"].shape[0] >= runs[0][0]["ep_length"]
    assert (
        OnlineTrainer.load_args is not None
        and OnlineTrainer.load_all_run_metrics(exp)[0][0]["ep_return"] == runs[0][0]["ep_return"]
    )
    assert list(exp.glob("events.out.tfevents.*"))


def _same(a, b):
    return [(r["ep_return"], r["ep_length"], r["global_step"]) for r in a] == [
        (r["ep_return"], r["ep_length"], r["global_step"]) for r in b
    ]


def test_checkpoints_episode_mode(tmp_path):
    created = []
    trainer = OnlineTrainer(make_counting_vec(1), collecting(created), exp_dir=tmp_path)
    runs = trainer.multi_run(1, num_episodes=6, seed_offset=0, checkpoint_freq=2, progress=False)
    names = sorted(p.name for p in tmp_path.iterdir())
    for n in (2, 4, 6):
        assert f"Run1_E{n}.txt" in names
    assert "Run1_Last.txt" in names
    best = torch.load(tmp_path / "Run1_Best_agent.t", weights_only=True)
    best_index = int(np.argmax([r["ep_return"] for r in runs[0]]))
    # the state saved at the end of the best episode: the agent had made as many updates as steps so far
    assert best["updates"] == runs[0][best_index]["global_step"] + best_index


def test_checkpoints_step_mode(tmp_path):
    OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, total_steps=50, seed_offset=0, checkpoint_freq=20, progress=False
    )
    names = {p.name for p in tmp_path.iterdir()}
    assert {"Run1_S20.txt", "Run1_S40.txt", "Run1_Last.txt", "Run1_Best_agent.t"} <= names
    assert "Run1_S60.txt" not in names


def test_keep_records_false_returns_none_and_keeps_disk(tmp_path):
    runs = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, num_episodes=30, seed_offset=0, keep_records=False, progress=False
    )
    assert runs == [None, None]
    assert [len(r) for r in load_all_run_metrics(tmp_path)] == [30, 30]
    assert not (tmp_path / "all_metrics.pkl").exists()


def test_exception_mid_run_leaves_flushed_stream(tmp_path):
    class Exploding(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.updates == 60:
                raise RuntimeError("boom at update 60")

    from online_trainer import RunsFailedError

    trainer = OnlineTrainer(make_counting_vec(1), Exploding, exp_dir=tmp_path)
    trainer.call_back = EmptyCallBack()
    with pytest.raises(RunsFailedError, match="boom at update 60") as info:
        trainer.multi_run(1, num_episodes=1000, seed_offset=0, metrics_flush_every=7, progress=False)
    assert isinstance(info.value.__cause__, RuntimeError)
    records = load_run_metrics(tmp_path, 1)
    # lengths 2,3,4,5,... plus a reset step each: the 60th update falls in episode 14, so 13 ended
    assert [r["episode_index"] for r in records] == list(range(1, 14))
    assert json.loads((tmp_path / "manifest.json").read_text())["runs"][0]["status"] == "failed"


def test_keyboard_interrupt_flushes_and_propagates(tmp_path):
    class Interrupting(RecordingAgent):
        def update(self, *args, **kwargs):
            super().update(*args, **kwargs)
            if self.updates == 40:
                raise KeyboardInterrupt

    trainer = OnlineTrainer(make_counting_vec(1), Interrupting, exp_dir=tmp_path)
    with pytest.raises(KeyboardInterrupt):
        trainer.multi_run(2, num_episodes=1000, seed_offset=0, metrics_flush_every=100, progress=False)
    assert len(load_run_metrics(tmp_path, 1)) > 5
    statuses = [r["status"] for r in json.loads((tmp_path / "manifest.json").read_text())["runs"]]
    assert statuses == ["interrupted", "pending"]  # run 2 never started


def test_overwrite_replaces_earlier_experiment(tmp_path):
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(2, num_episodes=2, progress=False)
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=tmp_path).multi_run(
        1, num_episodes=3, overwrite=True, progress=False
    )
    assert [len(r) for r in load_all_run_metrics(tmp_path)] == [3]


def _peak_memory(exp_dir, episodes):
    import tracemalloc

    trainer = OnlineTrainer(make_counting_vec(2), RecordingAgent, exp_dir=exp_dir)
    trainer.call_back = EmptyCallBack()
    tracemalloc.start()
    trainer.multi_run(1, num_episodes=episodes, seed_offset=0, keep_records=False, progress=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def test_memory_is_flat_in_episodes_without_records(tmp_path):
    short = _peak_memory(tmp_path / "short", 300)
    long = _peak_memory(tmp_path / "long", 6000)
    assert long < short * 1.5 + 200_000, (short, long)
    assert len(load_run_metrics(tmp_path / "long", 1)) == 6000


def test_tensorboard_keeps_every_episode_of_every_run(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = OnlineTrainer(make_counting_vec(4), RecordingAgent, exp_dir=tmp_path)  # default TBCallBack
    runs = trainer.multi_run(2, total_steps=200, seed_offset=0, progress=False)
    accumulator = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    accumulator.Reload()
    for run, records in enumerate(runs, start=1):
        assert len({r["global_step"] for r in records}) < len(records)  # several episodes end on one env step
        returns = accumulator.Scalars(f"ep_return/run_{run}")
        assert [(e.step, e.value) for e in returns] == [(r["episode_index"], r["ep_return"]) for r in records]
        assert [e.value for e in accumulator.Scalars(f"ep_length/run_{run}")] == [r["ep_length"] for r in records]


def test_episodes_that_end_together_reach_tensorboard_and_callbacks_without_series(tmp_path):
    """64 sub-envs end several episodes per step: TBCallBack takes them as series, a bare callable one by one."""
    import gymnasium as gym

    from tests.callbacks.test_callbacks import read_scalars

    calls = []

    class Plain:  # a callback with no series(): called once a value
        def __call__(self, data, tag, step, force=False):
            calls.append((tag, step, dict(data)))

        def reset(self):
            pass

        def close(self):
            pass

    for name, callback in (("tb", None), ("plain", Plain())):
        trainer = OnlineTrainer(
            lambda: gym.make_vec("CartPole-v1", num_envs=64), SamplingAgent, exp_dir=tmp_path / name
        )
        if callback is not None:
            trainer.call_back = callback
        (records,) = trainer.multi_run(1, total_steps=3000, seed_offset=0, progress=False)
        assert len({r["global_step"] for r in records}) < len(records)  # some ended on the same step
        expected_returns = [(r["episode_index"], r["ep_return"]) for r in records]
        expected_lengths = [(r["episode_index"], float(r["ep_length"])) for r in records]
        if callback is None:
            scalars = read_scalars(tmp_path / name)
            assert scalars["ep_return/run_1"] == expected_returns and scalars["ep_length/run_1"] == expected_lengths
        else:
            assert [(s, d["ep_return"]) for t, s, d in calls if t == "ep_return/run_1"] == expected_returns
            assert [(s, d["ep_length"]) for t, s, d in calls if t == "ep_length/run_1"] == expected_lengths


def _tree(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_sweep_and_one_experiment_never_share_a_directory(tmp_path):
    """A sweep into an experiment's directory wrote beside it, unseen by readers; multi_run(overwrite=True) into a
    sweep's directory deleted part of the sweep (an outside tester's finds)."""
    from online_trainer import ExperimentExistsError

    experiment, sweep = tmp_path / "experiment", tmp_path / "sweep"
    trainer = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=experiment)
    trainer.multi_run(1, num_episodes=2, seed_offset=0, progress=False)
    before = _tree(experiment)
    with pytest.raises(ExperimentExistsError, match="holds an experiment made by multi_run .* Give the sweep another"):
        trainer.sweep({"lr": [0.1]}, num_runs=1, num_episodes=2, seed_offset=0, progress=False)
    assert _tree(experiment) == before
    OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=sweep).sweep(
        {"lr": [0.1, 0.2]}, num_runs=1, num_episodes=2, seed_offset=0, progress=False
    )
    before = _tree(sweep)
    on_sweep = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=sweep)
    for kwargs, what in [
        ({}, "multi_run"),
        ({"overwrite": True}, "multi_run"),
        ({"resume": True}, "multi_run(resume=True)"),
    ]:
        with pytest.raises(ExperimentExistsError) as refused:
            on_sweep.multi_run(1, num_episodes=2, seed_offset=0, progress=False, **kwargs)
        assert str(refused.value).startswith(
            f"exp_dir={str(sweep)!r} holds a sweep (sweep.json; configurations: lr=0.1, lr=0.2), not one experiment: "
        )
        assert f"{what} there would mix one experiment into it" in str(refused.value)
        assert "call sweep(..., resume=True) with its grid" in str(refused.value)
        assert _tree(sweep) == before
    # one configuration's directory: multi_run there would be ranked among the sweep's configurations under that
    # configuration's hyperparameters.yaml, which overwrite=True kept (an outside tester's find)
    configuration = sweep / "lr=0.1"
    on_configuration = OnlineTrainer(make_counting_vec(1), RecordingAgent, exp_dir=configuration)
    folder_time = configuration.stat().st_mtime_ns
    # F17: resume=True was taken, its runs logged beside the sweep's sinks and counted as the sweep's
    for kwargs, what in (
        ({}, "multi_run"),
        ({"overwrite": True}, "multi_run"),
        ({"resume": True}, "multi_run(resume=True)"),
    ):
        with pytest.raises(ExperimentExistsError) as refused:
            on_configuration.multi_run(1, num_episodes=2, seed_offset=0, progress=False, **kwargs)
        assert str(refused.value) == (
            f"exp_dir={str(configuration)!r} is configuration 'lr=0.1' of the sweep in {str(sweep)!r} (its "
            f"hyperparameters.yaml): {what} there would put an experiment of other settings among the sweep's "
            f"configurations, under that configuration's hyperparameters. Give {what} an exp_dir outside the sweep; "
            f"to continue the sweep, call sweep(..., resume=True) on {str(sweep)!r} with its grid (a sweep is redone "
            "in another exp_dir)."
        )
        assert _tree(sweep) == before
        # refused before the lock, which would have made a .lock there and removed it (H12)
        assert configuration.stat().st_mtime_ns == folder_time
