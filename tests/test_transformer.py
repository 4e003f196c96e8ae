import pytest
import torch
import transformers

from hf_seq import TransformerConfig, TransformerForConditionalGeneration, TransformerModel
from hf_seq.convert import from_transformers, to_transformers
from tests.tester import EOS, FIRST_WORD, PAD, ModelTesterMixin


class TestTransformer(ModelTesterMixin):
    """The paper's defaults: post-LN, sinusoidal positions, scaled embeddings, three-way tied embeddings."""

    family = "hf_seq_transformer"
    config_kwargs = dict(
        hidden_size=32,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    no_dropout = dict(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    is_encoder_decoder = True
    supports_static_cache = True


class TestTransformerPreLNLearnedUntied(TestTransformer):
    config_overrides = dict(
        norm_position="pre",
        position_embedding_type="learned",
        tie_word_embeddings=False,
        hidden_act="gelu",
        attn_implementation="eager",
    )
    expensive_checks = False


TINY = dict(TestTransformer.config_kwargs, vocab_size=99, dropout=0.0)


def tiny_model(seed=0, **overrides) -> TransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return TransformerForConditionalGeneration(TransformerConfig(**{**TINY, **overrides})).eval()


def source_batch(seed=0):
    """Two right-padded sources of lengths 7 and 4."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_WORD, 99, (2, 7), generator=g)
    mask = torch.ones_like(ids)
    ids[1, 4:], mask[1, 4:] = PAD, 0
    return {"input_ids": ids, "attention_mask": mask}


# ------------------------------------------------------------------------------------------------ configuration
@pytest.mark.parametrize(
    "option, value",
    [("norm_position", "middle"), ("position_embedding_type", "rope"), ("hidden_act", "tanh"), ("norm_type", "bn")],
)
def test_config_rejects_unknown_values_listing_the_allowed_ones(option, value):
    with pytest.raises(ValueError, match=rf"{option}='{value}' is not supported; allowed values: \["):
        TransformerConfig(**TINY, **{option: value})


def test_config_defaults_are_the_base_model_and_aliases_work():
    config = TransformerConfig()
    assert (config.hidden_size, config.encoder_layers, config.decoder_layers, config.num_attention_heads) == (
        512,
        6,
        6,
        8,
    )
    assert (config.intermediate_size, config.dropout, config.hidden_act) == (2048, 0.1, "relu")
    assert (config.norm_position, config.position_embedding_type, config.scale_embedding) == (
        "post",
        "sinusoidal",
        True,
    )
    assert config.tie_word_embeddings and config.is_encoder_decoder
    assert TransformerConfig(d_model=64, num_attention_heads=4).hidden_size == 64
    # generate() sizes the decoder's cache from the decoder's depth
    assert TransformerConfig(encoder_layers=3, decoder_layers=5).get_text_config(decoder=True).num_hidden_layers == 5
    with pytest.raises(ValueError, match="divisible"):
        TransformerConfig(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        TransformerConfig(label_smoothing=1.0)


# ------------------------------------------------------------------------------------------------ the model
def test_three_way_tying_and_untied_matrices():
    tied = tiny_model()
    emb = tied.model.encoder.embed_tokens.weight
    assert tied.model.decoder.embed_tokens.weight is emb and tied.lm_head.weight is emb
    untied = tiny_model(tie_word_embeddings=False)
    weights = [
        untied.model.encoder.embed_tokens.weight,
        untied.model.decoder.embed_tokens.weight,
        untied.lm_head.weight,
    ]
    assert len({w.data_ptr() for w in weights}) == 3
    n_tied, n_untied = (sum(p.numel() for p in m.parameters()) for m in (tied, untied))
    assert n_untied - n_tied == 2 * 99 * 32


@pytest.mark.parametrize("tie", [True, False])
def test_resize_token_embeddings_resizes_all_three_matrices(tie):
    model = tiny_model(tie_word_embeddings=tie, output_bias=True)
    model.resize_token_embeddings(120, mean_resizing=False)
    matrices = [model.model.encoder.embed_tokens, model.model.decoder.embed_tokens, model.lm_head]
    assert [m.weight.shape[0] for m in matrices] == [120] * 3 and model.lm_head.bias.shape == (120,)
    assert (model.model.decoder.embed_tokens.weight is model.model.encoder.embed_tokens.weight) == tie
    ids = torch.randint(100, 120, (1, 4))  # new tokens on both sides
    assert model(input_ids=ids, decoder_input_ids=ids).logits.shape == (1, 4, 120)


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = tiny_model()
    ids = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        embedded = model.model.encoder.embed(ids, None, torch.arange(3)[None], 3)
        table = model.model.encoder.embed_positions(torch.arange(3)[None])
    torch.testing.assert_close(embedded, model.model.encoder.embed_tokens(ids) * 32**0.5 + table)


def test_label_smoothing_loss_and_trainer_normalisation():
    model = tiny_model(label_smoothing=0.1)
    batch = source_batch()
    labels = torch.randint(FIRST_WORD, 99, (2, 5))
    labels[1, 3:] = -100
    with torch.no_grad():
        out = model(**batch, labels=labels)
        log_probs = out.logits.log_softmax(-1)[labels != -100]
        kept = labels[labels != -100]
        nll = -log_probs.gather(-1, kept[:, None]).squeeze(-1)
        smoothed = (0.9 * nll - 0.1 * log_probs.mean(-1)).mean()  # (1 - eps) one-hot + eps / V uniform
        torch.testing.assert_close(out.loss, smoothed)
        # Trainer passes the token count of all accumulated micro-batches: the loss is then a sum over it
        summed = model(**batch, labels=labels, num_items_in_batch=torch.tensor(4 * kept.numel())).loss
        torch.testing.assert_close(summed, smoothed / 4)


def test_output_attentions_self_and_cross():
    model = tiny_model()
    batch = source_batch()
    decoder_input_ids = torch.randint(FIRST_WORD, 99, (2, 5))
    with torch.no_grad():  # sdpa forms no weights: empty tuples, as transformers' own models return
        out = model(**batch, decoder_input_ids=decoder_input_ids, output_attentions=True)
    assert out.encoder_attentions == out.decoder_attentions == out.cross_attentions == ()
    model.set_attn_implementation("eager")
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=decoder_input_ids, output_attentions=True)
    assert len(out.encoder_attentions) == len(out.decoder_attentions) == len(out.cross_attentions) == 2
    assert out.encoder_attentions[0].shape == (2, 4, 7, 7)
    assert out.decoder_attentions[0].shape == (2, 4, 5, 5)
    cross = out.cross_attentions[-1]
    assert cross.shape == (2, 4, 5, 7)
    torch.testing.assert_close(cross.sum(-1), torch.ones(2, 4, 5))
    assert cross[1, :, :, 4:].abs().max() == 0  # nothing attends to source padding
    assert torch.triu(out.decoder_attentions[0], diagonal=1).abs().max() == 0  # nor to future target tokens


def test_base_model_returns_encoder_and_decoder_states():
    torch.manual_seed(0)
    model = TransformerModel(TransformerConfig(**TINY)).eval()
    with torch.no_grad():
        out = model(**source_batch(), decoder_input_ids=torch.tensor([[1, 5], [1, 6]]), output_hidden_states=True)
    assert out.last_hidden_state.shape == (2, 2, 32) and out.encoder_last_hidden_state.shape == (2, 7, 32)
    assert len(out.encoder_hidden_states) == len(out.decoder_hidden_states) == 3
    assert model(**source_batch(), decoder_input_ids=torch.tensor([[1], [1]]), return_dict=False)[0].shape == (2, 1, 32)


def test_attention_kernel_switched_after_construction_is_the_one_that_runs(monkeypatch, tmp_path):
    """`set_attn_implementation` after construction (or after loading) changes the kernel every attention layer
    calls at once, and with it whether attention maps can be returned; the logits stay the same."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    import hf_seq.models.attention as attention

    calls = {"eager": 0, "sdpa": 0}
    eager, sdpa = attention.eager_attention_forward, ALL_ATTENTION_FUNCTIONS["sdpa"]

    def counting(name, kernel):
        def run(*args, **kwargs):
            calls[name] += 1
            return kernel(*args, **kwargs)

        return run

    monkeypatch.setattr(attention, "eager_attention_forward", counting("eager", eager))
    monkeypatch.setitem(type(ALL_ATTENTION_FUNCTIONS)._global_mapping, "sdpa", counting("sdpa", sdpa))
    model = tiny_model()
    inputs = dict(source_batch(), decoder_input_ids=torch.randint(FIRST_WORD, 99, (2, 5)))
    layers = 2 * 3  # encoder self-attention, decoder self- and cross-attention, 2 layers each

    def run(implementation, **kwargs):
        model.set_attn_implementation(implementation)
        calls.update(eager=0, sdpa=0)
        with torch.no_grad():
            out = model(**inputs, **kwargs)
        assert calls == {"eager": layers * (implementation == "eager"), "sdpa": layers * (implementation == "sdpa")}
        return out

    logits = run("sdpa").logits
    out = run("eager", output_attentions=True)
    torch.testing.assert_close(out.logits, logits)
    assert len(out.cross_attentions) == 2 and out.cross_attentions[0].shape == (2, 4, 5, 7)
    assert run("sdpa", output_attentions=True).cross_attentions == ()
    model.save_pretrained(tmp_path)
    model = TransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager").eval()
    torch.testing.assert_close(run("eager").logits, logits)
    torch.testing.assert_close(run("sdpa").logits, logits)


def test_returned_hidden_states_are_the_tensors_of_the_graph():
    """The states `output_hidden_states` returns are the layers' own outputs (collected by hooks): the loss reaches
    each of them."""
    model = tiny_model().train()
    out = model(**source_batch(), labels=torch.randint(FIRST_WORD, 99, (2, 5)), output_hidden_states=True)
    states = [*out.encoder_hidden_states, *out.decoder_hidden_states]
    assert len(states) == 2 * 3
    for state in states:
        state.retain_grad()
    out.loss.backward()
    assert all(state.grad is not None and state.grad.abs().sum() > 0 for state in states)


# ------------------------------------------------------------------------------------------------ generation
@pytest.mark.parametrize("overrides", [{}, {"norm_position": "pre", "position_embedding_type": "learned"}])
def test_beam_search_with_length_penalty_cache_equals_recompute(overrides):
    """Hypotheses end at EOS at different lengths here, so the length penalty decides between them."""
    model = tiny_model(tie_word_embeddings=False, output_bias=True, **overrides)
    with torch.no_grad():  # EOS likely enough to end some beams early
        model.lm_head.bias[EOS] = 3.5
    kwargs = dict(num_beams=4, num_return_sequences=2, max_new_tokens=10, pad_token_id=PAD, eos_token_id=EOS)
    lengths = {}
    for penalty in (0.6, 2.0):
        kwargs.update(length_penalty=penalty, return_dict_in_generate=True, output_scores=True)
        cached = model.generate(**source_batch(), **kwargs)
        recomputed = model.generate(**source_batch(), **kwargs, use_cache=False)
        assert torch.equal(cached.sequences, recomputed.sequences)
        torch.testing.assert_close(cached.sequences_scores, recomputed.sequences_scores)
        lengths[penalty] = (cached.sequences != PAD).sum(-1)
    if not overrides:  # a larger penalty exponent favours longer hypotheses: here it changes the answer
        assert (lengths[2.0] > lengths[0.6]).all(), lengths


def test_cross_attention_keys_and_values_are_computed_once():
    model = tiny_model()
    calls = []
    for layer in model.model.decoder.layers:
        layer.cross_attn.kv_proj.register_forward_hook(lambda *args: calls.append(1))
    model.generate(**source_batch(), max_new_tokens=5, min_new_tokens=5, pad_token_id=PAD)
    assert len(calls) == len(model.model.decoder.layers)  # once per layer for the whole generation


# ------------------------------------------------------------------------------------------------ MarianMT
def marian(tie=True, seed=0, **overrides):
    options = dict(
        vocab_size=99,
        d_model=32,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="relu",
        scale_embedding=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**{**options, **overrides})).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()  # published checkpoints have a trained one
    return model


@pytest.mark.parametrize("tie", [True, False])
def test_marian_conversion_same_logits_and_beams(tie):
    reference = marian(tie)
    ours = from_transformers(reference)
    assert type(ours) is TransformerForConditionalGeneration
    batch = source_batch()
    decoder_input_ids = torch.randint(FIRST_WORD, 99, (2, 6))
    with torch.no_grad():
        expected = reference(**batch, decoder_input_ids=decoder_input_ids).logits
        torch.testing.assert_close(
            ours(**batch, decoder_input_ids=decoder_input_ids).logits, expected, rtol=0, atol=1e-5
        )
        back = to_transformers(ours)
        assert type(back) is transformers.MarianMTModel
        torch.testing.assert_close(
            back(**batch, decoder_input_ids=decoder_input_ids).logits, expected, rtol=0, atol=1e-5
        )
    kwargs = dict(num_beams=4, length_penalty=0.6, max_new_tokens=8)
    assert torch.equal(ours.generate(**batch, **kwargs), reference.generate(**batch, **kwargs))


def test_paper_model_converts_to_marian_and_unsupported_options_are_refused():
    ours = tiny_model()
    reference = to_transformers(ours)
    batch, decoder_input_ids = source_batch(), torch.randint(FIRST_WORD, 99, (2, 6))
    with torch.no_grad():
        torch.testing.assert_close(
            reference(**batch, decoder_input_ids=decoder_input_ids).logits,
            ours(**batch, decoder_input_ids=decoder_input_ids).logits,
            rtol=0,
            atol=1e-5,
        )
    for option, value in (("norm_position", "pre"), ("position_embedding_type", "learned")):
        with pytest.raises(ValueError, match=f"{option}='{value}' has no Marian equivalent"):
            to_transformers(tiny_model(**{option: value}))
    with pytest.raises(ValueError, match="decoder_ffn_dim"):
        from_transformers(marian(decoder_ffn_dim=32))


# ------------------------------------------------------------------------------------------------ pipelines
@pytest.fixture(scope="module")
def tokenizer():
    from hf_seq.data.tokenization import train_bpe_tokenizer

    corpus = ["the cat sat on the mat", "a dog barks at night", "le chat est assis sur le tapis"] * 4
    return train_bpe_tokenizer(corpus, vocab_size=300, min_frequency=1)


def tokenizer_model(tokenizer, seed=0):
    return tiny_model(seed=seed, vocab_size=len(tokenizer), max_position_embeddings=64, tie_word_embeddings=False)


@pytest.mark.parametrize("task, key", [("translation", "translation_text"), ("text2text-generation", "generated_text")])
def test_pipeline_decodes_what_generate_produces(tokenizer, task, key):
    model = tokenizer_model(tokenizer)
    pipe = transformers.pipeline(task, model=model, tokenizer=tokenizer)
    texts = ["the cat sat", "a dog barks at night"]

    def by_hand(text, **kwargs):
        ids = model.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=6, pad_token_id=PAD, **kwargs)
        return tokenizer.batch_decode(ids, skip_special_tokens=True)

    assert pipe(texts[0], max_new_tokens=6) == [{key: by_hand(texts[0])[0]}]
    beams = dict(num_beams=3, length_penalty=0.6)
    expected = [{key: by_hand(text, **beams)[0]} for text in texts]
    assert pipe(texts, max_new_tokens=6, **beams) == expected
    assert pipe(texts, max_new_tokens=6, batch_size=2, **beams) == expected  # right-padded batch
    two = pipe(texts, max_new_tokens=6, num_return_sequences=2, num_beams=3, batch_size=2)
    assert [[d[key] for d in one] for one in two] == [
        by_hand(text, num_beams=3, num_return_sequences=2) for text in texts
    ]


