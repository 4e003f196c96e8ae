"""Balanced colored parentheses, the lectures' memory task: is `( [ ] { } )` well nested? Reading left to right, a
model must keep a stack of the open brackets, their colors and their order: an Elman network has to hold it in one
squashed state, gated networks can protect it, and a Transformer can look back at every bracket but has to learn to
count and match with a fixed number of layers.

Elman, gated Elman, GRU, LSTM and GPT classifiers of about the same number of weights are trained on strings of up
to `train_length` brackets (`hf_seq.data.parentheses_classification`: half balanced, half with one bracket replaced,
so length alone does not answer; counting each bracket type does) and tested on fresh strings up to
`test_length`: accuracy against length, and against nesting depth (the deepest point of the string's stack).
"""

import random
import time
from dataclasses import dataclass

import torch

from hf_seq import GPTConfig, GPTForSequenceClassification, RNNConfig, RNNForSequenceClassification
from hf_seq.data.corpora import parentheses_classification

from .common import (
    chosen_settings,
    claim,
    figure,
    finish,
    markdown_table,
    matched_width,
    output_folder,
    prose,
    save_figure,
    settings_record,
    torch_threads,
    total_parameters,
    train,
)

NAME = "parentheses"
TITLE = "Balanced colored parentheses: accuracy against length and nesting depth"
PAD = 0
BRACKET_IDS = {b: i + 1 for i, b in enumerate("()[]{}")}
MODELS = {  # label -> (family, flags)
    "Elman": ("rnn", dict(cell_type="elman")),
    "gated Elman": ("rnn", dict(cell_type="gated")),
    "GRU": ("rnn", dict(cell_type="gru")),
    "LSTM": ("rnn", dict(cell_type="lstm")),
    "GPT": ("gpt", dict(num_hidden_layers=2, num_attention_heads=4, position_embedding_type="rope")),
}
MIN_STRINGS_PER_DEPTH = 20  # fewer make a noisy point


@dataclass(frozen=True)
class Settings:
    """Every model sized to `parameters` weights, trained for `steps` AdamW steps on batches of `batch_size` strings
    of up to `train_length` brackets, tested on `test_examples` strings of each even length up to `test_length`."""

    parameters: int = 20_000
    steps: int = 2000
    batch_size: int = 64
    learning_rate: float = 3e-3
    gpt_learning_rate: float = 1e-3
    train_length: int = 20
    test_length: int = 60
    test_examples: int = 200  # per length
    seed: int = 0
    threads: int | None = 1  # None: torch's default


QUICK = Settings(parameters=7000, steps=30, batch_size=16, train_length=8, test_length=16, test_examples=16)


def build(name: str, hidden_size: int, max_positions: int):
    family, flags = MODELS[name]
    common = dict(vocab_size=len(BRACKET_IDS) + 1, hidden_size=hidden_size, num_labels=2, pad_token_id=PAD)
    if family == "rnn":
        config = RNNConfig(
            num_hidden_layers=1, embedding_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0, **common, **flags
        )
        return RNNForSequenceClassification(config)
    config = GPTConfig(
        max_position_embeddings=max_positions,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        bos_token_id=None,
        eos_token_id=None,
        **common,
        **flags,
    )
    return GPTForSequenceClassification(config)


def matched_hidden_size(name: str, budget: int, max_positions: int) -> int:
    """The width (a multiple of 8, so 4 heads get an even RoPE size) whose model is closest to `budget` weights."""
    return matched_width(lambda hidden: build(name, hidden, max_positions), budget)


def encode(rows: list[dict]) -> dict:
    """Rows of one length: no padding needed."""
    ids = torch.tensor([[BRACKET_IDS[b] for b in r["text"].split()] for r in rows])
    return {"input_ids": ids, "labels": torch.tensor([r["label"] for r in rows])}


def depth(text: str) -> int:
    """The deepest point of the stack: the largest number of brackets open at once, reading left to right."""
    level = deepest = 0
    for b in text.split():
        level += 1 if b in "([{" else -1
        deepest = max(deepest, level)
    return deepest


def test_set(s: Settings) -> list[dict]:
    """`test_examples` fresh strings of every even length up to test_length (seeds no training batch uses)."""
    rows = []
    for length in range(2, s.test_length + 1, 2):
        for r in parentheses_classification(s.test_examples, 10**9 + length, min_length=length, max_length=length):
            rows.append(r | {"length": length, "depth": depth(r["text"])})
    return rows


