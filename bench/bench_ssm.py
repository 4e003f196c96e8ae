"""hf-seq's Mamba (`SSMForCausalLM`, ssm_type="mamba") against transformers' `MambaForCausalLM` on its PyTorch path
(what runs on a CPU, where the fused CUDA kernels do not exist), at the same configuration and with the same weights
(the reference is `hf_seq.convert.to_transformers(ours)`; the logits are checked equal first).

- Training throughput: forward + backward + AdamW step on a fixed random batch, tokens/s. transformers' PyTorch path
  runs the selective scan as a Python loop over the time steps, keeping every step's tensors for autograd;
  hf-seq's CPU scan (`StepwiseScan`, models/scan.py) also steps through time, in cache-sized blocks with one fused
  operation per step and a hand-written backward.
- Decoding: ms per generated token (batch 1, greedy, the model's own state) after a context of 64, 512 and 2048
  tokens, for both: the state is O(1), so the cost should not grow with the context. The context is fed once (not
  timed), then `--decode-steps` one-token forward passes are timed.

The models alternate within each round (the order reversing between rounds); figures are medians over rounds and
ratios the median of per-round ratios (ours / transformers for speed), with their range. On a quiet 2-core CPU a
model timed against itself reads 0.92-1.04: a ratio within about 0.08 of 1 is noise.

    python bench/bench_ssm.py --quick     # a tiny configuration, a few seconds, nothing written
    python bench/bench_ssm.py             # writes bench/results/ssm_cpu.md
    python bench/bench_ssm.py --against-gpt   # writes bench/results/ssm_vs_gpt_cpu.md
    python bench/bench_ssm.py --mamba2        # writes bench/results/mamba2_cpu.md

`--against-gpt` compares training throughput with hf-seq's GPT instead, at the lineage's shapes with 0.4M
non-embedding parameters each (docs/lineage: vocabulary 4,096, width 128, batch 16 x 128, dropout 0.1): Mamba with
7 blocks (expand 1, N 16), GPT with 2 blocks (4 heads, feed-forward 518). Both train with their default fused loss.

`--mamba2` adds Mamba-2 (ssm_type="mamba2", models/ssd.py) at the same 0.4M non-embedding parameters: 3 blocks of
expand 2, 4 heads of 64 channels, N 128 (the paper's), one group, chunks of 64. It trains in one process, interleaved
step by step, with that GPT, that Mamba (for reference) and transformers' `Mamba2ForCausalLM` on its PyTorch path
holding the same weights (converted; the two losses are checked equal first). `--profile` adds the operations that
took the most time in a few Mamba-2 training steps.
"""

import argparse
import copy
import dataclasses
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from bench_gpt import machine_description

from hf_seq import SSMConfig, SSMForCausalLM
from hf_seq.convert import to_transformers
from hf_seq.models.utils import CACHE_NAME


@dataclass(frozen=True)
class Size:
    name: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    state_size: int
    batch_size: int
    seq_len: int
    train_steps: int  # timed steps per model per round


SIZES = {"small": Size("small", 8000, 256, 4, 16, 4, 256, 1)}
QUICK = Size("quick", 500, 32, 2, 8, 2, 32, 1)
CONTEXTS = (64, 512, 2048)
MODELS = ("ours", "transformers")


def build(size: Size) -> dict:
    config = SSMConfig(
        vocab_size=size.vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_layers,
        ssm_type="mamba",
        state_size=size.state_size,
    )
    torch.manual_seed(0)
    ours = SSMForCausalLM(config)
    return {"ours": ours, "transformers": to_transformers(ours)}