def test_pipeline_from_a_saved_folder_with_construction_kwargs(tokenizer, tmp_path):
    model = tokenizer_model(tokenizer, seed=1)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    pipe = transformers.pipeline("translation", model=str(tmp_path), num_beams=2, max_new_tokens=4)
    assert type(pipe.model) is TransformerForConditionalGeneration
    ids = model.generate(**tokenizer("le chat", return_tensors="pt"), num_beams=2, max_new_tokens=4, pad_token_id=PAD)
    assert pipe("le chat") == [{"translation_text": tokenizer.decode(ids[0], skip_special_tokens=True)}]
    token_ids = pipe("le chat", return_tensors=True)[0]["translation_token_ids"]
    assert torch.equal(token_ids, ids[0])


def test_removed_task_names_are_registered_again():
    from transformers.pipelines import REMOVED_TASKS, check_task

    from hf_seq.pipelines.text2text import TranslationPipeline

    assert "translation" not in REMOVED_TASKS and "text2text-generation" not in REMOVED_TASKS
    assert check_task("translation")[1]["impl"] is TranslationPipeline
    assert check_task("translation")[1]["pt"] == (transformers.AutoModelForSeq2SeqLM,)
    with pytest.raises(KeyError, match="question-answering has been removed"):  # other removed tasks stay removed
        check_task("question-answering")


