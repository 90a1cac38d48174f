"""The documentation's examples run: every Python block and every shell command of README.md and docs/.

Each page runs as one notebook would: its blocks in order, in one Python process (``python -c``:
like a notebook's kernel, a main module without a file, so spawned workers do not re-run the page), in a fresh
directory holding a copy of ``configs/``. Shell blocks run there with bash, in the page's
order. Budgets are cut to seconds by ``tests/docs_budget/sitecustomize.py`` (the examples'
code stays as written).

Markers in the Markdown (HTML comments, invisible on the site):

* ``<!-- illustrative: why -->`` right before a shell block: it is not run (an install, a
  server, a synopsis with placeholders), and the comment says why. Python blocks always run.
* ``<!-- docs-test-setup`` ... ``-->``: hidden Python run at that point of the page, for what
  an example assumes its reader has (``make_env``, an experiment on disk).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BUDGET = Path(__file__).resolve().parent / "docs_budget"
FENCE = re.compile(r"^```([\w-]*)\s*$")
ILLUSTRATIVE = re.compile(r"^<!--\s*illustrative:\s*(.*?)\s*-->\s*$")
SETUP_START = "<!-- docs-test-setup"
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
# what an unlabelled block starts with when it is a command line
COMMANDS = (
    "online-trainer",
    "python",
    "pip",
    "mkdocs",
    "tensorboard",
    "mlflow",
    "wandb",
    "cd ",
    "git ",
    ".ci/",
    "bash ",
)
PAGE_TIMEOUT = 900
# pages whose examples need what a test machine lacks, and what tests the same calls instead
NOT_RUN = {
    "docs/how-to/slurm.md": "submits to a Slurm partition 'gpu' with GPUs and a shared /shared filesystem; "
    "tests/online_trainer/parallel/test_slurm.py makes the same calls on a one-node cluster"
}


@dataclass(frozen=True)
class Block:
    """A fenced block (or a hidden setup) of a page: ``kind`` is python, setup, shell or other."""

    kind: str
    code: str
    line: int  # of the first line of code, 1-based
    illustrative: str | None = None


def _is_command_block(language: str, code: str) -> bool:
    if language in SHELL_LANGUAGES:
        return True
    lines = [line.strip() for line in code.splitlines() if line.strip() and not line.strip().startswith("#")]
    return language == "" and bool(lines) and lines[0].startswith(COMMANDS)


def blocks(text: str) -> list[Block]:
    """The blocks of a Markdown text, in order."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == SETUP_START:
            end = lines.index("-->", i)
            found.append(Block("setup", "\n".join(lines[i + 1 : end]), i + 2))
            i = end + 1
            continue
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        code, language = "\n".join(lines[i + 1 : end]), fence.group(1)
        kind = "python" if language == "python" else "shell" if _is_command_block(language, code) else "other"
        before = lines[i - 1] if i else ""
        mark = ILLUSTRATIVE.match(before)
        found.append(Block(kind, code, i + 2, mark.group(1) if mark else None))
        i = end + 1
    return found


def page_script(text: str, origin: str) -> str:
    """The Python program that runs a page: each block compiled under ``origin:line`` for tracebacks."""
    parts = [
        "import subprocess as _subprocess",
        "def _shell(code, origin):",
        "    done = _subprocess.run(['bash', '-euo', 'pipefail', '-c', code])",
        "    if done.returncode:",
        "        raise SystemExit(f'{origin}: the shell block failed with exit status {done.returncode}')",
    ]
    for block in blocks(text):
        if block.illustrative is not None or block.kind == "other":
            continue
        where = f"{origin}:{block.line}"
        if block.kind == "shell":
            parts.append(f"_shell({block.code!r}, {where!r})")
        else:  # line numbers of the tracebacks are those of the page
            padded = "\n" * (block.line - 1) + block.code
            parts.append(f"exec(compile({padded!r}, {origin!r}, 'exec'), globals())")
    return "\n".join(parts) + "\n"


