"""hf-seq's TransformerForConditionalGeneration against transformers' MarianMTModel at the same configuration and with
the same weights (ours is built with the paper's choices: post-LN, sinusoidal positions, scaled and three-way tied
embeddings, ReLU; the reference is `hf_seq.convert.to_transformers(ours)`).

Measured in one run, the two models alternating within each round (which one goes first alternates between rounds):
- training throughput: forward + backward + AdamW step on a fixed random batch of source/target pairs, in tokens/s
  (source plus target tokens);
- beam-search generation: 4 beams, length penalty 0.6, a fixed number of new tokens (EOS disabled so both models do
  the same work), in source sentences/s; the two models' outputs are checked to be identical.
Each figure is the median over rounds; the ratio column is the median of the per-round ratios ours / Marian, with
their range. On a quiet 2-core CPU, a model timed against itself read 0.92-1.04: a ratio within about 0.08 of 1 is
noise.

    python bench/bench_transformer.py            # CPU, fp32, sdpa; writes bench/results/transformer_cpu.md
    python bench/bench_transformer.py --quick    # a tiny configuration, a few seconds, nothing written
    python bench/bench_transformer.py --beam-only --sizes small --rounds 9   # beam search alone

With `--length-table`, also the Transformer's row of the reversal table of bench_bahdanau.py (exact match of greedy
decoding against source length 10 to 60, `hf_seq.data.sequence_reversal`), trained by that script's code on the
budget its attention and fixed-context RNN designs get, so the three sequence-to-sequence designs sit side by side.
"""

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from hf_seq import TransformerConfig, TransformerForConditionalGeneration
from hf_seq.convert import to_transformers

MODELS = ("ours", "marian")


@dataclass(frozen=True)
class Size:
    name: str
    vocab_size: int
    layers: int  # encoder and decoder each
    hidden_size: int
    heads: int
    source_len: int
    target_len: int
    batch_size: int
    train_steps: int  # timed training steps per round
    beam_batch: int  # source sentences per generate() call
    new_tokens: int


SIZES = {
    "small": Size("small", 8000, 3, 256, 4, 48, 48, 16, 4, 8, 32),
    "base-width": Size("base-width", 8000, 2, 512, 8, 48, 48, 16, 2, 8, 24),
}
QUICK = Size("tiny", 1000, 1, 64, 2, 16, 16, 4, 2, 2, 8)


def build_models(size: Size, attn: str) -> dict:
    config = TransformerConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        encoder_layers=size.layers,
        decoder_layers=size.layers,
        num_attention_heads=size.heads,
        intermediate_size=4 * size.hidden_size,
        max_position_embeddings=max(size.source_len, size.target_len, size.new_tokens + 1),
    )
    torch.manual_seed(0)
    ours = TransformerForConditionalGeneration._from_config(config, attn_implementation=attn)
    models = {"ours": ours, "marian": to_transformers(ours)}
    for model in models.values():
        model.generation_config.eos_token_id = None  # always generate exactly new_tokens tokens
        model.generation_config.forced_eos_token_id = None
        model.generation_config.pad_token_id = config.pad_token_id
    return models


class TrainingRun:
    """One model, its AdamW optimizer and a fixed batch; `run(steps)` returns the seconds of `steps` steps."""

    def __init__(self, model, size: Size):
        self.model = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(1)
        self.input_ids = torch.randint(3, size.vocab_size, (size.batch_size, size.source_len), generator=generator)
        self.labels = torch.randint(3, size.vocab_size, (size.batch_size, size.target_len), generator=generator)
        self.tokens = self.input_ids.numel() + self.labels.numel()

    def run(self, steps: int) -> float:
        self.model.train()
        start = time.perf_counter()
        for _ in range(steps):
            loss = self.model(input_ids=self.input_ids, labels=self.labels).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start


class BeamRun:
    def __init__(self, model, size: Size):
        self.model, self.size = model, size
        generator = torch.Generator().manual_seed(2)
        self.sources = torch.randint(3, size.vocab_size, (size.beam_batch, size.source_len), generator=generator)

    @torch.no_grad()
    def run(self) -> tuple[float, torch.Tensor]:
        self.model.eval()
        start = time.perf_counter()
        out = self.model.generate(
            self.sources,
            attention_mask=torch.ones_like(self.sources),
            num_beams=4,
            length_penalty=0.6,
            max_new_tokens=self.size.new_tokens,
            min_new_tokens=self.size.new_tokens,
            do_sample=False,
        )
        return time.perf_counter() - start, out


