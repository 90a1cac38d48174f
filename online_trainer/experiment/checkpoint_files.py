"""Finding a run's checkpoints and building agents from them.

A run with ``checkpoint_freq`` leaves ``Run{i}_E{n}*`` / ``Run{i}_S{n}*`` (periodic),
``Run{i}_Last*`` (the end of training; prefixes handed to ``agent.save(path)``) and
``Run{i}_Best_agent.t`` (the ``torch.save``d state ``agent.save()`` returned at the best
episode, or the best evaluation when the run evaluated; ``Run{i}_Best*``, the prefix handed to
``agent.save(path)``, for an agent whose ``save()`` returns no state).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from online_trainer.errors import value_error
from online_trainer.loop.factories import agent_name
from online_trainer.records import storage

WHICH = ("best", "last", "all")
"""Which checkpoints :func:`checkpoints` returns."""


def checkpoints(exp_dir: str | os.PathLike, run: int, which: str = "last") -> list[tuple[str, Path]]:
    """The checkpoints of run ``run`` as ``(label, path)``: ``("last", .../Run1_Last)``, ``("best", ...)``,
    and with ``which="all"`` the periodic ones first (``("S5000", ...)``), in training order.

    Raises:
        ValueError: an unknown ``which``.
        FileNotFoundError: the run has no such checkpoint (it ran without ``checkpoint_freq``).
    """
    if which not in WHICH:
        raise value_error(which, str)(f"which must be one of {WHICH}, but got which={which!r}.")
    exp_dir = Path(exp_dir)
    found: list[tuple[str, Path]] = []
    if which == "all":
        periodic = {}
        for path in exp_dir.glob(f"Run{run}_[ES]*"):
            match = re.fullmatch(rf"Run{run}_([ES])(\d+)([._-].*)?", path.name)
            if match:
                periodic[(match[1], int(match[2]))] = path.with_name(f"Run{run}_{match[1]}{match[2]}")
        found += [(f"{kind}{n}", path) for (kind, n), path in sorted(periodic.items(), key=lambda item: item[0][1])]
    last = storage.checkpoint_path(exp_dir, run, "Last")
    if which in ("last", "all") and storage.saved_by(last):
        found.append(("last", last))
    best, prefix = storage.best_agent_path(exp_dir, run), storage.best_agent_prefix(exp_dir, run)
    if which in ("best", "all") and best.is_file():
        found.append(("best", best))
    elif which in ("best", "all") and storage.saved_by(prefix):
        found.append(("best", prefix))
    if not found:
        raise FileNotFoundError(_none_found(exp_dir, run, which))
    return found


def _none_found(exp_dir: Path, run: int, which: str) -> str:
    """Why run ``run`` has no ``which`` checkpoint, and what to do."""
    what = "checkpoint" if which == "all" else f"{which!r} checkpoint"
    try:
        entry = storage.read_manifest(exp_dir)["runs"][run - 1]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        entry = {}
    status = entry.get("status") if isinstance(entry, dict) else None
    if status in ("interrupted", "running", "pending") and which == "last":
        periodic = any(exp_dir.glob(f"Run{run}_[ES][0-9]*"))
        return (
            f"Run {run} in {exp_dir} has no 'last' checkpoint: it is {status}, and its last checkpoint is written when "
            "it ends. Resume the experiment first"
            + (", or load one of its periodic checkpoints (which='all' lists them)." if periodic else ".")
        )
    if status == "pending":  # E12: it was asked whether checkpoint_freq was set, of a run that never started
        return f"Run {run} in {exp_dir} has no {what}: it is pending (it never started). Resume the experiment first."
    try:
        freq = storage.read_manifest(exp_dir)["call"]["checkpoint_freq"]
    except (OSError, ValueError, KeyError, TypeError):
        freq = None
    if freq:  # A16: it was asked whether checkpoint_freq was set, of a run whose agent's save(path) wrote nothing
        return (
            f"Run {run} in {exp_dir} has no {what}, though it ran with checkpoint_freq={freq}: its agent's "
            f"save(path) wrote no file or folder named Run{run}_Last, Run{run}_Last.*, Run{run}_Last_* (nor "
            f"Run{run}_S*/E*, Run{run}_Best*) beside the experiment's files, where the runner finds its checkpoints. "
            "Make save(path) write under the path it is given."
        )
    return f"Run {run} in {exp_dir} has no {what}: was it run with checkpoint_freq=...?"


class CheckpointAgent:
    """A picklable agent factory: ``agent_factory(env)``, then the checkpoint loaded into it.

    A ``Run{i}_Best_agent.t`` file holds the state object ``agent.save()`` returned, so it is
    read with ``torch.load`` and handed to ``agent.load(state)``; other checkpoints are the
    prefix handed to ``agent.save(path)``, given to ``agent.load(path)``.
    """

    def __init__(self, agent_factory: Callable[[Any], Any], path: str | os.PathLike) -> None:
        self.agent_factory, self.path = agent_factory, os.fspath(path)

    def __call__(self, env: Any) -> Any:
        agent = self.agent_factory(env)
        if not callable(getattr(agent, "load", None)):
            how = (
                "agent.load(state), with the state agent.save() returned"
                if self.path.endswith(".t")
                else "agent.load(path)"
            )
            raise TypeError(
                f"Loading the checkpoint {self.path} needs {how}, which the agent {agent_name(agent)} lacks."
            )
        try:
            if self.path.endswith(".t"):
                import torch

                agent.load(torch.load(self.path, map_location="cpu", weights_only=False))  # the user's own file
            else:
                agent.load(self.path)
        except Exception as exc:  # a damaged file or another agent's: the agent's own error does not say which file
            unbuilt = (
                # V22: an agent that builds its networks in reset(seed) has none yet: load() is called without reset()
                " Or the agent builds what load() fills in only in reset(seed), which is not called before load(): "
                "build it in __init__ too (reset may build it again)."
                if isinstance(exc, AttributeError)
                else ""
            )
            raise ValueError(
                f"Could not load the checkpoint {self._named()} into a {type(agent).__name__}: "
                f"{type(exc).__name__}: {str(exc).rstrip('.')}. The file may be damaged (put back a copy) or saved by "
                f"another agent or with other hyperparameters (build the agent as the experiment did).{unbuilt}"
            ) from exc
        return agent

    def _named(self) -> str:
        """The checkpoint's path, and the files ``save(path)`` wrote beside a prefix (``Run1_Last.pt``)."""
        path = Path(self.path)
        files = [p.name for p in storage.saved_by(path) if p != path] if not path.is_file() else []
        return f"{self.path} (the file{'s' if len(files) > 1 else ''} {', '.join(files)})" if files else self.path

    def __repr__(self) -> str:
        return f"CheckpointAgent({self.agent_factory!r}, {self.path!r})"
