r"""The language-model loss computed from the final hidden states in chunks of tokens, never holding the
(tokens x vocabulary) logits: the idea of Liger Kernel's fused linear cross-entropy (Hsu et al. 2024) and Apple's
Cut Cross-Entropy (Wijmans et al. 2025), written here in plain PyTorch.

For N scored positions with features h_i (D), output weights W (V x D), bias b and targets y_i, with label
smoothing eps (torch's definition: the target is (1 - eps) on y_i plus eps / V on every token):

$$
\begin{aligned}
z_i &= W h_i + b, \qquad \mathrm{lse}_i = \log \textstyle\sum_v e^{z_{iv}}, \qquad p_i = e^{z_i - \mathrm{lse}_i} \\
\ell_i &= \mathrm{lse}_i - (1 - \epsilon)\, z_{i y_i} - \tfrac{\epsilon}{V} \textstyle\sum_v z_{iv} \\
L &= \tfrac{1}{n} \textstyle\sum_{i:\, y_i \ne \text{ignore}} \ell_i, \qquad
     n = \text{the number of scored positions, or Trainer's } \texttt{num\_items\_in\_batch} \\
G_i &= \partial L / \partial z_i = (p_i - (1 - \epsilon)\, \mathrm{onehot}(y_i) - \epsilon / V) / n
       \quad (0 \text{ for ignored positions}) \\
\partial L / \partial h_i &= G_i W, \qquad \partial L / \partial W = \textstyle\sum_i G_i^\top h_i, \qquad
\partial L / \partial b = \textstyle\sum_i G_i
\end{aligned}
$$

The forward pass walks the rows in chunks: each chunk's logits z (chunk x V, fp32) give its share of L and, in
place, of G, from which it adds its rows of dL/dh and its term of dL/dW and dL/db; then the chunk's logits are
dropped. The backward pass only scales these gradients by the incoming gradient of L (a scalar). Peak memory is
one chunk of logits instead of the N x V logits, their log-softmax and its gradient; the matrix products are the
three of the unfused path (z = h W^T, dh = G W, dW = G^T h).
"""

import torch
from torch import nn

# A chunk's logits hold at most this many fp32 values: 32 MiB on a CPU, 1 GiB on an accelerator. On a CPU, fewer
# and larger chunks were faster (bench/results/fused_loss_cpu.md): each chunk adds its term to dL/dW (V x D, read
# and written once per chunk) and a dozen operations, each a barrier between threads that a shared machine makes
# costly. On an H200 (GPT-2 small, 32 x 1024 tokens, vocabulary 50304, compiled) chunks of 128 MiB (50 chunks) made
# the step 7% slower than the unfused loss, the dL/dW traffic again (bench/results/gpu_NVIDIA_H200.md): a GPU's
# memory holds a few chunks of 1 GiB, a tenth of the full logits with their fp32 copy and gradient.
CHUNK_VALUES = {"cpu": 1 << 23}
CHUNK_VALUES_ACCELERATOR = 1 << 28


