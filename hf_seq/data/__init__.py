"""Data: the embedded corpora and every way text, a series or a score becomes training rows.

- `corpora`: reading files and Hub datasets, the embedded defaults (the standard library, the gettext catalogs,
  synthetic tasks), held-out splits, packing and batching;
- `tokenization`: byte-level BPE tokenizers trained with `tokenizers`;
- `tasks`: the table of tasks (what rows hold, how they are encoded, collated and scored);
- `streaming`: corpora larger than the disk, packed as the cached path packs them;
- `series`: real-valued series for forecasting, and the embedded CO2 series;
- `music`: scores (MIDI, MusicXML, the embedded Bach chorales) split by piece, transposed and tokenized by MidiTok
  (the optional extra `hf-seq[music]`)."""

from hf_seq.faces import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "corpora": [
            "BRACKETS",
            "CHORALES",
            "DATA_DESCRIPTIONS",
            "EMBEDDED",
            "HEADER_ONLY",
            "HELD_OUT_SEED",
            "LOCALE_DIR",
            "MIN_HELD_OUT_DOCUMENTS",
            "MONTHS",
            "PACK_DOCUMENTS",
            "PYTHON_TAGS",
            "ROWS_NEEDED",
            "STDLIB",
            "SYNTHETIC_TASKS",
            "TEXT_SUFFIXES",
            "WEEKDAYS",
            "check_rows",
            "date_conversion",
            "flatten_translation",
            "gettext_pairs",
            "hold_out_tail",
            "is_balanced",
            "load_files",
            "load_hub_dataset",
            "load_splits",
            "load_text_dataset",
            "masked_lm_collator",
            "pack_blocks",
            "pack_token_ids",
            "packed_lm_dataset",
            "packed_mlm_dataset",
            "parentheses_classification",
            "python_token_tagging",
            "select_columns",
            "sequence_lengths",
            "sequence_reversal",
            "stdlib_files",
            "stdlib_texts",
            "token_budget_batches",
            "tokenize_texts",
            "translation_languages",
            "worker_processes",
        ],
        "tokenization": ["train_bpe_tokenizer"],
        "tasks": ["TASKS", "Task", "get_task"],
        "series": ["co2_weekly"],
        "music": ["MidiTokTokenizer", "read_pieces", "sample_midi", "split_pieces", "transpose"],
    },
)
