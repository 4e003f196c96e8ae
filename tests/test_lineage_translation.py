"""`hf-seq lineage --task translation --quick`: the five encoder-decoders train on one split with one tokenizer, are
sized alike, are scored on the same test pairs, differ where the lectures say they differ, and write the table, the
BLEU-by-length plot and the alignment pictures."""

import json
import math
import random

import pytest

from hf_seq.cli import main
from hf_seq.experiments import lineage_translation as lt

FIELDS = {
    "test_bleu": float,
    "test_chrf": float,
    "test_repetition_rate": float,
    "test_length_ratio": float,
    "test_bleu_by_length": list,
    "validation_perplexity": float,
    "best_step": int,
    "flops_per_token": int,
    "trials": list,
    "seed": int,
}


@pytest.fixture(scope="module")
def gettext_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gettext")
    main(["lineage", "--task", "translation", "--quick", "--threads", "1", "--output-dir", str(out)])
    return out, json.loads((out / "lineage.json").read_text())


def test_every_member_is_trained_and_scored_on_the_same_test_pairs(gettext_run):
    out, result = gettext_run
    records = {r["name"]: r for r in result["members"]}
    assert list(records) == list(lt.MEMBERS)
    for name, r in records.items():
        for key, kind in FIELDS.items():
            assert isinstance(r[key], kind), (name, key, r[key])
        assert 0 <= r["test_bleu"] <= 100 and 0 <= r["test_chrf"] <= 100 and 0 <= r["test_repetition_rate"] <= 1
        assert r["test_length_ratio"] >= 0 and 1 < r["validation_perplexity"] < result["vocab_size"] * 2
        assert math.isfinite(r["test_perplexity"]) and r["flops_per_token"] > 0
        assert 1 <= r["best_step"] <= r["steps"] and r["steps"] == records["sutskever"]["steps"]  # one token budget
        buckets = r["test_bleu_by_length"]
        assert buckets and sum(b["sentences"] for b in buckets) == result["settings"]["test_pairs"]
        assert all({"bucket", "min_words", "sentences", "bleu"} <= set(b) for b in buckets)
        # sizes matched: non-embedding parameters near the target (whole units of n at this tiny width)
        assert abs(r["non_embedding_params"] - result["sizes"][0]) <= 0.06 * result["sizes"][0], r
        assert (out / name / "model.safetensors").exists()
    # the split is made once, and the test pairs are none of the training pairs
    read = lambda split: [json.loads(line) for line in (out / "data" / f"{split}.jsonl").read_text().splitlines()]
    train, test = read("train"), read("test")
    assert len(test) == result["settings"]["test_pairs"] and len(train) == result["train_pairs"]
    assert not {p["source"] for p in train} & {p["source"] for p in test}


def test_the_members_differ_where_the_lectures_say(gettext_run):
    from transformers import AutoConfig

    out, _ = gettext_run
    sutskever, cho, bahdanau, luong, transformer = (AutoConfig.from_pretrained(out / name) for name in lt.MEMBERS)
    assert (sutskever.cell_type, sutskever.attention_type, sutskever.reverse_source) == ("lstm", "none", True)
    assert not sutskever.encoder_bidirectional and sutskever.bridge == "final_state"
    assert (sutskever.decoder_input, sutskever.output_layer) == ("embedding", "linear")
    assert (cho.cell_type, cho.attention_type, cho.bridge) == ("gru", "none", "bahdanau")
    assert not cho.encoder_bidirectional
    assert (cho.decoder_input, cho.output_layer, cho.reverse_source) == ("embedding_and_context", "deep", False)
    assert bahdanau.attention_type == "additive" and bahdanau.encoder_bidirectional and not bahdanau.reverse_source
    # Luong's member is Bahdanau's with the bilinear score (and the units that match its size)
    a, b = bahdanau.to_dict(), luong.to_dict()
    differ = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    sized = {"hidden_size", "attention_size", "decoder_hidden_size", "_name_or_path"}
    assert "attention_type" in differ and differ <= {"attention_type"} | sized
    assert luong.attention_type == "general"
    assert transformer.model_type == "hf_seq_transformer" and transformer.norm_position == "post"
    assert transformer.tie_word_embeddings and bahdanau.tie_word_embeddings and not sutskever.tie_word_embeddings


