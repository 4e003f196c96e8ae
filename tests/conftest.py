"""Fixtures shared by the test files."""

import pytest

from tests.clean_python import CleanPython


@pytest.fixture(scope="session")
def clean_python(tmp_path_factory):
    """One interpreter where hf_seq cannot be imported, for this worker's remote-code checks (tests/clean_python.py)."""
    python = CleanPython(tmp_path_factory.mktemp("clean-python"))
    yield python
    python.close()
