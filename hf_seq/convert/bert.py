"""BERT (Devlin et al. 2019) <-> BERT: `BertForMaskedLM` <-> `BERTForMaskedLM`, `BertModel` <-> `BERTModel`."""

import dataclasses
from functools import partial

import transformers

from ..models.configuration_bert import BERTConfig
from ..models.modeling_bert import BERTForMaskedLM, BERTModel
from .base import ACTIVATIONS, ConfigMap, Rule, module_rules, register, same

FIELDS = {  # BERTConfig -> BertConfig
    **same("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"),
    **same("max_position_embeddings", "type_vocab_size", "layer_norm_eps", "hidden_act", "classifier_dropout"),
    **same("initializer_range", "tie_word_embeddings", "pad_token_id", "bos_token_id", "eos_token_id", "id2label"),
    "hidden_dropout": "hidden_dropout_prob",
    "attention_dropout": "attention_probs_dropout_prob",
}
FIXED = {"norm_type": "layernorm", "norm_position": "post", "attention_bias": True, "mlp_bias": True}
REFERENCE_FIXED = {"is_decoder": False, "add_cross_attention": False}  # an encoder only

CONFIG = ConfigMap(
    "BERT", BERTConfig, transformers.BertConfig, FIELDS, FIXED, REFERENCE_FIXED, {"hidden_act": ACTIVATIONS}
)
# The masked-LM head's decoder is the word embedding matrix on both sides.
TIED = dataclasses.replace(
    CONFIG,
    fixed={**FIXED, "tie_word_embeddings": True},
    reference_fixed={**REFERENCE_FIXED, "tie_word_embeddings": True},
)

# Each layer: ours -> BERT's. BERT projects q, k, v separately; our fused projection is the three stacked.
LAYER = {
    "self_attn.qkv_proj": ("attention.self.query", "attention.self.key", "attention.self.value"),
    "self_attn.o_proj": "attention.output.dense",
    "input_layernorm": "attention.output.LayerNorm",
    "mlp.up_proj": "intermediate.dense",
    "mlp.down_proj": "output.dense",
    "post_attention_layernorm": "output.LayerNorm",
}
# BertForMaskedLM has no pooler; its decoder weight is the tied word embedding matrix.
MASKED_LM_HEAD = {
    "lm_head.dense": "cls.predictions.transform.dense",
    "lm_head.norm": "cls.predictions.transform.LayerNorm",
}


def rules(config: BERTConfig, head: bool) -> list[Rule]:
    ours, ref = ("model.", "bert.") if head else ("", "")
    rules = [
        Rule(f"{ours}embeddings.{name}.weight", (f"{ref}embeddings.{name}.weight",))
        for name in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    ]
    rules += module_rules(f"{ours}embeddings.", f"{ref}embeddings.", {"norm": "LayerNorm"})
    for i in range(config.num_hidden_layers):
        rules += module_rules(f"{ours}layers.{i}.", f"{ref}encoder.layer.{i}.", LAYER)
    if head:
        return rules + module_rules("", "", MASKED_LM_HEAD) + [Rule("lm_head.decoder.bias", ("cls.predictions.bias",))]
    return rules + module_rules("", "", {"pooler.dense": "pooler.dense"})


register(transformers.BertForMaskedLM, BERTForMaskedLM, TIED, partial(rules, head=True))
register(transformers.BertModel, BERTModel, CONFIG, partial(rules, head=False))
