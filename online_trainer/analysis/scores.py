"""Which score the analysis reads: the return the agent learned from, or the raw score.

Runs whose env has a ``gymnasium.wrappers.RecordEpisodeStatistics`` inside its wrappers record
``raw_return`` and ``raw_length`` beside ``ep_return`` and ``ep_length`` (the game score beside
the sum of clipped rewards, say). :func:`score_table` hands the analysis a table whose
``ep_return`` and ``ep_length`` are the score asked for, so every statistic and curve reads
one column whichever score it is.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

SCORE_ATTR = "score"
"""``df.attrs`` key :func:`~online_trainer.analysis.dataframes.load_episodes` sets to ``"raw"`` when
every experiment it loaded ran with ``score="raw"``: the default score of the analysis."""

SCORES = ("return", "raw")
"""Accepted values of the ``score`` argument of the analysis."""


def score_table(df: pd.DataFrame, score: str | None) -> pd.DataFrame:
    """``df`` itself for ``score="return"``; for ``"raw"``, a copy whose ``ep_return`` and ``ep_length`` are raw.

    Args:
        df: an episode table.
        score: ``"return"``, ``"raw"``, or None for ``df.attrs["score"]`` (``"return"`` when unset).

    Raises:
        ValueError: an unknown ``score``, or ``"raw"`` for a table without ``raw_return``.
    """
    chosen: Any = df.attrs.get(SCORE_ATTR, "return") if score is None else score
    if chosen not in SCORES:
        raise ValueError(f"score must be one of {', '.join(map(repr, SCORES))} or None but got score={score!r}.")
    if chosen == "return":
        return df
    if "raw_return" not in df.columns:
        raise ValueError("score='raw' needs the raw_return column, which this table lacks: its runs recorded no raw "
                         "scores (add gymnasium.wrappers:RecordEpisodeStatistics inside the env's wrappers), or "
                         "pass score='return'.")
    table = df.copy()
    table["ep_return"] = df["raw_return"]
    if "raw_length" in df.columns:
        table["ep_length"] = df["raw_length"]
    return table
