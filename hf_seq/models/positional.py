"""Positional information for the Transformer families.

Learned absolute positions are a plain `nn.Embedding` in the model. The three schemes here have no trained
parameters; their tables are non-persistent buffers (never saved) rebuilt by `reset_buffers()`, which the models'
`_init_weights` call so the tables are right after `from_pretrained` too.
"""

import math

import torch
from torch import nn


class SinusoidalPositionalEmbedding(nn.Module):
    """Vaswani et al. (2017), section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...).

    Like the authors' tensor2tensor code (and MarianMT), the sines fill the first half of the vector and the cosines
    the second; that is the paper's encoding with its dimensions permuted, which the model cannot tell apart.
    """

    def __init__(self, num_positions: int, embedding_dim: int):
        super().__init__()
        self.num_positions, self.embedding_dim = num_positions, embedding_dim
        self.register_buffer("table", torch.empty(num_positions, embedding_dim), persistent=False)
        self.reset_buffers()

    def compute_table(self) -> torch.Tensor:
        half = self.embedding_dim // 2
        position = torch.arange(self.num_positions, dtype=torch.float64)[:, None]
        inv_freq = torch.exp(
            -math.log(10000.0) * torch.arange(0, self.embedding_dim, 2, dtype=torch.float64) / self.embedding_dim
        )
        angles = position * inv_freq[None, :]  # (P, ceil(d/2))
        table = torch.zeros(self.num_positions, self.embedding_dim, dtype=torch.float64)
        table[:, :half] = torch.sin(angles[:, :half])
        table[:, half:] = torch.cos(angles[:, : self.embedding_dim - half])
        return table.float()

    @torch.no_grad()
    def reset_buffers(self) -> None:
        self.table = self.compute_table().to(self.table.device)

    def forward(self, position_ids: torch.LongTensor) -> torch.Tensor:
        return self.table[position_ids]  # (B, T, d)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al. 2021, "RoFormer"): rotate each (x_i, x_{i+d/2}) pair of queries and keys by the angle
    pos * theta^(-2i/d), so that q.k depends on positions only through their difference."""

    def __init__(self, head_dim: int, theta: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary position embeddings need an even head size, got {head_dim}.")
        self.head_dim, self.theta = head_dim, theta
        self.register_buffer("inv_freq", torch.empty(head_dim // 2), persistent=False)
        self.reset_buffers()

    @torch.no_grad()
    def reset_buffers(self) -> None:
        exponent = torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim
        self.inv_freq = (1.0 / self.theta**exponent).to(self.inv_freq.device)

    def forward(self, position_ids: torch.LongTensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        angles = position_ids[..., None].float() * self.inv_freq  # (B, T, D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (B, T, D)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, H, T, D); cos, sin: (B, T, D)."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


class ALiBi(nn.Module):
    """ALiBi (Press et al. 2022, "Train Short, Test Long"): no position embedding; each head h adds
    -m_h * (i - j) to the score of query i on key j, with the head slopes m_h a geometric sequence."""

    def __init__(self, num_heads: int):
        super().__init__()
        self.num_heads = num_heads
        self.register_buffer("slopes", torch.empty(num_heads), persistent=False)
        self.reset_buffers()

    @staticmethod
    def compute_slopes(num_heads: int) -> torch.Tensor:
        # The paper's slopes 2^(-8/n), 2^(-16/n), ... for n a power of two; otherwise the slopes of the nearest
        # smaller power of two, completed with every other slope of the next one (the authors' reference code).
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = [2 ** (-8 * (i + 1) / closest) for i in range(closest)]
        extra = [2 ** (-8 * (i + 1) / (2 * closest)) for i in range(2 * closest)][0::2]
        return torch.tensor(slopes + extra[: num_heads - closest])

    @torch.no_grad()
    def reset_buffers(self) -> None:
        self.slopes = self.compute_slopes(self.num_heads).to(self.slopes.device)

    def forward(
        self, query_start: int, query_length: int, key_length: int, device, causal: bool = True
    ) -> torch.Tensor:
        """The additive score bias, (1, H, T, S), for queries in slots query_start ... query_start + T - 1 and keys in
        slots 0 ... S - 1 (S can exceed the filled length with a static cache; those slots are masked). Distances are
        counted in slots, pads included: pads only precede a left-padded row's real tokens, so the distance between
        two real tokens is unchanged."""
        query_pos = torch.arange(query_start, query_start + query_length, device=device)[:, None]
        key_pos = torch.arange(key_length, device=device)[None, :]
        distance = (key_pos - query_pos).float()  # <= 0 on the causal side
        if not causal:
            distance = -distance.abs()
        return (self.slopes.to(device)[:, None, None] * distance)[None]
