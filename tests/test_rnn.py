"""The recurrent family: the shared tester on every cell type (and on bidirectional classifiers), plus what is
particular to recurrent networks: each cell computes its equations, state carried across calls equals one pass,
generation costs one step per token, beam search reorders the state, and the pipelines run."""

import dataclasses

import pytest
import torch
import transformers

from hf_seq import RecurrentState, RNNConfig, RNNForCausalLM, RNNForSequenceClassification, RNNModel
from hf_seq.models.recurrent import RecurrentStack, _gated_elman_loop, _GatedElmanScan
from hf_seq.models.utils import CACHE_NAME
from tests.tester import EOS, FIRST_WORD, PAD, ModelTesterMixin

NO_DROPOUT = dict(embedding_dropout=0.0, hidden_dropout=0.0, output_dropout=0.0)


class TestRNNLSTM(ModelTesterMixin):
    family = "hf_seq_rnn"
    # embedding_size != hidden_size: the tied output embedding is reached through a projection
    config_kwargs = dict(
        hidden_size=16,
        embedding_size=12,
        num_hidden_layers=2,
        cell_type="lstm",
        embedding_dropout=0.1,
        hidden_dropout=0.1,
        output_dropout=0.1,
        initializer_range=0.3,  # logits far enough from uniform that a changed label moves the loss
    )
    no_dropout = NO_DROPOUT
    has_position_limit = False
    supports_static_cache = False


class TestRNNGRU(TestRNNLSTM):
    config_overrides = dict(cell_type="gru")
    expensive_checks = False


class TestRNNElmanTanh(TestRNNLSTM):
    config_overrides = dict(cell_type="elman", nonlinearity="tanh", tie_word_embeddings=False)
    expensive_checks = False


class TestRNNElmanReLU(TestRNNLSTM):
    config_overrides = dict(cell_type="elman", nonlinearity="relu", embedding_size=16)
    expensive_checks = False


class TestRNNGated(TestRNNLSTM):
    config_overrides = dict(cell_type="gated")
    expensive_checks = False


class TestRNNBidirectionalGRU(TestRNNLSTM):
    """Bidirectional encoders under the classification heads (the causal LM refuses them)."""

    config_overrides = dict(cell_type="gru", bidirectional=True)
    is_causal = False
    expensive_checks = False

    @property
    def fam(self):
        fam = super().fam
        return dataclasses.replace(fam, models={a: m for a, m in fam.models.items() if a != "AutoModelForCausalLM"})


class TestRNNBidirectionalGatedMeanPooling(TestRNNBidirectionalGRU):
    config_overrides = dict(cell_type="gated", bidirectional=True, classifier_pooling="mean")


TINY = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, **NO_DROPOUT)
CELLS = [("elman", "tanh"), ("elman", "relu"), ("gated", "tanh"), ("gru", "tanh"), ("lstm", "tanh")]