# ------------------------------------------------------------------------------------------------ training aids
def test_inverse_square_root_schedule_is_equation_3():
    from hf_seq.training.schedules import inverse_sqrt_schedule, vaswani_learning_rate, vaswani_peak_learning_rate

    assert vaswani_peak_learning_rate(512, 4000) == pytest.approx(512**-0.5 * 4000**-0.5)
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=vaswani_peak_learning_rate(64, 10))
    scheduler = inverse_sqrt_schedule(optimizer, warmup_steps=10)
    for step in range(1, 41):
        optimizer.step()
        scheduler.step()
        assert optimizer.param_groups[0]["lr"] == pytest.approx(vaswani_learning_rate(step, 64, 10))


def test_alignment_plot_from_cross_attention(tmp_path):
    from hf_seq.experiments.plotting import plot_alignment

    model = tiny_model(attn_implementation="eager")
    batch = source_batch()
    generated = model.generate(**batch, max_new_tokens=4, min_new_tokens=4, pad_token_id=PAD)
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=generated, output_attentions=True)
    source = [f"s{i}" for i in range(4)]  # the second sentence: 4 real tokens
    target = [f"t{i}" for i in range(generated.shape[1])]
    figure = plot_alignment(out.cross_attentions[-1][1, :, :, :4], source, target, tmp_path / "alignment.png")
    assert (tmp_path / "alignment.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shown = figure.axes[0].images[0].get_array()
    torch.testing.assert_close(torch.as_tensor(shown), out.cross_attentions[-1][1, :, :, :4].mean(0))
    with pytest.raises(ValueError, match="target and 4 source tokens"):
        plot_alignment(out.cross_attentions[-1][1], source, target)


def test_seq2seq_trainer_with_generation_and_bleu(tokenizer, tmp_path):
    """A few Seq2SeqTrainer steps on four phrase pairs (label smoothing, the inverse-sqrt schedule), then
    evaluation by generation: the BLEU it reports is the BLEU of what generate() gives for the same sources."""
    from hf_seq.evaluation.metrics import bleu_metrics, corpus_bleu

    pairs = [("the cat sat", "le chat est assis"), ("on the mat", "sur le tapis"), ("the cat", "le chat")]
    eos = tokenizer.eos_token_id

    def encode(source, target):
        return {"input_ids": tokenizer(source)["input_ids"] + [eos], "labels": tokenizer(target)["input_ids"] + [eos]}

    model = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=64, label_smoothing=0.1).train()
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=6,
        per_device_eval_batch_size=2,
        max_steps=20,
        learning_rate=3e-3,
        warmup_steps=5,
        lr_scheduler_type="inverse_sqrt",
        predict_with_generate=True,
        generation_max_length=10,
        generation_num_beams=2,
        logging_steps=5,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = transformers.Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=[encode(*pair) for pair in pairs] * 4,
        eval_dataset=[encode(*pair) for pair in pairs],
        data_collator=transformers.DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        compute_metrics=bleu_metrics(tokenizer),
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0] / 2, losses
    metrics = trainer.evaluate()
    model.eval()
    hypotheses = []
    for source, _ in pairs:
        ids = model.generate(torch.tensor([encode(source, "")["input_ids"]]), max_length=10, num_beams=2)
        hypotheses.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    assert metrics["eval_bleu"] == pytest.approx(corpus_bleu(hypotheses, [target for _, target in pairs]))
    assert corpus_bleu(["le chat est assis sur le tapis"], ["le chat est assis sur le tapis"]) == pytest.approx(100.0)


