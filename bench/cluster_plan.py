"""A plan on paper for training GPT-2 small (recipes/gpt2-small.yaml) and a 350M GPT on a GPU cluster: throughput,
time and GPU-hours for 10B tokens on 1, 8 and 64 H100s, and memory per GPU under DDP and FSDP. Every figure follows
from the model's shapes and the assumptions below; docs/cluster.md holds the output. `--measure` (one GPU) times
hf-seq's training step for the two models and prints MFU and peak memory beside the plan's estimate.

    python bench/cluster_plan.py
    python bench/cluster_plan.py --measure [--compile]

Models. GPT-2 small as the recipe builds it (12 layers, d = 768, 12 heads, sequence 1024, the recipe's 32,000-token
vocabulary, so 110M parameters rather than the 124M of GPT-2's 50,257) and GPT-2 medium's shapes (24 layers,
d = 1024, 16 heads) with the same vocabulary and sequence.

Compute. FLOPs per token = 6 N + 12 L d s (PaLM, Chowdhery et al. 2022, appendix B; `hf_seq.training.compute`). Peak: the
H100 SXM's dense bf16 tensor-core figure, 989 TFLOP/s (NVIDIA's datasheet lists 1,979 with 2:4 sparsity). MFU 40%
is what llm.c reached on GPT-2 small: its replication took 45 minutes on 8 H100s for 10B tokens (modded-nanogpt's
README, https://github.com/KellerJordan/modded-nanogpt), that is 463k tokens/s per GPU x 0.855 GFLOPs per token
(50,257-token vocabulary) = 396 TFLOP/s = 40% of 989; the same code reached "up to ~60%" on A100s (llm.c discussion
#481). 50% is the goal. hf-seq itself, measured with --measure on one H200 (the same 989 TFLOP/s peak; no H100 was
free), reached 29% (eager) and 33% (compiled) on GPT-2 small at 32 x 1024 tokens a step, 35% and 37% on the 350M
model: the table's rows are targets, above what hf-seq reaches today.

Scaling. Data parallel, tokens/s = GPUs x per-GPU tokens/s x efficiency, with an assumed efficiency of 1.0 on one
GPU, 0.95 on one node of 8 (NVLink; the gradient all-reduce overlaps the backward) and 0.85 on 8 nodes of 8
(InfiniBand). At 64 GPUs the recipe's global batch (256 x 1024 tokens) leaves 4 sequences per GPU and step, about
8 ms of compute for GPT-2 small at 40% MFU: the all-reduce of 0.44 GB of fp32 gradients is then hard to hide, and
a larger global batch (or ZeRO/FSDP's reduce-scatter) is how to keep the efficiency assumed.

Memory per GPU. Model states in the recipes' precision (fp32 weights under bf16 autocast, AdamW): 4 (weights) + 4
(gradients) + 8 (two moments) = 16 bytes a parameter under DDP, 16 / N under FSDP full shard over N GPUs.
Activations per micro-batch of b sequences, bf16, without recomputation: s b h (34 + 5 a s / h) bytes per layer
(Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4.1), where the
5 a s / h term is the attention matrix, its softmax and dropout mask; the recipes use SDPA (flash / memory-efficient
kernels, which keep none of these), so it is dropped: 34 s b h per layer. The output layer adds 10 s b V bytes at
its peak: bf16 logits (2), the fp32 copy the loss takes (4) and log-softmax saved for the backward (4). The
micro-batch is the recipe's: 256 sequences over 8 accumulation steps and the GPUs (32 on one GPU, 4 on 8); on 64
GPUs 256 is not divisible by 8 x 64, so training.gradient_accumulation_steps=1 (4 sequences). Not counted: the
CUDA context and allocator slack (1-3 GB), DDP's gradient buckets (4 bytes a parameter; accelerate leaves
gradient_as_bucket_view off), autocast's cached bf16 weights (2 bytes a parameter), FSDP's gathered bf16 layers.
"""

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_seq import GPTConfig, GPTForCausalLM
from hf_seq.training.compute import training_flops_per_token
from hf_seq.training.recipes import load_recipe

PEAK = 989e12  # H100 SXM dense bf16, FLOP/s
MFUS = (0.40, 0.50)
EFFICIENCY = {1: 1.0, 8: 0.95, 64: 0.85}  # data-parallel scaling, assumed (docstring)
TOKENS = 10e9
BYTES_PER_PARAM = 16  # fp32 weights and gradients, AdamW's two fp32 moments
GB = 1e9


@dataclass
class Plan:
    name: str
    config: GPTConfig
    seq_len: int
    global_batch: int  # sequences per optimizer step
    accumulation: int

    @property
    def params(self) -> int:
        """All parameters (the optimizer holds state for each), the position table and a tied matrix once."""
        with torch.device("meta"):
            return GPTForCausalLM(self.config).num_parameters()

    def micro_batch(self, gpus: int) -> int:
        accumulation = self.accumulation if self.global_batch % (self.accumulation * gpus) == 0 else 1
        return self.global_batch // (accumulation * gpus)

    def activation_bytes(self, micro_batch: int) -> float:
        c, s, b = self.config, self.seq_len, micro_batch
        return c.num_hidden_layers * 34 * s * b * c.hidden_size + 10 * s * b * c.vocab_size


