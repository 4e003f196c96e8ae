"""hf-seq's GPTForCausalLM against transformers' GPT2LMHeadModel at the same configuration and with the same weights
(ours is built, the reference is `hf_seq.convert.to_transformers(ours)`).

Measured per size: training throughput (forward + backward + AdamW step, tokens/s) and its MFU, greedy generation
with the KV cache (new tokens/s), and peak memory of each. The two models alternate step by step within each
round, which one goes first alternates between rounds, and each figure is the median over rounds; the ratio column
is the median of the per-round ratios ours / transformers, with their range. On a quiet 2-core CPU, the same model
timed against itself read 0.92-1.04: a ratio within about 0.08 of 1 is noise.

    python bench/bench_gpt.py                      # CPU, fp32, sdpa; writes bench/results/gpt_cpu.md
    python bench/bench_gpt.py --device cuda --dtype bf16 --compile
    python bench/bench_gpt.py --speed --threads 1    # ours eager vs compiled; decode vs its floor: gpt_speed_cpu.md

Memory: on CPU the growth of the peak resident set size of a fresh process, from just before the model is built to
the end of the task (one process per model and task); on CUDA `torch.cuda.max_memory_allocated` in such a process.
MFU = training tokens/s * (6 * parameters + 12 * layers * d_model * seq) / peak FLOP/s (the PaLM paper's estimate,
appendix B, as `hf_seq.training.compute` counts it: parameters without the position table, the tied embedding counted once).
On CPU the peak is the best of readings of a square fp32 (or bf16) matrix product on all threads, taken at the start
and after every round (a median far below it means other processes shared the CPU); on CUDA it is the datasheet's
dense bf16 figure.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from transformers.activations import ACT2FN

from hf_seq import GPTConfig, GPTForCausalLM
from hf_seq.convert import CONVERSIONS, to_transformers
from hf_seq.training.compute import training_flops_per_token

MODELS = ("ours", "transformers")


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
    prompt_len: int
    new_tokens: int
    generate_batch: int


SIZES = {
    # The shape of shared/notes/perf.md.
    "small": Size("small", 8000, 4, 256, 4, 128, 8, 6, 32, 64, 8),
    "medium": Size("medium", 8000, 6, 512, 8, 256, 8, 2, 64, 64, 8),
    # The lineage's GPT at 0.4M non-embedding parameters (docs/lineage): the output layer and its loss cost more
    # than the blocks there.
    "0.4M": Size("0.4M", 4096, 2, 128, 4, 128, 16, 4, 32, 64, 8),
}
QUICK_SIZES = {
    "tiny": Size("tiny", 1000, 2, 64, 2, 32, 4, 2, 8, 8, 2),
}

# Dense bf16 tensor-core peaks from the vendors' datasheets (FLOP/s), matched on the device name.
CUDA_BF16_PEAKS = [
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10G", 70e12),
    ("RTX 4090", 165e12),
]


def build_config(size: Size) -> GPTConfig:
    return GPTConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        max_position_embeddings=max(size.seq_len, size.prompt_len + size.new_tokens),
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
    )


def build_models(size: Size, attn: str, device: str, reference_gelu: str = "gelu_new") -> dict:
    """Ours with random weights, and the reference with the same weights."""
    torch.manual_seed(0)
    ours = GPTForCausalLM._from_config(build_config(size), attn_implementation=attn).to(device)
    models = {"ours": ours, "transformers": use_gelu(to_transformers(ours), reference_gelu)}
    for model in models.values():
        prepare_generation(model)
    return models


def use_gelu(reference, name: str):
    """GPT-2's `gelu_new` is a Python expression of ~8 elementwise kernels; `gelu_pytorch_tanh` is the same function
    in one fused kernel, the one our `gelu_new` calls. The bench's default keeps GPT-2's own."""
    if name != reference.config.activation_function:
        reference.config.activation_function = name
        for block in reference.transformer.h:
            block.mlp.act = ACT2FN[name]
    return reference


def prepare_generation(model) -> None:
    model.generation_config.eos_token_id = None  # always generate exactly new_tokens tokens
    model.generation_config.pad_token_id = 0


def count_flop_params(model) -> int:
    """Parameters a token's forward pass multiplies with: all but the position table; the tied embedding once."""
    positions = model.get_input_embeddings().weight.new_empty(0)
    for name, param in model.named_parameters():
        if "embed_positions" in name or name.endswith("wpe.weight"):
            positions = param
    return sum(p.numel() for p in model.parameters()) - positions.numel()


