"""The state-space family: the shared tester on S4D and Mamba (and their variants), plus what is particular to
state-space models: the discretisation is the zero-order hold, every sequence mode (S4D's FFT convolution, Mamba's
chunked scan) equals the recurrence run one token at a time, the state carried across calls equals one pass, and
generation costs the same per token whatever the context."""

import math

import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from hf_seq import SSMConfig, SSMForCausalLM, SSMModel, SSMState
from hf_seq.models import scan as scan_module
from hf_seq.models.modeling_ssm import MambaMixer, S4DMixer
from hf_seq.models.scan import (
    SelectiveScan,
    StepwiseScan,
    s4d_convolution,
    s4d_kernel,
    s4d_step,
    selective_scan,
    selective_step,
    zoh_discretize,
)
from hf_seq.models.utils import CACHE_NAME
from tests.tester import EOS, FIRST_WORD, PAD, ModelTesterMixin


class TestSSMS4D(ModelTesterMixin):
    family = "hf_seq_ssm"
    config_kwargs = dict(
        hidden_size=16,
        num_hidden_layers=2,
        ssm_type="s4d",
        state_size=8,
        hidden_dropout=0.1,
        initializer_range=0.3,  # logits far enough from uniform that a changed label moves the loss
    )
    no_dropout = dict(hidden_dropout=0.0)
    has_position_limit = False


class TestSSMS4DInverse(TestSSMS4D):
    config_overrides = dict(s4d_init="inv", tie_word_embeddings=False)
    expensive_checks = False


class TestSSMS4DRealLinearOutput(TestSSMS4D):
    config_overrides = dict(s4d_init="real", s4d_output="linear", state_size=5)
    expensive_checks = False


class TestSSMMamba(ModelTesterMixin):
    family = "hf_seq_ssm"
    config_kwargs = dict(
        hidden_size=16,
        num_hidden_layers=2,
        ssm_type="mamba",
        state_size=4,
        expand=2,
        scan_chunk_size=3,  # seq_len 7: chunks of 3, 3 and 1, the state carried between them
        hidden_dropout=0.1,
        initializer_range=0.3,
    )
    no_dropout = dict(hidden_dropout=0.0)
    has_position_limit = False


class TestSSMMambaBiasesKernel2(TestSSMMamba):
    config_overrides = dict(use_bias=True, use_conv_bias=False, conv_kernel=2, time_step_rank=3, residual_in_fp32=False)
    expensive_checks = False


class TestSSMMamba2(ModelTesterMixin):
    family = "hf_seq_ssm"
    config_kwargs = dict(
        hidden_size=16,
        num_hidden_layers=2,
        ssm_type="mamba2",
        head_dim=8,  # 4 heads of 8 channels over the inner width 32
        n_groups=2,
        state_size=4,
        chunk_size=3,  # seq_len 7: chunks of 3, 3 and 1 (padded), the state carried between them
        hidden_dropout=0.1,
        initializer_range=0.3,
    )
    no_dropout = dict(hidden_dropout=0.0)
    has_position_limit = False


class TestSSMMamba2NormBeforeGateBiases(TestSSMMamba2):
    config_overrides = dict(norm_before_gate=True, use_bias=True, use_conv_bias=False, n_groups=1, chunk_size=2)
    expensive_checks = False


TINY = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, initializer_range=0.3)
S4D = dict(TINY, ssm_type="s4d", state_size=8)
MAMBA = dict(TINY, ssm_type="mamba", state_size=4, scan_chunk_size=4)
MAMBA2 = dict(TINY, ssm_type="mamba2", head_dim=8, n_groups=2, state_size=4, chunk_size=3)