# ------------------------------------------------------------------------------------ each cell is its equations
def reference_layer(rnn, cell_type, nonlinearity, x, suffix=""):
    """A step loop written from the equations in hf_seq/models/recurrent.py, reading the module's weights."""
    w_ih, w_hh = getattr(rnn, f"weight_ih_l0{suffix}"), getattr(rnn, f"weight_hh_l0{suffix}")
    if cell_type == "gated":
        b_i, b_h = getattr(rnn, f"bias_l0{suffix}"), 0.0
    else:
        b_i, b_h = getattr(rnn, f"bias_ih_l0{suffix}"), getattr(rnn, f"bias_hh_l0{suffix}")
    size = w_hh.shape[1]
    h = x.new_zeros(x.shape[0], size)
    c = torch.zeros_like(h)
    states = []
    for x_t in x.unbind(1):
        if cell_type == "elman":  # h_t = f(W_xh x_t + W_hh h_{t-1} + b)
            f = torch.tanh if nonlinearity == "tanh" else torch.relu
            h = f(x_t @ w_ih.T + h @ w_hh.T + b_i + b_h)
        elif cell_type == "gated":  # z = sigm(W_xz x + W_hz h + b_z); h = z h + (1 - z) relu(W_xh x + W_hh h + b_h)
            (w_xz, w_xh), (w_hz, w_hh_), (b_z, b_hh) = w_ih.chunk(2), w_hh.chunk(2), b_i.chunk(2)
            z = torch.sigmoid(x_t @ w_xz.T + h @ w_hz.T + b_z)
            h = z * h + (1 - z) * torch.relu(x_t @ w_xh.T + h @ w_hh_.T + b_hh)
        elif cell_type == "gru":  # PyTorch's gate order: r, z, n
            (w_ir, w_iz, w_in), (w_hr, w_hz, w_hn) = w_ih.chunk(3), w_hh.chunk(3)
            (b_ir, b_iz, b_in), (b_hr, b_hz, b_hn) = b_i.chunk(3), b_h.chunk(3)
            r = torch.sigmoid(x_t @ w_ir.T + b_ir + h @ w_hr.T + b_hr)
            z = torch.sigmoid(x_t @ w_iz.T + b_iz + h @ w_hz.T + b_hz)
            n = torch.tanh(x_t @ w_in.T + b_in + r * (h @ w_hn.T + b_hn))
            h = (1 - z) * n + z * h
        else:  # lstm, PyTorch's gate order: i, f, g, o
            i, f, g, o = (x_t @ w_ih.T + b_i + h @ w_hh.T + b_h).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        states.append(h)
    return torch.stack(states, 1), h, c


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell_type, nonlinearity", CELLS)
def test_each_cell_matches_a_step_loop_of_its_equations(cell_type, nonlinearity, bidirectional):
    torch.manual_seed(0)
    stack = RecurrentStack(cell_type, 5, 8, num_layers=2, nonlinearity=nonlinearity, bidirectional=bidirectional)
    x = torch.randn(3, 6, 5)
    with torch.no_grad():
        out = stack(x)
        layer_input, hiddens, cells = x, [], []
        for layer in stack.layers:
            directions = [reference_layer(layer.rnn, cell_type, nonlinearity, layer_input)]
            if bidirectional:
                states, h, c = reference_layer(layer.rnn, cell_type, nonlinearity, layer_input.flip(1), "_reverse")
                directions.append((states.flip(1), h, c))
            layer_input = torch.cat([d[0] for d in directions], -1)
            hiddens += [d[1] for d in directions]
            cells += [d[2] for d in directions]
    torch.testing.assert_close(out.output, layer_input, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.hidden, torch.stack(hiddens), rtol=1e-5, atol=1e-5)
    if cell_type == "lstm":
        torch.testing.assert_close(out.cell, torch.stack(cells), rtol=1e-5, atol=1e-5)
    else:
        assert out.cell is None


def test_gated_cell_hand_written_backward_is_the_gradient():
    """The gated cell's backpropagation through time is written out; check it against numerical gradients,
    with carried (masked) steps in the middle and at the end of a row."""
    torch.manual_seed(0)
    projected = torch.randn(3, 5, 8, dtype=torch.double, requires_grad=True)
    weight_hh = (0.5 * torch.randn(8, 4, dtype=torch.double)).requires_grad_()
    h0 = torch.randn(3, 4, dtype=torch.double, requires_grad=True)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    mask[2, 1] = False
    for m in (None, mask):
        assert torch.autograd.gradcheck(
            lambda p, w, h, m=m: _GatedElmanScan.apply(p, w, h, m), (projected, weight_hh, h0)
        )
        # and the values equal the plain loop's
        states, last = _GatedElmanScan.apply(projected, weight_hh, h0, m)
        ref_states, ref_last, _, _ = _gated_elman_loop(projected, weight_hh, h0, m, keep_gates=False)
        torch.testing.assert_close(states, ref_states)
        torch.testing.assert_close(last, ref_last)


