"""Back-to-back repetition in translations ("un dispositivo de entrada de entrada"): where it comes from and what
blocking it costs. One trained translation model (a run folder of `hf-seq train`, or a member of `hf-seq lineage
--task translation`) translates the test pairs under several decodings, each a change of the recipe's
`training.generation_*` keys through `hf_seq.data.tasks.translate` (the evaluations' own path):

- greedy, and beam search of 5 with length penalty 1.0 (the runs' decoding) and 0.0: is it the search or the model;
- a cap of 2 x source tokens + 20 in place of 1.2 x + 10: do stuttering outputs run into the length cap;
- beam search with `generation_block_repeats` 4 (`hf_seq.models.seq2seq.BackToBackRepeatBlock`): the fix.

It reports test BLEU, chrF, the repetition rate (`hf_seq.evaluation.repeats_back_to_back`: a run of 1-4 words
repeated back to back), the length ratio and the outputs that reach the cap, the references' repetition rate, and
for the stuttering outputs of the runs' decoding, how often the model itself scores the output higher than the same
output with the repeated run removed once (by total log-probability, and per token as length penalty 1 ranks).

    python bench/repetition.py FOLDER [--pairs TEST.jsonl] [--member luong] [--seed 0] [--output FILE.md]

FOLDER: a run folder (recipe.json beside the model; give --pairs, a jsonl of `source` / `target`), or the output
folder of `hf-seq lineage --task translation` (its member folder and data/test.jsonl are found).
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_gpt import machine_description  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OFF = {"training.generation_block_repeats": 0}
DECODINGS = {  # name: recipe overrides of the run's own decoding
    "greedy": OFF | {"training.generation_num_beams": 1},
    "beam 5, length penalty 1.0 (before)": OFF,
    "beam 5, length penalty 0.0": OFF | {"training.generation_length_penalty": 0.0},
    "beam 5, cap 2.0 x source + 20": OFF
    | {"training.generation_max_length_a": 2.0, "training.generation_max_length_b": 20},
    "beam 5, block_repeats 4 (after)": {"training.generation_block_repeats": 4},
}
BEFORE = "beam 5, length penalty 1.0 (before)"


def run_folder(folder: Path, member: str, seed: int) -> tuple[Path, Path | None]:
    """The model folder and, for a lineage folder, its test pairs."""
    if (folder / "recipe.json").exists():
        return folder, None
    lineage = json.loads((folder / "lineage.json").read_text())
    single = len(lineage["sizes"]) == 1 and lineage["seeds"] == 1
    name = member if single else f"{member}-{lineage['sizes'][-1]}-seed{seed}"
    return folder / name, folder / "data" / "test.jsonl"


def without_first_repeat(words: list[str], longest: int = 4) -> list[str] | None:
    """`words` with the first back-to-back repeated run removed once, or None if none repeats."""
    low = [w.lower() for w in words]
    for n in range(1, longest + 1):
        for i in range(len(words) - 2 * n + 1):
            if low[i : i + n] == low[i + n : i + 2 * n] and any(c.isalnum() for w in low[i : i + n] for c in w):
                return words[: i + n] + words[i + 2 * n :]
    return None


def model_prefers_the_stutter(model, tokenizer, sources, hypotheses) -> dict:
    """For each hypothesis that repeats: does the model give it a higher log-probability than the same text with
    the repeat removed (in total, and per token)?"""
    import torch

    from hf_seq.evaluation.metrics import repeats_back_to_back

    @torch.no_grad()
    def score(source, target):
        x = tokenizer(source, add_special_tokens=False, return_tensors="pt", truncation=True, max_length=128)
        y = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        logits = model(**x, labels=torch.tensor([y])).logits.float()
        return logits.log_softmax(-1)[0, torch.arange(len(y)), torch.tensor(y)].sum().item(), len(y)

    total = per_token = count = 0
    for source, hypothesis in zip(sources, hypotheses):
        if not repeats_back_to_back(hypothesis.split()):
            continue
        (a, la), (b, lb) = score(source, hypothesis), score(source, " ".join(without_first_repeat(hypothesis.split())))
        count, total, per_token = count + 1, total + (a > b), per_token + (a / la > b / lb)
    return {"stuttering": count, "higher_in_total": total, "higher_per_token": per_token}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--pairs", type=Path, help="jsonl of source/target pairs (default: the lineage's test split)")
    parser.add_argument("--member", default="luong")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "repetition_cpu.md")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    import hf_seq  # noqa: F401  (registers the families)
    from hf_seq.data import tasks
    from hf_seq.evaluation import metrics as evaluation
    from hf_seq.training.recipes import load_recipe
    from hf_seq.training.runs import choose_threads

    torch.set_num_threads(choose_threads())  # one per idle core: a busy core stalls every step at OpenMP's barriers

    folder, pairs = run_folder(args.folder, args.member, args.seed)
    pairs = args.pairs or pairs
    rows = [json.loads(line) for line in pairs.read_text().splitlines() if line.strip()]
    sources, references = [r["source"] for r in rows], [r["target"] for r in rows]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    recipe_tree = json.loads((folder / "recipe.json").read_text())
    source_tokens = [len(ids) for ids in tokenizer(sources, add_special_tokens=False)["input_ids"]]
    results, outputs = [], {}
    for name, overrides in DECODINGS.items():
        recipe = load_recipe(recipe_tree, [f"{k}={v}" for k, v in overrides.items()])
        t = recipe.training
        start = time.perf_counter()
        hypotheses = tasks.translate(model, tokenizer, sources, recipe, "cpu")
        seconds = time.perf_counter() - start
        got = evaluation.translation_metrics(hypotheses, references, sources)
        written = [len(ids) for ids in tokenizer(hypotheses, add_special_tokens=False)["input_ids"]]
        capped = sum(
            w >= math.ceil(t.generation_max_length_a * s + t.generation_max_length_b)
            for w, s in zip(written, source_tokens)
        )
        results.append({"decoding": name, "seconds": seconds, "capped": capped / len(sources)} | got)
        outputs[name] = hypotheses
        print(json.dumps({k: v for k, v in results[-1].items() if k != "bleu_by_length"}), flush=True)
    preference = model_prefers_the_stutter(model, tokenizer, sources, outputs[BEFORE])
    print(json.dumps(preference), flush=True)
    reference_rate = sum(evaluation.repeats_back_to_back(r.split()) for r in references) / len(references)
    examples = [(s, h, a) for s, h, a in zip(sources, outputs[BEFORE], outputs["beam 5, block_repeats 4 (after)"])
                if evaluation.repeats_back_to_back(h.split())][:5]  # fmt: skip
    lines = [
        "# Back-to-back repetition in translations, and blocking it (bench/repetition.py)",
        "",
        f"Model: `{folder.name}` ({recipe_tree['family']}, {sum(p.numel() for p in model.parameters()):,} "
        f"parameters, trained {recipe_tree['training'].get('max_steps')} steps); {len(sources):,} pairs of "
        f"`{pairs.name}`, each decoding through `hf_seq.data.tasks.translate`. Repetition: the share of outputs with a "
        "run of 1-4 words repeated back to back (`hf_seq.evaluation.repeats_back_to_back`; case-insensitive, "
        f"punctuation-only runs not counted). The references': {100 * reference_rate:.1f}%. At the cap: outputs "
        "whose tokens reach the length limit.",
        "",
        "Machine:",
        *machine_description("cpu"),
        "",
        "| decoding | BLEU | chrF | repetition | length ratio | at the cap | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['decoding']} | {r['bleu']:.2f} | {r['chrf']:.2f} | {100 * r['repetition_rate']:.1f}% | "
            f"{r['length_ratio']:.3f} | {100 * r['capped']:.1f}% | {r['seconds']:.0f} |"
        )
    n = max(preference["stuttering"], 1)
    lines += [
        "",
        f"The model's own preference, over the {preference['stuttering']} stuttering outputs of the runs' decoding: "
        f"it scores the output higher than the same output with the repeated run removed once in "
        f"{preference['higher_in_total']} ({100 * preference['higher_in_total'] / n:.0f}%) by total log-probability "
        f"and in {preference['higher_per_token']} ({100 * preference['higher_per_token'] / n:.0f}%) per token (as "
        "length penalty 1.0 ranks finished beams).",
        "",
        "Examples (source, before, after):",
        "",
    ]
    lines += [f"- `{s}`\n  - before: `{h}`\n  - after: `{a}`" for s, h, a in examples]
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
