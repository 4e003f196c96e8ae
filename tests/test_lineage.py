"""`hf-seq lineage --quick`: every member trains and is scored on the same held-out tokens, sizes are matched, and
the files the issue names are written."""

import json
from pathlib import Path

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


def test_reports_and_cards_name_a_local_corpus_by_its_file_name(tmp_path, monkeypatch):
    """lineage.md, lineage.json, the plot's title and the members' cards are meant to be shared: a local corpus
    appears in them as its file name, never as this machine's path (as `hf-seq push` publishes a recipe)."""
    from hf_seq.cli import main
    from hf_seq.data import stdlib_texts

    corpus = tmp_path / "home-of-someone-7f3a" / "data" / "corpus-7f3a.txt"
    corpus.parent.mkdir(parents=True)
    corpus.write_text("\n\n".join(stdlib_texts(max_chars=150_000)))
    titles = []
    plot_curves = lineage.plot_curves
    monkeypatch.setattr(
        lineage, "plot_curves", lambda records, path, title: titles.append(title) or plot_curves(records, path, title)
    )
    out = tmp_path / "out"
    main(["lineage", "--quick", "--members", "ngram,gpt", "--corpus", str(corpus), "--output-dir", str(out)])
    # the runs' own recipe.json is the local record that `hf-seq evaluate` and `--resume` read the data from
    # (`hf-seq push` publishes it with names); every other text file is checked
    written = [p for p in out.rglob("*") if p.suffix in (".md", ".json") and p.name != "recipe.json"]
    assert {"lineage.md", "lineage.json", "README.md"} <= {p.name for p in written}
    for path in [*written, *titles]:
        text = path.read_text() if isinstance(path, Path) else path
        for leak in (str(corpus), str(corpus.parent), str(corpus.parent.parent), "home-of-someone-7f3a"):
            assert leak not in text, (path, leak)
    for path in (out / "lineage.md", out / "ngram" / "README.md", out / "gpt" / "README.md"):
        assert "corpus-7f3a.txt" in path.read_text(), path
    assert json.loads((out / "lineage.json").read_text())["corpus"] == "corpus-7f3a.txt"
    assert titles and titles[0].startswith("corpus-7f3a.txt, ")
