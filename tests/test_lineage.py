"""`hf-seq lineage --quick`: every member trains and is scored on the same held-out tokens, sizes are matched, and
the files the issue names are written."""

import json

import pytest
import torch

from hf_seq.experiments import lineage


def test_quick_lineage_writes_the_table_curves_and_cards(tmp_path):
    from hf_seq.cli import main

    main(["lineage", "--quick", "--output-dir", str(tmp_path)])
    result = json.loads((tmp_path / "lineage.json").read_text())
    records = {r["name"]: r for r in result["members"]}
    assert list(records) == list(lineage.MEMBERS)
    for name, r in records.items():
        for key in ("params", "non_embedding_params", "train_tokens", "seconds", "eval_bits_per_byte"):
            assert key in r, (name, key)
        assert (tmp_path / name / "README.md").exists(), name  # a model card per member
        # one held-out set for all: the same predicted tokens and bytes
        assert (r["eval_tokens"], r["eval_bytes"]) == (result["eval_tokens"], result["eval_bytes"])
        assert r["train_tokens"] == result["budget_tokens"]  # one token budget
        assert r["curve"], name
    neural = [r for r in records.values() if r["name"] != "ngram"]
    target = result["target"]
    for r in neural:  # matched sizes: non-embedding parameters within 5% of the target, equal embeddings
        assert abs(r["non_embedding_params"] - target) <= 0.05 * target, r
    # bits per byte agrees with perplexity through the counts: NLL total in bits / bytes
    for r in records.values():
        nll_bits = torch.log2(torch.tensor(r["eval_perplexity"], dtype=torch.float64)) * r["eval_tokens"]
        assert abs(nll_bits.item() / r["eval_bytes"] - r["eval_bits_per_byte"]) < 1e-6
    assert (tmp_path / "learning_curves.png").stat().st_size > 10_000
    table = (tmp_path / "lineage.md").read_text()
    assert all(lineage.TITLES[name] in table for name in lineage.MEMBERS if name != "ngram")


def test_matched_size_hits_the_target_for_every_neural_member():
    settings = dict(lineage.SETTINGS["default"])
    for name in lineage.MEMBERS[1:]:
        size = lineage.matched_size(name, settings, vocab_size=4096)
        _, non_embedding = lineage.count_parameters(lineage.build(name, settings, size, 4096))
        assert abs(non_embedding - settings["target"]) <= 0.02 * settings["target"], (name, size, non_embedding)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        lineage.run(quick=True, output_dir=tmp_path, budget_tokens=100, budget_seconds=1.0)
    with pytest.raises(ValueError, match="unknown member 'rnn'"):
        lineage.run(quick=True, output_dir=tmp_path, members=("rnn",))
