r"""The computations of the state-space layers: S4D's discretisation, convolution kernel and recurrence, and Mamba's
selective scan. Each layer has a sequence mode (for training and prompts) and a one-token mode (for generation);
both compute the same function (tests/test_ssm.py compares them).

A state-space model maps an input signal u(t) to an output y(t) through a state x(t) of N numbers per channel:

$$
\begin{aligned}
x'(t) &= A x(t) + B u(t) \\
y(t) &= C x(t) + D u(t)
\end{aligned}
$$

Each of the H channels has its own diagonal A (N values), B and C (N values each) and a skip weight D. Sampled with
a step size Delta under the zero-order hold (u held constant over each step), the system becomes a recurrence over
the tokens:

$$
\begin{aligned}
\bar A &= \exp(\Delta A), \quad \bar B = (\bar A - I) A^{-1} B \\
x_k &= \bar A x_{k-1} + \bar B u_k \\
y_k &= C x_k + D u_k
\end{aligned}
$$

**S4D** (Gu, Gupta, Goel and Re 2022) is linear and time-invariant: A, B, C, D and Delta do not depend on the input.
Unrolled from x_{-1} = 0, the recurrence is a causal convolution y = K * u + D u with the kernel

$$
K = (C \bar B, C \bar A \bar B, C \bar A^2 \bar B, \dots, C \bar A^{L-1} \bar B), \qquad
K_l = \sum_n C_n \bar B_n \bar A_n^l
$$

a Vandermonde product (the powers A_bar_n^l = exp(l Delta A_n)). Training applies K by FFT, both signals zero-padded to
2L so that the circular convolution is the causal one: O(L log L) for L tokens. Generation runs the recurrence, O(N)
per channel and token. A complex diagonal A comes with its conjugate (u and y are real), so only N/2 modes are kept
and y_k = 2 Re(C x_k) + D u_k; S4D-Real keeps N real modes and y_k = C x_k + D u_k.

**Mamba** (Gu and Dao 2023) makes the SSM selective: Delta, B and C are functions of the input at each step, so the
model chooses what to write into its state and what to forget:

$$
\begin{aligned}
\Delta_k &= \mathrm{softplus}(W_\Delta (W_r u_k) + b_\Delta)
    \qquad \text{a low-rank projection: } W_r \text{ to rank } R,\ W_\Delta \text{ back to } E \\
B_k &= W_B u_k, \quad C_k = W_C u_k \qquad N \text{ values each, shared by the } E \text{ channels} \\
x_k &= \exp(\Delta_k A)\, x_{k-1} + \Delta_k B_k u_k \qquad B \text{ discretised by Euler, as the paper's implementation} \\
y_k &= C_k x_k + D u_k
\end{aligned}
$$

with A = -exp(A_log) real, of shape (E, N): every channel e has its own N decay rates (S4D-Real initialisation,
A_n = -(n+1)). No fixed kernel exists any more (it would change with every token), so training computes the scan in
chunks of T_c steps. Within a chunk, with a_r = Delta_r A (the logarithm of A_bar_r, elementwise over (e, n)), its
running sum c_t = sum_{r<=t} a_r from the chunk's start, b_s = Delta_s B_s u_s and x_0 the state entering the chunk:

$$
x_t = e^{c_t} x_0 + \sum_{s \le t} e^{c_t - c_s} b_s = e^{c_t} \Big(x_0 + \sum_{s \le t} e^{-c_s} b_s\Big)
$$

all T_c steps at once, by one cumulative sum: O(T_c) work per (channel, mode), as the recurrence itself. exp(-c_s)
grows along a chunk, so a chunk is at most 4 steps, each step's decay is floored at exp(-20) (a state that decays
faster than 2e-9 in one step is gone to float32 either way) and the two factors are taken about the chunk's middle,
exp(c_t - c_s) = exp(c_t - m) exp(m - c_s): each within exp(+-40), so an input as large as 1e20 stays inside
float32's range. The state leaving a chunk enters the next one: a loop over the L / T_c chunks, none over single
steps.

The gradient runs the same recurrence backwards (`SelectiveScan.backward`): with g_t = dLoss/dx_t,

$$
g_t = C_t \frac{\partial L}{\partial y_t} + e^{a_{t+1}} g_{t+1}, \qquad
\frac{\partial L}{\partial b_t} = g_t, \quad \frac{\partial L}{\partial a_t} = g_t (x_t - b_t), \quad
\frac{\partial L}{\partial C_t} = \sum_e \frac{\partial L}{\partial y_t} x_t
$$

so the backward pass keeps only the scan's inputs and recomputes the states, instead of every intermediate tensor.

**Two ways to run the same scan.** The chunked form (`SelectiveScan`) suits an accelerator: a few large tensor
operations per chunk. On a CPU its (B, E, N, L) intermediates (50 MB for a batch of 16 x 128 tokens at E = 384) do
not fit in the caches, and a dozen passes over them from memory cost more than the arithmetic. `StepwiseScan` runs
the recurrence one step at a time instead, x_t = b_t + exp(a_t) x_{t-1} as one fused multiply-add, over blocks of
steps small enough to stay in the cache, with everything that does not depend on the previous step (exp(a_t), b_t,
the outputs, and in the backward pass the gradients of Delta, A, Delta u, B and C) done once per block. Both equal
the definition, `selective_scan_reference`, the recurrence as a plain loop at the top of this file (tests/test_scan.py
compares them, values and gradients); `selective_scan` uses the stepwise form on a CPU and the chunked one elsewhere.

Shapes: B batch, H (S4D) or E (Mamba) channels, L or T time steps, M modes (N/2 complex or N real), N state size.
"""

