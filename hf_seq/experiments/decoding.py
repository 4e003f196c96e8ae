"""Decoding strategies on one trained language model (Holtzman et al. 2020, "The curious case of neural text
degeneration"): greedy search, beam search of several widths, sampling at several temperatures, top-k sampling (Fan
et al. 2018) and nucleus (top-p) sampling, all through `generate()` except greedy, which is also written out as the
lecture defines it, y_t = argmax_y p(y | y_<t), to check that `generate(num_beams=1)` is exactly that.

A small GPT is trained on the standard library's sources; each strategy continues the same held-out prompts. For each
we measure repetition (distinct-n: the fraction of the output's n-grams that are unique), the model's own
perplexity of what it wrote (`hf_seq.evaluation.lm_metrics` of the generated tokens given the prompt, at
temperature 1), and the output length, next to the same figures for the text that really followed the prompts.
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

NAME = "decoding"
TITLE = "Decoding strategies: repetition, perplexity and length of what one model writes"
STRATEGIES = {  # label -> generate() arguments
    "beam 1": dict(num_beams=1, do_sample=False),
    "beam 2": dict(num_beams=2, do_sample=False),
    "beam 4": dict(num_beams=4, do_sample=False),
    "beam 8": dict(num_beams=8, do_sample=False),
    "sampling t=0.7": dict(do_sample=True, temperature=0.7, top_k=0, top_p=1.0),
    "sampling t=1.0": dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0),
    "sampling t=1.3": dict(do_sample=True, temperature=1.3, top_k=0, top_p=1.0),
    "top-k 10": dict(do_sample=True, temperature=1.0, top_k=10, top_p=1.0),
    "top-k 40": dict(do_sample=True, temperature=1.0, top_k=40, top_p=1.0),
    "top-p 0.9": dict(do_sample=True, temperature=1.0, top_k=0, top_p=0.9),
    "top-p 0.95": dict(do_sample=True, temperature=1.0, top_k=0, top_p=0.95),
}


@dataclass(frozen=True)
class Settings:
    """The GPT (`layers` x `heads`, width `hidden_size`, blocks of `context` tokens) and its byte-level BPE of
    `vocab_size` tokens trained on the first `train_chars` characters; `steps` AdamW steps on batches of `batch_size`
    blocks; `prompts` held-out prompts of `prompt_tokens` tokens, each continued by up to `new_tokens`."""

    context: int = 64
    hidden_size: int = 128
    layers: int = 2
    heads: int = 4
    vocab_size: int = 2048
    steps: int = 600
    batch_size: int = 16
    learning_rate: float = 2e-3
    train_chars: int = 2_000_000
    heldout_chars: int = 200_000
    prompts: int = 24
    prompt_tokens: int = 16
    new_tokens: int = 48
    seed: int = 0
    threads: int | None = 1  # two threads stall at every barrier when the cores are shared; one is steadier


QUICK = Settings(
    context=32,
    hidden_size=32,
    layers=1,
    vocab_size=300,
    steps=20,
    batch_size=8,
    train_chars=60_000,
    heldout_chars=20_000,
    prompts=4,
    prompt_tokens=8,
    new_tokens=12,
)


def make_model(s: Settings, tokenizer) -> GPTForCausalLM:
    torch.manual_seed(s.seed)
    config = GPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=s.hidden_size,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        max_position_embeddings=s.context,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPTForCausalLM(config)


@torch.no_grad()
def greedy(model, prompts: torch.Tensor, new_tokens: int, eos: int) -> list[list[int]]:
    """y_t = argmax p(y | prompt, y_<t), recomputing the whole sequence each step (no cache, no generate())."""
    outputs = []
    for prompt in prompts:
        ids = prompt[None]
        for _ in range(new_tokens):
            next_id = model(input_ids=ids, use_cache=False).logits[0, -1].argmax()
            ids = torch.cat([ids, next_id.view(1, 1)], 1)
            if next_id.item() == eos:
                break
        outputs.append(ids[0, len(prompt) :].tolist())
    return outputs


def until_eos(ids: list[int], eos: int, pad: int | None) -> list[int]:
    """The generated tokens up to and including the first EOS (the padding after it dropped)."""
    out = []
    for i in ids:
        if i == pad and i != eos:
            break
        out.append(i)
        if i == eos:
            break
    return out


def distinct(outputs: list[list[int]], n: int) -> float:
    """Unique n-grams / all n-grams over every output of a strategy (Li et al. 2016's distinct-n)."""
    grams = [tuple(ids[i : i + n]) for ids in outputs for i in range(len(ids) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 0.0


@torch.no_grad()
def own_perplexity(model, prompts: torch.Tensor, outputs: list[list[int]], byte_lengths) -> dict:
    """lm_metrics of the outputs under the model itself (temperature 1), each given its prompt."""
    nll, tokens, num_bytes = 0.0, 0, 0
    for prompt, out in zip(prompts, outputs):
        if not out:
            continue
        ids = torch.cat([prompt, torch.tensor(out)])[None]
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        target = torch.tensor(out)
        nll += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
        tokens += len(out)
        num_bytes += int(byte_lengths[target].sum())
    return lm_metrics(nll, tokens, num_bytes, prefix="output")


def run(quick: bool = False, output_dir=None, overrides=(), **changes) -> dict:
    """The experiment at the default settings (or QUICK's), with `overrides` (`KEY=VALUE`) and `changes` applied."""
    base = QUICK if quick else Settings()
    s = chosen_settings(NAME, base, overrides, changes)
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    tokenizer, train_blocks, heldout = stdlib_tokenizer_and_blocks(
        s.vocab_size, s.train_chars, s.heldout_chars, s.context
    )
    prompts, references = held_out_prompts(heldout, s, tokenizer.eos_token_id)
    with torch_threads(s.threads):
        model, trained = train_model(s, tokenizer, train_blocks)
        outputs = decode(model, prompts, s, tokenizer) | {"held-out text": references}
        byte_lengths = token_byte_lengths(tokenizer)
        figures = {
            label: measure(model, prompts, outs, byte_lengths, tokenizer.eos_token_id)
            for label, outs in outputs.items()
        }

    greedy_equals_beam1 = outputs["greedy (argmax loop)"] == outputs["beam 1"]
    plots = [plot(figures, folder / "diversity_vs_perplexity.png")]
    body = report(s, tokenizer, model, trained, prompts, outputs, figures, greedy_equals_beam1)
    samples = {
        label: [tokenizer.decode(x, skip_special_tokens=True) for x in outs[:3]] for label, outs in outputs.items()
    }
    results = {
        "options": settings_record(s, base, quick),
        "greedy_equals_beam1": greedy_equals_beam1,
        "final_train_loss": trained["final_loss"],
        "train_seconds": round(trained["seconds"], 1),
        "strategies": figures,
        "samples": samples,
        "claims": claims(figures),
    }
    return finish(NAME, TITLE, folder, results, body, started, plots)


def held_out_prompts(heldout: torch.Tensor, s: Settings, eos: int) -> tuple[torch.Tensor, list[list[int]]]:
    """`prompts` prompts of `prompt_tokens` tokens spread over the held-out text, (prompts, prompt_tokens), and the
    `new_tokens` that really followed each (up to the first EOS)."""
    span = s.prompt_tokens + s.new_tokens
    stream = heldout.flatten()
    starts = torch.linspace(0, len(stream) - span - 1, s.prompts).long()
    prompts = torch.stack([stream[start : start + s.prompt_tokens] for start in starts])
    references = [until_eos(stream[start + s.prompt_tokens : start + span].tolist(), eos, None) for start in starts]
    return prompts, references


def train_model(s: Settings, tokenizer, train_blocks: torch.Tensor) -> tuple[GPTForCausalLM, dict]:
    generator = torch.Generator().manual_seed(s.seed)
    order = torch.randint(len(train_blocks), (s.steps, s.batch_size), generator=generator)
    model = make_model(s, tokenizer)
    trained = train(
        model,
        lambda step: {"input_ids": train_blocks[order[step]], "labels": train_blocks[order[step]]},
        s.steps,
        s.learning_rate,
        weight_decay=0.1,
    )
    return model, trained


def decode(model, prompts: torch.Tensor, s: Settings, tokenizer) -> dict[str, list[list[int]]]:
    """Strategy label -> the tokens it wrote after each prompt: the argmax loop, then every STRATEGIES entry through
    generate(), each sampling from the same seed."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    outputs = {"greedy (argmax loop)": greedy(model, prompts, s.new_tokens, eos)}
    for label, kwargs in STRATEGIES.items():
        torch.manual_seed(s.seed)
        generated = model.generate(
            input_ids=prompts, max_new_tokens=s.new_tokens, eos_token_id=eos, pad_token_id=pad, **kwargs
        )
        outputs[label] = [until_eos(row[s.prompt_tokens :].tolist(), eos, pad) for row in generated]
    return outputs


def measure(model, prompts: torch.Tensor, outputs: list[list[int]], byte_lengths, eos: int) -> dict:
    """distinct-1/2/3, the model's perplexity of the outputs, their mean length and how many ended with EOS."""
    return {
        **{f"distinct_{n}": distinct(outputs, n) for n in (1, 2, 3)},
        **own_perplexity(model, prompts, outputs, byte_lengths),
        "mean_length": sum(map(len, outputs)) / len(outputs),
        "ends_with_eos": sum(1 for x in outputs if x and x[-1] == eos) / len(outputs),
    }


def show(tokenizer, ids: list[int]) -> str:
    """Tokens as text for a Markdown table cell: escaped, on one line, cut at 90 characters."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    text = text.replace("\\", "\\\\").replace("\n", "\\n").replace("|", "\\|").replace("`", "'")
    return text[:90] + ("…" if len(text) > 90 else "")


def report(s: Settings, tokenizer, model, trained, prompts, outputs, figures, greedy_equals_beam1: bool) -> str:
    """The Markdown body: the setup, the strategies' figures, and the first prompt's continuations."""
    header = [
        "strategy",
        "distinct-1",
        "distinct-2",
        "distinct-3",
        "perplexity of the output",
        "bits/byte",
        "mean length",
        "ended with EOS",
    ]
    keys = ("distinct_1", "distinct_2", "distinct_3", "output_perplexity", "output_bits_per_byte")
    rows = [
        [label, *(f"{f[k]:.2f}" for k in keys), f"{f['mean_length']:.1f}", f"{f['ends_with_eos']:.2f}"]
        for label, f in figures.items()
    ]
    return "\n\n".join(
        [
            prose(__doc__),
            f"The model: GPT, {s.layers} layers, width {s.hidden_size}, {total_parameters(model):,} weights, "
            f"byte-level BPE of {len(tokenizer)} tokens, {s.steps} AdamW steps on blocks of {s.context} tokens "
            f"(final training loss {trained['final_loss']:.2f} nats/token). {s.prompts} prompts of "
            f"{s.prompt_tokens} held-out tokens, up to {s.new_tokens} new tokens each; sampling seeded with "
            f"{s.seed} for every strategy. `greedy (argmax loop)` equals `generate(num_beams=1)`: "
            f"{'yes' if greedy_equals_beam1 else 'NO'}.",
            markdown_table(header, rows),
            f"The first prompt, `{show(tokenizer, prompts[0].tolist())}`, continued:",
            markdown_table(
                ["strategy", "continuation"],
                [[label, f"`{show(tokenizer, outs[0])}`"] for label, outs in outputs.items()],
            ),
        ]
    )


def claims(figures: dict) -> list[dict]:
    human, beam1, beam_wide = figures["held-out text"], figures["beam 1"], figures["beam 8"]
    temps = [figures[f"sampling t={t}"] for t in ("0.7", "1.0", "1.3")]
    top_p = figures["top-p 0.9"]
    return [
        claim(
            "Greedy and beam search write repetitive, unusually likely text (the likelihood trap)",
            f"distinct-2: greedy {beam1['distinct_2']:.2f}, beam 8 {beam_wide['distinct_2']:.2f}, held-out text "
            f"{human['distinct_2']:.2f}; perplexity: {beam1['output_perplexity']:.2f}, "
            f"{beam_wide['output_perplexity']:.2f} vs {human['output_perplexity']:.2f}",
            max(beam1["distinct_2"], beam_wide["distinct_2"]) < human["distinct_2"]
            and max(beam1["output_perplexity"], beam_wide["output_perplexity"]) < human["output_perplexity"],
        ),
        claim(
            "A wider beam finds more likely outputs than greedy search",
            f"perplexity of the output: beam 1 {beam1['output_perplexity']:.3f}, beam 8 {beam_wide['output_perplexity']:.3f}",
            beam_wide["output_perplexity"] <= beam1["output_perplexity"],
        ),
        claim(
            "A higher temperature gives more diverse and less likely text",
            "distinct-2 at t = 0.7 / 1.0 / 1.3: "
            + " / ".join(f"{t['distinct_2']:.2f}" for t in temps)
            + "; perplexity: "
            + " / ".join(f"{t['output_perplexity']:.1f}" for t in temps),
            temps[0]["distinct_2"] <= temps[1]["distinct_2"] <= temps[2]["distinct_2"]
            and temps[0]["output_perplexity"] < temps[1]["output_perplexity"] < temps[2]["output_perplexity"],
        ),
        claim(
            "Truncating the tail (top-k, top-p) keeps sampling's diversity but avoids its unlikely tokens",
            f"top-p 0.9: distinct-2 {top_p['distinct_2']:.2f}, perplexity {top_p['output_perplexity']:.1f}; pure "
            f"sampling (t = 1): {temps[1]['distinct_2']:.2f}, {temps[1]['output_perplexity']:.1f}; greedy: "
            f"{beam1['distinct_2']:.2f}",
            top_p["output_perplexity"] < temps[1]["output_perplexity"] and top_p["distinct_2"] > beam1["distinct_2"],
        ),
    ]


def plot(figures: dict, path) -> str:
    fig = figure(7.5, 5)
    axes = fig.add_subplot()
    for label, f in figures.items():
        marker = "*" if label == "held-out text" else "o"
        axes.scatter(f["output_perplexity"], f["distinct_2"], marker=marker, s=80 if marker == "*" else 30)
        axes.annotate(
            label, (f["output_perplexity"], f["distinct_2"]), fontsize=7, xytext=(4, 2), textcoords="offset points"
        )
    axes.set_xscale("log")
    axes.set_xlabel("the model's perplexity of the output (log scale)")
    axes.set_ylabel("distinct-2 (unique bigrams / bigrams)")
    axes.set_title("Decoding: diversity against likelihood")
    axes.grid(alpha=0.3, which="both")
    return save_figure(fig, path)
