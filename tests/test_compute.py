"""hf_seq.training.compute: training FLOPs per token from a model's shapes, against a count by hand and GPT-2 small's known
size; the attention term comes from each family's registry row."""

import pytest

from hf_seq import (
    GPTConfig,
    GPTForCausalLM,
    RNNConfig,
    RNNForCausalLM,
    TransformerConfig,
    TransformerForConditionalGeneration,
)
from hf_seq.training.compute import (
    flop_parameters,
    model_flops_per_token,
    seq2seq_flops_per_token,
    training_flops_per_token,
)

TINY = dict(vocab_size=100, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)


def test_tiny_gpt_by_hand():
    V, d, L, ff, s = 100, 8, 2, 32, 16
    per_layer = (
        2 * 2 * d  # two LayerNorms, weight and bias
        + (3 * d * d + 3 * d)  # query, key, value projections
        + (d * d + d)  # output projection
        + (d * ff + ff)  # MLP up
        + (ff * d + d)  # MLP down
    )
    n = L * per_layer + 2 * d + V * d  # + final LayerNorm + the output projection (the tied token table, once)
    assert n == 2560
    assert flop_parameters(GPTConfig(**TINY)) == n
    assert training_flops_per_token(GPTConfig(**TINY), s) == 6 * n + 12 * L * d * s == 18_432


@pytest.mark.parametrize(
    "variant",
    [
        {},
        dict(tie_word_embeddings=False),
        dict(position_embedding_type="rope", hidden_act="swiglu", norm_type="rmsnorm"),
    ],
    ids=str,
)
def test_equals_the_built_models_parameters_less_the_looked_up_tables(variant):
    model = GPTForCausalLM(GPTConfig(**TINY, **variant))
    looked_up = model.get_input_embeddings().weight.numel()
    if variant.get("position_embedding_type", "learned") == "learned":
        looked_up += model.model.embed_positions.weight.numel()
    head = model.get_output_embeddings().weight.numel() if model.config.tie_word_embeddings else 0
    assert flop_parameters(model.config) == model.num_parameters() - looked_up + head


def test_gpt2_small():
    """GPT-2 small has 124,439,808 parameters (llm.c's README prints num_parameters: 124439808); less the 1024 x 768
    position table, N = 123.65M, the N of nanoGPT's estimate_mfu (get_num_params drops the position table only), and
    6 N + 12 L d s = 0.855 GFLOPs a token at 1024 tokens."""
    config = GPTConfig(vocab_size=50257, hidden_size=768, num_hidden_layers=12, num_attention_heads=12)
    assert flop_parameters(config) == 124_439_808 - 1024 * 768 == 123_653_376
    assert training_flops_per_token(config, 1024) == 6 * 123_653_376 + 12 * 12 * 768 * 1024 == 855_166_464


def test_refuses_what_it_does_not_count():
    with pytest.raises(ValueError, match="num_local_experts"):
        flop_parameters(GPTConfig(**TINY, num_local_experts=4))
    with pytest.raises(TypeError, match="GPTConfig"):
        flop_parameters(object())


def test_any_model_counts_its_parameters_and_its_familys_attention():
    gpt = GPTForCausalLM(GPTConfig(**TINY))
    assert model_flops_per_token(gpt, 16) == training_flops_per_token(gpt.config, 16) == 18_432
    rnn = RNNForCausalLM(RNNConfig(vocab_size=100, hidden_size=8, num_hidden_layers=2))
    tied = rnn.config.tie_word_embeddings
    n = rnn.num_parameters() - rnn.get_input_embeddings().weight.numel() * (not tied)
    assert model_flops_per_token(rnn, 16) == model_flops_per_token(rnn, 1000) == 6 * n  # no attention term


def test_encoder_decoder_attention_by_hand():
    """A pair's FLOPs are 6 N_enc S + 6 N_dec T, linear in the lengths, plus the attention, quadratic: with the
    attention counted by hand taken off, what is left doubles when both lengths double."""
    d, L_enc, L_dec = 8, 2, 3
    config = TransformerConfig(
        vocab_size=100, hidden_size=d, encoder_layers=L_enc, decoder_layers=L_dec, num_attention_heads=2
    )
    model = TransformerForConditionalGeneration(config)

    def parameters_share(S, T):  # encoder self-attention; decoder self- and cross-attention
        attention = 12 * L_enc * d * S * S + 12 * L_dec * d * (T + S) * T
        return seq2seq_flops_per_token(model, S, T) * (S + T) - attention

    assert parameters_share(6, 10) > 0
    assert parameters_share(12, 20) == pytest.approx(2 * parameters_share(6, 10))
    assert parameters_share(6, 20) + parameters_share(12, 10) == pytest.approx(parameters_share(18, 30))
    with pytest.raises(ValueError, match="seq2seq_flops_per_token"):
        model_flops_per_token(model, 6)
