"""Which score the analysis reads: the return the agent learned from, or the raw score.

Runs whose env has a ``gymnasium.wrappers.RecordEpisodeStatistics`` inside its wrappers record
``raw_return`` and ``raw_length`` beside ``ep_return`` and ``ep_length`` (the game score beside
the sum of clipped rewards, say). :func:`score_table` hands the analysis a table whose
``ep_return`` and ``ep_length`` are the score asked for, so every statistic and curve reads
one column whichever score it is.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from online_trainer.records import storage

SCORE_ATTR = "score"
"""``df.attrs`` key :func:`~online_trainer.analysis.dataframes.load_episodes` sets to ``"raw"`` when
every experiment it loaded ran with ``score="raw"``: the default score of the analysis."""

SCORES = ("return", "raw")
"""Accepted values of the ``score`` argument of the analysis."""

RAW_COLUMNS = ["raw_return", "raw_length"]
"""Episode-table columns of the raw scores, present when some run recorded them (``RecordEpisodeStatistics``
in its env's wrappers)."""


def experiment_score(exp_dir: str | os.PathLike) -> str:
    """The ``score`` an experiment ran with, from its manifest: ``"raw"`` or ``"return"`` (also without a manifest)."""
    exp_dir = Path(exp_dir)
    if not (exp_dir / storage.MANIFEST_FILE).is_file():
        return "return"
    return storage.read_manifest(exp_dir).get("score", "return")


MIXED_ATTR = "score_mixed"
"""``df.attrs`` key set, when some experiments loaded together ran with ``score="raw"`` and others did not, to the
names of the raw ones: the analysis then reads ``ep_return`` for all (one score for a comparison), which the
command's tables say."""


def mark_score(df: pd.DataFrame, exp_dirs: Sequence[str | os.PathLike]) -> None:
    """Set ``df.attrs["score"]`` to ``"raw"`` when every experiment of ``exp_dirs`` ran with ``score="raw"``; when
    only some did, set ``df.attrs["score_mixed"]`` to their names."""
    scores = [experiment_score(exp_dir) for exp_dir in exp_dirs]
    if scores and all(score == "raw" for score in scores):
        df.attrs[SCORE_ATTR] = "raw"
    elif "raw" in scores:
        df.attrs[MIXED_ATTR] = [Path(d).name for d, score in zip(exp_dirs, scores) if score == "raw"]


def score_table(df: pd.DataFrame, score: str | None) -> pd.DataFrame:
    """``df`` itself for ``score="return"`` (a shallow copy marked so when ``df`` is marked raw); for ``"raw"``, a copy
    whose ``ep_return`` and ``ep_length`` are raw.

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
        if df.attrs.get(SCORE_ATTR) != "raw":
            return df
        table = df.copy(deep=False)  # an experiment scored raw, read by its returns: say so to what reads it next
        table.attrs[SCORE_ATTR] = "return"  # (V16: show --score return printed raw returns)
        return table
    if "raw_return" not in df.columns:
        raise ValueError(
            "score='raw' needs the raw_return column, which this table lacks: its runs recorded no raw "
            "scores (add gymnasium.wrappers:RecordEpisodeStatistics inside the env's wrappers), or "
            "pass score='return'."
        )
    table = df.copy()
    table.attrs[SCORE_ATTR] = "raw"  # its ep_return is raw_return: what messages about it call it
    table["ep_return"] = df["raw_return"]
    if "raw_length" in df.columns:
        table["ep_length"] = df["raw_length"]
    return table


def unread_raw_note(df: pd.DataFrame) -> str | None:
    """A note when ``df``'s returns are the rewards the agent learned from while its runs also recorded raw scores
    that differ (a ``NormalizeReward`` or a reward clip around a ``RecordEpisodeStatistics``), naming the experiments
    whose do when the table holds several; None otherwise (raw scores read, none recorded, or equal to the returns)."""
    if df.attrs.get(SCORE_ATTR) == "raw" or "raw_return" not in df.columns or df.empty:
        return None
    returns, raw = df["ep_return"].to_numpy(float), df["raw_return"].to_numpy(float)
    both = np.isfinite(returns) & np.isfinite(raw)
    differ = both & ~np.isclose(returns, raw, rtol=1e-9, atol=1e-9)
    if not differ.any():
        return None
    which = ""
    if "experiment" in df.columns and df["experiment"].nunique() > 1:
        names = list(dict.fromkeys(df.loc[differ, "experiment"].astype(str)))
        which = f" ({', '.join(names)})"
    return (
        f"Returns: sums of the rewards the agent learned from; its runs' raw scores{which} (RecordEpisodeStatistics) "
        "differ: score='raw' (--score raw) reads them."
    )
