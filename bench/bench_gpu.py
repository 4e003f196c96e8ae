"""The GPU half of hf-seq's benchmarks, in one sitting (a lent GPU is a scarce thing: one command takes every figure).

1. **Training MFU, GPT-2 small at sequence length 1024**: `GPTForCausalLM` with GPT-2 124M's shapes (vocabulary
   50257, 12 layers, d_model 768, 12 heads) against transformers' `GPT2LMHeadModel` with the same weights
   (`hf_seq.convert.to_transformers`), bf16 autocast over fp32 master weights, SDPA (flash attention on the GPU),
   fused AdamW; ours eager, ours compiled and the reference compiled, alternating step by step, the order reversed
   every round; medians over rounds, the ratio the median of per-round ratios. MFU as in `bench_gpt.py` (the PaLM
   paper's 6N + 12 L d s per token over the datasheet's dense bf16 peak).
2. **The training loop itself**: `hf-seq train recipes/gpt2-small.yaml` with `training.compile=true` on the
   embedded corpus, given a wall-clock budget, so the loop reports its speed between steps 10 and 50 (after the
   compilation): the tokens/s and MFU a user of the recipe gets, data loading, gradient clipping and the scheduler
   included.
3. **Decoding**: greedy `generate()`, prompt 128, 128 new tokens, batch 1 and 8: ours with the dynamic cache
   (eager), with the static cache (eager), and with the static cache compiled (`CompileConfig`, CUDA graphs);
   transformers' GPT-2 with the static cache compiled beside it. ms per new token, the prompt included.
4. **LSTM against cuDNN**: `bench_rnn.py --device cuda` (RNNForCausalLM's LSTM, built of one-layer `nn.LSTM`
   kernels, against a bare multi-layer `nn.LSTM` language model: cuDNN both, and a per-step Python loop).

    python bench/bench_gpu.py                        # on a CUDA machine; writes bench/results/gpu_<device>.md
    python bench/bench_gpu.py --quick --device cpu   # tiny shapes, a smoke test of the script on a CPU

Each section writes its table as soon as it is done (`--output`), so a run cut short keeps what it measured.
"""

import argparse
import copy
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gpt import (  # noqa: E402  (the sibling bench's shapes, models and measurements)
    Size,
    Trainer,
    build_models,
    count_flop_params,
    machine_description,
    peak_flops,
    prepare_generation,
    synchronize,
)

ROOT = Path(__file__).resolve().parents[1]
GPT2_SMALL = Size("gpt2-small", 50257, 12, 768, 12, 1024, 16, 10, 128, 128, 8)
TINY = Size("tiny", 1000, 2, 64, 2, 64, 4, 2, 16, 16, 2)


def pythonpath() -> str:
    """The repository first, then whatever the caller's PYTHONPATH holds (packages installed beside the system's)."""
    return os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def flops_per_token(model, size: Size) -> int:
    return 6 * count_flop_params(model) + 12 * size.num_hidden_layers * size.hidden_size * size.seq_len


