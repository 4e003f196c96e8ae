r"""Mamba-2's state-space layer (Dao and Gu 2024, "Transformers are SSMs: Generalized Models and Efficient Algorithms
Through Structured State Space Duality") in its three forms: the recurrence (the definition, and the one-token step
of generation), the quadratic masked-attention form, and the chunked form that training and prompts run. All three
compute the same function (tests/test_mamba2.py compares them).

Shapes: b batch, T time steps, h heads, p head_dim (the channels of a head), g groups, n state size, Q chunk size.
The inputs of a layer: x (b, T, h, p), the step size dt (b, T, h) (after the softplus and its limits), A (h,) (one
negative number per head), B and C (b, T, g, n) (each group's B and C serve the h / g heads of that group), D (h,).

**The recurrence.** Each head keeps a state H_t of p x n numbers. Where Mamba's A is a diagonal matrix per channel,
Mamba-2's is one scalar per head, a_t = dt_t A, so the whole state of a head decays by the same factor:

$$
\begin{aligned}
H_t &= e^{a_t} H_{t-1} + \mathrm{d}t_t\, x_t B_t^\top \qquad (p \times n) \\
y_t &= H_t C_t + D x_t \qquad (p)
\end{aligned}
$$

O(p n) per head and token, whatever the context: generation runs it (`ssd_step`).

**The dual, quadratic form.** Unrolled from H_{-1} = 0, with the decay between two positions
e^{a_{s+1} + ... + a_t} (1 for s = t),

$$
y_t = \sum_{s \le t} \underbrace{C_t^\top B_s\, e^{\sum_{s < r \le t} a_r}\, \mathrm{d}t_s}_{M_{ts}}\, x_s + D x_t,
\qquad M = L \circ (C B^\top) \,\mathrm{diag}(\mathrm{d}t), \quad
L_{ts} = \begin{cases} e^{\sum_{s < r \le t} a_r} & s \le t \\ 0 & s > t \end{cases}
$$

a causal linear attention with queries C, keys B, values dt x and a mask L that is 1-semiseparable (every block of L
below the diagonal has rank 1: L_ts = e^{c_t} e^{-c_s} with c the running sum of a). The same p-vector rows of M are
shared by every channel of a head, so M (b, h, T, T) is "the attention a Mamba-2 layer computes": `ssd_matrix`, drawn
by the studio. O(T^2 n) per head: the form for short sequences and for looking at the layer.

**The chunked form** splits the T steps into chunks of Q and uses each form where it is cheap. With the chunk's
running sums c_l = a_{start} + ... + a_l and H_0 the state entering the chunk, the output at position l of a chunk is

$$
y_l = \underbrace{\sum_{s \le l} M_{ls}\, x_s}_{\text{within the chunk: quadratic, } Q \times Q}
    + \underbrace{e^{c_l}\, H_0 C_l}_{\text{from the chunks before}} + D x_l
$$

and the state it hands to the next chunk is a sum over its positions, the recurrence unrolled over one chunk:

$$
H_{\text{next}} = e^{c_Q} H_0 + \sum_s e^{c_Q - c_s}\, \mathrm{d}t_s\, x_s B_s^\top
$$

So the diagonal blocks of M are computed as Q x Q matrices, the off-diagonal blocks, which are low rank, through
the states, and the only sequential work is a recurrence over T / Q chunk states: O(T Q n)
in all, against O(T^2 n) for the quadratic form and T sequential steps for the recurrence. A length that is not a
multiple of Q is padded with dt = 0 and x = 0: a padded step neither decays nor writes the state, so the state after
the last chunk is the state after the last real step.

The decays inside a chunk are exponentials of sums taken by `segment_sum` as cumulative sums of masked copies
(never as differences of two running sums, which would lose the small ones to rounding); every exponent is <= 0, so
nothing overflows. The layer computes in float32 whatever the parameters' dtype.
"""

import torch
from torch.nn import functional as F

DEFAULT_CHUNK_SIZE = 64


