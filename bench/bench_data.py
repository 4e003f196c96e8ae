"""Data preparation at scale: hf-seq's recipe-level path (`hf_seq.data.tasks.prepare` of a causal_lm recipe over local
text files: `datasets` reads them into Arrow, `tokenize_texts` and `pack_blocks` run through `datasets.map`,
batched, in `num_proc` processes, with Arrow caches) against the in-memory approach it replaced (every file read
into a Python list of strings, one `tokenizer(text)` call per document, a Python list of blocks,
`Dataset.from_dict`).

The bench makes its own corpus in a temporary folder: the standard library's .py files, concatenated and repeated
until the corpus reaches `--size-mb` (each copy of each file headed by a line naming the copy, so no two documents
are the same), split into `--files` files. A byte-level BPE tokenizer (vocabulary 8000) is trained on a small
sample with `hf_seq.data.tokenization.train_bpe_tokenizer`. Every run is a fresh process, so its peak memory is its own:

- hf-seq, cold: an empty datasets cache (HF_DATASETS_CACHE in the temporary folder), once per `--num-proc`;
- hf-seq, warm: the same again, the same tokenizer and files, over the cache the cold run left (the bench checks
  that no Arrow file was written or rewritten: the cache was reused);
- reference: the in-memory approach over the same documents (the same split on blank lines as `load_files`).

Figures per run: MB/s (corpus bytes on disk / wall seconds, imports excluded), MB per CPU-second (user + system
time of the process and its workers: less sensitive to other load on a shared machine), the peak resident set size
(`getrusage` of the process; its largest worker for num_proc > 1), and the peak anonymous memory of the whole
process tree (RssAnon, sampled every 50 ms: the heap, without the pages of memory-mapped Arrow files, which the
kernel can drop and re-read). Runs alternate within each round, the order reversed every other round; ratios are
the medians of the per-round ratios. Everything the bench writes is removed at the end.

    python bench/bench_data.py                 # 100 MB corpus, num_proc 1 and 2; writes bench/results/data_cpu.md
    python bench/bench_data.py --quick         # a 4 MB corpus, one round: a smoke test (writes nothing)
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).parent))
from bench_gpt import machine_description  # noqa: E402  (the GPT bench's description of the machine and its load)

BLOCK_SIZE = 128
VOCAB_SIZE = 8000
TOKENIZER_SAMPLE_CHARS = 2_000_000
REFERENCE = "reference"


# ---------------------------------------------------------------------------------------------- the corpus
def make_corpus(folder: Path, size_mb: float, num_files: int) -> list[Path]:
    """Standard library sources, repeated to `size_mb` MB (1e6 bytes) in `num_files` files of about equal size."""
    from hf_seq.data.corpora import stdlib_files

    sources = stdlib_files()
    root = Path(sysconfig.get_paths()["stdlib"])
    target, per_file = size_mb * 1e6, size_mb * 1e6 / num_files
    paths = [folder / f"corpus_{i:02d}.txt" for i in range(num_files)]
    handles = [path.open("w", encoding="utf-8") for path in paths]
    written, copy = 0, 0
    try:
        while written < target:
            for source in sources:
                text = f"# copy {copy} of {source.relative_to(root)}\n" + source.read_text("utf-8", errors="replace")
                handle = handles[min(int(written // per_file), num_files - 1)]
                written += handle.write(text + "\n\n")  # characters: the stdlib is almost all ASCII
                if written >= target:
                    break
            copy += 1
    finally:
        for handle in handles:
            handle.close()
    return paths


def train_tokenizer(folder: Path) -> Path:
    from hf_seq.data.corpora import stdlib_texts
    from hf_seq.data.tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(stdlib_texts(max_chars=TOKENIZER_SAMPLE_CHARS), vocab_size=VOCAB_SIZE)
    tokenizer.save_pretrained(folder)
    return folder


# ---------------------------------------------------------------------------------------------- one run (child)
def _status_kib(field: str) -> int:
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))


def run_hf_seq(files: list[str], tokenizer_dir: str, num_proc: int | None) -> dict:
    from hf_seq.data.tasks import prepare
    from hf_seq.training.recipes import load_recipe

    recipe = load_recipe(
        {
            "family": "gpt",
            "task": "causal_lm",
            "data": {"dataset": files, "block_size": BLOCK_SIZE, "num_proc": num_proc},
            "tokenizer": {"path": tokenizer_dir},
        }
    )
    prepared = prepare(recipe)
    blocks = len(prepared.train) + sum(len(d) for d in prepared.held_out.values())
    return {"blocks": blocks}


def run_reference(files: list[str], tokenizer_dir: str) -> dict:
    """The in-memory approach: every document in a Python list, one tokenizer call per document, the blocks in a
    Python list, then one Arrow table in memory (input_ids only; the old code also stored a copy as labels)."""
    import datasets
    from transformers import AutoTokenizer

    from hf_seq.data.corpora import pack_token_ids

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    texts = []
    for path in files:
        texts += [p for p in Path(path).read_text(encoding="utf-8").split("\n\n") if p]  # load_files' documents
    documents = (tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] for text in texts)
    blocks = list(pack_token_ids(documents, BLOCK_SIZE, tokenizer.eos_token_id))
    dataset = datasets.Dataset.from_dict({"input_ids": blocks})
    return {"blocks": len(dataset)}


def child(spec: dict) -> None:
    import datasets  # noqa: F401  (imports before the clock and the memory baseline, as in the hf-seq run)
    import transformers  # noqa: F401

    import hf_seq.data.tasks  # noqa: F401

    baseline_mib = _status_kib("VmRSS") / 1024
    start, start_cpu = time.perf_counter(), os.times()
    if spec["method"] == REFERENCE:
        out = run_reference(spec["files"], spec["tokenizer"])
    else:
        out = run_hf_seq(spec["files"], spec["tokenizer"], spec["num_proc"])
    seconds, end_cpu = time.perf_counter() - start, os.times()
    cpu = sum(end_cpu[:4]) - sum(start_cpu[:4])  # user + system, of this process and its reaped workers
    out |= {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "baseline_mib": baseline_mib,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }
    print(json.dumps(out))


# ---------------------------------------------------------------------------------------------- the parent
def _tree_anon_kib(process: psutil.Process) -> int:
    """Anonymous memory of the process and its workers, proportional: a page a forked worker still shares with the
    process (copy-on-write) counts once (Pss_Anon; RssAnon, which counts it in each, on kernels before 5.x)."""
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            with open(f"/proc/{p.pid}/smaps_rollup") as handle:
                fields = dict(line.split(":", 1) for line in handle if line.count(":") == 1)
            total += int((fields.get("Pss_Anon") or fields["Anonymous"]).split()[0])
        except (OSError, KeyError):
            pass  # a worker that ended between the listing and the read
    return total


def launch(spec: dict, cache: Path, script: str = __file__) -> dict:
    """One run in a fresh process (`script --child SPEC`) with its own datasets cache; its figures and the sampled
    peak of the process tree's anonymous memory."""
    env = os.environ | {
        "HF_DATASETS_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
    command = [sys.executable, script, "--child", json.dumps(spec)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, done = [0], threading.Event()

    def sample():
        watched = psutil.Process(process.pid)
        while not done.is_set():
            try:
                peak[0] = max(peak[0], _tree_anon_kib(watched))
            except psutil.NoSuchProcess:
                return
            done.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"run {spec['method']} failed ({process.returncode}):\n{stderr[-4000:]}")
    return json.loads(stdout.strip().splitlines()[-1]) | {"tree_anon_peak_mib": peak[0] / 1024}


def arrow_files(cache: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in cache.rglob("*.arrow")}


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def run_pair(spec: dict, cache: Path) -> tuple[dict, dict, dict]:
    """A cold run over an empty cache and a warm run over what it left; whether the warm run wrote any Arrow
    file; then the cache is removed."""
    shutil.rmtree(cache, ignore_errors=True)
    cold = launch(spec, cache)
    before, cache_mb = arrow_files(cache), folder_mb(cache)
    warm = launch(spec, cache)
    after = arrow_files(cache)
    written = sorted(set(after.items()) - set(before.items()))
    shutil.rmtree(cache, ignore_errors=True)
    return cold, warm, {"cache_mb": cache_mb, "arrow_files": len(before), "rewritten": len(written)}


def median_range(values: list[float], fmt: str) -> str:
    text = format(statistics.median(values), fmt)
    return text if len(values) == 1 else f"{text} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=100.0, help="corpus size in MB (1e6 bytes)")
    parser.add_argument("--files", type=int, default=8, help="how many files the corpus is split into")
    parser.add_argument(
        "--num-proc",
        type=int,
        nargs="+",
        default=[0, 2],
        help="data.num_proc values to run; 0: none (the recipe default: map in the process itself; datasets runs "
        "num_proc=1 in a pool of one forked worker)",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a 4 MB corpus and one round: a smoke test")
    parser.add_argument("--output", help="markdown file to write (default: bench/results/data_cpu.md)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(json.loads(args.child))
    for name in ("size_mb", "files", "rounds"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if any(n < 0 for n in args.num_proc):
        parser.error(f"--num-proc values must be 0 (none) or positive, got {args.num_proc}")
    size_mb, rounds = (4.0, 1) if args.quick else (args.size_mb, args.rounds)

    work = Path(tempfile.mkdtemp(prefix="hf-seq-bench-data-"))
    # Each cold run leaves about 6x the corpus in Arrow files (text, token ids, blocks, both splits); one at a time.
    needed = (size_mb * 8 + 500) * 1e6
    free = shutil.disk_usage(work).free
    if free < needed:
        shutil.rmtree(work)
        sys.exit(f"{work.parent} has {free / 1e9:.1f} GB free; this bench needs about {needed / 1e9:.1f} GB")
    os.environ["HF_DATASETS_CACHE"] = str(work / "parent-cache")  # the tokenizer training's imports, if any
    try:
        files = make_corpus(work, size_mb, args.files)
        corpus_bytes = sum(p.stat().st_size for p in files)
        tokenizer_dir = str(train_tokenizer(work / "tokenizer"))
        print(f"corpus: {corpus_bytes / 1e6:.1f} MB in {len(files)} files under {work}; tokenizer trained")
        specs = {f"hf-seq num_proc={n or None}": {"method": "hf-seq", "num_proc": n or None} for n in args.num_proc}
        specs[REFERENCE] = {"method": REFERENCE}
        for spec in specs.values():
            spec |= {"files": [str(p) for p in files], "tokenizer": tokenizer_dir}
        runs = {name: [] for name in specs}  # name -> per round: {"cold": ..., "warm": ..., "cache": ...}
        for r in range(rounds):
            order = list(specs) if r % 2 == 0 else list(specs)[::-1]
            for name in order:
                if name == REFERENCE:
                    result = {"cold": launch(specs[name], work / "reference-cache")}
                    shutil.rmtree(work / "reference-cache", ignore_errors=True)
                else:
                    cold, warm, cache = run_pair(specs[name], work / "cache")
                    result = {"cold": cold, "warm": warm, "cache": cache}
                runs[name].append(result)
                cold = result["cold"]
                print(
                    f"round {r + 1}/{rounds} {name}: {corpus_bytes / 1e6 / cold['seconds']:.2f} MB/s, "
                    f"peak RSS {cold['peak_mib']:.0f} MiB, anon peak {cold['tree_anon_peak_mib']:.0f} MiB"
                    + (
                        f"; warm {result['warm']['seconds']:.2f} s, Arrow files rewritten: "
                        f"{result['cache']['rewritten']} of {result['cache']['arrow_files']}"
                        if "warm" in result
                        else ""
                    ),
                    flush=True,
                )
        text = report(args, runs, corpus_bytes, len(files), size_mb, rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n" + text)
    output = Path(args.output) if args.output else Path(__file__).parent / "results" / "data_cpu.md"
    if args.quick and not args.output:
        return  # a smoke test does not overwrite the recorded results
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"written to {output}")


def report(args, runs: dict, corpus_bytes: int, num_files: int, size_mb: float, rounds: int) -> str:
    import datasets
    import tokenizers

    mb = corpus_bytes / 1e6
    reference = runs[REFERENCE]

    def rate(run):
        return mb / run["seconds"]

    def per_cpu(run):
        return mb / run["cpu_seconds"]

    def peak(run):  # the process / its largest worker
        return f"{run['peak_mib']:,.0f}" + (f" / {run['worker_peak_mib']:,.0f}" if run["worker_peak_mib"] else "")

    rows = []
    for name, results in runs.items():
        for phase in ("cold", "warm") if name != REFERENCE else ("cold",):
            label = name if name == REFERENCE else f"{name}, {phase} cache"
            ours = [res[phase] for res in results]
            speed = [rate(o) / rate(ref["cold"]) for o, ref in zip(ours, reference)]
            anon = [o["tree_anon_peak_mib"] / ref["cold"]["tree_anon_peak_mib"] for o, ref in zip(ours, reference)]
            rows.append(
                f"| {label} | {median_range([o['seconds'] for o in ours], '.1f')} "
                f"| {median_range([rate(o) for o in ours], '.2f')} | {median_range([per_cpu(o) for o in ours], '.2f')} "
                f"| {peak(min(ours, key=lambda o: o['peak_mib']))} "
                f"| {statistics.median(o['tree_anon_peak_mib'] for o in ours):,.0f} "
                f"| {statistics.median(o['blocks'] for o in ours):,.0f} "
                + (
                    "| 1 | 1 |"
                    if name == REFERENCE
                    else f"| **{median_range(speed, '.2f')}** | {median_range(anon, '.2f')} |"
                )
            )
    cache_lines = []
    for name, results in runs.items():
        if name == REFERENCE:
            continue
        warm_speedup = [res["cold"]["seconds"] / res["warm"]["seconds"] for res in results]
        rewritten = [res["cache"]["rewritten"] for res in results]
        cache_lines.append(
            f"- {name}: the cold run left {statistics.median(res['cache']['cache_mb'] for res in results):,.0f} MB "
            f"in {results[0]['cache']['arrow_files']} Arrow files; the warm run wrote "
            + ("none of them again (the cache was reused)" if not any(rewritten) else f"{max(rewritten)} of them again")
            + f" and took 1/{median_range(warm_speedup, '.0f')} of the cold run's time"
        )
    baseline = statistics.median(res["cold"]["baseline_mib"] for results in runs.values() for res in results)
    command = " ".join(
        ["python bench/bench_data.py"]
        + (["--quick"] if args.quick else [])
        + ([f"--size-mb {args.size_mb:g}"] if args.size_mb != 100 and not args.quick else [])
        + ([f"--files {args.files}"] if args.files != 8 else [])
        + ([f"--num-proc {' '.join(map(str, args.num_proc))}"] if args.num_proc != [0, 2] else [])
        + ([f"--rounds {args.rounds}"] if args.rounds != 2 and not args.quick else [])
    )
    lines = [
        "# Data preparation: hf-seq (datasets.map, Arrow cache) vs the in-memory approach (cpu)",
        "",
        f"`{command}`: a causal_lm recipe (`hf_seq.data.tasks.prepare`, block size {BLOCK_SIZE}, 5% of the documents "
        f"held out) over a {mb:.1f} MB corpus of standard-library sources in {num_files} files, byte-level BPE with a "
        f"{VOCAB_SIZE:,}-token vocabulary; median of {rounds} interleaved round(s), range in brackets. Each run is a "
        "fresh process; its time starts after the imports.",
        "Reference: the documents in a Python list, one tokenizer call per document, a Python list of blocks, "
        "`Dataset.from_dict`. Ratios: the run / the reference in the same round; above 1 is faster, below 1 is less "
        "memory.",
        "",
        *machine_description("cpu"),
        f"- datasets {datasets.__version__}, tokenizers {tokenizers.__version__}",
        "",
        "- MB/s: corpus bytes on disk / wall seconds; MB/CPU-s: per CPU-second of the process and its workers "
        "(user + system). The batched tokenizer call runs on every core (tokenizers' own threads), the reference's "
        "one-document calls on one.",
        "- peak RSS: `getrusage` of the process / of its largest worker (num_proc > 1; a forked worker's RSS "
        "includes the pages it shares with the process), lowest over the rounds; it counts the pages of "
        "memory-mapped Arrow files the run touched, which the kernel can drop. Anon peak: the anonymous memory of "
        "the process and its workers (Pss_Anon, pages shared after the fork counted once, sampled every 50 ms), "
        "the part that has to fit in RAM. Both include the imports (about "
        f"{baseline:,.0f} MiB resident before the timed part).",
        "",
        "| run | seconds | MB/s | MB/CPU-s | peak RSS (MiB) | anon peak (MiB) | blocks | speed ratio | anon memory ratio |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "Arrow cache (HF_DATASETS_CACHE in a temporary folder, removed after each pair of runs):",
        "",
        *cache_lines,
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