def test_the_report_has_a_row_per_member_the_order_and_the_pictures(gettext_run):
    out, result = gettext_run
    table = (out / "lineage.md").read_text()
    assert table.startswith("# The translation lineage: Sutskever, Cho, Bahdanau, Luong, Transformer\n")
    for row in lt.ROWS:
        assert sum(line.startswith(f"| {row.title} |") for line in table.splitlines()) == 1, row.name
    assert "Lectures' order, worst first: sutskever < cho < bahdanau ~ luong < transformer." in table
    # the test translations repeat no run of 1-4 words back to back (bench/results/repetition_cpu.md)
    assert result["decoding"]["block_repeats"] == 4 and "block_repeats 4" in table
    assert (out / "bleu_by_length.png").stat().st_size > 10_000
    for name in lt.MEMBERS:
        picture = out / f"alignment-{name}.png"
        assert picture.exists() == (name in ("bahdanau", "luong", "transformer")), name
        if picture.exists():
            assert picture.stat().st_size > 5_000 and f"](alignment-{name}.png)" in table
    assert result["summary"] and all(row["seeds"] == 1 for row in result["summary"])


# ---------------------------------------------------------------------------------------------- a corpus of one's own
WORDS = {"the": "el", "cat": "gato", "dog": "perro", "eats": "come", "sees": "ve", "big": "grande", "red": "rojo"}


def write_parallel(folder, counts=(600, 30, 30)) -> list:
    """train / valid / test JSON lines with `en` and `es` columns: word-for-word translations of random sentences."""
    rng = random.Random(0)
    paths = []
    for split, count in zip(("train", "valid", "test"), counts):
        path = folder / f"{split}.jsonl"
        lines = []
        for _ in range(count):
            words = rng.choices(list(WORDS), k=rng.randint(3, 9))
            lines.append(json.dumps({"id": len(lines), "en": " ".join(words), "es": " ".join(WORDS[w] for w in words)}))
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths


def test_a_parallel_corpus_with_its_own_columns_and_the_same_command_again(tmp_path, capsys):
    train, valid, test = write_parallel(tmp_path)
    out = tmp_path / "out"
    command = ["lineage", "--task", "translation", "--quick", "--corpus", str(train), "--validation", str(valid),
               "--test", str(test), "--source-column", "en", "--target-column", "es", "--members", "cho,bahdanau",
               "--threads", "1", "--output-dir", str(out)]  # fmt: skip
    main(command)
    result = json.loads((out / "lineage.json").read_text())
    assert [r["name"] for r in result["members"]] == ["cho", "bahdanau"]
    assert (result["corpus"], result["test"]) == ("train.jsonl", "test.jsonl")  # named by file, not path
    given = [json.loads(line) for line in test.read_text().splitlines()]
    written = [json.loads(line) for line in (out / "data" / "test.jsonl").read_text().splitlines()]
    assert written == [{"source": p["en"], "target": p["es"]} for p in given]  # a test file named is scored whole
    for r in result["members"]:
        assert all(isinstance(r[key], kind) for key, kind in FIELDS.items()), r["name"]
    capsys.readouterr()
    main(command)  # a study started again trains nothing it has finished
    printed = capsys.readouterr().out
    assert "holds this very study, finished: its records are reused" in printed and "training:" not in printed
    again = json.loads((out / "lineage.json").read_text())
    assert [r["test_bleu"] for r in again["members"]] == [r["test_bleu"] for r in result["members"]]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--task", "translation", "--members", "bahdanau,gpt"], "lineage: unknown member 'gpt' for --task translation"),
        (["--members", "luong"], "lineage: unknown member 'luong' for --task language_model"),
        (["--source-column", "en"], "lineage: --source-column 'en' is for --task translation"),
        (["--task", "translation", "--corpus", "{train}", "--source-column", "english", "--target-column", "es"],
         "lineage: --source-column 'english' / --target-column 'es': the train data has no column(s) ['english']"),
    ],
)  # fmt: skip
def test_bad_members_and_columns_are_one_line_errors(tmp_path, capsys, arguments, message):
    train, _, _ = write_parallel(tmp_path, counts=(40, 4, 4))
    arguments = [a.replace("{train}", str(train)) for a in arguments]
    with pytest.raises(SystemExit) as exit:
        main(["lineage", "--quick", "--output-dir", str(tmp_path / "out"), *arguments])
    assert exit.value.code == 2
    printed = capsys.readouterr().err
    error = printed.splitlines()[-1]  # after the progress bars of `datasets`, if any
    assert error.startswith(f"hf-seq: error: {message}") and printed.count("hf-seq") == 1, printed
    assert "Traceback" not in printed and printed.endswith(error + "\n")


