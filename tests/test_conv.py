"""The causal convolution layer (the equation, causality, the one-step queue update equal to the full convolution),
and the WaveNet-style language model: the shared tester, plus its receptive field and the cost of a generated token."""

import pytest
import torch

from hf_seq import ConvConfig, ConvForCausalLM, ConvModel, ConvState, WindowState
from hf_seq.models.convolution import CausalConv1d
from hf_seq.models.state import QueueState
from tests.tester import FIRST_WORD, ModelTesterMixin

SHAPES = [  # kernel_size, dilation, groups, in_channels, out_channels
    (1, 1, 1, 3, 5),
    (2, 1, 1, 4, 6),
    (2, 4, 1, 4, 4),
    (3, 2, 2, 4, 6),
    (4, 1, 6, 6, 6),  # Mamba's short depthwise convolution
    (4, 3, 6, 6, 12),
]


def make_conv(kernel_size, dilation, groups, in_channels, out_channels, seed=0):
    torch.manual_seed(seed)
    return CausalConv1d(in_channels, out_channels, kernel_size, dilation=dilation, groups=groups)


@pytest.mark.parametrize("shape", SHAPES)
def test_conv_is_the_equation(shape):
    """y_t = sum_{i<k} W_i x_{t - i d} + b, with W_i = weight[..., k-1-i] and x_s = 0 before the start."""
    k, d, groups, c_in, c_out = shape
    conv = make_conv(*shape)
    x = torch.randn(2, 11, c_in)
    with torch.no_grad():
        y, _ = conv(x)
    per_group_in, per_group_out = c_in // groups, c_out // groups
    expected = conv.bias.expand(2, 11, c_out).clone()
    for t in range(11):
        for i in range(k):
            if t - i * d < 0:
                continue
            for g in range(groups):  # group g maps its slice of the input channels to its slice of the outputs
                ins = slice(g * per_group_in, (g + 1) * per_group_in)
                outs = slice(g * per_group_out, (g + 1) * per_group_out)
                w = conv.weight.detach()[outs, :, k - 1 - i]  # (C_out / g, C_in / g)
                expected[:, t, outs] += x[:, t - i * d, ins] @ w.T
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", SHAPES)
def test_step_by_step_equals_full_convolution(shape):
    conv = make_conv(*shape)
    x = torch.randn(3, 17, shape[3])
    with torch.no_grad():
        full, last_queue = conv(x)
        queue = conv.empty_queue(3, x.dtype, x.device)
        steps = []
        for t in range(x.shape[1]):
            y, queue = conv.step(x[:, t], queue)
            steps.append(y)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-6)
    torch.testing.assert_close(queue, last_queue)


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_from_a_queue_continues_the_sequence(shape):
    """A prefix, its queue, then the rest in one call (a prompt, then several tokens) == the whole sequence."""
    conv = make_conv(*shape)
    x = torch.randn(2, 13, shape[3])
    with torch.no_grad():
        full, last_queue = conv(x)
        start, queue = conv(x[:, :5])
        rest, rest_queue = conv(x[:, 5:], queue)
    torch.testing.assert_close(torch.cat([start, rest], 1), full, rtol=0, atol=1e-6)
    torch.testing.assert_close(rest_queue, last_queue)


@pytest.mark.parametrize("shape", SHAPES)
def test_output_t_reads_exactly_inputs_t_minus_i_d(shape):
    k, d, _, c_in, _ = shape
    conv = make_conv(*shape)
    x = torch.randn(1, 20, c_in)
    with torch.no_grad():
        base, _ = conv(x)
        changed = x.clone()
        changed[0, 6] += 1.0
        moved = ~torch.isclose(conv(changed)[0], base, atol=1e-7).all(-1)[0]
    assert moved.nonzero().flatten().tolist() == [6 + i * d for i in range(k)]


def test_queue_of_the_wrong_size_is_refused():
    conv = make_conv(3, 2, 1, 4, 4)
    with pytest.raises(ValueError, match="dilation"):
        conv(torch.randn(1, 5, 4), torch.zeros(1, 3, 4))


# ---------------------------------------------------------------- the language model

NO_DROPOUT = dict(dropout=0.0)