class Trainer:
    """One model, its AdamW optimizer and a fixed random batch; `run(steps)` returns the seconds of `steps` steps."""

    def __init__(self, model, size: Size, device: str, dtype: torch.dtype, compile: bool):
        self.model = model.train()
        self.forward = torch.compile(model) if compile else model
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
        generator = torch.Generator().manual_seed(1)
        self.input_ids = torch.randint(size.vocab_size, (size.batch_size, size.seq_len), generator=generator).to(device)
        self.autocast = torch.autocast(device, dtype=dtype) if dtype != torch.float32 else nullcontext()
        self.device = device

    def step(self) -> None:
        with self.autocast:
            loss = self.forward(input_ids=self.input_ids, labels=self.input_ids).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self, steps: int) -> float:
        self.model.train()
        synchronize(self.device)
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        synchronize(self.device)
        return time.perf_counter() - start


class Generator:
    def __init__(self, model, size: Size, device: str, dtype: torch.dtype):
        self.model, self.size, self.device = model, size, device
        generator = torch.Generator().manual_seed(2)
        shape = (size.generate_batch, size.prompt_len)
        self.prompt = torch.randint(1, size.vocab_size, shape, generator=generator).to(device)
        self.autocast = torch.autocast(device, dtype=dtype) if dtype != torch.float32 else nullcontext()

    @torch.no_grad()
    def run(self) -> float:
        self.model.eval()
        synchronize(self.device)
        start = time.perf_counter()
        with self.autocast:
            out = self.model.generate(
                self.prompt,
                attention_mask=torch.ones_like(self.prompt),
                max_new_tokens=self.size.new_tokens,
                do_sample=False,
                use_cache=True,
            )
        synchronize(self.device)
        assert out.shape[1] == self.size.prompt_len + self.size.new_tokens
        return time.perf_counter() - start


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_flops(device: str, dtype: torch.dtype) -> tuple[float, str]:
    if device == "cuda":
        name = torch.cuda.get_device_name()
        for key, flops in CUDA_BF16_PEAKS:
            if key in name:
                return flops, f"{name} datasheet dense bf16 peak"
    n = 2048 if device == "cuda" else 1024
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for _ in range(7):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(4):
            a @ b
        synchronize(device)
        times.append((time.perf_counter() - start) / 4)
    return 2 * n**3 / min(times), f"measured {n}x{n} {str(dtype).removeprefix('torch.')} matmul"


def measure_memory_subprocess(args, size: Size, model_name: str, task: str) -> float:
    """Peak memory (MiB) of a fresh process that builds one of the two models and runs one task on it."""
    spec = json.dumps({"size": asdict(size), "model": model_name, "task": task})
    command = [sys.executable, __file__, "--memory-child", spec, "--device", args.device, "--dtype", args.dtype]
    command += ["--attn", args.attn, "--reference-gelu", args.reference_gelu] + (["--compile"] if args.compile else [])
    out = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_mib"]


