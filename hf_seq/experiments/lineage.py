"""The lineage study: the lectures' story of language models, n-gram (Shannon 1948; Kneser-Ney smoothing), the
fixed-window neural LM (Bengio et al. 2003), WaveNet's dilated causal convolutions (van den Oord et al. 2016),
Elman's recurrent network (1990), the gated cells (GRU 2014, LSTM 1997), the Transformer decoder (GPT) and the
selective state-space model (Mamba, Gu and Dao 2023), trained on one corpus with one tokenizer under one budget, sizes
matched by parameter count, and scored on the same held-out tokens with the same bits-per-byte computation.

    hf-seq lineage [--corpus stdlib] [--budget-tokens N | --budget-seconds S] [--quick] [--output-dir DIR]

Writes `lineage.md` (the table, the ordering against the lectures' and samples from a shared prompt),
`lineage.json` (one record per member), `learning_curves.png` (held-out bits per byte against training tokens) and
one folder per member with its model card. The neural members train through `hf_seq.training.run`; the final
figures of every member come from one scoring of the full held-out set (`hf_seq.evaluation`), the curves from the
runs' periodic evaluations on its first `curve_blocks` blocks.

Fairness: every neural member has the same embedding width and tied input/output embeddings, so the embedding
parameters are equal; the rest of each model (its non-embedding parameters) is sized to the same target. All train
with the same optimizer, schedule, batch and block size, without dropout (the budgets are far from overfitting).
"""

import json
import math
import os
import time
from pathlib import Path

from hf_seq.compute import model_flops_per_token
from hf_seq.errors import InvalidValueError
from hf_seq.hub import public_name

TUNE_FRACTION = 0.25  # a tuning trial trains on this share of the member's budget
EPOCH_FOR_DROPOUT = 1.0  # past this many epochs of the training text, dropout is on by default
DROPOUT_PAST_AN_EPOCH = 0.1
MEMBERS = ("ngram", "window", "conv", "elman", "gru", "lstm", "gpt", "ssm")
LECTURE_ORDER = MEMBERS  # worst to best in the lectures' story (the next chapter's SSM last: Gu and Dao 2023)
TITLES = {
    "ngram": "5-gram, interpolated Kneser-Ney",
    "window": "fixed-window MLP (Bengio et al. 2003)",
    "conv": "WaveNet, dilated causal convolutions",
    "ssm": "Mamba, selective state space",
    "elman": "Elman RNN (tanh)",
    "gru": "GRU",
    "lstm": "LSTM",
    "gpt": "GPT (Transformer decoder)",
}

# Mamba's sizes, smallest first: (layers, expansion). Sizing its state N instead (the scan's cost grows with N) made
# a 0.4M member 20x slower than the others (N = 38) and left a 0.1M one three times too large (N = 1 is 315k).
MAMBA_SHAPES = sorted(
    ((layers, expand) for layers in range(1, 33) for expand in (1, 2, 3, 4)), key=lambda s: (s[0] * s[1], s[0])
)

# `width`: the embedding width shared by every neural member; `target`: their non-embedding parameters.
SETTINGS = {
    "default": dict(
        vocab_size=4096,
        max_chars=3_000_000,
        block_size=128,
        batch_size=16,
        width=128,
        target=400_000,
        rnn_layers=2,
        gpt_layers=2,
        window_context=8,
        conv_layers=4,  # dilations 1, 2, 4, 8: a receptive field of 16 tokens
        ngram_order=5,
        learning_rate=2e-3,
        warmup_steps=20,
        budget_tokens=2**20,  # 512 steps of 16 x 128 tokens: about 15 minutes for all members on 2 idle cores
        eval_every=40,
        curve_blocks=48,
        sample_tokens=40,
    ),
    "quick": dict(
        vocab_size=320,
        max_chars=120_000,
        block_size=32,
        batch_size=8,
        width=16,
        target=6_000,
        rnn_layers=1,
        gpt_layers=1,
        window_context=3,
        conv_layers=4,
        ngram_order=3,
        learning_rate=3e-3,
        warmup_steps=2,
        budget_tokens=8 * 32 * 12,
        eval_every=4,
        curve_blocks=8,
        sample_tokens=8,
    ),
}


