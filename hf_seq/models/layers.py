"""Normalisation and position-wise feed-forward layers shared by the Transformer families."""

import torch
from torch import nn

NORM_TYPES = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "gelu_new", "relu", "swiglu")


def make_norm(norm_type: str, size: int, eps: float) -> nn.Module:
    """LayerNorm (Ba et al. 2016) or RMSNorm (Zhang and Sennrich 2019: no centring, no bias)."""
    if norm_type == "layernorm":
        return nn.LayerNorm(size, eps=eps)
    if norm_type == "rmsnorm":
        return nn.RMSNorm(size, eps=eps)
    raise ValueError(f"norm_type={norm_type!r} is not supported; allowed values: {list(NORM_TYPES)}.")


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2 (Vaswani et al. 2017, eq. 2), or with `swiglu`
    W_2 (silu(W_g x) * W_1 x) (Shazeer 2020, "GLU Variants Improve Transformer").

    `gelu` is the exact GELU, `gelu_new` its tanh approximation (the one GPT-2 uses). `dropout` acts on the
    activations (Marian's activation dropout); the residual dropout on the output belongs to the block."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        activation: str,
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not supported; allowed values: {list(ACTIVATIONS)}.")
        self.activation = activation
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias) if activation == "swiglu" else None
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up_proj(x)
        if self.activation == "swiglu":
            h = nn.functional.silu(self.gate_proj(x)) * h
        elif self.activation == "relu":
            h = nn.functional.relu(h)
        else:
            h = nn.functional.gelu(h, approximate="tanh" if self.activation == "gelu_new" else "none")
        return self.down_proj(self.dropout(h))