def plans() -> list[Plan]:
    recipe = load_recipe(Path(__file__).parent.parent / "recipes" / "gpt2-small.yaml")
    shapes = {k: v for k, v in recipe.model.items() if k != "attn_implementation"}
    common = dict(vocab_size=recipe.tokenizer.vocab_size, max_position_embeddings=recipe.data.block_size)
    batch = dict(seq_len=recipe.data.block_size, global_batch=recipe.training.batch_size)
    accumulation = recipe.training.gradient_accumulation_steps
    medium = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16)
    return [
        Plan("GPT-2 small (recipe)", GPTConfig(**shapes | common), accumulation=accumulation, **batch),
        Plan("GPT-2 medium shapes", GPTConfig(**medium | common), accumulation=accumulation, **batch),
    ]


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.1f} h" if seconds >= 3600 else f"{seconds / 60:,.0f} min"


def throughput_table(models: list[Plan]) -> list[str]:
    gpus = list(EFFICIENCY)
    rows = [
        "| model | parameters | GFLOPs per token | MFU | tokens/s per GPU | "
        + " | ".join(f"10B tokens on {g} GPU{'s' * (g > 1)}" for g in gpus)
        + " | GPU-hours ("
        + " / ".join(map(str, gpus))
        + ") |",
        "|---|---|---|---|---|" + "---|" * len(gpus) + "---|",
    ]
    for plan in models:
        flops = training_flops_per_token(plan.config, plan.seq_len)
        for mfu in MFUS:
            per_gpu = mfu * PEAK / flops
            seconds = {g: TOKENS / (per_gpu * g * EFFICIENCY[g]) for g in gpus}
            rows.append(
                f"| {plan.name} | {plan.params / 1e6:.1f}M | {flops / 1e9:.3f} | {mfu:.0%} | {per_gpu:,.0f} | "
                + " | ".join(hours(seconds[g]) for g in gpus)
                + " | "
                + " / ".join(f"{g * seconds[g] / 3600:,.1f}" for g in gpus)
                + " |"
            )
    return rows


def memory_table(models: list[Plan]) -> list[str]:
    rows = [
        "| model | GPUs | micro-batch | model states DDP | model states FSDP | activations | total DDP | total FSDP |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for plan in models:
        for gpus in EFFICIENCY:
            states = BYTES_PER_PARAM * plan.params
            micro = plan.micro_batch(gpus)
            activations = plan.activation_bytes(micro)
            cells = (states, states / gpus, activations, states + activations, states / gpus + activations)
            rows.append(
                f"| {plan.name} | {gpus} | {micro} x {plan.seq_len} | "
                + " | ".join(f"{x / GB:.2f} GB" for x in cells)
                + " |"
            )
    return rows


def measure(plan: Plan, micro_batch: int, compile: bool, steps: int = 10) -> str:
    """Time hf-seq's training step on one GPU as the recipes run it (fp32 weights, bf16 autocast, AdamW, SDPA)."""
    torch.manual_seed(0)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = GPTForCausalLM._from_config(plan.config, attn_implementation="sdpa").cuda().train()
    forward = torch.compile(model) if compile else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    input_ids = torch.randint(plan.config.vocab_size, (micro_batch, plan.seq_len), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = forward(input_ids=input_ids, labels=input_ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up: optimizer state, allocator, compilation
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    tokens_per_second = steps * micro_batch * plan.seq_len / (time.perf_counter() - start)
    mfu = tokens_per_second * training_flops_per_token(plan.config, plan.seq_len) / PEAK
    peak = torch.cuda.max_memory_allocated()
    planned = BYTES_PER_PARAM * plan.params + plan.activation_bytes(micro_batch)
    return (
        f"| {plan.name} | {micro_batch} x {plan.seq_len} | {'compiled' if compile else 'eager'} | "
        f"{tokens_per_second:,.0f} | {mfu:.1%} | {peak / GB:.2f} GB | {planned / GB:.2f} GB |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", action="store_true", help="time the training step on this machine's GPU")
    parser.add_argument("--compile", action="store_true", help="with --measure: torch.compile the model")
    args = parser.parse_args()
    models = plans()
    if args.measure:
        print(f"{torch.cuda.get_device_name()}, MFU against {PEAK / 1e12:.0f} TFLOP/s\n")
        print("| model | micro-batch | mode | tokens/s | MFU | peak memory | plan: states + activations |")
        print("|---|---|---|---|---|---|---|")
        for plan in models:
            for micro_batch in (4, 32):
                print(measure(plan, micro_batch, args.compile), flush=True)
        return
    print(
        f"H100 SXM, dense bf16 peak {PEAK / 1e12:.0f} TFLOP/s; {TOKENS / 1e9:.0f}B tokens; data-parallel efficiency "
        + ", ".join(f"{e:.2f} on {g}" for g, e in EFFICIENCY.items())
        + " GPUs (assumed)\n"
    )
    print("\n".join(throughput_table(models)))
    print()
    print("\n".join(memory_table(models)))


if __name__ == "__main__":
    main()
