"""Token-budget batches (`data.batch_tokens`) against fixed-size batches for sequence-to-sequence training.

The data are the embedded gettext pairs (`data.dataset: gettext`, English -> French program messages, 20,000 pairs
as in recipes/transformer-gettext-tiny.yaml); the model that recipe's small Transformer (2+2 layers, width 128, 4
heads, FFN 512, dropout 0.1, label smoothing 0.1, inverse-square-root schedule). The parent trains the recipe's
tokenizer once (BPE, 4,000) and gives it to every run as tokenizer.path. Each run is a fresh process that trains
`--steps` steps through `hf_seq.training.run` on one torch thread:

- fixed: batches of `training.batch_size` pairs (32), padded to their longest source and longest target;
- tokens: `data.batch_tokens` batches from length-sorted rows, the budget chosen by the parent so that a step holds
  the same mean number of real (non-padding) source + target tokens as a fixed batch of 32 pairs.

Both see the same held-out pairs and are scored every `--eval-every` steps on their validation loss (eval_loss: NLL
per target token, no label smoothing; BLEU, which needs generation, is skipped here to keep evaluation short). The
clock counts training only: from taking a step's batch to the end of its optimizer step, evaluations left out.
Figures per run: real tokens per second (`real_tokens` of metrics.json over that clock), padding_fraction (pad /
all tokens of both sides of the training batches), and the training seconds at which the validation loss first
reaches a common value: the higher of the two runs' best validation losses in that round, so both reach it
(interpolated linearly between evaluations). Runs alternate within each round, the order reversed every other
round; ratios are the medians of the per-round ratios.

    python bench/bench_batching.py            # 3 rounds of 400 steps; writes bench/results/batching_cpu.md
    python bench/bench_batching.py --quick    # 1 round of 40 steps: a smoke test (writes nothing)
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_data import median_range  # noqa: E402
from bench_gpt import machine_description  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BATCH_SIZE = 32
METHODS = ("fixed", "tokens")


def recipe(spec: dict) -> dict:
    """recipes/transformer-gettext-tiny.yaml with the bench's tokenizer, steps, evaluations and batching."""
    import yaml

    tree = yaml.safe_load((ROOT / "recipes" / "transformer-gettext-tiny.yaml").read_text())
    tree["tokenizer"] = {"path": spec["tokenizer"]} if spec.get("tokenizer") else tree["tokenizer"]
    tree["data"]["batch_tokens"] = spec.get("batch_tokens")
    tree["training"] |= {
        "output_dir": spec["output_dir"],
        "max_steps": spec["steps"],
        "batch_size": BATCH_SIZE,
        "eval_every": spec["eval_every"],
        "save_every": 10**6,
        "log_with": None,
        "threads": 1,
    }
    return tree


# ---------------------------------------------------------------------------------------------- one run (child)
def child(spec: dict) -> None:
    import torch

    import hf_seq.training.pretraining as training
    from hf_seq.data import tasks
    from hf_seq.training.recipes import load_recipe

    clock = {"train_seconds": 0.0, "started": None, "steps": 0}
    curve = []
    global_batch, train_step, evaluate = training.global_batch, training.train_step, tasks.evaluate

    def timed_batch(*args, **kwargs):
        clock["started"] = time.perf_counter()
        return global_batch(*args, **kwargs)

    def timed_step(*args, **kwargs):
        loss = train_step(*args, **kwargs)
        clock["train_seconds"] += time.perf_counter() - clock["started"]
        clock["steps"] += 1
        return loss

    def scored(*args, **kwargs):
        metrics = evaluate(*args, **kwargs)
        curve.append(
            {"step": clock["steps"], "train_seconds": clock["train_seconds"], "eval_loss": metrics["eval_loss"]}
        )
        return metrics

    training.global_batch, training.train_step, tasks.evaluate = timed_batch, timed_step, scored
    tasks.translate_and_score = lambda *args, **kwargs: float("nan")  # the loss only: no generation
    summary = training.run(load_recipe(recipe(spec)), progress=False)
    out = {
        "real_tokens_per_second": summary["real_tokens"] / clock["train_seconds"],
        "real_tokens_per_step": summary["real_tokens"] / summary["steps"],
        "padding_fraction": summary["padding_fraction"],
        "train_seconds": clock["train_seconds"],
        "epochs": summary["epochs"],
        "curve": curve,
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(out))


