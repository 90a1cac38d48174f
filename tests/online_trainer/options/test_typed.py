"""build: the one checker of option objects (YAML config sections, agent hyperparameters)."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np
import pydantic
import pytest

from online_trainer.options.typed import build, did_you_mean, type_name, unknown_key_message


class SpecError(ValueError):
    """The ``error`` class of these tests."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Env:
    """The shape of the config's env section, with the list and dict fields added beside it."""

    id: str
    """A registered gymnasium id, e.g. ``CartPole-v1``."""
    num_envs: int = 1
    """Sub-envs of the vector env."""
    wrappers: list[str | dict[str, Any]] = dataclasses.field(default_factory=list)
    """Wrapper names, or mappings with their arguments."""
    vector_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the vector env."""

    def __post_init__(self) -> None:
        if self.num_envs < 1:
            raise SpecError(f"env.num_envs must be a positive int, but got env.num_envs={self.num_envs}.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    env: Env
    """The env (section)."""
    steps: int = 10
    """Env steps per run."""
    lr: float = 0.5
    """A learning rate."""
    sizes: tuple[int, ...] = (64, 64)
    """Hidden widths."""
    limit: int | None = None
    """A cap; null: none."""
    flag: bool = False
    """A switch."""
    eval_env: Env | None = None
    """Another env (section), or null."""
    extra: Any = None
    """Anything at all."""

    def __post_init__(self) -> None:
        if self.lr > 1:
            raise ValueError(f"lr must be <= 1 but got lr={self.lr}.")


@dataclasses.dataclass(frozen=True)
class Lenient:
    __pydantic_config__ = pydantic.ConfigDict(extra="ignore")
    x: int = 1


def spec(**fields: Any) -> dict[str, Any]:
    return {"env": {"id": "CartPole-v1"}, **fields}


def message(data: Any, **kwargs: Any) -> str:
    with pytest.raises(SpecError) as info:
        build(Spec, data, error=SpecError, **kwargs)
    return str(info.value)


def test_plain_data_becomes_the_dataclass_tree():
    built = build(
        Spec,
        {
            "env": {
                "id": "Pong",
                "num_envs": 4,
                "wrappers": ["TimeLimit", {"name": "Clip", "max": 1}],
                "vector_kwargs": {"copy": False, "shape": [2, 2]},
            },
            "steps": 1000,
            "lr": 1,
            "sizes": [32, 16],
            "limit": None,
            "flag": True,
            "eval_env": {"id": "Pong"},
        },
    )
    assert built == Spec(
        env=Env(
            id="Pong",
            num_envs=4,
            wrappers=["TimeLimit", {"name": "Clip", "max": 1}],
            vector_kwargs={"copy": False, "shape": [2, 2]},
        ),
        steps=1000,
        lr=1.0,
        sizes=(32, 16),
        limit=None,
        flag=True,
        eval_env=Env(id="Pong"),
    )
    assert type(built.lr) is float and type(built.sizes) is tuple
    assert build(Spec, spec(lr=-math.inf)).lr == -math.inf
    assert build(Spec, spec(limit=7)).limit == 7


def test_numpy_scalars_and_arrays_count_as_their_python_values():
    built = build(Spec, spec(steps=np.int64(5), lr=np.float32(0.25), sizes=np.array([3, 4]), flag=np.bool_(True)))
    assert (built.steps, built.lr, built.sizes, built.flag) == (5, 0.25, (3, 4), True)
    assert type(built.steps) is int
    assert message(spec(steps=np.float64(2.0))) == (
        f"steps={np.float64(2.0)!r} has the wrong type: expected an int, "
        "got float64 (write 2, without a decimal point or exponent)."
    )


def test_data_json_cannot_carry_is_validated_as_python_objects():
    built = build(Spec, spec(extra=print, sizes=(1, 2)))
    assert built.extra is print and built.sizes == (1, 2)
    assert message(spec(extra=print, steps=[1])) == "steps=[1] has the wrong type: expected an int, got list."


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"steps": True}, "steps=True has the wrong type: expected an int, got bool."),
        (
            {"steps": 1e3},
            "steps=1000.0 has the wrong type: expected an int, got float (write 1000, without a "
            "decimal point or exponent).",
        ),
        (
            {"steps": 2.5e5},
            "steps=250000.0 has the wrong type: expected an int, got float (write 250000 or "
            "250_000, without a decimal point or exponent).",
        ),
        ({"steps": 2.5}, "steps=2.5 has the wrong type: expected an int, got float."),
        ({"steps": "1"}, "steps='1' has the wrong type: expected an int, got str (write 1, without quotes)."),
        ({"steps": None}, "steps=None has the wrong type: expected an int, got NoneType."),
        ({"lr": "1e-3"}, "lr='1e-3' has the wrong type: expected a number, got str (write 1e-3, without quotes)."),
        ({"flag": 1}, "flag=1 has the wrong type: expected a bool (true or false), got int."),
        (
            {"sizes": [32, "a"]},
            "sizes[1]='a' has the wrong type: expected an int, got str (write a whole number, without quotes).",
        ),
        ({"sizes": {"a": 1}}, "sizes={'a': 1} has the wrong type: expected a list of ints, got dict."),
        ({"limit": "3"}, "limit='3' has the wrong type: expected an int or null, got str (write 3, without quotes)."),
        (
            {"limit": 3.0},
            "limit=3.0 has the wrong type: expected an int or null, got float (write 3, without a "
            "decimal point or exponent).",
        ),
        (
            {"env": 3},
            "env=3 has the wrong type: expected a mapping with keys id, num_envs, wrappers, vector_kwargs, got int.",
        ),
        (
            {"env": {"id": "x", "num_envs": "2"}},
            "env.num_envs='2' has the wrong type: expected an int, got str (write 2, without quotes).",
        ),
        (
            {"env": {"id": "x", "wrappers": ["TimeLimit", 3]}},
            "env.wrappers[1]=3 has the wrong type: expected a string or a mapping with string keys, got int.",
        ),
        (
            {"env": {"id": "x", "wrappers": "TimeLimit"}},
            "env.wrappers='TimeLimit' has the wrong type: expected a list, got str.",
        ),
        (
            {"env": {"id": "x", "vector_kwargs": [1]}},
            "env.vector_kwargs=[1] has the wrong type: expected a mapping with string keys, got list.",
        ),
        (
            {"eval_env": {"id": "x", "num_envs": 1.0}},
            "eval_env.num_envs=1.0 has the wrong type: expected an int, got float (write 1, without a decimal point "
            "or exponent).",
        ),
    ],
)
def test_a_value_of_the_wrong_type_names_the_key_the_value_and_the_type(fields, text):
    assert message(spec(**fields)) == text


def test_an_unknown_key_suggests_the_nearest_and_lists_the_valid_ones():
    assert message(spec(step=3)) == (
        "unknown key 'step' (did you mean 'steps'?); valid keys at the top level: env, "
        "steps, lr, sizes, limit, flag, eval_env, extra."
    )
    assert message(spec(env={"id": "x", "num_env": 2})) == (
        "unknown key 'env.num_env' (did you mean 'env.num_envs'?); valid keys of env: id, num_envs, wrappers, "
        "vector_kwargs."
    )
    assert message(spec(eval_env={"id": "x", "wrapper": []})) == (
        "unknown key 'eval_env.wrapper' (did you mean 'eval_env.wrappers'?); valid keys of eval_env: id, num_envs, "
        "wrappers, vector_kwargs."
    )
    assert message({"env": {"id": "x", "zzz": 1}}, prefix="config.", owner="sweep 'a'") == (
        "sweep 'a': unknown key 'config.env.zzz'; valid keys of config.env: id, num_envs, wrappers, vector_kwargs."
    )
    assert message(spec(zzz=1), owner="MyAgent hyperparameters").startswith(
        "MyAgent hyperparameters: unknown key 'zzz'; valid keys: env, steps, "
    )


def test_a_missing_key_is_explained_by_its_docstring():
    assert message({"env": {"num_envs": 2}}) == (
        "missing key 'env.id' in env: A registered gymnasium id, e.g. CartPole-v1."
    )
    assert message(spec(eval_env={"num_envs": 2})) == (
        "missing key 'eval_env.id' in eval_env: A registered gymnasium id, e.g. CartPole-v1."
    )
    assert message({"steps": 3}) == (
        "missing section 'env': a mapping with keys id, num_envs, wrappers, vector_kwargs (required: id)."
    )


def test_every_problem_is_reported_unknown_keys_first():
    lines = message({"env": {"num_envs": "2"}, "stepz": 1, "lr": "x"}).splitlines()
    assert lines == [
        "unknown key 'stepz' (did you mean 'steps'?); valid keys at the top level: env, steps, lr, sizes, limit, "
        "flag, eval_env, extra.",
        "missing key 'env.id' in env: A registered gymnasium id, e.g. CartPole-v1.",
        "env.num_envs='2' has the wrong type: expected an int, got str (write 2, without quotes).",
        "lr='x' has the wrong type: expected a number, got str (write a number, without quotes).",
    ]


def test_errors_of_post_init_pass_through_as_they_are():
    with pytest.raises(SpecError, match=r"^env.num_envs must be a positive int, but got env.num_envs=0\.$"):
        build(Spec, spec(env={"id": "x", "num_envs": 0}), error=SpecError)
    with pytest.raises(ValueError, match=r"^lr must be <= 1 but got lr=2.0\.$") as info:
        build(Spec, spec(lr=2))
    assert type(info.value) is ValueError
    # an exception that is not the error class is raised as one, after the owner and the section
    with pytest.raises(SpecError, match=r"^MyAgent hyperparameters: lr must be <= 1 but got lr=2.0\.$") as wrapped:
        build(Spec, spec(lr=2), error=SpecError, owner="MyAgent hyperparameters")
    assert type(wrapped.value.__cause__) is ValueError
    with pytest.raises(SpecError, match=r"^cfg: lr must be <= 1 but got lr=2.0\.$"):
        build(Spec, spec(lr=2), prefix="cfg.", error=SpecError)


def test_a_dataclass_with_its_own_pydantic_config_keeps_it():
    assert build(Lenient, {"x": 2, "unknown": 1}) == Lenient(x=2)
    with pytest.raises(TypeError, match=r"build expects a dataclass, but got <class 'dict'>"):
        build(dict, {})


def test_helpers():
    assert did_you_mean("num_env", ["num_envs", "id"], "env.") == " (did you mean 'env.num_envs'?)"
    assert did_you_mean("zzz", ["num_envs"]) == ""
    assert unknown_key_message("", "x", []) == "unknown key 'x'; valid keys at the top level: none."
    assert type_name(int | None) == "an int or null"
    assert type_name(tuple[int, ...]) == "a list of ints"
    assert type_name(Env) == "a mapping with keys id, num_envs, wrappers, vector_kwargs"
    assert re.fullmatch(r"an int or a string", type_name(int | str))


def test_an_option_group_given_positional_arguments_names_its_fields():
    """M22: EvaluationOptions(10) got Python's "takes 1 positional argument but 2 were given"."""
    from online_trainer import EvaluationOptions, SlurmOptions

    with pytest.raises(TypeError, match=r"EvaluationOptions takes keyword arguments only, but got 1 positional: 10\. "):
        EvaluationOptions(10)
    with pytest.raises(TypeError, match=r"SlurmOptions takes keyword arguments only, .* its fields: partition, time, "):
        SlurmOptions("gpu", 30)


def test_a_choice_or_flag_of_the_wrong_type_is_a_value_type_error():
    """V23: a choice given a number raised a plain ValueError (missed by except TypeError), and SlurmOptions(wait="no")
    was kept, a non-empty string that reads as true."""
    from online_trainer import ExecutionOptions, RecordOptions, SlurmOptions
    from online_trainer.errors import ValueTypeError
    from online_trainer.hooks import StopOnReturn

    for make in (
        lambda: ExecutionOptions(backend=1),
        lambda: RecordOptions(score=1),
        lambda: SlurmOptions(wait="no"),
        lambda: StopOnReturn(100, source=1),
    ):
        with pytest.raises(ValueTypeError):
            make()
    with pytest.raises(ValueError, match=r"but got execution.backend='rya' \(did you mean 'ray'\?\)") as caught:
        ExecutionOptions(backend="rya")
    assert not isinstance(caught.value, TypeError)