# ------------------------------------------------------------------------------------ the equations, layer by layer
@pytest.mark.parametrize("complex_modes", [False, True])
def test_discretisation_is_the_zero_order_hold(complex_modes):
    """B_bar = (exp(Delta A) - 1) / A B is the exact solution over a step of a constant input: by Van Loan's formula,
    exp(Delta [[A, B], [0, 0]]) = [[A_bar, B_bar], [0, 1]] (for each diagonal entry of A)."""
    torch.manual_seed(0)
    dtype = torch.complex128 if complex_modes else torch.float64
    A = -torch.rand(3, 4, dtype=torch.float64) - 0.1
    if complex_modes:
        A = torch.complex(A, 3 * torch.randn(3, 4, dtype=torch.float64))
    B = torch.randn(3, 4, dtype=dtype)
    log_dt = torch.log(torch.tensor([0.01, 0.1, 0.7], dtype=torch.float64))
    dt_A, B_bar = zoh_discretize(log_dt, A, B)
    dt = log_dt.exp()[:, None]
    block = torch.zeros(3, 4, 2, 2, dtype=dtype)
    block[..., 0, 0], block[..., 0, 1] = A * dt, B * dt
    exact = torch.linalg.matrix_exp(block)
    torch.testing.assert_close(torch.exp(dt_A), exact[..., 0, 0])
    torch.testing.assert_close(B_bar, exact[..., 0, 1])


