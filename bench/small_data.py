"""Which small-data settings help a translation model of a few tens of thousands of pairs: the measurement behind
the seq2seq recipes' values of `tokenizer.vocab_size`, `model.source_word_dropout`, `model.label_smoothing` and
`training.generation_length_penalty`.

Sennrich and Zhang (2019, "Revisiting Low-Resource Neural Machine Translation") list a small joint BPE vocabulary,
dropout of whole source words, label smoothing and aggressive dropout among what makes NMT work on little data.
This script changes one setting at a time from recipes/transformer-gettext-tiny.yaml on the embedded gettext pairs
(English -> French program messages), trains each variant for the same number of steps (so the load of the machine
changes the seconds, not the result), and scores validation BLEU and chrF with the recipe's decoding (beam search of
5). The length penalty is a decoding setting: it is compared on the base run's saved model. Every variant is a
fresh `hf_seq.training.run` with seed 0; `--seeds 2` repeats them with seed 1 and reports the range.

    python bench/small_data.py                  # writes bench/results/small_data_cpu.md (about 20 minutes)
    python bench/small_data.py --quick          # a smoke test: a few steps, nothing written
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench_gpt import machine_description  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPE = ROOT / "recipes" / "transformer-gettext-tiny.yaml"
VARIANTS = {  # name -> recipe overrides from the tiny recipe (vocab 4000, label smoothing 0.1, no word dropout)
    "base": {},
    "vocab 2000": {"tokenizer": {"vocab_size": 2000}},
    "vocab 8000": {"tokenizer": {"vocab_size": 8000}},
    "word dropout 0.1": {"model": {"source_word_dropout": 0.1}},
    "word dropout 0.2": {"model": {"source_word_dropout": 0.2}},
    "label smoothing 0": {"model": {"label_smoothing": 0.0}},
    "label smoothing 0.2": {"model": {"label_smoothing": 0.2}},
}
LENGTH_PENALTIES = (0.6, 1.0, 1.4)


def recipe_for(overrides: dict, output_dir: Path, steps: int, seed: int, eval_examples: int) -> dict:
    recipe = yaml.safe_load(RECIPE.read_text())
    for section, keys in overrides.items():
        recipe[section] = {**recipe.get(section, {}), **keys}
    recipe["data"] |= {"eval_examples": eval_examples}
    recipe["training"] |= {
        "output_dir": str(output_dir),
        "max_steps": steps,
        "eval_every": steps,
        "save_every": 10**9,
        "seed": seed,
        "log_with": "none",
    }
    return recipe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=800)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--eval-examples", type=int, default=400)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.eval_examples = 6, 8

    from hf_seq.training.pretraining import evaluate_folder, run
    from hf_seq.training.recipes import load_recipe

    before = machine_description("cpu")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, overrides in VARIANTS.items():
            for seed in range(args.seeds):
                folder = Path(tmp) / f"{name.replace(' ', '-')}-{seed}"
                start = time.perf_counter()
                recipe = load_recipe(recipe_for(overrides, folder, args.steps, seed, args.eval_examples))
                summary = run(recipe, progress=False)
                row = {"variant": name, "seed": seed, "seconds": time.perf_counter() - start}
                row |= {
                    k: summary[k]
                    for k in ("eval_loss", "eval_bleu", "eval_chrf", "eval_repetition_rate", "eval_length_ratio")
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
        base = Path(tmp) / "base-0"
        penalties = []
        for penalty in LENGTH_PENALTIES:
            got = evaluate_folder(base, overrides=[f"training.generation_length_penalty={penalty}"])
            penalties.append(
                {"length_penalty": penalty} | {k: got[k] for k in ("eval_bleu", "eval_chrf", "eval_length_ratio")}
            )
            print(json.dumps(penalties[-1]), flush=True)
    if args.quick:
        return

    def spread(values):
        return f"{statistics.fmean(values):.2f}" + (
            f" [{min(values):.2f}-{max(values):.2f}]" if len(values) > 1 else ""
        )

    lines = [
        "# Small-data settings for translation (bench/small_data.py)",
        "",
        f"recipes/transformer-gettext-tiny.yaml on the embedded gettext pairs (en -> fr), {args.steps} steps each, "
        f"one setting changed at a time, validation BLEU / chrF on {args.eval_examples} pairs with beam search of 5, "
        f"seeds: {args.seeds}.",
        "",
        "Machine, at the start:",
        *before,
        "",
        "and at the end:",
        *machine_description("cpu"),
        "",
        "| variant | validation BLEU | chrF | NLL (nats / token) | repetition rate | seconds |",
        "|---|---|---|---|---|---|",
    ]
    for name in VARIANTS:
        group = [r for r in rows if r["variant"] == name]
        lines.append(
            f"| {name} | {spread([r['eval_bleu'] for r in group])} | {spread([r['eval_chrf'] for r in group])} | "
            f"{spread([r['eval_loss'] for r in group])} | {spread([r['eval_repetition_rate'] for r in group])} | "
            f"{statistics.fmean(r['seconds'] for r in group):.0f} |"
        )
    lines += ["", "Length penalty, decoding the base run's model (seed 0):", "",
              "| length penalty | validation BLEU | chrF | length ratio |", "|---|---|---|---|"]  # fmt: skip
    for p in penalties:
        lines.append(
            f"| {p['length_penalty']:g} | {p['eval_bleu']:.2f} | {p['eval_chrf']:.2f} | {p['eval_length_ratio']:.3f} |"
        )
    out = ROOT / "bench" / "results" / "small_data_cpu.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
