"""The computations of the state-space layers: S4D's discretisation, convolution kernel and recurrence, and Mamba's
selective scan. Each layer has a sequence mode (for training and prompts) and a one-token mode (for generation);
both compute the same function (tests/test_ssm.py compares them).

A state-space model maps an input signal u(t) to an output y(t) through a state x(t) of N numbers per channel:

    x'(t) = A x(t) + B u(t)
    y(t)  = C x(t) + D u(t)

Each of the H channels has its own diagonal A (N values), B and C (N values each) and a skip weight D. Sampled with
a step size Delta under the zero-order hold (u held constant over each step), the system becomes a recurrence over
the tokens:

    A_bar = exp(Delta A)
    B_bar = (A_bar - I) A^{-1} B
    x_k = A_bar x_{k-1} + B_bar u_k
    y_k = C x_k + D u_k

**S4D** (Gu, Gupta, Goel and Re 2022) is linear and time-invariant: A, B, C, D and Delta do not depend on the input.
Unrolled from x_{-1} = 0, the recurrence is a causal convolution y = K * u + D u with the kernel

    K = (C B_bar, C A_bar B_bar, C A_bar^2 B_bar, ..., C A_bar^{L-1} B_bar),   K_l = sum_n C_n B_bar_n A_bar_n^l

a Vandermonde product (the powers A_bar_n^l = exp(l Delta A_n)). Training applies K by FFT, both signals zero-padded to
2L so that the circular convolution is the causal one: O(L log L) for L tokens. Generation runs the recurrence, O(N)
per channel and token. A complex diagonal A comes with its conjugate (u and y are real), so only N/2 modes are kept
and y_k = 2 Re(C x_k) + D u_k; S4D-Real keeps N real modes and y_k = C x_k + D u_k.

**Mamba** (Gu and Dao 2023) makes the SSM selective: Delta, B and C are functions of the input at each step, so the
model chooses what to write into its state and what to forget:

    Delta_k = softplus(W_Delta (W_r u_k) + b_Delta)      (a low-rank projection: W_r to rank R, W_Delta back to E)
    B_k = W_B u_k,   C_k = W_C u_k                          (N values each, shared by the E channels)
    x_k = exp(Delta_k A) x_{k-1} + Delta_k B_k u_k          (B discretised by Euler, as the paper's implementation)
    y_k = C_k x_k + D u_k

with A = -exp(A_log) real, of shape (E, N): every channel e has its own N decay rates (S4D-Real initialisation,
A_n = -(n+1)). No fixed kernel exists any more (it would change with every token), so training computes the scan in
chunks of T_c steps. Within a chunk, with a_r = Delta_r A (the logarithm of A_bar_r, elementwise over (e, n)) and x_0
the state that enters the chunk:

    x_t = exp(sum_{r<=t} a_r) x_0 + sum_{s<=t} exp(sum_{s<r<=t} a_r) Delta_s B_s u_s

all T_c steps at once: the segment sums sum_{s<r<=t} a_r are cumulative sums (never the difference of two, which
would lose precision), and every decay exp(...) is at most 1. The last state of a chunk enters the next one: a loop
over L / T_c chunks, none over single steps. A chunk holds B E N T_c^2 decays.

Shapes: B batch, H (S4D) or E (Mamba) channels, L or T time steps, M modes (N/2 complex or N real), N state size.
"""

import torch


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


def segment_sums(a: torch.Tensor) -> torch.Tensor:
    """S[..., t, s] = sum_{s<r<=t} a_r for t >= s, -inf above the diagonal (so exp(S) is the causal decay from step s
    to step t): (..., T) -> (..., T, T). Each sum is accumulated from zero, not taken as a difference of prefix sums."""
    length = a.shape[-1]
    after_s = torch.ones(length, length, dtype=torch.bool, device=a.device).tril(-1)  # [r, s]: r > s
    sums = a[..., :, None].expand(*a.shape, length).masked_fill(~after_s, 0).cumsum(-2)  # [t, s]
    causal = torch.ones(length, length, dtype=torch.bool, device=a.device).tril()
    return sums.masked_fill(~causal, float("-inf"))


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    state: torch.Tensor | None = None,
    chunk_size: int = 16,
):
    """Mamba's scan in chunks (see the module docstring). u and delta (B, E, L), A (E, N), B and C (B, L, N),
    D (E,), state (B, E, N) or None (zeros) -> y (B, E, L) in u's dtype, the state after the last step (float32)."""
    dtype = u.dtype
    u, delta, B, C = u.float(), delta.float(), B.float(), C.float()
    log_decay = (delta[..., None] * A[:, None, :].float()).transpose(-1, -2)  # a_t: (B, E, N, L)
    written = ((delta * u)[..., None] * B[:, None]).transpose(-1, -2)  # Delta_t B_t u_t: (B, E, N, L)
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[-1]) if state is None else state.float()
    outputs = []
    for start in range(0, u.shape[-1], chunk_size):
        chunk = slice(start, start + chunk_size)
        a, b = log_decay[..., chunk], written[..., chunk]
        decay = torch.exp(segment_sums(a))  # (B, E, N, T_c, T_c)
        states = (decay @ b[..., None]).squeeze(-1) + torch.exp(a.cumsum(-1)) * x[..., None]  # x_t: (B, E, N, T_c)
        outputs.append(torch.einsum("bent,btn->bet", states, C[:, chunk]))
        x = states[..., -1]
    y = torch.cat(outputs, -1) + D[:, None].float() * u
    return y.to(dtype), x


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
    "segment_sums",
    "selective_scan",
    "selective_step",
    "zoh_discretize",
]
