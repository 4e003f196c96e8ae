import re

import pytest
import torch
import transformers
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, GPT2Model

from hf_seq import GPTConfig, GPTForCausalLM, GPTModel, SSMConfig, SSMForCausalLM, SSMModel, convert
from hf_seq.convert import Rule, from_transformers, require, to_transformers

VOCAB = 97
SIZES = {
    "small": dict(n_embd=32, n_layer=1, n_head=2),
    "deeper-untied": dict(n_embd=48, n_layer=3, n_head=4, n_inner=72, tie_word_embeddings=False),
}


def gpt2(size: str, cls=GPT2LMHeadModel, attn_implementation="sdpa", **overrides):
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        initializer_range=0.2,  # larger than GPT-2's 0.02, so random logits differ and greedy decoding varies
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        resid_pdrop=0.05,
        embd_pdrop=0.15,
        attn_pdrop=0.25,
        layer_norm_epsilon=1e-6,
        **{**SIZES[size], **overrides},
    )
    model = cls._from_config(config, attn_implementation=attn_implementation).eval()
    with torch.no_grad():  # random LayerNorm parameters too, so a swapped ln_1/ln_2 is caught
        for name, param in model.named_parameters():
            if ".ln_" in name:
                param.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
    return model


def batch():
    torch.manual_seed(1)
    input_ids = torch.randint(3, VOCAB, (3, 9))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :4] = 0  # left padding
    attention_mask[1, :1] = 0
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask


@pytest.mark.parametrize("size", list(SIZES))
def test_from_transformers_gives_equal_logits(size):
    attn = "eager" if size == "small" else "sdpa"
    reference = gpt2(size, attn_implementation=attn)
    ours = from_transformers(reference)
    assert type(ours) is GPTForCausalLM and not ours.training
    assert ours.config._attn_implementation == attn
    config = ours.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (
        reference.config.n_embd,
        reference.config.n_layer,
        reference.config.n_head,
    )
    assert config.intermediate_size == (reference.config.n_inner or 4 * reference.config.n_embd)
    assert (config.embedding_dropout, config.attention_dropout, config.hidden_dropout) == (0.15, 0.25, 0.05)
    assert (config.layer_norm_eps, config.max_position_embeddings, config.vocab_size) == (1e-6, 32, VOCAB)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 1, 2)
    assert config.tie_word_embeddings == reference.config.tie_word_embeddings

    input_ids, attention_mask = batch()
    with torch.no_grad():
        expected = reference(input_ids[1:]).logits
        torch.testing.assert_close(ours(input_ids[1:]).logits, expected, atol=1e-5, rtol=0)
        assert expected.std() > 0.1
        # GPT-2 counts positions from the first slot; ours counts real tokens, which generate also passes GPT-2.
        positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        expected = reference(input_ids, attention_mask=attention_mask, position_ids=positions).logits
        got = ours(input_ids, attention_mask=attention_mask).logits
        real = attention_mask.bool()
        torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("size", list(SIZES))
def test_greedy_generation_matches(size):
    reference = gpt2(size)
    ours = from_transformers(reference)
    input_ids, attention_mask = batch()
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    expected = reference.generate(input_ids, **kwargs)
    assert len(set(expected[:, -8:].flatten().tolist())) > 3  # not a degenerate repetition
    assert torch.equal(ours.generate(input_ids, **kwargs), expected)


@pytest.mark.parametrize("size", list(SIZES))
def test_to_transformers_round_trip(size):
    reference = gpt2(size)
    ours = from_transformers(reference)
    back = to_transformers(ours)
    assert type(back) is GPT2LMHeadModel
    state, expected = back.state_dict(), reference.state_dict()
    assert state.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), name
    assert back.config.tie_word_embeddings == reference.config.tie_word_embeddings
    if back.config.tie_word_embeddings:
        assert back.lm_head.weight.data_ptr() == back.transformer.wte.weight.data_ptr()
    for option in ("n_embd", "n_layer", "n_head", "n_positions", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
        assert getattr(back.config, option) == getattr(reference.config, option), option
    input_ids, _ = batch()
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids).logits, reference(input_ids).logits, atol=1e-6, rtol=0)


