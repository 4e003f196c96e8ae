"""Mamba (Gu and Dao 2023) <-> the SSM family's mamba block: `MambaForCausalLM` <-> `SSMForCausalLM`, `MambaModel`
<-> `SSMModel` (`ssm_type="mamba"`).

Our Mamba block keeps transformers' parameter names and layouts (in_proj, conv1d, x_proj, dt_proj, A_log, D,
out_proj, the RMSNorms), so the rules rename. MambaConfig's time_step_scale, time_step_init_scheme and
rescale_prenorm_residual only initialise weights, and use_mambapy / use_associative_scan choose how the scan is
computed: given the weights, the outputs do not depend on them, and they are not carried. Padding: transformers
zeroes the block's input at padded positions, ours the convolution's input; without in_proj biases (Mamba's
default) the two are the same numbers."""

from functools import partial

import transformers

from ..models.configuration_ssm import SSMConfig
from ..models.modeling_ssm import SSMForCausalLM, SSMModel
from .base import ConfigMap, Rule, register, same

FIELDS = {  # SSMConfig -> MambaConfig
    **same("vocab_size", "hidden_size", "num_hidden_layers", "state_size", "expand", "conv_kernel"),
    **same("time_step_rank", "time_step_min", "time_step_max", "time_step_floor"),
    **same("use_bias", "use_conv_bias", "residual_in_fp32", "initializer_range", "tie_word_embeddings", "use_cache"),
    **same("pad_token_id", "bos_token_id", "eos_token_id"),
    "layer_norm_eps": "layer_norm_epsilon",
}
FIXED = {"ssm_type": "mamba", "hidden_dropout": 0.0}
REFERENCE_FIXED = {"hidden_act": "silu"}  # the Mamba block's activation is SiLU

CONFIG = ConfigMap(
    "Mamba",
    SSMConfig,
    transformers.MambaConfig,
    FIELDS,
    FIXED,
    REFERENCE_FIXED,
    derive_ours=lambda config: {"time_step_rank": int(config.time_step_rank)},
)

# Each layer's parameters, under the same names on both sides.
LAYER = ["norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.x_proj.weight", "mixer.dt_proj.weight"]
LAYER += ["mixer.dt_proj.bias", "mixer.A_log", "mixer.D", "mixer.out_proj.weight"]


def rules(config: SSMConfig, head: bool, layer: list[str] = LAYER) -> list[Rule]:
    """The pair's weights: the embeddings, the final norm, each layer's `layer` names (and the biases its config
    has), the head. Mamba-2's pair (convert/mamba2.py) names its layer's weights and reuses the rest."""
    ours, ref = ("model.", "backbone.") if head else ("", "")
    rules = [
        Rule(f"{ours}embed_tokens.weight", (f"{ref}embeddings.weight",)),
        Rule(f"{ours}norm.weight", (f"{ref}norm_f.weight",)),
    ]
    names = layer + ["mixer.in_proj.bias", "mixer.out_proj.bias"] * config.use_bias
    names += ["mixer.conv1d.bias"] * config.use_conv_bias
    for i in range(config.num_hidden_layers):
        rules += [Rule(f"{ours}layers.{i}.{name}", (f"{ref}layers.{i}.{name}",)) for name in names]
    if head and not config.tie_word_embeddings:
        rules.append(Rule("lm_head.weight", ("lm_head.weight",)))
    return rules


register(transformers.MambaForCausalLM, SSMForCausalLM, CONFIG, partial(rules, head=True))
register(transformers.MambaModel, SSMModel, CONFIG, partial(rules, head=False))
