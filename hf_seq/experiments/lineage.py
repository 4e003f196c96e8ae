"""The lineage study: the lectures' story of language models, n-gram (Shannon 1948; Kneser-Ney smoothing), the
fixed-window neural LM (Bengio et al. 2003), WaveNet's dilated causal convolutions (van den Oord et al. 2016),
Elman's recurrent network (1990), the gated cells (GRU 2014, LSTM 1997), the Transformer decoder (GPT) and the
selective state-space model (Mamba, Gu and Dao 2023), trained on one corpus with one tokenizer under one budget, sizes
matched by parameter count, and scored on the same held-out tokens with the same bits-per-byte computation.

    hf-seq lineage [--corpus FILES|DATASET] [--validation FILE] [--test FILE] [--tune N] [--sizes LIST]
                   [--seeds K] [--budget-tokens N | --budget-seconds S | --budget-flops F] [--quick]

Writes `lineage.md` (the tables, the ordering against the lectures', how far the best network is from the
literature's margin over the n-gram, and samples from a shared prompt), `lineage.json` (one record per run),
`learning_curves.png` (held-out bits per byte against training tokens), `scaling.png` (against parameters, with
several sizes), `compute.png` (against training FLOPs, with the fitted frontier) and one folder per member with its
model card. The neural members train through `hf_seq.training.run`; the final
figures of every member come from one scoring of the full held-out set (`hf_seq.evaluation`), the curves from the
runs' periodic evaluations on its first `curve_blocks` blocks. The loop, tuning, budgets and summary are the study
runner's (`study.py`), which the translation lineage (`lineage_translation.py`) shares.

Fairness: every neural member has the same embedding width and tied input/output embeddings, so the embedding
parameters are equal; the rest of each model (its non-embedding parameters) is sized to the same target. All train
with the same optimizer, schedule, batch and block size, with dropout only once the budget passes an epoch, and are
tuned, when asked, on the same trials.
"""

import json
import math
import os
import statistics
import time
from pathlib import Path

from hf_seq.compute import model_flops_per_token
from hf_seq.experiments import study
from hf_seq.experiments.study import (
    Member,
    count_parameters,
    save_log_plot,
    summarize,
    trial_grid,
)
from hf_seq.hub import public_name

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
        budget_tokens=2**20,  # 512 steps of 16 x 128 tokens: 12 minutes for all members on 2 idle cores (measured)
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
def _window(s: dict, size: int, dropout: float) -> dict:
    """y = b + U P tanh(d + H x): h = size hidden units, U tied to C through P."""
    model = dict(
        context_size=s["window_context"], embedding_size=s["width"], hidden_size=size, tie_word_embeddings=True
    )
    return model | dict(embedding_dropout=dropout, hidden_dropout=dropout)


def _recurrent(cell_type: str):
    def config(s: dict, size: int, dropout: float) -> dict:
        dropouts = dict(embedding_dropout=dropout, hidden_dropout=dropout, output_dropout=dropout)
        model = dict(
            cell_type=cell_type, embedding_size=s["width"], hidden_size=size, num_hidden_layers=s["rnn_layers"]
        )
        # At the family's default N(0, 0.05) the tied embeddings feed the recurrence inputs so small that the Elman
        # network sat on the unigram plateau for 240 steps of this budget (measured); N(0, 0.3) left it by step 40.
        return model | dropouts | dict(initializer_range=0.3)

    return config