def memory_child(args) -> None:
    spec = json.loads(args.memory_child)
    size, dtype = Size(**spec["size"]), DTYPES[args.dtype]
    torch.set_flush_denormal(True)
    config = build_config(size)
    # Only the measured model is ever built in this process (the reference from the equivalent GPT2Config, with
    # its own random weights), so memory freed by another model cannot hide part of the growth.
    peak_rss = PeakRSS()
    if spec["model"] == "ours":
        model = GPTForCausalLM._from_config(config, attn_implementation=args.attn)
    else:
        reference_config = CONVERSIONS[transformers.GPT2LMHeadModel].config_to_reference(config)
        model = transformers.GPT2LMHeadModel._from_config(reference_config, attn_implementation=args.attn)
        model = use_gelu(model, args.reference_gelu)
    model.to(args.device)
    prepare_generation(model)
    if spec["task"] == "train":
        trainer = Trainer(model, size, args.device, dtype, args.compile)
        trainer.run(2)
    else:
        Generator(model, size, args.device, dtype).run()
    if args.device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20  # a fresh process: everything allocated, weights included
    else:
        peak = peak_rss.growth_mib()
    print(json.dumps({"peak_mib": peak}))


class PeakRSS:
    """Growth of the peak resident set size from now on. Linux lets a process reset its peak (VmHWM) by writing 5
    to /proc/self/clear_refs, so the import's own peak does not mask the growth; elsewhere the getrusage peak is
    used, which that can mask."""

    def __init__(self):
        try:
            with open("/proc/self/clear_refs", "w") as handle:
                handle.write("5")
            self.baseline_kib = self._status_kib("VmRSS")
        except OSError:
            self.baseline_kib = None
            self.baseline_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    @staticmethod
    def _status_kib(field: str) -> int:
        with open("/proc/self/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

    def growth_mib(self) -> float:
        if self.baseline_kib is not None:
            return (self._status_kib("VmHWM") - self.baseline_kib) / 1024
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        return (maxrss - self.baseline_maxrss) * scale / 1024 / 1024


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
LOAD_AT_START = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def machine_description(device: str) -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    lines = [
        f"- CPU: {cpu}, {os.cpu_count()} logical cores, torch uses {torch.get_num_threads()} threads",
        f"- {platform.system()} {platform.machine()}, Python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}",
    ]
    if device == "cuda":
        lines.append(f"- GPU: {torch.cuda.get_device_name()}, CUDA {torch.version.cuda}")
    if hasattr(os, "getloadavg"):
        lines.append(
            f"- load average (1 min) at the start / end of the run: {LOAD_AT_START:.1f} / {os.getloadavg()[0]:.1f} "
            "(above the core count means other processes shared the CPU)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="fp32", choices=list(DTYPES), help="bf16: autocast, fp32 master weights")
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    parser.add_argument("--compile", action="store_true", help="torch.compile the training forward of both models")
    parser.add_argument(
        "--reference-gelu",
        default="gelu_new",
        choices=["gelu_new", "gelu_pytorch_tanh"],
        help="the reference's GELU kernel: GPT-2's own (unfused) or the fused one ours uses, to compare the rest",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        help="interleaved rounds (default 5; 15 with --speed, whose decode rounds are one generate() call each)",
    )
    parser.add_argument("--quick", action="store_true", help="a tiny size and 2 rounds: a smoke test")
    parser.add_argument("--sizes", nargs="*", help=f"subset of {list(SIZES)}")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurements")
    parser.add_argument("--output", help="markdown file to write (default: bench/results/gpt_<device>.md)")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--speed", action="store_true", help="ours only: eager vs compiled training, decode ms/token and its floor"
    )
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds is None:
        args.rounds = 15 if args.speed else 5
    if args.memory_child:
        return memory_child(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.speed:
        return speed_report(args)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")

    torch.set_flush_denormal(True)  # denormal weights and gradients slow CPU training erratically; same for both
    dtype = DTYPES[args.dtype]
    sizes = QUICK_SIZES if args.quick else {name: SIZES[name] for name in (args.sizes or SIZES)}
    rounds = 2 if args.quick else args.rounds
    # On CPU the ceiling is measured at the start and in every round; the best reading is the peak, and readings far
    # below it show that other processes shared the CPU during the run.
    ceilings, peak_source = [], ""

    def measure_ceiling():
        nonlocal peak_source
        flops, peak_source = peak_flops(args.device, dtype)
        ceilings.append(flops)

    measure_ceiling()
    results = []
    for size in sizes.values():
        models = build_models(size, args.attn, args.device, args.reference_gelu)
        trainers = {name: Trainer(m, size, args.device, dtype, args.compile) for name, m in models.items()}
        generators = {name: Generator(m, size, args.device, dtype) for name, m in models.items()}
        for name in MODELS:  # warm up: optimizer state, allocator, compilation, generate's first call
            trainers[name].run(1)
            generators[name].run()
        train = {name: [] for name in MODELS}
        generate = {name: [] for name in MODELS}
        for r in range(rounds):
            # The models alternate step by step, so a load that comes and goes hits both alike.
            order = MODELS if r % 2 == 0 else MODELS[::-1]
            seconds = dict.fromkeys(MODELS, 0.0)
            for _ in range(size.train_steps):
                for name in order:
                    seconds[name] += trainers[name].run(1)
            for name in MODELS:
                train[name].append(size.train_steps * size.batch_size * size.seq_len / seconds[name])
            for name in order:
                generate[name].append(size.generate_batch * size.new_tokens / generators[name].run())
            measure_ceiling()
            print(
                f"{size.name} round {r + 1}/{rounds}: train "
                + ", ".join(f"{n} {train[n][-1]:.0f}" for n in MODELS)
                + " tok/s; generate "
                + ", ".join(f"{n} {generate[n][-1]:.0f}" for n in MODELS)
                + f" tok/s; matmul {ceilings[-1] / 1e9:.0f} GFLOP/s",
                flush=True,
            )
        flops_per_token = training_flops_per_token(models["ours"].config, size.seq_len)

        memory = {}
        if not args.no_memory:
            for task in ("train", "generate"):
                for name in MODELS:
                    memory[task, name] = measure_memory_subprocess(args, size, name, task)
        results.append((size, train, generate, memory, flops_per_token))
        del models, trainers, generators

    peak = max(ceilings)
    rows = []
    for size, train, generate, memory, flops_per_token in results:
        mfu = {name: [t * flops_per_token / peak for t in train[name]] for name in MODELS}
        rows += table_rows(size, train, mfu, generate, memory)
    write_report(args, sizes, rows, ceilings, peak_source, rounds)


def ratio_cells(ours: list[float], reference: list[float]) -> tuple[str, str, str]:
    ratios = [o / r for o, r in zip(ours, reference)]
    return (
        f"{statistics.median(ours):,.0f}",
        f"{statistics.median(reference):,.0f}",
        f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f})",
    )


