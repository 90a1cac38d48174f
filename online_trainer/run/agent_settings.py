"""What agent an experiment trained, kept in ``agent.json``, and the check that a resumed call builds the same one.

An agent is given as a factory (or an instance), which the runner cannot compare between two calls: a
resume whose factory builds its agents with another batch size would train the runs that start again
otherwise than those that go on from a checkpoint, and nothing would say so. What it can compare is what
the agent says of itself as it is built, before ``reset``, ``set_num_env`` and ``set_hp``: its class and
its settings, the attributes that hold plain values (numbers, strings, booleans, None, short lists of
them), and those of a dataclass it holds (the reference agents' ``config``: ``config.batch_size``). The
first run of an experiment that trains records them in ``agent.json``; every run of a resumed call checks
its agent against them before its first step. Hyperparameters a sweep gives through ``set_hp`` come
after, and are the sweep's to check.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from online_trainer.records import storage

logger = logging.getLogger(__name__)

AGENT_FILE = "agent.json"
"""The experiment's agent, as :func:`agent_settings` describes it."""

_MAX_ITEMS = 32  # a longer list is data (a table, a schedule), not a setting
_SKIP = object()


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready plain data when it is a setting's (see the module docstring), else ``_SKIP``."""
    if isinstance(value, np.generic):  # before float: np.float64 is one
        return _plain(value.item()) if value.dtype.kind in "biuf" else _SKIP
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)  # nan and inf as text: JSON has neither, nan != nan
    if isinstance(value, (list, tuple)) and len(value) <= _MAX_ITEMS:
        items = [_plain(item) for item in value]
        return _SKIP if any(item is _SKIP for item in items) else items
    return _SKIP


def agent_settings(agent: Any) -> dict[str, Any]:
    """What ``agent``, just built, says of itself: ``{"class": module.qualname, "settings": {name: value}}``.

    Settings are its attributes holding plain values, and ``name.field`` for the plain fields of a
    dataclass instance it holds; an agent without ``__dict__`` (slots only) has none.
    """
    settings: dict[str, Any] = {}
    for name, value in sorted(getattr(agent, "__dict__", {}).items()):
        plain = _plain(value)
        if plain is not _SKIP:
            settings[name] = plain
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                plain = _plain(getattr(value, field.name, None))
                if plain is not _SKIP:
                    settings[f"{name}.{field.name}"] = plain
    cls = type(agent)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "settings": settings}


def agent_path(exp_dir: str | os.PathLike) -> Path:
    """Where the experiment's agent is recorded."""
    return Path(exp_dir) / AGENT_FILE


def recorded_settings(exp_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The agent the experiment in ``exp_dir`` trained (``agent.json``); None when none is recorded or it is damaged
    (said in a warning: a damaged file must not switch the check off unseen)."""
    path = agent_path(exp_dir)
    try:
        recorded = json.loads(path.read_text())
        if not isinstance(recorded, dict) or not isinstance(recorded.get("settings"), dict):
            raise ValueError("not an object with 'class' and 'settings'")
        return recorded
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        logger.warning(
            "%s is damaged (%s: %s): the agent is not checked. Put back a copy of it, or remove it: the next run "
            "records its agent there anew.",
            path,
            type(exc).__name__,
            exc,
        )
        return None


def record_settings(exp_dir: str | os.PathLike, settings: dict[str, Any]) -> None:
    """Write ``agent.json`` unless a run of the experiment has (the first run to build its agent records it)."""
    path = agent_path(exp_dir)
    if path.exists():
        return
    tmp = path.with_name(f".{AGENT_FILE}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(settings, indent=2))
        os.link(tmp, path)  # fails when another run's is there: the first one stays
    except FileExistsError:
        pass
    except OSError as exc:  # a filesystem without hard links, a full disk: the run goes on, unchecked on resume
        logger.warning("could not record the experiment's agent in %s (%s): a resume will not check it", path, exc)
    finally:
        tmp.unlink(missing_ok=True)


def check_settings(exp_dir: str | os.PathLike, settings: dict[str, Any], run: str) -> None:
    """Raise unless ``settings`` (run ``run``'s agent in a resumed call) are those of the agent the experiment trained.

    The class is compared, and every setting both sides record (an attribute one of them lacks is not). A
    configuration of a sweep that had not started is compared with another configuration's agent: a sweep's
    configurations share their agent factory.

    Raises:
        ValueError: naming each setting that differs with both values, and what to do.
    """
    recorded, whose = recorded_settings(exp_dir), "the agent it trained"
    if recorded is None and not agent_path(exp_dir).exists():  # a sweep's configuration that had not started yet
        sibling = _sibling_record(Path(exp_dir))
        if sibling is not None:
            recorded = recorded_settings(sibling)
            whose = f"the agent its sweep trained (configuration {sibling.name!r})"
    if recorded is None:
        return
    differences = []
    if recorded.get("class") != settings["class"]:
        differences.append(f"its class is {settings['class']} (it ran with {recorded.get('class')})")
    else:
        mine, theirs = settings["settings"], recorded["settings"]
        differences += [
            f"{name} {mine[name]!r} (it ran with {theirs[name]!r})"
            for name in sorted(mine.keys() & theirs.keys())
            if mine[name] != theirs[name]
        ]
    if differences:
        shown = "; ".join(differences[:6]) + (f"; and {len(differences) - 6} more" if len(differences) > 6 else "")
        raise ValueError(
            f"resume=True continues the experiment in {os.fspath(exp_dir)!r} with {whose}, but {run}'s "
            f"agent differs: {shown}. The runs that start again would train otherwise than those that go on from a "
            "checkpoint. Call it with the agent factory it was made with (the same arguments), or start a new "
            f"experiment in another exp_dir. (If a setting named here is not one you chose, such as a time or a "
            f"random draw made when the agent is built, remove {AGENT_FILE} from the experiment: its runs then "
            "resume unchecked, and the next run records its agent anew.)"
        )


def _sibling_record(exp_dir: Path) -> Path | None:
    """The first configuration (by name) of the sweep ``exp_dir`` belongs to that recorded its agent; None when
    ``exp_dir`` is not in a sweep's directory or none did."""
    root = exp_dir.parent
    if not (root / storage.SWEEP_FILE).is_file():
        return None
    return next((p for p in sorted(root.iterdir()) if p != exp_dir and agent_path(p).is_file()), None)
