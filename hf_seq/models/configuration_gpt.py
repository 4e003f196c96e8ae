"""Configuration of the GPT family: a decoder-only Transformer language model (Radford et al. 2018, 2019)."""

from transformers import PreTrainedConfig

from .config_utils import (
    check_choice,
    check_common_values,
    check_positive,
    check_probability,
    fill_auto_map,
    resolve_options,
)
from .layers import ACTIVATIONS, NORM_TYPES
from .prediction import check_prediction_fields

POSITION_EMBEDDING_TYPES = ("learned", "sinusoidal", "rope", "alibi")
NORM_POSITIONS = ("pre", "post")


class GPTConfig(PreTrainedConfig):
    """A decoder-only Transformer. The defaults are GPT-2 small's shape with GPT-2's choices (learned positions,
    pre-LN, tanh-approximated GELU, tied embeddings); each component can be swapped:

    - `position_embedding_type`: `learned` (GPT-2), `sinusoidal` (Vaswani et al. 2017), `rope` (RoFormer),
      `alibi` (Press et al. 2022). `learned` and `sinusoidal` stop at `max_position_embeddings` tokens.
    - `norm_type`: `layernorm` or `rmsnorm`; `norm_position`: `pre` (GPT-2: x + f(LN(x)), a final LN after the
      last block) or `post` (the 2017 original: LN(x + f(x)), no final LN).
    - `hidden_act`: `gelu`, `gelu_new` (tanh approximation, GPT-2), `relu` (2017), `swiglu` (Shazeer 2020).
    - `intermediate_size` defaults to 4 * hidden_size.
    - Mixture of experts (Mixtral's names): `num_local_experts` >= 1 replaces each feed-forward block by that many
      experts, each token routed to its `num_experts_per_tok` most probable ones (layers.MixtureOfExperts);
      0 (the default) keeps the dense block. Training adds `router_aux_loss_coef` times the load-balancing loss to
      the LM loss; `output_router_logits` returns each layer's router logits.
    - Dropout: `embedding_dropout` on the embedding sum, `attention_dropout` on the attention weights,
      `hidden_dropout` on each sub-layer's output; `dropout=p` sets all three (nanoGPT's single `dropout`).
    - `fused_loss` (default True): in training with labels, the loss is computed from the last hidden states in
      chunks of tokens (models/losses.py) without holding the (tokens x vocabulary) logits, and the output's
      `logits` is None; False computes and returns them. Evaluation (eval mode, no_grad) always returns them.
    - Forecasting (the `ForPrediction` head, models/prediction.py): `prediction_length` (None: not a forecaster),
      `context_length`, `lags_sequence`, `scaling`, `distribution_output`, `num_parallel_samples`.

    GPT-2's names (`n_embd`, `n_layer`, `n_head`, `n_positions`, `n_inner`, `layer_norm_epsilon`,
    `activation_function`, `embd_pdrop`, `attn_pdrop`, `resid_pdrop`) and `num_heads` are accepted as aliases.
    The model is causal by definition: `is_causal=False` is refused (BERTConfig is the bidirectional encoder).
    """

    model_type = "hf_seq_gpt"
    attribute_map = {
        "n_embd": "hidden_size",
        "n_layer": "num_hidden_layers",
        "n_head": "num_attention_heads",
        "num_heads": "num_attention_heads",
        "n_positions": "max_position_embeddings",
        "n_inner": "intermediate_size",
        "layer_norm_epsilon": "layer_norm_eps",
        "activation_function": "hidden_act",
        "embd_pdrop": "embedding_dropout",
        "attn_pdrop": "attention_dropout",
        "resid_pdrop": "hidden_dropout",
    }
    option_groups = {"dropout": ("embedding_dropout", "attention_dropout", "hidden_dropout")}

    vocab_size: int = 50257
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int | None = None
    max_position_embeddings: int = 1024
    position_embedding_type: str = "learned"
    rope_theta: float = 10000.0
    norm_type: str = "layernorm"
    norm_position: str = "pre"
    layer_norm_eps: float = 1e-5
    hidden_act: str = "gelu_new"
    attention_bias: bool = True
    mlp_bias: bool = True
    num_local_experts: int = 0
    num_experts_per_tok: int = 2
    router_aux_loss_coef: float = 0.001
    output_router_logits: bool = False
    embedding_dropout: float = 0.1
    attention_dropout: float = 0.1
    hidden_dropout: float = 0.1
    classifier_dropout: float | None = None
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    fused_loss: bool = True
    use_cache: bool = True
    is_causal: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = 50256
    eos_token_id: int | list[int] | None = 50256
    # forecasting: the ForPrediction head's settings (models/prediction.py, PREDICTION_DEFAULTS)
    prediction_length: int | None = None
    context_length: int | None = None
    lags_sequence: list[int] | tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)
    scaling: str = "std"
    distribution_output: str = "student_t"
    num_parallel_samples: int = 100

    def __post_init__(self, **kwargs):
        resolve_options(self, kwargs)
        check_positive(
            self,
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "max_position_embeddings",
        )
        check_choice(self, "position_embedding_type", POSITION_EMBEDDING_TYPES)
        check_choice(self, "norm_type", NORM_TYPES)
        check_choice(self, "norm_position", NORM_POSITIONS)
        check_choice(self, "hidden_act", ACTIVATIONS)
        check_probability(self, "embedding_dropout", "attention_dropout", "hidden_dropout", "classifier_dropout")
        if not self.is_causal:
            raise ValueError(
                "GPTConfig: is_causal=False is not supported: GPT is a causal language model, each position attends "
                "to itself and earlier positions only. For a bidirectional encoder use BERTConfig."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"GPTConfig: hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})."
            )
        if self.position_embedding_type == "rope" and (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError("GPTConfig: position_embedding_type='rope' needs an even head size (hidden_size / heads).")
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        check_positive(self, "intermediate_size")
        if self.num_local_experts < 0:
            raise ValueError(
                f"GPTConfig: num_local_experts must be 0 (a dense feed-forward block) or a positive number of experts, "
                f"got {self.num_local_experts}."
            )
        if self.num_local_experts and not 1 <= self.num_experts_per_tok <= self.num_local_experts:
            raise ValueError(
                f"GPTConfig: num_experts_per_tok={self.num_experts_per_tok} is not supported with "
                f"num_local_experts={self.num_local_experts}; allowed values: 1 to {self.num_local_experts}."
            )
        if not self.router_aux_loss_coef >= 0:
            raise ValueError(f"GPTConfig: router_aux_loss_coef must be >= 0, got {self.router_aux_loss_coef!r}.")
        check_prediction_fields(self)
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)


__all__ = ["GPTConfig"]