def states_from_gates(cell_type, gates, h0, c0):
    """h_t (and the LSTM's c_t) rebuilt from the returned gates alone, with the module docstring's update rules."""
    h, c, states, cells = h0, c0, [], []
    for t in range(gates["candidate"].shape[1]):
        g = {name: value[:, t] for name, value in gates.items()}
        if cell_type == "lstm":  # c_t = f c_{t-1} + i g, h_t = o tanh(c_t)
            c = g["forget_gate"] * c + g["input_gate"] * g["candidate"]
            h = g["output_gate"] * torch.tanh(c)
        elif cell_type == "gru":  # h_t = (1 - z) n + z h_{t-1}
            h = (1 - g["update_gate"]) * g["candidate"] + g["update_gate"] * h
        else:  # gated: h_t = z h_{t-1} + (1 - z) candidate
            h = g["update_gate"] * h + (1 - g["update_gate"]) * g["candidate"]
        states.append(h)
        cells.append(c)
    return torch.stack(states, 1), (torch.stack(cells, 1) if cell_type == "lstm" else None)


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("cell_type", ["lstm", "gru", "gated"])
def test_layer_gates_are_the_ones_its_forward_pass_used(cell_type, bidirectional):
    """Every layer's gates, from a nonzero state, rebuild the states its forward pass returned (the forward
    direction's): a gate from the wrong rows of the weights, or a wrong order of gates, breaks the equality."""
    torch.manual_seed(0)
    stack = RecurrentStack(cell_type, 5, 8, num_layers=2, bidirectional=bidirectional)
    x = torch.randn(3, 6, 5)
    hidden, cell = stack.initial_state(3)
    hidden, cell = torch.randn_like(hidden), (torch.randn_like(cell) if cell is not None else None)
    with torch.no_grad():
        out = stack(x, (hidden, cell), output_hidden_states=True)
        span, inputs = stack.num_directions, (x, *out.layer_outputs[:-1])
        for i, (layer, layer_input) in enumerate(zip(stack.layers, inputs)):
            h0 = hidden[i * span : (i + 1) * span]
            c0 = cell[i * span : (i + 1) * span] if cell is not None else None
            gates = layer.gates(layer_input, h0, c0)
            states, cells = states_from_gates(cell_type, gates, h0[0], None if c0 is None else c0[0])
            torch.testing.assert_close(states, out.layer_outputs[i][..., :8], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(gates["hidden"], states, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(states[:, -1], out.hidden[i * span], rtol=1e-5, atol=1e-5)
            if cell_type == "lstm":
                torch.testing.assert_close(cells[:, -1], out.cell[i * span], rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(gates["cell"], cells, rtol=1e-6, atol=1e-6)
            names = {"lstm": 3, "gru": 2, "gated": 1}[cell_type]
            assert sum(name.endswith("_gate") for name in gates) == names
            assert all(((v > 0) & (v < 1)).all() for name, v in gates.items() if name.endswith("_gate"))


def test_the_elman_layer_has_no_gates():
    with pytest.raises(ValueError, match="cell_type='elman' has no gates; the cells with gates are"):
        RecurrentStack("elman", 4, 4).layers[0].gates(torch.zeros(1, 2, 4))


def test_fused_kernels_run_every_cell_but_the_gated_one():
    kinds = {}
    for cell_type in ("elman", "gru", "lstm", "gated"):
        stack = RecurrentStack(cell_type, 4, 4)
        kinds[cell_type] = type(stack.layers[0].rnn).__name__
    assert kinds == {"elman": "RNN", "gru": "GRU", "lstm": "LSTM", "gated": "GatedElman"}


@pytest.mark.parametrize("cell_type", ["elman", "gated", "gru", "lstm"])
def test_stack_as_encoder_and_as_step_by_step_decoder(cell_type):
    """The contracts an encoder-decoder relies on. Bidirectional, right-padded: the last layer's final states are the
    forward state at each row's last real token and the backward state at its first token. Unidirectional, fed one
    step at a time with its state (an LSTM's cell may start as None, meaning zeros): equals the whole sequence."""
    torch.manual_seed(0)
    encoder = RecurrentStack(cell_type, 5, 4, num_layers=2, bidirectional=True).eval()
    x = torch.randn(2, 6, 5)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 4:] = 0
    with torch.no_grad():
        out = encoder(x, attention_mask=mask)
    last = torch.tensor([5, 3])
    torch.testing.assert_close(out.hidden[-2], out.output[torch.arange(2), last, :4])
    torch.testing.assert_close(out.hidden[-1], out.output[:, 0, 4:])
    assert out.output[1, 4:].abs().sum() == 0

    decoder = RecurrentStack(cell_type, 5, 4, num_layers=2).eval()
    start = torch.randn(2, 2, 4)
    with torch.no_grad():
        whole = decoder(x, (start, None))
        state, steps = (start, None), []
        for t in range(6):
            step = decoder(x[:, t : t + 1], state)
            steps.append(step.output)
            state = (step.hidden, step.cell)
    torch.testing.assert_close(torch.cat(steps, 1), whole.output)
    torch.testing.assert_close(state[0], whole.hidden)


# ------------------------------------------------------------------------------------------------- the state
@pytest.mark.parametrize("cell_type, nonlinearity", CELLS)
def test_state_carried_in_chunks_equals_one_pass(cell_type, nonlinearity):
    """Left-padded rows, fed in chunks of 3, 1 and 4 tokens with the returned state: the same logits and final
    state as one pass. One row's first chunk is all padding, so its state must pass through unchanged."""
    torch.manual_seed(0)
    model = RNNForCausalLM(RNNConfig(**TINY, cell_type=cell_type, nonlinearity=nonlinearity)).eval()
    ids = torch.randint(FIRST_WORD, 50, (3, 8))
    mask = torch.ones_like(ids)
    mask[1, :2], mask[2, :4] = 0, 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask, use_cache=True)
        state, logits, start = None, [], 0
        for size in (3, 1, 4):
            end = start + size
            out = model(ids[:, start:end], attention_mask=mask[:, :end], past_key_values=state, use_cache=True)
            logits.append(out.logits)
            state, start = out.past_key_values, end
    real = mask.bool()
    torch.testing.assert_close(torch.cat(logits, 1)[real], full.logits[real], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.hidden, full.past_key_values.hidden, rtol=1e-5, atol=1e-5)
    if cell_type == "lstm":
        torch.testing.assert_close(state.cell, full.past_key_values.cell, rtol=1e-5, atol=1e-5)
    assert state.get_seq_length() == full.past_key_values.get_seq_length() == 8


def test_truncated_bptt_carries_values_not_gradients():
    torch.manual_seed(0)
    model = RNNForCausalLM(RNNConfig(**TINY, cell_type="lstm")).train()
    ids = torch.randint(FIRST_WORD, 50, (2, 12))
    first = model(ids[:, :6], labels=ids[:, :6], use_cache=True)
    state = first.past_key_values.detach()
    assert not state.hidden.requires_grad and not state.cell.requires_grad
    assert first.past_key_values.hidden.requires_grad  # the original is untouched
    second = model(ids[:, 6:], labels=ids[:, 6:], past_key_values=state, use_cache=True)
    second.loss.backward()  # would fail ("backward through the graph a second time") if the state kept its graph
    first.loss.backward()
    with torch.no_grad():  # the second chunk depends on the first through the state
        assert not torch.allclose(model.eval()(ids[:, 6:]).logits, model(ids[:, 6:], past_key_values=state).logits)


def test_recurrent_state_batch_operations():
    hidden = torch.arange(2 * 3 * 1.0).view(2, 3, 1)
    state = RecurrentState(hidden, hidden + 100, seen_tokens=4)
    state.reorder_cache(torch.tensor([2, 2, 0]))
    assert state.hidden[:, :, 0].tolist() == [[2, 2, 0], [5, 5, 3]]
    assert state.cell[:, :, 0].tolist() == [[102, 102, 100], [105, 105, 103]]
    state.batch_repeat_interleave(2)
    assert state.batch_size == 6 and state.hidden[0, :, 0].tolist() == [2, 2, 2, 2, 0, 0]
    state.batch_select_indices(torch.tensor([4]))
    assert state.hidden[:, :, 0].tolist() == [[0], [3]] and state.get_seq_length() == 4
    gru_state = RecurrentState(torch.zeros(1, 2, 3))
    gru_state.reorder_cache(torch.tensor([1, 0]))  # no cell: nothing to reorder there
    assert gru_state.cell is None and not RecurrentState.is_compileable


def test_generation_feeds_one_token_per_step_and_the_state_does_not_grow():
    """Per-token cost does not grow with the context: after the prompt, each forward gets one token and the
    state it returns has the same size, however long the context is."""
    torch.manual_seed(0)
    model = RNNForCausalLM(RNNConfig(**TINY, cell_type="gru")).eval()
    seen = []
    model.register_forward_pre_hook(lambda m, args, kwargs: seen.append(kwargs["input_ids"].shape[1]), with_kwargs=True)
    sizes = []
    model.register_forward_hook(lambda m, args, out: sizes.append(tuple(out.past_key_values.hidden.shape)))
    prompt = torch.randint(FIRST_WORD, 50, (1, 30))
    model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=PAD)
    assert seen == [30] + [1] * 7
    assert set(sizes) == {(2, 1, 16)}


