"""The notebooks under notebooks/ run from top to bottom without an error, each in a fresh kernel and an empty working
folder, in under three minutes on a 2-core CPU. Marker `notebooks` (needs the `docs` extra): `pytest -m notebooks`.
The outputs stored in the notebooks (which the site shows) come from such a run."""

import time
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
pytestmark = pytest.mark.notebooks


def test_there_are_notebooks():
    assert {path.stem for path in NOTEBOOKS} >= {"lineage", "attention", "finetune_classifier"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH", str(path.parent.parent))  # the kernel imports this checkout's hf_seq
    notebook = nbformat.read(path, as_version=4)
    start = time.monotonic()
    NotebookClient(
        notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    seconds = time.monotonic() - start
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    assert not [output for output in outputs if output.get("output_type") == "error"]
    assert any("image/png" in output.get("data", {}) for output in outputs), "no figure"
    assert seconds < 180, f"{path.name} took {seconds:.0f} s"
