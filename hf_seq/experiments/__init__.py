"""The lectures' experiments, one module each, every one over the public API (model classes, configs, `hf_seq.data.corpora`,
`generate()`), so a student can re-run, change and look:

    hf-seq experiment --list
    hf-seq experiment parentheses [--quick] [--output-dir DIR]

    from hf_seq.experiments import parentheses
    results = parentheses.run(quick=True, output_dir="out")     # the dict written to out/results.json

Each experiment's settings are one frozen dataclass, `Settings`, whose defaults are the documented run, and `QUICK`,
the same class at a tiny size. `run(quick=False, output_dir=..., overrides=(), **changes)` starts from one of the two,
applies `overrides` (`"steps=100"` strings, as `hf-seq experiment NAME --set steps=100` gives them) and `changes`
(`steps=100`), each checked against the field's type in `common.chosen_settings`, writes `results.md` (the table,
and what the lecture claims against what the run measured), `results.json` (the same numbers, the settings under
`options`, and a `claims` list of {claim, measured, agrees}) and PNG plots into `output_dir`, and returns the results.
This file stays free of heavy imports: `hf-seq --help` and `hf-seq experiment --list` read the table below without
importing torch.
"""

import importlib

# name -> one line: what the experiment shows
EXPERIMENTS = {
    "vanishing_gradients": "norm of dh_T/dh_t and of the loss gradient against distance: Elman (tanh, ReLU), GRU, LSTM",
    "parentheses": "balanced colored parentheses: Elman, gated RNN, GRU, LSTM, GPT on longer and deeper strings",
    "positions": "GPT with learned, sinusoidal, RoPE and ALiBi positions evaluated at 1x, 2x, 4x the trained context",
    "decoding": "greedy, beam, temperature, top-k, top-p on one LM: samples, distinct-n, perplexity, length",
    "attention_maps": "every head of every layer of a small trained GPT, BERT and Transformer on one sentence",
    "exposure_bias": "teacher forcing vs scheduled sampling (Bengio et al. 2015): error rate against output position",
    "bottleneck": "sequence reversal: encoder-decoder without attention, with Bahdanau attention, Transformer",
    "selective_copying": "Selective Copying (Gu and Dao 2023): S4D, Mamba, GPT, LSTM, WaveNet of equal size",
    "induction_heads": "Induction Heads (Gu and Dao 2023): S4D, Mamba, GPT, LSTM, WaveNet at 1x-16x the trained length",
    "duality": "Mamba-2's recurrence, attention and chunked forms (Dao and Gu 2024): same outputs, cost against length",
    "chung": "tanh RNN, GRU, LSTM of equal size on the Bach chorales (Chung et al. 2014): bits per note, seeds",
}


def get_experiment(name: str):
    """The module of experiment `name` (it has `Settings`, `QUICK` and `run(quick=False, output_dir=..., overrides=(),
    **changes)`)."""
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; allowed values: {sorted(EXPERIMENTS)}.")
    return importlib.import_module(f"{__name__}.{name}")


__all__ = ["EXPERIMENTS", "get_experiment"]
