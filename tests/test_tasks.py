"""The task layer: held-out data by name, packing that keeps order, and numbers that compare models."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from hf_seq.data import corpora as data_lib
from hf_seq.data import tasks
from hf_seq.data.tokenization import train_bpe_tokenizer
from hf_seq.evaluation.metrics import evaluate_language_model, lm_metrics, token_byte_lengths
from hf_seq.training.recipes import RecipeError, load_recipe

ROOT = Path(__file__).resolve().parents[1]
GPT = {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 32}


@pytest.fixture(scope="module")
def tokenizer():
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    return train_bpe_tokenizer([" ".join(words[i:] + words[:i]) for i in range(12)] * 20, vocab_size=300)


def _paragraphs(prefix, count):
    return "\n\n".join(f"{prefix} {i:04d} alpha beta gamma {i % 7} delta" for i in range(count)) + "\n"


@pytest.fixture
def corpus(tmp_path):
    files = {}
    for name, count in (("train", 300), ("valid", 40), ("test", 30)):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text(_paragraphs(name, count))
    return files


def _recipe(tmp_path, corpus, **data):
    return load_recipe(
        {
            "family": "gpt",
            "model": GPT,
            "tokenizer": {"vocab_size": 300},
            "data": {"dataset": str(corpus["train"]), "block_size": 16, **data},
            "training": {"max_steps": 4, "batch_size": 4, "eval_every": 4, "output_dir": str(tmp_path / "run")},
        }
    )


def _expected_scored_tokens(text_file, tokenizer, block_size):
    """Predicted tokens of a file packed by hand: paragraphs + EOS, whole blocks, block_size - 1 targets each."""
    paragraphs = [p for p in text_file.read_text().split("\n\n") if p.strip()]
    stream = []
    for paragraph in paragraphs:
        stream += tokenizer(paragraph.strip("\n"), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return (len(stream) // block_size) * (block_size - 1)


def test_validation_and_test_files_are_scored_whole(tmp_path, corpus, tokenizer):
    recipe = _recipe(tmp_path, corpus, validation=str(corpus["valid"]), test=[str(corpus["test"])])
    recipe.tokenizer.path = None
    prepared = tasks.prepare(recipe, tokenizer=tokenizer)
    assert len(prepared.train) * 16 >= 300 * 8  # all training paragraphs, none held out from them
    from hf_seq.training.pretraining import build_model

    metrics = tasks.evaluate(recipe, prepared, build_model(recipe, prepared), "cpu")
    assert metrics["eval_tokens"] == _expected_scored_tokens(corpus["valid"], tokenizer, 16)
    assert metrics["test_tokens"] == _expected_scored_tokens(corpus["test"], tokenizer, 16)
    assert "eval_examples_total" not in metrics and metrics["eval_examples"] == len(prepared.held_out["eval"])


def test_a_capped_evaluation_says_how_much_it_scored(tmp_path, corpus, tokenizer):
    recipe = _recipe(tmp_path, corpus, validation=str(corpus["valid"]), eval_examples=3)
    prepared = tasks.prepare(recipe, tokenizer=tokenizer)
    from hf_seq.training.pretraining import build_model

    metrics = tasks.evaluate(recipe, prepared, build_model(recipe, prepared), "cpu")
    assert metrics["eval_examples"] == 3 and metrics["eval_examples_total"] > 3
    assert metrics["eval_tokens"] == 3 * 15
    assert f"scored 3 of {metrics['eval_examples_total']}" in tasks.describe_scoring(metrics)


def test_training_writes_the_named_metrics_and_the_card_states_them(tmp_path, corpus):
    from hf_seq.training.pretraining import run

    recipe = _recipe(tmp_path, corpus, validation=str(corpus["valid"]), test=str(corpus["test"]), eval_examples=5)
    recipe.training.log_with = None
    summary = run(recipe, progress=False)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    for prefix in ("eval", "test"):
        for key in ("loss", "perplexity", "bits_per_byte", "tokens", "bytes"):
            assert saved[f"{prefix}_{key}"] == summary[f"{prefix}_{key}"]
        assert saved[f"{prefix}_perplexity"] == pytest.approx(math.exp(saved[f"{prefix}_loss"]))
    curve = saved["evaluations"][-1]
    assert curve["step"] == 4 and curve["tokens"] == 4 * 4 * 16 and "eval_bits_per_byte" in curve
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"{summary['eval_bits_per_byte']:.4g}" in card and "5 of" in card and "capped" in card
    assert "pipeline_tag: text-generation" in card and "- causal-lm" in card  # from the task table
    # hf-seq evaluate measures the same numbers again
    from hf_seq.training.pretraining import evaluate_folder

    again = evaluate_folder(tmp_path / "run")
    for key in ("eval_loss", "eval_bits_per_byte", "test_loss", "test_bits_per_byte"):
        assert again[key] == pytest.approx(summary[key], rel=1e-5)


def test_packed_blocks_keep_document_order(tokenizer):
    texts = [f"document {i:03d} alpha beta" for i in range(60)]
    blocks = data_lib.packed_lm_dataset(texts, tokenizer, block_size=12)
    text = "".join(tokenizer.decode(block) for block in blocks["input_ids"])
    numbers = [int(n) for n in re.findall(r"document (\d{3})", text)]
    assert numbers == sorted(numbers) and len(numbers) >= 55
    assert numbers[0] == 0


def test_held_out_documents_leave_the_training_order_intact(tmp_path, corpus):
    recipe = _recipe(tmp_path, corpus, eval_fraction=0.2)
    splits = data_lib.load_splits(recipe.data, {"text": "text"})
    train = [int(t.split()[1]) for t in splits["train"]["text"]]
    held = [int(t.split()[1]) for t in splits["validation"]["text"]]
    assert train == sorted(train) and len(held) == 60 and not set(train) & set(held)
    again = data_lib.load_splits(recipe.data, {"text": "text"})
    assert again["validation"]["text"] == splits["validation"]["text"]  # the split does not move


def test_bits_per_byte_equals_a_hand_computation(tokenizer):
    from hf_seq import GPTConfig, GPTForCausalLM

    torch.manual_seed(0)
    model = GPTForCausalLM(GPTConfig(vocab_size=len(tokenizer), **GPT)).eval()
    texts = ["alpha é beta gamma ü delta", "theta iota kappa lambda mu 日本"]  # multi-byte characters too
    blocks = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    dataset = [{"input_ids": b} for b in blocks]
    metrics = evaluate_language_model(
        model, dataset, tasks.CausalLMCollator(), 1, "cpu", token_byte_lengths(tokenizer), shift_labels=True
    )
    nll_bits, count = 0.0, 0
    for ids in blocks:
        logits = model(torch.tensor([ids])).logits[0]
        for t in range(1, len(ids)):
            nll_bits -= F.log_softmax(logits[t - 1], -1)[ids[t]].item() / math.log(2)
            count += 1
    predicted_text = [tokenizer.decode(ids[1:]) for ids in blocks]
    assert metrics["eval_bytes"] == sum(len(t.encode("utf-8")) for t in predicted_text)
    assert metrics["eval_tokens"] == count
    assert metrics["eval_bits_per_byte"] == pytest.approx(nll_bits / metrics["eval_bytes"], rel=1e-5)
    assert lm_metrics(10.0, 5, 8)["eval_bits_per_byte"] == pytest.approx(10 / math.log(2) / 8)


def test_label_smoothing_does_not_change_the_reported_perplexity(tokenizer):
    from hf_seq import TransformerConfig, TransformerForConditionalGeneration

    shape = dict(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    torch.manual_seed(0)
    plain = TransformerForConditionalGeneration(TransformerConfig(**shape)).eval()
    smoothed = TransformerForConditionalGeneration(TransformerConfig(**shape, label_smoothing=0.2)).eval()
    smoothed.load_state_dict(plain.state_dict())
    rows = [{"input_ids": [5, 6, 7, 8], "labels": [9, 10, 11, tokenizer.eos_token_id]}] * 3
    collator = tasks._seq2seq_collator(None, tokenizer, plain)
    lengths = token_byte_lengths(tokenizer)
    a = evaluate_language_model(plain, rows, collator, 2, "cpu", lengths, shift_labels=False)
    b = evaluate_language_model(smoothed, rows, collator, 2, "cpu", lengths, shift_labels=False)
    batch = collator(rows)
    assert smoothed(**batch).loss.item() != pytest.approx(plain(**batch).loss.item(), rel=1e-3)  # smoothing is on
    assert b["eval_perplexity"] == pytest.approx(a["eval_perplexity"], rel=1e-6)
    assert a["eval_loss"] == pytest.approx(plain(**batch).loss.item(), rel=1e-5)


def test_seq2seq_truncation_is_counted(tmp_path, tokenizer):
    recipe = load_recipe(
        {
            "family": "bahdanau",
            "data": {"dataset": "reversal", "block_size": 12, "max_examples": 200},
            "training": {"output_dir": str(tmp_path / "s")},
        }
    )
    prepared = tasks.prepare(recipe, tokenizer=tokenizer)
    cut = prepared.notes["train_truncated_sources"] + prepared.notes["eval_truncated_sources"]
    rows = data_lib.sequence_reversal(200, seed=data_lib.HELD_OUT_SEED)
    expected = sum(len(tokenizer(r["source"], add_special_tokens=False)["input_ids"]) > 12 for r in rows)
    assert cut == expected > 0


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.eval_fraction=1.5", r"'data.eval_fraction' must be in the open interval \(0.0, 1.0\), got 1.5"),
        ("data.eval_fraction=-0.5", r"'data.eval_fraction' must be in the open interval"),
        ("data.mlm_probability=0", r"'data.mlm_probability' must be in the open interval"),
        ("training.threads=0", r"'training.threads' must be positive, got 0"),
        ("data.eval_examples=0", r"'data.eval_examples' must be positive"),
        ("training.max_seconds=-1", r"'training.max_seconds' must be positive"),
        ("data.validation=[1, 2]", r"'data.validation\[0\]': expected str"),
    ],
)
def test_ranges_are_checked_with_the_key_and_the_value(override, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe({"family": "gpt"}, [override])


def test_a_missing_held_out_file_is_named(tmp_path, corpus):
    recipe = _recipe(tmp_path, corpus, validation=str(tmp_path / "nope.txt"))
    with pytest.raises(FileNotFoundError, match=r"data.validation: file not found: .*nope.txt"):
        tasks.prepare(recipe)


def test_train_tokenizer_reads_any_local_text_file(tmp_path):
    out = tmp_path / "tok"
    cmd = [
        sys.executable,
        "-m",
        "hf_seq.cli",
        "train-tokenizer",
        "--files",
        str(ROOT / "README.md"),
        str(ROOT / "hf_seq" / "data" / "tasks.py"),
        "--vocab-size",
        "300",
        "--output-dir",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", **_env()})
    assert done.returncode == 0, done.stderr
    assert (out / "tokenizer.json").exists()
    missing = subprocess.run(
        [*cmd[:5], str(tmp_path / "absent.md"), *cmd[7:]], capture_output=True, text=True, env=_env()
    )
    assert missing.returncode != 0 and "--files: file not found" in missing.stderr and "absent.md" in missing.stderr


def _env():
    import os

    return dict(os.environ, HF_HUB_OFFLINE="1")


def test_no_task_name_branches_outside_the_task_table():
    offenders = []
    for path in (ROOT / "hf_seq").rglob("*.py"):
        if path.name == "tasks.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\btask (==|!=|in) |\.task ==|__name__\.endswith\(", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_recipe_sets_a_scheduled_sampling_decay(tmp_path):
    from hf_seq.training.pretraining import run

    decay = {"decay": "linear", "k": 1.0, "c": 0.25}
    recipe = load_recipe(
        {
            "family": "bahdanau",
            "model": {"hidden_size": 16, "embedding_size": 8, "attention_size": 8},
            "tokenizer": {"vocab_size": 300},
            "data": {"dataset": "reversal", "block_size": 16, "max_examples": 200, "eval_examples": 4},
            "training": {
                "max_steps": 3,
                "batch_size": 8,
                "output_dir": str(tmp_path / "s"),
                "log_with": "none",
                "scheduled_sampling": decay,
                "generation_max_new_tokens": 4,
            },
        }
    )
    run(recipe, progress=False)
    saved = json.loads((tmp_path / "s" / "config.json").read_text())
    assert saved["scheduled_sampling"] == pytest.approx(0.5)  # 1 - (1 - 0.25 * 2) before the third step
    with pytest.raises(RecipeError, match="training.scheduled_sampling"):
        load_recipe({"family": "gpt", "training": {"scheduled_sampling": decay}})
    with pytest.raises(RecipeError, match="k <= 1"):
        load_recipe({"family": "bahdanau", "training": {"scheduled_sampling": {"decay": "linear", "k": 2.0}}})


def test_parentheses_counts_decide_every_example():
    """What the data's docstring says: each unbalanced string has a bracket type whose opening and closing counts
    differ, so counting alone separates the classes (the task does not test nesting order)."""
    from hf_seq.data.corpora import parentheses_classification

    rows = parentheses_classification(num_examples=400)
    for row in rows:
        brackets = row["text"].split()
        counts_equal = all(brackets.count(o) == brackets.count(c) for o, c in ("()", "[]", "{}"))
        assert counts_equal == bool(row["label"]), row
