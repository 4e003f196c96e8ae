import pytest
import torch

from hf_seq import (
    BERTConfig,
    BERTForMaskedLM,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
    BERTModel,
)
from tests.tester import ModelTesterMixin


class TestBERT(ModelTesterMixin):
    family = "hf_seq_bert"
    config_kwargs = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=32
    )
    no_dropout = dict(hidden_dropout=0.0, attention_dropout=0.0)
    is_causal = False

    @property
    def trained_class(self):
        return BERTForMaskedLM


class TestBERTPreLN(TestBERT):
    config_overrides = dict(norm_position="pre", hidden_act="gelu_new")
    expensive_checks = False


class TestBERTEager(TestBERT):
    config_overrides = dict(attn_implementation="eager", norm_type="rmsnorm", hidden_act="swiglu")
    expensive_checks = False


TINY = dict(vocab_size=99, **TestBERT.config_kwargs)


def make(cls, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(BERTConfig(**{**TINY, **overrides})).eval()


@pytest.mark.parametrize(
    "option, value",
    [("norm_type", "batchnorm"), ("norm_position", "middle"), ("hidden_act", "tanh")],
)
def test_config_rejects_unknown_values_listing_the_allowed_ones(option, value):
    with pytest.raises(ValueError, match=rf"{option}='{value}' is not supported; allowed values: \["):
        BERTConfig(**TINY, **{option: value})


def test_config_accepts_berts_own_dropout_names():
    config = BERTConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.2)
    assert (config.hidden_dropout, config.attention_dropout) == (0.0, 0.2)
    with pytest.raises(ValueError, match="divisible"):
        BERTConfig(**dict(TINY, num_attention_heads=5))


def test_mlm_loss_is_the_mean_over_positions_not_labelled_minus_100():
    model = make(BERTForMaskedLM)
    ids = torch.randint(3, 99, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[1, 6] = 7, 8, 9
    with torch.no_grad():
        logits = model(ids).logits
        loss = model(ids, labels=labels).loss
        # the value of an ignored label's position does not matter
        other = model(ids, labels=torch.where(labels == -100, -100, labels)).loss
    kept = labels != -100
    by_hand = torch.nn.functional.cross_entropy(logits[kept], labels[kept])
    torch.testing.assert_close(loss, by_hand)
    torch.testing.assert_close(other, loss)
    assert not torch.allclose(loss, torch.nn.functional.cross_entropy(logits.reshape(-1, 99), ids.reshape(-1)))


def test_decoder_is_tied_to_word_embeddings_with_its_own_bias():
    model = make(BERTForMaskedLM)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model.lm_head.decoder.bias.shape == (99,)
    model.resize_token_embeddings(120)
    assert model.lm_head.decoder.weight is model.model.embeddings.word_embeddings.weight
    assert model(torch.randint(3, 99, (1, 5))).logits.shape == (1, 5, 120)


def test_token_type_ids_change_the_output_and_default_to_zero():
    model = make(BERTModel)
    ids = torch.randint(3, 99, (2, 6))
    types = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    with torch.no_grad():
        plain = model(ids).last_hidden_state
        zeros = model(ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        pair = model(ids, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(plain, zeros)
    assert not torch.allclose(pair, plain)


def test_pooler_reads_the_first_token_and_add_pooling_layer_false_removes_it():
    model = make(BERTModel)
    out = model(torch.randint(3, 99, (2, 6)))
    torch.testing.assert_close(out.pooler_output, torch.tanh(model.pooler.dense(out.last_hidden_state[:, 0])))
    bare = BERTModel(BERTConfig(**TINY), add_pooling_layer=False)
    assert bare.pooler is None and bare(torch.randint(3, 99, (1, 4))).pooler_output is None
    assert not any("pooler" in name for name, _ in make(BERTForMaskedLM).named_parameters())


def test_pre_ln_has_a_final_norm_and_no_embedding_norm():
    post, pre = make(BERTModel), make(BERTModel, norm_position="pre")
    assert isinstance(post.embeddings.norm, torch.nn.LayerNorm) and isinstance(post.norm, torch.nn.Identity)
    assert isinstance(pre.embeddings.norm, torch.nn.Identity) and isinstance(pre.norm, torch.nn.LayerNorm)


def test_attention_kernels_agree_with_padding():
    ids = torch.randint(3, 99, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    for position in ("post", "pre"):
        model = make(BERTForMaskedLM, norm_position=position)
        outputs = {}
        for impl in ("eager", "sdpa"):
            model.set_attn_implementation(impl)
            with torch.no_grad():
                outputs[impl] = model(ids, attention_mask=mask).logits
        real = mask.bool()
        torch.testing.assert_close(outputs["eager"][real], outputs["sdpa"][real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "problem_type, labels",
    [
        ("regression", torch.tensor([0.5, -1.0, 2.0, 0.0])),
        ("single_label_classification", torch.tensor([0, 2, 1, 2])),
        ("multi_label_classification", torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0], [0, 0, 0]])),
    ],
)
def test_sequence_classification_losses_and_accumulation(problem_type, labels):
    """Each problem type gets transformers' loss, and with Trainer's `num_items_in_batch` the micro-batch losses of
    an accumulated batch sum to the full batch's loss (what makes gradient accumulation exact)."""
    num_labels = 1 if problem_type == "regression" else 3
    model = make(BERTForSequenceClassification, num_labels=num_labels, problem_type=problem_type)
    ids = torch.randint(3, 99, (4, 6))
    with torch.no_grad():
        out = model(ids, labels=labels)
        logits = out.logits
        expected = {
            "regression": lambda: torch.nn.functional.mse_loss(logits.squeeze(-1), labels),
            "single_label_classification": lambda: torch.nn.functional.cross_entropy(logits, labels),
            "multi_label_classification": lambda: torch.nn.functional.binary_cross_entropy_with_logits(logits, labels),
        }[problem_type]()
        torch.testing.assert_close(out.loss, expected)
        total = torch.tensor(labels.numel())
        halves = [model(ids[s], labels=labels[s], num_items_in_batch=total).loss for s in (slice(0, 1), slice(1, 4))]
    torch.testing.assert_close(sum(halves), out.loss)


def test_question_answering_loss_ignores_positions_past_the_sequence():
    model = make(BERTForQuestionAnswering)
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        out = model(ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
        start, end = out.start_logits, out.end_logits
        by_hand = (
            torch.nn.functional.cross_entropy(start, torch.tensor([1, 2]))
            + torch.nn.functional.cross_entropy(end, torch.tensor([3, 4]))
        ) / 2
        torch.testing.assert_close(out.loss, by_hand)
        far = model(ids, start_positions=torch.tensor([1, 50]), end_positions=torch.tensor([3, 50])).loss
        first = (
            torch.nn.functional.cross_entropy(start[:1], torch.tensor([1]))
            + torch.nn.functional.cross_entropy(end[:1], torch.tensor([3]))
        ) / 2
    torch.testing.assert_close(far, first)
    assert start.shape == end.shape == (2, 6)


def test_token_classification_ignores_minus_100():
    model = make(BERTForTokenClassification, num_labels=3)
    ids = torch.randint(3, 99, (2, 5))
    labels = torch.tensor([[-100, 1, 2, 0, -100], [-100, 0, -100, 2, -100]])
    with torch.no_grad():
        out = model(ids, labels=labels)
    kept = labels != -100
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits[kept], labels[kept]))
