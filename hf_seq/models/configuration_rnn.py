"""Configuration of the recurrent family: Elman, gated Elman, GRU and LSTM networks over token embeddings."""

from transformers import PreTrainedConfig

from .config_utils import (
    check_choice,
    check_common_values,
    check_positive,
    check_probability,
    fill_auto_map,
    resolve_options,
)
from .prediction import check_prediction_fields

# Defined here, not in recurrent.py, so that the config imports without transformers' modeling code.
CELL_TYPES = ("elman", "gated", "gru", "lstm")
NONLINEARITIES = ("tanh", "relu")
CLASSIFIER_POOLINGS = ("last", "mean", "max")


class RNNConfig(PreTrainedConfig):
    """A stack of recurrent layers over token embeddings. The defaults are the medium model of Zaremba et al. (2014)
    on a 10k vocabulary: a 2-layer LSTM of 650 units, with tied input and output embeddings.

    - `cell_type`: `elman` (Elman 1990; `nonlinearity` `tanh` or `relu`), `gated` (the gated Elman network: an
      update gate and a ReLU candidate), `gru` (Cho et al. 2014) or `lstm` (Hochreiter and Schmidhuber 1997).
      `nonlinearity` belongs to `elman`; the other cells have their own.
    - `embedding_size` (default `hidden_size`): the token embedding width. When it differs from `hidden_size`, the
      language model projects the top layer's states to `embedding_size` before the output embedding, so the input
      and output embeddings can still be tied.
    - Dropout (Zaremba et al. 2014 put it on the non-recurrent connections only): `embedding_dropout` on the
      embeddings, `hidden_dropout` between recurrent layers, `output_dropout` on the top layer's states before a
      head (`classifier_dropout`, if set, replaces it for the classification heads). `dropout=p` sets the first
      three (Zaremba et al.'s single p).
    - Aliases: `cell` and `rnn_type` for `cell_type`, `num_layers` for `num_hidden_layers`.
    - `bidirectional`: each layer also reads the sequence backwards (Schuster and Paliwal 1997); for the
      classification heads only, since a language model must not see the tokens it predicts.
    - `classifier_pooling`: how the sequence classifier summarises a sequence: `last` (the last layer's final state
      of each direction, i.e. the state at the last real token reading forwards, and at the first reading backwards),
      `mean` or `max` over the real tokens.
    - Initialisation: recurrent weights U(-1/sqrt(H), 1/sqrt(H)) as PyTorch's recurrent modules do; embeddings and
      linear layers N(0, `initializer_range`), biases 0.
    - `fused_loss` (default True): in training with labels, the loss is computed from the last hidden states in
      chunks of tokens (models/losses.py) without holding the (tokens x vocabulary) logits, and the output's
      `logits` is None; False computes and returns them. Evaluation (eval mode, no_grad) always returns them.
    - Forecasting (the `ForPrediction` head, models/prediction.py): `prediction_length` (None: not a forecaster),
      `context_length`, `lags_sequence`, `scaling`, `distribution_output`, `num_parallel_samples`.
    """

    model_type = "hf_seq_rnn"
    attribute_map = {"num_layers": "num_hidden_layers", "cell": "cell_type", "rnn_type": "cell_type"}
    option_groups = {"dropout": ("embedding_dropout", "hidden_dropout", "output_dropout")}

    vocab_size: int = 10000
    hidden_size: int = 650
    embedding_size: int | None = None
    num_hidden_layers: int = 2
    cell_type: str = "lstm"
    nonlinearity: str = "tanh"
    bidirectional: bool = False
    embedding_dropout: float = 0.5
    hidden_dropout: float = 0.5
    output_dropout: float = 0.5
    classifier_dropout: float | None = None
    classifier_pooling: str = "last"
    initializer_range: float = 0.05
    tie_word_embeddings: bool = True
    fused_loss: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    # forecasting: the ForPrediction head's settings (models/prediction.py, PREDICTION_DEFAULTS)
    prediction_length: int | None = None
    context_length: int | None = None
    lags_sequence: list[int] | tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)
    scaling: str = "std"
    distribution_output: str = "student_t"
    num_parallel_samples: int = 100

    def __post_init__(self, **kwargs):
        resolve_options(self, kwargs)
        if self.embedding_size is None:
            self.embedding_size = self.hidden_size
        check_positive(self, "vocab_size", "hidden_size", "embedding_size", "num_hidden_layers")
        check_choice(self, "cell_type", CELL_TYPES)
        check_choice(self, "nonlinearity", NONLINEARITIES)
        check_choice(self, "classifier_pooling", CLASSIFIER_POOLINGS)
        check_probability(self, "embedding_dropout", "hidden_dropout", "output_dropout", "classifier_dropout")
        if self.cell_type != "elman" and self.nonlinearity != "tanh":
            raise ValueError(
                f"RNNConfig: nonlinearity={self.nonlinearity!r} applies to cell_type='elman' only; the {self.cell_type} "
                "cell has fixed nonlinearities (the gated cell's candidate is a ReLU). Leave nonlinearity='tanh'."
            )
        check_prediction_fields(self)
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)


__all__ = ["RNNConfig"]
