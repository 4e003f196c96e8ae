"""The translation lineage: the lectures' story of neural machine translation, the encoder-decoder without attention
(Sutskever, Vinyals and Le 2014: a reversed source, the final LSTM state as the only summary; Cho et al. 2014: GRUs
and the summary fed at every step), Bahdanau, Cho and Bengio's (2015) additive attention, Luong et al.'s (2015)
bilinear score, and the encoder-decoder Transformer (Vaswani et al. 2017), trained on one parallel corpus with one
joint BPE tokenizer under one budget, sizes matched by non-embedding parameters, and scored on the same test pairs.

    hf-seq lineage --task translation [--corpus gettext | TRAIN.jsonl --validation V --test T
                   --source-column en --target-column es] [--quick] [--budget-tokens N] [--output-dir DIR]

A table of members on the study runner (`study.py`), as the language-model lineage is. Writes `lineage.md`
(a table per size: parameters, FLOPs per token, best step, validation perplexity, test BLEU with beam search, chrF,
repetition rate, length ratio, seconds; the ordering against the lectures'), `lineage.json` (one record per run),
`bleu_by_length.png` (test BLEU against source length, Bahdanau et al.'s figure 2) and `alignment-<member>.png` for the
attention members (one test sentence: source tokens across, target tokens down).

Fairness: one embedding width for every member and tied embeddings where the family allows it (the Sutskever model's
linear output layer reads its LSTM state, which is the size parameter, so it keeps its own output layer); the rest of
each model (its non-embedding parameters: the output layer is counted as an embedding) is sized to the same target.
All train with the same optimizer, schedule and pairs, on token-budget batches (`data.batch_tokens`: about
`batch_size` pairs of the corpus's mean length a step), keep the evaluation with the highest validation BLEU
(`training.select_by: bleu`; tuning trials compare validation losses), and translate the test set with the same beam
search, scored by `tasks.evaluate` as `hf-seq evaluate` scores a run.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from hf_seq.errors import InvalidValueError
from hf_seq.experiments import study
from hf_seq.experiments.lineage_report import alignment_figure, plot_bleu_by_length, write_translation_report
from hf_seq.experiments.study import Member, Options, Settings, StudyData, option
from hf_seq.hub.publish import public_name


@dataclass
class TranslationSettings(Settings):
    max_pairs: int | None = None  # None: every pair of the corpus
    held_out_fraction: float = 0.02  # of the pairs, for a validation or test split the corpus does not have
    validation_pairs: int = 400
    test_pairs: int = 500
    steps: int = 1600  # the default budget: this many steps' pairs
    eval_pairs: int = 100  # validation pairs of the periodic evaluations (loss, and BLEU with the same beam search)
    num_beams: int = 5
    max_new_tokens: int | None = None  # None: 1.2 x source tokens + 10 (training.generation_max_length_a / _b)
    # No translation repeats a run of 1 to this many words back to back (training.generation_block_repeats; 0: off).
    # The members' own stutter, not the search's: bench/results/repetition_cpu.md
    block_repeats: int = 4


SETTINGS = {
    "default": TranslationSettings(  # the five members in 4 min 45 s on 2 idle cores (one seed, no tuning)
        vocab_size=4000, block_size=128,  # the longest source / target kept: prose sentences of 60 words fit whole
        batch_size=32, width=128, target=400_000, learning_rate=2e-3, warmup_steps=100, eval_every=400,
        budget_tokens=None,  # the pairs' tokens of `steps` steps, once the corpus is read
    ),
    "quick": TranslationSettings(
        vocab_size=500, max_pairs=1500, validation_pairs=24, test_pairs=24, block_size=48, batch_size=8, width=16,
        target=6_000, learning_rate=3e-3, warmup_steps=2, budget_tokens=None, steps=24, eval_every=8, eval_pairs=8,
        num_beams=2, max_new_tokens=16,
    ),
}  # fmt: skip
DEFAULT_CORPUS = "gettext"


# ---------------------------------------------------------------------------------------------- the members
def _recurrent(**switches):
    """A member of the RNN encoder-decoder family: n = the size parameter units per direction, deep output (or
    tied output) of the embedding width, dropout on the family's three connections."""

    def config(s, size: int, dropout: float, layers: int) -> dict:
        model = dict(embedding_size=s.width, hidden_size=size, num_hidden_layers=layers)
        model |= dict(embedding_dropout=dropout, hidden_dropout=dropout, output_dropout=dropout)
        model |= dict(deep_output_size=s.width, tie_word_embeddings=True, initializer_range=0.1)
        return model | switches

    return config


