"""The n-gram as a member of the language-model lineage: counts fit on the study's training tokens under its budget,
scored on the same held-out blocks with the same bits-per-byte computation as the networks, with its learning curve
(refits on growing prefixes), a sample from the shared prompt, and a folder that holds its card, its counts and the
lineage's tokenizer, as a network's folder holds its model (its `from_pretrained` classmethod loads it back)."""

import time
from pathlib import Path

from hf_seq.experiments.study import Record


def fit_ngram(data, s, order: int, budget_tokens: int | None, folder: Path) -> dict:
    """The n-gram member's record: fit on the first `budget_tokens` training tokens (all of them without a token
    budget), scored on the same validation and test blocks as the networks, with its learning curve, a sample from
    the shared prompt and a card."""
    tokenizer, validation = data.prepared.tokenizer, [list(b) for b in data.held_out["validation"]["input_ids"]]
    got = train_ngram(s, order, data.train_stream, validation, data.byte_lengths, len(tokenizer), budget_tokens)
    scored = score_ngram(got["model"], validation, data.byte_lengths)
    eval_keys = ("eval_tokens", "eval_bytes", "eval_loss", "eval_perplexity", "eval_bits_per_byte")
    figures = {"order": order} | with_prefix(scored, "validation") | {k: scored[k] for k in eval_keys}
    if data.held_out["test"] is not None:
        test_blocks = [list(b) for b in data.held_out["test"]["input_ids"]]
        figures |= with_prefix(score_ngram(got["model"], test_blocks, data.byte_lengths), "test")
    else:
        figures |= {"test_bits_per_byte": None, "test_perplexity": None, "test_loss": None}
    sample = got["model"].generate(data.prompt, s.sample_tokens, seed=0, eos_token_id=tokenizer.eos_token_id)
    figures |= {"sample": tokenizer.decode(sample), "prompt_text": tokenizer.decode(data.prompt)}
    title = f"{order}-gram, interpolated Kneser-Ney"
    fit = Record("ngram", title, None, got["params"], train_tokens=got["train_tokens"], seconds=got["seconds"],
                 curve=got["curve"])  # fmt: skip
    record = fit.to_dict(figures)
    write_ngram_card(folder, record, data.corpus_name)
    save_ngram(folder, got["model"], tokenizer)
    return record


def score_ngram(lm, blocks, byte_lengths) -> dict:
    """The n-gram's figures on the held-out blocks, scored as the neural models are: every token of a block after
    its first, given at most order-1 tokens before it inside the block."""
    import numpy as np

    from hf_seq.evaluation.metrics import lm_metrics

    nll = sum(float(lm.token_nll(block).sum()) for block in blocks)
    tokens = sum(len(block) - 1 for block in blocks)
    num_bytes = sum(int(byte_lengths[np.asarray(block[1:])].sum()) for block in blocks)
    return lm_metrics(nll, tokens, num_bytes)


def train_ngram(s, order: int, train_stream, held_out_blocks, byte_lengths, vocab_size, budget_tokens) -> dict:
    """Fit on the first `budget_tokens` training tokens (all of them without a token budget); the learning curve
    refits on growing prefixes, which costs seconds, and ends with the whole training text when the budget is
    shorter (what the networks would be up against with more compute: `budget_estimate`)."""
    from hf_seq.baselines.ngram import KneserNeyLM

    available = len(train_stream) if budget_tokens is None else min(budget_tokens, len(train_stream))
    curve = []
    prefixes = [max(order, int(available * f)) for f in (1 / 64, 1 / 16, 1 / 4, 1)]
    for n in prefixes + ([len(train_stream)] if available < len(train_stream) else []):
        blocks = held_out_blocks[: s.curve_blocks]
        metrics = score_ngram(KneserNeyLM(vocab_size, order).fit(train_stream[:n]), blocks, byte_lengths)
        curve.append({"tokens": n} | metrics)
    start = time.perf_counter()
    lm = KneserNeyLM(vocab_size, order).fit(train_stream[:available])
    seconds = time.perf_counter() - start
    params = sum(int((table["count"] > 0).sum()) for table in lm.orders[1:])
    return {"model": lm, "train_tokens": available, "seconds": seconds, "params": params, "curve": curve}


def write_ngram_card(folder: Path, record: dict, corpus: str) -> None:
    """The n-gram member's card; `corpus` as the reports name it (`public_name`: a file name, not a local path)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# {record['title']}",
        "",
        f"An interpolated Kneser-Ney {record['order']}-gram model over the lineage's BPE token ids (`hf_seq.baselines.ngram`),",
        f"fit on {record['train_tokens']:,} training tokens of `{corpus}` in {record['seconds']:.1f} s.",
        f"It has no weights: its 'parameters' are its {record['params']:,} distinct n-gram counts, saved here",
        "(`ngram.safetensors`, `ngram_config.json`; `KneserNeyLM.from_pretrained` loads them) with the",
        "lineage's tokenizer. Scored like the neural members:",
        "",
        "| held-out bits per byte | perplexity | NLL (nats / token) | scored tokens | bytes |",
        "|---|---|---|---|---|",
        f"| {record['eval_bits_per_byte']:.4f} | {record['eval_perplexity']:.2f} | {record['eval_loss']:.4f} | "
        f"{record['eval_tokens']:,} | {record['eval_bytes']:,} |",
        "",
    ]
    (folder / "README.md").write_text("\n".join(lines))


def save_ngram(folder: Path, lm, tokenizer) -> None:
    """The fitted n-gram in its member folder, as the networks' folders hold their models: its counts
    (`KneserNeyLM.save_pretrained`), the lineage's tokenizer and `checksums.json` over the counts file."""
    from hf_seq.hub.checksums import record_checksums

    lm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    record_checksums(folder)


def with_prefix(metrics: dict, prefix: str) -> dict:
    """`eval_loss` ... as `validation_loss` / `test_loss` ...: the record's names for each split."""
    return {f"{prefix}_{k}": metrics[f"eval_{k}"] for k in ("loss", "perplexity", "bits_per_byte")}
