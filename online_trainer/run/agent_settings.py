"""What agent an experiment trained, kept in ``agent.json``, and the check that a resumed call builds the same one.

An agent is given as a factory (or an instance), which the runner cannot compare between two calls: a
resume whose factory builds its agents with another batch size would train some runs of the experiment
otherwise than the others, and nothing would say so. What it can compare is what the agent says of itself
as it is built, before ``reset``, ``set_num_env`` and ``set_hp``: its class (by qualified name: the class of
a script's ``__main__`` is the one its module exports) and its settings, the attributes that hold plain
values (numbers, strings, booleans, None, short lists of them) and those of the groups of settings it holds
(the reference agents' ``config``: ``config.batch_size``; see :func:`agent_settings`), but its device. The
first run of a call that starts the experiment records them in ``agent.json`` (a resumed call records
nothing: one whose user removed the file, as a refusal says to for a setting that is no choice, resumes
unchecked); every run of a resumed call checks its agent against them before its first step.
Hyperparameters a sweep gives through ``set_hp`` come after, and are the sweep's to check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import types
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
    """What ``agent``, just built, says of itself: ``{"class": module.qualname, "qualname": ..., "settings": ...}``.

    Settings are its attributes (``__dict__`` and ``__slots__``) holding plain values, and, under dotted names,
    those of the groups of settings it holds, up to three levels down: dataclass instances (``config.batch_size``),
    ``argparse.Namespace`` and ``types.SimpleNamespace`` objects (``args.lr``) and dicts with string keys. A setting
    named ``device`` or ``*_device`` is left out: a run may resume on another device.
    """
    settings: dict[str, Any] = {}
    _collect(_attributes(agent), "", settings, depth=0)
    cls = type(agent)
    return {"class": f"{cls.__module__}.{cls.__qualname__}", "qualname": cls.__qualname__, "settings": settings}


def _attributes(obj: Any) -> dict[str, Any]:
    """``obj``'s instance attributes: its ``__dict__`` and the ``__slots__`` of its classes that are set."""
    found = dict(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and name not in found and hasattr(obj, name):
                found[name] = getattr(obj, name)
    return found


def _collect(values: dict[Any, Any], prefix: str, settings: dict[str, Any], depth: int) -> None:
    for name, value in sorted(values.items(), key=lambda item: str(item[0])):
        if not isinstance(name, str) or name == "device" or name.endswith("_device"):
            continue
        plain = _plain(value)
        if plain is not _SKIP:
            settings[prefix + name] = plain
        elif depth < 3:
            group = _group(value)
            if group is not None:
                _collect(group, f"{prefix}{name}.", settings, depth + 1)


def _group(value: Any) -> dict[Any, Any] | None:
    """The settings ``value`` groups (see :func:`agent_settings`), or None when it is no such group."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name, None) for field in dataclasses.fields(value)}
    if type(value) in (argparse.Namespace, types.SimpleNamespace):
        return vars(value)
    if type(value) is dict and all(isinstance(key, str) for key in value):
        return value
    return None


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


def check_settings(exp_dir: str | os.PathLike, settings: dict[str, Any], run: str, how: str = "resume=True") -> None:
    """Raise unless ``settings`` (run ``run``'s agent in a call that continues the experiment, ``how``: a resumed
    call, a sweep called again) are those of the agent the experiment trained.

    The class is compared, and every setting both sides record (an attribute one of them lacks is not). A
    configuration of a sweep that has no record of its own (it had not started) is compared with the other
    configurations' agents, a sweep's configurations sharing their agent factory: on the settings they all agree
    on (a time or a random draw made as the agent is built differs between them, and is left out).

    Raises:
        ValueError: naming each setting that differs with both values, and what to do.
    """
    exp_dir = Path(exp_dir)
    recorded, sources = recorded_settings(exp_dir), [exp_dir]
    whose = "the agent it trained"
    if recorded is None and not agent_path(exp_dir).exists():  # a sweep's configuration that had not started yet
        sources = _sibling_records(exp_dir)
        records = [r for r in map(recorded_settings, sources) if r is not None]
        recorded = _common(records) if records else None
        names = ", ".join(repr(p.name) for p in sources)
        whose = f"the agent its sweep trained (configuration{'s' if len(sources) > 1 else ''} {names})"
    if recorded is None:
        return
    differences = []
    # by qualname: the class of a script's __main__ is the same class imported from its module by another driver
    if recorded.get("qualname") is not None and recorded["qualname"] != settings["qualname"]:
        differences.append(f"its class is {settings['class']} (it ran with {recorded['class']})")
    else:
        mine, theirs = settings["settings"], recorded["settings"]
        differences += [
            f"{name} {mine[name]!r} (it ran with {theirs[name]!r})"
            for name in sorted(mine.keys() & theirs.keys())
            if mine[name] != theirs[name]
        ]
    if differences:
        shown = "; ".join(differences[:6]) + (f"; and {len(differences) - 6} more" if len(differences) > 6 else "")
        files = " and ".join(repr(os.fspath(agent_path(p))) for p in sources)
        raise ValueError(
            f"{how} continues the experiment in {os.fspath(exp_dir)!r} with {whose}, but {run}'s "
            f"agent differs: {shown}. Its runs would not all train the same agent. Call it with the agent factory it "
            "was made with (the same arguments, the same code), or start a new experiment in another exp_dir. "
            f"(If a setting named here is not one you chose, such as a time or a "
            f"random draw made when the agent is built, remove {files}: the runs then resume unchecked.)"
        )


def _common(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What ``records`` of several configurations agree on: their class (None when they differ) and the settings
    all of them hold with one value."""
    first, rest = records[0], records[1:]
    classes = {r.get("qualname") for r in records}
    settings = {
        name: value
        for name, value in first["settings"].items()
        if all(name in r["settings"] and r["settings"][name] == value for r in rest)
    }
    same = len(classes) == 1
    return {"class": first.get("class"), "qualname": first.get("qualname") if same else None, "settings": settings}


def _sibling_records(exp_dir: Path) -> list[Path]:
    """The other configurations of the sweep ``exp_dir`` belongs to that recorded their agent, by name; none when
    ``exp_dir`` is not in a sweep's directory."""
    root = exp_dir.parent
    if not (root / storage.SWEEP_FILE).is_file():
        return []
    return [p for p in sorted(root.iterdir()) if p != exp_dir and agent_path(p).is_file()]
