"""The package's layers import downwards only, lazy imports inside functions included.

Bottom to top::

    errors -> records -> loop -> options -> progress -> run -> hooks -> experiment
           -> parallel | analysis | config (never each other) -> orchestration -> cli

The top-level package (``online_trainer/__init__.py``) may name anything: it resolves the
public names lazily. The reference agents, envs and callbacks (the repository's top-level
folders ``agents/``, ``envs/``, ``callbacks/``, installed as ``online_trainer.agents``,
``online_trainer.envs``, ``online_trainer.callbacks``) import themselves and, of the runner, only
``online_trainer.options`` (the one config checker, ``options.typed``), nothing above it.
Every module's name is unique across the package (``__init__`` aside), and the architecture
page names exactly the packages of ``online_trainer/``.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "online_trainer"
ORDER = ["errors", "records", "loop", "options", "progress", "run", "hooks", "experiment"]
LOWER = {layer: set(ORDER[:i]) for i, layer in enumerate(ORDER)}
LOWER.update({layer: set(ORDER) for layer in ("parallel", "analysis", "config")})
LOWER["orchestration"] = {*ORDER, "parallel", "analysis", "config"}
LOWER["cli"] = {*LOWER["orchestration"], "orchestration"}
# what the reference packages (top-level folders, installed under online_trainer) may import of the runner
REFERENCE_PACKAGES = {"agents": {"options"}, "envs": {"options"}, "callbacks": {"options"}}


def imported_modules(path: Path) -> set[str]:
    """Every ``online_trainer...`` module ``path`` imports, at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name.split(".")[0] == "online_trainer"}


FOLDERS = {
    "online_trainer.callbacks": ROOT / "callbacks",
    "online_trainer.agents": ROOT / "agents",
    "online_trainer.envs": ROOT / "envs",
    "online_trainer": PACKAGE,
}


def module_files() -> dict[str, Path]:
    """Every module of the installed package by its dotted name (``callbacks/`` is ``online_trainer.callbacks``)."""
    files = {}
    for name, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            if name == "online_trainer" and path.relative_to(folder).parts[0] in ("callbacks", "agents", "envs"):
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join([name, *parts])] = path
    return files


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports when it runs (imports inside functions included, ``TYPE_CHECKING`` aside)."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if _under_type_checking(node, parents):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in modules else node.module)
    return found & modules


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph`` (one per strongly connected component of more than one module, or a self-import)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_runtime_import_cycle():
    files = module_files()
    graph = {name: runtime_imports(path, set(files)) - {"online_trainer"} for name, path in files.items()}
    assert import_cycles(graph) == []


def test_the_cycle_check_sees_a_cycle_through_a_lazy_import(tmp_path):
    (tmp_path / "a.py").write_text("from online_trainer.parallel import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from online_trainer.parallel.a import x\n")
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import online_trainer.parallel.a\n"
    )
    modules = {"online_trainer.parallel.a", "online_trainer.parallel.b", "online_trainer.parallel.c"}
    graph = {f"online_trainer.parallel.{n}": runtime_imports(tmp_path / f"{n}.py", modules) for n in "abc"}
    assert graph["online_trainer.parallel.c"] == set()
    assert import_cycles(graph) == [["online_trainer.parallel.a", "online_trainer.parallel.b"]]


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LOWER else None


def package_modules() -> list[Path]:
    """Every module of ``online_trainer/`` but the top-level ``__init__`` and ``__main__``."""
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).as_posix() not in ("__init__.py", "__main__.py")
    )


def layer_of_path(path: Path) -> str:
    """The layer a module of ``online_trainer/`` belongs to: its top package (or its own name, for ``errors.py``)."""
    first = path.relative_to(PACKAGE).parts[0]
    return first.removesuffix(".py")


def test_every_module_belongs_to_a_layer():
    assert {layer_of_path(p) for p in package_modules()} == set(LOWER)


def test_every_module_name_is_unique():
    """No two modules share a name (``__init__`` aside), in the runner and the reference packages alike."""
    by_name: dict[str, list[str]] = {}
    for path in [
        *package_modules(),
        *(p for folder in ("callbacks", "agents", "envs") for p in (ROOT / folder).rglob("*.py")),
    ]:
        if path.stem not in ("__init__", "__main__"):
            by_name.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in by_name.items() if len(paths) > 1} == {}


def name_stem(name: str) -> str:
    """A module or package name without the endings that make near-identical names (``resume``, ``resuming``)."""
    for ending in ("ing", "e", "s"):
        if name.endswith(ending) and len(name) > len(ending) + 2:
            return name[: -len(ending)]
    return name


def near_identical_names(roots: list[Path]) -> dict[str, list[str]]:
    """Modules and packages under ``roots`` whose names differ only by an ending (or not at all), by stem."""
    by_stem: dict[str, list[str]] = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if "__pycache__" in path.parts:
                continue
            if path.is_dir() and (path / "__init__.py").is_file():
                by_stem.setdefault(name_stem(path.name), []).append(f"{path.relative_to(root.parent)}/")
            elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
                by_stem.setdefault(name_stem(path.stem), []).append(str(path.relative_to(root.parent)))
    return {stem: paths for stem, paths in by_stem.items() if len(paths) > 1}