def test_our_model_to_gpt2_and_back():
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=16
    )
    ours = GPTForCausalLM(config).eval()
    reference = to_transformers(ours)
    input_ids, _ = batch()
    with torch.no_grad():
        torch.testing.assert_close(reference(input_ids).logits, ours(input_ids).logits, atol=1e-5, rtol=0)
    again = from_transformers(reference)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def test_base_models_convert():
    reference = gpt2("deeper-untied", cls=GPT2Model)
    ours = from_transformers(reference)
    assert type(ours) is GPTModel
    input_ids, _ = batch()
    with torch.no_grad():
        expected = reference(input_ids).last_hidden_state
        torch.testing.assert_close(ours(input_ids).last_hidden_state, expected, atol=1e-5, rtol=0)
    back = to_transformers(ours)
    assert type(back) is GPT2Model
    assert all(torch.equal(back.state_dict()[k], v) for k, v in reference.state_dict().items())


def test_converted_model_saves_and_reloads(tmp_path):
    reference = gpt2("deeper-untied")
    from_transformers(reference).save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is GPTForCausalLM
    input_ids, _ = batch()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids).logits, reference(input_ids).logits, atol=1e-5, rtol=0)


def test_conversion_keeps_dtype_and_training_mode():
    reference = gpt2("small").to(torch.bfloat16).train()
    ours = from_transformers(reference)
    assert ours.dtype == torch.bfloat16 and ours.training


@pytest.mark.parametrize(
    "option, value",
    [
        ("position_embedding_type", "rope"),
        ("norm_type", "rmsnorm"),
        ("norm_position", "post"),
        ("hidden_act", "swiglu"),
        ("attention_bias", False),
        ("mlp_bias", False),
        ("num_local_experts", 4),  # a mixture of experts: GPT-2's feed-forward is dense
    ],
)
def test_to_transformers_rejects_options_gpt2_lacks(option, value):
    config = GPTConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, **{option: value})
    with pytest.raises(ValueError, match=f"GPTConfig.{option}={value!r}"):
        to_transformers(GPTForCausalLM(config))


@pytest.mark.parametrize(
    "option, value",
    [("scale_attn_by_inverse_layer_idx", True), ("scale_attn_weights", False), ("activation_function", "silu")],
)
def test_from_transformers_rejects_options_gpt_lacks(option, value):
    with pytest.raises(ValueError, match=f"GPT2Config.{option}={value!r}"):
        from_transformers(gpt2("small", **{option: value}))


def test_unsupported_classes_are_named():
    with pytest.raises(
        ValueError, match=r"no conversion from GPT2ForSequenceClassification; supported: .*GPT2LMHeadModel"
    ):
        from_transformers(gpt2("small", cls=transformers.GPT2ForSequenceClassification))
    with pytest.raises(ValueError, match="no conversion from Linear"):
        to_transformers(torch.nn.Linear(2, 2))


def test_concat_rule_round_trips():
    """The rule a reference model with separate q, k, v projections (BERT, Marian) uses for our fused qkv_proj."""
    rule = Rule("qkv_proj.weight", ("query.weight", "key.weight", "value.weight"), "concat")
    q, k, v = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)
    fused = rule.to_ours([q, k, v])
    assert torch.equal(fused, torch.cat([q, k, v]))
    assert all(torch.equal(a, b) for a, b in zip(rule.to_reference(fused), (q, k, v)))
    conv = Rule("o_proj.weight", ("c_proj.weight",), "transpose")
    w = torch.randn(4, 3)
    assert torch.equal(conv.to_ours([w]), w.t()) and torch.equal(conv.to_reference(w.t())[0], w)


@pytest.mark.parametrize(
    "pair",
    [convert.gpt2, convert.bert, convert.marian, convert.mamba, convert.mamba2],
    ids=lambda module: module.__name__.rsplit(".", 1)[-1],
)
def test_every_declared_field_exists_on_its_side(pair):
    """A misspelt reference name would pass silently (a config accepts unknown keyword arguments), so the names
    each pair declares are checked against fresh configs of both sides."""
    config = pair.CONFIG
    ours, reference = config.ours(), config.reference()
    reference_names = [
        name for names in config.fields.values() for name in ((names,) if isinstance(names, str) else names)
    ]
    assert [name for name in [*config.fields, *config.fixed, *config.values] if not hasattr(ours, name)] == []
    assert [name for name in [*reference_names, *config.reference_fixed] if not hasattr(reference, name)] == []


