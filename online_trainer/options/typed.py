"""One checker for typed option objects: a mapping validated into a (stdlib, frozen) dataclass with pydantic.

The command's YAML config (:mod:`online_trainer.config.schema`) and every agent's hyperparameters
(``AgentBase`` in ``online_trainer.agents``) go through :func:`build`, so a key, a type or a value is
checked one way wherever it is written::

    build(DQNConfig, {"lr": "0.001"}, owner="DQNAgent hyperparameters")
    # ValueError: DQNAgent hyperparameters: lr='0.001' has the wrong type: expected a number, got str (write 0.001, without quotes).

Plain data (what YAML or JSON gives: mappings, lists, strings, numbers, bools, null; numpy scalars
and arrays count as their Python values) is validated strictly: ``true`` is not an int, ``1.0`` and
``"1"`` are not ints, an int is a number, a list fills a tuple, ``.inf`` is a number. Data that does not
encode as JSON (a callable or another object given from Python) is validated the lenient way pydantic
validates Python objects. The dataclasses need no pydantic of their own: every dataclass reached from
``cls`` that does not set ``__pydantic_config__`` itself is given one that forbids unknown keys and reads
the fields' docstrings (shown for a missing key).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import pydantic

__all__ = ["build", "did_you_mean", "type_name", "unknown_key_message"]

T = TypeVar("T")

_CONFIG = pydantic.ConfigDict(extra="forbid", use_attribute_docstrings=True)
_UNKNOWN = ("unexpected_keyword_argument", "extra_forbidden")
_MISSING = ("missing", "missing_keyword_only_argument", "missing_argument")
_ABSENT = object()


def build(
    cls: type[T], data: Any, prefix: str = "", error: type[Exception] = ValueError, *, owner: str | None = None
) -> T:
    """``cls(**data)`` for the dataclass ``cls``, nested sections included, every key and type checked.

    Args:
        cls: a dataclass; fields that are dataclasses take mappings (sections), tuple fields take lists.
        data: the mapping of field names to values.
        prefix: the dotted path of ``data`` in a larger file (``"env."``), put before every key named.
        error: the exception class raised for a problem.
        owner: who ``data`` belongs to (``"DQNAgent hyperparameters"``), put before every message.

    Returns:
        The validated instance; values come back as their field's type (a list as a tuple, an int as a
        float where a number is expected).

    Raises:
        error: naming each unknown key (with the nearest valid one and the list of valid keys), each
            missing key (with its field's docstring) and each value of the wrong type (the key, the
            value, the expected type). An exception that ``cls.__post_init__`` (or a nested section's)
            raises passes through as it is when it is an ``error``; otherwise its text is raised as
            ``error``, after the owner and the section.
    """
    adapter = _adapter(cls)  # type: ignore[arg-type]  # a class is hashable; mypy does not see type[T] as Hashable
    try:
        text = json.dumps(data, default=_plain)
    except (TypeError, ValueError):  # a callable, an object: pydantic's lenient Python validation
        text = None
    try:
        return adapter.validate_python(data) if text is None else adapter.validate_json(text, strict=True)
    except pydantic.ValidationError as exc:
        problem = _translate(exc, cls, data, prefix, error, owner)
    raise problem from problem.__cause__


_PYTHON_CONSTANTS = re.compile(r"\b(None|True|False)\b")
_YAML_CONSTANTS = {"None": "null", "True": "true", "False": "false"}


def yaml_spelling(message: str) -> str:
    """``message`` with the constants it names spelled as in YAML: ``time=None`` as ``time=null``, ``True`` as
    ``true`` (an option's check speaks Python; read from a config file, the same value is given in YAML)."""
    return _PYTHON_CONSTANTS.sub(lambda match: _YAML_CONSTANTS[match.group(1)], message)


def did_you_mean(word: str, choices: Sequence[str] | Mapping[str, Any], prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` (difflib), or an empty string."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""


def unknown_key_message(
    prefix: str,
    key: Any,
    names: Sequence[str],
    *,
    nested_in_owner: bool = False,
    known_as: Mapping[str, str] | None = None,
) -> str:
    """``unknown key 'env.num_env' (did you mean 'env.num_envs'?); valid keys of env: id, num_envs, ...``.

    ``known_as``: other libraries' names of the keys (``{"learning_rate": "lr"}``), said for a key that is one."""
    section = f"of {prefix.rstrip('.')}" if prefix else ("" if nested_in_owner else "at the top level")
    listed = ", ".join(names) if names else "none"
    ours = (known_as or {}).get(str(key))
    if ours is not None:  # SB3's or CleanRL's name, which difflib would not match ("learning_rate" for "lr": A19)
        hint = f" (did you mean {prefix + ours!r}? {str(key)!r} is another library's name for it)"
    else:
        hint = did_you_mean(str(key), names, prefix)
    return f"unknown key {prefix + str(key)!r}{hint}; valid keys{' ' + section if section else ''}: {listed}."


_TYPE_NAMES = {
    int: "an int",
    float: "a number",
    bool: "a bool (true or false)",
    str: "a string",
    type(None): "null",
    Any: "any value",
}
_PLURALS = {int: "ints", float: "numbers", bool: "bools", str: "strings"}


def type_name(hint: Any) -> str:
    """What a value of the annotation ``hint`` is, in words (``int | None`` -> ``an int or null``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(option) for option in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, args))
    if hint in (dict, Mapping) or origin in (dict, Mapping):
        return "a mapping with string keys"
    if hint in (list, tuple, Sequence) or origin in (list, tuple, Sequence):
        item = args[0] if args and (origin is not tuple or len(args) == 2 and args[1] is Ellipsis) else None
        return f"a list of {_PLURALS[item]}" if item in _PLURALS else "a list"
    if dataclasses.is_dataclass(hint):
        return f"a mapping with keys {', '.join(_init_names(hint))}"
    if hint in _TYPE_NAMES:
        return _TYPE_NAMES[hint]
    return getattr(hint, "__name__", str(hint))


# ------------------------------------------------------------------------------------ pydantic


@functools.cache
def _adapter(cls: type) -> pydantic.TypeAdapter:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"build expects a dataclass, but got {cls!r}.")
    _configure(cls, set())
    return pydantic.TypeAdapter(cls)


def _configure(cls: type, seen: set[type]) -> None:
    """Give ``cls`` and every dataclass in its fields' annotations the forbidding config, unless set."""
    if cls in seen:
        return
    seen.add(cls)
    if "__pydantic_config__" not in vars(cls):
        cls.__pydantic_config__ = _CONFIG  # type: ignore[attr-defined]
    for hint in typing.get_type_hints(cls).values():
        for inner in _dataclasses_in(hint):
            _configure(inner, seen)


def _dataclasses_in(hint: Any) -> list[type]:
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return [hint]
    return [inner for arg in typing.get_args(hint) for inner in _dataclasses_in(arg)]


def _plain(value: Any) -> Any:
    """JSON's ``default``: numpy scalars and arrays as Python values; anything else cannot be carried."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not plain data")


def _init_names(cls: Any) -> list[str]:
    return [field.name for field in dataclasses.fields(cls) if field.init]


def _field_doc(cls: type, name: str) -> str:
    """The docstring of the field ``name`` of ``cls`` (empty when it has none or has no JSON schema)."""
    try:
        schema = _adapter(cls).json_schema()
    except pydantic.PydanticUserError:
        return ""
    doc = schema.get("properties", {}).get(name, {}).get("description", "")
    return " ".join(doc.replace("``", "").split())


# ------------------------------------------------------------------------------------ messages


@dataclasses.dataclass(frozen=True)
class _Place:
    """Where an error's ``loc`` leads in the data: its dotted path, annotation and value."""

    path: str
    hint: Any
    value: Any
    complete: bool


def _locate(cls: type, data: Any, loc: tuple[Any, ...], prefix: str) -> _Place:
    """Follow ``loc`` through ``cls``'s annotations and ``data``; stop at a union's member tag."""
    hint, value, path = cls, data, prefix.rstrip(".")
    for part in loc:
        hint = _without_none(hint, value)
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if dataclasses.is_dataclass(hint) and part in _init_names(hint) and isinstance(value, Mapping):
            hint, value = typing.get_type_hints(hint)[part], value.get(part, _ABSENT)
            path = f"{path}.{part}" if path else str(part)
        elif (
            origin in (list, tuple, Sequence)
            and isinstance(part, int)
            and isinstance(value, (list, tuple))
            and 0 <= part < len(value)
        ):
            hint = args[0] if origin is not tuple or args[-1] is Ellipsis else args[part]
            value, path = value[part], f"{path}[{part}]"
        elif origin in (dict, Mapping) and isinstance(value, Mapping) and part in value:
            hint, value, path = (args[1] if args else Any), value[part], f"{path}.{part}"
        else:
            return _Place(path, hint, value, complete=False)
    return _Place(path, hint, value, complete=True)


def _without_none(hint: Any, value: Any) -> Any:
    """``X`` for ``X | None`` holding a value (pydantic reports its errors as ``X``'s)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and value is not None:
        options = [option for option in typing.get_args(hint) if option is not type(None)]
        if len(options) == 1:
            return options[0]
    return hint


def _accepts_int(hint: Any) -> bool:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_accepts_int(option) for option in typing.get_args(hint))
    return hint in (int, float)


def _wrong_type(place: _Place) -> str:
    value = place.value
    hint_text = ""
    if isinstance(value, float) and value.is_integer() and _accepts_int(place.hint) and not _accepts_float(place.hint):
        written = f"{int(value)} or {int(value):_}" if abs(value) >= 10_000 else f"{int(value)}"
        hint_text = f" (write {written}, without a decimal point or exponent)"
    elif isinstance(value, str) and _accepts_int(place.hint):  # C24: "num_runs: '3'" was given no fix
        number = _number(value)
        whole = number is not None and (_accepts_float(place.hint) or float(number).is_integer())
        kind = "a number" if _accepts_float(place.hint) else "a whole number"
        hint_text = f" (write {value.strip()}, without quotes)" if whole else f" (write {kind}, without quotes)"
    where = f"{place.path}=" if place.path else ""
    return (
        f"{where}{value!r} has the wrong type: expected {type_name(place.hint)}, got {type(value).__name__}{hint_text}."
    )


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _accepts_float(hint: Any) -> bool:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_accepts_float(option) for option in typing.get_args(hint))
    return hint is float


def _missing(parent: _Place, name: str) -> str:
    full = f"{parent.path}.{name}" if parent.path else name
    where = f" in {parent.path}" if parent.path else ""
    hint = typing.get_type_hints(parent.hint)[name]
    if dataclasses.is_dataclass(hint):
        required = [
            f.name
            for f in dataclasses.fields(hint)
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        return f"missing section {full!r}{where}: {type_name(hint)} (required: {', '.join(required) or 'none'})."
    doc = _field_doc(parent.hint, name)
    return f"missing key {full!r}{where}: {doc or type_name(hint)}"


def _missing_key(message: str) -> str:
    """The key a :func:`_missing` message names (``missing key 'hooks[0].name' in ...``)."""
    return message.split("'", 2)[1] if message.count("'") >= 2 else ""


def _translate(
    exc: pydantic.ValidationError, cls: type, data: Any, prefix: str, error: type[Exception], owner: str | None
) -> Exception:
    """One ``error`` naming every problem pydantic found, or what a ``__post_init__`` raised."""
    lead = f"{owner}: " if owner else ""
    unknown, missing, wrong, raised = [], [], [], []
    for item in exc.errors():
        loc = tuple(item["loc"])
        if item["type"] in _UNKNOWN + _MISSING and loc:
            parent = _locate(cls, data, loc[:-1], prefix)
            parent = dataclasses.replace(parent, hint=_without_none(parent.hint, parent.value))
            if parent.complete and dataclasses.is_dataclass(parent.hint):
                if item["type"] in _UNKNOWN:
                    section = f"{parent.path}." if parent.path else ""
                    unknown.append(
                        unknown_key_message(
                            section,
                            loc[-1],
                            _init_names(parent.hint),
                            nested_in_owner=bool(owner),
                            known_as=getattr(parent.hint, "KNOWN_AS", None),
                        )
                    )
                else:
                    missing.append(_missing(parent, str(loc[-1])))
                continue
        original = (item.get("ctx") or {}).get("error")
        if isinstance(original, Exception):
            raised.append((_locate(cls, data, loc, prefix).path, original))
            continue
        place = _locate(cls, data, loc, prefix)
        wrong.append(_wrong_type(place))
    # a misspelt key is also a missing one: said once, as the misspelling (C24: two lines for hooks[0].nam)
    missing = [m for m in missing if not any(f"(did you mean {_missing_key(m)!r}?)" in u for u in unknown)]
    messages = list(dict.fromkeys(unknown + missing + wrong))
    if messages:
        return error(lead + "\n".join(messages))
    path, original = raised[0]
    if isinstance(original, error):
        return original
    named = path and not str(original).startswith(path + ".")  # an option group names its dotted keys itself
    text = str(original) if error is ValueError else yaml_spelling(str(original))  # a file's, not Python's, words
    wrapped = error(f"{lead}{path + ': ' if named else ''}{text}")
    wrapped.__cause__ = original
    return wrapped
