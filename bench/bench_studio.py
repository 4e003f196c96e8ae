"""How fast the studio answers: every view on 200 tokens, on models of the small recipes' shapes (gpt-tiny,
lstm-tiny) and the `--demo` models, the view's computation and its figure timed apart (median of `--repeats`), and
how long `hf-seq studio --demo` takes to serve its page. The goal (issue "hf-seq studio"): a view under 1 s for 200
tokens, the demo up in under 60 s on 2 CPU cores. The PNG column is what the page adds: the figure rendered as the app
saves it (`views.save_png`: dpi 110, at most 1,800 pixels wide).

    python bench/bench_studio.py [--repeats 3] [--skip-demo-serve]

Prints a Markdown table; record the machine and its load with it (bench/results/studio_cpu.md).
"""

import argparse
import io
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

import torch


def timed(function, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def recipe_model(name: str, tokenizer):
    """A model of the shipped recipe `name`'s shape (untrained: the time does not depend on the weights)."""
    from hf_seq.registry import family
    from hf_seq.studio import Loaded
    from hf_seq.training.recipes import load_recipe
    from hf_seq.training.runs import build_config

    recipe = load_recipe(name)
    fam = family(recipe.family)
    model = fam.model_class("AutoModelForCausalLM")(build_config(recipe, tokenizer)).eval()
    return Loaded(name, model, tokenizer, fam.name)


def text_of(tokenizer, count: int) -> str:
    from hf_seq.data.corpora import stdlib_texts

    ids = tokenizer(stdlib_texts(max_chars=20_000)[0])["input_ids"][:count]
    return tokenizer.decode(ids)


def views(models, text: str, date: str):
    from hf_seq.studio import inside, tokens

    by_kind = {}
    for m in models:
        by_kind.setdefault(m.kind, m)
    lms = [m for m in models if m.kind in ("gpt", "rnn", "ssm", "conv", "window", "hmm", "ngram")]
    first = next(m for m in lms if m.kind != "ngram")
    rows = [("surprisal", m.name, lambda m=m: tokens.surprisal(m, text), tokens.figure_surprisal) for m in lms]
    rows += [
        (
            "compare",
            f"{lms[0].name} / {first.name}",
            lambda: tokens.compare(lms[0], first, text),
            tokens.figure_compare,
        ),
        ("lineage strip", f"{len(lms)} models", lambda: tokens.lineage_strip(lms, text), tokens.figure_lineage_strip),
        ("context reach", first.name, lambda: tokens.context_reach(first, text, 150), tokens.figure_context_reach),
        ("sampling", first.name, lambda: tokens.sampling(first, text), tokens.figure_sampling),
    ]
    if "ngram" in by_kind:
        rows.append(("n-gram back-off", "5-gram", lambda: tokens.ngram_backoff(by_kind["ngram"], text),
                     tokens.figure_ngram_backoff))  # fmt: skip
    for m in models:
        if m.kind == "rnn":
            rows.append(("recurrent state", m.name, lambda m=m: inside.recurrent_state(m, text),
                         inside.figure_recurrent_state))  # fmt: skip
        if m.kind in ("gpt", "bert"):
            rows.append(("attention", m.name, lambda m=m: inside.attention(m, text), inside.figure_attention))
        if m.kind == "ssm":
            rows.append(("state space", m.name, lambda m=m: inside.ssm_inside(m, text), inside.figure_ssm_inside))
        if m.kind == "bahdanau":
            rows.append(("alignment", m.name, lambda m=m: inside.alignment_steps(m, date, 12),
                         inside.figure_alignment_steps))  # fmt: skip
        if m.kind == "transformer":
            rows.append(("cross-attention", m.name, lambda m=m: inside.cross_attention_average(m, date),
                         inside.figure_cross_attention_average))  # fmt: skip
    return rows


def demo_serve_seconds() -> float:
    """`hf-seq studio --demo` from the command to a page that answers (Gradio's /gradio_api/info)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "hf_seq.cli", "studio", "--demo", "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=os.environ | {"HF_HUB_OFFLINE": "1"})  # fmt: skip
    try:
        while time.perf_counter() - start < 300:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/gradio_api/info", timeout=2)
                return time.perf_counter() - start
            except OSError:
                time.sleep(0.5)
        return float("nan")
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-demo-serve", action="store_true")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    from hf_seq.studio.demo import demo_models
    from hf_seq.studio.views import save_png

    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPU cores, torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"1-min load {load:.2f} at the start")  # fmt: skip
    models = demo_models(say=lambda *a: None)
    tokenizer = models[0].tokenizer
    models += [recipe_model("gpt-tiny", tokenizer), recipe_model("lstm-tiny", tokenizer)]
    text = text_of(tokenizer, 200)
    print(
        "\n| view | model | tokens | view (s) | figure (s) | PNG (s) | total (s) |\n|---|---|---:|---:|---:|---:|---:|"
    )
    for view, name, compute, figure in views(models, text, "Thu, Mar 5, 1998"):
        seconds, result = timed(compute, args.repeats)
        drawn, fig = timed(lambda result=result, figure=figure: figure(result), args.repeats)
        encoded, _ = timed(lambda fig=fig: save_png(fig, io.BytesIO()), args.repeats)
        count = len(result.get("tokens") or result.get("column_labels") or [])
        total = seconds + drawn + encoded
        print(f"| {view} | {name} | {count} | {seconds:.3f} | {drawn:.3f} | {encoded:.3f} | {total:.3f} |")
    if not args.skip_demo_serve:
        print(f"\n`hf-seq studio --demo` serving its page after {demo_serve_seconds():.0f} s")
    print(f"1-min load {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