def launch(spec: dict) -> dict:
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "OMP_NUM_THREADS": "1"}
    command = [sys.executable, __file__, "--child", json.dumps(spec)]
    process = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if process.returncode != 0:
        raise RuntimeError(f"run {spec['method']} failed ({process.returncode}):\n{process.stderr[-4000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------- the parent
def prepare(work: Path) -> tuple[str, int, dict]:
    """Train the recipe's tokenizer once; choose the token budget whose batches hold, on average, the real tokens
    of BATCH_SIZE pairs."""
    from hf_seq.data import corpora as data
    from hf_seq.data import tasks
    from hf_seq.training.recipes import load_recipe

    spec = {"output_dir": str(work / "run"), "steps": 1, "eval_every": 1}
    prepared = tasks.prepare(load_recipe(recipe(spec)), tokenizer_folder=work / "tokenizer")
    sources, targets = (data.sequence_lengths(prepared.train, c) for c in ("input_ids", "labels"))
    per_pair = (sum(sources) + sum(targets)) / len(sources)
    wanted = BATCH_SIZE * per_pair  # mean real tokens of a fixed batch

    def real_per_batch(budget: int) -> float:
        return (sum(sources) + sum(targets)) / len(data.token_budget_batches(sources, targets, budget))

    low, high = int(wanted), int(3 * wanted)
    while high - low > 1:  # the smallest budget whose batches hold at least `wanted` real tokens on average
        middle = (low + high) // 2
        low, high = (middle, high) if real_per_batch(middle) < wanted else (low, middle)
    facts = {"pairs": len(sources), "tokens_per_pair": per_pair, "mean_source": statistics.mean(sources)}
    return str(work / "tokenizer"), high, facts | {"mean_target": statistics.mean(targets)}


def time_to(curve: list[dict], loss: float) -> float | None:
    """Training seconds at which the validation loss first reaches `loss`, interpolated between evaluations."""
    before = {"train_seconds": 0.0, "eval_loss": None}
    for point in curve:
        if point["eval_loss"] <= loss:
            if before["eval_loss"] is None:
                return point["train_seconds"]
            share = (before["eval_loss"] - loss) / (before["eval_loss"] - point["eval_loss"])
            return before["train_seconds"] + share * (point["train_seconds"] - before["train_seconds"])
        before = point
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="training steps per run")
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of 40 steps: a smoke test")
    parser.add_argument("--output", help="markdown file to write (default: bench/results/batching_cpu.md)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    if args.quick:
        args.steps, args.eval_every, args.rounds = 40, 20, 1
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="hf-seq-bench-batching-"))
    results = {m: [] for m in METHODS}
    try:
        tokenizer, budget, facts = prepare(work)
        print(f"data.batch_tokens={budget} holds the real tokens of {BATCH_SIZE} pairs on average", flush=True)
        for r in range(args.rounds):
            for method in METHODS if r % 2 == 0 else METHODS[::-1]:
                spec = {
                    "method": method,
                    "tokenizer": tokenizer,
                    "batch_tokens": budget if method == "tokens" else None,
                    "steps": args.steps,
                    "eval_every": args.eval_every,
                    "output_dir": str(work / "run"),
                }
                run = launch(spec)
                shutil.rmtree(work / "run", ignore_errors=True)
                results[method].append(run)
                print(
                    f"round {r + 1}/{args.rounds}, {method}: {run['real_tokens_per_second']:,.0f} real tokens/s, "
                    f"padding {run['padding_fraction']:.1%}, {run['train_seconds']:.1f} s, eval_loss "
                    f"{run['curve'][-1]['eval_loss']:.3f}",
                    flush=True,
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, results, budget, facts, time.perf_counter() - started)
    print("\n" + text)
    if args.quick and not args.output:
        return  # a smoke test does not overwrite the recorded results
    output = Path(args.output) if args.output else Path(__file__).parent / "results" / "batching_cpu.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


