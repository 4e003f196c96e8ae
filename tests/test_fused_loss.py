"""The fused language-model loss (models/losses.py): the same loss and gradients as cross-entropy of the full logits,
for the leaf function and for every language model that takes it in training (`config.fused_loss`)."""

import pytest
import torch
import torch.nn.functional as F

from hf_seq.models.losses import linear_cross_entropy
from hf_seq.registry import family as get_family

PAD, BOS, EOS = 0, 1, 2
VOCAB = 53


# ---------------------------------------------------------------- the leaf function


def reference_loss(hidden, weight, bias, labels, label_smoothing=0.0, num_items_in_batch=None):
    logits = F.linear(hidden, weight, bias)
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = F.cross_entropy(logits, labels, ignore_index=-100, label_smoothing=label_smoothing, reduction=reduction)
    return loss if num_items_in_batch is None else loss / num_items_in_batch


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("num_items_in_batch", [None, 61, "tensor"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("chunk_size", [None, 1, 10])
def test_linear_cross_entropy_equals_cross_entropy_of_the_logits(
    label_smoothing, num_items_in_batch, with_bias, chunk_size
):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, 8, generator=g, requires_grad=True)
    weight = torch.randn(VOCAB, 8, generator=g, requires_grad=True)
    bias = torch.randn(VOCAB, generator=g, requires_grad=True) if with_bias else None
    labels = torch.randint(0, VOCAB, (37,), generator=g)
    labels[::4] = -100
    if num_items_in_batch == "tensor":
        num_items_in_batch = torch.tensor(45)
    inputs = [t for t in (hidden, weight, bias) if t is not None]

    expected = reference_loss(hidden, weight, bias, labels, label_smoothing, num_items_in_batch)
    expected_grads = torch.autograd.grad(2.5 * expected, inputs)
    loss = linear_cross_entropy(
        hidden,
        weight,
        bias,
        labels,
        label_smoothing=label_smoothing,
        num_items_in_batch=num_items_in_batch,
        chunk_size=chunk_size,
    )
    grads = torch.autograd.grad(2.5 * loss, inputs)  # the incoming gradient scales the precomputed ones

    torch.testing.assert_close(loss, expected)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want)


def test_linear_cross_entropy_without_scored_labels_is_nan_with_zero_gradients():
    hidden = torch.randn(4, 8, requires_grad=True)
    weight = torch.randn(VOCAB, 8)
    loss = linear_cross_entropy(hidden, weight, None, torch.full((4,), -100))
    assert loss.isnan()  # as F.cross_entropy's mean over no labels
    loss.backward()
    assert torch.equal(hidden.grad, torch.zeros_like(hidden))


def test_linear_cross_entropy_frozen_weight_and_bf16_autocast():
    g = torch.Generator().manual_seed(1)
    hidden = torch.randn(20, 8, generator=g, requires_grad=True)
    weight = torch.randn(VOCAB, 8, generator=g)  # frozen: no gradient asked for
    labels = torch.randint(0, VOCAB, (20,), generator=g)
    loss = linear_cross_entropy(hidden, weight, None, labels, chunk_size=6)
    loss.backward()
    assert weight.grad is None
    torch.testing.assert_close(loss, reference_loss(hidden, weight, None, labels))

    weight.requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = linear_cross_entropy(hidden, weight, None, labels, chunk_size=6)
        unfused = F.cross_entropy(F.linear(hidden, weight).float(), labels)
    assert fused.dtype == torch.float32
    torch.testing.assert_close(fused, unfused, rtol=2e-2, atol=2e-2)
    grads = torch.autograd.grad(fused, [hidden, weight])
    expected = torch.autograd.grad(unfused, [hidden, weight])
    assert grads[0].dtype == hidden.dtype and grads[1].dtype == weight.dtype
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=5e-2, atol=5e-3)


# ---------------------------------------------------------------- every language model