def test_refusals_name_the_parameter_its_value_and_what_is_allowed():
    config = GPTConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, hidden_act="relu")
    require(config, "hidden_act", ["gelu", "relu"], "to_transformers", "GPT-2")  # allowed: no error
    message = "to_transformers: GPTConfig.hidden_act='relu' has no GPT-2 equivalent; allowed: ['gelu', 'gelu_new']."
    with pytest.raises(ValueError, match=re.escape(message)):
        require(config, "hidden_act", ["gelu_new", "gelu"], "to_transformers", "GPT-2")
    with pytest.raises(
        ValueError, match=re.escape("GPTConfig.norm_position='post' has no GPT-2 equivalent; allowed: 'pre'.")
    ):
        to_transformers(
            GPTForCausalLM(GPTConfig(vocab_size=VOCAB, hidden_size=16, num_attention_heads=2, norm_position="post"))
        )
    # Fields that ours keeps as one must agree on the reference's side; the message says with which.
    sizes = dict(d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2)
    ids = dict(pad_token_id=0, eos_token_id=2, forced_eos_token_id=2, decoder_start_token_id=0)
    marian_config = transformers.MarianConfig(
        vocab_size=VOCAB, encoder_ffn_dim=32, decoder_ffn_dim=24, max_position_embeddings=16, **sizes, **ids
    )
    reference = transformers.MarianMTModel(marian_config)
    message = "MarianConfig.decoder_ffn_dim=24 has no TransformerConfig equivalent; allowed: 32 (the value of encoder_ffn_dim)"
    with pytest.raises(ValueError, match=re.escape(message)):
        from_transformers(reference)


def test_activation_names_map_both_ways():
    """GPT-2's `gelu_pytorch_tanh` is our `gelu_new`; read back, ours is GPT-2's `gelu_new`."""
    ours = from_transformers(gpt2("small", activation_function="gelu_pytorch_tanh"))
    assert ours.config.hidden_act == "gelu_new"
    assert to_transformers(ours).config.activation_function == "gelu_new"


# ---------------------------------------------------------------------------------------- Mamba <-> SSM (mamba)
MAMBA_SIZES = {
    "small": dict(hidden_size=16, num_hidden_layers=2, state_size=4),
    "biases-untied": dict(
        hidden_size=24,
        num_hidden_layers=3,
        state_size=6,
        expand=3,
        conv_kernel=3,
        time_step_rank=5,
        use_bias=True,
        use_conv_bias=False,
        residual_in_fp32=False,
        tie_word_embeddings=False,
    ),
}


def mamba(size: str, cls=transformers.MambaForCausalLM, **overrides):
    torch.manual_seed(0)
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    config = transformers.MambaConfig(
        vocab_size=VOCAB, layer_norm_epsilon=1e-6, **ids, **{**MAMBA_SIZES[size], **overrides}
    )
    model = cls(config).eval()
    with torch.no_grad():  # every weight away from its initial value, so a swapped or skipped tensor is caught
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(1.0, 0.3)
            elif "embeddings" in name:
                param.normal_(0.0, 0.3)  # and greedy decoding that does not repeat one token
            else:
                param.add_(0.2 * torch.randn_like(param))
    return model


@pytest.mark.parametrize("size", list(MAMBA_SIZES))
def test_mamba_from_transformers_gives_equal_logits(size):
    reference = mamba(size)
    ours = from_transformers(reference)
    assert type(ours) is SSMForCausalLM and not ours.training
    config, expected_config = ours.config, reference.config
    assert config.ssm_type == "mamba"
    for option in ("hidden_size", "num_hidden_layers", "state_size", "expand", "conv_kernel", "time_step_rank"):
        assert getattr(config, option) == getattr(expected_config, option), option
    for option in ("use_bias", "use_conv_bias", "residual_in_fp32", "tie_word_embeddings", "time_step_min"):
        assert getattr(config, option) == getattr(expected_config, option), option
    assert config.intermediate_size == expected_config.intermediate_size and config.layer_norm_eps == 1e-6
    input_ids, attention_mask = batch()
    with torch.no_grad():
        expected = reference(input_ids[1:]).logits
        torch.testing.assert_close(ours(input_ids[1:]).logits, expected, atol=1e-5, rtol=0)
        assert expected.std() > 0.1
        if not expected_config.use_bias:  # see hf_seq.convert: with in_proj biases the two pad differently
            expected = reference(input_ids, attention_mask=attention_mask).logits
            got = ours(input_ids, attention_mask=attention_mask).logits
            real = attention_mask.bool()
            torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("size", list(MAMBA_SIZES))
def test_mamba_greedy_generation_matches(size):
    reference = mamba(size)
    ours = from_transformers(reference)
    input_ids, attention_mask = batch()
    if reference.config.use_bias:
        attention_mask = torch.ones_like(attention_mask)
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=8, do_sample=False, pad_token_id=0)
    expected = reference.generate(input_ids, **kwargs)
    assert len(set(expected[:, -8:].flatten().tolist())) > 3  # not a degenerate repetition
    assert torch.equal(ours.generate(input_ids, **kwargs), expected)