def bench_size(size: Size, rounds: int, attn: str, train: bool = True) -> dict:
    models = build_models(size, attn)
    training = {name: TrainingRun(model, size) for name, model in models.items()}
    beams = {name: BeamRun(model, size) for name, model in models.items()}
    # Warm-up (allocator, kernels, first calls). The beams are compared here, before training moves the two copies'
    # weights apart by float rounding.
    same_beams = torch.equal(beams["ours"].run()[1], beams["marian"].run()[1])
    for name in MODELS:
        training[name].run(1 if train else 0)
    tokens_per_s = {name: [] for name in MODELS}
    sentences_per_s = {name: [] for name in MODELS}
    for r in range(rounds):
        order = MODELS if r % 2 == 0 else MODELS[::-1]
        for name in order if train else ():
            tokens_per_s[name].append(size.train_steps * training[name].tokens / training[name].run(size.train_steps))
        for name in order:
            sentences_per_s[name].append(size.beam_batch / beams[name].run()[0])
    return {
        "size": size,
        "parameters": sum(p.numel() for p in models["ours"].parameters()),
        "train": summarize(tokens_per_s) if train else None,
        "beam": summarize(sentences_per_s),
        "same_beams": same_beams,
    }


def summarize(per_round: dict) -> dict:
    ratios = [ours / marian for ours, marian in zip(per_round["ours"], per_round["marian"])]
    return {
        "ours": statistics.median(per_round["ours"]),
        "marian": statistics.median(per_round["marian"]),
        "ratio": statistics.median(ratios),
        "ratio_range": (min(ratios), max(ratios)),
    }


# ------------------------------------------------------------------------------------------------ length table
def length_table(quick: bool) -> dict:
    """The Transformer's row of the Bahdanau bench's reversal table: bench_bahdanau.py's batches, budget, schedule
    and evaluation (its defaults), the ones its attention and fixed-context RNN designs get, so the three compare."""
    import bench_bahdanau  # this script's folder is on sys.path when it is run as a script

    options = {"steps": 1200, "batch_size": 64, "min_length": 5, "max_length": 60, "examples": 100, "quick": quick}
    lengths = tuple(range(10, 61, 10))
    if quick:
        options |= {"steps": 20, "examples": 10}
        lengths = (10, 20)
    return bench_bahdanau.run_design("transformer", options, lengths)


# ------------------------------------------------------------------------------------------------ report
def machine() -> str:
    return (
        f"{torch.get_num_threads()}-thread {platform.machine()} CPU ({platform.system()}), "
        f"torch {torch.__version__.split('+')[0]}, transformers {transformers.__version__}, fp32, "
        f"1-minute load average {os.getloadavg()[0]:.1f} at the end of the run"
    )


