"""Moved: attention against the fixed-context bottleneck on sequence reversal is now an experiment,

    hf-seq experiment bottleneck [--quick] [--output-dir DIR]        (hf_seq/experiments/bottleneck.py)

This script runs it (`python bench/bench_bahdanau.py [--quick] [--output-dir DIR]`) and keeps `run_design` for
bench_transformer.py's length table. The results of the earlier script stay in bench/results/bahdanau_cpu.md.
"""

import argparse

from hf_seq.experiments.bottleneck import run, run_design  # noqa: F401  (run_design: bench_transformer.py)

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output-dir", default="hf-seq-experiments/bottleneck")
    args = parser.parse_args()
    results = run(quick=args.quick, output_dir=args.output_dir)
    print(f"{results['seconds']:.0f} s; results in {args.output_dir}/")