def _gpt(s: dict, size: int, dropout: float) -> dict:
    """The width is the model width; the feed-forward width is what is sized."""
    return dict(
        hidden_size=s["width"],
        num_attention_heads=max(1, s["width"] // 32),
        num_hidden_layers=s["gpt_layers"],
        intermediate_size=size,
        max_position_embeddings=s["block_size"],
        embedding_dropout=dropout,
        attention_dropout=0.0,
        hidden_dropout=dropout,
    )


def _conv(s: dict, size: int, dropout: float) -> dict:
    """WaveNet: residual channels = the width; the skip channels are what is sized."""
    return dict(
        hidden_size=s["width"],
        kernel_size=2,
        dilation_cycle=s["conv_layers"],
        num_blocks=1,
        skip_channels=size,
        tie_word_embeddings=True,
        dropout=dropout,
    )


def _ssm(s: dict, size: int, dropout: float) -> dict:
    """Mamba blocks of the width at the paper's state size N = 16: depth x expansion is sized."""
    layers, expand = MAMBA_SHAPES[min(size, len(MAMBA_SHAPES)) - 1]
    model = dict(ssm_type="mamba", hidden_size=s["width"], num_hidden_layers=layers, expand=expand, state_size=16)
    return model | dict(hidden_dropout=dropout)


# The members in the lectures' order, worst to best (the next chapter's SSM last: Gu and Dao 2023). Each neural
# member's config is a function of the settings, its size parameter and dropout, which it puts on the connections
# its family regularises (never inside the recurrence or on attention weights).
ROWS = {
    row.name: row
    for row in (
        Member("ngram", "5-gram, interpolated Kneser-Ney", None),
        Member("window", "fixed-window MLP (Bengio et al. 2003)", "window", _window),
        Member("conv", "WaveNet, dilated causal convolutions", "conv", _conv),
        Member("elman", "Elman RNN (tanh)", "rnn", _recurrent("elman")),
        Member("gru", "GRU", "rnn", _recurrent("gru")),
        Member("lstm", "LSTM", "rnn", _recurrent("lstm")),
        Member("gpt", "GPT (Transformer decoder)", "gpt", _gpt),
        Member("ssm", "Mamba, selective state space", "ssm", _ssm),
    )
}
MEMBERS = tuple(ROWS)
LECTURE_ORDER = MEMBERS
TITLES = {name: row.title for name, row in ROWS.items()}


def member_model(name: str, s: dict, size: int, dropout: float = 0.0) -> tuple[str, dict]:
    """(family, config keys) of a neural member whose free size parameter is `size`."""
    if name not in ROWS or ROWS[name].family is None:
        raise ValueError(f"unknown lineage member {name!r}; allowed values: {list(MEMBERS[1:])}.")
    return ROWS[name].family, ROWS[name].config(s, size, dropout)


def build(name: str, s: dict, size: int, vocab_size: int, device: str = "meta"):
    """The member, on the meta device by default: shapes only, counting needs no memory and no initialisation."""
    import torch

    from hf_seq.registry import family

    fam_name, keys = member_model(name, s, size)
    fam = family(fam_name)
    config = fam.config_class(vocab_size=vocab_size, **keys)
    with torch.device(device):
        return fam.model_class("AutoModelForCausalLM")(config)


def matched_size(name: str, s: dict, vocab_size: int, target: int | None = None) -> int:
    """The size parameter whose non-embedding count is closest to `target` (default: the settings')."""
    count = lambda size: count_parameters(build(name, s, size, vocab_size))[1]
    return study.matched_size(count, target or s["target"], 256 * s["width"])


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
    refits on growing prefixes, which costs seconds, and ends with the whole training text when the budget is
    shorter (what the networks would be up against with more compute: `budget_estimate`)."""
    from hf_seq.ngram import KneserNeyLM

    available = len(train_stream) if budget_tokens is None else min(budget_tokens, len(train_stream))
    curve = []
    prefixes = [max(s["ngram_order"], int(available * f)) for f in (1 / 64, 1 / 16, 1 / 4, 1)]
    for n in prefixes + ([len(train_stream)] if available < len(train_stream) else []):
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
    save_log_plot(fig, ax, "training tokens", "held-out bits per byte (validation)", title, path)


# The literature's margin on corpora of about a million words: on Penn Treebank, Zaremba et al. (2014)'s medium LSTM
# with dropout is 42% below a 5-gram Kneser-Ney model in perplexity (82 against 141); the report says what compute
# the networks would need to be this far below the n-gram.
NGRAM_MARGIN = 0.25


def budget_estimate(records: list[dict], tokens_per_step: int) -> dict | None:
    """Where the networks would be NGRAM_MARGIN below the n-gram in per-token perplexity, on the curves' validation
    blocks. Per member, every finished run is a point (training FLOPs, its best validation bits per byte): the seed-0
    run at each size and every tuning trial (a full schedule at a quarter of the budget). The lower envelope of the
    points, the best result for each compute (Hoffmann et al. 2022's first approach), is fitted as L = E + A C^-alpha;
    the member that gets to the target with the least compute wins, with the hours that takes at the FLOPs per second
    its largest run trained at (both None where the fit's floor lies above the target). None without an n-gram or
    four points on some member's envelope."""
    ngram = next((r for r in records if r["name"] == "ngram"), None)
    if ngram is None or not ngram["curve"]:
        return None
    last = ngram["curve"][-1]  # the n-gram on the whole training text, scored on the curves' blocks
    target = last["eval_bits_per_byte"] + math.log2(1 - NGRAM_MARGIN) * last["eval_tokens"] / last["eval_bytes"]
    estimates = []
    for name in dict.fromkeys(r["name"] for r in records if r["name"] != "ngram"):
        runs = [r for r in records if r["name"] == name and r["seed"] == 0]
        points = [
            (r["train_tokens"] * r["flops_per_token"], min(c["eval_bits_per_byte"] for c in r["curve"])) for r in runs
        ]
        points += [
            (t["steps"] * tokens_per_step * r["flops_per_token"], t["eval_bits_per_byte"])
            for r in runs
            for t in r["trials"]
        ]
        frontier = study.lower_envelope(points)
        fit = study.fit_power_law(frontier)
        if fit is None:
            continue
        largest = max(runs, key=lambda r: r["flops_per_token"])
        flops = study.power_law_reaches(fit, target)
        flops = None if math.isinf(flops) else flops
        rate = largest["tokens_per_second"] * largest["flops_per_token"]
        estimates.append(
            {"name": name, "title": runs[0]["title"], "fit": fit, "frontier": frontier, "flops": flops,
             "flops_per_second": rate, "hours": flops and flops / rate / 3600, "reached": frontier[-1][1] <= target}
        )  # fmt: skip
    if not estimates:
        return None
    best = min(estimates, key=lambda e: (math.inf if e["flops"] is None else e["flops"], e["frontier"][-1][1]))
    members = [{k: e[k] for k in ("name", "title", "fit", "flops", "hours", "flops_per_second")} for e in estimates]
    return (
        {"ngram_bits_per_byte": last["eval_bits_per_byte"], "target_bits_per_byte": target}
        | best
        | {"members": members}
    )


def measured_margin(records: list[dict], target: int) -> dict | None:
    """The best network at size `target` against the n-gram in test (else validation) perplexity, seeds averaged."""
    split = "test" if all(r.get("test_perplexity") for r in records) else "validation"
    ngram = next((r for r in records if r["name"] == "ngram"), None)
    networks = [r for r in records if r["name"] != "ngram" and r["target"] == target]
    if ngram is None or not networks:
        return None
    means = {}
    for r in networks:
        means.setdefault(r["name"], []).append(r[f"{split}_perplexity"])
    name = min(means, key=lambda n: statistics.mean(means[n]))
    perplexity = statistics.mean(means[name])
    margin = 1 - perplexity / ngram[f"{split}_perplexity"]
    return {
        "split": split,
        "name": name,
        "perplexity": perplexity,
        "ngram": ngram[f"{split}_perplexity"],
        "margin": margin,
    }


def plot_compute(records: list[dict], estimate: dict, path: Path, title: str) -> None:
    """Validation bits per byte against training FLOPs: every member's curves (seed 0, one line per size), the
    n-gram, the margin's line, and the envelope and fitted frontier of the member the estimate names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {}
    for r in (r for r in records if r["name"] != "ngram" and r["seed"] == 0):
        points = [(c["tokens"] * r["flops_per_token"], c["eval_bits_per_byte"]) for c in r["curve"] if c["tokens"]]
        label = None if r["name"] in colours else r["title"]  # one legend entry per member, whatever its sizes
        colour = colours.setdefault(r["name"], f"C{len(colours)}")
        ax.plot(*zip(*points), "-", color=colour, lw=1, alpha=0.7, label=label)
    ax.axhline(estimate["ngram_bits_per_byte"], ls="--", color="gray", label="n-gram (Kneser-Ney)")
    ax.axhline(
        estimate["target_bits_per_byte"], ls=":", color="black", label=f"{NGRAM_MARGIN:.0%} below it in perplexity"
    )
    fit, frontier = estimate["fit"], estimate["frontier"]
    end = min(estimate["flops"] or math.inf, 1e4 * frontier[-1][0])
    xs = [frontier[0][0] * (end / frontier[0][0]) ** (k / 80) for k in range(81)]
    ax.plot(*zip(*frontier), "ko", ms=4, label=f"{estimate['title']}: best run per compute")
    ax.plot(
        xs, [fit["floor"] + fit["scale"] * x ** -fit["alpha"] for x in xs], "k-.", lw=1, label="its fitted frontier"
    )
    save_log_plot(fig, ax, "training FLOPs", "held-out bits per byte (validation)", title, path)


def margin_lines(result: dict) -> list[str]:
    """The report's section on the networks against the n-gram: the measured margin, and the compute the fitted
    frontier says the literature's margin takes."""
    margin, estimate = result.get("margin"), result.get("estimate")
    if margin is None:
        return []
    title = TITLES[margin["name"]]
    lines = [
        f"## How far from the literature's margin ({NGRAM_MARGIN:.0%} below the n-gram in perplexity)",
        "",
        f"Measured: the best network at {result['sizes'][-1]:,} non-embedding parameters ({title}) has "
        f"{margin['split']} perplexity {margin['perplexity']:.1f} against the n-gram's {margin['ngram']:.1f}: "
        + (f"{margin['margin']:.0%} below it." if margin["margin"] >= 0 else f"{-margin['margin']:.0%} above it."),
        "",
    ]
    if estimate is None:
        return lines
    fit = estimate["fit"]
    law = f"L = {fit['floor']:.3f} + {fit['scale']:.3g} C^-{fit['alpha']:.3f}"
    head = (
        f"Extrapolated: on the curves' validation blocks the target is {estimate['target_bits_per_byte']:.3f} bits per "
        f"byte (the n-gram on the whole training text: {estimate['ngram_bits_per_byte']:.3f}). The "
        f"{estimate['title']}'s compute frontier (its "
        f"best run at each training compute C: every size and tuning trial, seed 0) fits {law}"
    )
    if estimate["reached"]:
        lines.append(f"{head}, and its curves already reach the target.")
    elif estimate["flops"] is None:
        lines.append(
            f"{head}, whose floor lies above the target: more compute alone does not get there at this size of corpus."
        )
    else:
        largest = estimate["frontier"][-1][0]
        lines.append(
            f"{head}: it reaches the target at about {estimate['flops']:.1e} training FLOPs, "
            f"{estimate['flops'] / largest:,.0f} times this run's largest, {estimate['hours']:,.1f} hours at the "
            f"{estimate['flops_per_second'] / 1e9:.1f} GFLOP/s its largest run trained at. An extrapolation: it "
            "assumes the frontier keeps its shape, and past an epoch the corpus repeats (more dropout, not only more "
            "compute, is what the literature's runs used)."
        )
    lines += [
        "",
        "| member | fitted E | A | alpha | FLOPs to the target | hours at its speed |",
        "|---|---|---|---|---|---|",
    ]
    for e in estimate.get("members", []):
        fit, reach = e["fit"], "not reached (floor above it)" if e["flops"] is None else f"{e['flops']:.1e}"
        hours = "n/a" if e["hours"] is None else f"{e['hours']:,.1f}"
        lines.append(
            f"| {e['title']} | {fit['floor']:.3f} | {fit['scale']:.3g} | {fit['alpha']:.3f} | {reach} | {hours} |"
        )
    return lines + ["", "![compute](compute.png)", ""]


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
        lines += study.ordering_lines(rows, LECTURE_ORDER, result["seeds"])
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
    lines += margin_lines(result)
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

    from hf_seq.evaluation import token_byte_lengths
    from hf_seq.recipes import load_recipe

    s = dict(SETTINGS["quick" if quick else "default"])
    budgets = dict(tokens=budget_tokens, seconds=budget_seconds, flops=budget_flops)
    given, sizes = study.check_arguments(members, MEMBERS, budgets, seeds, tune, sizes, s["target"], "language_model")
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
    recipe = load_recipe(base_recipe(s, corpus, output_dir / "tokenizer-run", splits=splits))
    prepared, tokenizer_dir = study.shared_data(recipe, output_dir)
    tokenizer = prepared.tokenizer
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

    ngram = {}

    def fixed(name, target):
        """The n-gram: counting is deterministic, so one fit serves every size (and has no seeds); a token budget
        holds for the counts too, under a FLOPs or seconds budget they see every token."""
        if name != "ngram":
            return None
        if not ngram:
            tokens = s["budget_tokens"] if "tokens" in given or not given else None
            ngram.update(fit_ngram(context, train_stream, vocab_size, tokens, output_dir / "ngram"))
        return dict(ngram)

    def plan(name, target):
        return plan_member(name, s, target, vocab_size, tokens_per_step, len(train_stream), given)

    def train(name, plan_, settings, seed, folder, steps, seconds, score=False):
        record = train_member(context, name, plan_, settings, seed, folder, steps, seconds, score)
        if score:
            say(f"lineage: {name}: {record[metric]:.4f} {metric.replace('_', ' ')}")
        return record

    records = study.train_all(members, sizes, seeds, tune, s, budget_seconds, output_dir, plan, train, fixed, say)

    budget = study.budget_text(given, s["budget_tokens"])
    result = {
        "corpus": corpus_name,
        "validation": public_name(validation) if validation else "held out from the training text",
        "test": public_name(test) if test else "none",
        "quick": quick,
        "vocab_size": vocab_size,
        "block_size": s["block_size"],
        "width": s["width"],
        "train_tokens": len(train_stream),
        "eval_tokens": records[0]["eval_tokens"] if records else 0,
        "eval_bytes": records[0]["eval_bytes"] if records else 0,
        "prompt": tokenizer.decode(prompt),
    }
    result |= study.result_fields(given, budgets, s, tune, seeds, sizes, metric, load_before, records, budget)
    estimate = budget_estimate(records, tokens_per_step)
    result["margin"] = measured_margin(records, sizes[-1])
    result["estimate"] = estimate
    largest = study.write_results(result, output_dir, f"{corpus_name}, {budget}")
    plot_curves(largest, output_dir / "learning_curves.png", f"{corpus_name}, {budget}")
    if estimate is not None:
        plot_compute(records, estimate, output_dir / "compute.png", f"{corpus_name}, {budget}")
    write_report(result, output_dir)
    return result


def plan_member(name, s, target, vocab_size, tokens_per_step, corpus_tokens, given) -> dict:
    """A member's size parameter, shapes (on the meta device), FLOPs per token and steps under the budget."""
    size = matched_size(name, s, vocab_size, target)
    model = build(name, s, size, vocab_size)
    params, non_embedding = count_parameters(model)
    flops = model_flops_per_token(model, s["block_size"])

    def step_time() -> float:  # under a seconds budget: will the member pass an epoch, and so need dropout?
        import torch

        tokens = torch.randint(
            vocab_size, (s["batch_size"], s["block_size"]), generator=torch.Generator().manual_seed(0)
        )
        return study.seconds_per_step(build(name, s, size, vocab_size, "cpu"), {"input_ids": tokens, "labels": tokens})

    steps, past_epoch = study.plan_steps(given, s["budget_tokens"], flops, tokens_per_step, corpus_tokens, step_time)
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


def with_prefix(metrics: dict, prefix: str) -> dict:
    """`eval_loss` ... as `validation_loss` / `test_loss` ...: the record's names for each split."""
    return {f"{prefix}_{k}": metrics[f"eval_{k}"] for k in ("loss", "perplexity", "bits_per_byte")}


def train_member(context, name, plan, settings, seed, folder, steps, seconds, score=False) -> dict:
    """One training run of a neural member through `hf_seq.training.run`, selecting the best validation evaluation;
    with `score`, the selected weights are scored on the whole validation and test splits once."""
    from transformers import AutoModelForCausalLM

    from hf_seq.evaluation import evaluate_language_model

    s, prepared = context["s"], context["prepared"]
    family_name, model_keys = member_model(name, s, plan["size"], settings["dropout"])
    # the test split is not given to training: it is scored once, below, with the selected weights
    validation = {k: v for k, v in context["splits"].items() if k == "validation"}
    member_recipe = base_recipe(s, context["corpus"], folder, str(context["tokenizer_dir"]), validation)
    member_recipe |= {"family": family_name, "model": model_keys}
    member_recipe["data"]["eval_examples"] = s["curve_blocks"]
    member_recipe["training"] |= study.member_training(s, context, settings, seed, steps, seconds, select_by="loss")
    member_recipe["card"] = {"description": f"The {TITLES[name]} member of the hf-seq lineage study."}
    recipe, summary = study.train_or_reuse(member_recipe, folder, context["progress"])
    got = {k: summary[k] for k in ("eval_loss", "eval_bits_per_byte", "steps")}
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