def s4d_parameters(complex_modes, channels=3, modes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = -torch.rand(channels, modes, generator=g) - 0.05
    B, C = torch.randn(channels, modes, generator=g), torch.randn(channels, modes, generator=g)
    if complex_modes:
        A = torch.complex(A, 4 * torch.randn(channels, modes, generator=g))
        B = torch.complex(B, torch.randn(channels, modes, generator=g))
        C = torch.complex(C, torch.randn(channels, modes, generator=g))
    log_dt = torch.log(torch.rand(channels, generator=g) * 0.3 + 0.01)
    D = torch.randn(channels, generator=g)
    dt_A, B_bar = zoh_discretize(log_dt, A, B)
    return dt_A, B_bar, C, D


def s4d_steps(u, dt_A, B_bar, C, D, state=None):
    """The recurrence x_k = A_bar x_{k-1} + B_bar u_k, y_k = C x_k + D u_k, one token at a time."""
    if state is None:
        state = torch.zeros(u.shape[0], *dt_A.shape, dtype=dt_A.dtype)
    outputs = []
    for k in range(u.shape[-1]):
        y, state = s4d_step(u[..., k], dt_A, B_bar, C, D, state)
        outputs.append(y)
    return torch.stack(outputs, -1), state


@pytest.mark.parametrize("complex_modes", [False, True])
def test_s4d_kernel_is_c_times_powers_of_a_bar_times_b_bar(complex_modes):
    dt_A, B_bar, C, _ = s4d_parameters(complex_modes)
    A_bar = torch.exp(dt_A)
    expected = torch.stack([(C * A_bar**power * B_bar).sum(-1) for power in range(9)], -1)
    expected = 2 * expected.real if complex_modes else expected
    torch.testing.assert_close(s4d_kernel(dt_A, B_bar, C, 9), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("complex_modes", [False, True])
def test_s4d_convolution_equals_the_recurrence(complex_modes):
    """The FFT convolution (padded to 2L) equals the step-by-step recurrence, with and without a state to start from,
    and returns the same final state. Without the zero padding the convolution would be circular: the last inputs
    would leak into the first outputs."""
    dt_A, B_bar, C, D = s4d_parameters(complex_modes)
    u = torch.randn(2, 3, 11)
    y, last = s4d_convolution(u, dt_A, B_bar, C, D, return_state=True)
    y_steps, last_steps = s4d_steps(u, dt_A, B_bar, C, D)
    torch.testing.assert_close(y, y_steps, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last, last_steps, rtol=1e-5, atol=1e-5)
    # continuing from the state of a first part equals the whole sequence at once
    first, rest = u[..., :4], u[..., 4:]
    _, state = s4d_convolution(first, dt_A, B_bar, C, D, return_state=True)
    y_rest, last_rest = s4d_convolution(rest, dt_A, B_bar, C, D, state=state, return_state=True)
    torch.testing.assert_close(y_rest, y_steps[..., 4:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(last_rest, last_steps, rtol=1e-5, atol=1e-5)
    circular = torch.fft.irfft(torch.fft.rfft(u) * torch.fft.rfft(s4d_kernel(dt_A, B_bar, C, 11)), n=11)
    assert not torch.allclose(circular + D[:, None] * u, y_steps, atol=1e-3)


def mamba_steps(u, delta, A, B, C, D, state=None):
    """Mamba's recurrence from its equations: x_k = exp(Delta_k A) x_{k-1} + Delta_k B_k u_k, y_k = C_k x_k + D u_k."""
    x = torch.zeros(u.shape[0], *A.shape) if state is None else state
    outputs = []
    for k in range(u.shape[-1]):
        d = delta[..., k, None]  # (B, E, 1)
        x = torch.exp(d * A) * x + d * u[..., k, None] * B[:, None, k]
        outputs.append((x * C[:, None, k]).sum(-1) + D * u[..., k])
    return torch.stack(outputs, -1), x


def selective_inputs(seed=0, batch=2, channels=5, length=13, size=4):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, channels, length, generator=g)
    delta = torch.nn.functional.softplus(torch.randn(batch, channels, length, generator=g))
    A = -torch.exp(torch.randn(channels, size, generator=g))
    B, C = torch.randn(batch, length, size, generator=g), torch.randn(batch, length, size, generator=g)
    return u, delta, A, B, C, torch.randn(channels, generator=g)


@pytest.mark.parametrize(
    "chunk_size, stepwise, block", [(1, False, 0), (4, False, 0), (5, False, 0), (13, False, 0), (64, False, 0),
                                    (4, True, 0), (4, True, 1), (4, True, 5)]
)  # fmt: skip
def test_selective_scan_equals_the_recurrence(chunk_size, stepwise, block, monkeypatch):
    """Both forms of the scan (in chunks, and step by step as on a CPU, in one block or in blocks of 1 and 5 steps)
    against a plain loop, from zeros and from a given state, and selective_step one token at a time."""
    u, delta, A, B, C, D = selective_inputs()
    if block:
        monkeypatch.setattr(scan_module, "BLOCK_ELEMENTS", block * u.shape[0] * u.shape[1] * A.shape[1])
    expected, last = mamba_steps(u, delta, A, B, C, D)
    y, state = selective_scan(u, delta, A, B, C, D, chunk_size=chunk_size, stepwise=stepwise)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state, last, rtol=1e-5, atol=1e-5)
    # from a state, and one step at a time through selective_step
    start = torch.randn_like(last)
    expected, last = mamba_steps(u, delta, A, B, C, D, start)
    torch.testing.assert_close(
        selective_scan(u, delta, A, B, C, D, start, chunk_size, stepwise)[0], expected, atol=1e-5, rtol=1e-5
    )
    state, steps = start, []
    for k in range(u.shape[-1]):
        y_k, state = selective_step(u[..., k], delta[..., k], A, B[:, k], C[:, k], D, state)
        steps.append(y_k)
    torch.testing.assert_close(torch.stack(steps, -1), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state, last, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stepwise", [False, True])
def test_selective_scan_stays_finite_for_large_inputs(stepwise):
    """Delta B u up to about 1e13 with fast decays: the chunk's factors exp(c_t - m) and exp(m - c_s) stay inside
    float32's range, and the outputs are the float64 recurrence's to float32 precision (relative to their scale)."""
    u, delta, A, B, C, D = selective_inputs(length=150)
    for delta_scale, input_scale in ((50, 1e6), (1, 1e12)):
        inputs = (u, delta * delta_scale, A, B * input_scale, C, D)
        expected, _ = mamba_steps(*(t.double() for t in inputs))
        y, state = selective_scan(*inputs, chunk_size=4, stepwise=stepwise)
        assert torch.isfinite(y).all() and torch.isfinite(state).all()
        assert ((y.double() - expected).abs().max() / expected.abs().max()).item() < 1e-6


@pytest.mark.parametrize("scan, block", [(SelectiveScan, None), (StepwiseScan, None), (StepwiseScan, 3)])
@pytest.mark.parametrize("length", [1, 7, 9])
def test_the_scans_hand_written_gradient_is_the_gradient(length, scan, block, monkeypatch):
    """Each scan's backward (the reverse recurrence) against finite differences, in float64, for every input:
    Delta, A, Delta u, B, C and the entering state; the last state's gradient included. The stepwise scan also in
    blocks of 3 steps, the state and the adjoint carried across blocks."""
    g = torch.Generator().manual_seed(length)
    batch, channels, size = 2, 3, 2
    if block:
        monkeypatch.setattr(scan_module, "BLOCK_ELEMENTS", block * batch * channels * size)
    inputs = (
        torch.nn.functional.softplus(torch.randn(batch, channels, length, generator=g, dtype=torch.float64)),
        -torch.exp(torch.randn(channels, size, generator=g, dtype=torch.float64)),
        torch.randn(batch, channels, length, generator=g, dtype=torch.float64),
        torch.randn(batch, length, size, generator=g, dtype=torch.float64),
        torch.randn(batch, length, size, generator=g, dtype=torch.float64),
        torch.randn(batch, channels, size, generator=g, dtype=torch.float64),
    )
    inputs = tuple(t.requires_grad_() for t in inputs)
    assert torch.autograd.gradcheck(lambda *t: scan.apply(*t, 4), inputs, eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("chunk_size, stepwise", [(4, False), (16, False), (64, False), (4, True)])
def test_selective_scan_under_fast_decay_stays_finite_and_exact(chunk_size, stepwise):
    """Steps that decay the state by up to exp(-1000) (large Delta, large |A|): the chunked form's exp(-c) factors
    stay inside float64's range (each step's decay floored at exp(-600 / T_c)) and the outputs are the recurrence's."""
    u, delta, A, B, C, D = selective_inputs(length=150)
    delta = delta * 50  # Delta A down to about -1000 per step
    expected, last = mamba_steps(u, delta, A, B, C, D)
    y, state = selective_scan(u, delta, A, B, C, D, chunk_size=chunk_size, stepwise=stepwise)
    assert torch.isfinite(y).all() and torch.isfinite(state).all()
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state, last, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("s4d_init", ["lin", "inv", "real"])
def test_s4d_layer_convolution_equals_recurrent_mode(s4d_init):
    """The S4D layer (SSM, GELU, output GLU) over a sequence equals the layer fed one token at a time."""
    torch.manual_seed(0)
    config = SSMConfig(**S4D, s4d_init=s4d_init)
    mixer = S4DMixer(config)
    mixer.init_ssm_parameters(config)
    with torch.no_grad():
        mixer.log_dt.fill_(math.log(0.3))  # larger steps than the initial ones: the states change more per token
        u = torch.randn(2, 9, 16)
        whole, last, _ = mixer(u, return_state=True)
        state = torch.zeros_like(last)
        steps = []
        for t in range(9):
            y, state, _ = mixer(u[:, t : t + 1], ssm_state=state, return_state=True)
            steps.append(y)
    torch.testing.assert_close(torch.cat(steps, 1), whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state, last, rtol=1e-5, atol=1e-5)


def test_mamba_layer_scan_equals_recurrent_mode():
    """The Mamba block (projections, causal convolution, scan, gate) over a sequence equals the block fed one token
    at a time with its SSM state and convolution queue."""
    torch.manual_seed(0)
    config = SSMConfig(**MAMBA)
    mixer = MambaMixer(config)
    mixer.init_ssm_parameters(config)
    with torch.no_grad():
        u = torch.randn(2, 9, 16)
        whole, last, queue = mixer(u, return_state=True)
        assert queue.shape == (2, config.conv_kernel - 1, config.intermediate_size)
        ssm_state, conv_state = torch.zeros_like(last), None
        steps = []
        for t in range(9):
            y, ssm_state, conv_state = mixer(
                u[:, t : t + 1], ssm_state=ssm_state, conv_state=conv_state, return_state=True
            )
            steps.append(y)
    torch.testing.assert_close(torch.cat(steps, 1), whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ssm_state, last, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(conv_state, queue)


def test_s4d_initialisations():
    size = 8
    for s4d_init, expected in (
        ("lin", torch.complex(torch.full((4,), -0.5), math.pi * torch.arange(4.0))),
        ("inv", torch.complex(torch.full((4,), -0.5), size / math.pi * (size / (2 * torch.arange(4.0) + 1) - 1))),
        ("real", -torch.arange(1.0, 9.0)),
    ):
        model = SSMModel(SSMConfig(**dict(S4D, state_size=size), s4d_init=s4d_init))
        mixer = model.layers[0].mixer
        A = -torch.exp(mixer.A_log)
        if mixer.complex:
            A = torch.complex(A, mixer.A_imag)
        torch.testing.assert_close(A, expected.expand(16, -1), msg=s4d_init)
        dt = mixer.log_dt.exp()
        assert 0.001 <= dt.min() and dt.max() <= 0.1
    mamba = SSMModel(SSMConfig(**MAMBA)).layers[0].mixer
    torch.testing.assert_close(mamba.A_log.exp(), torch.arange(1.0, 5.0).expand(32, -1))
    dt = torch.nn.functional.softplus(mamba.dt_proj.bias)
    assert 0.001 - 1e-6 <= dt.min() and dt.max() <= 0.1 + 1e-6


# ------------------------------------------------------------------------------------------------- the state
@pytest.mark.parametrize("config", [S4D, MAMBA, MAMBA2], ids=["s4d", "mamba", "mamba2"])
def test_state_carried_in_chunks_equals_one_pass(config):
    """Left-padded rows, fed in chunks of 3, 1 and 4 tokens with the returned state: the same logits and final state
    as one pass. One row's first chunk is all padding, so its state must stay zero through it."""
    torch.manual_seed(0)
    model = SSMForCausalLM(SSMConfig(**config)).eval()
    ids = torch.randint(FIRST_WORD, 50, (3, 8))
    mask = torch.ones_like(ids)
    mask[1, :2], mask[2, :4] = 0, 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask, use_cache=True)
        state, logits, start = None, [], 0
        for size in (3, 1, 4):
            end = start + size
            out = model(ids[:, start:end], attention_mask=mask[:, :end], use_cache=True, **{CACHE_NAME: state})
            logits.append(out.logits)
            state, start = getattr(out, CACHE_NAME), end
    real = mask.bool()
    full_state = getattr(full, CACHE_NAME)
    torch.testing.assert_close(torch.cat(logits, 1)[real], full.logits[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.ssm_states, full_state.ssm_states, rtol=1e-5, atol=1e-5)
    if config["ssm_type"] != "s4d":
        torch.testing.assert_close(state.conv_states, full_state.conv_states)
    else:
        assert state.conv_states is None
    assert state.get_seq_length() == full_state.get_seq_length() == 8


@pytest.mark.parametrize("config", [S4D, MAMBA, MAMBA2], ids=["s4d", "mamba", "mamba2"])
def test_generation_cost_per_token_does_not_grow_with_the_context(config):
    """After the prompt each forward gets one token, and the state it returns has the same size at a context of 64
    and of 2048 tokens; one decoding step costs the same floating-point operations at both."""
    torch.manual_seed(0)
    model = SSMForCausalLM(SSMConfig(**config)).eval()
    seen, sizes = [], []
    model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    model.register_forward_hook(lambda m, args, out: sizes.append(tuple(getattr(out, CACHE_NAME).ssm_states.shape)))
    flops = {}
    for context in (64, 2048):
        seen.clear()
        prompt = torch.randint(FIRST_WORD, 50, (1, context))
        model.generate(prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=PAD)
        assert seen == [context, 1, 1, 1]
        with torch.no_grad():
            state = getattr(model(input_ids=prompt, use_cache=True), CACHE_NAME)
            with FlopCounterMode(display=False) as counter:
                model(input_ids=prompt[:, -1:], use_cache=True, **{CACHE_NAME: state})
        flops[context] = counter.get_total_flops()
    assert len(set(sizes)) == 1
    assert flops[64] == flops[2048] > 0


def test_beam_search_reorders_the_state(monkeypatch):
    """Beam search with the state equals beam search recomputing every prefix, on a run where generate did move
    states between beams (checked, so the test cannot pass vacuously)."""
    torch.manual_seed(0)
    model = SSMForCausalLM(SSMConfig(**MAMBA)).eval()
    moves = []
    reorder = SSMState.reorder_cache

    def recording_reorder(self, beam_idx):
        moves.append(not torch.equal(beam_idx.cpu(), torch.arange(len(beam_idx))))
        reorder(self, beam_idx)

    monkeypatch.setattr(SSMState, "reorder_cache", recording_reorder)
    ids = torch.randint(FIRST_WORD, 50, (2, 4))
    kwargs = dict(num_beams=4, num_return_sequences=4, do_sample=False, max_new_tokens=8, min_new_tokens=8)
    kwargs.update(pad_token_id=PAD, return_dict_in_generate=True, output_scores=True)
    cached = model.generate(ids, **kwargs)
    assert any(moves)
    recomputed = model.generate(ids, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(cached.sequences_scores, recomputed.sequences_scores)


@pytest.mark.parametrize("config", [S4D, MAMBA, MAMBA2], ids=["s4d", "mamba", "mamba2"])
def test_generate_continues_from_a_returned_state(config):
    torch.manual_seed(0)
    model = SSMForCausalLM(SSMConfig(**config)).eval()
    ids = torch.randint(FIRST_WORD, 50, (1, 6))
    kwargs = dict(do_sample=False, pad_token_id=PAD, eos_token_id=EOS, min_new_tokens=4, max_new_tokens=4)
    whole = model.generate(ids, **kwargs)
    with torch.no_grad():
        state = getattr(model(ids[:, :-1], use_cache=True), CACHE_NAME)
    assert torch.equal(model.generate(ids, **{CACHE_NAME: state}, **kwargs), whole)


@pytest.mark.parametrize("config", [S4D, MAMBA, MAMBA2], ids=["s4d", "mamba", "mamba2"])
def test_bf16_forward_and_generate(config):
    """Half precision: the SSM runs in float32 inside (there is no complex bfloat16), the outputs come back in
    bfloat16, and generation carries the float32 state."""
    torch.manual_seed(0)
    model = SSMForCausalLM(SSMConfig(**config)).eval().to(torch.bfloat16)
    ids = torch.randint(FIRST_WORD, 50, (2, 5))
    assert model(ids).logits.dtype == torch.bfloat16
    assert model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=PAD).shape == (2, 8)


def test_a_key_value_cache_is_refused():
    model = SSMModel(SSMConfig(**MAMBA)).eval()
    with pytest.raises(TypeError, match="SSMState"):
        model(torch.tensor([[5, 6]]), past_key_values=transformers.DynamicCache())


def test_ssm_state_batch_operations():
    hidden = torch.arange(2 * 3 * 1.0).view(2, 3, 1, 1)
    state = SSMState(hidden, hidden + 100, seen_tokens=4)
    state.reorder_cache(torch.tensor([2, 2, 0]))
    assert state.ssm_states[:, :, 0, 0].tolist() == [[2, 2, 0], [5, 5, 3]]
    assert state.conv_states[:, :, 0, 0].tolist() == [[102, 102, 100], [105, 105, 103]]
    state.batch_repeat_interleave(2)
    assert state.batch_size == 6 and state.get_seq_length() == 4
    s4d = SSMState(torch.zeros(2, 3, 4, 5))  # S4D has no convolution; the batch is read from the SSM states
    assert s4d.conv_states is None and s4d.batch_size == 3 and [c for _, c in s4d.layers()] == [None, None]


# ------------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("option, value", [("ssm_type", "s4"), ("s4d_init", "legs"), ("s4d_output", "gelu")])
def test_config_rejects_unknown_values_listing_the_allowed_ones(option, value):
    with pytest.raises(ValueError, match=rf"{option}='{value}' is not supported; allowed values: \["):
        SSMConfig(**dict(S4D, **{option: value}))


def test_config_refuses_the_other_blocks_options():
    with pytest.raises(ValueError, match="expand=4 does not apply to ssm_type='s4d'"):
        SSMConfig(**S4D, expand=4)
    with pytest.raises(ValueError, match="s4d_init='inv' does not apply to ssm_type='mamba'"):
        SSMConfig(**MAMBA, s4d_init="inv")
    with pytest.raises(ValueError, match="state_size=7 must be even"):
        SSMConfig(**dict(S4D, state_size=7))
    with pytest.raises(ValueError, match="time_step_min"):
        SSMConfig(**MAMBA, time_step_min=0.5)
    defaults = SSMConfig(ssm_type="s4d"), SSMConfig(ssm_type="mamba", hidden_size=40)
    assert [c.state_size for c in defaults] == [64, 16]
    assert defaults[1].time_step_rank == 3 and defaults[1].intermediate_size == 80
    assert SSMConfig(d_state=8, num_layers=3).state_size == 8