import torch
from torch import nn

LOG_DECAY_FLOOR = -20.0  # Delta A per step, at least: exp(-20) ~ 2e-9
MAX_CHUNK = 4  # steps the scan computes at once: exp(4 * 20) times an input stays inside float32's range
BLOCK_ELEMENTS = 2**18  # the stepwise scan's blocks: T x B x E x N about this many values (1 MB per tensor)
# The stepwise scan's threads (see StepwiseScan); None: torch's setting, which a training run already lowers on a busy
# machine (runs.choose_threads). On a quiet 2-core machine two threads were faster (Mamba / GPT 0.37-0.39 against
# 0.31-0.35 with one, bench/results/ssm_vs_gpt_cpu.md); on a loaded one a single thread was.
SCAN_THREADS: int | None = None


def selective_scan_reference(u, delta, A, B, C, D, state=None):
    """Mamba's selective scan by its definition, one step at a time (mamba-minimal's `selective_scan`, the loop of
    transformers' `MambaMixer.slow_forward`): x_t = exp(Delta_t A) x_{t-1} + Delta_t B_t u_t, y_t = C_t x_t + D u_t.
    u and delta (B, E, L), A (E, N), B and C (B, L, N), D (E,), state (B, E, N) or None (zeros) -> y (B, E, L), the
    state after the last step. What `SelectiveScan` and `StepwiseScan` compute faster."""
    x = u.new_zeros(*u.shape[:2], A.shape[-1]) if state is None else state
    ys = []
    for t in range(u.shape[-1]):
        x = torch.exp(delta[:, :, t, None] * A) * x + (delta[:, :, t] * u[:, :, t])[..., None] * B[:, None, t]
        ys.append(torch.einsum("ben,bn->be", x, C[:, t]))
    return torch.stack(ys, -1) + D[:, None] * u, x


def zoh_discretize(log_dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor):
    """The zero-order hold of a diagonal system, per channel h and mode m: Delta A (the log of A_bar) and
    B_bar = (exp(Delta A) - 1) / A * B. `log_dt` (H,), A and B (H, M), real or complex."""
    dt_A = torch.exp(log_dt)[:, None] * A
    return dt_A, torch.expm1(dt_A) / A * B


def _observe(z: torch.Tensor) -> torch.Tensor:
    """C x summed over the modes: 2 Re(.) for complex modes (each stands for itself and its conjugate)."""
    return 2 * z.real if z.is_complex() else z


def powers(dt_A: torch.Tensor, length: int) -> torch.Tensor:
    """The Vandermonde matrix A_bar^l = exp(l Delta A), l = 0..length-1: (H, M) -> (H, M, length)."""
    steps = torch.arange(length, device=dt_A.device, dtype=dt_A.real.dtype)
    return torch.exp(dt_A[..., None] * steps)


def s4d_kernel(dt_A: torch.Tensor, B_bar: torch.Tensor, C: torch.Tensor, length: int) -> torch.Tensor:
    """K_l = sum_m C_m B_bar_m A_bar_m^l (2 Re of it for complex modes): (H, length)."""
    return _observe(torch.einsum("hm,hml->hl", C * B_bar, powers(dt_A, length)))


