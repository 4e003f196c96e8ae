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


# The longest files (seconds of a core each in a full run on 2 cores, longest first): pytest-xdist hands each worker a
# whole file (--dist loadfile) in the order collected, so these go first and the short ones fill in at the end,
# rather than one worker finishing a long file alone.
LONGEST_FIRST = ("test_sizing.py", "test_fsdp.py", "test_interruption.py", "test_ssm.py", "test_gpt.py",
                 "test_training.py", "test_streaming.py", "test_regret.py", "test_lineage.py", "test_batch_tokens.py")  # fmt: skip


def pytest_collection_modifyitems(items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order