def section_training(size: Size, device: str, rounds: int, peak: float) -> list[str]:
    dtype = torch.bfloat16
    models = build_models(size, "sdpa", device)
    unfused = copy.deepcopy(models["ours"])
    unfused.config.fused_loss = False  # the full logits, then transformers' cross-entropy: the loss before the fusion
    trainers = {
        "ours, eager": Trainer(models["ours"], size, device, dtype, compile=False),
        "ours, compiled": Trainer(models["ours"], size, device, dtype, compile=True),
        "ours, compiled, unfused loss": Trainer(unfused, size, device, dtype, compile=True),
        "transformers, compiled": Trainer(models["transformers"], size, device, dtype, compile=True),
    }
    # the compiled and the eager trainer of ours share the model, but each has its own optimizer: the timings are
    # of the same work. Ours uses the fused loss (hf_seq/models/losses.py, config.fused_loss) unless said otherwise.
    warmup = {}
    for name, trainer in trainers.items():
        warmup[name] = trainer.run(2)
        print(f"warm-up {name}: {warmup[name]:.1f} s", flush=True)
    tokens = {name: [] for name in trainers}
    names = list(trainers)
    for r in range(rounds):
        seconds = dict.fromkeys(names, 0.0)
        for _ in range(size.train_steps):
            for name in names if r % 2 == 0 else names[::-1]:
                seconds[name] += trainers[name].run(1)
        for name in names:
            tokens[name].append(size.train_steps * size.batch_size * size.seq_len / seconds[name])
        print(f"train round {r + 1}: " + ", ".join(f"{n} {tokens[n][-1]:,.0f} tok/s" for n in names), flush=True)
    per_token = flops_per_token(models["ours"], size)
    reference = tokens["transformers, compiled"]
    memory = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    rows = [
        f"### 1. Training: {size.name} (vocab {size.vocab_size}, {size.num_hidden_layers} layers, d_model "
        f"{size.hidden_size}, {size.num_attention_heads} heads), batch {size.batch_size} x {size.seq_len}, bf16 "
        f"autocast, SDPA, fused AdamW; {per_token / 1e6:.0f} MFLOP per token; {rounds} rounds of "
        f"{size.train_steps} steps",
        "",
        "| model | tokens/s | MFU | / transformers compiled | first 2 steps (s) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in names:
        ratios = [a / b for a, b in zip(tokens[name], reference)]
        median = statistics.median(tokens[name])
        rows.append(
            f"| {name} | {median:,.0f} | {100 * median * per_token / peak:.1f}% | "
            f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | {warmup[name]:.1f} |"
        )
    rows += ["", f"Peak GPU memory of this section (four models' states): {memory:.1f} GiB.", ""]
    del trainers, models
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def section_loop(device: str, peak: float, seconds: int, quick: bool) -> list[str]:
    """The recipe through `hf-seq train`, its speed as the loop measures it after the compilation (steps 10-50)."""
    out = ROOT / "runs" / "bench-gpu-loop"
    overrides = [
        f"training.output_dir={out}",
        "training.compile=true",
        "training.max_steps=null",
        f"training.max_seconds={seconds}",
        "training.batch_size=16",
        "training.gradient_accumulation_steps=1",
        "training.eval_every=100000",
        "training.save_every=100000",
        "training.log_with=none",
        "data.max_chars=4000000",
        "data.eval_examples=16",
        "tokenizer.vocab_size=32000",
    ]
    if quick:
        overrides += ["model.hidden_size=64", "model.num_hidden_layers=2", "model.num_attention_heads=2"]
        overrides += ["data.block_size=64", "model.max_position_embeddings=64", "tokenizer.vocab_size=1000"]
        overrides += ["data.max_chars=300000", "training.mixed_precision=no"]
    command = [sys.executable, "-m", "hf_seq.cli", "train", "recipes/gpt2-small.yaml", "--overwrite", *overrides]
    start = time.perf_counter()
    run = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": pythonpath()}
    )
    wall = time.perf_counter() - start
    if run.returncode != 0:
        return ["### 2. The training loop", "", "failed:", "```", run.stdout[-3000:], run.stderr[-3000:], "```", ""]
    speeds = re.findall(r"step (\d+): at ([0-9.e-]+) s/step", run.stdout + run.stderr)
    metrics = json.loads((out / "metrics.json").read_text())
    recipe = json.loads((out / "recipe.json").read_text())
    block, batch = recipe["data"]["block_size"], recipe["training"]["batch_size"]
    from hf_seq import GPTForCausalLM

    model = GPTForCausalLM.from_pretrained(out)
    size = Size("loop", model.config.vocab_size, model.config.num_hidden_layers, model.config.hidden_size,
                model.config.num_attention_heads, block, batch, 0, 0, 0, 0)  # fmt: skip
    per_token = flops_per_token(model, size)
    rows = [
        "### 2. The training loop: `hf-seq train recipes/gpt2-small.yaml` (compile, bf16, fused AdamW)",
        "",
        f"Overrides: `{' '.join(o for o in overrides if 'output_dir' not in o)}`; wall clock of the whole command "
        f"{wall:.0f} s (data, tokenizer and compilation included); {metrics['steps']} steps.",
        "",
        "| measured at | s/step | tokens/s | MFU |",
        "|---|---:|---:|---:|",
    ]
    for step, per_step in speeds:
        tps = block * batch / float(per_step)
        rows.append(f"| step {step} (since the last mark) | {float(per_step):.4f} | {tps:,.0f} | "
                    f"{100 * tps * per_token / peak:.1f}% |")  # fmt: skip
    rows.append(f"| whole run (compilation included) | | {metrics['tokens_per_second']:,.0f} | |")
    rows += ["", f"Final held-out loss {metrics.get('eval_loss', float('nan')):.3f} nats/token.", ""]
    return rows


