"""hf-seq's BERTForMaskedLM against transformers' BertForMaskedLM at the same configuration and with the same weights
(ours is built, the reference is `hf_seq.convert.to_transformers(ours)`).

In training, ours applies the masked-LM head only at the positions with a label (the 15% masked; the loss is the
same, checked before timing), transformers' to every position: the difference grows with the vocabulary.

Measured per size: masked-LM training throughput (forward + backward + AdamW step on a packed batch with 15% of the
tokens masked, tokens/s) and the peak memory of training. The two models alternate step by step within each round,
which one goes first alternates between rounds, and each figure is the median over rounds; the ratio column is the
median of the per-round ratios ours / transformers, with their range. On a quiet 2-core CPU the same model timed
against itself read 0.92-1.04: a ratio within about 0.08 of 1 is noise. On a CPU shared with other work the rounds
scatter more; the fastest single step of each model (the step least disturbed) and the tokens per second of process
CPU time are reported as well (with `--threads 1` the latter hardly depends on what else runs: no thread waits at a
barrier for another that was descheduled).

    python bench/bench_bert.py                     # CPU, fp32, sdpa; writes bench/results/bert_cpu.md
    python bench/bench_bert.py --quick             # a tiny size, 2 rounds: a smoke test (writes nothing)
    python bench/bench_bert.py --device cuda --dtype bf16

Memory: on CPU the growth of the peak resident set size of a fresh process, from just before the model is built to
the end of two training steps (median of `--memory-runs` processes per model); on CUDA
`torch.cuda.max_memory_allocated` in such a process. The two models save the same activations for backward (checked
with saved-tensor hooks: 133.4 vs 133.3 MiB at the small size), so a memory ratio off 1 by a few percent is the
allocator's slack, not the models.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers

from hf_seq import BERTConfig, BERTForMaskedLM
from hf_seq.convert import CONVERSIONS, to_transformers

sys.path.insert(0, str(Path(__file__).parent))
from bench_gpt import PeakRSS, machine_description, synchronize  # noqa: E402  (the GPT bench's measuring helpers)

MODELS = ("ours", "transformers")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MASK_ID = 4  # any id: the batch is random tokens


@dataclass(frozen=True)
class Size:
    name: str
    vocab_size: int
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    seq_len: int
    batch_size: int
    train_steps: int  # timed training steps per round


SIZES = {
    # The GPT bench's shapes, so the two families read side by side.
    "small": Size("small", 8000, 4, 256, 4, 128, 8, 6),
    # BERT's own vocabulary size: there the masked-LM head is most of the work, and scoring only the masked 15% pays.
    "small-30k": Size("small-30k", 30522, 4, 256, 4, 128, 8, 4),
    "medium": Size("medium", 8000, 6, 512, 8, 256, 8, 2),
}
QUICK_SIZES = {"tiny": Size("tiny", 1000, 2, 64, 2, 32, 4, 2)}


def build_config(size: Size) -> BERTConfig:
    return BERTConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        max_position_embeddings=size.seq_len,
    )


class MLMTrainer:
    """One model, its AdamW optimizer and a fixed batch with BERT's masking; `run(steps)` returns the seconds."""

    def __init__(self, model, size: Size, device: str, dtype: torch.dtype):
        self.model = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(1)
        ids = torch.randint(5, size.vocab_size, (size.batch_size, size.seq_len), generator=generator)
        chosen = torch.rand(ids.shape, generator=generator) < 0.15
        self.batch = {
            "input_ids": ids.masked_fill(chosen, MASK_ID).to(device),
            "attention_mask": torch.ones_like(ids).to(device),  # as the collator returns it for packed blocks
            "labels": ids.masked_fill(~chosen, -100).to(device),
        }
        self.autocast = torch.autocast(device, dtype=dtype) if dtype != torch.float32 else nullcontext()
        self.device = device

    def run(self, steps: int) -> tuple[float, float]:
        """Wall-clock and process CPU seconds of `steps` steps."""
        synchronize(self.device)
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            with self.autocast:
                loss = self.model(**self.batch).loss
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        synchronize(self.device)
        return time.perf_counter() - start, time.process_time() - start_cpu