def test_no_module_or_package_name_is_another_with_an_ending():
    """``cli/resume.py`` beside ``experiment/resuming.py``, or ``cli/run.py`` beside the ``run/`` package, did
    different jobs under near-identical names (issue 39): each name says its own job."""
    assert near_identical_names([PACKAGE, *(ROOT / folder for folder in ("callbacks", "agents", "envs"))]) == {}


def test_the_name_check_sees_a_near_identical_pair(tmp_path):
    package = tmp_path / "pkg"
    for folder in ("cli", "experiment", "run"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    for module in ("cli/resume.py", "experiment/resuming.py", "cli/run.py", "cli/wait.py"):
        (package / module).write_text("")
    assert near_identical_names([package]) == {
        "resum": ["pkg/cli/resume.py", "pkg/experiment/resuming.py"],
        "run": ["pkg/cli/run.py", "pkg/run/"],
    }


@pytest.mark.parametrize("path", package_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path):
    layer = layer_of_path(path)
    allowed = LOWER[layer] | {layer}
    upward = sorted(m for m in imported_modules(path) if layer_of(m) is not None and layer_of(m) not in allowed)
    bare = sorted(m for m in imported_modules(path) if m == "online_trainer")
    assert upward == [], f"{path.relative_to(ROOT)} ({layer}) imports a layer above or beside it: {upward}"
    assert bare == [], (
        f"{path.relative_to(ROOT)} imports the top-level package; import the module that defines the name"
    )


@pytest.mark.parametrize("package", sorted(REFERENCE_PACKAGES))
def test_reference_packages_stand_beside_the_runner(package):
    allowed = (f"online_trainer.{package}", *(f"online_trainer.{layer}" for layer in REFERENCE_PACKAGES[package]))
    users = {
        str(p.relative_to(ROOT)): sorted(
            m for m in imported_modules(p) if not any(m == a or m.startswith(a + ".") for a in allowed)
        )
        for p in (ROOT / package).rglob("*.py")
    }
    assert {path: mods for path, mods in users.items() if mods} == {}


def test_the_import_checker_sees_lazy_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    from online_trainer.cli.main import main\n    import online_trainer.analysis.stats\n"
    )
    assert {"online_trainer.cli.main", "online_trainer.analysis.stats"} <= imported_modules(module)


def test_workers_load_neither_orchestration_nor_analysis():
    code = (
        "import sys, online_trainer.parallel.worker_process, online_trainer.parallel.worker_pool\n"
        "print(' '.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    above = [
        m
        for m in loaded
        if m.startswith("online_trainer.") and layer_of(m) in ("orchestration", "analysis", "cli", "config")
    ]
    assert above == []
    assert not {"pandas", "scipy", "matplotlib"} & set(loaded)


ARCHITECTURE_PAGE = ROOT / "docs" / "explanation" / "architecture.md"


def documented_tree(page: str) -> dict[str, set[str]]:
    """The architecture page's table: package (``run/builtin``, or ``errors.py``) -> the modules it names."""
    tree = {}
    for line in page.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0] != "Package":
            tree[cells[0].strip("`").rstrip("/")] = set(re.findall(r"`([a-z_]+)`", cells[2]))
    return tree


def actual_tree() -> dict[str, set[str]]:
    """Each package of ``online_trainer/`` (and its top-level modules but ``__init__``/``__main__``) -> its modules."""
    tree: dict[str, set[str]] = {}
    for path in package_modules():
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1:
            tree[relative.name] = set()
        elif path.stem != "__init__":
            tree.setdefault(relative.parent.as_posix(), set()).add(path.stem)
        else:
            tree.setdefault(relative.parent.as_posix(), set())
    return tree


def test_the_architecture_page_describes_exactly_the_tree():
    documented, actual = documented_tree(ARCHITECTURE_PAGE.read_text()), actual_tree()
    assert sorted(set(actual) - set(documented)) == [], "packages the architecture page leaves out"
    assert sorted(set(documented) - set(actual)) == [], "packages the architecture page names that do not exist"
    assert {name: modules for name, modules in documented.items() if modules != actual[name]} == {
        name: actual[name] for name, modules in documented.items() if modules != actual[name]
    }


def test_the_page_check_sees_a_missing_and_a_made_up_package():
    page = ARCHITECTURE_PAGE.read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `progress/`"))
    left_out = documented_tree(page.replace(row + "\n", ""))
    made_up = documented_tree(page.replace(row, row + "\n| `plugins/` | made up | `extra` |"))
    assert set(actual_tree()) - set(left_out) == {"progress"}
    assert set(made_up) - set(actual_tree()) == {"plugins"}
