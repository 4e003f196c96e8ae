"""The length penalty of beam search, measured on trained translation models: validation BLEU, chrF and length ratio
of the members of a `hf-seq lineage --task translation` run, decoded with beam search of 5 at several penalties
(transformers' score: log-probability / length ** penalty; fairseq's --lenpen), everything else as the run decoded
(beam search of 5 in the default settings).

    python bench/length_penalty.py LINEAGE_FOLDER [--members bahdanau,transformer] [--penalties 0.6,1.0,1.4]

Scores the whole validation split the run used (its `data/validation.jsonl`) with `hf_seq.training.evaluate_folder`
(the evaluation of `hf-seq evaluate`), and writes the table to bench/results/length_penalty_cpu.md.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_gpt import machine_description  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the output folder of hf-seq lineage --task translation")
    parser.add_argument("--members", default="bahdanau,transformer")
    parser.add_argument("--penalties", default="0.6,1.0,1.4")
    parser.add_argument("--seed", type=int, default=0, help="which seed's run of each member")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "length_penalty_cpu.md")
    args = parser.parse_args()

    from hf_seq.training.pretraining import evaluate_folder

    lineage = json.loads((args.folder / "lineage.json").read_text())
    single = len(lineage["sizes"]) == 1 and lineage["seeds"] == 1
    target = lineage["sizes"][-1]
    before = machine_description("cpu")
    rows = []
    for name in args.members.split(","):
        run = args.folder / (name if single else f"{name}-{target}-seed{args.seed}")
        for penalty in (float(p) for p in args.penalties.split(",")):
            start = time.perf_counter()
            overrides = [f"training.generation_length_penalty={penalty}", "data.eval_examples=100000"]
            got = evaluate_folder(run, overrides=overrides)
            row = {"member": name, "length_penalty": penalty, "seconds": time.perf_counter() - start}
            row |= {k: got[f"eval_{k}"] for k in ("bleu", "chrf", "length_ratio", "repetition_rate")}
            row |= {"pairs": got["eval_examples"], "num_beams": got["num_beams"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    lines = [
        "# The length penalty of beam search on trained translation models (bench/length_penalty.py)",
        "",
        f"The members of `hf-seq lineage --task translation` on `{lineage['corpus']}` ({lineage['budget']}; seed "
        f"{args.seed}), each decoded with beam search of {rows[0]['num_beams']} at every penalty, everything else as the run decoded; "
        f"validation BLEU, chrF, length ratio and repetition rate on the whole validation split ({rows[0]['pairs']:,} "
        "pairs).",
        "",
        "Machine, at the start:",
        *before,
        "",
        "| member | length penalty | BLEU | chrF | length ratio | repetition rate | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['member']} | {r['length_penalty']:g} | {r['bleu']:.2f} | {r['chrf']:.2f} | "
            f"{r['length_ratio']:.3f} | {r['repetition_rate']:.3f} | {r['seconds']:.0f} |"
        )
    args.output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