def s4d_convolution(
    u: torch.Tensor,
    dt_A: torch.Tensor,
    B_bar: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    state: torch.Tensor | None = None,
    return_state: bool = False,
):
    """The sequence mode: y = K * u + D u by FFT, u (B, H, L) -> y (B, H, L). From a state x (B, H, M) (the one a
    previous call ended with), y_k also gets C A_bar^{k+1} x. With `return_state`, also the state after the last
    step, x_L = A_bar^L x + sum_j A_bar^{L-1-j} B_bar u_j (B, H, M), another Vandermonde product; else None."""
    length = u.shape[-1]
    vandermonde = powers(dt_A, length + 1)  # A_bar^0 .. A_bar^L
    kernel = _observe(torch.einsum("hm,hml->hl", C * B_bar, vandermonde[..., :length]))
    n = 2 * length  # zero padding: the circular convolution of length 2L holds the causal one in its first L
    y = torch.fft.irfft(torch.fft.rfft(u, n=n) * torch.fft.rfft(kernel, n=n), n=n)[..., :length]
    y = y + D[:, None] * u
    if state is not None:
        y = y + _observe(torch.einsum("hml,bhm->bhl", C[..., None] * vandermonde[..., 1:], state))
    last = None
    if return_state:
        reversed_powers = vandermonde[..., :length].flip(-1)  # A_bar^{L-1-j} at j
        last = B_bar * torch.einsum("bhl,hml->bhm", u.to(vandermonde.dtype), reversed_powers)
        if state is not None:
            last = last + vandermonde[..., length] * state
    return y, last


def s4d_step(u: torch.Tensor, dt_A: torch.Tensor, B_bar: torch.Tensor, C: torch.Tensor, D: torch.Tensor, state):
    """The recurrent mode, one token: x_k = A_bar x_{k-1} + B_bar u_k, y_k = C x_k + D u_k (2 Re for complex
    modes). u (B, H), state (B, H, M) -> y (B, H), the new state."""
    state = torch.exp(dt_A) * state + B_bar * u[..., None]
    return _observe((C * state).sum(-1)) + D * u, state