# (family, tiny config without dropout, encoder-decoder)
CASES = {
    "gpt": ("hf_seq_gpt", dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, dropout=0.0), False),
    "gpt_untied_post_ln": (
        "hf_seq_gpt",
        dict(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            dropout=0.0,
            tie_word_embeddings=False,
            norm_position="post",
        ),
        False,
    ),
    "gpt_moe": (
        "hf_seq_gpt",
        dict(
            hidden_size=16,
            num_hidden_layers=2,
            num_attention_heads=2,
            dropout=0.0,
            num_local_experts=3,
            num_experts_per_tok=2,
            router_aux_loss_coef=0.1,
        ),
        False,
    ),
    # embedding_size != hidden_size: the tied head is reached through a projection
    "rnn_lstm": (
        "hf_seq_rnn",
        dict(
            hidden_size=16,
            embedding_size=12,
            num_hidden_layers=2,
            cell_type="lstm",
            dropout=0.0,
            embedding_dropout=0.0,
            hidden_dropout=0.0,
            output_dropout=0.0,
            initializer_range=0.3,
        ),
        False,
    ),
    "conv": (
        "hf_seq_conv",
        dict(
            hidden_size=12,
            kernel_size=2,
            dilation_cycle=3,
            num_blocks=1,
            skip_channels=10,
            dropout=0.0,
            tie_word_embeddings=True,
            initializer_range=0.3,
        ),
        False,
    ),
    "ssm_mamba": (
        "hf_seq_ssm",
        dict(
            hidden_size=16,
            num_hidden_layers=2,
            ssm_type="mamba",
            state_size=4,
            scan_chunk_size=3,
            initializer_range=0.3,
        ),
        False,
    ),
    "ssm_s4d": (
        "hf_seq_ssm",
        dict(hidden_size=16, num_hidden_layers=2, ssm_type="s4d", state_size=8, initializer_range=0.3),
        False,
    ),
    # direct connections: b + U P a + W x, the fused loss reads [P a; x] with weights [U, W]
    "window_direct": (
        "hf_seq_window",
        dict(
            context_size=3,
            embedding_size=8,
            hidden_size=12,
            direct_connections=True,
            tie_word_embeddings=True,
            initializer_range=0.3,
        ),
        False,
    ),
    "window": ("hf_seq_window", dict(context_size=2, embedding_size=8, hidden_size=8, initializer_range=0.3), False),
    "bahdanau": (
        "hf_seq_bahdanau",
        dict(
            hidden_size=16,
            embedding_size=12,
            attention_size=10,
            deep_output_size=8,
            initializer_range=0.3,
            label_smoothing=0.1,
        ),
        True,
    ),
    "transformer": (
        "hf_seq_transformer",
        dict(
            hidden_size=16,
            encoder_layers=1,
            decoder_layers=2,
            num_attention_heads=2,
            intermediate_size=32,
            dropout=0.0,
            output_bias=True,
            label_smoothing=0.1,
        ),
        True,
    ),
}


def make_model(case: str, **overrides):
    name, kwargs, _ = CASES[case]
    fam = get_family(name)
    auto = "AutoModelForSeq2SeqLM" if CASES[case][2] else "AutoModelForCausalLM"
    config = fam.config_class(
        vocab_size=VOCAB, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, **kwargs, **overrides
    )
    torch.manual_seed(0)
    return fam.model_class(auto)(config)


def make_inputs(case: str, batch_size=3, seq_len=9) -> dict:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, VOCAB, (batch_size, seq_len), generator=g)
    labels = ids.clone()
    labels[0, :4] = -100
    labels[2, -2:] = -100
    inputs = {"input_ids": ids, "labels": labels}
    if CASES[case][2]:
        inputs["input_ids"] = torch.randint(3, VOCAB, (batch_size, seq_len + 2), generator=g)
        inputs["labels"] = labels
    return inputs


def cross_entropy_of_logits(model, logits, labels, num_items_in_batch=None):
    """The loss written out from the full logits, independently of the model's own loss code."""
    config = model.config
    if not config.is_encoder_decoder:
        logits, labels = logits[:, :-1], labels[:, 1:]
    smoothing = getattr(config, "label_smoothing", 0.0)
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), label_smoothing=smoothing, reduction=reduction
    )
    return loss if num_items_in_batch is None else loss / num_items_in_batch


def loss_and_grads(model, inputs):
    model.zero_grad()
    out = model(**inputs)
    out.loss.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("num_items_in_batch", [None, 40])
@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_loss_and_gradients_equal_the_unfused(case, num_items_in_batch):
    inputs = make_inputs(case)
    if num_items_in_batch is not None:
        inputs["num_items_in_batch"] = torch.tensor(num_items_in_batch)
    unfused_model = make_model(case, fused_loss=False).train()
    fused_model = make_model(case).train()
    assert fused_model.config.fused_loss  # the default

    unfused, expected_grads = loss_and_grads(unfused_model, inputs)
    fused, grads = loss_and_grads(fused_model, inputs)

    assert unfused.logits is not None and fused.logits is None
    expected = cross_entropy_of_logits(unfused_model, unfused.logits, inputs["labels"], num_items_in_batch)
    if getattr(unfused, "aux_loss", None) is not None:  # the mixture's load-balancing term, added after
        torch.testing.assert_close(fused.aux_loss, unfused.aux_loss)
        share = 1.0
        if num_items_in_batch is not None:
            share = inputs["labels"][:, 1:].ne(-100).sum() / num_items_in_batch
        expected = expected + unfused_model.config.router_aux_loss_coef * unfused.aux_loss * share
    torch.testing.assert_close(unfused.loss, expected)
    torch.testing.assert_close(fused.loss, expected)
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[name], rtol=1e-5, atol=1e-6, msg=f"{case}: {name}")


@pytest.mark.parametrize("case", ["gpt", "rnn_lstm", "transformer"])
def test_logits_are_kept_outside_the_fused_path(case):
    model = make_model(case)
    inputs = make_inputs(case)
    with torch.no_grad():
        assert model.train()(**inputs).logits is not None  # no gradients: evaluation inside a training loop
        evaluated = model.eval()(**inputs)
    assert evaluated.logits is not None and evaluated.loss is not None
    model.train()
    unlabelled = {k: v for k, v in inputs.items() if k != "labels"}
    if model.config.is_encoder_decoder:
        unlabelled["decoder_input_ids"] = model.prepare_decoder_input_ids_from_labels(inputs["labels"])
    assert model(**unlabelled).logits is not None
    assert model(**unlabelled, logits_to_keep=1).logits.shape[1] == 1
    assert model.config.fused_loss and model(**inputs).logits is None
    torch.testing.assert_close(model(**inputs).loss, cross_entropy_of_logits(model, evaluated.logits, inputs["labels"]))
