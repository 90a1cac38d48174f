"""Frames are kept per sub-env, attached to the episode that produced them, for the episodes the trigger
chooses, and held in one place only."""

from __future__ import annotations

import pickle
import threading

import gymnasium as gym
import pytest

from online_trainer import OnlineTrainer
from online_trainer.records import storage
from tests.conftest import CountingEnv, RecordingAgent, make_counting_vec, strip


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
@pytest.mark.parametrize("render_mode", ["rgb_array", "rgb_array_list"])
def test_frames_belong_to_their_episode(mode, render_mode):
    runs = OnlineTrainer(make_counting_vec(2, mode, render_mode=render_mode), RecordingAgent).multi_run(
        1, num_episodes=6, seed_offset=0, progress=False
    )
    for record in runs[0]:
        frames = record["frames"]
        # the reset frame (t=0) and one per step, t=1..L
        expected = list(range(record["ep_length"] + 1))
        if mode == "SameStep":
            expected = expected[:-1]  # the final frame is rendered after the same-step reset
        assert [int(f[0, 0, 0]) for f in frames] == expected


def test_ansi_frames_and_human_mode():
    (records,) = OnlineTrainer(make_counting_vec(1, render_mode="ansi"), RecordingAgent).multi_run(
        1, num_episodes=2, seed_offset=0, progress=False
    )
    assert records[0]["frames"] == ["t=0", "t=1", "t=2"]
    (records,) = OnlineTrainer(make_counting_vec(1, render_mode="human"), RecordingAgent).multi_run(
        1, num_episodes=2, seed_offset=0, progress=False
    )
    assert records[0]["frames"] == []


def counted_vec(num_envs, mode, render_mode, renders, steps=None):
    """A factory of CountingEnvs that append to ``renders`` on every render() (and to ``steps`` on every step)."""

    class Counted(CountingEnv):
        def render(self):
            renders.append(self._t)
            return super().render()

        def step(self, action):
            if steps is not None:
                steps.append(action)
            return super().step(action)

    def factory():
        return gym.vector.SyncVectorEnv(
            [lambda: Counted(None, render_mode) for _ in range(num_envs)], autoreset_mode=gym.vector.AutoresetMode(mode)
        )

    return factory


def expected_frames(record, mode):
    """The frames of a kept episode: its reset frame (t=0) and one per step (under SAME_STEP, not the last)."""
    expected = list(range(record["ep_length"] + 1))
    return expected[:-1] if mode == "SameStep" else expected


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("render_mode", ["rgb_array", "rgb_array_list"])
@pytest.mark.parametrize("trigger, kept", [(3, [3, 6]), (lambda i: i in (1, 2, 7), [1, 2, 7])])
def test_frames_trigger_keeps_frames_in_the_chosen_episodes_only(mode, num_envs, render_mode, trigger, kept):
    renders = []
    (records,) = OnlineTrainer(counted_vec(num_envs, mode, render_mode, renders), RecordingAgent).multi_run(
        1, num_episodes=7, seed_offset=0, frames_trigger=trigger, progress=False
    )
    assert [r["episode_index"] for r in records] == list(range(1, 8))
    assert [r["episode_index"] for r in records if r["frames"]] == kept
    for record in records:
        if record["frames"]:
            assert [int(f[0, 0, 0]) for f in record["frames"]] == expected_frames(record, mode)
    if num_envs == 1 and render_mode == "rgb_array":
        # one sub-env: render() is called for the frames kept, and once before the first step when the first episode
        # keeps none (the check that the env draws: V19), and for nothing else
        assert len(renders) == sum(len(r["frames"]) for r in records) + (1 not in kept)


@pytest.mark.parametrize("trigger", [0, -3, True, 2.5, "3", [2], lambda: True, lambda i, j: True])
def test_bad_frames_trigger_raises_before_any_env_is_built(trigger):
    built = []
    with pytest.raises(ValueError, match=r"frames_trigger"):
        OnlineTrainer(lambda: built.append(1), RecordingAgent).multi_run(
            1, num_episodes=2, frames_trigger=trigger, progress=False
        )
    assert built == []


def test_frames_trigger_needs_an_env_that_renders_frames(tmp_path):
    steps = []
    for render_mode in (None, "human"):
        with pytest.raises(
            ValueError,
            match=rf"records.frames_trigger=2 picks the training episodes that keep their frames, "
            rf"but the env's render_mode is {render_mode!r}",
        ):
            OnlineTrainer(
                counted_vec(1, "NextStep", render_mode, [], steps), RecordingAgent, exp_dir=tmp_path
            ).multi_run(1, num_episodes=2, frames_trigger=2, progress=False)
    assert steps == []
    assert not any(tmp_path.iterdir())  # nothing ran: nothing is left behind


@pytest.mark.parametrize("trigger, kept", [(None, list(range(1, 9))), (3, [3, 6])])
def test_frames_are_written_once_to_the_metrics_stream_and_held_nowhere_else(tmp_path, trigger, kept):
    runs = OnlineTrainer(make_counting_vec(2, render_mode="rgb_array"), RecordingAgent, exp_dir=tmp_path).multi_run(
        2, num_episodes=8, seed_offset=0, frames_trigger=trigger, progress=False
    )
    all_metrics = pickle.loads((tmp_path / storage.ALL_METRICS_FILE).read_bytes())
    for run, (records, from_all) in enumerate(zip(runs, all_metrics), start=1):
        assert all(r["frames"] == [] for r in records + from_all)  # returned and all_metrics.pkl: no frames
        chunks = list(storage.iter_metrics_chunks(storage.metrics_path(tmp_path, run)))
        streamed = [r for chunk in chunks for r in chunk]
        assert [r["episode_index"] for r in streamed if r["frames"]] == kept
        for record in streamed:
            if record["frames"]:
                assert [int(f[0, 0, 0]) for f in record["frames"]] == expected_frames(record, "NextStep")
        # an episode with frames is written at the step it ends, closing its chunk: no frames wait in memory
        assert not any(r["frames"] and r["global_step"] != chunk[-1]["global_step"] for chunk in chunks for r in chunk)
        assert strip([streamed]) == strip([records]) == strip([from_all])


def test_frames_stay_in_the_records_without_a_metrics_stream(tmp_path):
    (records,) = OnlineTrainer(
        make_counting_vec(2, render_mode="rgb_array"), RecordingAgent, exp_dir=tmp_path
    ).multi_run(1, num_episodes=6, seed_offset=0, dump_metrics=False, frames_trigger=2, progress=False)
    assert [r["episode_index"] for r in records if r["frames"]] == [2, 4, 6]
    assert not list(tmp_path.glob("metrics_run*.pkl"))


def test_a_frames_trigger_that_cannot_travel_to_workers_is_reported_before_any_run(tmp_path):
    lock = threading.Lock()
    with pytest.raises(TypeError, match=r"frames_trigger=.* cannot be sent to worker processes"):
        OnlineTrainer(make_counting_vec(1, render_mode="rgb_array"), RecordingAgent, exp_dir=tmp_path).multi_run(
            2, num_episodes=2, num_workers=2, frames_trigger=lambda i: lock.locked(), progress=False
        )
    assert not any(tmp_path.iterdir())