def test_one_token_step_inputs_equal_transformers_general_ones():
    """With a static cache, the decoder's one-token steps get their inputs on the short path of models/decoding.py:
    the same tensors as transformers' general prepare_inputs_for_generation (captured from a real generate() call,
    with a padded source, and with a decoder mask given or not); the encoder's mask and outputs pass through."""
    from hf_seq.models.decoding import one_token_step_inputs
    from hf_seq.models.utils import CACHE_NAME
    from tests.tester import general_step_inputs

    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=99, **TestTransformer.config_kwargs, pad_token_id=PAD, eos_token_id=EOS)
    model = TransformerForConditionalGeneration(config).eval()
    ids = torch.randint(3, 99, (2, 7))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    prepare, steps = model.prepare_inputs_for_generation, []

    def spy(input_ids, **kwargs):
        steps.append((input_ids, dict(kwargs)))
        return prepare(input_ids, **kwargs)

    model.prepare_inputs_for_generation = spy
    model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, cache_implementation="static")
    del model.prepare_inputs_for_generation
    decoder_ids, kwargs = steps[-1]
    assert kwargs["next_sequence_length"] == 1 and decoder_ids.shape == (2, 3)
    padded = torch.ones_like(decoder_ids)
    padded[1, 0] = 0
    for decoder_mask in (None, padded):
        step = dict(kwargs) | ({} if decoder_mask is None else {"decoder_attention_mask": decoder_mask})
        named = ("next_sequence_length", CACHE_NAME, "attention_mask", "inputs_embeds", "is_first_iteration")
        extra = {k: v for k, v in step.items() if k not in named}
        cache, source_mask = step[CACHE_NAME], step["attention_mask"]
        assert one_token_step_inputs(model, decoder_ids, 1, cache, source_mask, None, extra) is not None
        ours = model.prepare_inputs_for_generation(decoder_ids, **step)
        general = general_step_inputs(model, decoder_ids, **step)
        assert ours.keys() == general.keys()
        for key, value in general.items():
            assert torch.equal(ours[key], value) if torch.is_tensor(value) else ours[key] is value, key
    assert ours["decoder_attention_mask"].shape[:3] == (2, 1, 1) and not ours["decoder_attention_mask"][1, 0, 0, 0]
    assert ours["attention_mask"] is mask


@pytest.mark.slow
def test_compiled_static_decode_is_one_graph_with_the_eager_tokens():
    """generate() with a static cache and a compiled one-token decoder step: one graph, no recompilation per step or
    per call, the eager tokens (padded sources included)."""
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=99, **TestTransformer.config_kwargs, **TestTransformer.no_dropout, pad_token_id=PAD, eos_token_id=EOS
    )
    model = TransformerForConditionalGeneration(config).eval()
    ids = torch.randint(3, 99, (2, 7))
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
    generate = dict(input_ids=ids, attention_mask=mask, max_new_tokens=8, do_sample=False, eos_token_id=None)
    eager = model.generate(**generate)
    torch._dynamo.reset()
    counters.clear()
    for _ in range(2):
        out = model.generate(**generate, cache_implementation="static", compile_config=compile_config)
        assert torch.equal(out, eager)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["recompiles"] and not counters["graph_break"]