def test_beam_search_reorders_the_state(monkeypatch):
    """Beams that swap places must swap states: beam search with the state equals beam search recomputing every
    prefix, on a run where generate did move states between beams (checked, so the test cannot pass vacuously)."""
    torch.manual_seed(0)
    model = RNNForCausalLM(RNNConfig(**dict(TINY, initializer_range=0.5), cell_type="lstm")).eval()
    moves = []
    reorder = RecurrentState.reorder_cache

    def recording_reorder(self, beam_idx):
        moves.append(not torch.equal(beam_idx.cpu(), torch.arange(len(beam_idx))))
        reorder(self, beam_idx)

    monkeypatch.setattr(RecurrentState, "reorder_cache", recording_reorder)
    ids = torch.randint(FIRST_WORD, 50, (2, 4))
    kwargs = dict(num_beams=4, num_return_sequences=4, do_sample=False, max_new_tokens=8, min_new_tokens=8)
    kwargs.update(pad_token_id=PAD, return_dict_in_generate=True, output_scores=True)
    cached = model.generate(ids, **kwargs)
    assert any(moves)
    recomputed = model.generate(ids, use_cache=False, **kwargs)
    assert torch.equal(cached.sequences, recomputed.sequences)
    torch.testing.assert_close(cached.sequences_scores, recomputed.sequences_scores)


