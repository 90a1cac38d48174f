"""examples/sweep.ipynb runs end to end, as a user would run it."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "sweep.ipynb"


@pytest.mark.slow
def test_sweep_notebook_runs(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "best: lr=" in text
    logged = "".join(o.get("text", "") for o in outputs if o.output_type == "stream" and o.get("name") == "stderr")
    assert text.count("cannot be told apart") <= 1  # logged by sweep, or printed by the cell: not both
    assert ("cannot be told apart" in logged) != ("is ahead of the others" in text)
    assert any("image/png" in o.get("data", {}) for o in outputs if o.output_type in ("display_data", "execute_result"))
    assert (tmp_path / "runs" / "corridor_sweep" / "sweep_results.csv").is_file()
    assert (tmp_path / "runs" / "corridor_sweep" / "curves.png").is_file()
