"""Frames are kept per sub-env and attached to the episode that produced them."""

from __future__ import annotations

import pytest

from online_trainer import OnlineTrainer
from tests.conftest import RecordingAgent, make_counting_vec


@pytest.mark.parametrize("mode", ["NextStep", "SameStep", "Disabled"])
@pytest.mark.parametrize("render_mode", ["rgb_array", "rgb_array_list"])
def test_frames_belong_to_their_episode(mode, render_mode):
    runs = OnlineTrainer(make_counting_vec(2, mode, render_mode=render_mode), RecordingAgent).multi_run(
        1, num_episodes=6, seed_offset=0, progress=False)
    for record in runs[0]:
        frames = record["frames"]
        # the reset frame (t=0) and one per step, t=1..L
        expected = list(range(record["ep_length"] + 1))
        if mode == "SameStep":
            expected = expected[:-1]  # the final frame is rendered after the same-step reset
        assert [int(f[0, 0, 0]) for f in frames] == expected


def test_ansi_frames_and_human_mode():
    (records,) = OnlineTrainer(make_counting_vec(1, render_mode="ansi"), RecordingAgent).multi_run(
        1, num_episodes=2, seed_offset=0, progress=False)
    assert records[0]["frames"] == ["t=0", "t=1", "t=2"]
    (records,) = OnlineTrainer(make_counting_vec(1, render_mode="human"), RecordingAgent).multi_run(
        1, num_episodes=2, seed_offset=0, progress=False)
    assert records[0]["frames"] == []
