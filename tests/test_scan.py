"""The selective scan's two fast forms, chunked (`SelectiveScan`) and stepwise (`StepwiseScan`), equal its definition,
`selective_scan_reference`: outputs, last state and the gradients of every input, from zeros and from a state."""

import pytest
import torch

from hf_seq.models import scan
from hf_seq.models.scan import SelectiveScan, StepwiseScan, selective_scan, selective_scan_reference

BATCH, CHANNELS, STATE, LENGTH = 2, 3, 4, 11  # 11 steps: chunks of 4 leave a partial one


def scan_inputs(seed=0, dtype=torch.float64, from_state=True):
    """u, Delta, A, B, C, D and the entering state, as Mamba makes them: Delta > 0 (softplus), A < 0, decays
    exp(Delta A) in (e^-20, 1) so the floor never holds."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    u = randn(BATCH, CHANNELS, LENGTH)
    delta = torch.nn.functional.softplus(randn(BATCH, CHANNELS, LENGTH))
    A = -torch.exp(randn(CHANNELS, STATE))
    B, C = randn(BATCH, LENGTH, STATE), randn(BATCH, LENGTH, STATE)
    D = randn(CHANNELS)
    state = randn(BATCH, CHANNELS, STATE) if from_state else torch.zeros(BATCH, CHANNELS, STATE, dtype=dtype)
    assert (delta[:, :, None, :] * A[:, :, None] > scan.LOG_DECAY_FLOOR).all()
    return u, delta, A, B, C, D, state


def fast(form, u, delta, A, B, C, D, state, chunk_size=4):
    """A fast form's outputs in the reference's terms: y with the skip D u, and the last state."""
    y, last = form.apply(delta, A, delta * u, B, C, state, chunk_size)
    return y + D[:, None] * u, last


def outputs_and_gradients(run, inputs):
    """The outputs, and the gradients of a loss that weighs every y_t and the last state with fixed random weights."""
    inputs = [t.clone().requires_grad_() for t in inputs]
    y, last = run(*inputs)
    g = torch.Generator().manual_seed(1)
    loss = (y * torch.randn(y.shape, generator=g, dtype=y.dtype)).sum()
    loss = loss + (last * torch.randn(last.shape, generator=g, dtype=last.dtype)).sum()
    loss.backward()
    return (y.detach(), last.detach()), [t.grad for t in inputs]


@pytest.mark.parametrize("from_state", [False, True], ids=["from zeros", "from a state"])
@pytest.mark.parametrize("form", [SelectiveScan, StepwiseScan], ids=lambda f: f.__name__)
def test_fast_forms_equal_the_reference(form, from_state, monkeypatch):
    monkeypatch.setattr(scan, "BLOCK_ELEMENTS", 3 * BATCH * CHANNELS * STATE)  # stepwise: blocks of 3 steps
    inputs = scan_inputs(from_state=from_state)
    (y, last), grads = outputs_and_gradients(lambda *t: fast(form, *t), inputs)
    (y_ref, last_ref), grads_ref = outputs_and_gradients(selective_scan_reference, inputs)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(last, last_ref)
    for name, grad, grad_ref in zip("u delta A B C D state".split(), grads, grads_ref):
        torch.testing.assert_close(grad, grad_ref, msg=lambda m, name=name: f"d loss / d {name}: {m}")


@pytest.mark.parametrize("stepwise", [False, True], ids=["chunked", "stepwise"])
def test_selective_scan_equals_the_reference_in_float32(stepwise):
    u, delta, A, B, C, D, state = scan_inputs(dtype=torch.float32)
    for x0 in (None, state):
        y, last = selective_scan(u, delta, A, B, C, D, x0, chunk_size=4, stepwise=stepwise)
        y_ref, last_ref = selective_scan_reference(u, delta, A, B, C, D, x0)
        torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(last, last_ref, rtol=1e-5, atol=1e-5)


def test_the_reference_is_the_recurrence():
    """One step by hand: x_0 = exp(Delta_0 A) x_{-1} + Delta_0 B_0 u_0, y_0 = C_0 x_0 + D u_0."""
    u, delta, A, B, C, D, state = scan_inputs()
    y, last = selective_scan_reference(u[..., :1], delta[..., :1], A, B[:, :1], C[:, :1], D, state)
    x = torch.exp(delta[:, :, 0, None] * A) * state + delta[:, :, 0, None] * B[:, None, 0] * u[:, :, 0, None]
    torch.testing.assert_close(last, x)
    torch.testing.assert_close(y[..., 0], (x * C[:, None, 0]).sum(-1) + D * u[..., 0])
