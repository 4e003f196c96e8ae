r"""Causal 1-D convolution over time, with dilation and groups, run over a whole sequence or one step at a time.

$$
y_t = \sum_{i<k} W_i\, x_{t - i d} + b \qquad x_s = 0 \text{ for } s < 0 \text{: nothing before the first position}
$$

k is the kernel size, d the dilation: output t reads the k inputs t, t - d, ..., t - (k-1) d and nothing later, so a
stack of such layers is causal, and its receptive field grows with the sum of the dilations (WaveNet, van den Oord
et al. 2016). With `groups = channels` each channel has its own k-tap filter (Mamba's short depthwise convolution).

One step at a time (Paine et al. 2016, "Fast Wavenet Generation Algorithm"): output t needs the (k-1) d inputs before
it, so a layer keeps them in a queue, (B, (k-1) d, C_in), oldest first. A step reads the k taps from the queue and the
new input, then drops the oldest input and appends the new one: k taps of work per position, whatever the length of
the context, and the same numbers as the full convolution.

Tensors are batch-first and channels-last, (B, T, C), as everywhere in hf-seq; the weight keeps PyTorch's Conv1d
layout (C_out, C_in / groups, k), where `weight[..., k-1-i]` is W_i (PyTorch's kernel runs oldest tap first).
"""

import torch
from torch import nn


class CausalConv1d(nn.Conv1d):
    """y_t = sum_{i<k} W_i x_{t - i d} + b over (B, T, C_in) -> (B, T, C_out); see the module docstring.

    `forward(x, queue) -> (y, next_queue)`: `queue` (B, (k-1) d, C_in) holds the inputs before x, oldest first (None:
    zeros, the sequence starts here), and `next_queue` the inputs before whatever follows x. Over T positions with a
    queue it is exactly the continuation of the sequence the queue came from; `step` is the one-position case."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        super().__init__(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups, bias=bias)
        self.queue_size = (kernel_size - 1) * dilation  # the past inputs an output reads: t-d, ..., t-(k-1)d

    def empty_queue(self, batch_size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The queue before the first position: zeros, (B, (k-1) d, C_in)."""
        return torch.zeros(batch_size, self.queue_size, self.in_channels, dtype=dtype, device=device)

    def _with_past(self, x: torch.Tensor, queue: torch.Tensor | None) -> torch.Tensor:
        if queue is None:
            queue = self.empty_queue(x.shape[0], x.dtype, x.device)
        elif queue.shape != (x.shape[0], self.queue_size, self.in_channels):
            raise ValueError(
                f"CausalConv1d: the queue has shape {tuple(queue.shape)}, expected (batch_size, (kernel_size - 1) * "
                f"dilation, in_channels) = ({x.shape[0]}, {self.queue_size}, {self.in_channels})."
            )
        return torch.cat([queue.to(x.dtype), x], 1)  # (B, (k-1) d + T, C_in)

    def forward(self, x: torch.Tensor, queue: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        sequence = self._with_past(x, queue)
        # the left padding (k-1) d is the queue: the convolution proper runs unpadded, one output per input of x
        y = super().forward(sequence.transpose(1, 2))  # (B, C_out, T)
        # a copy: a state that keeps it must not keep the whole sequence alive
        next_queue = sequence[:, sequence.shape[1] - self.queue_size :].clone()
        return y.transpose(1, 2), next_queue

    def step(self, x: torch.Tensor, queue: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One position: x (B, C_in) -> (y (B, C_out), the next queue). Reads the k taps x_t, x_{t-d}, ..., and
        multiplies them by the kernel once (no dilation left to skip over)."""
        sequence = self._with_past(x[:, None], queue)  # (B, (k-1) d + 1, C_in): x_{t-(k-1)d} ... x_t
        taps = sequence[:, :: self.dilation[0]]  # (B, k, C_in), oldest first as the kernel expects
        y = nn.functional.conv1d(taps.transpose(1, 2), self.weight, self.bias, groups=self.groups)  # (B, C_out, 1)
        return y[:, :, 0], sequence[:, 1:]


__all__ = ["CausalConv1d"]
