"""The Bahdanau family: the shared tester (encoder-decoder mode) on every cell and attention type, plus what is
particular to it: the decoder step computes the paper's equations, the alignments are a distribution over the real
source tokens, U_a h_j is computed once per sentence, beam search reorders the decoder state, scheduled sampling,
the translation pipeline, Seq2SeqTrainer, the alignment plot."""

import pytest
import torch
import transformers

from hf_seq import BahdanauConfig, BahdanauForConditionalGeneration, BahdanauModel, BahdanauState
from hf_seq.data.corpora import sequence_reversal
from hf_seq.models.utils import cache_of
from tests.tester import FIRST_WORD, PAD, ModelTesterMixin

NO_DROPOUT = dict(embedding_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The decoder runs one tiny step per token; split over threads, each step waits at a barrier, which on a busy
    machine costs far more than the step (measured: 100x). One thread is the fast setting here."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class TestBahdanauGRUAdditive(ModelTesterMixin):
    """The paper's model (GRU, additive score, maxout deep output), two layers, with dropout."""

    family = "hf_seq_bahdanau"
    config_kwargs = dict(
        hidden_size=16,
        embedding_size=12,
        attention_size=10,
        deep_output_size=8,
        num_hidden_layers=2,
        embedding_dropout=0.1,
        hidden_dropout=0.1,
        output_dropout=0.1,
        initializer_range=0.3,  # logits far enough from uniform that a changed label moves the loss
    )
    no_dropout = NO_DROPOUT
    is_encoder_decoder = True
    has_position_limit = False


class TestBahdanauGRUDot(TestBahdanauGRUAdditive):
    config_overrides = dict(attention_type="dot")
    expensive_checks = False


class TestBahdanauGRUGeneral(TestBahdanauGRUAdditive):
    config_overrides = dict(attention_type="general", maxout=False)
    expensive_checks = False


class TestBahdanauGRUNone(TestBahdanauGRUAdditive):
    config_overrides = dict(attention_type="none")
    expensive_checks = False


class TestBahdanauLSTMAdditiveTied(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", tie_word_embeddings=True, deep_output_size=12, num_hidden_layers=1)
    expensive_checks = False


class TestBahdanauLSTMDot(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", attention_type="dot")
    expensive_checks = False


class TestBahdanauLSTMGeneral(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", attention_type="general")
    expensive_checks = False


class TestBahdanauLSTMNone(TestBahdanauGRUAdditive):
    config_overrides = dict(cell_type="lstm", attention_type="none", maxout=False)
    expensive_checks = False


CLASSIC = dict(
    attention_type="none",
    encoder_bidirectional=False,
    bridge="final_state",
    decoder_input="embedding",
    output_layer="linear",
)


class TestClassicGRU(TestBahdanauGRUAdditive):
    """Cho et al. 2014 without the context at every step: the decoder starts from the encoder's final state, reads
    its previous token, and predicts from its state; two vocabularies."""

    config_overrides = dict(CLASSIC, source_vocab_size=99)
    expensive_checks = True


class TestClassicSutskeverLSTM(TestBahdanauGRUAdditive):
    """Sutskever et al. 2014: stacked LSTM, reversed source, (h, c) of each layer handed over, output tied to the
    target embeddings."""

    config_overrides = dict(CLASSIC, cell_type="lstm", reverse_source=True, embedding_size=16, tie_word_embeddings=True)
    expensive_checks = False


class TestClassicFlagsWithAttention(TestBahdanauGRUAdditive):
    """The flags compose with attention: a unidirectional LSTM encoder, a linear bridge, a linear output."""

    config_overrides = dict(
        cell_type="lstm", encoder_bidirectional=False, bridge="linear", output_layer="linear", reverse_source=True
    )
    expensive_checks = False


class TestZerosBridgeGeneralAttention(TestBahdanauGRUAdditive):
    """s_0 = 0 and only the embedding as decoder input: the source reaches the decoder through the deep output."""

    config_overrides = dict(attention_type="general", bridge="zeros", decoder_input="embedding")
    expensive_checks = False


TINY = dict(
    vocab_size=99,
    hidden_size=16,
    embedding_size=12,
    attention_size=10,
    deep_output_size=8,
    num_hidden_layers=1,
    initializer_range=0.3,
    **NO_DROPOUT,
)


def tiny_model(seed=0, **overrides) -> BahdanauForConditionalGeneration:
    torch.manual_seed(seed)
    model = BahdanauForConditionalGeneration(BahdanauConfig(**{**TINY, **overrides})).eval()
    attention = model.model.decoder.attention
    if attention is not None and hasattr(attention, "energy_weight"):
        with torch.no_grad():  # v_a starts at 0 (uniform alignments); give the score something to say
            for param in attention.parameters():
                param.normal_(0.0, 0.5)
    return model


def source_batch(seed=0, side="right"):
    """Two sources of lengths 7 and 4, padded on `side`."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_WORD, 99, (2, 7), generator=g)
    mask = torch.ones_like(ids)
    pads = slice(4, 7) if side == "right" else slice(0, 3)
    ids[1, pads], mask[1, pads] = PAD, 0
    return {"input_ids": ids, "attention_mask": mask}


# ------------------------------------------------------------------------------------------------ configuration
@pytest.mark.parametrize(
    "option, value",
    [
        ("cell_type", "elman"),
        ("attention_type", "luong"),
        ("bridge", "tanh"),
        ("decoder_input", "context"),
        ("output_layer", "maxout"),
    ],
)
def test_config_rejects_unknown_values_listing_the_allowed_ones(option, value):
    with pytest.raises(ValueError, match=rf"{option}='{value}' is not supported; allowed values: \["):
        BahdanauConfig(**{**TINY, option: value})


def test_config_defaults_are_the_paper_and_sizes_are_checked():
    config = BahdanauConfig()
    assert (config.vocab_size, config.embedding_size, config.hidden_size, config.decoder_hidden_size) == (
        30000,
        620,
        1000,
        1000,
    )
    assert (config.attention_size, config.deep_output_size, config.maxout, config.cell_type) == (1000, 500, True, "gru")
    assert config.attention_type == "additive" and config.is_encoder_decoder and not config.tie_word_embeddings
    assert BahdanauConfig(hidden_size=16, attention_type="dot").decoder_hidden_size == 32  # s compared with [->h; <-h]
    with pytest.raises(ValueError, match="decoder_hidden_size must equal"):
        BahdanauConfig(hidden_size=16, decoder_hidden_size=16, attention_type="dot")
    with pytest.raises(ValueError, match="deep_output_size .* must equal embedding_size"):
        BahdanauConfig(**{**TINY, "tie_word_embeddings": True})
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        BahdanauConfig(scheduled_sampling=1.0)


# ------------------------------------------------------------------------------------------------ the equations
def gru_step(x, h, weight_ih, weight_hh, bias_ih, bias_hh):
    """Cho et al. 2014 as nn.GRU lays out its weights (rows: reset, update, candidate)."""
    xr, xz, xn = (weight_ih @ x + bias_ih).chunk(3)
    hr, hz, hn = (weight_hh @ h + bias_hh).chunk(3)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    n = torch.tanh(xn + r * hn)
    return (1 - z) * n + z * h


def paper_forward(model, source, target):
    """The paper's equations for one unpadded sentence, written out with the model's weights."""
    encoder, decoder = model.model.encoder, model.model.decoder
    gru = encoder.rnn.layers[0].rnn
    x = encoder.embed_tokens(source)  # (S, m)
    weights = lambda suffix: [
        getattr(gru, f"{name}_l0{suffix}") for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]
    h, forward = torch.zeros(16), []
    for x_j in x:
        h = gru_step(x_j, h, *weights(""))
        forward.append(h)
    h, backward = torch.zeros(16), []
    for x_j in x.flip(0):
        h = gru_step(x_j, h, *weights("_reverse"))
        backward.insert(0, h)
    annotations = torch.cat([torch.stack(forward), torch.stack(backward)], -1)  # h_j = [->h_j; <-h_j], (S, 2n)

    attention = decoder.attention
    W_a, U_a, v_a = attention.query_weight, attention.key_weight, attention.energy_weight[0]
    dec = decoder.rnn.layers[0].rnn
    s = torch.tanh(decoder.init_proj.weight @ backward[0] + decoder.init_proj.bias)  # s_0 = tanh(W_s <-h_1)
    logits, alignments = [], []
    for y_prev in decoder.embed_tokens(target):
        e = torch.stack([v_a @ torch.tanh(W_a @ s + U_a @ h_j) for h_j in annotations])
        alpha = e.softmax(0)
        c = (alpha[:, None] * annotations).sum(0)
        s = gru_step(torch.cat([y_prev, c]), s, dec.weight_ih_l0, dec.weight_hh_l0, dec.bias_ih_l0, dec.bias_hh_l0)
        t_tilde = decoder.deep_output.weight @ torch.cat([s, y_prev, c]) + decoder.deep_output.bias
        t = torch.maximum(t_tilde[0::2], t_tilde[1::2])  # maxout over pairs
        logits.append(model.lm_head.weight @ t + model.lm_head.bias)
        alignments.append(alpha)
    return torch.stack(logits), torch.stack(alignments)


@pytest.mark.parametrize("side", ["right", "left"])
def test_additive_attention_step_is_the_papers_equations(side):
    model = tiny_model()
    batch = source_batch(side=side)
    target = torch.randint(FIRST_WORD, 99, (2, 5))
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=target, output_attentions=True)
        for row in range(2):
            real = batch["attention_mask"][row].bool()
            logits, alignments = paper_forward(model, batch["input_ids"][row][real], target[row])
            torch.testing.assert_close(out.logits[row], logits, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(out.alignments[row][:, real], alignments, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("attention_type", ["additive", "dot", "general"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_alignments_are_a_distribution_over_the_real_source_tokens(attention_type, side):
    model = tiny_model(attention_type=attention_type, cell_type="lstm")
    batch = source_batch(side=side)
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=torch.randint(FIRST_WORD, 99, (2, 5)), output_attentions=True)
    alignments = out.alignments
    assert alignments.shape == (2, 5, 7)  # (batch, target, source)
    torch.testing.assert_close(alignments.sum(-1), torch.ones(2, 5))
    pads = ~batch["attention_mask"].bool()
    assert alignments[1][:, pads[1]].abs().max() == 0 and (alignments[1][:, ~pads[1]] > 0).all()
    assert torch.equal(out.cross_attentions[-1], alignments[:, None])  # transformers' (B, heads, T, S) layout
    assert model(**batch, decoder_input_ids=torch.tensor([[1], [1]])).alignments is None  # only when asked


def test_no_attention_reads_one_fixed_context_the_final_encoder_states():
    model = tiny_model(attention_type="none")
    batch = source_batch(side="left")
    decoder = model.model.decoder
    with torch.no_grad():
        out = model(**batch, decoder_input_ids=torch.randint(FIRST_WORD, 99, (2, 5)), output_attentions=True)
        annotations = out.encoder_last_hidden_state
        context = decoder.fixed_context(annotations, batch["attention_mask"])
    assert out.alignments is None and out.cross_attentions is None
    assert torch.equal(context[1], torch.cat([annotations[1, -1, :16], annotations[1, 3, 16:]]))  # [->h_S; <-h_1]


def test_base_model_returns_deep_output_annotations_and_every_layer():
    torch.manual_seed(0)
    model = BahdanauModel(BahdanauConfig(**{**TINY, "num_hidden_layers": 2})).eval()
    with torch.no_grad():
        out = model(**source_batch(), decoder_input_ids=torch.tensor([[1, 5, 6], [1, 7, 8]]), output_hidden_states=True)
    assert out.last_hidden_state.shape == (2, 3, 8)  # t_i, after the maxout
    assert out.encoder_last_hidden_state.shape == (2, 7, 32)  # h_j = [->h_j; <-h_j]
    assert [h.shape for h in out.decoder_hidden_states] == [(2, 3, 12), (2, 3, 16), (2, 3, 16)]  # E y, s^1, s^2
    assert [h.shape for h in out.encoder_hidden_states] == [(2, 7, 12), (2, 7, 32), (2, 7, 32)]
    assert out.past_key_values.hidden.shape == (2, 2, 16)


@pytest.mark.parametrize("tie", [True, False])
def test_resize_token_embeddings_resizes_source_target_and_output(tie):
    model = tiny_model(tie_word_embeddings=tie, deep_output_size=12)
    model.resize_token_embeddings(120)
    decoder = model.model.decoder
    sizes = {m.weight.shape[0] for m in (model.get_input_embeddings(), decoder.embed_tokens, model.lm_head)}
    assert sizes == {120} and model.config.vocab_size == 120
    assert (decoder.embed_tokens.weight is model.get_input_embeddings().weight) == tie
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[110, 5]]), decoder_input_ids=torch.tensor([[1, 115]])).logits
    assert logits.shape == (1, 2, 120)


@pytest.mark.parametrize(
    "flags, message",
    [
        (dict(bridge="final_state", decoder_hidden_size=16), r"final state of that layer as it is \(\[->h; <-h\]"),
        (dict(bridge="final_state", encoder_bidirectional=False, decoder_hidden_size=8), "must equal 16, got 8"),
        (dict(decoder_input="embedding", output_layer="linear"), "would reach neither the recurrence nor the output"),
        (dict(CLASSIC, bridge="zeros"), "never reads the source"),
        (dict(CLASSIC, tie_word_embeddings=True), r"decoder_hidden_size \(output_layer='linear'\) \(16\) must equal"),
        (dict(attention_type="dot", encoder_bidirectional=False, decoder_hidden_size=32), r"h, hidden_size\) = 16"),
    ],
)
def test_flag_combinations_that_do_not_fit_are_explained(flags, message):
    with pytest.raises(ValueError, match=message):
        BahdanauConfig(**{**TINY, **flags})


def test_classic_defaults_follow_the_encoder():
    """The decoder size a flag needs is derived, so the papers' settings need no size arithmetic."""
    assert BahdanauConfig(hidden_size=16, bridge="final_state").decoder_hidden_size == 32  # [->h_S; <-h_1]
    assert BahdanauConfig(hidden_size=16, bridge="final_state", encoder_bidirectional=False).decoder_hidden_size == 16
    config = BahdanauConfig(**{**TINY, **CLASSIC, "source_vocab_size": 40})
    model = BahdanauForConditionalGeneration(config)
    assert model.get_input_embeddings().weight.shape == (40, 12) and model.lm_head.weight.shape == (99, 16)
    assert not hasattr(model.model.decoder, "deep_output") and model.model.decoder.rnn.layers[0].rnn.input_size == 12


def test_reverse_source_reads_backwards_and_keeps_source_order():
    """h_j of the reversed reading is the plain encoder's state on the flipped sentence, at the mirrored position,
    for every row of a left-padded batch."""
    reversed_model = tiny_model(reverse_source=True)
    plain = tiny_model(reverse_source=False)
    batch = source_batch(side="left")
    with torch.no_grad():
        annotations = reversed_model.get_encoder()(**batch).last_hidden_state
        for row in range(2):
            real = batch["attention_mask"][row].bool()
            flipped = batch["input_ids"][row][real].flip(0)[None]
            expected = plain.get_encoder()(input_ids=flipped).last_hidden_state[0].flip(0)
            torch.testing.assert_close(annotations[row][real], expected)
            assert (annotations[row][~real] == 0).all()


EMBEDS_VARIANTS = {
    "classic": dict(CLASSIC, cell_type="lstm", reverse_source=True, source_vocab_size=50, num_hidden_layers=2),
    "attention": dict(encoder_bidirectional=False, reverse_source=True, bridge="linear", output_layer="linear"),
    "zeros": dict(attention_type="general", bridge="zeros", decoder_input="embedding", source_vocab_size=60),
}


@pytest.mark.parametrize("variant", sorted(EMBEDS_VARIANTS))
def test_inputs_embeds_give_what_the_ids_give(variant):
    model = tiny_model(**EMBEDS_VARIANTS[variant])
    batch = source_batch(side="left")
    batch["input_ids"] = batch["input_ids"] % 50  # inside the smallest source vocabulary
    targets = torch.randint(FIRST_WORD, 99, (2, 5))
    with torch.no_grad():
        from_ids = model(**batch, decoder_input_ids=targets).logits
        from_embeds = model(
            inputs_embeds=model.get_input_embeddings()(batch["input_ids"]),
            attention_mask=batch["attention_mask"],
            decoder_inputs_embeds=model.get_decoder().embed_tokens(targets),
        ).logits
    torch.testing.assert_close(from_embeds, from_ids, rtol=0, atol=0)


@pytest.mark.parametrize("attention_type", ["none", "additive"])
def test_returned_hidden_states_are_the_tensors_of_the_graph(attention_type):
    """retain_grad() on a returned state gets the gradient of the loss: every layer without attention (the layers
    run over the whole target), the embeddings and the top layer with it (the states the output reads)."""
    flags = dict(CLASSIC, num_hidden_layers=2) if attention_type == "none" else dict(num_hidden_layers=2)
    model = tiny_model(**flags).train()
    out = model(**source_batch(), labels=torch.randint(FIRST_WORD, 99, (2, 5)), output_hidden_states=True)
    decoder_states, encoder_states = out.decoder_hidden_states, out.encoder_hidden_states
    graph = list(decoder_states) if attention_type == "none" else [decoder_states[0], decoder_states[-1]]
    graph.append(encoder_states[0])  # the source embeddings the encoder read
    if attention_type != "none":  # the classic decoder reads the encoder's final states, not the annotations
        graph.append(out.encoder_last_hidden_state)
    for tensor in graph:
        tensor.retain_grad()
    out.loss.backward()
    for tensor in graph:
        assert tensor.grad is not None and tensor.grad.abs().sum() > 0


def test_resize_with_a_separate_source_vocabulary_resizes_the_target_side():
    model = tiny_model(**CLASSIC, source_vocab_size=40, embedding_size=16, tie_word_embeddings=True)
    model.resize_token_embeddings(120)
    decoder = model.get_decoder()
    assert model.get_input_embeddings().weight.shape[0] == 40 and model.config.source_vocab_size == 40
    assert decoder.embed_tokens.weight.shape[0] == model.lm_head.weight.shape[0] == model.config.vocab_size == 120
    assert model.lm_head.weight is decoder.embed_tokens.weight  # tied to the target embeddings only
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[39, 5]]), decoder_input_ids=torch.tensor([[1, 115]])).logits
    assert logits.shape == (1, 2, 120)


# ------------------------------------------------------------------------------------------------ generation
def test_annotations_are_projected_once_per_sentence(monkeypatch):
    """U_a h_j is computed once per generate() call, then read from the state at every step."""
    from hf_seq.models.modeling_bahdanau import BahdanauAttention

    model = tiny_model()
    calls, project = [], BahdanauAttention.project_keys
    monkeypatch.setattr(BahdanauAttention, "project_keys", lambda self, h: calls.append(h.shape) or project(self, h))
    for kwargs in ({}, {"num_beams": 3}):
        calls.clear()
        model.generate(**source_batch(), max_new_tokens=6, min_new_tokens=6, pad_token_id=PAD, **kwargs)
        assert len(calls) == 1, kwargs
    with torch.no_grad():
        state = model(**source_batch(), decoder_input_ids=torch.tensor([[1], [1]]), use_cache=True).past_key_values
    assert isinstance(state, BahdanauState) and state.keys.shape == (2, 7, 10) and state.hidden.shape == (1, 2, 16)


@pytest.mark.parametrize("cell_type", ["gru", "lstm"])
def test_beam_search_reorders_the_decoder_state(monkeypatch, cell_type):
    """Beams that swap places must swap states: equal to recomputing every prefix, on a run where generate did move
    states between beams (checked, so the test cannot pass vacuously)."""
    model = tiny_model(cell_type=cell_type, initializer_range=0.5)
    moves, reorder = [], BahdanauState.reorder_cache

    def recording_reorder(self, beam_idx):
        moves.append(not torch.equal(beam_idx.cpu(), torch.arange(len(beam_idx))))
        reorder(self, beam_idx)

    monkeypatch.setattr(BahdanauState, "reorder_cache", recording_reorder)
    kwargs = dict(num_beams=4, num_return_sequences=4, max_new_tokens=8, min_new_tokens=8, pad_token_id=PAD)
    kwargs.update(return_dict_in_generate=True, output_scores=True)
    cached = model.generate(**source_batch(), **kwargs)
    assert any(moves)
    recomputed = model.generate(**source_batch(), use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(cached.sequences_scores, recomputed.sequences_scores)


def test_precomputed_encoder_outputs_equal_input_ids_in_forward_and_sampling():
    model = tiny_model()
    batch = source_batch(side="left")
    decoder_input_ids = torch.randint(FIRST_WORD, 99, (2, 5))
    with torch.no_grad():
        encoded = model.get_encoder()(**batch)
        from_ids = model(**batch, decoder_input_ids=decoder_input_ids).logits
        precomputed = model(
            encoder_outputs=encoded, attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids
        ).logits
        assert torch.equal(precomputed, from_ids)
        as_tuple = model(
            encoder_outputs=(encoded.last_hidden_state,),
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_input_ids,
        ).logits
        assert torch.equal(as_tuple, from_ids)
    kwargs = dict(do_sample=True, top_k=20, max_new_tokens=6, pad_token_id=PAD)
    torch.manual_seed(1)
    sampled = model.generate(encoder_outputs=encoded, attention_mask=batch["attention_mask"], **kwargs)
    torch.manual_seed(1)
    assert torch.equal(sampled, model.generate(**batch, **kwargs))


def test_generate_returns_the_alignment_of_every_step():
    model = tiny_model()
    out = model.generate(
        **source_batch(),
        max_new_tokens=4,
        min_new_tokens=4,
        pad_token_id=PAD,
        output_attentions=True,
        return_dict_in_generate=True,
    )
    assert len(out.cross_attentions) == 4  # one per step, each a tuple of one (B, 1, 1, S) "layer"
    with torch.no_grad():
        full = model(**source_batch(), decoder_input_ids=out.sequences[:, :-1], output_attentions=True).alignments
    steps = torch.cat([step[0][:, 0] for step in out.cross_attentions], 1)  # (B, 4, S)
    torch.testing.assert_close(steps, full)


# ------------------------------------------------------------------------------------------------ training
def test_scheduled_sampling_changes_training_inputs_only_when_enabled():
    batch = source_batch()
    labels = torch.randint(FIRST_WORD, 99, (2, 6))
    reference = tiny_model()
    with torch.no_grad():
        teacher_forced = reference(**batch, labels=labels).logits
    sampling = tiny_model(scheduled_sampling=0.75)
    with torch.no_grad():
        assert torch.equal(sampling(**batch, labels=labels).logits, teacher_forced)  # eval: never
        assert torch.equal(reference.train()(**batch, labels=labels).logits, teacher_forced)  # p = 0: never
        torch.manual_seed(0)
        sampled = sampling.train()(**batch, labels=labels)
    torch.testing.assert_close(sampled.logits[:, 0], teacher_forced[:, 0])  # the start token is never replaced
    assert not torch.allclose(sampled.logits[:, 1:], teacher_forced[:, 1:])
    assert torch.isfinite(sampled.loss)
    torch.manual_seed(0)
    with torch.no_grad():  # with gradients, training takes the fused loss and returns no logits
        again = sampling(**batch, labels=labels).logits
    assert torch.equal(again, sampled.logits)  # drawn from torch's generator: reproducible under a seed


def test_loss_is_summed_over_trainer_item_count():
    model = tiny_model()
    labels = torch.randint(FIRST_WORD, 99, (2, 5))
    labels[1, 3:] = -100
    with torch.no_grad():
        mean = model(**source_batch(), labels=labels).loss
        summed = model(**source_batch(), labels=labels, num_items_in_batch=torch.tensor(4 * 8)).loss
    torch.testing.assert_close(summed, mean / 4)  # 8 scored tokens here, 4 times as many in the whole batch


def test_label_smoothing_is_the_shared_seq2seq_loss():
    from hf_seq.models.seq2seq import seq2seq_loss

    model = tiny_model(label_smoothing=0.1)
    labels = torch.randint(FIRST_WORD, 99, (2, 5))
    labels[0, 3:] = -100
    with torch.no_grad():
        out = model(**source_batch(), labels=labels)
        plain = tiny_model()(**source_batch(), labels=labels).loss
    torch.testing.assert_close(out.loss, seq2seq_loss(out.logits, labels, label_smoothing=0.1))
    assert not torch.allclose(out.loss, plain)  # the same weights: the config's epsilon is what changed


@pytest.fixture(scope="module")
def tokenizer():
    from hf_seq.data.tokenization import train_bpe_tokenizer

    corpus = [row[key] for row in sequence_reversal(200, seed=1) for key in ("source", "target")]
    return train_bpe_tokenizer(corpus, vocab_size=300, min_frequency=1)


@pytest.mark.parametrize("task, key", [("translation", "translation_text"), ("text2text-generation", "generated_text")])
def test_pipeline_decodes_what_generate_produces(tokenizer, task, key):
    model = tiny_model(vocab_size=len(tokenizer))
    pipe = transformers.pipeline(task, model=model, tokenizer=tokenizer)
    texts = ["a b c d", "x y z"]

    def by_hand(text, **kwargs):
        ids = model.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=6, pad_token_id=PAD, **kwargs)
        return tokenizer.batch_decode(ids, skip_special_tokens=True)

    assert pipe(texts[0], max_new_tokens=6) == [{key: by_hand(texts[0])[0]}]
    expected = [{key: by_hand(text, num_beams=3)[0]} for text in texts]
    assert pipe(texts, max_new_tokens=6, num_beams=3, batch_size=2) == expected  # a right-padded batch


@pytest.mark.parametrize("family", ["bahdanau-classic", "transformer"])
def test_translation_pipeline_from_a_folder_where_hf_seq_is_not_installed(tokenizer, tmp_path, family, clean_python):
    """transformers 5 has no translation task: the saved folder brings its own pipeline (config.json's
    `custom_pipelines`), which an interpreter without hf-seq builds with trust_remote_code=True. Here hf-seq
    serves the same folder with its registered pipeline, no trust_remote_code needed."""
    import json
    import textwrap

    from hf_seq import TransformerConfig, TransformerForConditionalGeneration

    if family == "transformer":
        torch.manual_seed(0)
        config = TransformerConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            encoder_layers=1,
            decoder_layers=1,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=64,
        )
        model = TransformerForConditionalGeneration(config).eval()
    else:
        model = tiny_model(vocab_size=len(tokenizer), **CLASSIC, reverse_source=True)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    assert json.loads((tmp_path / "model" / "config.json").read_text())["custom_pipelines"]["translation"]["impl"] == (
        "pipeline_translation.TranslationPipeline"
    )
    assert not hasattr(model.config, "custom_pipelines")  # written to the folder, not left on the live config
    texts = ["a b c d", "x y z"]
    encoded = tokenizer(texts, return_tensors="pt", padding=True)
    ids = model.generate(**encoded, num_beams=2, max_new_tokens=6, pad_token_id=PAD)
    expected = [{"translation_text": text} for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]
    here = transformers.pipeline("translation", model=str(tmp_path / "model"), num_beams=2, max_new_tokens=6)
    assert here(texts) == expected

    script = textwrap.dedent(
        f"""
        import json
        import transformers
        pipe = transformers.pipeline(
            "translation", model={str(tmp_path / "model")!r}, trust_remote_code=True, num_beams=2, max_new_tokens=6
        )
        assert type(pipe).__module__.startswith("transformers_modules"), type(pipe).__module__
        assert type(pipe.model).__module__.startswith("transformers_modules"), type(pipe.model).__module__
        print(json.dumps(pipe({texts!r})))
        """
    )
    assert json.loads(clean_python.run(script).strip().splitlines()[-1]) == expected


