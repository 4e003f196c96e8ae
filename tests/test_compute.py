"""hf_seq.compute: training FLOPs per token from a GPT's shapes, against a count by hand and GPT-2 small's known size."""

import pytest

from hf_seq import GPTConfig, GPTForCausalLM
from hf_seq.compute import flop_parameters, training_flops_per_token

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