def linear_recurrence(a, b, x0, chunk_size):
    """x_t = exp(a_t) x_{t-1} + b_t along the last dimension of a and b (..., L), from x0 (...): every x_t
    (..., L), in chunks of `chunk_size` steps (see the module docstring; a_t >= LOG_DECAY_FLOOR)."""
    length = a.shape[-1]
    pad = -length % chunk_size
    a, b = (nn.functional.pad(t, (0, pad)).unflatten(-1, (-1, chunk_size)) for t in (a, b))
    c = a.cumsum(-1)
    decay = torch.exp(c)
    # exp(c_t - c_s) = exp(c_t - m) exp(m - c_s) with m halfway down the chunk's decay: each factor within exp(+-40)
    middle = c[..., chunk_size // 2 - 1 : chunk_size // 2] if chunk_size > 1 else c
    states = (b * torch.exp(middle - c)).cumsum_(-1).mul_(torch.exp(c - middle))
    x, entering = x0, []
    for chunk_decay, chunk_end in zip(decay[..., -1].unbind(-1), states[..., -1].unbind(-1)):
        entering.append(x)
        x = chunk_decay * x + chunk_end
    states.addcmul_(decay, torch.stack(entering, -1)[..., None])
    return states.flatten(-2)[..., :length]


def _chunked_inputs(delta, A, du, B):
    """The recurrence's a_t = Delta_t A before and after the floor, and b_t = Delta_t B_t u_t: (B, E, N, L) each."""
    a_raw = delta[:, :, None] * A[None, :, :, None]
    b = du[:, :, None] * B.transpose(1, 2)[:, None]
    return a_raw, a_raw.clamp(min=LOG_DECAY_FLOOR), b


class SelectiveScan(torch.autograd.Function):
    """`selective_scan_reference` (without the skip D u) in chunks of steps (the module docstring): sum_n C_t x_t
    (B, E, L) and the last state, from Delta (B, E, L), A (E, N), Delta u (B, E, L), B and C (B, L, N) and the
    entering state (B, E, N). Equals the reference up to the decay floor; its backward is the reverse recurrence."""

    @staticmethod
    def forward(ctx, delta, A, du, B, C, x0, chunk_size):
        _, a, b = _chunked_inputs(delta, A, du, B)
        states = linear_recurrence(a, b, x0, chunk_size)
        y = torch.einsum("benl,bln->bel", states, C)
        ctx.save_for_backward(delta, A, du, B, C, x0)
        ctx.chunk_size = chunk_size
        return y, states[..., -1].clone()

    @staticmethod
    def backward(ctx, gy, g_last):
        delta, A, du, B, C, x0 = ctx.saved_tensors
        a_raw, a, b = _chunked_inputs(delta, A, du, B)
        states = linear_recurrence(a, b, x0, ctx.chunk_size)
        # the adjoint g_t = dLoss/dx_t = C_t gy_t + exp(a_{t+1}) g_{t+1}; the last step also gets g_last
        h = gy[:, :, None] * C.transpose(1, 2)[:, None]
        if g_last is not None:
            h[..., -1] += g_last
        a_next = nn.functional.pad(a[..., 1:], (0, 1))  # exp(a_{t+1}); nothing after the last step
        g = linear_recurrence(a_next.flip(-1), h.flip(-1), torch.zeros_like(x0), ctx.chunk_size).flip(-1)
        g_x0 = torch.exp(a[..., 0]) * g[..., 0]
        # x_t - b_t = exp(a_t) x_{t-1}: the gradient of a_t, zero where the floor holds it
        g_a = g * (states - b)
        g_a = g_a.masked_fill_(a_raw < LOG_DECAY_FLOOR, 0)
        g_delta = torch.einsum("benl,en->bel", g_a, A)
        g_A = torch.einsum("benl,bel->en", g_a, delta)
        g_du = torch.einsum("benl,bln->bel", g, B)
        g_B = torch.einsum("benl,bel->bln", g, du)
        g_C = torch.einsum("benl,bel->bln", states, gy)
        return g_delta, g_A, g_du, g_B, g_C, g_x0, None


class StepwiseScan(torch.autograd.Function):
    """The same inputs and outputs as `SelectiveScan`, equal to `selective_scan_reference`: the recurrence run one
    time step at a time (for CPUs: see the module docstring), in blocks of steps whose (T, B, E, N) tensors fit in a
    cache: per block, exp(a_t) and b_t for every step in one operation each, then one fused multiply-add per step,
    x_t = b_t + exp(a_t) x_{t-1}, then the block's outputs in one product. The backward pass recomputes each block's
    states from the state entering it (kept by the forward pass), runs the adjoint recurrence
    g_t = C_t dL/dy_t + exp(a_{t+1}) g_{t+1} (again one multiply-add per step), and takes the gradients of the
    block's inputs from the states and adjoints at once, as products over views of them (no copies). The decays
    exp(a_t) are kept from the forward pass (one (L, B, E, N) tensor; exp was the costliest operation to redo).

    Unlike the chunked form, it needs no floor on the decay: exp(a_t) underflowing to 0 is the exact state there.
    `SCAN_THREADS` can hold its operations to fewer threads: each moves about 1 MB, so on a machine shared with
    other processes a second thread gains less than its hand-off costs (a wait for a time slice)."""

    @staticmethod
    def forward(ctx, delta, A, du, B, C, x0, chunk_size=None):
        with _threads(SCAN_THREADS):
            # time-major copies, so that a block of steps is one contiguous slice: (L, B, E) and (L, B, N)
            delta, du = delta.permute(2, 0, 1).contiguous(), du.permute(2, 0, 1).contiguous()
            B, C = B.transpose(0, 1).contiguous(), C.transpose(0, 1).contiguous()
            block = max(1, BLOCK_ELEMENTS // x0.numel())
            decays = torch.mul(delta[..., None], A).exp_()  # exp(a_t) = exp(Delta_t A): (L, B, E, N)
            y, entering, x = x0.new_empty(delta.shape), [], x0
            for start in range(0, delta.shape[0], block):
                steps = slice(start, start + block)
                entering.append(x)
                states = _block_states(decays[steps], du[steps], B[steps], x)
                torch.sum(states * C[steps, :, None, :], -1, out=y[steps])  # y_t = sum_n C_t x_t
                x = states[-1]
        ctx.save_for_backward(delta, A, du, B, C, decays, *entering)
        ctx.block = block
        return y.permute(1, 2, 0), x.clone()

    @staticmethod
    def backward(ctx, gy, g_last):
        delta, A, du, B, C, decays, *entering = ctx.saved_tensors
        with _threads(SCAN_THREADS):
            gy = gy.permute(2, 0, 1).contiguous()  # (L, B, E)
            g_delta, g_du, g_B, g_C = (torch.empty_like(t) for t in (delta, du, B, C))
            g_A = torch.zeros_like(A)
            g, decay_after = g_last.clone(), None  # g = dLoss/dx_t; exp(a_{t+1}), none after the last step
            for k in range(len(entering) - 1, -1, -1):
                steps = slice(k * ctx.block, (k + 1) * ctx.block)
                decay = decays[steps]
                states = _block_states(decay, du[steps], B[steps], entering[k])
                adjoints = gy[steps, :, :, None] * C[steps, :, None, :]  # C_t dL/dy_t, then g_t in place
                for t in range(len(adjoints) - 1, -1, -1):
                    g = adjoints[t].add_(g) if decay_after is None else adjoints[t].addcmul_(decay_after, g)
                    decay_after = decay[t]
                torch.sum(adjoints * B[steps, :, None, :], -1, out=g_du[steps])
                torch.matmul(du[steps, :, None, :], adjoints, out=g_B[steps, :, None, :])  # sum_e: (T, B, 1, N)
                torch.matmul(gy[steps, :, None, :], states, out=g_C[steps, :, None, :])
                # dLoss/da_t = g_t exp(a_t) x_{t-1}
                g_a = decay * adjoints
                g_a[1:].mul_(states[:-1])
                g_a[0].mul_(entering[k])
                torch.sum(g_a * A, -1, out=g_delta[steps])
                g_A += g_a.mul_(delta[steps, :, :, None]).sum((0, 1))
            g_x0 = g * decay_after
        return (
            g_delta.permute(1, 2, 0),
            g_A,
            g_du.permute(1, 2, 0),
            g_B.transpose(0, 1),
            g_C.transpose(0, 1),
            g_x0,
            None,
        )


class _threads:
    """Within the block, torch's operations use `count` threads (None: unchanged)."""

    def __init__(self, count):
        self.count, self.before = count, None

    def __enter__(self):
        if self.count is not None:
            self.before = torch.get_num_threads()
            torch.set_num_threads(min(self.count, self.before))

    def __exit__(self, *exc):
        if self.before is not None:
            torch.set_num_threads(self.before)


def _block_states(decay, du, B, x):
    """The states x_t (T, B, E, N) of a block of steps from the state x before it: decays exp(a_t) (T, B, E, N),
    Delta u (T, B, E), B (T, B, N)."""
    states = du[..., None] * B[:, :, None, :]  # b_t, then x_t = b_t + exp(a_t) x_{t-1} in place
    for t in range(len(states)):
        x = states[t].addcmul_(decay[t], x)
    return states


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    state: torch.Tensor | None = None,
    chunk_size: int = 4,
    stepwise: bool | None = None,
):
    """Mamba's scan: step by step (`stepwise`, the default on a CPU) or in chunks of `chunk_size` steps, at most
    MAX_CHUNK (the default elsewhere; see the module docstring). u and delta
    (B, E, L), A (E, N), B and C (B, L, N), D (E,), state (B, E, N) or None (zeros) -> y (B, E, L) in u's dtype, the
    state after the last step (float32)."""
    dtype = u.dtype
    chunk_size = min(chunk_size, MAX_CHUNK)
    x0 = u.new_zeros(u.shape[0], u.shape[1], A.shape[-1], dtype=torch.float32) if state is None else state.float()
    delta32, u32 = delta.float(), u.float()
    stepwise = u.device.type == "cpu" if stepwise is None else stepwise
    scan = StepwiseScan if stepwise else SelectiveScan
    y, last = scan.apply(delta32, A.float(), delta32 * u32, B.float(), C.float(), x0, chunk_size)
    return (y + D.float()[:, None] * u32).to(dtype), last.float()


def selective_step(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, B, C, D: torch.Tensor, state: torch.Tensor):
    """One token of the scan: x = exp(Delta A) x + Delta B u, y = C x + D u. u and delta (B, E), B and C (B, N),
    state (B, E, N) -> y (B, E) in u's dtype, the new state (float32)."""
    dtype = u.dtype
    u, delta = u.float(), delta.float()
    state = torch.exp(delta[..., None] * A.float()) * state.float() + (delta * u)[..., None] * B.float()[:, None]
    y = torch.einsum("ben,bn->be", state, C.float()) + D.float() * u
    return y.to(dtype), state


__all__ = [
    "powers",
    "s4d_convolution",
    "s4d_kernel",
    "s4d_step",
    "linear_recurrence",
    "SelectiveScan",
    "StepwiseScan",
    "selective_scan",
    "selective_scan_reference",
    "selective_step",
    "zoh_discretize",
]
