"""Fixtures shared by the test files."""

import os

import pytest

from tests.clean_python import CleanPython


@pytest.fixture(scope="session")
def clean_python(tmp_path_factory):
    """One interpreter where hf_seq cannot be imported, for this worker's remote-code checks (tests/clean_python.py)."""
    python = CleanPython(tmp_path_factory.mktemp("clean-python"))
    yield python
    python.close()


@pytest.fixture(autouse=True)
def load_average_for_busy_cores(monkeypatch):
    """A run without `training.threads` counts the cores other processes keep busy by sampling /proc/stat for 0.3 s;
    the suite's few hundred short runs read the load average instead (the measurement's own fallback), which costs
    nothing. Runs in a subprocess measure as a user's do."""
    monkeypatch.setattr("hf_seq.training.runs.busy_cores", lambda seconds=0.3: os.getloadavg()[0])