def section_decode(size: Size, device: str, rounds: int) -> list[str]:
    from transformers import CompileConfig

    models = build_models(size, "sdpa", device)
    for model in models.values():
        model.to(torch.bfloat16).eval()
        prepare_generation(model)
    compiled = CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead" if device == "cuda" else None)
    variants = {
        "ours, dynamic cache, eager": ("ours", "dynamic", None),
        "ours, static cache, eager": ("ours", "static", None),
        "ours, static cache, compiled": ("ours", "static", compiled),
        "transformers, static cache, compiled": ("transformers", "static", compiled),
    }
    rows = [
        f"### 3. Decoding: greedy `generate()`, bf16 weights, prompt {size.prompt_len}, {size.new_tokens} new tokens",
        "",
        "| batch | variant | ms / new token | tokens/s | first call (s) | same tokens as ours, dynamic |",
        "|---:|---|---:|---:|---:|---|",
    ]
    for batch in (1, size.generate_batch):
        generator = torch.Generator().manual_seed(2)
        prompt = torch.randint(1, size.vocab_size, (batch, size.prompt_len), generator=generator).to(device)

        def generate(variant, prompt=prompt):
            name, cache, config = variants[variant]
            synchronize(device)
            start = time.perf_counter()
            with torch.no_grad():
                out = models[name].generate(
                    prompt,
                    attention_mask=torch.ones_like(prompt),
                    max_new_tokens=size.new_tokens,
                    do_sample=False,
                    cache_implementation=cache,
                    compile_config=config,
                    disable_compile=config is None,  # transformers compiles a static cache on its own otherwise
                )
            synchronize(device)
            return (time.perf_counter() - start) / size.new_tokens, out

        first, outputs = {}, {}
        for variant in variants:
            start = time.perf_counter()
            outputs[variant] = generate(variant)[1]
            generate(variant)  # CUDA graphs are recorded on the second call
            first[variant] = time.perf_counter() - start
        times = {variant: [] for variant in variants}
        for r in range(rounds):
            for variant in variants if r % 2 == 0 else list(variants)[::-1]:
                times[variant].append(generate(variant)[0])
        print(f"decode batch {batch}: " + ", ".join(f"{v} {statistics.median(t) * 1e3:.2f} ms" for v, t in times.items()),
              flush=True)  # fmt: skip
        base = outputs["ours, dynamic cache, eager"]
        for variant, seconds in times.items():
            median = statistics.median(seconds)
            same = "yes" if torch.equal(outputs[variant], base) else "no (bf16 rounding can flip a greedy choice)"
            rows.append(f"| {batch} | {variant} | {median * 1e3:.2f} | {batch / median:,.0f} | {first[variant]:.1f} | "
                        f"{same} |")  # fmt: skip
    return rows + [""]


def section_rnn(device: str, quick: bool) -> list[str]:
    output = ROOT / "runs" / "bench-gpu-rnn.md"
    command = [sys.executable, "bench/bench_rnn.py", "--device", device, "--output", str(output)]
    command += ["--quick"] if quick else ["--rounds", "3"]
    run = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, env=os.environ | {"PYTHONPATH": pythonpath()}
    )
    if run.returncode != 0:
        return ["### 4. LSTM against cuDNN", "", "failed:", "```", run.stderr[-3000:], "```", ""]
    text = output.read_text()
    body = text[text.index("####") :] if "####" in text else text
    return ["### 4. LSTM against cuDNN: `bench/bench_rnn.py` (fp32)", "", body, ""]


