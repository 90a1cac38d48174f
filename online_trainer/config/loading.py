"""Reading a config: YAML -> dotted overrides -> the validated :class:`ExperimentConfig` tree, and back to YAML."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import typing
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from online_trainer.config.schema import ConfigError, EnvConfig, ExperimentConfig
from online_trainer.options.derived import LEGACY_NAMES
from online_trainer.options.groups import SECTIONS, EvaluationOptions
from online_trainer.options.typed import build, type_name, unknown_key_message


class _Loader(yaml.SafeLoader):
    """Safe YAML that also reads ``1e-3`` and ``1e5`` as floats (PyYAML's YAML 1.1 reads strings), and refuses a key
    given twice in one mapping (PyYAML keeps the last one without a word)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable) and key in seen:
                first = seen[key].start_mark.line + 1
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} is given twice in one mapping (lines {first} and "
                    f"{key_node.start_mark.line + 1}): keep one",
                    key_node.start_mark,
                )
            if isinstance(key, typing.Hashable):
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


# ------------------------------------------------------------------------ overrides


def parse_override(text: str) -> tuple[tuple[str, ...], Any]:
    """Split ``"a.b.c=value"`` into ``(("a", "b", "c"), value)``, the value parsed as YAML.

    Raises:
        ConfigError: when ``text`` has no ``=``, an empty key or an empty value (``exp_dir=``, often a shell
            variable that was not set: YAML would read it as null, which is the default).
    """
    key, sep, raw = text.partition("=")
    path = tuple(part.strip() for part in key.split("."))
    if not sep or not all(path):
        raise ConfigError(
            f"override {text!r} must look like key=value or section.key=value "
            "(e.g. num_runs=3, agent.hyperparameters.lr=0.001)."
        )
    if not raw.strip():
        raise ConfigError(
            f"override {text!r} has no value: give it one, or write {key.strip()}=null for null (the default)."
        )
    try:
        value = yaml.load(raw, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({exc}).") from exc
    return path, value


def legacy_keys(data: dict[str, Any], where: str, override: bool = False) -> dict[str, Any]:
    """``data`` with the previous release's flat keys (``eval_freq: 5000``) moved into their sections
    (``evaluation: {freq: 5000}``), each with a DeprecationWarning; :data:`LEGACY_NAMES` is the one table.

    A flat key set to null where the section's field takes no null meant "the default" and is dropped,
    and an ``eval_episodes`` without ``eval_freq`` never evaluated, so it makes no ``evaluation`` section.
    A flat key whose section sets that field to another value in the same file is refused (which one
    was meant?); with ``override`` (a command-line ``eval_freq=...``), the flat key replaces it.

    Raises:
        ConfigError: a flat key and its section's field disagree in one file.
    """
    own = {spec.name for spec in dataclasses.fields(ExperimentConfig)}
    data = dict(data)
    moved: dict[str, dict[str, Any]] = {}
    for key in [key for key in data if key in LEGACY_NAMES and key not in own]:
        section, name = LEGACY_NAMES[key].split(".")
        value = data.pop(key)
        warnings.warn(
            f"{where}: the key {key!r} is deprecated and will be removed in the next release: write "
            f"{section}.{name} ({section}: {{{name}: ...}}).",
            DeprecationWarning,
            stacklevel=3,
        )
        if value is None and type(None) not in typing.get_args(typing.get_type_hints(SECTIONS[section])[name]):
            continue  # null where the field takes no null meant "the default" (eval_episodes: null)
        moved.setdefault(section, {})[name] = value
    if "evaluation" in moved and moved["evaluation"].get("freq") is None:
        del moved["evaluation"]
    for section, values in moved.items():
        current = data.get(section)
        for name, value in values.items():
            flat = next(key for key, dotted in LEGACY_NAMES.items() if dotted == f"{section}.{name}")
            if not override and isinstance(current, dict) and name in current and current[name] != value:
                raise ConfigError(
                    f"{where}: {flat}: {value!r} and {section}.{name}: {current[name]!r} both set {section}.{name}: "
                    f"keep {section}.{name} ({flat} is deprecated)."
                )
        data[section] = {**(current if isinstance(current, dict) else {}), **values}
    return data


def _check_override_path(path: tuple[str, ...]) -> None:
    """Raise ConfigError when ``path`` does not lead to a key of the schema (or inside a free mapping)."""
    cls: Any = ExperimentConfig
    for depth, part in enumerate(path):
        prefix = "".join(f"{p}." for p in path[:depth])
        names = [field.name for field in dataclasses.fields(cls)]
        if part not in names:
            raise ConfigError(unknown_key_message(prefix, part, names))
        hint = typing.get_type_hints(cls)[part]
        if cls is EvaluationOptions and part == "env":  # an option of any value in Python, a section in a config
            hint = EnvConfig
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(options) == 1 and dataclasses.is_dataclass(options[0]):  # an optional section (evaluation)
            hint = options[0]
        if dataclasses.is_dataclass(hint):
            cls = hint
            continue
        if typing.get_origin(hint) is dict:
            return
        if depth < len(path) - 1:
            message = f"{prefix}{part} is {type_name(hint)}, not a section: cannot set {'.'.join(path)}."
            if any(typing.get_origin(option) in (dict, Mapping) for option in options):
                rest = ".".join(path[depth + 1 :])
                message += f" Set the whole mapping: {prefix}{part}={{{rest}: VALUE}} (YAML's inline form)."
            raise ConfigError(message)


_UNSET = object()


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of the raw config ``data`` with the dotted ``key=value`` overrides applied in order."""
    data = copy.deepcopy(data)
    given: dict[tuple[str, ...], tuple[str, Any]] = {}
    for text in overrides:
        path, value = parse_override(text)
        legacy = len(path) == 1 and path[0] in LEGACY_NAMES
        # a deprecated flat key sets its section's field: compared as that field (D19: num_workers=2 then
        # execution.num_workers=1 ran with the later one, without a word)
        setting = tuple(LEGACY_NAMES[path[0]].split(".")) if legacy else path
        for earlier, (earlier_text, earlier_value) in given.items():
            # a later override that replaces an earlier one (the same key, or the section holding it) loses it; one
            # of a key that an earlier section's value set already sets it twice
            inside = setting[: len(earlier)] == earlier and len(setting) > len(earlier)
            if inside:
                for part in setting[len(earlier) :]:
                    earlier_value = earlier_value.get(part, _UNSET) if isinstance(earlier_value, dict) else _UNSET
            if (earlier[: len(setting)] == setting and (earlier != setting or earlier_value != value)) or (
                inside and earlier_value is not _UNSET and earlier_value != value
            ):
                key = ".".join(earlier if len(earlier) > len(setting) else setting)
                raise ConfigError(
                    f"overrides {earlier_text!r} and {text!r} both set {key}: give it once "
                    "(the second would silently replace the first)."
                )
        given[setting] = (text, value)
        if legacy:
            data = legacy_keys({**data, path[0]: value}, f"override {text!r}", override=True)
            continue
        _check_override_path(path)
        node = data
        for depth, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(path[: depth + 1])}={child!r} is not a mapping.")
            node = child
        node[path[-1]] = value
    return data


# --------------------------------------------------------------------------- loading


def load_experiment_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> ExperimentConfig:
    """Read a YAML config, apply ``key=value`` overrides and validate everything.

    ``exp_dir`` defaults to ``runs/<stem of path>``.

    Raises:
        ConfigError: the file is missing or not YAML, or a key, type or value is invalid.
    """
    path = Path(path)
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise ConfigError(f"config file {os.fspath(path)!r} {what}.")
    try:
        with open(path, encoding="utf-8") as stream:
            data = yaml.load(stream, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {os.fspath(path)!r} is not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {os.fspath(path)!r} must hold a mapping of keys (env:, agent:, ...), "
            f"but holds a {type(data).__name__}."
        )
    data = apply_overrides(legacy_keys(data, f"config file {os.fspath(path)!r}"), overrides)
    if data.get("exp_dir") is None:
        data["exp_dir"] = os.path.join("runs", path.stem)
    return build(ExperimentConfig, data, error=ConfigError)


def dump_yaml(data: Mapping[str, Any]) -> str:
    """YAML text of a resolved config, keys in schema order."""
    return yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=None)