def test_generate_continues_from_a_returned_state():
    torch.manual_seed(0)
    model = RNNForCausalLM(RNNConfig(**TINY, cell_type="lstm")).eval()
    ids = torch.randint(FIRST_WORD, 50, (1, 6))
    kwargs = dict(do_sample=False, pad_token_id=PAD, eos_token_id=EOS, min_new_tokens=4, max_new_tokens=4)
    whole = model.generate(ids, **kwargs)
    with torch.no_grad():
        state = model(ids[:, :-1], use_cache=True).past_key_values
    continued = model.generate(ids, **{CACHE_NAME: state}, **kwargs)  # past_key_values before transformers 5.24
    assert torch.equal(continued, whole)


def test_a_key_value_cache_is_refused():
    model = RNNModel(RNNConfig(**TINY)).eval()
    with pytest.raises(TypeError, match="RecurrentState"):
        model(torch.tensor([[5, 6]]), past_key_values=transformers.DynamicCache())


# ------------------------------------------------------------------------------------------ config and heads
def test_bidirectional_language_model_is_refused_with_the_reason():
    config = RNNConfig(**TINY, bidirectional=True)
    with pytest.raises(ValueError, match="backward direction reads the tokens to the right"):
        RNNForCausalLM(config)
    with pytest.raises(ValueError, match="bidirectional"):
        transformers.AutoModelForCausalLM.from_config(config)
    RNNForSequenceClassification(config)  # the classifiers accept it


