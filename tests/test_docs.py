"""The documentation site: it builds in strict mode, and every public name has an API reference entry."""

from __future__ import annotations

import functools
import html
import http.server
import importlib
import json
import os
import re
import shutil
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import online_trainer
import online_trainer.agents
import online_trainer.callbacks
import online_trainer.envs
import online_trainer.hooks

ROOT = Path(__file__).resolve().parents[1]
API_DIR = ROOT / "docs" / "reference" / "api"
PUBLIC_PACKAGES = (
    online_trainer,
    online_trainer.callbacks,
    online_trainer.agents,
    online_trainer.envs,
    online_trainer.hooks,
)
DIRECTIVE = re.compile(r"^:::\s+([\w.]+)\s*$", re.MULTILINE)


def api_directives(api_dir: Path = API_DIR) -> dict[str, str]:
    """Every ``::: identifier`` of the API pages, with the page it is on."""
    found = {}
    for page in sorted(api_dir.glob("*.md")):
        for identifier in DIRECTIVE.findall(page.read_text()):
            found[identifier] = page.name
    return found


def resolve(identifier: str) -> object:
    """The object an identifier names: the longest importable module prefix, then attributes."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(f"nothing of {identifier!r} can be imported")


def missing_entries(packages=PUBLIC_PACKAGES, directives: dict[str, str] | None = None) -> list[str]:
    """Public names (``package.name`` for each name of ``package.__all__``) without an API entry.

    A name has an entry when a directive ends with ``.name`` and names that very object (the
    entry may use the defining module's path: ``online_trainer.records.storage.load_args``).
    """
    directives = api_directives() if directives is None else directives
    by_last: dict[str, list[str]] = {}
    for identifier in directives:
        by_last.setdefault(identifier.rsplit(".", 1)[-1], []).append(identifier)
    missing = []
    for package in packages:
        for name in package.__all__:
            obj = getattr(package, name)
            if not any(_names(identifier, obj) for identifier in by_last.get(name, [])):
                missing.append(f"{package.__name__}.{name}")
    return missing


def _names(identifier: str, obj: object) -> bool:
    try:
        return resolve(identifier) is obj
    except (ImportError, AttributeError):
        return False


def test_every_public_name_has_an_api_reference_entry():
    missing = missing_entries()
    assert not missing, (
        f"Public names without an entry in docs/reference/api/: {missing}. Add a line "
        "'::: <module where it is defined>.<name>' to the page of its package (see docs/reference/api/index.md)."
    )


def test_every_api_directive_names_something_that_exists():
    broken = {}
    for identifier, page in api_directives().items():
        try:
            resolve(identifier)
        except (ImportError, AttributeError) as exc:
            broken[identifier] = f"{page}: {exc}"
    assert broken == {}


def test_the_check_names_a_public_name_left_out():
    directives = {
        key: page for key, page in api_directives().items() if not key.endswith((".load_args", ".curves", ".make_env"))
    }
    # an entry of something else with the same last name is not an entry: the module
    # online_trainer.analysis.curves is not the function online_trainer.curves
    directives["online_trainer.analysis.curves"] = "x.md"
    directives["online_trainer.records.storage.load_args_of_nothing"] = "x.md"
    assert missing_entries(directives=directives) == [
        "online_trainer.curves",
        "online_trainer.load_args",
        "online_trainer.envs.make_env",
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The documentation site, built once with ``mkdocs build --strict``."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    pytest.importorskip("material")
    site = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    return site


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(site):
    # the reference was generated from the docstrings, the package_dir folders included
    agents_page = (site / "reference" / "api" / "agents" / "index.html").read_text()
    assert 'id="online_trainer.agents.DQNAgent"' in agents_page
    assert "Double DQN" in agents_page
    trainer_page = (site / "reference" / "api" / "trainer" / "index.html").read_text()
    assert "a function of an Optuna trial" in trainer_page
    assert ":meth:" not in trainer_page
    # signatures are formatted one parameter a line (ruff, separate_signature), not one line cut at the page's edge
    assert (
        '<span class="nf">OnlineTrainer</span><span class="p">(</span>\n    <span class="n">env</span>' in trainer_page
    )
    # the stylesheet that keeps the parameter tables' Default column on the page is linked
    assert "stylesheets/extra.css" in trainer_page
    # bench/README.md is included in the benchmarks page
    assert "python bench/overhead.py" in (site / "reference" / "benchmarks" / "index.html").read_text()


def test_the_command_page_names_every_command_agent_sink_and_config():
    from online_trainer.agents import AGENTS
    from online_trainer.cli.main import build_parser
    from online_trainer.config.schema import CALLBACKS

    page = (ROOT / "docs" / "reference" / "command.md").read_text()
    commands = next(action.choices for action in build_parser()._actions if action.choices)
    names = (
        [f"online-trainer {command}" for command in commands]
        + [f"`{agent}`" for agent in AGENTS]
        + [f"`{sink}`" for sink in CALLBACKS]
        + [f"`{path.name}`" for path in (ROOT / "configs").glob("*.yaml")]
    )
    assert [name for name in names if name not in page] == []


# Appended to a page: once laid out, list every table or code block wider than its box (a sideways scrollbar).
SIDEWAYS_PROBE = """<script>window.addEventListener('load', () => setTimeout(() => {
  const wide = [...document.querySelectorAll('.md-typeset__scrollwrap, .md-typeset__table, .md-typeset table')]
    .filter((el) => el.scrollWidth > el.clientWidth + 1)
    .map((el) => el.scrollWidth + 'px in ' + el.clientWidth + 'px: ' + el.textContent.trim().slice(0, 60));
  const out = document.createElement('pre'); out.id = 'sideways'; out.textContent = 'SIDEWAYS' + JSON.stringify(wide);
  document.body.appendChild(out);
}, 300));</script>"""


@pytest.mark.slow
def test_no_table_of_the_site_scrolls_sideways_at_1280_px(site):
    """Every page in a real browser (headless Chromium) 1280 px wide: no table wider than the content column."""
    browser = next(
        (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
    )
    if browser is None:
        pytest.skip("no Chromium on this machine: the layout is checked where one is installed")
    pages = sorted(p for p in site.rglob("index.html") if "404" not in p.parts and "<table" in p.read_text())
    assert len(pages) > 10  # the reference pages, the options page and the Benchmarks page have tables
    for page in pages:
        page.with_name("probe.html").write_text(page.read_text().replace("</body>", SIDEWAYS_PROBE + "</body>"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    with socketserver.TCPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        wide = {}
        for page in pages:
            url = f"http://127.0.0.1:{server.server_address[1]}/{page.with_name('probe.html').relative_to(site).as_posix()}"
            dom = subprocess.run(
                [
                    browser,
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--window-size=1280,900",
                    "--virtual-time-budget=5000",
                    "--dump-dom",
                    url,
                ],
                capture_output=True,
                text=True,
                timeout=120,
            ).stdout
            found = re.search(r"SIDEWAYS(\[.*?\])</pre>", dom, re.DOTALL)
            assert found, f"the probe did not run on {page.relative_to(site)}"
            if json.loads(html.unescape(found.group(1))):
                wide[str(page.relative_to(site))] = json.loads(html.unescape(found.group(1)))
        server.shutdown()
    assert not wide, f"tables wider than the page at 1280 px: {wide}"
