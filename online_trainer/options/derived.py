"""What derives from the option groups' fields: the manifest's record of a call, the previous release's names, the
fields' docstrings (for the reference page).

Nothing here declares an option: each is a field of :mod:`online_trainer.options.groups`.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import warnings
from collections.abc import Mapping
from typing import Any

from online_trainer.loop.hook_protocol import stateful_hook_record
from online_trainer.options.groups import SECTIONS, EvaluationOptions, OptionGroup, RunPlan

__all__ = ["EVAL_ENV_GIVEN", "LEGACY_NAMES", "RunOptions", "call_record", "field_docs", "fold_legacy"]


# ------------------------------------------------------------------------ the record of a call

EVAL_ENV_GIVEN = "evaluation.env_given"
"""Key of a call's record: whether ``evaluation.env`` was given (evaluations on the training env's factory, or on
another: a resumed run's evaluations must stay on one)."""


def call_record(plan: OptionGroup, tuning_hp: Mapping[str, Any] | None, train: bool) -> dict[str, Any]:
    """What the records of a run depend on besides its seed, by dotted key: a resumed call must give the same.

    Every field of ``plan`` and of its groups, but those declared ``affects_records=False``; a group that is
    None (no evaluation) is recorded as ``{"evaluation": False}``, a given one as ``True`` and its fields.
    Values that are not plain data (a callable, an env) are recorded as None: they cannot be compared.
    Of the user's hooks, those with state (a full checkpoint keeps it) are recorded under ``hooks``, with the
    arguments they were made with (:func:`~online_trainer.loop.hook_protocol.stateful_hook_record`).
    """
    record: dict[str, Any] = {}
    _record_fields(plan, "", record)
    if isinstance(plan, RunPlan):
        record["hooks"] = stateful_hook_record(plan.hooks)
        if plan.evaluation is not None:  # a factory is recorded as None, as no env is: whether one was given is not
            record[EVAL_ENV_GIVEN] = plan.evaluation.env is not None
    record.update(tuning_hp=dict(tuning_hp or {}) or None, train=bool(train))
    return json.loads(json.dumps(record))


def _record_fields(group: OptionGroup, prefix: str, record: dict[str, Any]) -> None:
    for spec in dataclasses.fields(group):
        if not spec.init or not spec.metadata.get("affects_records", True):
            continue
        value, key = getattr(group, spec.name), prefix + spec.name
        if isinstance(value, OptionGroup):
            record[key] = True
            _record_fields(value, key + ".", record)
        elif value is None and spec.name in SECTIONS:
            record[key] = False
        else:
            record[key] = _plain(value)