@pytest.mark.parametrize(
    "option, value", [("cell_type", "transformer"), ("nonlinearity", "sigmoid"), ("classifier_pooling", "first")]
)
def test_config_rejects_unknown_values_listing_the_allowed_ones(option, value):
    with pytest.raises(ValueError, match=rf"{option}='{value}' is not supported; allowed values: \["):
        RNNConfig(**TINY, **{option: value})


def test_config_rejects_a_nonlinearity_for_cells_that_have_their_own():
    with pytest.raises(ValueError, match="applies to cell_type='elman' only"):
        RNNConfig(**TINY, cell_type="lstm", nonlinearity="relu")
    assert RNNConfig(**TINY).num_layers == 2  # the PyTorch name is an alias
    assert RNNConfig(**TINY).embedding_size == 16  # defaults to hidden_size


def test_tied_embeddings_through_a_projection():
    model = RNNForCausalLM(RNNConfig(**TINY, embedding_size=10))
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.output_projection.weight.shape == (10, 16)
    assert RNNForCausalLM(RNNConfig(**TINY)).output_projection is None
    untied = RNNForCausalLM(RNNConfig(**TINY, tie_word_embeddings=False))
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight


def test_hidden_states_has_the_embeddings_and_every_layer():
    model = RNNModel(RNNConfig(**dict(TINY, num_hidden_layers=3))).eval()
    out = model(torch.tensor([[5, 6, 7]]), output_hidden_states=True)
    assert len(out.hidden_states) == 4
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)


@pytest.mark.parametrize("pooling", ["last", "mean", "max"])
def test_classifier_reads_real_tokens_only(pooling):
    """Right-padded, with or without the mask (then the pad token marks the padding): each row's logits equal its
    logits alone. With a different pad token id the pads would count, and the logits would differ."""
    torch.manual_seed(0)
    model = RNNForSequenceClassification(RNNConfig(**TINY, bidirectional=True, classifier_pooling=pooling)).eval()
    ids = torch.randint(FIRST_WORD, 50, (2, 6))
    ids[1, 3:] = PAD
    mask = (ids != PAD).long()
    with torch.no_grad():
        alone = model(ids[1:, :3]).logits
        torch.testing.assert_close(model(ids, attention_mask=mask).logits[1:], alone, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(ids).logits[1:], alone, rtol=1e-5, atol=1e-5)
        model.config.pad_token_id = 49
        assert not torch.allclose(model(ids).logits[1:], alone, atol=1e-4)


def test_gradient_checkpointing_with_every_cell():
    ids = torch.randint(FIRST_WORD, 50, (2, 5))
    for cell_type in ("elman", "gated", "gru"):
        grads = []
        for checkpointing in (False, True):
            torch.manual_seed(0)
            model = RNNForCausalLM(RNNConfig(**TINY, cell_type=cell_type)).train()
            if checkpointing:
                model.activation_checkpointing_enable()
            model(ids, labels=ids).loss.backward()
            grads.append(model.model.rnn.layers[0].rnn.weight_hh_l0.grad)
        torch.testing.assert_close(grads[1], grads[0], msg=cell_type)


# ------------------------------------------------------------------------------------------------- pipelines
@pytest.fixture(scope="module")
def tokenizer():
    try:
        from hf_seq.data.tokenization import train_bpe_tokenizer
    except ImportError:  # pragma: no cover - the tokenizer module is part of the package
        pytest.skip("hf_seq.data.tokenization is not available")
    corpus = ["the cat sat on the mat", "a dog ran in the park", "the bird sang a song"] * 20
    return train_bpe_tokenizer(corpus, vocab_size=300, min_frequency=1)


def tiny_for(tokenizer, **kwargs):
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id)
    return RNNConfig(**dict(TINY, vocab_size=len(tokenizer)), eos_token_id=tokenizer.eos_token_id, **ids, **kwargs)


