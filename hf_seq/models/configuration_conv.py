"""Configuration of the causal dilated convolution language model (WaveNet, van den Oord et al. 2016)."""

from transformers import PreTrainedConfig

from .config_utils import check_common_values, check_positive, check_probability, fill_auto_map, resolve_options
from .prediction import check_prediction_fields


class ConvConfig(PreTrainedConfig):
    """WaveNet's stack of gated, dilated causal convolutions, over token embeddings instead of audio samples.

    Layer l (dilation d_l) reads its input x_l through a causal convolution of `kernel_size` k taps spaced d_l apart:

        z_l = tanh(W_f,l * x_l) ⊙ σ(W_g,l * x_l)          (the gated activation unit)
        x_{l+1} = x_l + R_l z_l,      s_l = S_l z_l       (1x1 residual and skip projections)
        logits = U ReLU(P ReLU(sum_l s_l)) + b            (P: 1x1, skip_channels -> hidden_size; U: the output head)

    - `hidden_size`: the residual channels (the width of x_l, the token embeddings and the gates); `skip_channels`
      the width of s_l.
    - Dilations 1, 2, 4, ..., 2^(`dilation_cycle` - 1), the cycle repeated `num_blocks` times (the paper: 1, ..., 512
      three times); `num_hidden_layers` = dilation_cycle * num_blocks (read-only).
    - `dropout` on every z_l (the paper: none); `tie_word_embeddings`: U is the token embedding table.
    - `fused_loss` (default True): in training with labels, the loss is computed from the last hidden states in
      chunks of tokens (models/losses.py) without holding the (tokens x vocabulary) logits, and the output's
      `logits` is None; False computes and returns them. Evaluation (eval mode, no_grad) always returns them.
    - Forecasting (the `ForPrediction` head, models/prediction.py): `prediction_length` (None: not a forecaster),
      `context_length`, `lags_sequence`, `scaling`, `distribution_output`, `num_parallel_samples`.

    **Receptive field.** A layer's output at t reads inputs t - i d_l, i < k, so the stack's output at t reads the
    tokens t - R + 1, ..., t and nothing older, with

        R = (kernel_size - 1) * sum_l d_l + 1       (`receptive_field`; defaults: 3 * 1023 + 1 = 3070 tokens)

    There is no position limit: the convolutions are shift-invariant, so any length trains and scores, every position
    with the same R tokens of context (fewer at the start, where the missing ones read as zeros). `generate()`
    keeps, per layer, a queue of the last (k-1) d_l inputs, R - 1 vectors in all: the whole context the model can
    read, so cached generation equals recomputation whatever the prompt length. A state built for another receptive
    field is refused with an error naming it.
    """

    model_type = "hf_seq_conv"

    vocab_size: int = 10000
    hidden_size: int = 64
    kernel_size: int = 2
    dilation_cycle: int = 10
    num_blocks: int = 3
    skip_channels: int = 128
    dropout: float = 0.0
    initializer_range: float = 0.02
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
        if "num_hidden_layers" in kwargs:
            raise ValueError(
                "ConvConfig: num_hidden_layers is dilation_cycle * num_blocks (dilations 1, 2, ..., "
                "2^(dilation_cycle - 1), repeated num_blocks times); set those two instead."
            )
        resolve_options(self, kwargs)
        check_positive(self, "vocab_size", "hidden_size", "kernel_size", "dilation_cycle", "num_blocks")
        check_positive(self, "skip_channels")
        check_probability(self, "dropout")
        check_prediction_fields(self)
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)

    @property
    def num_hidden_layers(self) -> int:
        return self.dilation_cycle * self.num_blocks

    @property
    def dilations(self) -> list[int]:
        """d_l for every layer, first to last."""
        return [2**i for i in range(self.dilation_cycle)] * self.num_blocks

    @property
    def receptive_field(self) -> int:
        """R = (kernel_size - 1) * sum of the dilations + 1: the tokens an output reads, itself included."""
        return (self.kernel_size - 1) * sum(self.dilations) + 1


__all__ = ["ConvConfig"]
