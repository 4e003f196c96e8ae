"""Configuration of the BERT family: an encoder-only Transformer pretrained as a masked language model (Devlin et al.
2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding")."""

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

NORM_POSITIONS = ("post", "pre")


class BERTConfig(PreTrainedConfig):
    """A bidirectional Transformer encoder. The defaults are BERT-base's shape and choices (post-LN, exact GELU,
    learned absolute positions, two token types, the MLM decoder tied to the word embeddings).

    - `norm_position`: `post` (the paper: LN(x + f(x)), and an LN on the embeddings) or `pre` (x + f(LN(x)), no LN
      on the embeddings, a final LN after the last block; more stable when training deep stacks, Xiong et al. 2020).
    - `norm_type`: `layernorm` or `rmsnorm`; `hidden_act`: `gelu` (BERT), `gelu_new`, `relu`, `swiglu`.
    - `type_vocab_size`: the number of segments (`token_type_ids`: 0 for sentence A, 1 for sentence B).
    - `hidden_dropout` acts on the embeddings and on each sublayer's output, `attention_dropout` on the attention
      weights, `classifier_dropout` (default: `hidden_dropout`) before the task heads. BERT's own names
      (`hidden_dropout_prob`, `attention_probs_dropout_prob`) are accepted as aliases; `dropout=p` sets both
      (the paper uses one P_drop).
    - `intermediate_size` defaults to 4 * hidden_size.

    `num_heads`, `layer_norm_epsilon` and `hidden_activation` are accepted as aliases of `num_attention_heads`,
    `layer_norm_eps` and `hidden_act`.
    """

    model_type = "hf_seq_bert"
    attribute_map = {
        "hidden_dropout_prob": "hidden_dropout",
        "attention_probs_dropout_prob": "attention_dropout",
        "num_heads": "num_attention_heads",
        "layer_norm_epsilon": "layer_norm_eps",
        "hidden_activation": "hidden_act",
    }
    option_groups = {"dropout": ("hidden_dropout", "attention_dropout")}

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int | None = None
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    norm_type: str = "layernorm"
    norm_position: str = "post"
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    attention_bias: bool = True
    mlp_bias: bool = True
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    classifier_dropout: float | None = None
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs):
        resolve_options(self, kwargs)
        check_positive(
            self,
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "max_position_embeddings",
            "type_vocab_size",
        )
        check_choice(self, "norm_type", NORM_TYPES)
        check_choice(self, "norm_position", NORM_POSITIONS)
        check_choice(self, "hidden_act", ACTIVATIONS)
        check_probability(self, "attention_dropout", "hidden_dropout", "classifier_dropout")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"BERTConfig: hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads})."
            )
        if self.intermediate_size is None:
            self.intermediate_size = 4 * self.hidden_size
        check_positive(self, "intermediate_size")
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)


__all__ = ["BERTConfig"]
