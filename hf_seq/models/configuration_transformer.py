"""Configuration of the encoder-decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need")."""

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
from .seq2seq import drop_pipelines_registered_here

POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")
NORM_POSITIONS = ("post", "pre")


class TransformerConfig(PreTrainedConfig):
    """An encoder-decoder Transformer. The defaults are the paper's base model (section 3, table 3): d_model 512,
    6 + 6 layers, 8 heads, d_ff 2048, P_drop 0.1, post-LN, sinusoidal positions, ReLU, embeddings scaled by
    sqrt(d_model), one vocabulary for source and target, and the two embedding matrices and the pre-softmax
    projection sharing one weight matrix (section 3.4). Each choice can be changed:

    - `norm_position`: `post` (the paper: LN(x + Sublayer(x))) or `pre` (x + Sublayer(LN(x)), with a final LN after
      each stack; Wang et al. 2019, "Learning Deep Transformer Models for Machine Translation").
    - `position_embedding_type`: `sinusoidal` (section 3.5) or `learned` (the paper's table 3, row E).
    - `norm_type`: `layernorm` or `rmsnorm`; `hidden_act`: `relu` (the paper), `gelu`, `gelu_new`, `swiglu`.
    - `tie_word_embeddings`: True ties the encoder embeddings, the decoder embeddings and the output projection
      (three-way tying over the shared vocabulary); False gives each its own matrix.
    - `scale_embedding`: multiply the token embeddings by sqrt(hidden_size) (section 3.4).
    - `output_bias`: a bias on the output projection (not in the paper; MarianMT checkpoints have one).
    - `label_smoothing`: epsilon of the label-smoothed loss (section 5.4 uses 0.1); 0 is plain cross-entropy.
    - Dropout: `dropout` is the paper's P_drop, on the embedding sums and on every sub-layer output before the
      residual addition (section 5.4); `attention_dropout` acts on the attention weights and `activation_dropout`
      inside the feed-forward layer (both 0 in the paper). `source_word_dropout` zeroes whole source token
      embeddings in training (Sennrich and Zhang 2019; not in the paper).
    - `decoder_start_token_id`: the first decoder input; None means `bos_token_id`.
    - `fused_loss` (default True): in training with labels, the loss is computed from the last hidden states in
      chunks of tokens (models/losses.py) without holding the (tokens x vocabulary) logits, and the output's
      `logits` is None; False computes and returns them. Evaluation (eval mode, no_grad) always returns them.

    Encoder and decoder share `hidden_size`, `num_attention_heads` and `intermediate_size`, as in the paper; their
    depths are `encoder_layers` and `decoder_layers`, and `num_hidden_layers=N` sets both. BART/Marian names
    (`d_model`, `encoder_ffn_dim`, `activation_function`, ...), `num_heads` and `layer_norm_epsilon` are accepted
    as aliases.
    """

    model_type = "hf_seq_transformer"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "d_model": "hidden_size",
        "num_hidden_layers": "encoder_layers",
        "encoder_attention_heads": "num_attention_heads",
        "decoder_attention_heads": "num_attention_heads",
        "encoder_ffn_dim": "intermediate_size",
        "decoder_ffn_dim": "intermediate_size",
        "num_heads": "num_attention_heads",
        "layer_norm_epsilon": "layer_norm_eps",
        "activation_function": "hidden_act",
    }
    option_groups = {"num_hidden_layers": ("encoder_layers", "decoder_layers")}

    vocab_size: int = 37000  # the paper's shared English-German BPE vocabulary
    hidden_size: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    norm_type: str = "layernorm"
    norm_position: str = "post"
    layer_norm_eps: float = 1e-5
    hidden_act: str = "relu"
    attention_bias: bool = True
    mlp_bias: bool = True
    output_bias: bool = False
    scale_embedding: bool = True
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    label_smoothing: float = 0.0
    source_word_dropout: float = 0.0
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    fused_loss: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = None

    def __post_init__(self, **kwargs):
        drop_pipelines_registered_here(kwargs)  # a saved folder's translation pipeline, when hf-seq serves it here
        resolve_options(self, kwargs)
        check_positive(
            self,
            "vocab_size",
            "hidden_size",
            "encoder_layers",
            "decoder_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        )
        check_choice(self, "position_embedding_type", POSITION_EMBEDDING_TYPES)
        check_choice(self, "norm_type", NORM_TYPES)
        check_choice(self, "norm_position", NORM_POSITIONS)
        check_choice(self, "hidden_act", ACTIVATIONS)
        check_probability(
            self, "dropout", "attention_dropout", "activation_dropout", "label_smoothing", "source_word_dropout"
        )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"TransformerConfig: hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})."
            )
        if not self.is_encoder_decoder:
            raise ValueError("TransformerConfig: is_encoder_decoder must be True (this family is an encoder-decoder).")
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)

    def __setattr__(self, key, value):
        # Reading num_hidden_layers gives the encoder's depth (attribute_map); setting it sets both stacks, as BART.
        if key == "num_hidden_layers":
            super().__setattr__("decoder_layers", value)
        super().__setattr__(key, value)


__all__ = ["TransformerConfig"]
