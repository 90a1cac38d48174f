"""What the distribution installs: every package of the source tree, each with its ``py.typed`` marker."""

from __future__ import annotations

from pathlib import Path

import pytest

setupcfg = pytest.importorskip("setuptools.config.setupcfg")

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL_FOLDERS = {
    "callbacks": "online_trainer.callbacks",
    "agents": "online_trainer.agents",
    "envs": "online_trainer.envs",
}


def source_packages() -> set[str]:
    """The import names of every package folder (a folder with an ``__init__.py``) of the installed code."""
    names = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "online_trainer").rglob("__init__.py")}
    names |= set(TOP_LEVEL_FOLDERS.values())
    return names


def options() -> dict:
    return setupcfg.read_configuration(ROOT / "setup.cfg")["options"]


def test_setup_cfg_installs_every_package():
    assert set(options()["packages"]) == source_packages()


def test_every_installed_package_ships_py_typed():
    package_data = options()["package_data"]
    assert {name for name, files in package_data.items() if "py.typed" in files} >= {
        "online_trainer",
        *TOP_LEVEL_FOLDERS.values(),
    }
    for folder in ("online_trainer", *TOP_LEVEL_FOLDERS):
        assert (ROOT / folder / "py.typed").is_file(), folder