@pytest.mark.parametrize("size", list(MAMBA_SIZES))
def test_mamba_to_transformers_round_trip(size):
    reference = mamba(size)
    back = to_transformers(from_transformers(reference))
    assert type(back) is transformers.MambaForCausalLM
    state, expected = back.state_dict(), reference.state_dict()
    assert state.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), name
    for option in ("hidden_size", "state_size", "expand", "conv_kernel", "time_step_rank", "use_bias", "use_conv_bias"):
        assert getattr(back.config, option) == getattr(reference.config, option), option
    if back.config.tie_word_embeddings:
        assert back.lm_head.weight.data_ptr() == back.backbone.embeddings.weight.data_ptr()
    input_ids, _ = batch()
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids).logits, reference(input_ids).logits, atol=1e-6, rtol=0)


def test_our_mamba_to_transformers_and_back():
    torch.manual_seed(0)
    config = SSMConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, ssm_type="mamba", state_size=4, initializer_range=0.3
    )
    ours = SSMForCausalLM(config).eval()
    reference = to_transformers(ours)
    input_ids, attention_mask = batch()
    with torch.no_grad():
        torch.testing.assert_close(reference(input_ids).logits, ours(input_ids).logits, atol=1e-5, rtol=0)
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(reference.generate(input_ids, **kwargs), ours.generate(input_ids, **kwargs))
    again = from_transformers(reference)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())


def test_mamba_base_models_convert():
    reference = mamba("biases-untied", cls=transformers.MambaModel)
    ours = from_transformers(reference)
    assert type(ours) is SSMModel
    input_ids, _ = batch()
    with torch.no_grad():
        expected = reference(input_ids).last_hidden_state
        torch.testing.assert_close(ours(input_ids).last_hidden_state, expected, atol=1e-5, rtol=0)
    back = to_transformers(ours)
    assert type(back) is transformers.MambaModel
    assert all(torch.equal(back.state_dict()[k], v) for k, v in reference.state_dict().items())


@pytest.mark.parametrize("option, value", [("ssm_type", "s4d"), ("hidden_dropout", 0.1)])
def test_to_transformers_rejects_options_mamba_lacks(option, value):
    config = SSMConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, state_size=4, **{option: value})
    with pytest.raises(ValueError, match=f"SSMConfig.{option}={value!r}"):
        to_transformers(SSMForCausalLM(config))


def test_from_transformers_rejects_options_mamba_block_lacks():
    with pytest.raises(ValueError, match="MambaConfig.hidden_act='gelu'"):
        from_transformers(mamba("small", hidden_act="gelu"))


# ------------------------------------------------------------------------------------ Mamba-2 <-> SSM (mamba2)
MAMBA2_SIZES = {  # chunk_size 8 and sequences of 9 tokens: one full chunk and one padded
    "small": dict(hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16, n_groups=2, state_size=8),
    "biases-untied": dict(
        hidden_size=24,
        num_hidden_layers=3,
        expand=3,
        num_heads=6,
        head_dim=12,
        n_groups=3,
        state_size=6,
        conv_kernel=3,
        use_bias=True,
        use_conv_bias=False,
        residual_in_fp32=False,
        time_step_limit=(0.01, 0.5),
    ),
}


def mamba2(size: str, cls=transformers.Mamba2ForCausalLM, **overrides):
    torch.manual_seed(0)
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    config = transformers.Mamba2Config(
        vocab_size=VOCAB, layer_norm_epsilon=1e-6, chunk_size=8, **ids, **{**MAMBA2_SIZES[size], **overrides}
    )
    model = cls(config).eval()
    with torch.no_grad():  # every weight away from its initial value, so a swapped or skipped tensor is caught
        for name, param in model.named_parameters():
            if "norm" in name:
                param.normal_(1.0, 0.3)
            elif "embeddings" in name:
                param.normal_(0.0, 0.3)
            else:
                param.add_(0.2 * torch.randn_like(param))
    return model