def test_seq2seq_trainer_trains_and_predicts_with_generate(tokenizer, tmp_path):
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    rows = sequence_reversal(24, seed=2, min_length=3, max_length=6)
    dataset = [
        {"input_ids": tokenizer(r["source"])["input_ids"], "labels": tokenizer(r["target"])["input_ids"]} for r in rows
    ]
    model = tiny_model(vocab_size=len(tokenizer), initializer_range=0.01)
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        max_steps=3,
        learning_rate=1e-2,
        predict_with_generate=True,
        generation_max_length=8,
        generation_num_beams=2,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=dataset[:8],
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
    )
    assert trainer.train().training_loss > 0
    metrics = trainer.evaluate()
    assert torch.isfinite(torch.tensor(metrics["eval_loss"]))
    predictions = trainer.predict(dataset[:8]).predictions
    sources = tokenizer.pad({"input_ids": [d["input_ids"] for d in dataset[:8]]}, return_tensors="pt")
    expected = model.eval().generate(**sources, max_length=8, num_beams=2)
    assert expected.shape[1] <= 8 and predictions.shape[0] == 8  # (Seq2SeqTrainer pads them further)
    assert (torch.as_tensor(predictions)[:, : expected.shape[1]] == expected).all()


# ------------------------------------------------------------------------------------------------ data and plots
def test_reversal_and_date_tasks():
    from hf_seq.data.corpora import SYNTHETIC_TASKS, date_conversion

    rows = SYNTHETIC_TASKS["reversal"](num_examples=50, seed=3)
    assert rows == sequence_reversal(50, seed=3) and rows != sequence_reversal(50, seed=4)
    for row in rows:
        source = row["source"].split()
        assert row["target"].split() == source[::-1] and 5 <= len(source) <= 20
    long = sequence_reversal(20, seed=0, min_length=60, max_length=60)
    assert {len(r["source"].split()) for r in long} == {60}
    import datetime

    for row in date_conversion(40, seed=1):
        date = datetime.date.fromisoformat(row["target"])
        assert str(date.year) in row["source"] and str(date.day) in row["source"]
    assert SYNTHETIC_TASKS["dates"] is date_conversion


