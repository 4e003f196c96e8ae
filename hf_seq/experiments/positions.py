"""Position encodings and length: train short, test long (Press, Smith and Lewis 2022).

Four GPTs that differ only in `position_embedding_type` are trained on the standard library's sources in blocks of
`context` tokens, then score held-out text in blocks of 1x, 2x and 4x that length:

- `learned` (GPT-2): a table of `context` trained vectors; positions past the table do not exist, and the model
  refuses them (the table below says so instead of failing).
- `sinusoidal` (Vaswani et al. 2017): a fixed function, defined at any position (its table is built 4x long here;
  it has no weights), but positions past the training length were never seen.
- `rope` (Su et al. 2021): rotates queries and keys, so scores depend on relative offsets, yet offsets past the
  training length were never seen either.
- `alibi`: no position vectors; a fixed penalty on attention scores that grows with the distance, which the paper
  shows extrapolates.

The held-out loss is the NLL per token (nats, no smoothing) of `hf_seq.evaluation.lm_metrics`, with bits per byte.
"""

import time
from dataclasses import dataclass

import torch

from hf_seq import GPTConfig, GPTForCausalLM

from .common import (
    chosen_settings,
    claim,
    figure,
    finish,
    lm_metrics,
    markdown_table,
    output_folder,
    prose,
    save_figure,
    settings_record,
    stdlib_tokenizer_and_blocks,
    token_byte_lengths,
    torch_threads,
    total_parameters,
    train,
)

NAME = "positions"
TITLE = "Position encodings and length: held-out loss at 1x, 2x and 4x the training context"
KINDS = ("learned", "sinusoidal", "rope", "alibi")
SCALES = (1, 2, 4)


@dataclass(frozen=True)
class Settings:
    """Each GPT (`layers` x `heads`, width `hidden_size`) trained for `steps` AdamW steps on batches of `batch_size`
    blocks of `context` tokens (BPE of `vocab_size` tokens, the first `train_chars` characters); scored on
    `heldout_blocks` blocks of 4 x `context` tokens from the next `heldout_chars` characters."""

    context: int = 64
    hidden_size: int = 96
    layers: int = 2
    heads: int = 4
    vocab_size: int = 1024
    steps: int = 400
    batch_size: int = 16
    learning_rate: float = 2e-3
    train_chars: int = 1_500_000
    heldout_chars: int = 300_000
    heldout_blocks: int = 48
    seed: int = 0
    threads: int | None = 1  # two threads stall at every barrier when the cores are shared; one is steadier


QUICK = Settings(
    context=16,
    hidden_size=32,
    vocab_size=300,
    steps=20,
    batch_size=8,
    train_chars=60_000,
    heldout_chars=20_000,
    heldout_blocks=8,
)


def make_model(kind: str, s: Settings, tokenizer) -> GPTForCausalLM:
    torch.manual_seed(s.seed)
    table = s.context if kind == "learned" else max(SCALES) * s.context  # sinusoidal: a function, no weights
    config = GPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=s.hidden_size,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        max_position_embeddings=table,
        position_embedding_type=kind,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPTForCausalLM(config)


@torch.no_grad()
def score(model, blocks: torch.Tensor, byte_lengths: torch.Tensor, batch_size: int = 8):
    """The lm_metrics of `blocks` (N, n) read whole, and the mean NLL at each position 1..n-1 (what position t
    predicts from the t tokens before it)."""
    nll = []
    for start in range(0, len(blocks), batch_size):
        ids = blocks[start : start + batch_size]
        logits = model(input_ids=ids).logits[:, :-1].float()
        nll.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none"))
    nll = torch.cat(nll)  # (N, n - 1)
    metrics = lm_metrics(nll.sum().item(), nll.numel(), int(byte_lengths[blocks[:, 1:]].sum()))
    return metrics, nll.mean(0).tolist()


def run(quick: bool = False, output_dir=None, overrides=(), **changes) -> dict:
    """The experiment at the default settings (or QUICK's), with `overrides` (`KEY=VALUE`) and `changes` applied."""
    base = QUICK if quick else Settings()
    s = chosen_settings(NAME, base, overrides, changes)
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    tokenizer, train_blocks, heldout = stdlib_tokenizer_and_blocks(
        s.vocab_size, s.train_chars, s.heldout_chars, s.context
    )
    heldout = _reblock(heldout, max(SCALES) * s.context)[: s.heldout_blocks]
    byte_lengths = token_byte_lengths(tokenizer)
    generator = torch.Generator().manual_seed(s.seed)
    order = torch.randint(len(train_blocks), (s.steps, s.batch_size), generator=generator)

    def batch(step):
        ids = train_blocks[order[step]]
        return {"input_ids": ids, "labels": ids}

    with torch_threads(s.threads):
        models = {kind: train_and_score(kind, s, tokenizer, batch, heldout, byte_lengths) for kind in KINDS}

    gaps = {kind: beyond(models[kind], s.context) for kind in KINDS}
    plots = [plot(models, folder / "loss_by_position.png", s)]
    body = report(s, models, gaps, len(tokenizer), len(heldout))
    results = {"options": settings_record(s, base, quick), "models": models, "claims": claims(models, gaps)}
    for m in models.values():  # the curves are in the plot; the JSON keeps them too, rounded
        for scored in m["scales"].values():
            if "per_position" in scored:
                scored["per_position"] = [round(x, 4) for x in scored["per_position"]]
    return finish(NAME, TITLE, folder, results, body, started, plots)