@pytest.mark.parametrize("size", list(MAMBA2_SIZES))
def test_mamba2_from_transformers_gives_equal_logits(size):
    reference = mamba2(size)
    ours = from_transformers(reference)
    assert type(ours) is SSMForCausalLM and not ours.training
    config, expected_config = ours.config, reference.config
    assert config.ssm_type == "mamba2" and config.layer_norm_eps == 1e-6
    for option in ("hidden_size", "num_hidden_layers", "state_size", "expand", "conv_kernel", "num_heads", "head_dim"):
        assert getattr(config, option) == getattr(expected_config, option), option
    for option in ("n_groups", "chunk_size", "use_bias", "use_conv_bias", "residual_in_fp32", "tie_word_embeddings"):
        assert getattr(config, option) == getattr(expected_config, option), option
    assert config.time_step_limit == tuple(expected_config.time_step_limit)
    input_ids, attention_mask = batch()
    with torch.no_grad():
        expected = reference(input_ids[1:]).logits
        assert (ours(input_ids[1:]).logits - expected).abs().max() < 1e-4
        assert expected.std() > 0.1
        if not expected_config.use_bias:  # see hf_seq.convert.mamba2: with in_proj biases the two pad differently
            expected = reference(input_ids, attention_mask=attention_mask).logits
            got = ours(input_ids, attention_mask=attention_mask).logits
            real = attention_mask.bool()
            assert (got[real] - expected[real]).abs().max() < 1e-4


@pytest.mark.parametrize("size", list(MAMBA2_SIZES))
def test_mamba2_greedy_generation_matches(size):
    """Prefill by the chunked form, then the one-token step, on both sides."""
    reference = mamba2(size)
    ours = from_transformers(reference)
    input_ids, attention_mask = batch()
    if reference.config.use_bias:
        attention_mask = torch.ones_like(attention_mask)
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    expected = reference.generate(input_ids, **kwargs)
    assert len(set(expected[:, -8:].flatten().tolist())) > 3  # not a degenerate repetition
    assert torch.equal(ours.generate(input_ids, **kwargs), expected)


@pytest.mark.parametrize("size", list(MAMBA2_SIZES))
def test_mamba2_to_transformers_round_trip(size):
    reference = mamba2(size)
    back = to_transformers(from_transformers(reference))
    assert type(back) is transformers.Mamba2ForCausalLM
    state, expected = back.state_dict(), reference.state_dict()
    assert state.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), name
    for option in ("num_heads", "head_dim", "n_groups", "state_size", "chunk_size", "use_bias", "use_conv_bias"):
        assert getattr(back.config, option) == getattr(reference.config, option), option
    assert tuple(back.config.time_step_limit) == tuple(reference.config.time_step_limit)
    input_ids, _ = batch()
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids).logits, reference(input_ids).logits, atol=1e-6, rtol=0)


def test_our_mamba2_to_transformers_and_back():
    torch.manual_seed(0)
    config = SSMConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        ssm_type="mamba2",
        head_dim=16,
        n_groups=2,
        state_size=8,
        chunk_size=4,
        initializer_range=0.3,
    )
    ours = SSMForCausalLM(config).eval()
    reference = to_transformers(ours)
    assert type(reference) is transformers.Mamba2ForCausalLM and reference.config.chunk_size == 4
    input_ids, attention_mask = batch()
    with torch.no_grad():
        assert (reference(input_ids).logits - ours(input_ids).logits).abs().max() < 1e-4
    kwargs = dict(attention_mask=attention_mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(reference.generate(input_ids, **kwargs), ours.generate(input_ids, **kwargs))
    again = from_transformers(reference)
    assert all(torch.equal(again.state_dict()[k], v) for k, v in ours.state_dict().items())
    # the Mamba pair, registered for the same class, still serves the mamba block
    mamba_ours = SSMForCausalLM(SSMConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, state_size=4))
    assert type(to_transformers(mamba_ours)) is transformers.MambaForCausalLM


def test_mamba2_base_models_convert():
    reference = mamba2("biases-untied", cls=transformers.Mamba2Model)
    ours = from_transformers(reference)
    assert type(ours) is SSMModel
    input_ids, _ = batch()
    with torch.no_grad():
        expected = reference(input_ids).last_hidden_state
        torch.testing.assert_close(ours(input_ids).last_hidden_state, expected, atol=1e-5, rtol=0)
    back = to_transformers(ours)
    assert type(back) is transformers.Mamba2Model
    assert all(torch.equal(back.state_dict()[k], v) for k, v in reference.state_dict().items())


@pytest.mark.parametrize("option, value", [("norm_before_gate", True), ("rms_norm", False), ("hidden_dropout", 0.1)])
def test_to_transformers_rejects_options_mamba2_lacks(option, value):
    config = SSMConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, ssm_type="mamba2", head_dim=8, **{option: value}
    )
    with pytest.raises(ValueError, match=rf"SSMConfig.{option}={value!r} has no Mamba-2 equivalent"):
        to_transformers(SSMForCausalLM(config))


def test_from_transformers_rejects_options_mamba2_block_lacks():
    with pytest.raises(ValueError, match="Mamba2Config.hidden_act='gelu' has no SSMConfig equivalent"):
        from_transformers(mamba2("small", hidden_act="gelu"))