def measure_memory_subprocess(args, size: Size, model_name: str) -> float:
    """Peak memory (MiB) of a fresh process that builds one of the two models and trains it for two steps."""
    spec = json.dumps({"size": asdict(size), "model": model_name})
    command = [sys.executable, __file__, "--memory-child", spec, "--device", args.device, "--dtype", args.dtype]
    out = subprocess.run(command + ["--attn", args.attn], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


def memory_child(args) -> None:
    spec = json.loads(args.memory_child)
    size = Size(**spec["size"])
    torch.set_flush_denormal(True)
    config = build_config(size)
    peak_rss = PeakRSS()  # only the measured model is ever built in this process
    if spec["model"] == "ours":
        model = BERTForMaskedLM._from_config(config, attn_implementation=args.attn)
    else:
        reference_config = CONVERSIONS[transformers.BertForMaskedLM].config_to_reference(config)
        model = transformers.BertForMaskedLM._from_config(reference_config, attn_implementation=args.attn)
    MLMTrainer(model.to(args.device), size, args.device, DTYPES[args.dtype]).run(2)
    peak = torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda" else peak_rss.growth_mib()
    print(json.dumps({"peak_mib": peak}))


def ratio_cells(ours: list[float], reference: list[float]) -> str:
    ratios = [o / r for o, r in zip(ours, reference)]
    return (
        f"{statistics.median(ours):,.0f} | {statistics.median(reference):,.0f} | "
        f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES), help="bf16: autocast, fp32 master weights")
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--quick", action="store_true", help="a tiny size and 2 rounds: a smoke test")
    parser.add_argument("--sizes", nargs="*", help=f"subset of {list(SIZES)}")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    parser.add_argument("--memory-runs", type=int, default=3, help="fresh processes per model (median)")
    parser.add_argument("--output", help="markdown file to write (default: bench/results/bert_<device>.md)")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        return memory_child(args)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")

    torch.set_flush_denormal(True)  # denormal weights and gradients slow CPU training erratically; same for both
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = DTYPES[args.dtype]
    sizes = QUICK_SIZES if args.quick else {name: SIZES[name] for name in (args.sizes or SIZES)}
    rounds = 2 if args.quick else args.rounds
    rows = []
    for size in sizes.values():
        torch.manual_seed(0)
        ours = BERTForMaskedLM._from_config(build_config(size), attn_implementation=args.attn).to(args.device)
        models = {"ours": ours, "transformers": to_transformers(ours)}
        trainers = {name: MLMTrainer(model, size, args.device, dtype) for name, model in models.items()}
        with torch.no_grad():  # same weights, same batch: same loss (dropout aside)
            losses = {name: m.eval()(**trainers[name].batch).loss.item() for name, m in models.items()}
        assert abs(losses["ours"] - losses["transformers"]) < 1e-3, losses
        # In training, ours runs the head on the masked positions only: the same loss as all positions' logits
        # (same dropout masks: same seed, and the encoder is the same computation both times).
        train_losses = []
        for full_logits in (False, True):
            torch.manual_seed(2)
            train_losses.append(ours.train()(**trainers["ours"].batch, full_logits=full_logits).loss.item())
        assert abs(train_losses[0] - train_losses[1]) < 1e-4, train_losses
        for name in MODELS:
            models[name].train()
            trainers[name].run(1)  # warm up: optimizer state, allocator
        train = {name: [] for name in MODELS}
        per_cpu_second = {name: [] for name in MODELS}
        fastest = dict.fromkeys(MODELS, float("inf"))  # seconds of the fastest single step
        for r in range(rounds):
            # The models alternate step by step, so a load that comes and goes hits both alike.
            order = MODELS if r % 2 == 0 else MODELS[::-1]
            seconds, cpu_seconds = dict.fromkeys(MODELS, 0.0), dict.fromkeys(MODELS, 0.0)
            for _ in range(size.train_steps):
                for name in order:
                    step, cpu = trainers[name].run(1)
                    seconds[name] += step
                    cpu_seconds[name] += cpu
                    fastest[name] = min(fastest[name], step)
            tokens = size.train_steps * size.batch_size * size.seq_len
            for name in MODELS:
                train[name].append(tokens / seconds[name])
                per_cpu_second[name].append(tokens / cpu_seconds[name])
            print(
                f"{size.name} round {r + 1}/{rounds}: "
                + ", ".join(f"{n} {train[n][-1]:.0f}" for n in MODELS)
                + " tok/s"
            )
        rows.append(f"| {size.name} | training tokens/s | {ratio_cells(train['ours'], train['transformers'])} |")
        cells = ratio_cells(per_cpu_second["ours"], per_cpu_second["transformers"])
        rows.append(f"| {size.name} | training tokens per CPU-second | {cells} |")
        best = {name: size.batch_size * size.seq_len / fastest[name] for name in MODELS}
        o, r = best["ours"], best["transformers"]
        rows.append(f"| {size.name} | training tokens/s, fastest step | {o:,.0f} | {r:,.0f} | {o / r:.2f} |")
        if not args.no_memory:
            # RSS peaks of single processes vary by a few percent (allocator timing): median of fresh processes
            memory = {
                name: statistics.median(measure_memory_subprocess(args, size, name) for _ in range(args.memory_runs))
                for name in MODELS
            }
            o, r = memory["ours"], memory["transformers"]
            rows.append(f"| {size.name} | peak memory, training (MiB) | {o:,.0f} | {r:,.0f} | {o / r:.2f} |")
        print(*rows[-4:], sep="\n", flush=True)
        del models, trainers
    write_report(args, sizes, rows, rounds)


