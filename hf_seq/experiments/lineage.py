"""The lineage study: the lectures' story of language models, n-gram (Shannon 1948; Kneser-Ney smoothing), the
fixed-window neural LM (Bengio et al. 2003), WaveNet's dilated causal convolutions (van den Oord et al. 2016),
Elman's recurrent network (1990), the gated cells (GRU 2014, LSTM 1997), the Transformer decoder (GPT) and the
selective state-space models (Mamba, Gu and Dao 2023; Mamba-2, Dao and Gu 2024), trained on one corpus with one tokenizer under one budget, sizes
matched by parameter count, and scored on the same held-out tokens with the same bits-per-byte computation.

    hf-seq lineage [--corpus FILES|DATASET] [--validation FILE] [--test FILE] [--tune N] [--sizes LIST]
                   [--seeds K] [--budget-tokens N | --budget-seconds S | --budget-flops F] [--quick]

Writes `lineage.md` (the tables, the ordering against the lectures', how far the best network is from the
literature's margin over the n-gram, and samples from a shared prompt), `lineage.json` (one record per run),
`learning_curves.png` (held-out bits per byte against training tokens), `scaling.png` (against parameters, with
several sizes), `compute.png` (against training FLOPs, with the fitted frontier) and one folder per member with its
model card. The neural members train through `hf_seq.training.run`; the final
figures of every member come from one scoring of the full held-out set (`hf_seq.evaluation.metrics`), the curves from the
runs' periodic evaluations on its first `curve_blocks` blocks. The loop, tuning, budgets and summary are the study
runner's (`study.py`), which the translation lineage (`lineage_translation.py`) shares.

Fairness: every neural member has the same embedding width and tied input/output embeddings, so the embedding
parameters are equal; the rest of each model (its non-embedding parameters) is sized to the same target. All train
with the same optimizer, schedule, batch and block size, with dropout only once the budget passes an epoch, and are
tuned, when asked, on the same trials.
"""

import math
from dataclasses import dataclass
from pathlib import Path

from hf_seq.experiments import study
from hf_seq.experiments.lineage_report import (  # noqa: F401  (budget_estimate, margin_lines: their old import path)
    budget_estimate,
    margin_lines,
    measured_margin,
    plot_compute,
    plot_curves,
    write_language_model_report,
)
from hf_seq.experiments.ngram_member import fit_ngram, with_prefix
from hf_seq.experiments.study import Member, Options, Settings, StudyData, count_parameters, option, trial_grid
from hf_seq.hub.publish import public_name

# Mamba's and Mamba-2's sizes, smallest first: (layers, expansion). Sizing Mamba's state N instead (the scan's cost
# grows with N) made a 0.4M member 20x slower than the others (N = 38) and left a 0.1M one three times too large
# (N = 1 is 315k).
MAMBA_SHAPES = sorted(
    ((layers, expand) for layers in range(1, 33) for expand in (1, 2, 3, 4)), key=lambda s: (s[0] * s[1], s[0])
)


@dataclass
class LanguageModelSettings(Settings):
    """`width`: the embedding width shared by every neural member; `target`: their non-embedding parameters."""

    max_chars: int | None = None  # characters of the corpus read
    curve_blocks: int = 48  # validation blocks the periodic evaluations (the learning curves) score
    sample_tokens: int = 40