def report(
    results: list[dict], attn: str, table: dict | None = None, command: str = "bench/bench_transformer.py"
) -> str:
    train = results[0]["train"] is not None
    lines = [
        "# TransformerForConditionalGeneration vs MarianMTModel (CPU)",
        "",
        f"Machine: {machine()}; attention `{attn}`; `torch.set_flush_denormal(True)`.",
        f"Command: `python {command}`. Same weights in both (ours converted with",
        "`hf_seq.convert.to_transformers`), the two models alternating within each round; medians over rounds,",
        "ratio = median of per-round ours / Marian (range in brackets). A ratio within about 0.08 of 1 is noise here.",
        "",
        "| size | params | "
        + ("train tok/s ours | train tok/s Marian | ratio | " if train else "")
        + "beam sent/s ours | beam sent/s Marian | ratio | same beams |",
        "|---|---|" + ("---|---|---|" if train else "") + "---|---|---|---|",
    ]
    for r in results:
        s, t, b = r["size"], r["train"], r["beam"]
        shape = f"{s.name}: d {s.hidden_size}, {s.layers}+{s.layers} layers, batch {s.batch_size}x{s.source_len}+{s.target_len}"
        columns = f"| {shape} | {r['parameters'] / 1e6:.1f}M | "
        if train:
            columns += (
                f"{t['ours']:.0f} | {t['marian']:.0f} | {t['ratio']:.2f} "
                f"[{t['ratio_range'][0]:.2f}-{t['ratio_range'][1]:.2f}] | "
            )
        columns += (
            f"{b['ours']:.2f} | {b['marian']:.2f} | {b['ratio']:.2f} [{b['ratio_range'][0]:.2f}-{b['ratio_range'][1]:.2f}] | "
            f"{'yes' if r['same_beams'] else 'NO'} |"
        )
        lines.append(columns)
    lines += [
        "",
        f"Beam search: {results[0]['size'].beam_batch} source sentences per call, 4 beams, length penalty 0.6, "
        "a fixed number of new tokens (EOS disabled)."
        + (" Training: AdamW, source + target tokens counted." if train else ""),
    ]
    if table:
        lengths = sorted(table["scores"])
        lines += [
            "",
            "## Reversal: exact match by source length",
            "",
            "`--length-table`: the Transformer row of bench_bahdanau.py's table, trained and scored by that script's",
            f"code ({table['parameters']:,} parameters, peak rate {table['lr']:g}, {table['seconds']:.0f} s on one "
            f"thread, final loss {table['final_loss']:.3f}); see bahdanau_cpu.md for the RNN designs on the same budget.",
            "",
            "| source length | " + " | ".join(str(n) for n in lengths) + " |",
            "|---|" + "---:|" * len(lengths),
            "| exact match | " + " | ".join(f"{table['scores'][n][0]:.2f}" for n in lengths) + " |",
            "| token accuracy | " + " | ".join(f"{table['scores'][n][1]:.2f}" for n in lengths) + " |",
        ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- ours alone: greedy decode, eager vs compiled
DECODE_VARIANTS = {  # name: (cache_implementation, compiled: False, "default" or "cpp" for inductor's C++ wrapper)
    "dynamic cache, eager": ("dynamic", False),
    "static cache, eager": ("static", False),
    "static cache, compiled": ("static", "default"),
    "static cache, compiled, C++ wrapper": ("static", "cpp"),
}


@torch.no_grad()
def decode_report(size: Size, rounds: int, attn: str) -> str:
    """Greedy generate() of hf-seq's Transformer at batch 1 and 8: dynamic cache eager (the default), static cache
    eager and static cache with a compiled one-token decoder step; ms per new token, interleaved rounds."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    model = build_models(size, attn)["ours"].eval()
    compile_configs = {
        "default": CompileConfig(fullgraph=True, dynamic=False, mode="default"),
        "cpp": CompileConfig(fullgraph=True, dynamic=False, mode=None, options={"cpp_wrapper": True}),
    }
    lines = [
        f"Greedy `generate()`: source {size.source_len} tokens, {size.new_tokens} new tokens, ms per new token "
        "(encoder included); ratio: dynamic eager / variant, median of per-round ratios.",
        "",
        "| batch | variant | ms/token | speed-up | same tokens | first call (s) |",
        "|---:|---|---:|---:|---|---:|",
    ]
    for batch in (1, 8):
        sources = torch.randint(
            3, size.vocab_size, (batch, size.source_len), generator=torch.Generator().manual_seed(2)
        )

        def decode(variant, sources=sources):
            cache, compiled = DECODE_VARIANTS[variant]
            start = time.perf_counter()
            out = model.generate(
                sources,
                attention_mask=torch.ones_like(sources),
                max_new_tokens=size.new_tokens,
                do_sample=False,
                cache_implementation=cache,
                compile_config=compile_configs[compiled] if compiled else None,
            )
            return (time.perf_counter() - start) / size.new_tokens, out

        first, outputs = {}, {}
        for variant in DECODE_VARIANTS:
            start = time.perf_counter()
            outputs[variant] = decode(variant)[1]
            first[variant] = time.perf_counter() - start
        graphs = counters["stats"]["unique_graphs"]
        times = {variant: [] for variant in DECODE_VARIANTS}
        for r in range(rounds):
            for variant in DECODE_VARIANTS if r % 2 == 0 else list(DECODE_VARIANTS)[::-1]:
                seconds, out = decode(variant)
                assert torch.equal(out, outputs[variant]), f"{variant}: greedy decoding changed between calls"
                times[variant].append(seconds)
            print(
                f"decode batch {batch} round {r + 1}: "
                + ", ".join(f"{v} {t[-1] * 1e3:.2f} ms" for v, t in times.items())
            )
        assert counters["stats"]["unique_graphs"] == graphs, "a compiled step was recompiled during the timed rounds"
        base = times["dynamic cache, eager"]
        for variant, t in times.items():
            ratios = [b / x for b, x in zip(base, t)]
            same = "yes" if torch.equal(outputs[variant], outputs["dynamic cache, eager"]) else "**no**"
            lines.append(
                f"| {batch} | {variant} | {statistics.median(t) * 1e3:.2f} | **{statistics.median(ratios):.2f}** "
                f"({min(ratios):.2f}-{max(ratios):.2f}) | {same} | {first[variant]:.1f} |"
            )
    lines += [
        "",
        f"torch._dynamo: {counters['stats']['unique_graphs']} graph(s) (one per batch size and compile mode), none compiled during the "
        f"timed rounds; graph breaks: {sum(counters['graph_break'].values())}, recompilations: "
        f"{sum(counters['recompiles'].values())}.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a tiny configuration and 2 rounds; writes nothing")
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--length-table", action="store_true", help="also the reversal table (bench_bahdanau.py's)")
    parser.add_argument("--decode", action="store_true", help="ours alone: greedy decode, eager vs compiled")
    parser.add_argument("--beam-only", action="store_true", help="beam search only (no training rounds)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--output", default=None, help="default: bench/results/transformer[_decode]_cpu.md")
    args = parser.parse_args()
    torch.set_flush_denormal(True)  # see shared notes: denormals made CPU timings erratic
    if args.threads:
        torch.set_num_threads(args.threads)
    results_dir = Path(__file__).parent / "results"
    if args.decode:
        size = QUICK if args.quick else SIZES["small"]
        rounds = 2 if args.quick else args.rounds
        command = "python bench/bench_transformer.py --decode" + (f" --threads {args.threads}" if args.threads else "")
        command += f" --rounds {args.rounds}" if args.rounds != 5 and not args.quick else ""
        text = "\n".join(
            [
                "# TransformerForConditionalGeneration: greedy decode, eager vs compiled (cpu)",
                "",
                f"`{command}`: {machine()}; size {size.name} (vocab {size.vocab_size}, {size.layers}+{size.layers} "
                f"layers, d_model {size.hidden_size}), {rounds} interleaved rounds, torch threads "
                f"{torch.get_num_threads()}.",
                "",
                decode_report(size, rounds, args.attn),
                "",
            ]
        )
        print("\n" + text)
        if not args.quick:
            output = Path(args.output or results_dir / "transformer_decode_cpu.md")
            output.write_text(text)
            print(f"wrote {output}")
        return

    sizes = [QUICK] if args.quick else [SIZES[name] for name in args.sizes]
    rounds = 2 if args.quick else args.rounds
    results = []
    for size in sizes:
        result = bench_size(size, rounds, args.attn, train=not args.beam_only)
        results.append(result)
        t, b = result["train"], result["beam"]
        training = (
            f"train tokens/s ours {t['ours']:.0f}  marian {t['marian']:.0f}  ratio {t['ratio']:.2f} "
            f"[{t['ratio_range'][0]:.2f}-{t['ratio_range'][1]:.2f}] | "
            if t
            else ""
        )
        print(
            f"{size.name}: {training}beam sentences/s ours {b['ours']:.2f}  "
            f"marian {b['marian']:.2f}  ratio {b['ratio']:.2f} [{b['ratio_range'][0]:.2f}-{b['ratio_range'][1]:.2f}] "
            f"| same beams: {result['same_beams']}",
            flush=True,
        )
    table = None
    if args.length_table:  # last: it trains on one thread, as the Bahdanau bench does
        table = length_table(args.quick)
        for length, (exact, tokens) in table["scores"].items():
            print(f"reversal, source length {length}: exact match {exact:.2f}, token accuracy {tokens:.2f}")
    if not args.quick:
        name = "transformer_beam_cpu.md" if args.beam_only else "transformer_cpu.md"
        output = Path(args.output or results_dir / name)
        command = " ".join(["bench/bench_transformer.py", *sys.argv[1:]])
        output.write_text(report(results, args.attn, table, command))
        print(f"wrote {output}")


if __name__ == "__main__":
    main()