def write_report(args, sizes, rows, rounds) -> None:
    shapes = [
        f"- **{s.name}**: vocab {s.vocab_size}, {s.num_hidden_layers} layers, d_model {s.hidden_size}, "
        f"{s.num_attention_heads} heads, FFN 4 x d_model, batch {s.batch_size} x {s.seq_len} tokens with 15% masked, "
        f"{s.train_steps} timed steps per round"
        for s in sizes.values()
    ]
    memory_note = (
        "growth of the peak RSS of a fresh process from before the model is built to the end of two training steps "
        f"(weights, gradients, AdamW state, activations, allocator slack), median of {args.memory_runs} processes"
        if args.device == "cpu"
        else "torch.cuda.max_memory_allocated of a fresh process running two training steps (weights included)"
    )
    flags = [
        f"--device {args.device}" if args.device != "cpu" else "",
        f"--dtype {args.dtype}" if args.dtype != "fp32" else "",
    ]
    flags += [f"--attn {args.attn}" if args.attn != "sdpa" else "", "--quick" if args.quick else ""]
    flags += [f"--threads {args.threads}" if args.threads else ""]
    command = " ".join(["python bench/bench_bert.py", *[f for f in flags if f]])
    lines = [
        f"# BERTForMaskedLM vs transformers BertForMaskedLM ({args.device})",
        "",
        f"`{command}`: {args.dtype}, attention `{args.attn}`, eager mode, post-LN BERT, dropout 0.1, AdamW, "
        f"flush-denormal on, median of {rounds} interleaved rounds.",
        "Ratio: ours / transformers, median of the per-round ratios (range in brackets); above 1 is faster for "
        "throughput, below 1 is less memory.",
        "",
        *machine_description(args.device),
        "",
        *shapes,
        f"- memory: {memory_note}",
        "",
        "| size | metric | ours | transformers | ratio |",
        "|---|---|---:|---:|---:|",
        *rows,
        "",
    ]
    text = "\n".join(lines)
    print("\n" + text)
    if args.quick and not args.output:
        return  # a smoke test does not overwrite the recorded results
    output = Path(args.output) if args.output else Path(__file__).parent / "results" / f"bert_{args.device}.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


if __name__ == "__main__":
    main()
