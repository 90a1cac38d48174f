"""Which score the analysis reads, and the note when the returns read differ from the raw scores recorded."""

from __future__ import annotations

import pandas as pd

from online_trainer.analysis.scores import score_table, unread_raw_note


def table(**columns):
    return pd.DataFrame({"run": 1, "episode_index": range(1, 4), **columns})


def test_the_note_names_the_experiments_whose_raw_scores_differ_and_only_when_they_do():
    """V16: with several experiments the note did not say which one's raw scores differ."""
    df = pd.concat(
        [
            table(experiment="plain", ep_return=[1.0, 2.0, 3.0], raw_return=[1.0, 2.0, 3.0]),
            table(experiment="clipped", ep_return=[0.5, 0.5, 0.5], raw_return=[1.0, 2.0, 3.0]),
        ],
        ignore_index=True,
    )
    assert "its runs' raw scores (clipped) (RecordEpisodeStatistics) differ" in unread_raw_note(df)
    assert unread_raw_note(df[df["experiment"] == "plain"]) is None  # equal: nothing to say
    assert unread_raw_note(table(ep_return=[1.0, 2.0, 3.0])) is None  # no raw scores recorded
    assert unread_raw_note(score_table(df, "raw")) is None  # the raw scores are what is read


def test_score_return_of_a_table_marked_raw_is_marked_return():
    """V16: score="return" of an experiment run with records.score=raw still read as raw downstream."""
    df = table(ep_return=[0.5, 0.5, 0.5], raw_return=[1.0, 2.0, 3.0])
    df.attrs["score"] = "raw"
    read = score_table(df, "return")
    assert read.attrs["score"] == "return" and read["ep_return"].tolist() == [0.5, 0.5, 0.5]
    assert df.attrs["score"] == "raw"  # the caller's table is left as it was
    assert score_table(read, None)["ep_return"].tolist() == [0.5, 0.5, 0.5]