def default_chunk_size(num_rows: int, vocab_size: int, device_type: str = "cpu") -> int:
    """Rows per chunk: the fewest chunks whose logits fit the device's CHUNK_VALUES, split evenly."""
    most_rows = max(1, CHUNK_VALUES.get(device_type, CHUNK_VALUES_ACCELERATOR) // max(vocab_size, 1))
    chunks = max(1, -(-num_rows // most_rows))
    return max(1, -(-num_rows // chunks))


class LinearCrossEntropy(torch.autograd.Function):
    """Cross-entropy of the logits hidden @ weight^T + bias, without holding them (see the module docstring).
    Gradients are computed in the forward pass; `compute_dtype` is the dtype of the matrix products (the autocast
    dtype under autocast), the logits and the loss are fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, labels, ignore_index, label_smoothing, num_items, chunk_size, compute_dtype):
        needs_hidden, needs_weight = hidden.requires_grad, weight.requires_grad
        needs_bias = bias is not None and bias.requires_grad
        with torch.autocast(hidden.device.type, enabled=False):
            num_rows, vocab_size = hidden.shape[0], weight.shape[0]
            w = weight.to(compute_dtype)
            b = bias.float() if bias is not None else None
            scored = labels != ignore_index  # (N,)
            targets = labels.masked_fill(~scored, 0)
            count = scored.sum()
            denominator = count.float() if num_items is None else torch.as_tensor(num_items, device=hidden.device)
            # 1 / n for the gradients; with nothing scored (n = 0) they are zero, as torch's are
            scale = 1.0 / denominator.float().clamp(min=1) if num_items is None else 1.0 / denominator.float()
            grad_hidden = torch.empty_like(hidden) if needs_hidden else None
            grad_weight = torch.zeros_like(weight, dtype=torch.float32) if needs_weight else None
            grad_bias = torch.zeros(vocab_size, device=hidden.device, dtype=torch.float32) if needs_bias else None
            total = torch.zeros((), device=hidden.device, dtype=torch.float32)
            for start in range(0, num_rows, chunk_size):
                rows = slice(start, min(start + chunk_size, num_rows))
                h = hidden[rows].to(compute_dtype)  # (c, D)
                z = (h @ w.t() if b is None else torch.addmm(b.to(compute_dtype), h, w.t())).float()  # (c, V)
                y = targets[rows, None]  # (c, 1)
                row_scale = scored[rows, None] * scale  # (c, 1): 1 / n, or 0 where the label is ignored
                row_max = z.amax(-1, keepdim=True)
                losses = -(1.0 - label_smoothing) * z.gather(1, y)  # + lse below
                if label_smoothing:
                    losses -= label_smoothing * z.mean(-1, keepdim=True)
                exp = z.sub_(row_max).exp_()  # e^(z - max), in place of the logits
                exp_sum = exp.sum(-1, keepdim=True)
                losses += row_max + exp_sum.log()
                total = total + torch.where(scored[rows, None], losses, 0.0).sum()
                if not (needs_hidden or needs_weight or needs_bias):
                    continue
                grad = exp.mul_(row_scale / exp_sum)  # G = (softmax - (1 - eps) onehot - eps / V) / n
                if label_smoothing:
                    grad.sub_(row_scale * (label_smoothing / vocab_size))
                grad.scatter_add_(1, y, row_scale * (label_smoothing - 1.0))
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
                grad = grad.to(compute_dtype)
                if grad_hidden is not None:
                    if grad_hidden.dtype == compute_dtype:
                        torch.mm(grad, w, out=grad_hidden[rows])
                    else:
                        grad_hidden[rows] = grad @ w
                if grad_weight is not None:
                    if grad.dtype == grad_weight.dtype:
                        grad_weight.addmm_(grad.t(), h)
                    else:
                        grad_weight += grad.t() @ h
            loss = total / denominator
        ctx.save_for_backward(
            grad_hidden,
            grad_weight.to(weight.dtype) if grad_weight is not None else None,
            grad_bias.to(bias.dtype) if grad_bias is not None else None,
        )
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        scaled = [g * grad_loss.to(g.dtype) if g is not None else None for g in (grad_hidden, grad_weight, grad_bias)]
        return (*scaled, None, None, None, None, None, None)


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    num_items_in_batch: torch.Tensor | int | None = None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """`F.cross_entropy(F.linear(hidden, weight, bias), labels, ignore_index=..., label_smoothing=...)` for hidden
    (N, D), weight (V, D), bias (V,) or None and labels (N,), computed in chunks of `chunk_size` rows (default:
    `default_chunk_size`). The mean over the scored labels, or with `num_items_in_batch` (Trainer's count over
    the accumulated micro-batches) their sum divided by it, as transformers' losses do. Under autocast the matrix
    products run in the autocast dtype and the loss in fp32, as the unfused path's upcast logits do."""
    if hidden.dim() != 2 or labels.shape != hidden.shape[:1]:
        shapes = f"{tuple(hidden.shape)} and {tuple(labels.shape)}"
        raise ValueError(f"linear_cross_entropy takes hidden (N, D) and labels (N,), got {shapes}.")
    device_type = hidden.device.type
    if torch.is_autocast_enabled(device_type):
        compute_dtype = torch.get_autocast_dtype(device_type)
    else:
        compute_dtype = torch.promote_types(hidden.dtype, weight.dtype)
    chunk_size = chunk_size or default_chunk_size(hidden.shape[0], weight.shape[0], device_type)
    labels = labels.to(hidden.device)
    return LinearCrossEntropy.apply(
        hidden, weight, bias, labels, ignore_index, label_smoothing, num_items_in_batch, chunk_size, compute_dtype
    )


def uses_fused_loss(model: nn.Module, labels, logits_to_keep=0) -> bool:
    """Whether a language model's forward computes its loss with `linear_cross_entropy` and returns no logits: with
    `config.fused_loss`, labels, the model training with gradients on, and the logits of every position asked for.
    Evaluation (eval mode or no_grad) keeps the logits, which metrics and Trainer's evaluation read."""
    return (
        labels is not None
        and getattr(model.config, "fused_loss", False)
        and model.training
        and torch.is_grad_enabled()
        and isinstance(logits_to_keep, int)
        and logits_to_keep == 0
    )


def causal_lm_linear_cross_entropy(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    labels: torch.Tensor,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    """transformers' causal-LM loss (`ForCausalLMLoss`) of the logits hidden_states (B, T, D) @ weight^T + bias:
    position t predicts labels[t + 1] (the last position nothing), or `shift_labels[t]` when given."""
    if shift_labels is None:
        shift_labels = nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    return linear_cross_entropy(
        hidden_states.reshape(-1, hidden_states.shape[-1]),
        weight,
        bias,
        shift_labels.reshape(-1),
        ignore_index=ignore_index,
        num_items_in_batch=num_items_in_batch,
    )


__all__ = ["LinearCrossEntropy", "causal_lm_linear_cross_entropy", "linear_cross_entropy", "uses_fused_loss"]
