"""Configuration of the state-space family: S4D (Gu et al. 2022), Mamba (Gu and Dao 2023) and Mamba-2 (Dao and Gu
2024) language models."""

import dataclasses
import math

from transformers import PreTrainedConfig

from .config_utils import (
    check_choice,
    check_common_values,
    check_positive,
    check_probability,
    fill_auto_map,
    resolve_options,
)
from .prediction import check_prediction_fields

# Defined here, not in scan.py, so that the config imports without torch.
SSM_TYPES = ("s4d", "mamba", "mamba2")
S4D_INITS = ("lin", "inv", "real")
S4D_OUTPUTS = ("glu", "linear")
# options that only one block reads: setting one for the other block is refused
S4D_OPTIONS = ("s4d_init", "s4d_output")
# the block of both Mambas: projections, the short convolution, the step size's floor, the float32 residual
GATED_OPTIONS = ("expand", "conv_kernel", "time_step_floor", "use_bias", "use_conv_bias", "residual_in_fp32")
MAMBA_OPTIONS = (*GATED_OPTIONS, "time_step_rank", "scan_chunk_size")
MAMBA2_OPTIONS = (
    *GATED_OPTIONS,
    "num_heads",
    "head_dim",
    "n_groups",
    "chunk_size",
    "time_step_limit",
    "rms_norm",
    "norm_before_gate",
)
OPTIONS = {"s4d": S4D_OPTIONS, "mamba": MAMBA_OPTIONS, "mamba2": MAMBA2_OPTIONS}
DEFAULT_STATE_SIZE = {"s4d": 64, "mamba": 16, "mamba2": 128}  # the papers' (and transformers') defaults


class SSMConfig(PreTrainedConfig):
    """A stack of state-space blocks over token embeddings, with a (tied) output embedding.

    - `ssm_type`: `s4d` (a linear time-invariant diagonal SSM over the `hidden_size` channels, trained as a long
      convolution, Gu et al. 2022) or `mamba` (the selective SSM, whose step size and B, C depend on the input, Gu
      and Dao 2023). models/scan.py states the equations of both.
    - `state_size` N (default 64 for s4d, 16 for mamba): the state per channel. A complex S4D keeps N/2 modes, whose
      conjugates make up the other half.
    - `time_step_min`, `time_step_max`: the step size Delta is initialised log-uniformly between them (both blocks);
      Mamba clamps it at `time_step_floor`.
    - S4D only: `s4d_init`, the diagonal A: `lin` (S4D-Lin, A_n = -1/2 + i pi n), `inv` (S4D-Inv,
      A_n = -1/2 + i N/pi (N/(2n+1) - 1)) or `real` (S4D-Real, A_n = -(n+1)); `s4d_output`, the position-wise
      layer after the GELU: `glu` (a linear to 2H and a GLU, as the paper's reference) or `linear`.
    - Mamba only (transformers' `MambaConfig` names): `expand` (the inner width E = expand * hidden_size),
      `conv_kernel` (the short causal convolution), `time_step_rank` (the rank of Delta's projection, default
      ceil(hidden_size / 16)), `use_bias` (in_proj and out_proj), `use_conv_bias`, `residual_in_fp32` (the residual
      stream kept in float32 under half precision), `scan_chunk_size` (the steps the chunked scan computes at once
      on an accelerator, at most 4; a CPU runs the scan step by step; a computation setting, the outputs do not
      depend on it). `expand`, `conv_kernel`, `time_step_floor`, `use_bias`, `use_conv_bias` and
      `residual_in_fp32` serve Mamba-2 too.
    - Mamba-2 only (transformers' `Mamba2Config` names; models/ssd.py states the layer): `head_dim` P (default 64)
      and `num_heads` (default expand * hidden_size / head_dim; num_heads * head_dim must equal the inner width),
      each head with one scalar decay A; `n_groups` (B and C are shared by the num_heads / n_groups heads of a
      group, and the gated RMSNorm normalises per group); `chunk_size` (the steps the chunked form treats as one
      quadratic block; a computation setting, the outputs do not depend on it); `time_step_limit` (low, high): Delta
      is clamped into it after the softplus; `rms_norm` (the gated RMSNorm before out_proj, else y * SiLU(z)) and
      `norm_before_gate` (False: Norm(y * SiLU(z)), as transformers; True: Norm(y) * SiLU(z)).
    - `hidden_dropout` on each block's output before the residual sum (and, in S4D, after the GELU);
      `classifier_dropout` (default `hidden_dropout`) before the sequence classifier.
    - Aliases: `num_layers` for `num_hidden_layers`, `d_state` for `state_size`, `d_conv` for `conv_kernel`,
      `layer_norm_epsilon` for `layer_norm_eps`.
    - `fused_loss` (default True): in training with labels, the loss is computed from the last hidden states in
      chunks of tokens (models/losses.py) without holding the (tokens x vocabulary) logits, and the output's
      `logits` is None; False computes and returns them. Evaluation (eval mode, no_grad) always returns them.
    - Forecasting (the `ForPrediction` head, models/prediction.py): `prediction_length` (None: not a forecaster),
      `context_length`, `lags_sequence`, `scaling`, `distribution_output`, `num_parallel_samples`.
    """

    model_type = "hf_seq_ssm"
    attribute_map = {
        "num_layers": "num_hidden_layers",
        "d_state": "state_size",
        "d_conv": "conv_kernel",
        "layer_norm_epsilon": "layer_norm_eps",
    }

    vocab_size: int = 10000
    hidden_size: int = 256
    num_hidden_layers: int = 4
    ssm_type: str = "mamba"
    state_size: int | None = None
    time_step_min: float = 0.001
    time_step_max: float = 0.1
    s4d_init: str = "lin"
    s4d_output: str = "glu"
    expand: int = 2
    conv_kernel: int = 4
    time_step_rank: int | None = None
    time_step_floor: float = 1e-4
    use_bias: bool = False
    use_conv_bias: bool = True
    residual_in_fp32: bool = True
    scan_chunk_size: int = 4
    num_heads: int | None = None
    head_dim: int = 64
    n_groups: int = 1
    chunk_size: int = 64
    time_step_limit: list[float] | tuple[float, ...] = (0.0, math.inf)
    rms_norm: bool = True
    norm_before_gate: bool = False
    layer_norm_eps: float = 1e-5
    hidden_dropout: float = 0.0
    classifier_dropout: float | None = None
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
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
        check_choice(self, "ssm_type", SSM_TYPES)
        check_choice(self, "s4d_init", S4D_INITS)
        check_choice(self, "s4d_output", S4D_OUTPUTS)
        self.time_step_limit = tuple(self.time_step_limit)  # a list after a JSON round trip
        self._refuse_other_blocks_options()
        if self.state_size is None:
            self.state_size = DEFAULT_STATE_SIZE[self.ssm_type]
        if self.ssm_type == "mamba" and self.time_step_rank is None:
            self.time_step_rank = math.ceil(self.hidden_size / 16)  # MambaConfig's "auto"
        positive = ["vocab_size", "hidden_size", "num_hidden_layers", "state_size", "expand", "conv_kernel"]
        check_positive(self, *positive, "scan_chunk_size", *(["time_step_rank"] if self.ssm_type == "mamba" else []))
        if self.ssm_type == "mamba2":
            self._check_heads()
        if self.ssm_type == "s4d" and self.s4d_init != "real" and self.state_size % 2:
            raise ValueError(
                f"SSMConfig: state_size={self.state_size} must be even for s4d_init={self.s4d_init!r}: a complex S4D "
                "keeps N/2 modes and their conjugates. Use an even state_size, or s4d_init='real'."
            )
        if not 0 < self.time_step_min <= self.time_step_max:
            raise ValueError(
                f"SSMConfig: need 0 < time_step_min <= time_step_max, got {self.time_step_min!r} and "
                f"{self.time_step_max!r}."
            )
        check_probability(self, "hidden_dropout", "classifier_dropout")
        check_prediction_fields(self)
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)

    def _refuse_other_blocks_options(self):
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        own = OPTIONS[self.ssm_type]
        others = [name for options in OPTIONS.values() for name in options if name not in own]
        for name in dict.fromkeys(others):
            if getattr(self, name) != defaults[name]:
                raise ValueError(
                    f"SSMConfig: {name}={getattr(self, name)!r} does not apply to ssm_type={self.ssm_type!r}; options "
                    f"of the other blocks: {list(dict.fromkeys(others))}. Leave it at its default ({defaults[name]!r})."
                )

    def _check_heads(self):
        """Mamba-2's heads tile the inner width, and the groups the heads."""
        if self.num_heads is None:
            if self.intermediate_size % self.head_dim:
                raise ValueError(
                    f"SSMConfig: head_dim={self.head_dim} does not divide the inner width expand * hidden_size = "
                    f"{self.intermediate_size}; choose a head_dim that does (and num_heads = inner width / head_dim)."
                )
            self.num_heads = self.intermediate_size // self.head_dim
        check_positive(self, "num_heads", "head_dim", "n_groups", "chunk_size")
        if self.num_heads * self.head_dim != self.intermediate_size:
            raise ValueError(
                f"SSMConfig: num_heads={self.num_heads} times head_dim={self.head_dim} must equal expand * "
                f"hidden_size = {self.expand} * {self.hidden_size} = {self.intermediate_size}."
            )
        if self.num_heads % self.n_groups:
            divisors = [g for g in range(1, self.num_heads + 1) if self.num_heads % g == 0]
            raise ValueError(
                f"SSMConfig: n_groups={self.n_groups} must divide num_heads={self.num_heads}: each group's B and C "
                f"serve num_heads / n_groups heads. Allowed: {divisors}."
            )
        limit = self.time_step_limit
        if len(limit) != 2 or not 0 <= limit[0] <= limit[1]:
            raise ValueError(
                f"SSMConfig: time_step_limit={self.time_step_limit!r} must be (low, high) with 0 <= low <= high; "
                "the default (0.0, inf) does not clamp."
            )

    @property
    def intermediate_size(self) -> int:
        """The channels the SSM runs over: expand * hidden_size in the Mambas, hidden_size in S4D."""
        return self.hidden_size if self.ssm_type == "s4d" else self.expand * self.hidden_size

    @property
    def norm_type(self) -> str:
        """The blocks' norm: LayerNorm in S4D (its paper's reference code), RMSNorm in the Mambas."""
        return "layernorm" if self.ssm_type == "s4d" else "rmsnorm"


__all__ = ["SSMConfig"]