def test_text_generation_pipeline(tokenizer, tmp_path):
    torch.manual_seed(0)
    model = RNNForCausalLM(tiny_for(tokenizer, cell_type="lstm")).eval()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    generator = transformers.pipeline("text-generation", model=str(tmp_path))
    prompts = ["the cat", "a dog ran in"]
    results = generator(prompts, max_new_tokens=5, min_new_tokens=5, do_sample=False, return_full_text=False)
    for prompt, result in zip(prompts, results):
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        expected = model.generate(ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
        assert result[0]["generated_text"] == tokenizer.decode(expected[0, ids.shape[1] :], skip_special_tokens=True)


def test_text_classification_pipeline(tokenizer):
    torch.manual_seed(0)
    config = tiny_for(tokenizer, cell_type="gru", bidirectional=True, id2label={0: "neg", 1: "pos"})
    model = RNNForSequenceClassification(config).eval()
    classify = transformers.pipeline("text-classification", model=model, tokenizer=tokenizer)
    texts = ["the cat sat", "a bird sang a song in the park"]
    results = classify(texts, top_k=None, batch_size=2)  # batched: the short text is padded
    for text, result in zip(texts, results):
        with torch.no_grad():
            probs = model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0]
        got = {r["label"]: r["score"] for r in result}
        assert got == pytest.approx({"neg": probs[0].item(), "pos": probs[1].item()}, abs=1e-5)


def test_token_classification_pipeline(tokenizer):
    from hf_seq import RNNForTokenClassification

    torch.manual_seed(0)
    config = tiny_for(tokenizer, cell_type="gated", bidirectional=True, id2label={0: "O", 1: "B-ANIMAL"})
    model = RNNForTokenClassification(config).eval()
    tagger = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, ignore_labels=[])
    text = "the cat sat on the mat"
    entities = tagger(text)
    encoded = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        probs = model(**encoded).logits.softmax(-1)[0]
    assert len(entities) == encoded.input_ids.shape[1]
    for i, entity in enumerate(entities):
        assert entity["entity"] == model.config.id2label[int(probs[i].argmax())]
        assert entity["score"] == pytest.approx(probs[i].max().item(), abs=1e-5)
        assert text[entity["start"] : entity["end"]].strip() == tokenizer.decode(encoded.input_ids[0, i]).strip()


def test_resize_token_embeddings_keeps_the_tie_and_the_output_bias():
    model = RNNForCausalLM(RNNConfig(**TINY, embedding_size=8))
    model.resize_token_embeddings(60, mean_resizing=False)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.lm_head.weight.shape == (60, 8) and model.lm_head.bias.shape == (60,)
    assert model(torch.tensor([[59, 3]])).logits.shape == (1, 2, 60)


@pytest.mark.parametrize("cell_type", ["lstm", "gated"])
def test_bf16_forward_and_generate(cell_type):
    torch.manual_seed(0)
    model = RNNForCausalLM(RNNConfig(**TINY, cell_type=cell_type)).eval().to(torch.bfloat16)
    ids = torch.randint(FIRST_WORD, 50, (2, 5))
    assert model(ids).logits.dtype == torch.bfloat16
    assert model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=PAD).shape == (2, 8)


@pytest.mark.parametrize("cell_type", ["lstm", "gated"])
def test_generate_reads_the_transposed_output_projection_with_the_same_tokens(cell_type):
    """generate() computes the one-token steps' output projection from a contiguous W^T copy (models/decoding.py):
    the tokens are those of the (out, in) layout, and the model is as it was afterwards."""
    torch.manual_seed(0)
    model = RNNForCausalLM(RNNConfig(**TINY, cell_type=cell_type, embedding_size=8)).eval()
    ids = torch.randint(FIRST_WORD, 50, (2, 5))
    outputs = []
    for transposed in (True, False):
        model.transpose_weights_for_decoding = transposed
        outputs.append(model.generate(ids, max_new_tokens=6, do_sample=False, pad_token_id=PAD, eos_token_id=None))
    assert torch.equal(outputs[0], outputs[1])
    assert all(type(m) is torch.nn.Linear and not m._buffers for m in model.modules() if isinstance(m, torch.nn.Linear))