def train_and_score(kind: str, s: Settings, tokenizer, batch, heldout: torch.Tensor, byte_lengths) -> dict:
    """Train the GPT with `kind` positions on `batch(step)`, then score the held-out blocks cut to each scale x the
    context (an error in place of the figures where the model refuses the length)."""
    model = make_model(kind, s, tokenizer)
    trained = train(model, batch, s.steps, s.learning_rate, weight_decay=0.1)
    result = {
        "parameters": total_parameters(model),
        "train_seconds": round(trained["seconds"], 1),
        "final_train_loss": trained["final_loss"],
        "scales": {},
    }
    for scale in SCALES:
        try:
            metrics, per_position = score(model, heldout[:, : scale * s.context], byte_lengths)
        except ValueError as error:  # learned positions: no vector past the table
            result["scales"][scale] = {"error": str(error).split(";")[0]}
            continue
        result["scales"][scale] = metrics | {"per_position": per_position}
    return result


def beyond(model: dict, context: int) -> tuple[float, float]:
    """The mean loss at the trained context's second half, and past the context (at the longest scale read)."""
    curve = model["scales"][max(SCALES)].get("per_position")
    if curve is None:
        return float("nan"), float("nan")
    inside = curve[context // 2 : context - 1]
    return sum(inside) / len(inside), sum(curve[context - 1 :]) / len(curve[context - 1 :])


def report(s: Settings, models: dict, gaps: dict, vocab_size: int, heldout_blocks: int) -> str:
    """The Markdown body: the setup, and each model's held-out loss at every scale and past the context."""
    rows = []
    for kind, m in models.items():
        cells = [
            f"beyond the table (max_position_embeddings = {s.context})"
            if "error" in scored
            else f"{scored['eval_loss']:.3f} ({scored['eval_bits_per_byte']:.3f} bits/byte)"
            for scored in (m["scales"][scale] for scale in SCALES)
        ]
        inside, past = gaps[kind]
        gap = "—" if past != past else f"{inside:.3f} → {past:.3f}"
        rows.append([kind, f"{m['parameters']:,}", m["train_seconds"], *cells, gap])
    return "\n\n".join(
        [
            prose(__doc__),
            f"Each GPT: {s.layers} layers, width {s.hidden_size}, {s.heads} heads, byte-level BPE of "
            f"{vocab_size} tokens trained on the first {s.train_chars:,} characters; {s.steps} AdamW steps "
            f"(peak {s.learning_rate}, cosine decay, weight decay 0.1) on batches of {s.batch_size} blocks of "
            f"{s.context} tokens. Held out: {heldout_blocks} blocks of {max(SCALES) * s.context} tokens from "
            "the files that follow, cut to each length (every block read from its start).",
            markdown_table(
                [
                    "positions",
                    "parameters",
                    "train s",
                    *(f"held-out loss @ {scale}x ({scale * s.context} tokens)" for scale in SCALES),
                    f"loss at positions {s.context // 2}-{s.context - 1} → past {s.context}",
                ],
                rows,
            ),
        ]
    )


def claims(models: dict, gaps: dict) -> list[dict]:
    learned, alibi = models["learned"]["scales"], models["alibi"]["scales"]
    return [
        claim(
            "Learned absolute positions stop at the end of their table",
            f"at 2x and 4x the model refuses the input: {learned[2].get('error', 'no error')!r}",
            all("error" in learned[s] for s in SCALES if s > 1),
        ),
        claim(
            "Sinusoidal positions are defined at any length, but a model trained short does not extrapolate",
            f"loss per token {gaps['sinusoidal'][0]:.3f} inside the trained context, {gaps['sinusoidal'][1]:.3f} past it",
            gaps["sinusoidal"][1] > gaps["sinusoidal"][0],
        ),
        claim(
            "RoPE alone does not extrapolate past the training length either",
            f"loss per token {gaps['rope'][0]:.3f} inside, {gaps['rope'][1]:.3f} past",
            gaps["rope"][1] > gaps["rope"][0],
        ),
        claim(
            "ALiBi extrapolates: train short, test long, and the loss does not rise (Press et al. 2022)",
            f"loss per token {gaps['alibi'][0]:.3f} inside, {gaps['alibi'][1]:.3f} past; at 4x "
            f"{alibi[4]['eval_loss']:.3f} vs 1x {alibi[1]['eval_loss']:.3f}",
            gaps["alibi"][1] <= gaps["alibi"][0] + 0.05,
        ),
    ]


def _reblock(blocks: torch.Tensor, length: int) -> torch.Tensor:
    """Blocks of `length` tokens from the same stream (the held-out blocks joined back in order)."""
    stream = blocks.flatten()
    count = len(stream) // length
    return stream[: count * length].view(count, length)


def plot(models: dict, path, s: Settings) -> str:
    fig = figure(9, 4.5)
    axes = fig.add_subplot()
    window = max(1, s.context // 8)
    for kind, m in models.items():
        longest = max(s for s, v in m["scales"].items() if "per_position" in v)
        curve = torch.tensor(m["scales"][longest]["per_position"])
        smooth = torch.nn.functional.avg_pool1d(curve[None, None], window, 1).flatten().tolist()
        label = kind if longest == max(SCALES) else f"{kind} (stops at its table)"
        axes.plot(range(1 + window // 2, 1 + window // 2 + len(smooth)), smooth, label=label)
    axes.axvline(s.context, color="gray", linestyle="--", linewidth=1)
    axes.text(s.context, axes.get_ylim()[1], " training context", color="gray", fontsize=8, va="top")
    axes.set_xlabel("position in the held-out block (tokens)")
    axes.set_ylabel(f"held-out NLL per token (nats, mean over {window} positions)")
    axes.set_title("GPT trained at one context, read at 4x")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    return save_figure(fig, path)