def report(args, results: dict, budget: int, facts: dict, seconds: float) -> str:
    rounds = list(zip(results["fixed"], results["tokens"]))
    # per round: the higher of the two best validation losses, which both runs reach, and when each reached it
    targets = [max(min(p["eval_loss"] for p in run["curve"]) for run in pair) for pair in rounds]
    reach = {m: [time_to(pair[i]["curve"], loss) for pair, loss in zip(rounds, targets)] for i, m in enumerate(METHODS)}
    speed = [b["real_tokens_per_second"] / a["real_tokens_per_second"] for a, b in rounds]
    sooner = [a / b for a, b in zip(reach["fixed"], reach["tokens"])]
    rows = []
    for method in METHODS:
        runs = results[method]
        rows.append(
            f"| {method} | {median_range([r['real_tokens_per_step'] for r in runs], ',.0f')} "
            f"| {median_range([r['padding_fraction'] * 100 for r in runs], '.1f')} "
            f"| {median_range([r['real_tokens_per_second'] for r in runs], ',.0f')} "
            f"| {median_range([r['train_seconds'] for r in runs], '.0f')} "
            f"| {median_range([r['curve'][-1]['eval_loss'] for r in runs], '.3f')} "
            f"| {median_range(reach[method], '.0f')} |"
        )
    curve_rows = []
    for k, point in enumerate(results["fixed"][0]["curve"]):
        cells = []
        for method in METHODS:
            points = [run["curve"][k] for run in results[method]]
            cells.append(
                f"{statistics.median(p['train_seconds'] for p in points):.0f} s, "
                f"{statistics.median(p['eval_loss'] for p in points):.3f}"
            )
        curve_rows.append(f"| {point['step']} | {' | '.join(cells)} |")
    command = "python bench/bench_batching.py" + (
        " --quick" if args.quick else f" --steps {args.steps} --eval-every {args.eval_every} --rounds {args.rounds}"
    )
    lines = [
        "# Token-budget batches (`data.batch_tokens`) vs fixed-size batches: seq2seq on gettext (cpu)",
        "",
        f"`{command}` ({seconds / 60:.0f} minutes in all): the Transformer of recipes/transformer-gettext-tiny.yaml "
        f"trained for {args.steps} steps by `hf_seq.training.run` on {facts['pairs']:,} English -> French gettext "
        f"pairs ({facts['mean_source']:.1f} source + {facts['mean_target']:.1f} target tokens a pair on average), "
        f"one torch thread, a fresh process per run; fixed: {BATCH_SIZE} pairs a step; tokens: data.batch_tokens="
        f"{budget} (the budget whose batches hold, on average, the real tokens of {BATCH_SIZE} pairs). Median of "
        f"{args.rounds} interleaved round(s), range in brackets.",
        "",
        *machine_description("cpu"),
        "- the runs train on one torch thread (training.threads=1, OMP_NUM_THREADS=1); the bench's parent is idle "
        "meanwhile",
        "",
        "- real tokens: source + target tokens that are not padding; padding: pad / all tokens of the training "
        "batches, both sides (metrics.json `padding_fraction`);",
        "- seconds: training only (taking a step's batch, forward, backward, optimizer step), evaluations left out;",
        "- to loss: training seconds until eval_loss first reaches the higher of the two runs' best eval_loss in the "
        "round (a value both reach; interpolated between evaluations).",
        "",
        "| batches | real tokens / step | padding (%) | real tokens / s | seconds | final eval_loss | s to common loss |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Token budget / fixed: **{statistics.median(speed):.2f}x** the real tokens per second (per round: "
        f"{', '.join(f'{s:.2f}' for s in speed)}); the common validation loss "
        f"({', '.join(f'{t:.3f}' for t in targets)} per round) **{statistics.median(sooner):.2f}x** sooner "
        f"(per round: {', '.join(f'{s:.2f}' for s in sooner)}).",
        "",
        "Validation loss against training seconds (median over the rounds):",
        "",
        "| step | fixed: seconds, eval_loss | tokens: seconds, eval_loss |",
        "|---:|---:|---:|",
        *curve_rows,
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
