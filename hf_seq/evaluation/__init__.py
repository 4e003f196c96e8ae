"""Evaluation: one set of numbers for training, `hf-seq evaluate`, cards and the experiments. It scores what it
is handed: language-model loss, perplexity and bits per byte (bits per note for music), BLEU and repetition, classification (`metrics`), and
the forecasting metrics (`forecasting`)."""

from hf_seq.faces import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "metrics": [
            "LAST_BUCKET",
            "LENGTH_BUCKET",
            "MAX_REPEAT",
            "bleu_metrics",
            "classification_metrics",
            "corpus_bleu",
            "entity_spans",
            "evaluate_language_model",
            "language_model_nll",
            "lm_metrics",
            "note_metrics",
            "repeats_back_to_back",
            "token_byte_lengths",
            "token_classification_metrics",
            "translation_metrics",
        ],
        "forecasting": [
            "DEFAULT_QUANTILES",
            "crps_from_samples",
            "gaussian_nll_from_samples",
            "interval_from_samples",
            "mase",
            "quantile_loss",
            "score_samples",
            "smape",
            "weighted_quantile_loss",
        ],
    },
)