# ---------------------------------------------------------------------------------------------- the parts
def test_a_translation_column_is_read_by_its_languages(tmp_path):
    import datasets

    from hf_seq.data.corpora import select_columns

    rows = [{"translation": {"en": f"the cat {i}", "de": f"die Katze {i}"}} for i in range(3)]
    typed = datasets.Dataset.from_list(
        rows, features=datasets.Features({"translation": datasets.Translation(["en", "de"])})
    )
    typed.to_json(tmp_path / "pairs.jsonl")  # a struct of strings once written and read back
    plain = datasets.load_dataset("json", data_files=str(tmp_path / "pairs.jsonl"), split="train")
    for dataset in (typed, plain):
        got = select_columns({"train": dataset}, {"source": "de", "target": "en"})["train"]
        assert got.column_names == ["source", "target"] and got[2] == {"source": "die Katze 2", "target": "the cat 2"}
    with pytest.raises(
        ValueError, match=r"no column\(s\) \['fr'\] \(columns: \['translation', 'translation.de', 'translation.en'\]\)"
    ):
        select_columns({"train": typed}, {"source": "en", "target": "fr"})


def test_default_sizes_match_and_the_flops_count_splits_encoder_and_decoder():
    from hf_seq.experiments.study import count_parameters
    from hf_seq.training.compute import model_flops_per_token, seq2seq_flops_per_token

    s = lt.LINEAGE.settings_for()
    for name in lt.MEMBERS:
        model = lt.build(name, s, lt.matched_size(name, s, 4000), 4000)
        assert abs(count_parameters(model)[1] - s.target) <= 0.02 * s.target, name
        if name != "transformer":  # no attention term: a pair of S = T tokens costs 6 N (S + T) / 2 per token
            assert seq2seq_flops_per_token(model, 10, 10) == pytest.approx(model_flops_per_token(model, 10) / 2)
            # the decoder (with the output layer over 4000 tokens) outweighs the encoder: longer targets cost more
            assert seq2seq_flops_per_token(model, 5, 15) > seq2seq_flops_per_token(model, 15, 5)


def test_sizes_seeds_tuning_and_a_flops_budget_run_as_in_the_language_model_lineage(tmp_path):
    """The shared runner's knobs on the translation table: two sizes, two seeds, two trials, a FLOPs budget."""
    from hf_seq.experiments.study import TUNE_FRACTION

    train, valid, test = write_parallel(tmp_path, counts=(300, 16, 16))
    flops = 4e8
    result = lt.run(
        quick=True, output_dir=tmp_path / "out", corpus=str(train), validation=str(valid), test=str(test),
        source_column="en", target_column="es", members=("cho", "transformer"), sizes=[3000, 6000], seeds=2,
        tune=2, budget_flops=flops, threads=1, progress=False,
    )  # fmt: skip
    per_pair = result["mean_source_tokens"] + result["mean_target_tokens"]
    for r in result["members"]:
        steps = math.ceil(flops / (r["flops_per_token"] * result["settings"]["batch_size"] * per_pair))
        assert r["steps"] == steps and len(r["trials"]) == 2, r["name"]
        assert {t["steps"] for t in r["trials"]} == {math.ceil(steps * TUNE_FRACTION)}
        best = min(r["trials"], key=lambda t: t["eval_loss"])
        assert (r["learning_rate"], r["dropout"]) == (best["learning_rate"], best["dropout"])
    assert {(row["name"], row["target"], row["seeds"]) for row in result["summary"]} == {
        (name, size, 2) for name in ("cho", "transformer") for size in (3000, 6000)
    }
    table = (tmp_path / "out" / "lineage.md").read_text()
    assert "## Non-embedding parameters 3,000" in table and "(seed 1)" in table
    assert (tmp_path / "out" / "scaling.png").exists() and (
        tmp_path / "out" / "alignment-transformer-6000-seed0.png"
    ).exists()
