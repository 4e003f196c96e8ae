"""MarianMT (Junczys-Dowmunt et al. 2018) <-> the encoder-decoder Transformer: `MarianMTModel` <->
`TransformerForConditionalGeneration`.

Marian is the paper's architecture: post-LN, sinusoidal positions (sines then cosines, as ours), embeddings scaled
by sqrt(d_model) when `scale_embedding`, q/k/v projected separately (ours fused), and a `final_logits_bias` buffer
that maps to our optional output bias. Marian counts positions 0, 1, ... from the first slot whatever the padding,
ours count real tokens: the two agree on unpadded and right-padded sources (the tokenizers' default).
`label_smoothing` is a training option of our loss, not of the architecture: the logits agree either way."""

import transformers

from ..models.configuration_transformer import TransformerConfig
from ..models.modeling_transformer import TransformerForConditionalGeneration
from .base import ACTIVATIONS, ConfigMap, Rule, module_rules, register, require, same

FIELDS = {  # TransformerConfig -> MarianConfig; ours has one vocabulary, and encoder and decoder of one width
    **same("encoder_layers", "decoder_layers", "max_position_embeddings", "scale_embedding"),
    **same("dropout", "attention_dropout", "activation_dropout", "tie_word_embeddings", "use_cache"),
    **same("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"),
    "vocab_size": ("vocab_size", "decoder_vocab_size"),
    "hidden_size": "d_model",
    "num_attention_heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "intermediate_size": ("encoder_ffn_dim", "decoder_ffn_dim"),
    "hidden_act": "activation_function",
    "initializer_range": "init_std",
}
FIXED = {
    "position_embedding_type": "sinusoidal",
    "norm_type": "layernorm",
    "norm_position": "post",
    "layer_norm_eps": 1e-5,  # Marian's nn.LayerNorm default
    "attention_bias": True,
    "mlp_bias": True,
}
REFERENCE_FIXED = {"encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0}


def derive_ours(config) -> dict:
    if not config.share_encoder_decoder_embeddings:  # then tying ties the output to the decoder embeddings only
        why = " when share_encoder_decoder_embeddings=False"
        require(config, "tie_word_embeddings", [False], "from_transformers", "TransformerConfig", why)
    return {"output_bias": True}  # final_logits_bias: zero in a fresh model, trained in the published checkpoints


def derive_reference(config: TransformerConfig) -> dict:
    start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.bos_token_id
    return {
        "decoder_start_token_id": start,
        "share_encoder_decoder_embeddings": config.tie_word_embeddings,
        "forced_eos_token_id": None,
    }


CONFIG = ConfigMap(
    "Marian",
    TransformerConfig,
    transformers.MarianConfig,
    FIELDS,
    FIXED,
    REFERENCE_FIXED,
    {"hidden_act": ACTIVATIONS},
    derive_ours,
    derive_reference,
)

# Each layer: ours -> Marian's. Our fused projections are Marian's separate q, k, v (heads contiguous in each)
# stacked in that order, and the cross-attention's k and v likewise.
SELF_ATTENTION = {
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "self_attn.o_proj": "self_attn.out_proj",
    "self_attn_layer_norm": "self_attn_layer_norm",
}
CROSS_ATTENTION = {
    "cross_attn.q_proj": "encoder_attn.q_proj",
    "cross_attn.kv_proj": ("encoder_attn.k_proj", "encoder_attn.v_proj"),
    "cross_attn.o_proj": "encoder_attn.out_proj",
    "cross_attn_layer_norm": "encoder_attn_layer_norm",
}
FEED_FORWARD = {"mlp.up_proj": "fc1", "mlp.down_proj": "fc2", "final_layer_norm": "final_layer_norm"}
LAYERS = {
    "encoder": {**SELF_ATTENTION, **FEED_FORWARD},
    "decoder": {**SELF_ATTENTION, **CROSS_ATTENTION, **FEED_FORWARD},
}


def rules(config: TransformerConfig) -> list[Rule]:
    rules = [
        # Marian's sinusoid tables are rebuilt from the config at load time, like ours.
        Rule("", ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"), "reference_only"),
    ]
    if config.tie_word_embeddings:  # one matrix: Marian's `shared`, tied to both embeddings and lm_head
        rules.append(Rule("model.encoder.embed_tokens.weight", ("model.shared.weight",)))
    else:  # three matrices; a `shared` matrix that Marian keeps unused when untied is not carried over
        for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
            rules.append(Rule(name, (name,)))
        rules.append(Rule("", ("model.shared.weight",), "reference_only"))
    if config.output_bias:
        rules.append(Rule("lm_head.bias", ("final_logits_bias",), "row"))
    else:
        rules.append(Rule("", ("final_logits_bias",), "reference_only"))  # Marian initialises it to zero
    for stack, layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(layers):
            prefix = f"model.{stack}.layers.{i}."
            rules += module_rules(prefix, prefix, LAYERS[stack])
    return rules


register(transformers.MarianMTModel, TransformerForConditionalGeneration, CONFIG, rules)
