"""Griffe extensions for the API reference: the package_dir folders, and Sphinx roles as code.

``callbacks/``, ``agents/`` and ``envs/`` sit beside ``online_trainer/`` in the repository and
install as ``online_trainer.callbacks``, ``.agents`` and ``.envs``. Griffe reads packages from
their folders, so it would not find them inside ``online_trainer``; this loads each mapped folder
as that subpackage once ``online_trainer`` is loaded, so that mkdocstrings documents them under
their import names.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]


def package_dir(setup_cfg: Path = ROOT / "setup.cfg") -> dict[str, Path]:
    """``{"online_trainer.agents": ROOT / "agents", ...}`` from setup.cfg's ``[options] package_dir``."""
    parser = configparser.ConfigParser()
    parser.read(setup_cfg)
    mapping = {}
    for line in parser.get("options", "package_dir", fallback="").splitlines():
        if "=" in line:
            name, folder = (part.strip() for part in line.split("=", 1))
            if name:
                mapping[name] = ROOT / folder
    return mapping


class PackageDir(griffe.Extension):
    """Attach each folder of ``package_dir`` to its parent package, as the installed package has it."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for name, folder in package_dir().items():
            parent_name, _, sub = name.rpartition(".")
            if parent_name != pkg.path or sub in pkg.members:
                continue
            # GriffeLoader has no public call that loads a folder under another name.
            module = loader._load_module(sub, folder / "__init__.py", submodules=True, parent=pkg)
            pkg.set_member(sub, module)


_SPHINX_ROLE = re.compile(r":(?:py:)?(?:mod|meth|func|class|attr|data|exc|obj):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    """Render the Sphinx roles some docstrings use (``:meth:`multi_run```) as code (```multi_run```)."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _SPHINX_ROLE.sub(r"`\1`", obj.docstring.value)
