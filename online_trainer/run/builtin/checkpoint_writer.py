"""The built-in hook that writes a run's checkpoints and keeps its best agent state.

With ``checkpoint_freq``: ``agent.save(exp_dir/Run{i}_E{n})`` after every ``checkpoint_freq``-th
episode (episode budget) or ``agent.save(exp_dir/Run{i}_S{n})`` every ``checkpoint_freq`` env
steps (step budget); ``Run{i}_Last`` when the run ends; ``Run{i}_Best_agent.t``, the
``torch.save``d state ``agent.save()`` returned at the best training episode, or at the best
evaluation when the run evaluates (``agent.save(exp_dir/Run{i}_Best)`` then, for an agent whose
``save()`` returns no state). ``keep_checkpoints=K`` keeps the last K periodic
checkpoints of the run (``Last`` and ``Best`` are never deleted). Checkpoints hold a replay
buffer as the agent's own ``save`` decides (``save_buffer=True`` for DQN and SAC; the run's
full checkpoint takes it with ``checkpoint_buffers=True``, see :mod:`online_trainer.run.full_checkpoint`);
the best state never holds one (``save(buffers=False)`` for agents whose ``save`` takes ``buffers``).
When the training env has ``NormalizeObservation`` wrappers, each checkpoint has their statistics beside it, as they
were when it was written (``Run{i}_S{n}_obs_statistics.npz``, ``Run{i}_Best_obs_statistics.npz``...): evaluating it
later plays as an evaluation during training did (see :mod:`online_trainer.loop.normalization`).
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from online_trainer.loop.budget import INFINITY
from online_trainer.loop.factories import accepts_keyword
from online_trainer.loop.hook_protocol import Hook, RunContext
from online_trainer.loop.normalization import observation_statistics, statistics_bytes, statistics_path
from online_trainer.records import storage
from online_trainer.run.builtin.scheduled_evaluation import RunEvaluations

logger = logging.getLogger(__name__)


def serialised(state: Any) -> bytes:
    """``state`` as ``torch.save`` writes it: a copy the agent cannot change later."""
    import torch

    buffer = io.BytesIO()
    try:
        torch.save(state, buffer)
    except (TypeError, AttributeError, pickle.PicklingError) as exc:
        raise TypeError(
            f"what the agent's save() returned does not pickle ({type(exc).__name__}: {exc}), so its best state "
            "cannot be kept: return what pickles from it (tensors, arrays, numbers, dicts of them)."
        ) from exc
    return buffer.getvalue()


def remove_checkpoint(prefix: Path) -> None:
    """Delete what ``agent.save(prefix)`` wrote (see :func:`online_trainer.records.storage.saved_by`)."""
    for path in storage.saved_by(prefix):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


_WARNED_EMPTY: set[str] = set()  # the runs (their directory and number) told that save(path) wrote nothing


def warn_if_nothing_saved(agent: Any, prefix: Path) -> None:
    """Warn, once per run, when ``agent.save(prefix)`` wrote no file or folder by the names the runner finds a
    checkpoint's files by (:func:`~online_trainer.records.storage.saved_by`): its checkpoints would hold nothing, and
    a resume nothing to load (tester A16: no word until ``evaluate`` asked whether ``checkpoint_freq`` was set)."""
    if storage.saved_by(prefix):
        return
    run = re.match(r"Run\d+", prefix.name)
    key = os.fspath(prefix.parent / (run.group(0) if run else prefix.name))
    if key in _WARNED_EMPTY:
        return
    _WARNED_EMPTY.add(key)
    logger.warning(
        "%s.save(%r) returned no state and wrote no file or folder named %s, %s.* or %s_*: its checkpoints hold "
        "nothing the runner can find, evaluate or give back to it on resume. Make save(path) write under the path "
        "it is given (or return its state).",
        type(agent).__name__,
        os.fspath(prefix),
        prefix.name,
        prefix.name,
        prefix.name,
    )


class RunCheckpoints(Hook):
    """Writes one run's checkpoints and keeps its best agent state (see the module docstring).

    Args:
        agent: the run's agent (it has ``save``).
        exp_dir: the experiment directory.
        run_idx: the run's number.
        freq: ``checkpoint_freq``: episodes (``by_episode``) or env steps between checkpoints.
        by_episode: the run has an episode budget.
        evaluations: the run's scheduled evaluations (None: it runs none): the best state is then the one at the
            best of their means. Evaluations a user hook announces (``ctx.evaluated``) are on another env or scale,
            and recorded nowhere: they do not choose it.
        keep: keep only the last this many periodic checkpoints; None keeps them all.
    """

    def __init__(
        self,
        agent: Any,
        exp_dir: str | os.PathLike,
        run_idx: int,
        freq: int,
        by_episode: bool,
        evaluations: RunEvaluations | None,
        keep: int | None = None,
    ) -> None:
        self.agent, self.exp_dir, self.run_idx, self.freq = agent, exp_dir, run_idx, freq
        self.by_episode, self.evaluations, self.keep = by_episode, evaluations, keep
        by_eval = evaluations is not None
        self.best_kwargs = {"buffers": False} if accepts_keyword(agent.save, "buffers") else {}
        self.next_step: float = INFINITY if by_episode else freq
        self.best_return = -INFINITY
        """The best training return, or the best evaluation mean when the run evaluates."""
        self.best_state: bytes | None = None  # torch-serialised, see _keep_best
        self.best_statistics: bytes | None = None  # the training env's observation statistics then, as .npz bytes
        self.saved: list[str] = []  # labels of the periodic checkpoints on disk, oldest first
        self.every_steps = None if by_episode else freq
        # episodes: the best training return (without evaluations) and checkpoints every freq-th episode
        self.handles = frozenset(
            {"on_run_end", "on_step" if not by_episode else "on_episodes", "on_eval" if by_eval else "on_episodes"}
        )

    def on_episodes(self, ctx: RunContext, first_index: int, returns: Sequence[float], lengths: Sequence[int]) -> None:
        if self.evaluations is None:
            best = max((r for r in returns if r > self.best_return), default=None)
            if best is not None:
                self._keep_best(ctx, float(best))
        if self.by_episode:
            freq = self.freq
            index = -(-first_index // freq) * freq  # the first multiple of freq among the batch's indices
            while index < first_index + len(returns):
                self._save(ctx, f"E{index}", periodic=True)
                index += freq

    def on_step(self, ctx: RunContext) -> None:
        while ctx.global_step >= self.next_step:
            self._save(ctx, f"S{int(self.next_step)}", periodic=True)
            self.next_step += self.freq

    def on_eval(self, ctx: RunContext, result: dict[str, Any]) -> None:
        assert self.evaluations is not None  # on_eval is handled only for a run that evaluates
        records = self.evaluations.records
        if records and result is records[-1] and result["mean"] > self.best_return:
            self._keep_best(ctx, result["mean"])

    def _keep_best(self, ctx: RunContext, value: float) -> None:
        """``agent.save()`` now, torch-serialised: a new best costs one serialisation, not a deep copy now and
        a serialisation at the end. An agent whose ``save()`` returns no state (it saves to files only, as
        Stable-Baselines3's models do) saves its best to ``Run{i}_Best`` now, with ``save(path)``: a None
        state was kept as the best, and the best agent lost."""
        self.best_return = value
        state = self.agent.save(**self.best_kwargs)
        statistics = observation_statistics(ctx.env)
        self.best_statistics = None if statistics is None else statistics_bytes(statistics)
        if state is None:
            prefix = storage.best_agent_prefix(self.exp_dir, self.run_idx)
            remove_checkpoint(prefix)  # the earlier best's files: a new save may name its files otherwise
            self.agent.save(os.fspath(prefix))
            warn_if_nothing_saved(self.agent, prefix)
            self._write_statistics(prefix, self.best_statistics)
            self.best_state = None
            return
        self.best_state = serialised(state)

    @staticmethod
    def _write_statistics(prefix: Path, statistics: bytes | None) -> None:
        if statistics is not None:
            storage.write_atomic(statistics_path(prefix), statistics)

    def _save(self, ctx: RunContext, label: str, periodic: bool = False) -> None:
        """``agent.save`` to ``Run{i}_{label}``, announced to every hook (and, for a periodic one, a full checkpoint
        of the run at the end of the step); the oldest periodic checkpoints beyond ``keep`` are then deleted."""
        prefix = storage.checkpoint_path(self.exp_dir, self.run_idx, label)
        path = os.fspath(prefix)
        self.agent.save(path)
        warn_if_nothing_saved(self.agent, prefix)
        statistics = observation_statistics(ctx.env)
        self._write_statistics(prefix, None if statistics is None else statistics_bytes(statistics))
        if periodic:
            self.saved.append(label)
        ctx.checkpointed(path)
        while periodic and self.keep is not None and len(self.saved) > self.keep:
            remove_checkpoint(storage.checkpoint_path(self.exp_dir, self.run_idx, self.saved.pop(0)))

    def on_run_end(self, ctx: RunContext) -> None:
        """``Run{i}_Last`` and ``Run{i}_Best_agent.t`` (when some state was kept)."""
        self._save(ctx, "Last")
        if self.best_state is not None:
            storage.write_atomic(storage.best_agent_path(self.exp_dir, self.run_idx), self.best_state)
            self._write_statistics(storage.best_agent_prefix(self.exp_dir, self.run_idx), self.best_statistics)

    def state_dict(self) -> dict[str, Any]:
        """``next_step``: the env step of the next periodic checkpoint (step budget); ``best_return`` and
        ``best_state`` (bytes, or None) and ``best_statistics`` (the observation statistics then: ``.npz`` bytes, or
        None); ``saved``: the labels of the periodic checkpoints kept on disk."""
        return {
            "next_step": self.next_step,
            "best_return": self.best_return,
            "best_state": self.best_state,
            "best_statistics": self.best_statistics,
            "saved": list(self.saved),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_step, self.best_return = state["next_step"], float(state["best_return"])
        self.best_state, self.saved = state["best_state"], list(state["saved"])
        self.best_statistics = state.get("best_statistics")  # a checkpoint of a release that kept none
