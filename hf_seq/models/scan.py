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
chunks of T_c steps. Within a chunk, with a_r = Delta_r A (the logarithm of A_bar_r, elementwise over (e, n)), its
running sum c_t = sum_{r<=t} a_r from the chunk's start, b_s = Delta_s B_s u_s and x_0 the state entering the chunk:

    x_t = exp(c_t) x_0 + sum_{s<=t} exp(c_t - c_s) b_s = exp(c_t) (x_0 + sum_{s<=t} exp(-c_s) b_s)

all T_c steps at once, by one cumulative sum: O(T_c) work per (channel, mode), as the recurrence itself. exp(-c_s)
grows along a chunk, so this runs in float64, each step's decay is floored at exp(-37.5) (a state that decays faster
than that in one step is gone to float32 either way) and a chunk is at most 16 steps: 16 x 37.5 = 600 keeps every
factor inside float64's range (exp(709)). The state leaving a chunk enters the next one: a loop over the L / T_c
chunks, none over single steps.

Shapes: B batch, H (S4D) or E (Mamba) channels, L or T time steps, M modes (N/2 complex or N real), N state size.
"""

import torch
from torch import nn

LOG_DECAY_FLOOR = -37.5  # Delta A per step, at least: exp(-37.5) ~ 5e-17
MAX_CHUNK = 16  # steps the scan computes at once: exp(16 * 37.5) is inside float64's range


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
    """Mamba's scan in chunks of `chunk_size` steps, at most MAX_CHUNK (see the module docstring). u and delta
    (B, E, L), A (E, N), B and C (B, L, N), D (E,), state (B, E, N) or None (zeros) -> y (B, E, L) in u's dtype, the
    state after the last step (float32)."""
    dtype, length = u.dtype, u.shape[-1]
    chunk_size = min(chunk_size, MAX_CHUNK)
    pad = -length % chunk_size  # steps added at the end with a = 0 and b = 0: they leave the state as it is
    a = (delta.double()[:, :, None] * A.double()[None, :, :, None]).clamp(min=LOG_DECAY_FLOOR)  # Delta A: (B,E,N,L)
    b = (delta * u).double()[:, :, None] * B.double().transpose(1, 2)[:, None]  # Delta_t B_t u_t: (B, E, N, L)
    a, b = (nn.functional.pad(t, (0, pad)).unflatten(-1, (-1, chunk_size)) for t in (a, b))  # (B, E, N, K, T_c)
    c = a.cumsum(-1)  # c_t within each chunk
    decay = torch.exp(c)
    from_zero = decay * (torch.exp(-c) * b).cumsum(-1)  # x_t of each chunk entered with x_0 = 0
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[-1], dtype=torch.float64) if state is None else state.double()
    entering = []
    # the state leaving chunk k enters chunk k + 1 (each chunk's last values read once: a read per chunk of the
    # whole tensor would cost a whole-tensor gradient per chunk)
    for chunk_decay, chunk_end in zip(decay[..., -1].unbind(-1), from_zero[..., -1].unbind(-1)):
        entering.append(x)
        x = chunk_decay * x + chunk_end
    states = from_zero + decay * torch.stack(entering, -1)[..., None]  # x_t: (B, E, N, K, T_c)
    states = states.flatten(-2)[..., :length]
    y = torch.einsum("benl,bln->bel", states, C.double()) + D.double()[:, None] * u.double()
    return y.to(dtype), x.float()


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
    "selective_scan",
    "selective_step",
    "zoh_discretize",
]
