"""Memory and speed of a streamed corpus (`data.streaming: true`) against the cached path, as the corpus grows.

The bench makes its own prose corpus in a temporary folder: the docstrings of the standard library (modules,
classes, functions; about 1.8 MB of English with code in it), one paragraph per document, repeated until the corpus
reaches each `--size-mb`, every document headed by the copy it belongs to (so no two are the same), in `--files`
files; a small held-out file beside it (`data.validation`, the same for both paths). A byte-level BPE tokenizer
(vocabulary 8,000) is trained once on the first copy and given to both paths as `tokenizer.path`.

Each run is a fresh process that trains a tiny GPT (2 layers, width 64, blocks of 128, batch 16) for `--steps` steps
through `hf_seq.training.run`:

- cached: `tasks.prepare` tokenizes and packs the whole corpus into an Arrow cache (an empty HF_DATASETS_CACHE in
  the temporary folder, removed after the run), then trains on shuffled blocks;
- streamed: the same recipe with `data.streaming: true` (shuffle buffer of 1,000 blocks): documents are read,
  tokenized and packed as the steps ask for them.

Figures: the peak resident set size (`getrusage`), the peak anonymous memory of the process tree (Pss_Anon, sampled
every 50 ms by `bench_data.launch`: the part that has to fit in RAM; the pages of memory-mapped Arrow files are
not in it), the time to the first step (from the start of `run`, imports excluded, to the end of step 1: data
preparation, model, first batch) and training tokens/s (steps 2..N, the data time of each step included). Runs
alternate within each round, the order reversed every other round. The cached path tokenizes the whole corpus
before its first step (about 0.4-1 MB/s on 2 cores), so it is run only up to `--cached-max-mb`.

    python bench/bench_streaming.py               # 100 MB and 1,000 MB; writes bench/results/streaming_cpu.md
    python bench/bench_streaming.py --quick       # a 5 MB corpus, one round: a smoke test (writes nothing)
"""

import argparse
import ast
import json
import os
import resource
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_data import _status_kib, launch, median_range  # noqa: E402  (one run in a fresh process, its memory)
from bench_gpt import machine_description  # noqa: E402

BLOCK_SIZE = 128
BATCH_SIZE = 16
VOCAB_SIZE = 8000
MODEL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": BLOCK_SIZE}
METHODS = ("cached", "streamed")