def test_alignment_heatmap_is_written(tmp_path):
    from hf_seq.experiments.plotting import plot_alignment

    model = tiny_model()
    batch = source_batch()
    generated = model.generate(**batch, max_new_tokens=4, min_new_tokens=4, pad_token_id=PAD)
    with torch.no_grad():
        alignments = model(**batch, decoder_input_ids=generated, output_attentions=True).alignments
    source = [f"s{i}" for i in range(4)]  # the second sentence: 4 real tokens
    target = [f"t{i}" for i in range(generated.shape[1])]
    figure = plot_alignment(alignments[1, :, :4], source, target, tmp_path / "alignment.png")
    assert (tmp_path / "alignment.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    torch.testing.assert_close(torch.as_tensor(figure.axes[0].images[0].get_array()), alignments[1, :, :4])


@pytest.mark.parametrize("attention_type", ["additive", "none"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_returned_decoder_states_receive_the_gradient_and_change_nothing(attention_type, side):
    """A 2-layer decoder read step by step: asking for its hidden states and alignments leaves the logits and every
    parameter's gradient as they are, and each returned tensor (the middle layer's states included) is one the loss
    was computed from, so its gradient is there for attribution and probing."""
    kwargs = dict(source_batch(side=side), decoder_input_ids=torch.randint(FIRST_WORD, 99, (2, 5)))
    kwargs["labels"] = kwargs["decoder_input_ids"]
    runs = []
    for requested in (False, True):
        model = tiny_model(num_hidden_layers=2, attention_type=attention_type, scheduled_sampling=0.0)
        out = model(**kwargs, output_hidden_states=requested, output_attentions=requested)
        returned = [*out.decoder_hidden_states, *out.encoder_hidden_states] if requested else []
        if requested and attention_type != "none":
            returned += [out.alignments, out.cross_attentions[0]]
        for tensor in returned:
            tensor.retain_grad()
        out.loss.backward()
        runs.append((out.logits, {n: p.grad for n, p in model.named_parameters()}))
        assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in returned)
    torch.testing.assert_close(runs[1][0], runs[0][0], rtol=1e-5, atol=1e-6)
    for name, grad in runs[0][1].items():
        torch.testing.assert_close(runs[1][1][name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_replayed_decoder_uses_the_loops_dropout_masks():
    """In training, the replay that returns the hidden states draws no dropout masks of its own: the top layer's
    last returned state is the state the step loop carried on with."""
    model = tiny_model(num_hidden_layers=3, hidden_dropout=0.5).train()
    kwargs = dict(source_batch(), decoder_input_ids=torch.randint(FIRST_WORD, 99, (2, 5)))
    torch.manual_seed(1)
    out = model(**kwargs, output_hidden_states=True, use_cache=True)
    state = cache_of(out)
    torch.testing.assert_close(out.decoder_hidden_states[-1][:, -1], state.hidden[-1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.decoder_hidden_states[2][:, -1], state.hidden[1], rtol=1e-5, atol=1e-6)