@torch.no_grad()
def predict(model, rows: list[dict]) -> list[bool]:
    """Whether each row is classified right, batched by length."""
    correct = []
    for length in sorted({r["length"] for r in rows}):
        batch = encode([r for r in rows if r["length"] == length])
        correct += (model(input_ids=batch["input_ids"]).logits.argmax(-1) == batch["labels"]).tolist()
    return correct


def accuracy_by(rows: list[dict], correct: list[bool], key: str) -> dict[int, float]:
    groups: dict[int, list[bool]] = {}
    for r, ok in zip(sorted(rows, key=lambda r: r["length"]), correct):
        groups.setdefault(r[key], []).append(ok)
    return {k: sum(v) / len(v) for k, v in sorted(groups.items())}


def run(quick: bool = False, output_dir=None, overrides=(), **changes) -> dict:
    """The experiment at the default settings (or QUICK's), with `overrides` (`KEY=VALUE`) and `changes` applied."""
    base = QUICK if quick else Settings()
    s = chosen_settings(NAME, base, overrides, changes)
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    rows = sorted(test_set(s), key=lambda r: r["length"])
    with torch_threads(s.threads):
        models = {name: train_and_test(name, s, rows) for name in MODELS}

    depth_counts: dict[int, int] = {}
    for r in rows:
        depth_counts[r["depth"]] = depth_counts.get(r["depth"], 0) + 1
    trained_depth = max(depth(r["text"]) for r in rows if r["length"] <= s.train_length)
    depths = sorted(d for d, n in depth_counts.items() if n >= MIN_STRINGS_PER_DEPTH)
    plots = [plot(models, folder / "accuracy.png", s, set(depths))]
    results = {
        "options": settings_record(s, base, quick),
        "trained_depth": trained_depth,
        "depth_counts": depth_counts,
        "models": models,
        "claims": claims(models, trained_depth),
    }
    body = report(s, models, depth_counts, depths, trained_depth)
    return finish(NAME, TITLE, folder, results, body, started, plots)