def run_page(text: str, origin: str, workdir: Path) -> subprocess.CompletedProcess:
    """Run a page's examples in ``workdir`` (given a copy of ``configs/``) with budgets cut to seconds."""
    (workdir / "configs").mkdir(parents=True, exist_ok=True)
    for config in (ROOT / "configs").glob("*.yaml"):
        (workdir / "configs" / config.name).write_text(config.read_text())
    # one torch thread per process: the examples' few updates gain nothing from more, and a loaded CI machine
    # slows torch's spinning thread pools by orders of magnitude
    env = {
        **os.environ,
        "ONLINE_TRAINER_DOCS_BUDGET": "1",
        "MPLBACKEND": "Agg",
        "WANDB_MODE": "offline",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "WANDB_SILENT": "true",
        "PYTHONPATH": str(BUDGET),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", page_script(text, origin)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )


def runnable_pages() -> list[Path]:
    return [
        page
        for page in PAGES
        if _name(page) not in NOT_RUN
        and any(
            b.kind in ("python", "setup") or (b.kind == "shell" and b.illustrative is None)
            for b in blocks(page.read_text())
        )
    ]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.slow
@pytest.mark.parametrize("page", runnable_pages(), ids=_name)
def test_the_examples_of_a_page_run(page, tmp_path):
    done = run_page(page.read_text(), _name(page), tmp_path)
    assert done.returncode == 0, f"{_name(page)}: an example failed\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.mark.slow
def test_a_broken_example_fails_the_docs_test(tmp_path):
    page = ROOT / "docs" / "how-to" / "write-an-agent.md"
    text = page.read_text()
    broken = text.replace(
        "runs = trainer.multi_run(3, num_episodes=20, seed_offset=0)",
        "runs = trainer.multi_run(3, num_episode=20, seed_offset=0)",
    )
    assert broken != text
    done = run_page(broken, _name(page), tmp_path)
    assert done.returncode != 0
    line = text.splitlines().index("    runs = trainer.multi_run(3, num_episodes=20, seed_offset=0)") + 1
    assert f'File "docs/how-to/write-an-agent.md", line {line}' in done.stderr
    assert "num_episode" in done.stderr


def test_every_shell_block_runs_or_says_why_not_and_every_python_block_runs():
    unexplained, python_skipped = [], []
    for page in PAGES:
        for block in blocks(page.read_text()):
            where = f"{_name(page)}:{block.line}"
            if block.illustrative == "":
                unexplained.append(where)
            if block.kind == "python" and block.illustrative is not None:
                python_skipped.append(where)
    assert unexplained == [], "say why a block is illustrative: <!-- illustrative: why -->"
    assert python_skipped == [], "Python examples run; give them a hidden <!-- docs-test-setup --> instead"


def test_blocks_are_told_apart():
    text = "\n".join(
        [
            "<!-- docs-test-setup",
            "x = 1",
            "-->",
            "```python",
            "print(x)",
            "```",
            "<!-- illustrative: installs packages -->",
            "```bash",
            "pip install foo",
            "```",
            "```",
            "online-trainer show runs/a",
            "```",
            "```",
            "exp_dir/",
            "  args.yaml",
            "```",
            "```text",
            "python is not run here",
            "```",
        ]
    )
    assert [(b.kind, b.line, b.illustrative) for b in blocks(text)] == [
        ("setup", 2, None),
        ("python", 5, None),
        ("shell", 9, "installs packages"),
        ("shell", 12, None),
        ("other", 15, None),
        ("other", 19, None),
    ]


def test_the_budget_cut_keeps_the_schedule_of_a_run():
    sys.path.insert(0, str(BUDGET))
    try:
        import sitecustomize as budget
    finally:
        sys.path.remove(str(BUDGET))
    call = {"num_runs": 10, "total_steps": 60_000, "eval_freq": 10_000, "checkpoint_freq": 20_000, "num_workers": 8}
    budget.cut(call)
    assert call == {"num_runs": 2, "total_steps": 600, "eval_freq": 100, "checkpoint_freq": 200, "num_workers": 2}
    budget.cut(call)  # a call through two wrapped functions is cut once
    assert call["total_steps"] == 600 and call["eval_freq"] == 100
    episodes = {"num_runs": 2, "num_episodes": 50, "eval_freq": 20, "checkpoint_freq": None}
    budget.cut(episodes)
    assert episodes == {"num_runs": 2, "num_episodes": 5, "eval_freq": 2, "checkpoint_freq": None}


def test_the_whole_config_of_the_command_page_loads():
    """The command page's whole config (tester C10: no page showed one) is a config the command takes."""
    from online_trainer.config.loading import load_experiment_config

    page = (ROOT / "docs" / "reference" / "command.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", page, flags=re.S)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "whole.yaml"
        path.write_text(block)
        config = load_experiment_config(path)
    assert (config.num_runs, config.execution.num_workers, config.evaluation.freq) == (5, 2, 10_000)
    assert config.env.wrappers == ["gymnasium.wrappers:RecordEpisodeStatistics"]
