"""Tokenization reuses datasets' Arrow cache: a second `tokenize_texts` over the same files with the same tokenizer
(loaded again, in this process or in a new one) reads the cached ids instead of tokenizing again, and a different
tokenizer never reads another's ids."""

import json
import subprocess
import sys
from pathlib import Path

import datasets
import pytest
from transformers import AutoTokenizer

from hf_seq.data import corpora as data_lib
from hf_seq.data.tokenization import train_bpe_tokenizer

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def _train(folder: Path, vocab_size: int) -> Path:
    tokenizer = train_bpe_tokenizer([" ".join(WORDS[i:] + WORDS[:i]) for i in range(12)] * 20, vocab_size=vocab_size)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def setup(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    files = []
    for i in range(2):
        files.append(tmp_path / f"part{i}.txt")
        files[-1].write_text("\n\n".join(f"{WORDS[j % 12]} {j} {WORDS[(j * 5) % 12]}" for j in range(200)) + "\n")
    return {"files": files, "cache": cache, "tokenizer": _train(tmp_path / "tok", 300)}


def _cache_state(dataset: datasets.Dataset) -> list[tuple[str, int]]:
    files = [Path(f["filename"]) for f in dataset.cache_files]
    return [(str(f), f.stat().st_mtime_ns) for f in files]


def test_second_tokenization_reads_the_cache(setup):
    tokenizer = AutoTokenizer.from_pretrained(setup["tokenizer"])
    first = data_lib.tokenize_texts(data_lib.load_files(setup["files"]), tokenizer)
    state = _cache_state(first)
    assert state and all(Path(name).is_relative_to(setup["cache"]) for name, _ in state)
    # Use changes a tokenizer's backend state (truncation, padding); it must not change the cache key.
    tokenizer(["alpha beta gamma delta"], truncation=True, max_length=2, padding="max_length")
    again = AutoTokenizer.from_pretrained(setup["tokenizer"])  # a second object, as a second run loads it
    for tok in (tokenizer, again):
        second = data_lib.tokenize_texts(data_lib.load_files(setup["files"]), tok)
        assert _cache_state(second) == state  # the same files, not rewritten
        assert second["input_ids"] == first["input_ids"]


def test_another_tokenizer_does_not_read_the_cache(setup, tmp_path):
    rows = data_lib.load_files(setup["files"])
    first = data_lib.tokenize_texts(rows, AutoTokenizer.from_pretrained(setup["tokenizer"]))
    other = AutoTokenizer.from_pretrained(_train(tmp_path / "other", 270))
    second = data_lib.tokenize_texts(rows, other)
    assert {f["filename"] for f in second.cache_files}.isdisjoint(f["filename"] for f in first.cache_files)
    assert second["input_ids"][:5] == [other(t, add_special_tokens=False)["input_ids"] for t in rows["text"][:5]]


CHILD = """
import json, sys
import datasets
from transformers import AutoTokenizer
from hf_seq.data import corpora as data
datasets.config.HF_DATASETS_CACHE = sys.argv[1]
spec = json.loads(sys.argv[2])
out = data.tokenize_texts(data.load_files(spec["files"]), AutoTokenizer.from_pretrained(spec["tokenizer"]))
print(json.dumps([f["filename"] for f in out.cache_files]))
"""


@pytest.mark.slow  # a new process imports transformers and datasets: 10-30 s on a shared CPU
def test_a_new_process_reads_the_cache(setup):
    """The cache key is built from the tokenizer's content, not from anything that changes between processes."""
    first = data_lib.tokenize_texts(
        data_lib.load_files(setup["files"]), AutoTokenizer.from_pretrained(setup["tokenizer"])
    )
    state = _cache_state(first)
    spec = json.dumps({"files": [str(f) for f in setup["files"]], "tokenizer": str(setup["tokenizer"])})
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(setup["cache"]), spec], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [name for name, _ in state]
    assert _cache_state(first) == state  # the child did not rewrite them