def ssd_reference(x, dt, A, B, C, D=None, state=None):
    """The definition: H_t = exp(dt_t A) H_{t-1} + dt_t x_t B_t^T, y_t = H_t C_t + D x_t, one step at a time.
    x (b, T, h, p), dt (b, T, h), A (h,), B and C (b, T, g, n), D (h,) or None, state (b, h, p, n) or None (zeros)
    -> y (b, T, h, p), the state after the last step. What `ssd_quadratic` and `ssd_chunked` compute faster."""
    ys = []
    for t in range(x.shape[1]):
        y, state = ssd_step(x[:, t], dt[:, t], A, B[:, t], C[:, t], D, state)
        ys.append(y)
    return torch.stack(ys, 1), state


def ssd_step(x, dt, A, B, C, D=None, state=None):
    """One token of the recurrence: x (b, h, p), dt (b, h), A (h,), B and C (b, g, n), state (b, h, p, n) or None
    -> y (b, h, p), the next state. Generation's step: O(p n) per head, whatever the context."""
    x, dt, B, C = wide(x), wide(dt), per_head(wide(B), A.shape[0]), per_head(wide(C), A.shape[0])
    if state is None:
        state = x.new_zeros(*x.shape, B.shape[-1])
    decay = torch.exp(dt * wide(A))[..., None, None]  # (b, h, 1, 1): one scalar per head
    state = decay * state + (dt[..., None] * x)[..., None] * B[:, :, None]  # (b, h, p, n)
    y = torch.einsum("bhpn,bhn->bhp", state, C)
    return (y if D is None else y + wide(D)[:, None] * x), state


