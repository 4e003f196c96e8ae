"""Does a resumed run step as fast as a fresh one? A lineage size search stops each candidate at its rungs and
continues the survivor from its checkpoint (hf_seq.experiments.sizing), and under a seconds budget a slower resumed
step would cost the survivor steps a run trained from the start does not lose.

One round: the `gpt-tiny` recipe (a 4-layer GPT of width 128, the standard library's sources) on the wsd schedule at
its peak rate, one torch thread, no checkpoint but the last:

- fresh: a new process trains it for `--seconds` (the reference);
- resumed, same process: that process continues its own run for `--seconds` more, as the search continues a rung;
- resumed, new process: a copy of the fresh run's folder, continued for `--seconds` in another process.

Figures: seconds per training step, evaluations left out (metrics.json's `seconds - eval_seconds` over its steps; a
resumed segment's is the difference between its end and the fresh run's). Ratios: the reference's seconds per step
over the resumed run's, in the same round (above 1: the resumed run is faster); the table gives their medians over
the rounds. Within a round the runs go in the order above (the new process resumes a copy the first one made).

    python bench/bench_resume.py                 # 3 rounds of 40 s segments; writes bench/results/resume_cpu.md
    python bench/bench_resume.py --quick         # one round of 8 s segments: a smoke test (writes nothing)
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_gpt import machine_description  # noqa: E402  (the GPT bench's description of the machine and its load)

RUNS = ("fresh", "resumed, same process", "resumed, new process")


def recipe(folder: Path, seconds: float):
    from hf_seq.training.recipes import load_recipe

    overrides = [f"training.output_dir={folder}", "training.max_steps=null", f"training.max_seconds={seconds}",
                 "training.scheduler=wsd", "training.decay_fraction=0.0", "training.warmup_steps=10", "training.threads=1",
                 "training.eval_every=1000000", "training.save_every=1000000000", "training.log_with=none"]  # fmt: skip
    return load_recipe("gpt-tiny", overrides)


def per_step(folder: Path, since: dict | None = None) -> dict:
    """The run's steps and training seconds (evaluations left out) so far, and its seconds per step since `since`."""
    metrics = json.loads((folder / "metrics.json").read_text())
    now = {"steps": metrics["steps"], "seconds": metrics["seconds"] - metrics["eval_seconds"]}
    before = since or {"steps": 0, "seconds": 0.0}
    return now | {"per_step": (now["seconds"] - before["seconds"]) / max(now["steps"] - before["steps"], 1)}


def worker(mode: str, folder: Path, seconds: float, copy: Path) -> None:
    """One process of a round: `fresh` trains, copies its folder to `copy` and continues its own run; `resume`
    continues `folder`. Prints its figures as one JSON line."""
    from hf_seq.training.pretraining import run

    if mode == "fresh":
        result = run(recipe(folder, seconds), progress=False)
        fresh = per_step(folder)
        shutil.copytree(folder, copy)
        run(recipe(folder, 2 * seconds), resume=True, progress=False, prepared=result.prepared)
        print(json.dumps({"fresh": fresh, "resumed, same process": per_step(folder, fresh)}))
    else:
        start = per_step(folder)
        run(recipe(folder, 2 * seconds), resume=True, progress=False)
        print(json.dumps({"resumed, new process": per_step(folder, start)}))


def launch(*arguments) -> dict:
    done = subprocess.run([sys.executable, __file__, "--worker", *map(str, arguments)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench_resume: a worker failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_round(root: Path, seconds: float, index: int) -> dict:
    first, copy = root / f"round{index}", root / f"round{index}-copy"
    return launch("fresh", first, seconds, copy) | launch("resume", copy, seconds, copy)


def table(rounds: list[dict], seconds: float) -> list[str]:
    lines = ["| run | seconds per step | steps in the segment | speed ratio (fresh / run) |", "|---|---:|---:|---:|"]
    for name in RUNS:
        per = [r[name]["per_step"] for r in rounds]
        ratios = [r["fresh"]["per_step"] / r[name]["per_step"] for r in rounds]
        steps = statistics.median(round(seconds / p) for p in per)
        ratio = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})" if name != "fresh" else "1"
        lines.append(f"| {name} | {statistics.median(per):.4f} ({min(per):.4f}-{max(per):.4f}) | ~{steps:.0f} | {ratio} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0, help="each segment's training seconds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round of 8 s segments; writes nothing")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        mode, folder, seconds, copy = args.worker
        worker(mode, Path(folder), float(seconds), Path(copy))
        return
    seconds, rounds = (8.0, 1) if args.quick else (args.seconds, args.rounds)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as root:
        results = [one_round(Path(root), seconds, k) for k in range(rounds)]
    import torch

    torch.set_num_threads(1)
    lines = [
        "# A resumed run's step against a fresh one's (cpu)",
        "",
        f"`python bench/bench_resume.py`: the `gpt-tiny` recipe on the wsd schedule at its peak rate, one thread, "
        f"segments of {seconds:g} s; median of {rounds} round(s), range in brackets. Seconds per step leave the "
        "evaluations out.",
        "",
        *machine_description("cpu"),
        "",
        *table(results, seconds),
    ]
    print("\n".join(lines))
    if not args.quick:
        out = Path(__file__).parent / "results" / "resume_cpu.md"
        out.write_text("\n".join(lines) + "\n")
        print(f"written to {out}")


if __name__ == "__main__":
    main()
