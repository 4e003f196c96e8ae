"""Mamba-2 (`ssm_type="mamba2"`): the three forms of the SSD layer (models/ssd.py) compute one function, the layer's
sequence mode equals its one-token mode, its attention matrix is what it applies, and its config refuses what does
not fit. The shared tester runs on it from tests/test_ssm.py (`TestSSMMamba2`); transformers parity is in
tests/test_convert.py."""

import math

import pytest
import torch

from hf_seq import SSMConfig, SSMForCausalLM, SSMModel
from hf_seq.models.modeling_ssm import Mamba2Mixer
from hf_seq.models.ssd import segment_sum, ssd_chunked, ssd_matrix, ssd_quadratic, ssd_reference
from hf_seq.models.utils import CACHE_NAME
from tests.tester import FIRST_WORD, PAD

MAMBA2 = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, ssm_type="mamba2", head_dim=8, n_groups=2)
MAMBA2.update(state_size=4, chunk_size=4, initializer_range=0.3)


def ssd_inputs(seed=0, batch=2, length=13, heads=4, head_dim=3, groups=2, size=5, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    x, dt = randn(batch, length, heads, head_dim), torch.nn.functional.softplus(randn(batch, length, heads))
    A = -torch.exp(randn(heads))
    B, C = randn(batch, length, groups, size), randn(batch, length, groups, size)
    return x, dt, A, B, C, randn(heads), randn(batch, heads, head_dim, size)


# ------------------------------------------------------------------------------------------- the three forms
def test_the_reference_is_the_recurrence_of_each_head_with_its_groups_b_and_c():
    """H_t = exp(dt_t A_h) H_{t-1} + dt_t x_t B_t^T, y_t = H_t C_t + D_h x_t, written per head: head h reads the B
    and C of group h // (heads / groups)."""
    x, dt, A, B, C, D, start = ssd_inputs()
    heads, groups = A.shape[0], B.shape[2]
    y, last = ssd_reference(x, dt, A, B, C, D, start)
    for h in range(heads):
        group, state = h // (heads // groups), start[:, h]
        for t in range(x.shape[1]):
            decay, write = torch.exp(dt[:, t, h] * A[h]), dt[:, t, h, None] * x[:, t, h]  # (b,), (b, p)
            state = decay[:, None, None] * state + write[:, :, None] * B[:, t, group, None, :]
            expected = state @ C[:, t, group, :, None]
            torch.testing.assert_close(y[:, t, h], expected[..., 0] + D[h] * x[:, t, h])
        torch.testing.assert_close(last[:, h], state)


def test_the_decay_mask_is_one_semiseparable():
    """exp(segment_sum(a))[t, s] = exp(a_{s+1} + ... + a_t) below the diagonal, 1 on it, 0 above."""
    a = -torch.rand(2, 6, dtype=torch.float64)
    L = torch.exp(segment_sum(a))
    for t in range(6):
        for s in range(6):
            expected = torch.exp(a[:, s + 1 : t + 1].sum(-1)) if s <= t else torch.zeros(2, dtype=a.dtype)
            torch.testing.assert_close(L[:, t, s], expected)


@pytest.mark.parametrize("with_state", [False, True], ids=["from-zeros", "from-a-state"])
@pytest.mark.parametrize("chunk_size", [1, 4, 5, 13, 16])
def test_chunked_equals_quadratic_equals_the_recurrence(chunk_size, with_state):
    """13 steps in chunks of 1, 4, 5 (padded chunks: 13 is a multiple of neither), 13 and 16 (one padded chunk), from
    zeros and from a given state: the same outputs and the same final state in all three forms."""
    x, dt, A, B, C, D, start = ssd_inputs()
    start = start if with_state else None
    expected, last = ssd_reference(x, dt, A, B, C, D, start)
    y, state = ssd_chunked(x, dt, A, B, C, D, start, chunk_size)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(state, last)
    y, state, matrix = ssd_quadratic(x, dt, A, B, C, D, start)
    torch.testing.assert_close(y, expected)
    torch.testing.assert_close(state, last)
    assert matrix.shape == (2, 4, 13, 13) and torch.equal(matrix.triu(1), torch.zeros_like(matrix))


def test_chunked_gradients_are_the_recurrences():
    """Autograd through the chunked form gives the gradients of the plain loop, for every input and the state."""
    inputs = [t.requires_grad_() for t in ssd_inputs(length=9)]
    weights = torch.randn(2, 9, 4, 3, dtype=torch.float64)
    grads = []
    for form in (lambda *t: ssd_reference(*t), lambda *t: ssd_chunked(*t, chunk_size=4)):
        y, state = form(*inputs)
        grads.append(torch.autograd.grad((y * weights).sum() + state.sum(), inputs))
    for name, expected, got in zip("x dt A B C D state".split(), *grads):
        torch.testing.assert_close(got, expected, msg=name)


def test_chunked_stays_finite_under_fast_decay():
    """Steps that decay a head by up to exp(-500) at once: every exponent in the chunked form is <= 0 and the
    outputs are the recurrence's, in float32."""
    x, dt, A, B, C, D, start = ssd_inputs(length=40, dtype=torch.float32)
    dt = dt * 100
    expected, last = ssd_reference(*(t.double() for t in (x, dt, A, B, C, D, start)))
    y, state = ssd_chunked(x, dt, A, B, C, D, start, chunk_size=16)
    assert torch.isfinite(y).all() and torch.isfinite(state).all()
    torch.testing.assert_close(y.double(), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(state.double(), last, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------------------------- the layer
def make_mixer(**overrides):
    torch.manual_seed(0)
    config = SSMConfig(**{**MAMBA2, **overrides})
    mixer = Mamba2Mixer(config)
    mixer.init_ssm_parameters(config)
    with torch.no_grad():
        mixer.dt_bias.add_(2.0)  # larger steps than the initial ones: the states change more per token
        mixer.norm.weight.normal_(1.0, 0.3)
    return mixer, config


@pytest.mark.parametrize("overrides", [{}, dict(norm_before_gate=True, chunk_size=5)], ids=["default", "norm-first"])
def test_mixer_sequence_equals_one_token_at_a_time(overrides):
    """The block (projections, convolution over x, B and C, chunked SSD, gated norm) over 11 tokens equals the block
    fed one token at a time with its state and queue (ssd_step), outputs and final states."""
    mixer, config = make_mixer(**overrides)
    u = torch.randn(2, 11, 16)
    with torch.no_grad():
        whole, last, queue = mixer(u, return_state=True)
        assert last.shape == (2, 4, 8, 4) and queue.shape == (2, config.conv_kernel - 1, 32 + 2 * 2 * 4)
        ssm_state, conv_state, steps = torch.zeros_like(last), None, []
        for t in range(11):
            y, ssm_state, conv_state = mixer(u[:, t : t + 1], ssm_state=ssm_state, conv_state=conv_state)
            steps.append(y)
    torch.testing.assert_close(torch.cat(steps, 1), whole, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ssm_state, last, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(conv_state, queue)


def test_attention_is_the_matrix_the_layer_applies():
    """y = M x per head: the attention matrix applied to the layer's x gives the SSM's output (D on the diagonal),
    and the gate, norm and out_proj of that give the mixer's output. Causal, and different per head."""
    mixer, _ = make_mixer()
    u = torch.randn(2, 11, 16)
    with torch.no_grad():
        matrix = mixer.attention(u)
        assert matrix.shape == (2, 4, 11, 11)
        assert torch.equal(matrix.triu(1), torch.zeros_like(matrix))
        assert not torch.allclose(matrix[:, 0], matrix[:, 1])
        z, x, dt, B, C, _ = mixer.ssm_inputs(u)
        y = torch.einsum("bhts,bshp->bthp", matrix, x)
        expected, _ = ssd_chunked(x, dt, -torch.exp(mixer.A_log), B, C, mixer.D, chunk_size=4)
        torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
        output, _, _ = mixer(u)
        torch.testing.assert_close(mixer.out_proj(mixer.norm(y.flatten(2), z)), output, rtol=1e-5, atol=1e-5)
        without_skip = mixer.attention(u, skip=False)
        torch.testing.assert_close(
            matrix - without_skip, torch.diag_embed(mixer.D[:, None].expand(4, 11)).expand_as(matrix)
        )
        torch.testing.assert_close(without_skip, ssd_matrix(dt, -torch.exp(mixer.A_log), B, C))


def test_padding_leaves_the_state_as_it_was():
    """A padded position gets Delta = 0 and x = B = C = 0: the state after [a, pad, pad, b] is the state after [a, b]
    (the convolution's queue is another matter: it holds the zeros)."""
    mixer, _ = make_mixer()
    u = torch.randn(1, 4, 16)
    with torch.no_grad():
        _, padded, _ = mixer(u, mask=torch.tensor([[1.0, 0, 0, 1]]))
        _, first, queue = mixer(u[:, :1])
        _, _, queue = mixer(torch.zeros(1, 2, 16), mask=torch.zeros(1, 2), ssm_state=first, conv_state=queue)
        _, expected, _ = mixer(u[:, 3:], ssm_state=first, conv_state=queue)
    torch.testing.assert_close(padded, expected, rtol=1e-5, atol=1e-6)


def test_forward_equals_step_by_step_decoding_and_generate_cache_equals_recompute():
    """The model over 11 tokens (chunks of 4: 4, 4, 3) equals feeding them one at a time with the returned state;
    greedy generation with the state equals generation recomputing every prefix."""
    torch.manual_seed(0)
    model = SSMForCausalLM(SSMConfig(**MAMBA2)).eval()
    ids = torch.randint(FIRST_WORD, 50, (2, 11))
    with torch.no_grad():
        full = model(ids).logits
        state, logits = None, []
        for t in range(11):
            out = model(ids[:, t : t + 1], use_cache=True, **{CACHE_NAME: state})
            state = getattr(out, CACHE_NAME)
            logits.append(out.logits)
    torch.testing.assert_close(torch.cat(logits, 1), full, rtol=1e-5, atol=1e-5)
    assert state.ssm_states.shape == (2, 2, 4, 8, 4)  # layers, batch, heads, head_dim, state_size
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=PAD)
    cached = model.generate(ids, **kwargs)
    assert len(set(cached[:, 11:].flatten().tolist())) > 3
    assert torch.equal(cached, model.generate(ids, use_cache=False, **kwargs))


def test_initialisation():
    """A_h = -h per head, D = 1, softplus(dt_bias) in [time_step_min, time_step_max], the gated norm's weight 1."""
    mixer = SSMModel(SSMConfig(**MAMBA2)).layers[0].mixer
    torch.testing.assert_close(mixer.A_log.exp(), torch.arange(1.0, 5.0))
    assert torch.equal(mixer.D, torch.ones(4)) and torch.equal(mixer.norm.weight, torch.ones(32))
    dt = torch.nn.functional.softplus(mixer.dt_bias)
    assert 0.001 - 1e-6 <= dt.min() and dt.max() <= 0.1 + 1e-6
    assert mixer.in_proj.weight.shape == (2 * 32 + 2 * 2 * 4 + 4, 16)  # z, x, B, C, Delta


def test_time_step_limit_clamps_delta():
    mixer, _ = make_mixer(time_step_limit=(0.05, 0.2))
    _, _, dt, _, _, _ = mixer.ssm_inputs(torch.randn(2, 5, 16) * 10)
    assert dt.min() >= 0.05 and dt.max() <= 0.2 and (dt == 0.2).any()


# ------------------------------------------------------------------------------------------------- config
def test_config_defaults_and_derived_heads():
    config = SSMConfig(ssm_type="mamba2", hidden_size=64)
    assert (config.num_heads, config.head_dim, config.n_groups, config.state_size) == (2, 64, 1, 128)
    assert config.intermediate_size == 128 and config.norm_type == "rmsnorm"
    assert SSMConfig(**MAMBA2).num_heads == 4
    assert SSMConfig(**MAMBA2, time_step_limit=[0.0, math.inf]).time_step_limit == (0.0, math.inf)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(head_dim=12), r"head_dim=12 does not divide the inner width expand \* hidden_size = 32"),
        (dict(num_heads=3), r"num_heads=3 times head_dim=8 must equal expand \* hidden_size = 2 \* 16 = 32"),
        (dict(n_groups=3), r"n_groups=3 must divide num_heads=4.*Allowed: \[1, 2, 4\]"),
        (dict(chunk_size=0), "chunk_size must be a positive integer, got 0"),
        (dict(time_step_limit=(0.2, 0.1)), r"time_step_limit=\(0.2, 0.1\) must be \(low, high\)"),
        (dict(time_step_rank=3), "time_step_rank=3 does not apply to ssm_type='mamba2'"),
        (dict(scan_chunk_size=2), "scan_chunk_size=2 does not apply to ssm_type='mamba2'"),
    ],
)
def test_config_refusals_name_the_key_the_value_and_what_is_allowed(overrides, message):
    with pytest.raises(ValueError, match=message):
        SSMConfig(**{**MAMBA2, **overrides})


@pytest.mark.parametrize("ssm_type", ["mamba", "s4d"])
@pytest.mark.parametrize("option, value", [("n_groups", 2), ("head_dim", 8), ("norm_before_gate", True)])
def test_mamba2_options_are_refused_for_the_other_blocks(ssm_type, option, value):
    with pytest.raises(ValueError, match=f"{option}={value!r} does not apply to ssm_type='{ssm_type}'"):
        SSMConfig(ssm_type=ssm_type, hidden_size=16, **{option: value})