def wide(t):
    """t in float32 at least (float64 stays): the layer computes in float32 under half precision."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def per_head(BC, heads):
    """B or C (..., g, n) -> (..., h, n): each group's vector repeated for its h / g heads (head i is in group
    i // (h / g), the layout of the reference implementation)."""
    return BC.repeat_interleave(heads // BC.shape[-2], dim=-2)


def segment_sum(a):
    """a (..., T) -> S (..., T, T) with S_ts = a_{s+1} + ... + a_t for s <= t (0 on the diagonal) and -inf above it,
    so exp(S) is the decay mask L. Each row is a cumulative sum of a copy of a with the entries r <= s zeroed, not a
    difference of two running sums."""
    T = a.shape[-1]
    later = torch.ones(T, T, dtype=torch.bool, device=a.device).tril(-1)  # r > s: [r, s]
    sums = torch.cumsum(a[..., :, None].expand(*a.shape, T).masked_fill(~later, 0), dim=-2)  # [t, s] sums r <= t
    causal = torch.ones(T, T, dtype=torch.bool, device=a.device).tril()
    return sums.masked_fill(~causal, float("-inf"))


def ssd_matrix(dt, A, B, C):
    """M = L o (C B^T) diag(dt), (b, h, T, T): y = M x + D x, row t the weights output t gives the inputs s <= t,
    per head (the same for the p channels of a head). dt (b, T, h), A (h,), B and C (b, T, g, n)."""
    heads = A.shape[0]
    dt = wide(dt).transpose(1, 2)  # (b, h, T)
    L = torch.exp(segment_sum(dt * wide(A)[:, None]))  # (b, h, T, T)
    scores = torch.einsum("bthn,bshn->bhts", per_head(wide(C), heads), per_head(wide(B), heads))
    return L * scores * dt[:, :, None, :]


def ssd_quadratic(x, dt, A, B, C, D=None, state=None):
    """The masked-attention form: y = M x + D x with M = `ssd_matrix` (plus e^{c_t} H_0 C_t from a state H_0).
    Arguments as `ssd_reference` -> y (b, T, h, p), the state after the last step, and M (b, h, T, T)."""
    heads, x = A.shape[0], wide(x)
    matrix = ssd_matrix(dt, A, B, C)
    y = torch.einsum("bhts,bshp->bthp", matrix, x)
    c = torch.cumsum(wide(dt) * wide(A), dim=1)  # (b, T, h): the decay from the start to t, log
    to_end = torch.exp(c[:, -1:] - c) * wide(dt)  # (b, T, h): what x_s B_s^T still weighs after the last step
    last = torch.einsum("bsh,bshp,bshn->bhpn", to_end, x, per_head(wide(B), heads))
    if state is not None:
        y = y + torch.exp(c)[..., None] * torch.einsum("bhpn,bthn->bthp", state, per_head(wide(C), heads))
        last = last + torch.exp(c[:, -1])[..., None, None] * state
    if D is not None:
        y = y + wide(D)[:, None] * x
    return y, last, matrix


def ssd_chunked(x, dt, A, B, C, D=None, state=None, chunk_size=DEFAULT_CHUNK_SIZE):
    """The chunked form (see the module docstring): quadratic within each chunk of `chunk_size` steps, a recurrence
    over the chunks' states between them. Any length; arguments and results as `ssd_reference`."""
    batch, length, heads, head_dim = x.shape
    pad = -length % chunk_size  # zeros: dt = 0 leaves the state as it was

    def chunks(t):  # (b, T, ...) -> (b, chunks, Q, ...)
        return F.pad(wide(t), (0, 0) * (t.dim() - 2) + (0, pad)).unflatten(1, (-1, chunk_size))

    groups = B.shape[-2]
    x, dt, B, C = chunks(x), chunks(dt), chunks(B), chunks(C)  # B, C (b, c, Q, g, n): shared by a group's heads
    x_dt = (x * dt[..., None]).unflatten(3, (groups, -1))  # (b, c, Q, g, r, p): head h is (h // r, h % r)
    a = (dt * wide(A)).permute(0, 3, 1, 2)  # (b, h, c, Q): log decay per step
    c = torch.cumsum(a, dim=-1)  # (b, h, c, Q): log decay from the chunk's start
    # within each chunk: the diagonal blocks of M, as matrices; C B^T once per group, the decay per head
    scores = torch.einsum("bclgn,bcsgn->bgcls", C, B)[:, :, None]  # (b, g, 1, c, Q, Q)
    M = torch.exp(segment_sum(a)).unflatten(1, (groups, -1)) * scores  # (b, g, r, c, Q, Q)
    y = torch.einsum("bgrcls,bcsgrp->bclgrp", M, x_dt)
    # what each chunk writes into the state by its end, then the recurrence over the chunks
    to_end = torch.exp(c[..., -1:] - c).unflatten(1, (groups, -1))  # (b, g, r, c, Q)
    written = torch.einsum("bcsgrp,bcsgn->bcgrpn", x_dt * to_end.permute(0, 3, 4, 1, 2)[..., None], B)
    written = written.flatten(2, 3)  # (b, c, h, p, n)
    state = x.new_zeros(batch, heads, head_dim, B.shape[-1]) if state is None else wide(state)
    entering = []
    for k in range(x.shape[1]):
        entering.append(state)
        state = torch.exp(c[:, :, k, -1])[..., None, None] * state + written[:, k]
    entering = torch.stack(entering, 1).unflatten(2, (groups, -1))  # (b, c, g, r, p, n): the state before each chunk
    # from the chunks before: the off-diagonal blocks, through the entering states
    decay = torch.exp(c).unflatten(1, (groups, -1)).permute(0, 3, 4, 1, 2)[..., None]  # (b, c, Q, g, r, 1)
    y = (y + torch.einsum("bclgn,bcgrpn->bclgrp", C, entering) * decay).flatten(3, 4)  # (b, c, Q, h, p)
    y = y.flatten(1, 2)[:, :length]  # (b, T, h, p)
    if D is not None:
        y = y + wide(D)[:, None] * x.flatten(1, 2)[:, :length]
    return y, state


__all__ = ["ssd_reference", "ssd_step", "ssd_matrix", "ssd_quadratic", "ssd_chunked", "segment_sum", "per_head"]
