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

from hf_seq.errors import InvalidValueError
from hf_seq.hub import public_name

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
        ssm_layers=3,
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
        ssm_layers=2,
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
def member_model(name: str, s: dict, size: int) -> tuple[str, dict]:
    """(family, config keys) of a neural member whose free size parameter is `size`."""
    width = s["width"]
    if name == "window":  # y = b + U P tanh(d + H x): h = size hidden units, U tied to C through P
        model = dict(context_size=s["window_context"], embedding_size=width, hidden_size=size, tie_word_embeddings=True)
        return "window", model
    if name in ("elman", "gru", "lstm"):
        no_dropout = dict(embedding_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0)
        model = dict(cell_type=name, embedding_size=width, hidden_size=size, num_hidden_layers=s["rnn_layers"])
        # At the family's default N(0, 0.05) the tied embeddings feed the recurrence inputs so small that the Elman
        # network sat on the unigram plateau for 240 steps of this budget (measured); N(0, 0.3) left it by step 40.
        return "rnn", model | no_dropout | dict(initializer_range=0.3)
    if name == "gpt":  # width is the model width; the feed-forward width is what is sized
        heads = max(1, width // 32)
        model = dict(
            hidden_size=width,
            num_attention_heads=heads,
            num_hidden_layers=s["gpt_layers"],
            intermediate_size=size,
            max_position_embeddings=s["block_size"],
            embedding_dropout=0.0,
            attention_dropout=0.0,
            hidden_dropout=0.0,
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
        )
        return "conv", model
    if name == "ssm":  # Mamba blocks of the width (inner width 2x); the state size N is what is sized
        return "ssm", dict(ssm_type="mamba", hidden_size=width, num_hidden_layers=s["ssm_layers"], state_size=size)
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


def matched_size(name: str, s: dict, vocab_size: int) -> int:
    """The size parameter whose non-embedding count is closest to the target (the count grows with it)."""
    lo, hi = 1, 64 * s["width"]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_parameters(build(name, s, mid, vocab_size))[1] <= s["target"]:
            lo = mid
        else:
            hi = mid
    error = lambda size: abs(count_parameters(build(name, s, size, vocab_size))[1] - s["target"])
    return min((lo, hi), key=error)


# ---------------------------------------------------------------------------------------------- data and scoring
def base_recipe(s: dict, corpus: str, output_dir: Path, tokenizer_path: str | None = None) -> dict:
    data = dict(dataset=corpus, block_size=s["block_size"], max_chars=s["max_chars"])
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
    ax.set_xscale("log")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("held-out bits per byte")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ordering_notes(records: list[dict]) -> list[str]:
    """Where the measured ranking (lower bits per byte is better) inverts the lectures' order."""
    bpb = {r["name"]: r["eval_bits_per_byte"] for r in records}
    lecture = [m for m in LECTURE_ORDER if m in bpb]
    notes = []
    for i, earlier in enumerate(lecture):
        for later in lecture[i + 1 :]:
            if bpb[later] > bpb[earlier]:
                notes.append(f"{later} ({bpb[later]:.3f}) is worse than {earlier} ({bpb[earlier]:.3f})")
    return notes


def write_report(result: dict, output_dir: Path) -> None:
    records = result["members"]
    ranked = sorted(records, key=lambda r: r["eval_bits_per_byte"])
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)
    lines = [
        "# The lineage: n-gram, fixed window, WaveNet, Elman, GRU, LSTM, GPT, Mamba",
        "",
        f"Corpus `{result['corpus']}`, one byte-level BPE tokenizer of {result['vocab_size']:,} tokens, blocks of "
        f"{result['block_size']} tokens; budget: {result['budget']}. Neural members: embedding width "
        f"{result['width']}, tied embeddings, non-embedding parameters matched to {result['target']:,}. Held-out: "
        f"{result['eval_tokens']:,} predicted tokens ({result['eval_bytes']:,} bytes), the same for every member. "
        f"Machine: {result['machine']}.",
        "",
        "| member | params | non-embedding | training tokens | seconds | tokens/s | bits per byte | perplexity |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r['title']} | {r['params']:,} | {fmt(r['non_embedding_params'], ',')} | {r['train_tokens']:,} | "
            f"{r['seconds']:.1f} | {r['tokens_per_second']:,.0f} | **{r['eval_bits_per_byte']:.3f}** | "
            f"{r['eval_perplexity']:.1f} |"
        )
    notes = ordering_notes(records)
    lines += [
        "",
        "The n-gram's parameters are its distinct stored n-grams (it has no embedding), its seconds the counting. "
        "The neural members' seconds include their periodic evaluations.",
        "",
        "Measured order, best first: " + " < ".join(f"{r['name']} ({r['eval_bits_per_byte']:.3f})" for r in ranked),
        "",
        "Lectures' order, worst first: "
        + " > ".join(LECTURE_ORDER)
        + ". "
        + ("Inversions: " + "; ".join(notes) + "." if notes else "No inversion: the measured order is the lectures'."),
        "",
        "![learning curves](learning_curves.png)",
        "",
        f"The curves are scored on the first {result['settings']['curve_blocks']} held-out blocks "
        f"{result['settings']['curve_blocks'] * result['block_size']:,} tokens: a few source files, so their level "
        "differs from the table's, which scores every held-out token); every member on the same blocks.",
        "",
        f"## Samples (prompt: `{result['prompt']!r}`, ancestral sampling, seed 0)",
        "",
    ]
    for r in records:
        lines += [f"**{r['title']}**", "", "```", r["prompt_text"] + r["sample"], "```", ""]
    (output_dir / "lineage.md").write_text("\n".join(lines))


