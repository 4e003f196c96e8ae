"""Mamba-2 (Dao and Gu 2024) <-> the SSM family's mamba2 block: `Mamba2ForCausalLM` <-> `SSMForCausalLM`,
`Mamba2Model` <-> `SSMModel` (`ssm_type="mamba2"`).

Our Mamba-2 block keeps transformers' parameter names and layouts (in_proj, conv1d over x, B and C, dt_bias, A_log,
D, the gated RMSNorm `norm`, out_proj, the block norms), so the rules rename. Mamba2Config's time_step_rank is
unused by its model, and rescale_prenorm_residual only initialises weights: they are not carried. transformers'
block is Norm(y * SiLU(z)) with an RMSNorm, our `rms_norm=True, norm_before_gate=False`. Padding: transformers
zeroes the block's input at padded positions, ours the convolution's input and the step size; without in_proj
biases (the default) the outputs at real tokens are the same numbers."""

from functools import partial

import transformers

from ..models.configuration_ssm import SSMConfig
from ..models.modeling_ssm import SSMForCausalLM, SSMModel
from .base import ConfigMap, register, same
from .mamba import rules as mamba_rules

FIELDS = {  # SSMConfig -> Mamba2Config
    **same("vocab_size", "hidden_size", "num_hidden_layers", "state_size", "expand", "conv_kernel"),
    **same("num_heads", "head_dim", "n_groups", "chunk_size"),
    **same("time_step_min", "time_step_max", "time_step_floor", "time_step_limit"),
    **same("use_bias", "use_conv_bias", "residual_in_fp32", "initializer_range", "tie_word_embeddings", "use_cache"),
    **same("pad_token_id", "bos_token_id", "eos_token_id"),
    "layer_norm_eps": "layer_norm_epsilon",
}
FIXED = {"ssm_type": "mamba2", "hidden_dropout": 0.0, "rms_norm": True, "norm_before_gate": False}
REFERENCE_FIXED = {"hidden_act": "silu"}  # the Mamba-2 block's activation is SiLU

CONFIG = ConfigMap(
    "Mamba-2",
    SSMConfig,
    transformers.Mamba2Config,
    FIELDS,
    FIXED,
    REFERENCE_FIXED,
    derive_reference=lambda config: {"time_step_limit": tuple(config.time_step_limit)},
)

# Each layer's parameters, under the same names on both sides.
LAYER = ["norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.dt_bias", "mixer.A_log", "mixer.D"]
LAYER += ["mixer.norm.weight", "mixer.out_proj.weight"]


register(transformers.Mamba2ForCausalLM, SSMForCausalLM, CONFIG, partial(mamba_rules, head=True, layer=LAYER))
register(transformers.Mamba2Model, SSMModel, CONFIG, partial(mamba_rules, head=False, layer=LAYER))