SETTINGS = {
    "default": LanguageModelSettings(
        vocab_size=4096, max_chars=3_000_000, block_size=128, batch_size=16, width=128, target=400_000,
        learning_rate=2e-3, warmup_steps=20, eval_every=40, curve_blocks=48, sample_tokens=40,
        budget_tokens=2**20,  # 512 steps of 16 x 128 tokens: 12 minutes for all members on 2 idle cores (measured)
    ),
    "quick": LanguageModelSettings(
        vocab_size=320, max_chars=120_000, block_size=32, batch_size=8, width=16, target=6_000, learning_rate=3e-3,
        warmup_steps=2, eval_every=4, curve_blocks=8, sample_tokens=8, budget_tokens=8 * 32 * 12,
    ),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------- the members
def _window(s, size: int, dropout: float, context: int) -> dict:
    """y = b + U P tanh(d + H x): h = size hidden units, U tied to C through P."""
    model = dict(context_size=context, embedding_size=s.width, hidden_size=size, tie_word_embeddings=True)
    return model | dict(embedding_dropout=dropout, hidden_dropout=dropout)


def _hmm(s, size: int, dropout: float) -> dict:
    """S = size hidden states: the S x S transitions (and pi) are its non-embedding parameters; the S x V emission
    table is its token table, S wide rather than the width (it has no dropout)."""
    return dict(num_states=size)


def _recurrent(cell_type: str):
    def config(s, size: int, dropout: float, layers: int) -> dict:
        dropouts = dict(embedding_dropout=dropout, hidden_dropout=dropout, output_dropout=dropout)
        model = dict(cell_type=cell_type, embedding_size=s.width, hidden_size=size, num_hidden_layers=layers)
        # At the family's default N(0, 0.05) the tied embeddings feed the recurrence inputs so small that the Elman
        # network sat on the unigram plateau for 240 steps of this budget (measured); N(0, 0.3) left it by step 40.
        return model | dropouts | dict(initializer_range=0.3)

    return config


def _gpt(s, size: int, dropout: float, layers: int) -> dict:
    """The width is the model width; the feed-forward width is what is sized."""
    return dict(
        hidden_size=s.width,
        num_attention_heads=max(1, s.width // 32),
        num_hidden_layers=layers,
        intermediate_size=size,
        max_position_embeddings=s.block_size,
        embedding_dropout=dropout,
        attention_dropout=0.0,
        hidden_dropout=dropout,
    )


def _conv(s, size: int, dropout: float, layers: int) -> dict:
    """WaveNet: residual channels = the width; the skip channels are what is sized; dilations 1, 2, 4, ... over
    `layers` layers."""
    return dict(hidden_size=s.width, kernel_size=2, dilation_cycle=layers, num_blocks=1, skip_channels=size,
                tie_word_embeddings=True, dropout=dropout)  # fmt: skip


def _ssm(s, size: int, dropout: float) -> dict:
    """Mamba blocks of the width at the paper's state size N = 16: depth x expansion is sized."""
    layers, expand = MAMBA_SHAPES[min(size, len(MAMBA_SHAPES)) - 1]
    model = dict(ssm_type="mamba", hidden_size=s.width, num_hidden_layers=layers, expand=expand, state_size=16)
    return model | dict(hidden_dropout=dropout)


def _mamba2(s, size: int, dropout: float, state: int, chunk: int) -> dict:
    """Mamba-2 blocks of the width, sized as Mamba's (depth x expansion): heads of P = gcd(width, 32) channels (a
    divisor of every inner width, 32 at the default width: 4 heads per expansion), each with its scalar decay; state
    N = `state` (the paper's 64 to 128 at scale), chunks of `chunk` steps."""
    layers, expand = MAMBA_SHAPES[min(size, len(MAMBA_SHAPES)) - 1]
    model = dict(ssm_type="mamba2", hidden_size=s.width, num_hidden_layers=layers, expand=expand,
                 head_dim=math.gcd(s.width, 32), state_size=state, chunk_size=chunk)  # fmt: skip
    return model | dict(hidden_dropout=dropout)


RNN_LAYERS = dict(knobs={"layers": 2}, quick={"layers": 1})
# The members in the lectures' order, worst to best (the next chapter's SSMs last: Gu and Dao 2023, 2024). Each neural
# member's config is a function of the settings, its size parameter, dropout and its knobs; dropout goes on the
# connections its family regularises (never inside the recurrence or on attention weights).
ROWS = (
    Member("ngram", "5-gram, interpolated Kneser-Ney", None, knobs={"order": 5}, quick={"order": 3},
           help="n-gram counts, Kneser-Ney smoothed (Shannon 1948)", short="n-gram"),
    Member("hmm", "hidden Markov model (Baum and Petrie 1966)", "hmm", _hmm,
           help="a hidden Markov model, trained by gradient", short="HMM"),
    Member("window", "fixed-window MLP (Bengio et al. 2003)", "window", _window, {"context": 8}, {"context": 3},
           help="the fixed-window neural LM", short="fixed window"),
    Member("conv", "WaveNet, dilated causal convolutions", "conv", _conv, {"layers": 4},
           help="WaveNet's dilated causal convolutions", short="WaveNet"),
    Member("elman", "Elman RNN (tanh)", "rnn", _recurrent("elman"), **RNN_LAYERS, help="Elman's recurrent network",
           short="Elman"),
    Member("gru", "GRU", "rnn", _recurrent("gru"), **RNN_LAYERS, help="the gated recurrent unit", short="GRU"),
    Member("lstm", "LSTM", "rnn", _recurrent("lstm"), **RNN_LAYERS, help="long short-term memory", short="LSTM"),
    Member("gpt", "GPT (Transformer decoder)", "gpt", _gpt, {"layers": 2}, {"layers": 1},
           help="the Transformer decoder", short="GPT"),
    Member("ssm", "Mamba, selective state space", "ssm", _ssm, help="Mamba's selective state space", short="Mamba"),
    # level with Mamba: Dao and Gu 2024 report Mamba-2 matching it at equal size (its gain is speed: the chunked form
    # runs as matrix products). Quick: two chunks of 16 in a block of 32, so the chunks' recurrence runs too.
    Member("mamba2", "Mamba-2, state-space duality (SSD)", "ssm", _mamba2, {"state": 64, "chunk": 64},
           {"state": 32, "chunk": 16}, help="Mamba-2's state-space duality (Dao and Gu 2024)", short="Mamba-2",
           level_with_previous=True),
)  # fmt: skip


@dataclass
class LanguageModelOptions(Options):
    max_chars: int | None = option(None, "characters of the corpus to read (default: the max_chars setting)")


@dataclass
class LanguageModelData(StudyData):
    train_stream: object = None  # the training tokens, in order (the n-gram counts them)
    held_out: dict = None  # "validation" and "test" (None without a test split): encoded blocks
    byte_lengths: object = None  # bytes per token id, for bits per byte
    prompt: list = None  # the samples' shared prompt: the start of the first validation block


class LanguageModels(study.Study):
    name, title, rows, settings = "language_model", "lineage study", ROWS, SETTINGS
    options_class, report_title, about = LanguageModelOptions, "lineage", "the language models"
    auto_class, default_corpus, corpus_help = "AutoModelForCausalLM", "stdlib", "stdlib, the Python standard library"
    files = "lineage.md, lineage.json and the plots (curves, scaling, compute)"
    trial_keys = ("eval_loss", "eval_bits_per_byte", "steps")
    curve_keys = ("step", "tokens", "seconds", "eval_bits_per_byte")

    def prepare(self, s, options: LanguageModelOptions, output_dir: Path) -> LanguageModelData:
        """One tokenizer, one split, one held-out set for everybody."""
        import numpy as np

        from hf_seq.evaluation.metrics import token_byte_lengths
        from hf_seq.training.recipes import load_recipe

        if options.max_chars is not None:
            s.max_chars = options.max_chars
        corpus = options.corpus or self.default_corpus
        splits = {k: v for k, v in dict(validation=options.validation, test=options.test).items() if v}
        data = dict(dataset=corpus, block_size=s.block_size, max_chars=s.max_chars, **splits)
        tree = {"family": "gpt", "task": "causal_lm", "tokenizer": {"vocab_size": s.vocab_size}, "data": data}
        recipe = load_recipe(tree | {"training": {"output_dir": str(output_dir / "tokenizer-run"), "log_with": "none"}})
        prepared, tokenizer_dir = study.shared_data(recipe, output_dir)
        train_stream = np.asarray(prepared.train["input_ids"], dtype=np.int64).reshape(-1)
        held_out = {"validation": prepared.held_out["eval"], "test": prepared.held_out.get("test")}
        names = {
            "validation": public_name(options.validation) if options.validation else "held out from the training text",
            "test": public_name(options.test) if options.test else "none",
        }
        say = print if options.progress else (lambda *a: None)
        say(
            f"lineage: {len(train_stream):,} training tokens, {len(held_out['validation'])} validation blocks"
            + (f", {len(held_out['test'])} test blocks" if held_out["test"] is not None else "")
            + f", vocab {len(prepared.tokenizer)}"
        )
        return LanguageModelData(
            prepared, recipe, tokenizer_dir, public_name(corpus), len(train_stream), s.batch_size * s.block_size,
            s.curve_blocks, names, train_stream, held_out, token_byte_lengths(prepared.tokenizer),
            list(held_out["validation"][0]["input_ids"])[: max(4, s.block_size // 8)],
        )  # fmt: skip

    def metric(self, data) -> str:
        return "test_bits_per_byte" if data.held_out["test"] is not None else "validation_bits_per_byte"

    def flops(self, model, data, s) -> float:
        from hf_seq.training.compute import model_flops_per_token

        return model_flops_per_token(model, s.block_size)

    def step_batch(self, data, s, vocab_size: int) -> dict:
        import torch

        tokens = torch.randint(vocab_size, (s.batch_size, s.block_size), generator=torch.Generator().manual_seed(0))
        return {"input_ids": tokens, "labels": tokens}

    def score(self, row, run, plan, data, s) -> dict:
        """The selected weights scored once on the whole validation and test splits, and a sample."""
        from hf_seq.evaluation.metrics import evaluate_language_model

        tokenizer, record = data.prepared.tokenizer, {}
        collator = data.prepared.task.collator(data.recipe, tokenizer, run.model)
        for split, blocks in data.held_out.items():
            if blocks is None:
                record |= {f"{split}_loss": None, f"{split}_perplexity": None, f"{split}_bits_per_byte": None}
                continue
            metrics = evaluate_language_model(
                run.model, blocks, collator, s.batch_size, run.device, data.byte_lengths, shift_labels=True
            )
            record |= with_prefix(metrics, split)
            if split == "validation":
                record |= {k: metrics[k] for k in ("eval_loss", "eval_perplexity", "eval_bits_per_byte")}
                record |= {"eval_tokens": metrics["eval_tokens"], "eval_bytes": metrics["eval_bytes"]}
        record["sample"] = tokenizer.decode(sample_neural(run.model, data.prompt, s, tokenizer.eos_token_id))
        return record | {"prompt_text": tokenizer.decode(data.prompt)}

    def fit_fixed(self, row, data, s, given, output_dir) -> dict:
        """The n-gram: counting is deterministic, so one fit serves every size (and has no seeds); a token budget
        holds for the counts too, under a FLOPs or seconds budget they see every token."""
        tokens = s.budget_tokens if "tokens" in given or not given else None
        return fit_ngram(data, s, s.knobs[row.name]["order"], tokens, output_dir / row.name)

    def describe(self, data, s, records) -> dict:
        return {
            "block_size": s.block_size,
            "eval_tokens": records[0]["eval_tokens"] if records else 0,
            "eval_bytes": records[0]["eval_bytes"] if records else 0,
            "prompt": data.prepared.tokenizer.decode(data.prompt),
        }

    def report(self, result, data, output_dir, title) -> None:
        estimate = budget_estimate(result["members"], data.tokens_per_step)
        result["margin"] = measured_margin(result["members"], result["sizes"][-1])
        result["estimate"] = estimate
        plot_curves(study.largest_records(result), output_dir / "learning_curves.png", title)
        if estimate is not None:
            plot_compute(result["members"], estimate, output_dir / "compute.png", title)
        write_language_model_report(result, output_dir, self)


LINEAGE = LanguageModels()
MEMBERS = LINEAGE.members
LECTURE_ORDER = LINEAGE.order
TITLES = {row.name: row.title for row in ROWS}


def run(**options) -> dict:
    """`hf-seq lineage`: train and score every member at every size and seed (`LanguageModelOptions` names the options);
    write lineage.md, lineage.json, learning_curves.png (scaling.png for several sizes, compute.png with the fitted
    frontier) and the member folders into `output_dir`. Returns what lineage.json holds."""
    return LINEAGE.run(LINEAGE.make_options(**options))


build, matched_size = LINEAGE.build, LINEAGE.matched_size


# ---------------------------------------------------------------------------------------------- the networks
def sample_neural(model, prompt, s, eos_token_id) -> list[int]:
    """Plain ancestral sampling from the shared prompt, as the n-gram samples: what each model believes."""
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt], device=model.device), max_new_tokens=s.sample_tokens,
                             do_sample=True, top_k=0, top_p=1.0, pad_token_id=eos_token_id)  # fmt: skip
    return out[0, len(prompt) :].tolist()


__all__ = ["LINEAGE", "MEMBERS", "ROWS", "SETTINGS", "count_parameters", "matched_size", "run", "trial_grid"]