# ---------------------------------------------------------------------------------------------- the run
def run(
    quick: bool = False,
    output_dir="lineage",
    corpus: str = "stdlib",
    budget_tokens: int | None = None,
    budget_seconds: float | None = None,
    members=MEMBERS,
    threads: int | None = None,
    max_chars: int | None = None,
    progress: bool = True,
) -> dict:
    """Train and score every member; write lineage.md, lineage.json, learning_curves.png and the member folders
    into `output_dir`. Returns what lineage.json holds."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from hf_seq import tasks
    from hf_seq.evaluation import evaluate_language_model, token_byte_lengths
    from hf_seq.recipes import load_recipe
    from hf_seq.training import run as train

    s = dict(SETTINGS["quick" if quick else "default"])
    if budget_tokens is not None and budget_seconds is not None:
        raise InvalidValueError("lineage: pass --budget-tokens or --budget-seconds, not both.")
    for name in members:
        if name not in MEMBERS:
            raise InvalidValueError(f"lineage: unknown member {name!r}; allowed values: {list(MEMBERS)}.")
    if budget_tokens is not None or budget_seconds is not None:
        s["budget_tokens"], s["budget_seconds"] = budget_tokens, budget_seconds
    budget_tokens, budget_seconds = s.get("budget_tokens"), s.get("budget_seconds")
    if max_chars is not None:
        s["max_chars"] = max_chars
    if (budget_tokens is not None and budget_tokens <= 0) or (budget_seconds is not None and budget_seconds <= 0):
        raise InvalidValueError(f"lineage: the budget must be positive, got {budget_tokens or budget_seconds!r}.")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    say = print if progress else (lambda *a, **k: None)
    # the reports and cards are meant to be shared: they name a local corpus by its file name, as `hf-seq push` does
    corpus_name = public_name(corpus)

    # one tokenizer, one split, one held-out set for everybody
    tokenizer_dir = output_dir / "tokenizer"
    recipe = load_recipe(base_recipe(s, corpus, output_dir / "tokenizer-run"))
    prepared = tasks.prepare(recipe, tokenizer_folder=tokenizer_dir)
    tokenizer = prepared.tokenizer
    if not (tokenizer_dir / "tokenizer.json").exists():
        tokenizer.save_pretrained(tokenizer_dir)
    vocab_size = len(tokenizer)
    train_stream = np.asarray(prepared.train["input_ids"], dtype=np.int64).reshape(-1)
    held_out = prepared.held_out["eval"]
    held_out_blocks = [list(b) for b in held_out["input_ids"]]
    byte_lengths = token_byte_lengths(tokenizer)
    prompt = held_out_blocks[0][: max(4, s["block_size"] // 8)]
    prompt_text = tokenizer.decode(prompt)
    eos = tokenizer.eos_token_id
    tokens_per_step = s["batch_size"] * s["block_size"]
    say(f"lineage: {len(train_stream):,} training tokens, {len(held_out_blocks)} held-out blocks, vocab {vocab_size}")

    records = []
    for name in members:
        folder = output_dir / name
        record = {"name": name, "title": TITLES[name] if not quick or name != "ngram" else "3-gram, interpolated KN"}
        if name == "ngram":
            got = train_ngram(s, train_stream, held_out_blocks, byte_lengths, vocab_size, budget_tokens, folder)
            metrics = score_ngram(got["model"], held_out_blocks, byte_lengths)
            sample = got["model"].generate(prompt, s["sample_tokens"], seed=0, eos_token_id=eos)
            record |= {
                "order": s["ngram_order"],
                "params": got["params"],
                "non_embedding_params": None,
                "train_tokens": got["train_tokens"],
                "seconds": got["seconds"],
                "curve": got["curve"],
            }
        else:
            size = matched_size(name, s, vocab_size)
            family_name, model_keys = member_model(name, s, size)
            member_recipe = base_recipe(s, corpus, folder, tokenizer_path=str(tokenizer_dir))
            member_recipe |= {"family": family_name, "model": model_keys}
            member_recipe["data"]["eval_examples"] = s["curve_blocks"]
            member_recipe["training"] |= {
                "max_steps": math.ceil(budget_tokens / tokens_per_step) if budget_tokens else None,
                "max_seconds": budget_seconds,
                "threads": threads,
                "batch_size": s["batch_size"],
                "learning_rate": s["learning_rate"],
                "warmup_steps": s["warmup_steps"],
                "eval_every": s["eval_every"],
                "save_every": 10**9,  # no checkpoints inside the budget
            }
            member_recipe["card"] = {"description": f"The {TITLES[name]} member of the hf-seq lineage study."}
            say(f"lineage: training {name} ({family_name}, size {size})")
            summary = train(load_recipe(member_recipe), progress=progress, overwrite=True)
            model = AutoModelForCausalLM.from_pretrained(folder).eval()
            params, non_embedding = count_parameters(model)
            collator = prepared.task.collator(recipe, tokenizer, model)
            metrics = evaluate_language_model(
                model, held_out, collator, s["batch_size"], "cpu", byte_lengths, shift_labels=True
            )
            sample = sample_neural(model, prompt, s, eos)
            curve = json.loads((folder / "metrics.json").read_text())["evaluations"]
            record |= {
                "family": family_name,
                "config": model_keys,
                "params": params,
                "non_embedding_params": non_embedding,
                "train_tokens": summary["tokens"],
                "seconds": summary["seconds"],
                "curve": [{k: c[k] for k in ("step", "tokens", "seconds", "eval_bits_per_byte")} for c in curve],
            }
        record |= {k: metrics[k] for k in ("eval_loss", "eval_perplexity", "eval_bits_per_byte")}
        record |= {"eval_tokens": metrics["eval_tokens"], "eval_bytes": metrics["eval_bytes"]}
        record["tokens_per_second"] = record["train_tokens"] / max(record["seconds"], 1e-9)
        record["sample"] = tokenizer.decode(sample)
        record["prompt_text"] = prompt_text
        if name == "ngram":
            write_ngram_card(folder, record, corpus_name)
        say(f"lineage: {name}: {record['eval_bits_per_byte']:.4f} bits per byte")
        records.append(record)

    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    budget = f"{budget_tokens:,} training tokens" if budget_tokens else f"{budget_seconds:g} s of training per member"
    result = {
        "corpus": corpus_name,
        "quick": quick,
        "budget": budget,
        "budget_tokens": budget_tokens,
        "budget_seconds": budget_seconds,
        "vocab_size": vocab_size,
        "block_size": s["block_size"],
        "width": s["width"],
        "target": s["target"],
        "eval_tokens": records[0]["eval_tokens"] if records else 0,
        "eval_bytes": records[0]["eval_bytes"] if records else 0,
        "prompt": prompt_text,
        "machine": f"{os.cpu_count()} CPU cores, torch {torch.__version__}, 1-min load {load_before:.2f} before and "
        f"{load_after:.2f} after",
        "settings": s,
        "members": records,
    }
    (output_dir / "lineage.json").write_text(json.dumps(result, indent=2))
    plot_curves(records, output_dir / "learning_curves.png", f"{corpus_name}, {budget}")
    write_report(result, output_dir)
    return result


__all__ = ["MEMBERS", "count_parameters", "matched_size", "run"]