class TestConv(ModelTesterMixin):
    family = "hf_seq_conv"
    # dilations 1, 2, 4, 1, 2, 4 with k = 2: R = 15 tokens, more than the tester's sequences of 7
    config_kwargs = dict(
        hidden_size=12,
        kernel_size=2,
        dilation_cycle=3,
        num_blocks=2,
        skip_channels=10,
        dropout=0.1,
        tie_word_embeddings=True,
        initializer_range=0.3,  # logits far enough from uniform that a changed label moves the loss
    )
    no_dropout = NO_DROPOUT
    has_position_limit = False  # shift-invariant: any length, each position reading its last R tokens

    def make_model(self, cls, seed=0, **overrides):
        return with_random_biases(super().make_model(cls, seed, **overrides))


class TestConvWideKernel(TestConv):
    """k = 3, one block, untied head, receptive field 2 * (1 + 2 + 4 + 8) + 1 = 31."""

    config_overrides = dict(kernel_size=3, dilation_cycle=4, num_blocks=1, tie_word_embeddings=False)
    expensive_checks = False


def with_random_biases(model):
    """Biases as a trained model has them. Initialised at zero, a gate at a padded position whose input is zero would
    read tanh(0) = 0 whether or not the model zeroes padding at every layer, and the padding checks could not fail."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0.0, model.config.initializer_range)
    return model


def tiny_model(**overrides):
    torch.manual_seed(0)
    kwargs = dict(
        vocab_size=40, hidden_size=8, kernel_size=2, dilation_cycle=3, num_blocks=2, skip_channels=6,
        initializer_range=0.5,
    )  # fmt: skip
    return with_random_biases(ConvForCausalLM(ConvConfig(**{**kwargs, **overrides})).eval())


def random_ids(length, seed=1, batch_size=1):
    return torch.randint(FIRST_WORD, 40, (batch_size, length), generator=torch.Generator().manual_seed(seed))


def test_receptive_field_is_stated_and_derived():
    config = ConvConfig(kernel_size=2, dilation_cycle=10, num_blocks=3)
    assert config.dilations[:11] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1]
    assert config.receptive_field == 3 * 1023 + 1 and config.num_hidden_layers == 30
    assert ConvConfig(kernel_size=3, dilation_cycle=4, num_blocks=1).receptive_field == 2 * 15 + 1
    assert ConvConfig(kernel_size=1).receptive_field == 1
    with pytest.raises(ValueError, match="dilation_cycle"):
        ConvConfig(num_hidden_layers=4)
    with pytest.raises(ValueError, match="kernel_size"):
        ConvConfig(kernel_size=0)


@pytest.mark.parametrize("overrides", [{}, {"kernel_size": 3, "num_blocks": 1}])
def test_a_position_reads_exactly_the_last_R_tokens(overrides):
    """Changing token p moves the outputs at p, ..., p + R - 1 and no other: one within R changes the prediction,
    one further back does not change it at all. (Wide enough that no change dies in both ReLUs: a ReLU that stays
    off can hide one, so with 6 skip channels about one position in 64 would look unmoved.)"""
    model = tiny_model(hidden_size=16, skip_channels=32, **overrides)
    R = model.config.receptive_field
    ids = random_ids(2 * R + 5)
    with torch.no_grad():
        base = model(ids).logits
        for p in (0, 3, R):
            other = ids.clone()
            other[0, p] = FIRST_WORD + (ids[0, p] + 1 - FIRST_WORD) % (40 - FIRST_WORD)
            moved = (model(other).logits != base).any(-1)[0]
            assert moved.nonzero().flatten().tolist() == list(range(p, min(p + R, ids.shape[1]))), p


def test_generation_past_the_receptive_field_equals_recomputation():
    """A prompt longer than R: the queues keep all the model reads, so cached greedy and beam search equal the
    uncached runs, and prompts that differ only before their last R tokens continue alike."""
    model = tiny_model()
    R = model.config.receptive_field
    prompt = random_ids(2 * R, batch_size=2)
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, pad_token_id=0)
    with torch.no_grad():
        for extra in ({"do_sample": False}, {"do_sample": False, "num_beams": 3}):
            cached = model.generate(prompt, **kwargs, **extra)
            assert torch.equal(cached, model.generate(prompt, use_cache=False, **kwargs, **extra)), extra
        other = prompt.clone()
        other[:, : R - 1] = FIRST_WORD  # everything but the last R + 1 tokens
        greedy = model.generate(prompt, do_sample=False, **kwargs)
        assert torch.equal(model.generate(other, do_sample=False, **kwargs)[:, 2 * R :], greedy[:, 2 * R :])


def test_state_holds_each_layers_last_inputs():
    model = tiny_model()
    ids = random_ids(20, batch_size=2)
    with torch.no_grad():
        out = model(ids, use_cache=True)
    state = out.past_key_values
    assert isinstance(state, ConvState) and state.get_seq_length() == 20
    queues = state.conv_states
    assert [q.shape for q in queues] == [(2, layer.dilated_conv.queue_size, 8) for layer in model.model.layers]
    assert sum(q.shape[1] for q in queues) == model.config.receptive_field - 1
    # the first layer's queue (dilation 1, k = 2) is the last token's embedding
    torch.testing.assert_close(queues[0], model.model.embed_tokens(ids[:, -1:]))
    state.reorder_cache(torch.tensor([1, 1]))
    assert all(torch.equal(q[0], q[1]) for q in state.conv_states) and state.batch_size == 2


def test_queue_state_batch_operations_cover_every_layers_queue():
    """One QueueState serves the window and the conv LM; its per-layer queues move together in beam search."""
    first = torch.arange(3.0).view(3, 1, 1).requires_grad_()
    state = QueueState((first * 1, torch.arange(3.0).view(3, 1, 1).expand(3, 2, 1) + 10), seen_tokens=5)
    assert ConvState is QueueState and WindowState is QueueState
    state.reorder_cache(torch.tensor([2, 2, 0]))
    assert [q[:, 0, 0].tolist() for q in state.conv_states] == [[2, 2, 0], [12, 12, 10]]
    state.batch_repeat_interleave(2)
    assert state.batch_size == 6 and state.conv_states[1].shape == (6, 2, 1) and state.get_seq_length() == 5
    detached = state.detach()
    assert state.conv_states[0].requires_grad and not detached.conv_states[0].requires_grad


def test_a_call_continues_from_the_state_under_either_name():
    """transformers >= 5.24 names the cache argument `cache`; older versions `past_key_values`."""
    model = tiny_model()
    ids = random_ids(12)
    with torch.no_grad():
        full = model(ids).logits
        state = model(ids[:, :8], use_cache=True).past_key_values
        for name in ("past_key_values", "cache"):
            rest = model(ids[:, 8:], use_cache=True, **{name: state}).logits
            torch.testing.assert_close(rest, full[:, 8:], rtol=1e-5, atol=1e-6, msg=name)


def test_one_token_steps_equal_the_full_forward():
    model = tiny_model()
    ids = random_ids(25, batch_size=2)
    with torch.no_grad():
        full = model(ids).logits
        state, steps = None, []
        for t in range(ids.shape[1]):
            out = model(ids[:, t : t + 1], past_key_values=state, use_cache=True)
            steps.append(out.logits)
            state = out.past_key_values
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-6)


class ConvPositions:
    """Within the block, counts the positions every CausalConv1d of `model` computes, summed over its calls."""

    def __init__(self, model):
        self.model, self.count = model, 0

    def __enter__(self):
        convs = [m for m in self.model.modules() if isinstance(m, CausalConv1d)]
        self.handles = [conv.register_forward_hook(self.hook) for conv in convs]
        return self

    def hook(self, module, args, output):
        self.count += output[0].shape[1]  # (y, next_queue)

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


def test_a_generated_token_costs_one_step_per_layer_whatever_the_context():
    """Fast WaveNet: after the prompt, each new token is one position through each layer's convolution, for a short
    prompt and for one far longer than R; without the cache the cost grows with the context."""
    model = tiny_model()
    layers, new = model.config.num_hidden_layers, 5
    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0)
    for length in (4, 3 * model.config.receptive_field):
        with ConvPositions(model) as positions, torch.no_grad():
            model.generate(random_ids(length), **kwargs)
        # the prompt once, then one position per layer for each token after the first
        assert positions.count == layers * (length + new - 1), length
    with ConvPositions(model) as positions, torch.no_grad():
        model.generate(random_ids(4), use_cache=False, **kwargs)
    assert positions.count == layers * sum(4 + i for i in range(new))


def test_foreign_or_mismatched_state_is_refused():
    model = tiny_model()
    with pytest.raises(TypeError, match="QueueState"):
        model(torch.tensor([[4, 5]]), past_key_values=(torch.zeros(1),))
    other = tiny_model(num_blocks=1)
    with torch.no_grad():
        state = other(torch.tensor([[4, 5]]), use_cache=True).past_key_values
    with pytest.raises(ValueError, match="receptive field"):
        model(torch.tensor([[6]]), past_key_values=state)


def test_base_model_returns_every_layers_input():
    model = ConvModel(tiny_model().config).eval()
    with torch.no_grad():
        out = model(random_ids(9), output_hidden_states=True)
    assert len(out.hidden_states) == model.config.num_hidden_layers + 1
    assert out.hidden_states[-1] is out.last_hidden_state
