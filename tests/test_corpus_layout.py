"""A corpus in the usual language-modelling layout (train / valid / test files, one sentence a line, no blank lines)
trains, evaluates and holds out what the user gave; without a validation file, the held-out part is the tail of the
running text, since such a file is a single document."""

import json
import subprocess
import sys

from hf_seq.data import tasks
from hf_seq.training.recipes import load_recipe
from tests.test_training import ROOT

WORDS = "the a model of language reads each word and guesses what comes next from what came before it".split()


def sentence_files(tmp_path, lines=(240, 30, 30)) -> list:
    """Three files of one sentence a line (no blank line anywhere), different sentences in each."""
    import random

    rng = random.Random(0)
    paths = []
    for name, count in zip(("train", "valid", "test"), lines):
        text = "\n".join(" ".join(rng.choices(WORDS, k=rng.randint(6, 14))).capitalize() + "." for _ in range(count))
        path = tmp_path / f"{name}.txt"
        path.write_text(text + "\n")
        paths.append(path)
    return paths


RECIPE = {
    "family": "gpt",
    "model": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 32},
    "tokenizer": {"vocab_size": 300},
    "data": {"block_size": 32},
    "training": {"max_steps": 4, "batch_size": 4, "eval_every": 4, "log_with": "none", "threads": 1},
}


def test_a_sentence_a_line_corpus_trains_and_evaluates_on_its_own_splits(tmp_path):
    train, valid, test = sentence_files(tmp_path)
    out = tmp_path / "run"
    overrides = [f"data.dataset={train}", f"data.validation={valid}", f"data.test={test}", f"training.output_dir={out}"]
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps(RECIPE))
    cli = [sys.executable, "-m", "hf_seq.cli"]
    done = subprocess.run([*cli, "train", str(recipe), *overrides], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_tokens"] > 0 and metrics["eval_tokens"] > 0
    assert "eval_held_out_tail" not in metrics  # the given validation file was scored

    scored = subprocess.run([*cli, "evaluate", str(out), "--json"], cwd=ROOT, capture_output=True, text=True)
    assert scored.returncode == 0, scored.stderr
    again = json.loads(scored.stdout[scored.stdout.index("{") :])
    for key in ("eval_loss", "eval_tokens", "test_loss", "test_tokens", "test_bits_per_byte"):
        assert again[key] == metrics[key], key


def test_without_a_validation_file_the_tail_of_the_running_text_is_held_out(tmp_path):
    train, _, _ = sentence_files(tmp_path)
    recipe = load_recipe(RECIPE, [f"data.dataset={train}", "data.eval_fraction=0.1"])
    prepared = tasks.prepare(recipe)
    held_out = list(prepared.held_out["eval"]["input_ids"])
    trained = list(prepared.train["input_ids"])
    assert prepared.notes["eval_held_out_tail"] == len(held_out) == round(0.1 * (len(trained) + len(held_out)))

    # the same blocks as packing the whole file: the first ones trained on, the last ones held out, none in both
    whole = tasks.prepare(load_recipe(RECIPE, [f"data.dataset={train}", f"data.validation={train}"]),
                          tokenizer=prepared.tokenizer).train["input_ids"]  # fmt: skip
    whole = list(whole)
    assert trained + held_out == whole