def table_rows(size: Size, train, mfu, generate, memory) -> list[str]:
    rows = [
        f"| {size.name} | training tokens/s | " + " | ".join(ratio_cells(train["ours"], train["transformers"])) + " |"
    ]
    pct = lambda xs: [100 * x for x in xs]
    o, r, ratio = ratio_cells(pct(mfu["ours"]), pct(mfu["transformers"]))
    ours_mfu, ref_mfu = statistics.median(pct(mfu["ours"])), statistics.median(pct(mfu["transformers"]))
    rows.append(f"| {size.name} | training MFU | {ours_mfu:.1f}% | {ref_mfu:.1f}% | {ratio} |")
    rows.append(
        f"| {size.name} | generate tokens/s | "
        + " | ".join(ratio_cells(generate["ours"], generate["transformers"]))
        + " |"
    )
    for task in ("train", "generate"):
        if (task, "ours") in memory:
            o, r = memory[task, "ours"], memory[task, "transformers"]
            ratio = f"{o / r:.2f}" if r > 0 else "-"
            rows.append(f"| {size.name} | peak memory, {task} (MiB) | {o:,.0f} | {r:,.0f} | {ratio} |")
    return rows


def write_report(args, sizes, rows, ceilings, peak_source, rounds) -> None:
    shapes = [
        f"- **{s.name}**: vocab {s.vocab_size}, {s.num_hidden_layers} layers, d_model {s.hidden_size}, "
        f"{s.num_attention_heads} heads, training batch {s.batch_size} x {s.seq_len} tokens "
        f"({s.train_steps} timed steps per round); generation: batch {s.generate_batch}, prompt {s.prompt_len}, "
        f"{s.new_tokens} new tokens, greedy, KV cache"
        for s in sizes.values()
    ]
    memory_note = (
        "growth of the peak RSS of a fresh process from before the model is built to the end of the task "
        "(weights, gradients, AdamW state, activations / KV cache, allocator slack)"
        if args.device == "cpu"
        else "torch.cuda.max_memory_allocated of a fresh process running the task (weights included)"
    )
    command = "python bench/bench_gpt.py" + "".join(
        f" {flag}"
        for flag in (
            f"--device {args.device}" if args.device != "cpu" else "",
            f"--dtype {args.dtype}" if args.dtype != "fp32" else "",
            f"--attn {args.attn}" if args.attn != "sdpa" else "",
            f"--reference-gelu {args.reference_gelu}" if args.reference_gelu != "gelu_new" else "",
            "--compile" if args.compile else "",
            f"--rounds {args.rounds}" if args.rounds != 5 and not args.quick else "",
            "--quick" if args.quick else "",
        )
        if flag
    )
    lines = [
        f"# GPTForCausalLM vs transformers GPT2LMHeadModel ({args.device})",
        "",
        f"`{command}`: {args.dtype}, attention `{args.attn}`, {'torch.compile' if args.compile else 'eager mode'}, "
        f"dropout 0.1 (GPT-2's), AdamW, flush-denormal on, median of {rounds} interleaved rounds; the reference's "
        f"activation is `{args.reference_gelu}`"
        + (" (GPT-2's own: an unfused Python expression)." if args.reference_gelu == "gelu_new" else " (fused)."),
        "Ours trains with its fused loss (`config.fused_loss`, the default: the loss computed from the last hidden "
        "states in chunks, without the logits; models/losses.py), the reference with transformers' loss of its logits.",
        "Ratio: ours / transformers, median of the per-round ratios (range in brackets); above 1 is faster for "
        "throughput, below 1 is less memory.",
        "",
        *machine_description(args.device),
        f"- MFU peak: {max(ceilings) / 1e9:,.0f} GFLOP/s ({peak_source}"
        + (
            f"; best of {len(ceilings)} readings taken through the run, median {statistics.median(ceilings) / 1e9:,.0f})"
            if len(ceilings) > 1 and ceilings[0] != ceilings[-1]
            else ")"
        ),
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
    suffix = "" if args.reference_gelu == "gelu_new" else f"_{args.reference_gelu}"
    default = Path(__file__).parent / "results" / f"gpt_{args.device}{suffix}.md"
    output = Path(args.output) if args.output else default
    if args.quick and not args.output:
        return  # a smoke test does not overwrite the recorded results
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


# ------------------------------------------------------------------------ ours: eager vs compiled, decode vs floor
DECODE_VARIANTS = {
    # name: (cache_implementation, compiled, as before issue 16: W (out, in) read transposed, signature parsed)
    "before: dynamic cache, eager": ("dynamic", False, True),
    "dynamic cache, eager": ("dynamic", False, False),
    "static cache, eager": ("static", False, False),
    "static cache, compiled": ("static", True, False),
    "static cache, compiled, C++ wrapper": ("static", "cpp", False),
}


class Decoder:
    """Greedy `generate()` of one variant at one batch size; `run()` returns (seconds per new token, tokens)."""

    def __init__(self, model, size: Size, batch: int, variant: tuple[str, bool, bool]):
        from transformers import CompileConfig

        self.model, self.size, (self.cache, self.compiled, self.before) = model, size, variant
        generator = torch.Generator().manual_seed(2)
        self.prompt = torch.randint(1, size.vocab_size, (batch, size.prompt_len), generator=generator)
        self.compile_config = None
        if self.compiled:
            # One graph for the one-token step (the prompt runs eager). mode="default": "reduce-overhead" means CUDA graphs.
            self.compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
            if self.compiled == "cpp":  # inductor's C++ wrapper: the step's glue code compiled too, not Python
                self.compile_config = CompileConfig(fullgraph=True, dynamic=False, mode=None)
                self.compile_config.options = {"cpp_wrapper": True}

    @torch.no_grad()
    def run(self) -> tuple[float, torch.Tensor]:
        model, forward = self.model, type(self.model).forward
        model.transpose_weights_for_decoding = not self.before
        signature = forward.__dict__.pop("__signature__", None) if self.before else None
        start = time.perf_counter()
        out = model.generate(
            self.prompt,
            attention_mask=torch.ones_like(self.prompt),
            max_new_tokens=self.size.new_tokens,
            do_sample=False,
            cache_implementation=self.cache,
            compile_config=self.compile_config,
        )
        seconds = time.perf_counter() - start
        if signature is not None:
            forward.__signature__ = signature
        model.transpose_weights_for_decoding = True
        return seconds / self.size.new_tokens, out


def read_bandwidth(repeats: int = 7) -> float:
    """Bytes/s of summing a 256 MiB tensor on the threads torch uses: what a step that streams its weights can get."""
    data = torch.ones(64 * 2**20)
    data.sum()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        data.sum()
        times.append(time.perf_counter() - start)
    return data.numel() * 4 / statistics.median(times)


def decode_bytes(model, size: Size, batch: int) -> int:
    """What one decode step must read: every weight once (the position table: one row; a tied matrix once) and the
    KV cache of every row at the mean length of the generation."""
    weights = count_flop_params(model) * 4
    length = size.prompt_len + size.new_tokens / 2
    return int(weights + batch * 2 * size.num_hidden_layers * length * size.hidden_size * 4)


def speed_report(args) -> None:
    from torch._dynamo.utils import counters

    size = QUICK_SIZES["tiny"] if args.quick else SIZES["small"]
    rounds = 2 if args.quick else args.rounds
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    model = GPTForCausalLM._from_config(build_config(size), attn_implementation=args.attn)
    prepare_generation(model)
    lines = []

    # Training: the same model eager and compiled (one graph: no graph break, no recompilation), step by step.
    trainers = {"eager": Trainer(model, size, "cpu", torch.float32, False)}
    trainers["compiled"] = Trainer(model, size, "cpu", torch.float32, True)
    start = time.perf_counter()
    trainers["compiled"].run(1)
    compile_train = time.perf_counter() - start
    trainers["eager"].run(1)
    train = {name: [] for name in trainers}
    for r in range(rounds):
        seconds = dict.fromkeys(trainers, 0.0)
        for _ in range(size.train_steps):
            for name in trainers if r % 2 == 0 else list(trainers)[::-1]:
                seconds[name] += trainers[name].run(1)
        for name in trainers:
            train[name].append(size.train_steps * size.batch_size * size.seq_len / seconds[name])
        print(f"train round {r + 1}: " + ", ".join(f"{n} {train[n][-1]:.0f} tok/s" for n in train), flush=True)
    ratios = [c / e for c, e in zip(train["compiled"], train["eager"])]
    lines += [
        f"| training (batch {size.batch_size} x {size.seq_len}) | eager | compiled | compiled / eager |",
        "|---|---:|---:|---:|",
        f"| tokens/s | {statistics.median(train['eager']):,.0f} | {statistics.median(train['compiled']):,.0f} | "
        f"**{statistics.median(ratios):.2f}** ({min(ratios):.2f}-{max(ratios):.2f}) |",
        f"| first step (compilation) | | {compile_train:.0f} s | |",
        "",
    ]
    graphs_after_training = counters["stats"]["unique_graphs"]
    del trainers
    model.eval()

    bandwidth = read_bandwidth()
    lines += [
        f"Decode: greedy `generate()`, prompt {size.prompt_len}, {size.new_tokens} new tokens, ms per new token "
        "(prompt included); ratio: before / variant, median of per-round ratios. Floor: the bytes one step must read "
        f"(weights once, KV cache at the mean length) / the measured read bandwidth ({bandwidth / 1e9:.1f} GB/s: sum "
        "of a 256 MiB tensor, same threads).",
        "",
        "| batch | variant | ms/token | speed-up vs before | same tokens | first call (s) |",
        "|---:|---|---:|---:|---|---:|",
    ]
    recompiles = {}
    for batch in (1, size.generate_batch):
        decoders = {name: Decoder(model, size, batch, variant) for name, variant in DECODE_VARIANTS.items()}
        first, outputs = {}, {}
        for name, decoder in decoders.items():  # warm-up; the compiled one compiles its step here
            start = time.perf_counter()
            outputs[name] = decoder.run()[1]
            first[name] = time.perf_counter() - start
        graphs_before = counters["stats"]["unique_graphs"]
        times = {name: [] for name in decoders}
        for r in range(rounds):
            for name in decoders if r % 2 == 0 else list(decoders)[::-1]:
                seconds, out = decoders[name].run()
                times[name].append(seconds)
                assert torch.equal(out, outputs[name]), f"{name}: greedy decoding changed between calls"
            print(
                f"decode batch {batch} round {r + 1}: " + ", ".join(f"{n} {times[n][-1] * 1e3:.2f} ms" for n in times)
            )
        recompiles[batch] = counters["stats"]["unique_graphs"] - graphs_before
        before = times["before: dynamic cache, eager"]
        for name in decoders:
            ratios = [b / t for b, t in zip(before, times[name])]
            same = "yes" if torch.equal(outputs[name], outputs["before: dynamic cache, eager"]) else "**no**"
            lines.append(
                f"| {batch} | {name} | {statistics.median(times[name]) * 1e3:.2f} | **{statistics.median(ratios):.2f}** "
                f"({min(ratios):.2f}-{max(ratios):.2f}) | {same} | {first[name]:.1f} |"
            )
        floor = decode_bytes(model, size, batch) / bandwidth
        lines.append(
            f"| {batch} | floor: {decode_bytes(model, size, batch) / 1e6:.1f} MB / bandwidth | {floor * 1e3:.2f} | | | |"
        )
    lines += [
        "",
        f"torch._dynamo: {graphs_after_training} graph(s) for the training step, "
        f"{counters['stats']['unique_graphs'] - graphs_after_training} for the decode steps (one per batch size and "
        f"compile mode), {sum(recompiles.values())} compiled during the timed rounds (none: no recompilation per "
        f"step or per call); graph breaks: {sum(counters['graph_break'].values())}, recompilations: "
        f"{sum(counters['recompiles'].values())}.",
    ]
    write_speed_report(args, size, rounds, lines)


def write_speed_report(args, size: Size, rounds: int, lines: list[str]) -> None:
    command = "python bench/bench_gpt.py --speed" + (f" --threads {args.threads}" if args.threads else "")
    command += " --quick" if args.quick else (f" --rounds {rounds}" if rounds != 15 else "")
    text = "\n".join(
        [
            "# GPTForCausalLM: eager vs compiled, decode against its floor (cpu)",
            "",
            f"`{command}`: fp32, attention `{args.attn}`, median of {rounds} interleaved rounds.",
            "",
            *machine_description("cpu"),
            f"- **{size.name}**: vocab {size.vocab_size}, {size.num_hidden_layers} layers, d_model {size.hidden_size}, "
            f"{size.num_attention_heads} heads, training batch {size.batch_size} x {size.seq_len}, "
            f"{size.train_steps} timed steps per round",
            "",
            *lines,
            "",
        ]
    )
    print("\n" + text)
    if args.quick and not args.output:
        return
    output = Path(args.output) if args.output else Path(__file__).parent / "results" / "gpt_speed_cpu.md"
    output.write_text(text)
    print(f"written to {output}")


if __name__ == "__main__":
    main()
