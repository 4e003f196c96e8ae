"""Multi-head attention (Vaswani et al. 2017, section 3.2) for every Transformer family: self-attention, causal or
not, and cross-attention on an encoder's states. The kernel is chosen by `config._attn_implementation` through
transformers' attention interface (`eager`, `sdpa`, and `flash_attention_*` / `flex_attention` where installed).

Shapes: B batch, T query positions, S key positions, H heads, D head size, C = H * D model size.
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .positional import apply_rotary


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(D) + bias + mask) V, written out; returns (B, T, H, D) and the weights (B, H, T, S).

    The mask comes from transformers' mask helpers: additive (0 / -inf-like) floats for eager, or booleans."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (B, H, T, S)
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(value.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2), weights


class MultiHeadAttention(nn.Module):
    """One attention layer. Self-attention projects Q, K, V with one fused matrix; cross-attention projects Q from
    the decoder and K, V (fused) from the encoder states, computed once per source and kept in the cache.

    Reads from `config`: hidden_size, num_attention_heads, attention_dropout, attention_bias (default True)."""

    def __init__(self, config, layer_idx: int, is_causal: bool, is_cross_attention: bool = False):
        super().__init__()
        self.config = config  # the kernel is read from config._attn_implementation at each call
        self.layer_idx = layer_idx
        self.is_causal = is_causal  # read by the sdpa and flash kernels
        self.is_cross_attention = is_cross_attention
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        bias = getattr(config, "attention_bias", True)
        if is_cross_attention:
            self.q_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=bias)
            self.kv_proj = nn.Linear(config.hidden_size, 2 * config.hidden_size, bias=bias)
        else:
            self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=bias)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=bias)

    def _split_heads(self, x: torch.Tensor, parts: int) -> tuple[torch.Tensor, ...]:
        B, T, _ = x.shape
        return (
            x.view(B, T, parts, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        )  # parts x (B, H, T, D)

    def _cross_key_values(self, encoder_hidden_states, cache: EncoderDecoderCache | None):
        if cache is not None and cache.is_updated.get(self.layer_idx):
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            return layer.keys, layer.values
        key, value = self._split_heads(self.kv_proj(encoder_hidden_states), 2)
        if cache is not None:
            key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        position_bias: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, C = hidden_states.shape
        if self.is_cross_attention:
            (query,) = self._split_heads(self.q_proj(hidden_states), 1)
            cache = past_key_values if isinstance(past_key_values, EncoderDecoderCache) else None
            key, value = self._cross_key_values(encoder_hidden_states, cache)
        else:
            query, key, value = self._split_heads(self.qkv_proj(hidden_states), 3)
            if position_embeddings is not None:  # RoPE rotates queries and keys before they are cached
                query, key = (
                    apply_rotary(query, *position_embeddings),
                    apply_rotary(key, *position_embeddings),
                )
            if isinstance(past_key_values, EncoderDecoderCache):
                past_key_values = past_key_values.self_attention_cache
            if past_key_values is not None:
                key, value = past_key_values.update(key, value, self.layer_idx)  # (B, H, S, D), past + new

        implementation = self.config._attn_implementation
        attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        if implementation == "sdpa" and T == 1 and query.device.type == "cpu" and torch.compiler.is_compiling():
            # A compiled one-token decode step: inductor fuses the written-out softmax(q K^T) V for one query into a
            # few loops, where the SDPA CPU kernel has a fixed cost of about 50 us per call (4 layers: a tenth of a
            # small GPT's step; bench/bench_gpt.py --speed). Same result up to float rounding.
            attention = eager_attention_forward
        if position_bias is not None:
            if implementation not in ("eager", "sdpa"):
                raise ValueError(
                    f"An additive position bias (ALiBi) needs attn_implementation 'eager' or 'sdpa', got {implementation!r}."
                )
            kwargs["position_bias"] = position_bias
        output, weights = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        return self.o_proj(output.reshape(B, T, C)), weights
