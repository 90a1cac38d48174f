"""The options reference page is generated from the option dataclasses: stale or undocumented fails."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from online_trainer.options.groups import OptionGroup, option
from online_trainer.orchestration import options_reference


def test_the_committed_reference_page_is_the_rendered_one():
    assert options_reference.PAGE.read_text() == options_reference.render(), (
        "docs/reference/trainer-options.md is stale: run python -m online_trainer.orchestration.options_reference"
    )


def test_every_option_is_on_the_page_with_its_dotted_key_and_its_resume_column():
    page = options_reference.render()
    assert "| `evaluation.freq` | an int or null | `None` | yes |" in page
    assert "| `execution.num_workers` | an int | `1` | no |" in page
    assert "| `eval_freq=` | `evaluation=EvaluationOptions(freq=...)` | `evaluation.freq` |" in page


@dataclass(frozen=True, kw_only=True)
class Undocumented(OptionGroup):
    """A group with a field left without its docstring."""

    documented: int = option(1)
    """Has one."""
    bare: int = option(2)


def test_a_field_without_a_docstring_fails_the_page():
    with pytest.raises(ValueError, match="Undocumented.bare has no docstring: document it under the field"):
        options_reference._table(Undocumented, "key")
