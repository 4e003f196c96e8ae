"""The causal convolution layer: the equation, causality, and the one-step queue update equal to the full
convolution."""

import pytest
import torch

from hf_seq.models.convolution import CausalConv1d

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
        y = conv(x)
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
        full = conv(x)
        queue = conv.empty_queue(3, x.dtype, x.device)
        steps = []
        for t in range(x.shape[1]):
            y, queue = conv.step(x[:, t], queue)
            steps.append(y)
    torch.testing.assert_close(torch.stack(steps, 1), full, rtol=0, atol=1e-6)
    torch.testing.assert_close(queue, conv.queue_after(x))


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_from_a_queue_continues_the_sequence(shape):
    """A prefix, its queue, then the rest in one call (a prompt, then several tokens) == the whole sequence."""
    conv = make_conv(*shape)
    x = torch.randn(2, 13, shape[3])
    with torch.no_grad():
        full = conv(x)
        queue = conv.queue_after(x[:, :5])
        rest = conv(x[:, 5:], queue)
    torch.testing.assert_close(torch.cat([conv(x[:, :5]), rest], 1), full, rtol=0, atol=1e-6)
    torch.testing.assert_close(conv.queue_after(x[:, 5:], queue), conv.queue_after(x))


@pytest.mark.parametrize("shape", SHAPES)
def test_output_t_reads_exactly_inputs_t_minus_i_d(shape):
    k, d, _, c_in, _ = shape
    conv = make_conv(*shape)
    x = torch.randn(1, 20, c_in)
    with torch.no_grad():
        base = conv(x)
        changed = x.clone()
        changed[0, 6] += 1.0
        moved = ~torch.isclose(conv(changed), base, atol=1e-7).all(-1)[0]
    assert moved.nonzero().flatten().tolist() == [6 + i * d for i in range(k)]


def test_queue_of_the_wrong_size_is_refused():
    conv = make_conv(3, 2, 1, 4, 4)
    with pytest.raises(ValueError, match="dilation"):
        conv(torch.randn(1, 5, 4), torch.zeros(1, 3, 4))
