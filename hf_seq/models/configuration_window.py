"""Configuration of the fixed-window neural language model (Bengio, Ducharme, Vincent and Jauvin 2003)."""

from transformers import PreTrainedConfig

from .config_utils import check_common_values, check_positive, check_probability, fill_auto_map, resolve_options
from .prediction import check_prediction_fields


class WindowConfig(PreTrainedConfig):
    """A feed-forward language model that reads the previous `context_size` = n-1 tokens, no more:

        x = (C(w_{t-1}), C(w_{t-2}), ..., C(w_{t-n+1}))       (concatenated embeddings, (n-1) * m features)
        y = b + W x + U tanh(d + H x)                           P(w_t | context) = softmax(y)

    - `context_size` (n-1), `embedding_size` (m, the width of C), `hidden_size` (h) and `num_hidden_layers`
      (1 in the paper; more stack tanh layers, h_l = tanh(d_l + H_l h_{l-1}), and U reads the last one).
    - `direct_connections`: the paper's optional W x term, a linear map straight from the window to the output
      (a (n-1) * m by V matrix; False: W = 0).
    - `tie_word_embeddings`: U = C^T P, the output reusing the input embedding C (not in the paper, which keeps U
      separate). When `hidden_size` differs from `embedding_size`, a projection P (h -> m) is learned for that.
    - `embedding_dropout` on x and `hidden_dropout` on each tanh layer (the paper used weight decay only: 0).
    - Positions before the first token, and padding, read a zero embedding ("no word").
    - `fused_loss` (default True): in training with labels, the loss is computed from the last hidden states in
      chunks of tokens (models/losses.py) without holding the (tokens x vocabulary) logits, and the output's
      `logits` is None; False computes and returns them. Evaluation (eval mode, no_grad) always returns them.
    - Forecasting (the `ForPrediction` head, models/prediction.py): `prediction_length` (None: not a forecaster),
      `context_length`, `lags_sequence`, `scaling`, `distribution_output`, `num_parallel_samples`.
    """

    model_type = "hf_seq_window"
    attribute_map = {"num_layers": "num_hidden_layers"}

    vocab_size: int = 10000
    context_size: int = 4
    embedding_size: int = 60
    hidden_size: int = 50
    num_hidden_layers: int = 1
    direct_connections: bool = False
    embedding_dropout: float = 0.0
    hidden_dropout: float = 0.0
    initializer_range: float = 0.05
    tie_word_embeddings: bool = False
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
        check_positive(self, "vocab_size", "context_size", "embedding_size", "hidden_size", "num_hidden_layers")
        check_probability(self, "embedding_dropout", "hidden_dropout")
        check_prediction_fields(self)
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)


__all__ = ["WindowConfig"]