def train_and_test(name: str, s: Settings, rows: list[dict]) -> dict:
    """Train model `name`, sized to the budget, on strings of up to train_length brackets; score it on `rows`."""
    rng = random.Random(s.seed)
    lengths = [2 * rng.randint(1, s.train_length // 2) for _ in range(s.steps)]

    def batch(step: int) -> dict:
        length = lengths[step]
        return encode(parentheses_classification(s.batch_size, s.seed * 100_003 + step, length, length))

    hidden = matched_hidden_size(name, s.parameters, s.test_length)
    torch.manual_seed(s.seed)
    model = build(name, hidden, s.test_length)
    rate = s.gpt_learning_rate if MODELS[name][0] == "gpt" else s.learning_rate
    trained = train(model, batch, s.steps, rate)
    correct = predict(model, rows)
    seen = [ok for r, ok in zip(rows, correct) if r["length"] <= s.train_length]
    longer = [ok for r, ok in zip(rows, correct) if r["length"] > s.train_length]
    return {
        "hidden_size": hidden,
        "parameters": total_parameters(model),
        "train_seconds": round(trained["seconds"], 1),
        "final_train_loss": trained["final_loss"],
        "accuracy_trained_lengths": sum(seen) / len(seen),
        "accuracy_longer": sum(longer) / len(longer) if longer else float("nan"),
        "by_length": accuracy_by(rows, correct, "length"),
        "by_depth": accuracy_by(rows, correct, "depth"),
    }


def report(s: Settings, models: dict, depth_counts: dict[int, int], depths: list[int], trained_depth: int) -> str:
    """The Markdown body: the setup, accuracy against length, and accuracy against nesting depth."""
    lengths_shown = [n for n in sorted(next(iter(models.values()))["by_length"]) if n % 10 == 0 or n == 2]
    return "\n\n".join(
        [
            prose(__doc__),
            f"Budget {s.parameters:,} weights per model; one recurrent layer; GPT: 2 layers, 4 heads, RoPE "
            f"positions. {s.steps} AdamW steps (peak {s.learning_rate}, GPT {s.gpt_learning_rate}; cosine "
            f"decay) on batches of {s.batch_size} strings of one even length in 2-{s.train_length}. Test: "
            f"{s.test_examples} fresh strings of every even length up to {s.test_length}.",
            markdown_table(
                [
                    "model",
                    "width",
                    "parameters",
                    "train s",
                    f"accuracy ≤ {s.train_length}",
                    f"accuracy {s.train_length + 2}-{s.test_length}",
                ]
                + [f"length {n}" for n in lengths_shown],
                [
                    [
                        name,
                        m["hidden_size"],
                        f"{m['parameters']:,}",
                        m["train_seconds"],
                        f"{m['accuracy_trained_lengths']:.3f}",
                        f"{m['accuracy_longer']:.3f}",
                    ]
                    + [f"{m['by_length'][n]:.2f}" for n in lengths_shown]
                    for name, m in models.items()
                ],
            ),
            f"Accuracy against nesting depth (all test lengths; the training strings reach depth {trained_depth}; "
            f"depths with fewer than {MIN_STRINGS_PER_DEPTH} test strings left out):",
            markdown_table(
                ["model", *(f"depth {d}" for d in depths)],
                [["strings", *(depth_counts[d] for d in depths)]]
                + [[name, *(f"{m['by_depth'][d]:.2f}" for d in depths)] for name, m in models.items()],
            ),
        ]
    )


def claims(models: dict, trained_depth: int) -> list[dict]:
    best_gated = max(models[n]["accuracy_trained_lengths"] for n in ("GRU", "LSTM"))
    elman = models["Elman"]

    def deep_vs_shallow(m):
        shallow = [a for d, a in m["by_depth"].items() if d <= 2]
        deep = [a for d, a in m["by_depth"].items() if d > trained_depth]
        return sum(shallow) / max(len(shallow), 1), sum(deep) / max(len(deep), 1) if deep else float("nan")

    falls_with_depth = {n: deep_vs_shallow(m) for n, m in models.items()}
    falls_longer = {n: m["accuracy_longer"] < m["accuracy_trained_lengths"] - 0.02 for n, m in models.items()}
    return [
        claim(
            "Gated recurrent networks (GRU, LSTM) learn the nesting task better than an Elman network of the same size",
            f"accuracy on the training lengths: best of GRU/LSTM {best_gated:.3f}, Elman {elman['accuracy_trained_lengths']:.3f}",
            best_gated > elman["accuracy_trained_lengths"] + 0.02,
        ),
        claim(
            "Accuracy falls as nesting gets deeper than the training strings went",
            "; ".join(
                f"{n} {s:.2f} (depth ≤ 2) → {d:.2f} (depth > {trained_depth})" for n, (s, d) in falls_with_depth.items()
            ),
            all(d < s for s, d in falls_with_depth.values()),
        ),
        claim(
            "Models trained on short strings lose accuracy on longer ones (a drop of more than 0.02 for every model)",
            "; ".join(
                f"{n} {m['accuracy_trained_lengths']:.2f} → {m['accuracy_longer']:.2f}" for n, m in models.items()
            ),
            all(falls_longer.values()),
        ),
    ]


def plot(models: dict, path, s: Settings, depths: set[int]) -> str:
    fig = figure(12, 4.2)
    for k, key in enumerate(("by_length", "by_depth")):
        axes = fig.add_subplot(1, 2, k + 1)
        for name, m in models.items():
            points = [(x, y) for x, y in m[key].items() if key == "by_length" or x in depths]
            axes.plot([x for x, _ in points], [y for _, y in points], "o-", markersize=3, label=name)
        if key == "by_length":
            axes.axvline(s.train_length, color="gray", linestyle="--", linewidth=1)
            axes.text(s.train_length, 0.02, " longest training string", color="gray", fontsize=8)
        axes.set_xlabel("string length (brackets)" if key == "by_length" else "nesting depth")
        axes.set_ylabel("accuracy")
        axes.set_ylim(0.0, 1.02)
        axes.axhline(0.5, color="black", linewidth=0.5)
        axes.grid(alpha=0.3)
        if k == 0:
            axes.legend(fontsize=8)
    fig.suptitle("Balanced colored parentheses: models of equal size, trained on short strings")
    return save_figure(fig, path)
