"""GPT-2 (Radford et al. 2019) <-> GPT: `GPT2LMHeadModel` <-> `GPTForCausalLM`, `GPT2Model` <-> `GPTModel`."""

from functools import partial

import transformers

from ..models.configuration_gpt import GPTConfig
from ..models.modeling_gpt import GPTForCausalLM, GPTModel
from .base import ACTIVATIONS, ConfigMap, Rule, module_rules, register, same

FIELDS = {  # GPTConfig -> GPT2Config
    **same("vocab_size", "initializer_range", "tie_word_embeddings", "use_cache"),
    **same("pad_token_id", "bos_token_id", "eos_token_id"),
    "hidden_size": "n_embd",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "intermediate_size": "n_inner",  # GPT-2's None means 4 * n_embd
    "max_position_embeddings": "n_positions",
    "layer_norm_eps": "layer_norm_epsilon",
    "hidden_act": "activation_function",
    "embedding_dropout": "embd_pdrop",
    "attention_dropout": "attn_pdrop",
    "hidden_dropout": "resid_pdrop",
}
FIXED = {  # GPT-2's block: learned positions, pre-LN with LayerNorm, biases everywhere, causal, a dense MLP
    "position_embedding_type": "learned",
    "norm_type": "layernorm",
    "norm_position": "pre",
    "attention_bias": True,
    "mlp_bias": True,
    "is_causal": True,
    "num_local_experts": 0,
}
REFERENCE_FIXED = {"add_cross_attention": False, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False}

CONFIG = ConfigMap(
    "GPT-2",
    GPTConfig,
    transformers.GPT2Config,
    FIELDS,
    FIXED,
    REFERENCE_FIXED,
    values={"hidden_act": ACTIVATIONS},
    derive_ours=lambda config: {"intermediate_size": 4 * config.n_embd if config.n_inner is None else config.n_inner},
)

# Each block: ours -> GPT-2's. GPT-2's c_attn outputs q, k, v in that order, heads contiguous in each, which is the
# layout of our qkv_proj, so the fused weight maps as one tensor. Its linear layers are Conv1D, stored (in, out).
LAYER = {
    "input_layernorm": "ln_1",
    "self_attn.qkv_proj": "attn.c_attn",
    "self_attn.o_proj": "attn.c_proj",
    "post_attention_layernorm": "ln_2",
    "mlp.up_proj": "mlp.c_fc",
    "mlp.down_proj": "mlp.c_proj",
}
CONV1D = ("self_attn.qkv_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj")


def rules(config: GPTConfig, head: bool) -> list[Rule]:
    ours, ref = ("model.", "transformer.") if head else ("", "")
    rules = [
        Rule(f"{ours}embed_tokens.weight", (f"{ref}wte.weight",)),
        Rule(f"{ours}embed_positions.weight", (f"{ref}wpe.weight",)),
        *module_rules(ours, ref, {"norm": "ln_f"}),
    ]
    for i in range(config.num_hidden_layers):
        rules += module_rules(f"{ours}layers.{i}.", f"{ref}h.{i}.", LAYER, transposed=CONV1D)
    if head and not config.tie_word_embeddings:
        rules.append(Rule("lm_head.weight", ("lm_head.weight",)))
    return rules


register(transformers.GPT2LMHeadModel, GPTForCausalLM, CONFIG, partial(rules, head=True))
register(transformers.GPT2Model, GPTModel, CONFIG, partial(rules, head=False))