# ---------------------------------------------------------------------------------------------- the corpus
def docstrings() -> list[tuple[str, str]]:
    """(module, paragraph) for every paragraph of every docstring in the standard library, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(root.rglob("*.py")):
        if {"test", "tests", "idle_test", "site-packages", "dist-packages"} & set(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text("utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                text = ast.get_docstring(node) or ""
                found += [(module, p.strip()) for p in text.split("\n\n") if p.strip()]
    return found


def make_corpus(folder: Path, paragraphs: list[tuple[str, str]], size_mb: float, num_files: int) -> list[Path]:
    """`paragraphs` repeated to `size_mb` MB (1e6 bytes) in `num_files` files, one document per paragraph."""
    target, per_file = size_mb * 1e6, size_mb * 1e6 / num_files
    paths = [folder / f"corpus_{i:02d}.txt" for i in range(num_files)]
    handles = [path.open("w", encoding="utf-8") for path in paths]
    written, copy = 0, 0
    try:
        while written < target:
            for module, text in paragraphs:
                handle = handles[min(int(written // per_file), num_files - 1)]
                document = f"Copy {copy} of {module}: {text}\n\n"
                handle.write(document)
                written += len(document.encode())
                if written >= target:
                    break
            copy += 1
    finally:
        for handle in handles:
            handle.close()
    return paths


def train_tokenizer(folder: Path, paragraphs: list[tuple[str, str]]) -> str:
    from hf_seq.data.tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer([text for _, text in paragraphs], vocab_size=VOCAB_SIZE)
    tokenizer.save_pretrained(folder)
    return str(folder)


# ---------------------------------------------------------------------------------------------- one run (child)
def child(spec: dict) -> None:
    import hf_seq.training.pretraining as training
    from hf_seq.training.recipes import load_recipe

    recipe = load_recipe(
        {
            "family": "gpt",
            "model": MODEL,
            "tokenizer": {"path": spec["tokenizer"]},
            "data": {
                "dataset": spec["files"],
                "validation": [spec["validation"]],
                "block_size": BLOCK_SIZE,
                "eval_examples": 32,
                "streaming": spec["method"] == "streamed",
            },
            "training": {
                "output_dir": spec["output_dir"],
                "max_steps": spec["steps"],
                "batch_size": BATCH_SIZE,
                "eval_every": 10**6,
                "save_every": 10**6,
                "log_with": None,
                "threads": 1,  # the model on one thread in every run: the cores left do the data work
            },
        }
    )
    ends = []  # the end of each step
    train_step = training.train_step

    def timed_step(*args, **kwargs):
        loss = train_step(*args, **kwargs)
        ends.append(time.perf_counter())
        return loss

    training.train_step = timed_step
    baseline_mib = _status_kib("VmRSS") / 1024
    start = time.perf_counter()
    summary = training.run(recipe, progress=False)
    tokens_per_step = summary["tokens"] / summary["steps"]
    out = {
        "first_step_seconds": ends[0] - start,
        "tokens_per_second": tokens_per_step * (len(ends) - 1) / (ends[-1] - ends[0]),
        "baseline_mib": baseline_mib,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "eval_loss": summary.get("eval_loss"),
    }
    print(json.dumps(out))


# ---------------------------------------------------------------------------------------------- the parent
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, nargs="+", default=[100.0, 1000.0], help="corpus sizes, MB (1e6 B)")
    parser.add_argument("--cached-max-mb", type=float, default=100.0, help="run the cached path up to this size")
    parser.add_argument("--files", type=int, default=8, help="how many files each corpus is split into")
    parser.add_argument("--steps", type=int, default=100, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a 5 MB corpus, 20 steps, one round: a smoke test")
    parser.add_argument("--output", help="markdown file to write (default: bench/results/streaming_cpu.md)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    if args.quick:
        args.size_mb, args.steps, args.rounds = [5.0], 20, 1
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="hf-seq-bench-streaming-"))
    # the largest corpus, and the Arrow cache of the cached path (about 3.5x its corpus) beside its own corpus
    needed = (max(args.size_mb) + 4.5 * min(max(args.size_mb), args.cached_max_mb) + 500) * 1e6
    free = shutil.disk_usage(work).free
    if free < needed:
        shutil.rmtree(work)
        sys.exit(f"{work.parent} has {free / 1e9:.1f} GB free; this bench needs about {needed / 1e9:.1f} GB")
    os.environ["HF_DATASETS_CACHE"] = str(work / "parent-cache")
    results = {}  # (size, method) -> [run, ...]
    try:
        paragraphs = docstrings()
        tokenizer = train_tokenizer(work / "tokenizer", paragraphs)
        validation = work / "validation.txt"
        validation.write_text("".join(f"Held out {m}: {t}\n\n" for m, t in paragraphs[::50]))
        for size in args.size_mb:
            folder = work / f"corpus-{size:g}"
            folder.mkdir()
            files = make_corpus(folder, paragraphs, size, args.files)
            corpus_mb = sum(p.stat().st_size for p in files) / 1e6
            methods = [m for m in METHODS if m == "streamed" or size <= args.cached_max_mb]
            for r in range(args.rounds):
                for method in methods if r % 2 == 0 else methods[::-1]:
                    spec = {
                        "method": method,
                        "files": [str(p) for p in files],
                        "validation": str(validation),
                        "tokenizer": tokenizer,
                        "steps": args.steps,
                        "output_dir": str(work / "run"),
                    }
                    run = launch(spec, work / "cache", script=__file__) | {"corpus_mb": corpus_mb}
                    shutil.rmtree(work / "cache", ignore_errors=True)
                    shutil.rmtree(work / "run", ignore_errors=True)
                    results.setdefault((size, method), []).append(run)
                    print(
                        f"{corpus_mb:,.0f} MB, round {r + 1}/{args.rounds}, {method}: first step after "
                        f"{run['first_step_seconds']:.1f} s, {run['tokens_per_second']:,.0f} tokens/s, peak RSS "
                        f"{run['peak_mib']:,.0f} MiB, anon peak {run['tree_anon_peak_mib']:,.0f} MiB",
                        flush=True,
                    )
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, results, len(paragraphs), time.perf_counter() - started)
    print("\n" + text)
    if args.quick and not args.output:
        return  # a smoke test does not overwrite the recorded results
    output = Path(args.output) if args.output else Path(__file__).parent / "results" / "streaming_cpu.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


def report(args, results: dict, paragraphs: int, seconds: float) -> str:
    import datasets

    rows = []
    for (_, method), runs in results.items():
        rows.append(
            f"| {runs[0]['corpus_mb']:,.0f} | {method} | {median_range([r['first_step_seconds'] for r in runs], '.1f')} "
            f"| {median_range([r['tokens_per_second'] for r in runs], ',.0f')} "
            f"| {min(r['peak_mib'] for r in runs):,.0f} | {statistics.median(r['tree_anon_peak_mib'] for r in runs):,.0f} |"
        )
    baseline = statistics.median(r["baseline_mib"] for runs in results.values() for r in runs)
    command = " ".join(
        ["python bench/bench_streaming.py"]
        + (["--quick"] if args.quick else [f"--size-mb {' '.join(f'{s:g}' for s in args.size_mb)}"])
        + ([f"--cached-max-mb {args.cached_max_mb:g}"] if not args.quick else [])
        + ([f"--steps {args.steps}", f"--rounds {args.rounds}"] if not args.quick else [])
    )
    lines = [
        "# Streaming corpora: `data.streaming: true` vs the cached path (cpu)",
        "",
        f"`{command}` ({seconds / 60:.0f} minutes in all): a tiny GPT (2 layers, width 64) trained for {args.steps} "
        f"steps of {BATCH_SIZE} blocks of {BLOCK_SIZE} tokens by `hf_seq.training.run`, over a corpus of standard-library "
        f"docstrings ({paragraphs:,} paragraphs, one document each, repeated with a copy header) in {args.files} files, "
        f"byte-level BPE with a {VOCAB_SIZE:,}-token vocabulary given as tokenizer.path. Each run is a fresh process; "
        f"median of {args.rounds} interleaved round(s), range in brackets.",
        "",
        *machine_description("cpu"),
        f"- datasets {datasets.__version__}; in the runs the model trains on one torch thread (training.threads=1) "
        "and the tokenizer uses both cores",
        "",
        "- first step: seconds from the start of `run` (imports excluded) to the end of step 1: the cached path "
        "tokenizes and packs the whole corpus into an Arrow cache first (an empty cache each run), the streamed path "
        "reads the documents that fill its shuffle buffer (1,000 blocks).",
        "- tokens/s: training tokens of steps 2..N per second, the time to take each step's blocks included (the "
        "streamed path tokenizes while it trains).",
        "- peak RSS: `getrusage` of the process, lowest over the rounds (it counts the pages of memory-mapped Arrow "
        "files the run touched); anon peak: anonymous memory of the process tree (Pss_Anon, sampled every 50 ms), "
        f"the part that has to fit in RAM. Both include the imports (about {baseline:,.0f} MiB resident before `run`).",
        "",
        "| corpus (MB) | path | first step (s) | tokens/s | peak RSS (MiB) | anon peak (MiB) |",
        "|---:|---|---:|---:|---:|---:|",
        *rows,
        "",
    ]
    skipped = [s for s in args.size_mb if s > args.cached_max_mb]
    if skipped:
        lines += [
            f"The cached path was not run on {', '.join(f'{s:g}' for s in skipped)} MB (`--cached-max-mb "
            f"{args.cached_max_mb:g}`): it tokenizes the whole corpus before its first step, so its first step "
            "there would come about that many times later than at the size it was run on.",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