def section_fsdp(device: str, quick: bool) -> list[str]:
    """FSDP2 on the GPU through `accelerate launch` (one process: the sharded code path, on CUDA, fused AdamW): 20
    steps, then a resume to 30 from the step-20 checkpoint, against 30 uninterrupted steps."""
    folder = ROOT / "runs" / "bench-gpu-fsdp"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "recipes/accelerate/fsdp.yaml"]
    launch += ["--num_processes", "1"] + (["--cpu"] if device == "cpu" else [])
    common = ["-m", "hf_seq.cli", "train", "recipes/gpt-tiny.yaml", "training.save_every=10", "training.eval_every=10"]
    common += ["training.mixed_precision=bf16", "training.log_with=none", "data.max_chars=1000000", "--overwrite"]
    env = os.environ | {"PYTHONPATH": pythonpath(), "ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}
    runs = {
        "whole": [f"training.output_dir={folder}/whole", "training.max_steps=30"],
        "first 20": [f"training.output_dir={folder}/resumed", "training.max_steps=20"],
        "resumed to 30": [f"training.output_dir={folder}/resumed", "training.max_steps=30", "--resume"],
    }
    rows = ["### 5. FSDP2 on the GPU (`accelerate launch --config_file recipes/accelerate/fsdp.yaml`, 1 process)", ""]
    for name, extra in runs.items():
        command = launch + common + extra
        if name == "resumed to 30":
            command.remove("--overwrite")
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        if run.returncode != 0:
            return rows + [f"{name}: failed", "```", run.stdout[-2000:], run.stderr[-3000:], "```", ""]
    from safetensors.torch import load_file

    whole, resumed = load_file(f"{folder}/whole/model.safetensors"), load_file(f"{folder}/resumed/model.safetensors")
    worst = max((whole[k].float() - resumed[k].float()).abs().max().item() for k in whole)
    metrics = json.loads((folder / "whole" / "metrics.json").read_text())
    rows += [
        f"- distributed_type {metrics['distributed_type']}, {metrics['num_processes']} process, mixed precision "
        f"{metrics['mixed_precision']}, {metrics['tokens_per_second']:,.0f} tokens/s over 30 steps",
        f"- resumed at step 20 against uninterrupted, largest weight difference: {worst:.3g}",
        "",
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="tiny shapes: checks the script, measures nothing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sections", nargs="*", default=["train", "loop", "fsdp", "decode", "rnn"])
    parser.add_argument("--loop-seconds", type=int, default=75, help="the training loop's wall-clock budget")
    parser.add_argument("--output", help="markdown file (default: bench/results/gpu_<device name>.md)")
    parser.add_argument("--train-batch", type=int, help="section 1's sequences per step (default: the size's)")
    parser.add_argument("--vocab", type=int, help="section 1's vocabulary, e.g. 50304 (GPT-2's padded to 128)")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    size = TINY if args.quick else GPT2_SMALL
    size = dataclasses.replace(size, **{k: v for k, v in (("batch_size", args.train_batch), ("vocab_size", args.vocab)) if v})
    rounds = 1 if args.quick else args.rounds
    name = torch.cuda.get_device_name().replace(" ", "_") if args.device == "cuda" else "cpu"
    output = Path(args.output or ROOT / "bench" / "results" / f"gpu_{name}.md")
    peak, peak_source = peak_flops(args.device, torch.bfloat16)
    lines = [
        f"# The GPU half: {name.replace('_', ' ')}",
        "",
        f"`python bench/bench_gpu.py {' '.join(sys.argv[1:])}`, "
        f"{time.strftime('%Y-%m-%d')}; peak for MFU: {peak / 1e12:.0f} TFLOP/s ({peak_source}).",
        "",
        *machine_description(args.device),
        "",
    ]
    sections = {
        "train": lambda: section_training(size, args.device, rounds, peak),
        "loop": lambda: section_loop(args.device, peak, args.loop_seconds, args.quick),
        "decode": lambda: section_decode(size, args.device, rounds + 2),
        "rnn": lambda: section_rnn(args.device, args.quick),
        "fsdp": lambda: section_fsdp(args.device, args.quick),
    }
    for section in args.sections:
        start = time.perf_counter()
        try:
            lines += sections[section]()
        except Exception as error:  # noqa: BLE001  (one failed section must not lose the others' figures)
            lines += [f"### {section}: failed ({type(error).__name__}: {error})", ""]
        print(f"section {section}: {time.perf_counter() - start:.0f} s", flush=True)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {output}")


if __name__ == "__main__":
    main()