def _plain(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return None
    return value


# ------------------------------------------------------------------------ the previous release's names


LEGACY_NAMES: dict[str, str] = {
    "eval_env": "evaluation.env",
    "eval_freq": "evaluation.freq",
    "eval_episodes": "evaluation.episodes",
    "record_video": "evaluation.record_video",
    "keep_checkpoints": "checkpoints.keep",
    "checkpoint_buffers": "checkpoints.buffers",
    "keep_records": "records.in_memory",
    "keep_agents": "records.keep_agents",
    "metrics_flush_every": "records.flush_every",
    "frames_trigger": "records.frames_trigger",
    "stats_window": "records.stats_window",
    "stats_every_steps": "records.stats_every_steps",
    "score": "records.score",
    "num_workers": "execution.num_workers",
    "progress": "execution.progress",
    "start_method": "execution.start_method",
    "torch_threads": "execution.torch_threads",
    "backend": "execution.backend",
    "ray_address": "execution.ray_address",
    "ray_resources": "execution.ray_resources",
    "num_episodes": "evaluation.episodes",
}
"""The flat keywords (and YAML keys) of the previous release, by their new dotted spelling; they work for one
release, with a ``DeprecationWarning``. Only names that are not parameters of the call are translated:
``num_workers`` and ``num_episodes`` stay ``multi_run``'s own; ``num_episodes`` of ``evaluate`` is
``evaluation.episodes``."""


def fold_legacy(call: str, legacy: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The option groups of ``call`` with the flat keywords ``legacy`` folded in, each with a DeprecationWarning.

    Args:
        call: what was called (``"multi_run"``), for the messages.
        legacy: flat keywords of the previous release (names of :data:`LEGACY_NAMES`).
        given: the groups the call was given (``{"evaluation": EvaluationOptions(...) or None, ...}``).

    Returns:
        ``given`` with each group that a flat keyword sets built or checked.

    Raises:
        TypeError: a flat keyword sets a group the call does not take.
        ValueError: a flat keyword disagrees with the group given too.
    """
    groups: dict[str, dict[str, Any]] = {}
    for old, value in legacy.items():
        section, name = LEGACY_NAMES[old].split(".")
        cls = SECTIONS[section]
        shown = repr(value) if len(repr(value)) <= 40 else "..."
        warnings.warn(
            f"{call}({old}={shown}) is deprecated and will be removed in the next release: pass "
            f"{section}={cls.__name__}({name}={shown}) instead.",
            DeprecationWarning,
            stacklevel=3,
        )
        if section not in given:
            raise TypeError(f"{call}() got an unexpected keyword argument {old!r} ({call} takes no {section}).")
        default = _default(cls, name)
        if value is None and default is not None:  # the previous release's "None: the default"
            continue
        groups.setdefault(section, {})[name] = value
    result = dict(given)
    evaluation = groups.get("evaluation")
    on = {name for name, value in (evaluation or {}).items() if value is not None} & {"env", "freq", "record_video"}
    if evaluation is not None and not on and call != "evaluate":
        del groups["evaluation"]  # without eval_env, eval_freq or record_video nothing was evaluated: still not
    for section, values in groups.items():
        current = given[section]
        if current is None:
            result[section] = SECTIONS[section](**values)
            continue
        fills = {}
        for name, value in values.items():
            if getattr(current, name) == value:
                continue
            if not current.given(name) and getattr(current, name) == _default(SECTIONS[section], name):
                fills[name] = value  # a field the group was built without (M22: sweep refused num_workers=2 then)
                continue
            old = next(k for k, v in LEGACY_NAMES.items() if v == f"{section}.{name}" and k in legacy)
            raise ValueError(
                f"{old}={value!r} disagrees with {section}.{name}={getattr(current, name)!r}: give it "
                f"once, as {section}={type(current).__name__}({name}=...)."
            )
        if fills:
            result[section] = dataclasses.replace(current, **fills)
    return result


def _default(cls: type, name: str) -> Any:
    spec = next(spec for spec in dataclasses.fields(cls) if spec.name == name)
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


def RunOptions(**flat: Any) -> RunPlan:  # noqa: N802  (the previous release's class)
    """Deprecated: the previous release's flat options object, now a :class:`RunPlan` of option groups.

    ``RunOptions(total_steps=10, eval_freq=5)`` is ``RunPlan(total_steps=10, evaluation=EvaluationOptions(freq=5))``.
    """
    warnings.warn(
        "RunOptions is deprecated and will be removed in the next release: pass the option groups "
        "(EvaluationOptions, CheckpointOptions, RecordOptions, ExecutionOptions) to multi_run.",
        DeprecationWarning,
        stacklevel=2,
    )
    evaluate = flat.pop("evaluate", None)
    own = {name: flat.pop(name) for name in list(flat) if name in {f.name for f in dataclasses.fields(RunPlan)}}
    groups = fold_legacy("RunOptions", flat, {"evaluation": None, "checkpoints": None, "records": None})
    if evaluate and groups["evaluation"] is None:
        groups["evaluation"] = EvaluationOptions(episodes=flat.get("eval_episodes", 10))
    return RunPlan(**own, **{name: value for name, value in groups.items() if value is not None})


# ------------------------------------------------------------------------ docstrings


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstring of each field of the dataclass ``cls`` (and of its bases), whitespace folded."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass) or klass is object:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:]):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs
