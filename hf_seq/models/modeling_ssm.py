r"""State-space language models: S4D (Gu, Gupta, Goel and Re 2022), Mamba (Gu and Dao 2023) and Mamba-2 (Dao and
Gu 2024) blocks over token embeddings, chosen by `SSMConfig.ssm_type`. models/scan.py states the equations of S4D and
Mamba and computes them, models/ssd.py those of Mamba-2.

$$
\begin{aligned}
h_0 &= E[x] \\
h_l &= h_{l-1} + \mathrm{Dropout}(\mathrm{Mixer}_l(\mathrm{Norm}(h_{l-1}))) \qquad \text{pre-norm residual blocks} \\
p(x_{t+1} \mid x_{\le t}) &= \mathrm{softmax}(\mathrm{Norm}(h_L)\, E^\top) \qquad \text{tied input and output embeddings}
\end{aligned}
$$

The S4D mixer is the block of the paper's reference code, with LayerNorm as Norm:

$$
y = \mathrm{GELU}(\mathrm{SSM}(u)), \qquad \mathrm{Mixer}(u) = \mathrm{GLU}(W y + b)
$$

(or W y + b with `s4d_output="linear"`)

The Mamba mixer, with RMSNorm as Norm (transformers' `MambaMixer`, whose weights hf_seq.convert maps onto these by
name):

$$
\begin{aligned}
(x, z) &= W_{in} u, \quad x = \mathrm{SiLU}(\mathrm{conv1d}(x)), \quad y = \mathrm{SelectiveSSM}(x) \\
\mathrm{Mixer}(u) &= W_{out} (y \odot \mathrm{SiLU}(z))
\end{aligned}
$$

conv1d is causal and depthwise (one filter of `conv_kernel` taps per channel: models/convolution.py).

The Mamba-2 mixer (transformers' `Mamba2Mixer`, names and layouts alike) convolves B and C with x, gives each of
its heads one scalar decay, and normalises the gated output per group:

$$
\begin{aligned}
(z, xBC, \Delta) &= W_{in} u, \quad (x, B, C) = \mathrm{SiLU}(\mathrm{conv1d}(xBC)), \quad
    \Delta = \mathrm{clamp}(\mathrm{softplus}(\Delta + b_\Delta)) \\
y &= \mathrm{SSD}(x, \Delta, A, B, C) + D x, \qquad
\mathrm{Mixer}(u) = W_{out}\, \mathrm{RMSNorm}_{groups}(y \odot \mathrm{SiLU}(z))
\end{aligned}
$$

SSD is the state-space model written as a causal attention without a softmax, its mask a decay of one scalar per
head and token (models/ssd.py derives it and states the chunked algorithm that computes it):

$$
y = \big(L \circ C B^\top\big)\, \mathrm{diag}(\Delta)\, x + D x, \qquad
L_{ts} = e^{a_{s+1} + \dots + a_t} \;(s \le t), \quad a = \Delta A
$$

`Mamba2Mixer.attention` returns that matrix, per head; the studio's Mamba-2 attention view draws it.

A call returns the state after its last token (an `SSMState`, under `past_key_values`) and accepts it back. The
sequence modes (S4D's FFT convolution, the Mambas' chunked scans) read the prompt; the recurrent modes read one token
per generate() step, at a cost that does not grow with the context. Padding: the SSM's input (and the Mambas'
convolution input) is zeroed at padded positions, so a left-padded row's state stays zero until its first real token,
and every row computes what it computes alone.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import can_return_tuple

from .configuration_ssm import SSMConfig
from .convolution import CausalConv1d
from .layers import make_norm
from .prediction import ValuePredictionHead
from .scan import s4d_convolution, s4d_step, selective_scan, selective_step, zoh_discretize
from .ssd import ssd_chunked, ssd_matrix, ssd_step
from .state import SSMState
from .utils import (
    CheckedGenerationMixin,
    LastTokenSequenceClassification,
    StatefulCausalLMHead,
    StatefulPreTrainedModel,
    cache_field,
)


class S4DMixer(nn.Module):
    """The diagonal SSM over the H channels, a GELU and the output layer. Continuous parameters per channel h and
    mode m: A = -exp(A_log) (+ i A_imag for complex modes), B, C (complex ones stored as (..., 2) real pairs), the
    skip D and the step size Delta = exp(log_dt)."""

    def __init__(self, config: SSMConfig):
        super().__init__()
        channels, self.complex = config.hidden_size, config.s4d_init != "real"
        modes = config.state_size // 2 if self.complex else config.state_size
        shape = (channels, modes, 2) if self.complex else (channels, modes)
        self.log_dt = nn.Parameter(torch.empty(channels))
        self.A_log = nn.Parameter(torch.empty(channels, modes))
        self.A_imag = nn.Parameter(torch.empty(channels, modes)) if self.complex else None
        self.B = nn.Parameter(torch.empty(shape))
        self.C = nn.Parameter(torch.empty(shape))
        self.D = nn.Parameter(torch.empty(channels))
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.glu = config.s4d_output == "glu"
        self.out_proj = nn.Linear(channels, 2 * channels if self.glu else channels)

    @torch.no_grad()
    def init_ssm_parameters(self, config: SSMConfig):
        """S4D-Lin A_n = -1/2 + i pi n, S4D-Inv A_n = -1/2 + i N/pi (N/(2n+1) - 1), S4D-Real A_n = -(n+1); B = 1,
        C ~ N(0, 1) (complex: variance 1/2 per part), D ~ N(0, 1), Delta log-uniform in [time_step_min, max]."""
        channels, modes = self.A_log.shape
        n = torch.arange(modes, dtype=torch.float32).expand(channels, modes)
        if self.complex:
            init.copy_(self.A_log, torch.full((channels, modes), math.log(0.5)))
            size = config.state_size
            imag = math.pi * n if config.s4d_init == "lin" else size / math.pi * (size / (2 * n + 1) - 1)
            init.copy_(self.A_imag, imag)
            init.copy_(self.B, torch.stack([torch.ones(channels, modes), torch.zeros(channels, modes)], -1))
            init.copy_(self.C, torch.randn(channels, modes, 2) * 0.5**0.5)
        else:
            init.copy_(self.A_log, torch.log(n + 1))
            init.ones_(self.B)
            init.copy_(self.C, torch.randn(channels, modes))
        init.copy_(self.D, torch.randn(channels))
        low, high = math.log(config.time_step_min), math.log(config.time_step_max)
        init.copy_(self.log_dt, torch.rand(channels) * (high - low) + low)

    def discretized(self):
        """Delta A (the log of A_bar), B_bar and C, complex for complex modes, in float32."""
        A, B, C = -torch.exp(self.A_log.float()), self.B.float(), self.C.float()
        if self.complex:
            A = torch.complex(A, self.A_imag.float())
            B, C = torch.view_as_complex(B), torch.view_as_complex(C)
        dt_A, B_bar = zoh_discretize(self.log_dt.float(), A, B)
        return dt_A, B_bar, C

    def forward(self, hidden_states, mask=None, ssm_state=None, conv_state=None, return_state=False):
        """hidden_states (B, T, H) -> (B, T, H), the SSM state (B, H, M) after the last token, and no convolution
        state. One token with a state runs the recurrence; otherwise the convolution, which computes the state only
        with `return_state` (else None)."""
        u = hidden_states if mask is None else hidden_states * mask[..., None]
        u = u.float().transpose(1, 2)  # (B, H, T)
        dt_A, B_bar, C = self.discretized()
        if ssm_state is not None and u.shape[-1] == 1:
            y, ssm_state = s4d_step(u[..., 0], dt_A, B_bar, C, self.D.float(), ssm_state)
            y = y[..., None]
        else:
            y, ssm_state = s4d_convolution(u, dt_A, B_bar, C, self.D.float(), ssm_state, return_state)
        y = self.dropout(F.gelu(y.transpose(1, 2).to(hidden_states.dtype)))
        y = self.out_proj(y)
        return (F.glu(y, dim=-1) if self.glu else y), ssm_state, None


class MambaMixer(nn.Module):
    """The selective SSM block. `in_proj` (H -> 2E: x and the gate z), `conv1d` (causal and depthwise, `conv_kernel`
    taps; it reads the last kernel - 1 inputs before the sequence from its queue, zeros at the start), `x_proj`
    (E -> R + 2N: Delta's low-rank input, B, C), `dt_proj` (R -> E, with b_Delta), `A_log` (E, N), `D` (E,),
    `out_proj` (E -> H): the names and layouts of transformers' MambaMixer."""

    def __init__(self, config: SSMConfig):
        super().__init__()
        hidden, inner, size = config.hidden_size, config.intermediate_size, config.state_size
        self.split = (config.time_step_rank, size, size)
        self.chunk_size = config.scan_chunk_size
        self.in_proj = nn.Linear(hidden, 2 * inner, bias=config.use_bias)
        self.conv1d = CausalConv1d(inner, inner, config.conv_kernel, groups=inner, bias=config.use_conv_bias)
        self.x_proj = nn.Linear(inner, config.time_step_rank + 2 * size, bias=False)
        self.dt_proj = nn.Linear(config.time_step_rank, inner)
        self.A_log = nn.Parameter(torch.empty(inner, size))
        self.D = nn.Parameter(torch.empty(inner))
        self.out_proj = nn.Linear(inner, hidden, bias=config.use_bias)

    @torch.no_grad()
    def init_ssm_parameters(self, config: SSMConfig):
        """S4D-Real A_n = -(n+1), D = 1; Delta = softplus(b_Delta) log-uniform in [time_step_min, time_step_max]
        (at least time_step_floor), W_Delta ~ U(+-1/sqrt(R)); conv1d and out_proj as PyTorch initialises them."""
        inner, size = self.A_log.shape
        init.copy_(self.A_log, torch.log(torch.arange(1, size + 1, dtype=torch.float32)).expand(inner, size))
        init.ones_(self.D)
        bound = config.time_step_rank**-0.5
        init.uniform_(self.dt_proj.weight, -bound, bound)
        low, high = math.log(config.time_step_min), math.log(config.time_step_max)
        dt = torch.exp(torch.rand(inner) * (high - low) + low).clamp(min=config.time_step_floor)
        init.copy_(self.dt_proj.bias, dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        init.kaiming_uniform_(self.conv1d.weight, a=math.sqrt(5))
        if self.conv1d.bias is not None:
            init.zeros_(self.conv1d.bias)
        init.kaiming_uniform_(self.out_proj.weight, a=math.sqrt(5))

    def forward(self, hidden_states, mask=None, ssm_state=None, conv_state=None, return_state=False):
        """hidden_states (B, T, H) -> (B, T, H), the SSM state (B, E, N) and the convolution's queue, its last
        kernel - 1 inputs (B, kernel - 1, E), after the last token."""
        x, z = self.in_proj(hidden_states).chunk(2, dim=-1)  # (B, T, E) each
        if mask is not None:
            x = x * mask[..., None]
        x, queue = self.conv1d(x, conv_state)
        x = F.silu(x)
        if mask is not None:
            x = x * mask[..., None]
        dt, B, C = self.x_proj(x).split(self.split, dim=-1)  # (B, T, R), (B, T, N), (B, T, N)
        delta = F.softplus(self.dt_proj(dt)).transpose(1, 2)  # (B, E, T)
        x, A = x.transpose(1, 2), -torch.exp(self.A_log.float())  # (B, E, T), (E, N)
        if ssm_state is not None and x.shape[-1] == 1:
            y, ssm_state = selective_step(x[..., 0], delta[..., 0], A, B[:, 0], C[:, 0], self.D, ssm_state)
            y = y[..., None]
        else:
            y, ssm_state = selective_scan(x, delta, A, B, C, self.D, ssm_state, self.chunk_size)
        y = y.transpose(1, 2) * F.silu(z)
        return self.out_proj(y), ssm_state, queue


class GatedRMSNorm(nn.Module):
    """RMSNorm over groups of channels, gated by SiLU(z): Norm(y * SiLU(z)) (transformers' MambaRMSNormGated) or,
    with `norm_before_gate`, Norm(y) * SiLU(z). Each of the n_groups groups of channels is normalised on its own,
    so the result does not depend on how the heads are split over devices (Dao and Gu 2024, section 8)."""

    def __init__(self, size: int, groups: int, eps: float, norm_before_gate: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.groups, self.eps, self.norm_before_gate = groups, eps, norm_before_gate

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        dtype, y, gate = y.dtype, y.float(), F.silu(z.float())
        if not self.norm_before_gate:
            y = y * gate
        grouped = y.unflatten(-1, (self.groups, -1))  # (..., G, E / G)
        y = (grouped * torch.rsqrt(grouped.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        if self.norm_before_gate:
            y = y * gate
        return self.weight * y.to(dtype)


class Mamba2Mixer(nn.Module):
    """The SSD block (models/ssd.py). `in_proj` (H -> E + (E + 2GN) + heads: the gate z, then x, B, C, then Delta),
    `conv1d` over x, B and C together (causal, depthwise), `dt_bias`, `A_log` and `D` (one each per head), `norm`
    (the gated RMSNorm, E), `out_proj` (E -> H): the names and layouts of transformers' Mamba2Mixer."""

    def __init__(self, config: SSMConfig):
        super().__init__()
        inner, heads, size = config.intermediate_size, config.num_heads, config.n_groups * config.state_size
        self.shape = (heads, config.head_dim, config.n_groups, config.state_size)
        self.split, self.xBC_split = (inner, inner + 2 * size, heads), (inner, size, size)
        self.chunk_size, self.time_step_limit = config.chunk_size, tuple(config.time_step_limit)
        self.in_proj = nn.Linear(config.hidden_size, 2 * inner + 2 * size + heads, bias=config.use_bias)
        channels = inner + 2 * size
        self.conv1d = CausalConv1d(channels, channels, config.conv_kernel, groups=channels, bias=config.use_conv_bias)
        self.dt_bias = nn.Parameter(torch.empty(heads))
        self.A_log = nn.Parameter(torch.empty(heads))
        self.D = nn.Parameter(torch.empty(heads))
        eps, groups = config.layer_norm_eps, config.n_groups
        self.norm = GatedRMSNorm(inner, groups, eps, config.norm_before_gate) if config.rms_norm else None
        self.out_proj = nn.Linear(inner, config.hidden_size, bias=config.use_bias)

    @torch.no_grad()
    def init_ssm_parameters(self, config: SSMConfig):
        """A_h = -h for head h = 1..heads, D = 1, Delta = softplus(b_Delta) log-uniform in [time_step_min,
        time_step_max] (at least time_step_floor); conv1d and out_proj as PyTorch initialises them."""
        heads = self.A_log.shape[0]
        init.copy_(self.A_log, torch.log(torch.arange(1, heads + 1, dtype=torch.float32)))
        init.ones_(self.D)
        low, high = math.log(config.time_step_min), math.log(config.time_step_max)
        dt = torch.exp(torch.rand(heads) * (high - low) + low).clamp(min=config.time_step_floor)
        init.copy_(self.dt_bias, dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)
        init.kaiming_uniform_(self.conv1d.weight, a=math.sqrt(5))
        if self.conv1d.bias is not None:
            init.zeros_(self.conv1d.bias)
        init.kaiming_uniform_(self.out_proj.weight, a=math.sqrt(5))
        if self.norm is not None:
            init.ones_(self.norm.weight)

    def ssm_inputs(self, hidden_states, mask=None, conv_state=None):
        """hidden_states (B, T, H) -> the gate z (B, T, E), x (B, T, heads, P), Delta (B, T, heads), B and C
        (B, T, G, N), and the convolution's queue after the last token. A padded position gets x = B = C = 0 and
        Delta = 0: it neither writes nor decays the state."""
        heads, head_dim, groups, size = self.shape
        z, xBC, dt = self.in_proj(hidden_states).split(self.split, dim=-1)  # (B, T, E), (B, T, E + 2GN), (B, T, h)
        if mask is not None:
            xBC = xBC * mask[..., None]
        xBC, queue = self.conv1d(xBC, conv_state)
        xBC = F.silu(xBC)
        dt = F.softplus(dt + self.dt_bias).clamp(*self.time_step_limit)
        if mask is not None:
            xBC, dt = xBC * mask[..., None], dt * mask[..., None]
        x, B, C = xBC.split(self.xBC_split, dim=-1)
        x = x.unflatten(-1, (heads, head_dim))  # (B, T, h, P)
        B, C = B.unflatten(-1, (groups, size)), C.unflatten(-1, (groups, size))  # (B, T, G, N) each
        return z, x, dt, B, C, queue

    def forward(self, hidden_states, mask=None, ssm_state=None, conv_state=None, return_state=False):
        """hidden_states (B, T, H) -> (B, T, H), the SSM state (B, heads, P, N) and the convolution's queue (B,
        kernel - 1, E + 2GN) after the last token. One token with a state runs the recurrence, else the chunked form."""
        z, x, dt, B, C, queue = self.ssm_inputs(hidden_states, mask, conv_state)
        A = -torch.exp(self.A_log.float())  # (h,)
        if ssm_state is not None and x.shape[1] == 1:
            y, ssm_state = ssd_step(x[:, 0], dt[:, 0], A, B[:, 0], C[:, 0], self.D, ssm_state)
            y = y[:, None]
        else:
            y, ssm_state = ssd_chunked(x, dt, A, B, C, self.D, ssm_state, self.chunk_size)
        y = y.flatten(2)  # (B, T, E)
        y = self.norm(y, z) if self.norm is not None else y * F.silu(z.float())
        return self.out_proj(y.to(hidden_states.dtype)), ssm_state, queue

    def attention(self, hidden_states, mask=None, skip=True) -> torch.Tensor:
        """The attention matrix the layer computes over a sequence from zeros, per head: (B, heads, T, T), row t the
        weights of the inputs x_s (s <= t) in the SSM's output y_t, M = L o (C B^T) diag(Delta) (models/ssd.py), with
        the skip D on the diagonal (`skip=False`: without). y = M x for x of `ssm_inputs`, before the gate, the norm
        and out_proj. hidden_states is the mixer's input (B, T, H), after the block's norm."""
        _, x, dt, B, C, _ = self.ssm_inputs(hidden_states, mask)
        matrix = ssd_matrix(dt, -torch.exp(self.A_log.float()), B, C)
        if skip:
            matrix = matrix + torch.diag_embed(self.D.float()[:, None].expand(-1, x.shape[1]))
        return matrix


MIXERS = {"s4d": S4DMixer, "mamba": MambaMixer, "mamba2": Mamba2Mixer}


class SSMBlock(GradientCheckpointingLayer):
    """h + Dropout(Mixer(Norm(h))): LayerNorm and the S4D mixer, or RMSNorm and a Mamba mixer."""

    def __init__(self, config: SSMConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.mixer = MIXERS[config.ssm_type](config)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.residual_in_fp32 = config.ssm_type != "s4d" and config.residual_in_fp32

    def forward(self, hidden_states, mask=None, ssm_state=None, conv_state=None, return_state=False):
        residual = hidden_states.float() if self.residual_in_fp32 else hidden_states
        normed = self.norm(hidden_states.to(self.norm.weight.dtype))
        out, ssm_state, conv_state = self.mixer(normed, mask, ssm_state, conv_state, return_state)
        return residual + self.dropout(out), ssm_state, conv_state


class SSMPreTrainedModel(StatefulPreTrainedModel):
    config_class = SSMConfig
    state_class = SSMState
    _no_split_modules = ["SSMBlock"]

    def _init_weights(self, module):
        super()._init_weights(module)  # linears and embeddings N(0, initializer_range), biases 0, norms 1
        if isinstance(module, tuple(MIXERS.values())):  # after its linears: the mixer's own init wins
            module.init_ssm_parameters(self.config)


class SSMModel(SSMPreTrainedModel):
    """Embeddings, the blocks and the final norm; returns the normalised top states (B, T, H) and the `SSMState`
    after the last token."""

    def __init__(self, config: SSMConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(SSMBlock(config, i) for i in range(config.num_hidden_layers))
        self.norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: SSMState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """`attention_mask` (B, past + T): 1 on real tokens, 0 on padding (either side). `past_key_values`: the
        state a previous call returned (None: zeros)."""
        inputs = self.stateful_inputs(
            input_ids, inputs_embeds, past_key_values, attention_mask, use_cache, output_hidden_states, kwargs
        )
        past = inputs.state.layers() if inputs.state is not None else [(None, None)] * len(self.layers)
        hidden_states, all_hidden_states, ssm_states, conv_states = inputs.embeds, [inputs.embeds], [], []
        for layer, (ssm_state, conv_state) in zip(self.layers, past):
            hidden_states, ssm_state, conv_state = layer(
                hidden_states, inputs.mask, ssm_state, conv_state, inputs.use_cache
            )
            all_hidden_states.append(hidden_states)
            ssm_states.append(ssm_state)
            conv_states.append(conv_state)
        hidden_states = self.norm(hidden_states.to(self.norm.weight.dtype))
        all_hidden_states[-1] = hidden_states  # the last entry is the output, as in transformers' models
        state = None
        if inputs.use_cache:
            conv = torch.stack(conv_states) if self.config.ssm_type != "s4d" else None
            state = inputs.state_after(torch.stack(ssm_states), conv)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden_states,
            **cache_field(state),
            hidden_states=tuple(all_hidden_states) if inputs.output_hidden_states else None,
        )


class SSMForCausalLM(StatefulCausalLMHead, SSMPreTrainedModel, CheckedGenerationMixin):
    """Predicts token t+1 from the top state at t through the (tied) output embedding."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: SSMConfig):
        super().__init__(config)
        self.model = SSMModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()


class SSMForSequenceClassification(LastTokenSequenceClassification, SSMPreTrainedModel):
    """Classifies a sequence from the top state at its last real token (the only one that has read them all)."""

    backbone_class = SSMModel


class SSMForPrediction(ValuePredictionHead, SSMPreTrainedModel):
    """Forecasts a real-valued series with the state-space model (S4D or Mamba): lagged values in place of token embeddings, a Student-t (or
    normal) distribution over the next value in place of the softmax (models/prediction.py)."""

    backbone_class = SSMModel


__all__ = ["SSMPreTrainedModel", "SSMModel", "SSMForCausalLM", "SSMForSequenceClassification", "SSMForPrediction"]