def _transformer(s, size: int, dropout: float, layers: int) -> dict:
    """Post-LN, sinusoidal positions, tied embeddings; the width is the model width, the feed-forward width is
    what is sized."""
    return dict(
        hidden_size=s.width,
        num_attention_heads=max(1, s.width // 32),
        encoder_layers=layers,
        decoder_layers=layers,
        intermediate_size=size,
        max_position_embeddings=2 * s.block_size + 16,  # outputs run to 1.2 x the source + 10 tokens
        dropout=dropout,
        tie_word_embeddings=True,
    )


ONE_LAYER = {"layers": 1}
# The members in the lectures' order, worst to best; the switches are BahdanauConfig's (its docstring).
ROWS = (
    Member(
        "sutskever", "Sutskever et al. 2014 (LSTM, reversed source, no attention)", "bahdanau",
        _recurrent(cell_type="lstm", attention_type="none", encoder_bidirectional=False, reverse_source=True,
                   bridge="final_state", decoder_input="embedding", output_layer="linear",
                   tie_word_embeddings=False),  # W_o reads the LSTM state (the size parameter), not an embedding
        ONE_LAYER, help="LSTM encoder-decoder, reversed source, no attention", short="Sutskever",
    ),
    Member(
        "cho", "Cho et al. 2014 (GRU, the summary at every step)", "bahdanau",
        _recurrent(cell_type="gru", attention_type="none", encoder_bidirectional=False,
                   bridge="bahdanau",  # s_0 = tanh(V' c)
                   decoder_input="embedding_and_context", output_layer="deep"),
        ONE_LAYER, help="GRU encoder-decoder, the summary at every step", short="Cho",
    ),
    Member("bahdanau", "Bahdanau et al. 2015 (additive attention)", "bahdanau", _recurrent(), ONE_LAYER,
           help="additive attention", short="Bahdanau"),
    Member("luong", "Luong et al. 2015 (bilinear score)", "bahdanau", _recurrent(attention_type="general"),
           ONE_LAYER, help="bilinear attention score", level_with_previous=True, short="Luong"),
    Member("transformer", "Transformer (Vaswani et al. 2017)", "transformer", _transformer, {"layers": 2},
           ONE_LAYER, help="the encoder-decoder Transformer", short="Transformer"),
)  # fmt: skip
ATTENTION_MEMBERS = ("bahdanau", "luong", "transformer")


@dataclass
class TranslationOptions(Options):
    source_column: str = option("source", "the source column, or a language of a `translation` column")
    target_column: str = option("target", "the target column, or a language of a `translation` column")
    target_language: str = option("fr", "the language of the machine's gettext catalogs that --corpus gettext reads")


@dataclass
class TranslationData(StudyData):
    lengths: tuple = ()  # mean source and target tokens of a training pair
    pairs: int = 0
    alignment_source: str = ""  # the alignment pictures' sentence


class Translation(study.Study):
    name, title, rows, settings = "translation", "translation lineage", ROWS, SETTINGS
    options_class, report_title = TranslationOptions, "translation lineage"
    about = "the encoder-decoders translating a parallel corpus"
    auto_class, default_corpus, size_limit = "AutoModelForSeq2SeqLM", DEFAULT_CORPUS, 64
    corpus_help = "gettext, the machine's catalogs"
    files = "lineage.md, lineage.json, bleu_by_length.png and the alignment pictures"
    higher_is_better, budget_unit = True, "training tokens (source + target)"
    curve_keys = ("step", "seconds", "eval_loss", "eval_bleu")

    def prepare(self, s, options: TranslationOptions, output_dir: Path) -> TranslationData:
        """One split, one tokenizer, one test set for everybody; a token is a source or target token of a pair."""
        from hf_seq.training.recipes import load_recipe

        corpus, language = options.corpus or DEFAULT_CORPUS, options.target_language
        columns = dict(source_column=options.source_column, target_column=options.target_column)
        paths = split_corpus(s, corpus, options.validation, options.test, columns, language, output_dir / "data")
        data = dict(dataset=paths["train"], validation=paths["validation"], test=paths["test"], block_size=s.block_size)
        tree = {"family": "transformer", "task": "seq2seq", "tokenizer": {"vocab_size": s.vocab_size}, "data": data}
        recipe = load_recipe(tree | {"training": {"output_dir": str(output_dir / "tokenizer-run"), "log_with": "none"}})
        prepared, tokenizer_dir = study.shared_data(recipe, output_dir)
        source_tokens = sum(map(len, prepared.train["input_ids"]))
        target_tokens = sum(map(len, prepared.train["labels"]))
        pairs = len(prepared.train)
        lengths = (source_tokens / pairs, target_tokens / pairs)
        s.budget_tokens = round(s.steps * s.batch_size * sum(lengths))  # the default budget: the settings' steps
        test_sources = list(prepared.held_out_rows["test"]["source"])
        say = print if options.progress else (lambda *a: None)
        say(
            f"lineage: {pairs:,} training pairs ({source_tokens + target_tokens:,} tokens), "
            f"{len(prepared.held_out['eval'])} validation and {len(test_sources)} test pairs, vocab {len(prepared.tokenizer)}"
        )
        names = {split: public_name(getattr(options, split)) if getattr(options, split) else "held out from the "
                 "training pairs" for split in ("validation", "test")}  # fmt: skip
        return TranslationData(
            prepared, recipe, tokenizer_dir,
            f"gettext en-{language}" if corpus == DEFAULT_CORPUS else public_name(corpus),
            source_tokens + target_tokens, round(s.batch_size * sum(lengths)), s.eval_pairs, names, lengths, pairs,
            # the first test source of 5 to 12 words (else the first)
            next((x for x in test_sources if 5 <= len(x.split()) <= 12), test_sources[0]),
        )  # fmt: skip

    @property
    def default_budget(self) -> str:
        return f"{self.settings['default'].steps:,} steps' pairs"

    def metric(self, data) -> str:
        return "test_bleu"

    def flops(self, model, data, s) -> float:
        from hf_seq.training.compute import seq2seq_flops_per_token

        return round(seq2seq_flops_per_token(model, *data.lengths))

    def step_batch(self, data, s, vocab_size: int) -> dict:
        import torch

        g = torch.Generator().manual_seed(0)
        source, target = (torch.randint(4, vocab_size, (s.batch_size, max(1, round(n))), generator=g)
                          for n in data.lengths)  # fmt: skip
        return {"input_ids": source, "labels": target}

    def member_recipe(self, data, s, row, plan, score) -> dict:
        """Token-budget batches of as many tokens as batch_size pairs hold on average: about 3x the pairs per second
        of fixed-size batches on these lengths (bench/results/batching_cpu.md); training.batch_size stays the
        evaluations' batch. Tuning trials compare validation losses; a final run keeps its evaluation of highest
        validation BLEU."""
        training = {"select_by": "bleu" if score else "loss", "generation_num_beams": s.num_beams}
        training["generation_max_new_tokens"] = s.max_new_tokens  # None: a x source + b (the recipe's default)
        training["generation_block_repeats"] = s.block_repeats
        return {"data": {"batch_tokens": data.tokens_per_step}, "training": training}

    def score(self, row, run, plan, data, s) -> dict:
        """The kept weights, scored once by `tasks.evaluate` as `hf-seq evaluate` scores them: the perplexity of the
        whole validation split (not translated), and the test split, perplexity and translations (beam search) by
        BLEU, chrF, BLEU by length, repetition and length ratio; three examples and the alignment picture."""
        from hf_seq.data import tasks

        recipe, prepared = run.recipe, data.prepared
        metrics = tasks.evaluate(recipe, prepared, run.model, run.device, generate_for=("test",))
        record = {f"validation_{k}": metrics[f"eval_{k}"] for k in ("loss", "perplexity")}
        record |= {k: v for k, v in metrics.items() if k.startswith("test_") and k != "test_examples"}
        record["decoding"] = tasks.decoding(recipe) | {"block_repeats": recipe.training.generation_block_repeats}
        rows = prepared.held_out_rows["test"].select(range(min(3, len(prepared.held_out_rows["test"]))))
        translations = tasks.translate(run.model, prepared.tokenizer, list(rows["source"]), recipe, run.device)
        record["examples"] = [{"source": a, "reference": b, "translation": c}
                              for a, b, c in zip(rows["source"], rows["target"], translations)]  # fmt: skip
        if row.name in ATTENTION_MEMBERS:
            path = run.folder.parent / f"alignment-{run.folder.name}.png"
            title = f"{row.title}: {data.alignment_source!r}"
            alignment_figure(run.model, prepared.tokenizer, data.alignment_source, recipe, path, title)
            record["alignment"] = path.name
        return record

    def scored_line(self, record: dict, metric: str) -> str:
        return f"test BLEU {record['test_bleu']:.2f}, chrF {record['test_chrf']:.2f}"

    def describe(self, data, s, records) -> dict:
        return {
            "train_pairs": data.pairs,
            "validation_pairs": len(data.prepared.held_out["eval"]),
            "test_pairs": len(data.prepared.held_out["test"]),
            "mean_source_tokens": data.lengths[0],
            "mean_target_tokens": data.lengths[1],
            "alignment_source": data.alignment_source,
            "decoding": records[0]["decoding"] if records else None,
        }

    def report(self, result, data, output_dir, title) -> None:
        plot_bleu_by_length(study.largest_records(result), output_dir / "bleu_by_length.png", title)
        write_translation_report(result, output_dir, self)


LINEAGE = Translation()
MEMBERS = LINEAGE.members
LECTURE_ORDER = LINEAGE.order


def run(**options) -> dict:
    """`hf-seq lineage --task translation`: train and score every member at every size and seed (`TranslationOptions`
    names the options); write lineage.md, lineage.json, bleu_by_length.png, the alignment pictures and the member
    folders into `output_dir`. Returns what lineage.json holds."""
    return LINEAGE.run(LINEAGE.make_options(**options))


build, matched_size = LINEAGE.build, LINEAGE.matched_size


# ---------------------------------------------------------------------------------------------- data and pictures
def split_corpus(s, corpus, validation, test, columns: dict, language: str, folder: Path) -> dict:
    """The corpus split once, for every member: write the train / validation / test pairs to `folder` as JSON lines
    with `source` and `target` columns and return their paths. Splits the corpus does not have (the default corpus,
    the machine's gettext catalogs, has none) are held out from its training rows with a fixed seed
    (`held_out_fraction` each); a split not named by `validation` / `test` is cut to its first `validation_pairs` /
    `test_pairs` pairs (a file named is scored whole)."""
    import torch

    from hf_seq.data import corpora as data_lib
    from hf_seq.training.recipes import load_recipe

    section = dict(dataset=corpus, validation=validation, test=test, max_examples=s.max_pairs)
    section |= dict(target_language=language, eval_fraction=s.held_out_fraction) | columns
    data = load_recipe({"family": "transformer", "task": "seq2seq", "data": section}).data
    names = {"source": data.source_column, "target": data.target_column}
    try:
        splits = data_lib.load_splits(data, names)
    except InvalidValueError as error:
        if "no column(s)" not in str(error):
            raise
        raise InvalidValueError(
            f"lineage: --source-column {names['source']!r} / --target-column {names['target']!r}: {error}"
        ) from None
    if "test" not in splits:
        train = splits["train"]
        n = max(1, round(len(train) * s.held_out_fraction))
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(data_lib.HELD_OUT_SEED + 1))
        splits["test"] = train.select(sorted(order[:n].tolist()))
        splits["train"] = train.select(sorted(order[n:].tolist()))
    caps = {"validation": None if validation else s.validation_pairs, "test": None if test else s.test_pairs}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in splits.items():
        rows = rows.select(range(min(caps.get(split) or len(rows), len(rows))))
        path = folder / f"{split}.jsonl"
        lines = [json.dumps({"source": r["source"], "target": r["target"]}, ensure_ascii=False) for r in rows]
        text = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text() != text:  # unchanged files keep finished runs reusable
            path.write_text(text)
        paths[split] = str(path)
    return paths


__all__ = ["LINEAGE", "MEMBERS", "ROWS", "SETTINGS", "matched_size", "run"]