def max_logit_difference(models: dict, size: Size) -> float:
    ids = torch.randint(3, size.vocab_size, (2, size.seq_len), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits = [models[name].eval()(ids).logits for name in MODELS]
    return (logits[0] - logits[1]).abs().max().item()


class TrainingRun:
    def __init__(self, model, size: Size):
        self.model = model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        generator = torch.Generator().manual_seed(1)
        self.ids = torch.randint(3, size.vocab_size, (size.batch_size, size.seq_len), generator=generator)

    def run(self, steps: int) -> float:
        self.model.train()
        start = time.perf_counter()
        for _ in range(steps):
            self.model(input_ids=self.ids, labels=self.ids).loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start


@torch.no_grad()
def decode_ms_per_token(model, context: int, steps: int, vocab_size: int) -> float:
    """Feed `context` tokens once, then time `steps` one-token forward passes that carry the model's state (passed
    and returned under the installed transformers' cache name, which both models take)."""
    model.eval()
    ids = torch.randint(3, vocab_size, (1, context), generator=torch.Generator().manual_seed(4))
    out = model(input_ids=ids, use_cache=True)
    token = out.logits[:, -1:].argmax(-1)
    start = time.perf_counter()
    for _ in range(steps):
        out = model(input_ids=token, use_cache=True, **{CACHE_NAME: getattr(out, CACHE_NAME)})
        token = out.logits[:, -1:].argmax(-1)
    return (time.perf_counter() - start) / steps * 1000


def summary(ours: list[float], theirs: list[float], higher_is_faster: bool) -> dict:
    """Medians, and the median and range of the per-round speed ratios ours / transformers."""
    ratios = [a / b if higher_is_faster else b / a for a, b in zip(ours, theirs)]
    return {
        "ours": statistics.median(ours),
        "transformers": statistics.median(theirs),
        "ratio": statistics.median(ratios),
        "range": (min(ratios), max(ratios)),
    }


# The lineage's members at 0.4M non-embedding parameters (docs/lineage/lineage.json)
LINEAGE_VOCAB, LINEAGE_BATCH, LINEAGE_SEQ = 4096, 16, 128
LINEAGE_MAMBA = dict(
    hidden_size=128, num_hidden_layers=7, ssm_type="mamba", expand=1, state_size=16, hidden_dropout=0.1
)
LINEAGE_GPT = dict(
    hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=518, max_position_embeddings=128
)
LINEAGE_SIZE = Size("0.4M", LINEAGE_VOCAB, 128, LINEAGE_MAMBA["num_hidden_layers"], 16, LINEAGE_BATCH, LINEAGE_SEQ, 1)
SPECIAL_TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def interleaved_training(models: dict, size: Size, rounds: int, steps: int) -> dict[str, list[float]]:
    """Training tokens/s of each model per round: one warm-up step each, then `rounds` rounds of `steps` steps per
    model, interleaved step by step, the order reversing between rounds."""
    runs = {name: TrainingRun(model, size) for name, model in models.items()}
    for run in runs.values():
        run.run(1)  # warm-up
    tokens = size.batch_size * size.seq_len
    speed = {name: [] for name in models}
    for r in range(rounds):
        seconds = dict.fromkeys(models, 0.0)
        for _ in range(steps):
            for name in models if r % 2 == 0 else list(models)[::-1]:
                seconds[name] += runs[name].run(1)
        for name in models:
            speed[name].append(steps * tokens / seconds[name])
        print(f"round {r + 1}: " + ", ".join(f"{n} {speed[n][-1]:.0f} tok/s" for n in models), flush=True)
    return speed


def against_gpt(args) -> None:
    """Training tokens/s of the lineage's Mamba and GPT at 0.4M non-embedding parameters, interleaved step by
    step, the order reversing between rounds; ratio = Mamba / GPT per round."""
    from hf_seq import GPTConfig, GPTForCausalLM
    from hf_seq.experiments.study import count_parameters  # (all, non-embedding)

    torch.manual_seed(0)
    models = {
        "mamba": SSMForCausalLM(SSMConfig(vocab_size=LINEAGE_VOCAB, **LINEAGE_MAMBA, **SPECIAL_TOKENS)),
        "gpt": GPTForCausalLM(GPTConfig(vocab_size=LINEAGE_VOCAB, **LINEAGE_GPT, **SPECIAL_TOKENS)),
    }
    steps = 2 if args.quick else 3
    speed = interleaved_training(models, LINEAGE_SIZE, 2 if args.quick else args.rounds, steps)
    ratios = [m / g for m, g in zip(speed["mamba"], speed["gpt"])]
    counts = {name: count_parameters(model) for name, model in models.items()}
    print(f"Mamba / GPT: {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")
    if args.quick:
        return
    lines = [
        "# hf-seq Mamba vs hf-seq GPT at 0.4M non-embedding parameters: training throughput (CPU)",
        "",
        *machine_description("cpu"),
        "- Command: `python bench/bench_ssm.py --against-gpt`",
        "",
        f"The lineage's shapes (docs/lineage): vocabulary {LINEAGE_VOCAB}, width 128, tied embeddings, dropout 0.1, "
        f"batch {LINEAGE_BATCH} x {LINEAGE_SEQ}, AdamW; Mamba {LINEAGE_MAMBA['num_hidden_layers']} blocks (expand 1, "
        f"N 16), GPT {LINEAGE_GPT['num_hidden_layers']} blocks (4 heads, feed-forward 518). Both with the fused loss "
        f"(the default). {steps} steps per model per round, interleaved step by step, {len(ratios)} rounds; medians, "
        "ratio = median of per-round ratios Mamba / GPT, range in brackets.",
        "",
        "| model | non-embedding parameters | training tokens/s |",
        "|---|---:|---:|",
        *(f"| {name} | {counts[name][1]:,} | {statistics.median(speed[name]):,.0f} |" for name in models),
        "",
        f"Mamba / GPT: **{statistics.median(ratios):.2f}** [{min(ratios):.2f}-{max(ratios):.2f}]",
    ]
    output = Path(args.output or Path(__file__).parent / "results" / "ssm_vs_gpt_cpu.md")
    output.write_text("\n".join(lines) + "\n")
    print(f"wrote {output}")


# Mamba-2 at the same 0.4M non-embedding parameters: 3 blocks of in_proj 128 -> 772 (z, x, B, C, dt), out_proj 256 ->
# 128, conv1d over 512 channels; 4 heads x 64 channels, N 128, chunks of 64 (two per sequence of 128).
LINEAGE_MAMBA2 = dict(
    hidden_size=128,
    num_hidden_layers=3,
    ssm_type="mamba2",
    expand=2,
    head_dim=64,
    state_size=128,
    n_groups=1,
    chunk_size=64,
    hidden_dropout=0.1,
)
MAMBA2_GOALS = {"gpt": 0.8, "transformers": 2.0}  # Mamba-2's tokens/s over the other's, at least
MAMBA2_LABELS = {
    "mamba2": "hf-seq Mamba-2 (chunked SSD)",
    "gpt": "hf-seq GPT",
    "mamba": "hf-seq Mamba (for reference)",
    "transformers": "transformers Mamba2ForCausalLM, PyTorch path, same weights",
}


def mamba2_models() -> dict:
    """Mamba-2, GPT and Mamba at 0.4M non-embedding parameters, and transformers' Mamba-2 with our Mamba-2's weights.
    Ours trains with the lineage's dropout (0.1); the converter carries models without dropout, as transformers'
    Mamba-2 has none, so the reference is converted from a copy with dropout 0 and the same weights: ours does a
    little more work per step than the reference."""
    from hf_seq import GPTConfig, GPTForCausalLM

    torch.manual_seed(0)
    ours = SSMForCausalLM(SSMConfig(vocab_size=LINEAGE_VOCAB, **LINEAGE_MAMBA2, **SPECIAL_TOKENS))
    config = copy.deepcopy(ours.config)
    config.hidden_dropout = 0.0
    plain = SSMForCausalLM(config)
    plain.load_state_dict(ours.state_dict())
    return {
        "mamba2": ours,
        "gpt": GPTForCausalLM(GPTConfig(vocab_size=LINEAGE_VOCAB, **LINEAGE_GPT, **SPECIAL_TOKENS)),
        "mamba": SSMForCausalLM(SSMConfig(vocab_size=LINEAGE_VOCAB, **LINEAGE_MAMBA, **SPECIAL_TOKENS)),
        "transformers": to_transformers(plain),
    }


@torch.no_grad()
def losses_on_one_batch(models: dict, names, size: Size) -> list[float]:
    """Each model's loss (eval mode: no dropout) on the same random batch."""
    ids = torch.randint(3, size.vocab_size, (2, size.seq_len), generator=torch.Generator().manual_seed(3))
    return [models[name].eval()(input_ids=ids, labels=ids).loss.item() for name in names]


def profile_training(model, size: Size, steps: int = 2, rows: int = 10) -> list[tuple[str, float, int]]:
    """The operations with the most self CPU time over `steps` training steps (after one warm-up step): (name,
    ms per step, calls per step)."""
    from torch.profiler import ProfilerActivity, profile

    run = TrainingRun(model, size)
    run.run(1)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run.run(steps)
    events = sorted(profiler.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    return [(e.key, e.self_cpu_time_total / 1000 / steps, e.count // steps) for e in events]


def ratio_cell(numerator: list[float], denominator: list[float]) -> tuple[float, str]:
    ratios = [a / b for a, b in zip(numerator, denominator)]
    median = statistics.median(ratios)
    return median, f"{median:.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"


def goal_line(other: str, median: float) -> str:
    goal = MAMBA2_GOALS[other]
    verdict = "met" if median >= goal else f"**missed** by {goal - median:.2f} ({median / goal:.0%} of the goal)"
    return f"- Mamba-2 / {other}: **{median:.2f}**, goal >= {goal}: {verdict}"


def against_mamba2(args) -> None:
    """Training tokens/s of Mamba-2, GPT, Mamba and transformers' Mamba-2 (same weights) at 0.4M non-embedding
    parameters, interleaved step by step; ratios Mamba-2 / the others per round, their median and range."""
    from hf_seq.experiments.study import count_parameters  # (all, non-embedding)

    load_before = os.getloadavg()
    models = mamba2_models()
    # --quick: one sequence of 128 per step (two chunks), two rounds; nothing written
    size = dataclasses.replace(LINEAGE_SIZE, batch_size=1) if args.quick else LINEAGE_SIZE
    losses = losses_on_one_batch(models, ("mamba2", "transformers"), size)
    print(f"loss on one batch: ours {losses[0]:.6f}, transformers {losses[1]:.6f}")
    if abs(losses[0] - losses[1]) > 1e-4:
        raise SystemExit("the two Mamba-2 models disagree on the loss: not the same model, no comparison")
    steps = 2 if args.quick else 3
    speed = interleaved_training(models, size, 2 if args.quick else args.rounds, steps)
    cells = {name: ratio_cell(speed["mamba2"], speed[name]) for name in models}
    cells["mamba2"] = (1.0, "1")
    for name in list(models)[1:]:
        print(f"Mamba-2 / {name}: {cells[name][1]}")
    profile = profile_training(models["mamba2"], size) if args.profile else []
    for name, ms, calls in profile:
        print(f"{ms:8.1f} ms/step {calls:5d} calls/step  {name}")
    load_after = os.getloadavg()
    if args.quick:
        return
    counts = {name: count_parameters(model)[1] for name, model in models.items()}
    lines = [
        "# hf-seq Mamba-2 at 0.4M non-embedding parameters: training throughput against GPT, Mamba and transformers",
        "",
        *machine_description("cpu"),
        f"- load average (1, 5, 15 min) before / after: {', '.join(f'{x:.2f}' for x in load_before)} / "
        f"{', '.join(f'{x:.2f}' for x in load_after)}",
        f"- Command: `python bench/bench_ssm.py --mamba2{' --profile' if args.profile else ''}"
        f"{f' --rounds {args.rounds}' if args.rounds != 5 else ''}`",
        "",
        f"Vocabulary {LINEAGE_VOCAB}, width 128, tied embeddings, batch {size.batch_size} x {size.seq_len}, AdamW "
        f"(forward, backward, step); {steps} steps per model per round, interleaved step by step, {args.rounds} "
        "rounds; tokens/s are medians over rounds, a ratio is the median of the per-round ratios Mamba-2 / the row's "
        "model (above 1: Mamba-2 trains faster), range in brackets. transformers' model holds Mamba-2's weights; loss "
        f"on one batch: ours {losses[0]:.6f}, transformers {losses[1]:.6f} (difference "
        f"{abs(losses[0] - losses[1]):.1e}).",
        "",
        "| model | non-embedding parameters | training tokens/s | Mamba-2 / this model |",
        "|---|---:|---:|---:|",
        *(
            f"| {MAMBA2_LABELS[n]} | {counts[n]:,} | {statistics.median(speed[n]):,.0f} | {cells[n][1]} |"
            for n in models
        ),
        "",
        goal_line("gpt", cells["gpt"][0]),
        goal_line("transformers", cells["transformers"][0]),
        f"- for reference, Mamba / GPT: {ratio_cell(speed['mamba'], speed['gpt'])[1]}",
    ]
    if profile:
        lines += ["", "Mamba-2's training step, the operations with the most self CPU time:", ""]
        lines += ["| operation | ms per step | calls per step |", "|---|---:|---:|"]
        lines += [f"| `{name}` | {ms:.1f} | {calls} |" for name, ms, calls in profile]
    output = Path(args.output or Path(__file__).parent / "results" / "mamba2_cpu.md")
    output.write_text("\n".join(lines) + "\n")
    print(f"wrote {output}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--decode-steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--output", default=None, help="default: bench/results/ssm_cpu.md")
    parser.add_argument("--against-gpt", action="store_true", help="Mamba vs hf-seq's GPT at 0.4M parameters")
    parser.add_argument("--mamba2", action="store_true", help="Mamba-2 vs GPT, Mamba, transformers at 0.4M parameters")
    parser.add_argument("--profile", action="store_true", help="with --mamba2: the costliest operations of its step")
    args = parser.parse_args()
    torch.set_flush_denormal(True)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.against_gpt:
        return against_gpt(args)
    if args.mamba2:
        return against_mamba2(args)
    size = QUICK if args.quick else SIZES["small"]
    rounds = 2 if args.quick else args.rounds
    contexts = (16, 64) if args.quick else CONTEXTS
    models = build(size)
    difference = max_logit_difference(models, size)
    print(f"max |logits ours - transformers| = {difference:.2e}")

    runs = {name: TrainingRun(models[name], size) for name in MODELS}
    for name in MODELS:
        runs[name].run(1)  # warm-up
    tokens = size.batch_size * size.seq_len * size.train_steps
    speed = {name: [] for name in MODELS}
    decode = {(name, c): [] for name in MODELS for c in contexts}
    for r in range(rounds):
        order = MODELS if r % 2 == 0 else MODELS[::-1]
        for name in order:
            speed[name].append(tokens / runs[name].run(size.train_steps))
        for context in contexts:
            for name in order:
                decode[name, context].append(
                    decode_ms_per_token(models[name], context, args.decode_steps, size.vocab_size)
                )
    train = summary(speed["ours"], speed["transformers"], higher_is_faster=True)
    print(
        f"training tokens/s: ours {train['ours']:.0f}, transformers {train['transformers']:.0f}, "
        f"ratio {train['ratio']:.2f} [{train['range'][0]:.2f}-{train['range'][1]:.2f}]"
    )
    rows = []
    for context in contexts:
        d = summary(decode["ours", context], decode["transformers", context], higher_is_faster=False)
        rows.append((context, d))
        print(
            f"decode after {context} tokens: ours {d['ours']:.2f} ms/token, transformers {d['transformers']:.2f} "
            f"ms/token, speed ratio {d['ratio']:.2f} [{d['range'][0]:.2f}-{d['range'][1]:.2f}]"
        )
    if args.quick:
        return
    command = "python bench/bench_ssm.py" + (f" --threads {args.threads}" if args.threads else "")
    command += f" --rounds {args.rounds}" if args.rounds != 5 else ""
    lines = [
        "# hf-seq Mamba (SSMForCausalLM) vs transformers' MambaForCausalLM, PyTorch path (CPU)",
        "",
        *machine_description("cpu"),
        f"- Command: `{command}`",
        "",
        f"Same weights (`to_transformers`); max |logits difference| {difference:.1e}. Size: d {size.hidden_size}, "
        f"{size.num_layers} layers, N {size.state_size}, expand 2, vocab {size.vocab_size}; {rounds} interleaved "
        "rounds, medians; ratio = median of per-round ratios (ours / transformers in speed), range in brackets. A "
        "ratio within about 0.08 of 1 is noise here.",
        "",
        "| measure | ours | transformers | ratio (speed) |",
        "|---|---|---|---|",
        f"| training tokens/s (batch {size.batch_size} x {size.seq_len}, AdamW) | {train['ours']:.0f} | "
        f"{train['transformers']:.0f} | {train['ratio']:.2f} [{train['range'][0]:.2f}-{train['range'][1]:.2f}] |",
    ]
    for context, d in rows:
        lines.append(
            f"| decode ms/token after {context} tokens (batch 1) | {d['ours']:.2f} | {d['transformers']:.2f} | "
            f"{d['ratio']:.2f} [{d['range'][0]:.2f}-{d['range'][1]:.2f}] |"
        )
    output = Path(args.output or Path(__file__).parent / "results" / "ssm_cpu.md")
    output.write_text("\n".join(lines) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