# ---------------------------------------------------------------------------------------------- the members
def member_model(name: str, s: dict, size: int, dropout: float = 0.0) -> tuple[str, dict]:
    """(family, config keys) of a neural member whose free size parameter is `size`, with `dropout` on the
    connections each family regularises (never inside the recurrence or on attention weights)."""
    width = s["width"]
    if name == "window":  # y = b + U P tanh(d + H x): h = size hidden units, U tied to C through P
        model = dict(context_size=s["window_context"], embedding_size=width, hidden_size=size, tie_word_embeddings=True)
        return "window", model | dict(embedding_dropout=dropout, hidden_dropout=dropout)
    if name in ("elman", "gru", "lstm"):
        dropouts = dict(embedding_dropout=dropout, hidden_dropout=dropout, output_dropout=dropout)
        model = dict(cell_type=name, embedding_size=width, hidden_size=size, num_hidden_layers=s["rnn_layers"])
        # At the family's default N(0, 0.05) the tied embeddings feed the recurrence inputs so small that the Elman
        # network sat on the unigram plateau for 240 steps of this budget (measured); N(0, 0.3) left it by step 40.
        return "rnn", model | dropouts | dict(initializer_range=0.3)
    if name == "gpt":  # width is the model width; the feed-forward width is what is sized
        heads = max(1, width // 32)
        model = dict(
            hidden_size=width,
            num_attention_heads=heads,
            num_hidden_layers=s["gpt_layers"],
            intermediate_size=size,
            max_position_embeddings=s["block_size"],
            embedding_dropout=dropout,
            attention_dropout=0.0,
            hidden_dropout=dropout,
        )
        return "gpt", model
    if name == "conv":  # WaveNet: residual channels = the width; the skip channels are what is sized
        model = dict(
            hidden_size=width,
            kernel_size=2,
            dilation_cycle=s["conv_layers"],
            num_blocks=1,
            skip_channels=size,
            tie_word_embeddings=True,
            dropout=dropout,
        )
        return "conv", model
    if name == "ssm":  # Mamba blocks of the width at the paper's state size N = 16: depth x expansion is sized
        layers, expand = MAMBA_SHAPES[min(size, len(MAMBA_SHAPES)) - 1]
        model = dict(ssm_type="mamba", hidden_size=width, num_hidden_layers=layers, expand=expand, state_size=16)
        return "ssm", model | dict(hidden_dropout=dropout)
    raise ValueError(f"unknown lineage member {name!r}; allowed values: {list(MEMBERS)}.")


def count_parameters(model) -> tuple[int, int]:
    """(all parameters, non-embedding parameters): embedding tables (token, position) are left out of the second;
    a tied output layer shares the token table, so it is counted once."""
    import torch

    total = sum(p.numel() for p in model.parameters())
    embedding = sum(p.numel() for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters())
    return total, total - embedding


def build(name: str, s: dict, size: int, vocab_size: int):
    import torch

    from hf_seq.registry import family

    fam_name, keys = member_model(name, s, size)
    fam = family(fam_name)
    config = fam.config_class(vocab_size=vocab_size, **keys)
    with torch.device("meta"):  # shapes only: counting needs no memory and no initialisation
        return fam.model_class("AutoModelForCausalLM")(config)


def matched_size(name: str, s: dict, vocab_size: int, target: int | None = None) -> int:
    """The size parameter whose non-embedding count is closest to `target` (default: the settings'; the count grows
    with the size parameter)."""
    target = target or s["target"]
    lo, hi = 1, 256 * s["width"]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_parameters(build(name, s, mid, vocab_size))[1] <= target:
            lo = mid
        else:
            hi = mid
    error = lambda size: abs(count_parameters(build(name, s, size, vocab_size))[1] - target)
    return min((lo, hi), key=error)


# ---------------------------------------------------------------------------------------------- data and scoring
def base_recipe(
    s: dict, corpus, output_dir: Path, tokenizer_path: str | None = None, splits: dict | None = None
) -> dict:
    """The recipe every member shares: the corpus, its held-out files (`splits`: validation, test), the tokenizer."""
    data = dict(dataset=corpus, block_size=s["block_size"], max_chars=s["max_chars"], **(splits or {}))
    return {
        "family": "gpt",
        "task": "causal_lm",
        "model": {},
        "tokenizer": {"vocab_size": s["vocab_size"], **({"path": tokenizer_path} if tokenizer_path else {})},
        "data": data,
        "training": {"output_dir": str(output_dir), "log_with": "none"},
    }


def score_ngram(lm, blocks, byte_lengths) -> dict:
    """The n-gram's figures on the held-out blocks, scored as the neural models are: every token of a block after
    its first, given at most order-1 tokens before it inside the block."""
    import numpy as np

    from hf_seq.evaluation import lm_metrics

    nll = sum(float(lm.token_nll(block).sum()) for block in blocks)
    tokens = sum(len(block) - 1 for block in blocks)
    num_bytes = sum(int(byte_lengths[np.asarray(block[1:])].sum()) for block in blocks)
    return lm_metrics(nll, tokens, num_bytes)


def train_ngram(s, train_stream, held_out_blocks, byte_lengths, vocab_size, budget_tokens, folder: Path) -> dict:
    """Fit on the first `budget_tokens` training tokens (all of them without a token budget); the learning curve
    refits on growing prefixes, which costs seconds."""
    from hf_seq.ngram import KneserNeyLM

    available = len(train_stream) if budget_tokens is None else min(budget_tokens, len(train_stream))
    curve = []
    for fraction in (1 / 64, 1 / 16, 1 / 4, 1):
        n = max(s["ngram_order"], int(available * fraction))
        blocks = held_out_blocks[: s["curve_blocks"]]
        metrics = score_ngram(KneserNeyLM(vocab_size, s["ngram_order"]).fit(train_stream[:n]), blocks, byte_lengths)
        curve.append({"tokens": n} | metrics)
    start = time.perf_counter()
    lm = KneserNeyLM(vocab_size, s["ngram_order"]).fit(train_stream[:available])
    seconds = time.perf_counter() - start
    params = sum(int((table["count"] > 0).sum()) for table in lm.orders[1:])
    folder.mkdir(parents=True, exist_ok=True)
    return {"model": lm, "train_tokens": available, "seconds": seconds, "params": params, "curve": curve}


def write_ngram_card(folder: Path, record: dict, corpus: str) -> None:
    """The n-gram member's card; `corpus` as the reports name it (`public_name`: a file name, not a local path)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# {record['title']}",
        "",
        f"An interpolated Kneser-Ney {record['order']}-gram model over the lineage's BPE token ids (`hf_seq.ngram`),",
        f"fit on {record['train_tokens']:,} training tokens of `{corpus}` in {record['seconds']:.1f} s.",
        "It stores no weights: its 'parameters' are its "
        f"{record['params']:,} distinct n-gram counts. Scored like the neural members:",
        "",
        "| held-out bits per byte | perplexity | NLL (nats / token) | scored tokens | bytes |",
        "|---|---|---|---|---|",
        f"| {record['eval_bits_per_byte']:.4f} | {record['eval_perplexity']:.2f} | {record['eval_loss']:.4f} | "
        f"{record['eval_tokens']:,} | {record['eval_bytes']:,} |",
        "",
    ]
    (folder / "README.md").write_text("\n".join(lines))


def sample_neural(model, prompt, s, eos_token_id) -> list[int]:
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=s["sample_tokens"],
            do_sample=True,
            top_k=0,  # plain ancestral sampling, as the n-gram samples: what each model believes
            top_p=1.0,
            pad_token_id=eos_token_id,
        )
    return out[0, len(prompt) :].tolist()


# ---------------------------------------------------------------------------------------------- tuning
def trial_grid(count: int, s: dict, past_epoch: bool) -> list[dict]:
    """The same `count` trials for every member: learning rates spread over [lr / 4, 4 lr] on a log scale and, once
    the budget passes an epoch, dropout over [0, 0.4], drawn from a Halton sequence (bases 2 and 3), so any count
    covers the square evenly and the first trial is always the default learning rate."""

    def halton(index: int, base: int) -> float:
        value, fraction = 0.0, 1.0
        while index:
            fraction /= base
            value += fraction * (index % base)
            index //= base
        return value

    trials = []
    for k in range(count):
        u = 0.5 if k == 0 else halton(k + 1, 2)
        trial = {"learning_rate": s["learning_rate"] * 4 ** (2 * u - 1)}
        trial["dropout"] = round(0.4 * halton(k + 1, 3), 3) if past_epoch else default_dropout(past_epoch)
        trials.append(trial)
    return trials


def default_dropout(past_epoch: bool) -> float:
    """Dropout when nothing is tuned: off within an epoch (no sample is seen twice, so there is nothing to
    overfit), 0.1 past it."""
    return DROPOUT_PAST_AN_EPOCH if past_epoch else 0.0


# ---------------------------------------------------------------------------------------------- report
def plot_curves(records: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for record in records:
        points = [(c["tokens"], c["eval_bits_per_byte"]) for c in record["curve"] if c["tokens"] > 0]
        if not points:
            continue
        style = "s--" if record["name"] == "ngram" else "o-"
        ax.plot(*zip(*points), style, ms=3, lw=1.5, label=record["title"])
    save_log_plot(fig, ax, "training tokens", "held-out bits per byte (validation)", title, path)


def save_log_plot(fig, ax, xlabel: str, ylabel: str, title: str, path: Path) -> None:
    """The lineage's plots: a log x axis, a grid, the legend, saved at 120 dpi."""
    import matplotlib.pyplot as plt

    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_scaling(summary: list[dict], metric: str, path: Path, title: str) -> None:
    """Held-out bits per byte against non-embedding parameters, one line per member (the n-gram, which has no such
    parameters, as a horizontal line), with the seeds' range as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name in dict.fromkeys(row["name"] for row in summary):
        rows = sorted((r for r in summary if r["name"] == name), key=lambda r: r["target"])
        if name == "ngram":
            ax.axhline(rows[0]["mean"], ls="--", color="gray", label=rows[0]["title"])
            continue
        x = [r["non_embedding_params"] for r in rows]
        y = [r["mean"] for r in rows]
        spread = [[r["mean"] - r["min"] for r in rows], [r["max"] - r["mean"] for r in rows]]
        ax.errorbar(x, y, yerr=spread, fmt="o-", ms=4, lw=1.5, capsize=3, label=rows[0]["title"])
    save_log_plot(fig, ax, "non-embedding parameters", metric.replace("_", " "), title, path)


def summarize(records: list[dict], metric: str) -> list[dict]:
    """One row per (size, member): the mean of `metric` over the seeds, its range, and the member's settings."""
    import statistics

    rows = {}
    for r in records:
        rows.setdefault((r["target"], r["name"]), []).append(r)
    summary = []
    for (target, name), group in rows.items():
        values = [r[metric] for r in group]
        first = group[0]
        summary.append(
            {
                "target": target,
                "name": name,
                "title": first["title"],
                "non_embedding_params": first["non_embedding_params"],
                "mean": statistics.fmean(values),
                "min": min(values),
                "max": max(values),
                "seeds": len(values),
            }
        )
    return summary


def ordering_notes(rows: list[dict]) -> list[str]:
    """Where the measured ranking (lower bits per byte is better) inverts the lectures' order, and whether each such
    difference exceeds the seeds' spread (the two ranges do not overlap) or not."""
    by_name = {r["name"]: r for r in rows}
    lecture = [m for m in LECTURE_ORDER if m in by_name]
    notes = []
    for i, earlier in enumerate(lecture):
        for later in lecture[i + 1 :]:
            a, b = by_name[earlier], by_name[later]
            if b["mean"] > a["mean"]:
                clear = b["min"] > a["max"]
                seeded = max(a["seeds"], b["seeds"]) > 1
                notes.append(
                    f"{later} ({b['mean']:.3f}) is worse than {earlier} ({a['mean']:.3f})"
                    + ("" if not seeded else (", beyond the seeds' spread" if clear else ", within the spread"))
                )
    return notes


def separations(rows: list[dict]) -> list[str]:
    """Neighbours in the measured order whose seed ranges do not overlap: the differences the seeds resolve."""
    ranked = sorted(rows, key=lambda r: r["mean"])
    resolved = [(a, b) for a, b in zip(ranked, ranked[1:]) if max(a["seeds"], b["seeds"]) > 1 and a["max"] < b["min"]]
    return [f"{a['name']} < {b['name']}" for a, b in resolved]


def write_report(result: dict, output_dir: Path) -> None:
    records, metric = result["members"], result["metric"]
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)
    lines = [
        "# The lineage: n-gram, fixed window, WaveNet, Elman, GRU, LSTM, GPT, Mamba",
        "",
        f"Corpus `{result['corpus']}` (validation: {result['validation']}; test: {result['test']}), one byte-level BPE "
        f"tokenizer of {result['vocab_size']:,} tokens, blocks of {result['block_size']} tokens, "
        f"{result['train_tokens']:,} training tokens; budget: {result['budget']}. Neural members: embedding width "
        f"{result['width']}, tied embeddings, non-embedding parameters matched per size; the weights kept are the "
        f"evaluation with the lowest validation loss. Tuning: {result['tuning']}. Seeds: {result['seeds']}. "
        f"Machine: {result['machine']}.",
        "",
        f"Ranked by **{metric.replace('_', ' ')}** ({'the test split, scored once, with the selected weights' if metric.startswith('test') else 'no test split was given'}).",
        "",
    ]
    summary = summarize(records, metric)
    for target in result["sizes"]:
        rows = [r for r in summary if r["target"] == target]
        lines += [
            f"## Non-embedding parameters {target:,}",
            "",
            "| member | params | non-embedding | FLOPs / token | lr | dropout | best step | epochs | validation bpb | "
            "test bpb | test perplexity | seconds |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in records if r["target"] == target):
            seed = "" if result["seeds"] == 1 or r["name"] == "ngram" else f" (seed {r['seed']})"
            lines.append(
                f"| {r['title']}{seed} | {r['params']:,} | "
                f"{fmt(r['non_embedding_params'], ',')} | {fmt(r['flops_per_token'], ',')} | "
                f"{fmt(r['learning_rate'], '.2g')} | {fmt(r['dropout'], 'g')} | {fmt(r['best_step'], 'd')} | "
                f"{fmt(r['epochs'], '.2f')} | {r['validation_bits_per_byte']:.3f} | "
                f"{fmt(r['test_bits_per_byte'], '.3f')} | {fmt(r['test_perplexity'], '.1f')} | {r['seconds']:.0f} |"
            )
        notes, resolved = ordering_notes(rows), separations(rows)
        ranked = sorted(rows, key=lambda r: r["mean"])
        spread = lambda r: "" if r["seeds"] == 1 else f" [{r['min']:.3f}-{r['max']:.3f}]"
        lines += [
            "",
            "Measured order, best first: " + " < ".join(f"{r['name']} {r['mean']:.3f}{spread(r)}" for r in ranked),
            "",
            "Lectures' order, worst first: "
            + " > ".join(m for m in LECTURE_ORDER if any(r["name"] == m for r in rows))
            + ". "
            + (
                "Inversions: " + "; ".join(notes) + "."
                if notes
                else "No inversion: the measured order is the lectures'."
            )
            + (f" Differences beyond the seeds' spread: {', '.join(resolved)}." if result["seeds"] > 1 else ""),
            "",
        ]
    lines += [
        "The n-gram's parameters are its distinct stored n-grams (it has no embedding and no FLOPs figure), its seconds "
        "the counting; it is fit once and the same for every size and seed. FLOPs per token: 6 x the parameters a "
        "token multiplies with (+ 12 L d s for attention; hf_seq.compute.model_flops_per_token). Epochs: training "
        "tokens seen / training tokens in the corpus. Every trial is in lineage.json.",
        "",
        "![learning curves](learning_curves.png)",
        "",
        f"The curves (the first seed of the largest size) are scored on the first {result['settings']['curve_blocks']} "
        "validation blocks, every member on the same blocks.",
        "",
    ]
    if len(result["sizes"]) > 1:
        lines += ["![scaling](scaling.png)", ""]
    lines += [f"## Samples (prompt: `{result['prompt']!r}`, ancestral sampling, seed 0)", ""]
    for r in records:
        if r["seed"] == 0 and r["target"] == result["sizes"][-1]:
            lines += [f"**{r['title']}**", "", "```", r["prompt_text"] + r["sample"], "```", ""]
    (output_dir / "lineage.md").write_text("\n".join(lines))


# ---------------------------------------------------------------------------------------------- the run
def run(
    quick: bool = False,
    output_dir="lineage",
    corpus="stdlib",
    validation=None,
    test=None,
    budget_tokens: int | None = None,
    budget_seconds: float | None = None,
    budget_flops: float | None = None,
    members=MEMBERS,
    sizes=None,
    seeds: int = 1,
    tune: int = 0,
    threads: int | None = None,
    max_chars: int | None = None,
    progress: bool = True,
) -> dict:
    """Train and score every member at every size and seed; write lineage.md, lineage.json, learning_curves.png
    (and scaling.png for several sizes) and the member folders into `output_dir`. Returns what lineage.json holds."""
    import numpy as np
    import torch

    from hf_seq import tasks
    from hf_seq.evaluation import token_byte_lengths
    from hf_seq.recipes import load_recipe

    s = dict(SETTINGS["quick" if quick else "default"])
    given = {k: v for k, v in dict(tokens=budget_tokens, seconds=budget_seconds, flops=budget_flops).items() if v}
    if len(given) > 1:
        raise InvalidValueError(
            f"lineage: give one budget (--budget-tokens, --budget-seconds or --budget-flops), got {sorted(given)}"
        )
    for kind, value in given.items():
        if value <= 0:
            raise InvalidValueError(f"lineage: --budget-{kind} must be positive, got {value!r}")
    for name in members:
        if name not in MEMBERS:
            raise InvalidValueError(f"lineage: unknown member {name!r}; allowed values: {list(MEMBERS)}.")
    if seeds < 1 or tune < 0:
        raise InvalidValueError(f"lineage: --seeds must be >= 1 and --tune >= 0, got {seeds} and {tune}")
    sizes = sorted(sizes) if sizes else [s["target"]]
    if any(size <= 0 for size in sizes):
        raise InvalidValueError(f"lineage: --sizes must be positive parameter counts, got {sizes}")
    if given:
        s["budget_tokens"] = budget_tokens
    if max_chars is not None:
        s["max_chars"] = max_chars
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    say = print if progress else (lambda *a, **k: None)
    corpus_name = public_name(corpus)  # the reports name a local corpus by its file name, as `hf-seq push` does
    splits = {k: v for k, v in dict(validation=validation, test=test).items() if v}

    # one tokenizer, one split, one held-out set for everybody
    tokenizer_dir = output_dir / "tokenizer"
    recipe = load_recipe(base_recipe(s, corpus, output_dir / "tokenizer-run", splits=splits))
    prepared = tasks.prepare(recipe, tokenizer_folder=tokenizer_dir)
    tokenizer = prepared.tokenizer
    if not (tokenizer_dir / "tokenizer.json").exists():
        tokenizer.save_pretrained(tokenizer_dir)
    vocab_size = len(tokenizer)
    train_stream = np.asarray(prepared.train["input_ids"], dtype=np.int64).reshape(-1)
    held_out = {"validation": prepared.held_out["eval"], "test": prepared.held_out.get("test")}
    validation_blocks = [list(b) for b in held_out["validation"]["input_ids"]]
    byte_lengths = token_byte_lengths(tokenizer)
    prompt = validation_blocks[0][: max(4, s["block_size"] // 8)]
    tokens_per_step = s["batch_size"] * s["block_size"]
    metric = "test_bits_per_byte" if held_out["test"] is not None else "validation_bits_per_byte"
    context = dict(s=s, prepared=prepared, held_out=held_out, byte_lengths=byte_lengths, prompt=prompt)
    context |= dict(tokenizer_dir=tokenizer_dir, corpus=corpus, splits=splits, threads=threads, progress=progress)
    context["recipe"] = recipe
    say(
        f"lineage: {len(train_stream):,} training tokens, {len(validation_blocks)} validation blocks"
        + (f", {len(held_out['test'])} test blocks" if held_out["test"] is not None else "")
        + f", vocab {vocab_size}"
    )

    records = []
    ngram = None
    for target in sizes:
        for name in members:
            if name == "ngram":
                # counting is deterministic: one fit, one record per size, no seeds
                # a token budget holds for the counts too; under a FLOPs or seconds budget they see every token
                tokens = s["budget_tokens"] if "tokens" in given or not given else None
                ngram = ngram or fit_ngram(context, train_stream, vocab_size, tokens, output_dir / "ngram")
                records.append(ngram | {"target": target, "seed": 0})
                continue
            plan = plan_member(name, s, target, vocab_size, tokens_per_step, len(train_stream), given)
            trials = []
            chosen = {"learning_rate": s["learning_rate"], "dropout": default_dropout(plan["past_epoch"])}
            if tune:
                for k, trial in enumerate(trial_grid(tune, s, plan["past_epoch"])):
                    folder = output_dir / "trials" / f"{name}-{target}-{k}"
                    steps = max(1, math.ceil(plan["steps"] * TUNE_FRACTION)) if plan["steps"] else None
                    seconds = budget_seconds * TUNE_FRACTION if budget_seconds else None
                    got = train_member(context, name, plan, trial, seed=0, folder=folder, steps=steps, seconds=seconds)
                    trials.append(trial | {k: got[k] for k in ("eval_loss", "eval_bits_per_byte", "steps")})
                    say(f"lineage: {name} trial {k}: {trial} -> {got['eval_bits_per_byte']:.4f} bits per byte")
                chosen = min(trials, key=lambda t: t["eval_loss"])
                chosen = {k: chosen[k] for k in ("learning_rate", "dropout")}
            for seed in range(seeds):
                single = len(sizes) == 1 and seeds == 1
                folder = output_dir / (name if single else f"{name}-{target}-seed{seed}")
                say(f"lineage: training {name} (size {target:,}, seed {seed}, {chosen})")
                record = train_member(context, name, plan, chosen, seed=seed, folder=folder, steps=plan["steps"],
                                      seconds=budget_seconds, score=True)  # fmt: skip
                records.append(record | {"target": target, "seed": seed, "trials": trials})
                say(f"lineage: {name}: {record[metric]:.4f} {metric.replace('_', ' ')}")

    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if budget_tokens or not given:
        budget = f"{s['budget_tokens']:,} training tokens per member"
    elif budget_flops:
        budget = f"{budget_flops:.3g} training FLOPs per member"
    else:
        budget = f"{budget_seconds:g} s of training per member"
    result = {
        "corpus": corpus_name,
        "validation": public_name(validation) if validation else "held out from the training text",
        "test": public_name(test) if test else "none",
        "quick": quick,
        "budget": budget,
        "budget_tokens": s.get("budget_tokens") if (budget_tokens or not given) else None,
        "budget_seconds": budget_seconds,
        "budget_flops": budget_flops,
        "tuning": f"{tune} trials per member at {TUNE_FRACTION:g} of the budget, chosen on validation loss"
        if tune
        else "none (the defaults)",
        "seeds": seeds,
        "sizes": sizes,
        "metric": metric,
        "vocab_size": vocab_size,
        "block_size": s["block_size"],
        "width": s["width"],
        "train_tokens": len(train_stream),
        "eval_tokens": records[0]["eval_tokens"] if records else 0,
        "eval_bytes": records[0]["eval_bytes"] if records else 0,
        "prompt": tokenizer.decode(prompt),
        "machine": f"{os.cpu_count()} CPU cores, torch {torch.__version__}, 1-min load {load_before:.2f} before and "
        f"{load_after:.2f} after",
        "settings": s,
        "members": records,
        "summary": summarize(records, metric),
    }
    (output_dir / "lineage.json").write_text(json.dumps(result, indent=2))
    largest = [r for r in records if r["target"] == sizes[-1] and r["seed"] == 0]
    plot_curves(largest, output_dir / "learning_curves.png", f"{corpus_name}, {budget}")
    if len(sizes) > 1:
        plot_scaling(result["summary"], metric, output_dir / "scaling.png", f"{corpus_name}, {budget}")
    write_report(result, output_dir)
    return result


def plan_member(name, s, target, vocab_size, tokens_per_step, corpus_tokens, given) -> dict:
    """A member's size parameter, shapes (on the meta device), FLOPs per token and steps under the budget."""
    size = matched_size(name, s, vocab_size, target)
    model = build(name, s, size, vocab_size)
    params, non_embedding = count_parameters(model)
    flops = model_flops_per_token(model, s["block_size"])
    if "flops" in given:
        steps = max(1, math.ceil(given["flops"] / (flops * tokens_per_step)))
    elif "seconds" in given:
        steps = None
    else:
        steps = math.ceil((given.get("tokens") or s["budget_tokens"]) / tokens_per_step)
    past_epoch = steps is not None and steps * tokens_per_step > EPOCH_FOR_DROPOUT * corpus_tokens
    return dict(size=size, params=params, non_embedding=non_embedding, flops=flops, steps=steps, past_epoch=past_epoch)


def fit_ngram(context, train_stream, vocab_size, budget_tokens, folder: Path) -> dict:
    s, prepared = context["s"], context["prepared"]
    validation_blocks = [list(b) for b in context["held_out"]["validation"]["input_ids"]]
    got = train_ngram(s, train_stream, validation_blocks, context["byte_lengths"], vocab_size, budget_tokens, folder)
    record = {"name": "ngram", "title": f"{s['ngram_order']}-gram, interpolated Kneser-Ney"}
    record |= {"order": s["ngram_order"], "params": got["params"], "non_embedding_params": None}
    record |= {"flops_per_token": None, "learning_rate": None, "dropout": None, "best_step": None, "epochs": None}
    record |= {"train_tokens": got["train_tokens"], "seconds": got["seconds"], "curve": got["curve"], "trials": []}
    scored = score_ngram(got["model"], validation_blocks, context["byte_lengths"])
    record |= with_prefix(scored, "validation") | {
        "eval_tokens": scored["eval_tokens"],
        "eval_bytes": scored["eval_bytes"],
    }
    record |= {k: scored[k] for k in ("eval_loss", "eval_perplexity", "eval_bits_per_byte")}
    if context["held_out"]["test"] is not None:
        test_blocks = [list(b) for b in context["held_out"]["test"]["input_ids"]]
        record |= with_prefix(score_ngram(got["model"], test_blocks, context["byte_lengths"]), "test")
    else:
        record |= {"test_bits_per_byte": None, "test_perplexity": None, "test_loss": None}
    record["tokens_per_second"] = record["train_tokens"] / max(record["seconds"], 1e-9)
    eos = prepared.tokenizer.eos_token_id
    record["sample"] = prepared.tokenizer.decode(
        got["model"].generate(context["prompt"], s["sample_tokens"], seed=0, eos_token_id=eos)
    )
    record["prompt_text"] = prepared.tokenizer.decode(context["prompt"])
    write_ngram_card(folder, record, public_name(context["corpus"]))
    return record


def finished_run(folder: Path, recipe) -> dict | None:
    """The summary of a run already finished in `folder` with exactly this recipe (its weights checked against
    their recorded checksums), else None: a study stopped part-way and started again with the same command trains
    only what it had not finished."""
    from hf_seq.checksums import verify_checksums

    done = [folder / name for name in ("recipe.json", "metrics.json", "model.safetensors", "checksums.json")]
    if not all(path.exists() for path in done) or json.loads(done[0].read_text()) != recipe.to_dict():
        return None
    try:
        verify_checksums(folder)
    except Exception:  # noqa: BLE001  (damaged: train it again)
        return None
    return json.loads(done[1].read_text())


def with_prefix(metrics: dict, prefix: str) -> dict:
    """`eval_loss` ... as `validation_loss` / `test_loss` ...: the record's names for each split."""
    return {f"{prefix}_{k}": metrics[f"eval_{k}"] for k in ("loss", "perplexity", "bits_per_byte")}


def train_member(context, name, plan, settings, seed, folder, steps, seconds, score=False) -> dict:
    """One training run of a neural member through `hf_seq.training.run`, selecting the best validation evaluation;
    with `score`, the selected weights are scored on the whole validation and test splits once."""
    from transformers import AutoModelForCausalLM

    from hf_seq.evaluation import evaluate_language_model
    from hf_seq.recipes import load_recipe
    from hf_seq.training import run as train

    s, prepared = context["s"], context["prepared"]
    family_name, model_keys = member_model(name, s, plan["size"], settings["dropout"])
    # the test split is not given to training: it is scored once, below, with the selected weights
    validation = {k: v for k, v in context["splits"].items() if k == "validation"}
    member_recipe = base_recipe(s, context["corpus"], folder, str(context["tokenizer_dir"]), validation)
    member_recipe |= {"family": family_name, "model": model_keys}
    member_recipe["data"]["eval_examples"] = s["curve_blocks"]
    member_recipe["training"] |= {
        "max_steps": steps,
        "max_seconds": seconds,
        "threads": context["threads"],
        "seed": seed,
        "batch_size": s["batch_size"],
        "learning_rate": settings["learning_rate"],
        "warmup_steps": s["warmup_steps"],
        "eval_every": s["eval_every"],
        "save_every": 10**9,  # no checkpoints inside the budget
        "select_by": "loss",
    }
    member_recipe["card"] = {"description": f"The {TITLES[name]} member of the hf-seq lineage study."}
    recipe = load_recipe(member_recipe)
    summary = finished_run(folder, recipe)
    if summary is None:
        summary = train(recipe, progress=context["progress"], overwrite=True)
    elif context["progress"]:
        print(f"lineage: {folder.name}: a finished run of the same recipe is there, reused")
    got = {
        "eval_loss": summary["eval_loss"],
        "eval_bits_per_byte": summary["eval_bits_per_byte"],
        "steps": summary["steps"],
    }
    if not score:
        return got
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    params, non_embedding = count_parameters(model)
    record = {"name": name, "title": TITLES[name], "family": family_name, "config": model_keys}
    record |= {"params": params, "non_embedding_params": non_embedding, "flops_per_token": plan["flops"]}
    record |= settings | {"best_step": summary.get("best_step"), "epochs": summary.get("epochs")}
    record |= {"train_tokens": summary["tokens"], "seconds": summary["seconds"]}
    record["tokens_per_second"] = summary["tokens"] / max(summary["seconds"], 1e-9)
    curve = json.loads((folder / "metrics.json").read_text())["evaluations"]
    record["curve"] = [{k: c[k] for k in ("step", "tokens", "seconds", "eval_bits_per_byte")} for c in curve]
    collator = prepared.task.collator(context["recipe"], prepared.tokenizer, model)
    for split, blocks in context["held_out"].items():
        if blocks is None:
            record |= {f"{split}_loss": None, f"{split}_perplexity": None, f"{split}_bits_per_byte": None}
            continue
        metrics = evaluate_language_model(
            model, blocks, collator, s["batch_size"], "cpu", context["byte_lengths"], shift_labels=True
        )
        record |= with_prefix(metrics, split)
        if split == "validation":
            record |= {k: metrics[k] for k in ("eval_loss", "eval_perplexity", "eval_bits_per_byte")}
            record |= {"eval_tokens": metrics["eval_tokens"], "eval_bytes": metrics["eval_bytes"]}
    record["sample"] = prepared.tokenizer.decode(
        sample_neural(model, context["prompt"], s, prepared.tokenizer.eos_token_id)
    )
    record["prompt_text"] = prepared.tokenizer.decode(context["prompt"])
    return record


__all__ = ["MEMBERS", "count_parameters", "matched_size", "run", "trial_grid"]
