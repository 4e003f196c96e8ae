"""The fixed-window family (Bengio et al. 2003): the shared tester on its variants, plus what is particular to it:
the logits are the paper's equation, a position sees exactly the previous n-1 tokens, and generation keeps only
that window."""

import math

import pytest
import torch

from hf_seq import WindowConfig, WindowForCausalLM, WindowState
from tests.tester import FIRST_WORD, ModelTesterMixin

NO_DROPOUT = dict(embedding_dropout=0.0, hidden_dropout=0.0)


class TestWindow(ModelTesterMixin):
    family = "hf_seq_window"
    # tied with h != m: the output embedding is reached through a projection; W x on
    config_kwargs = dict(
        context_size=3,
        embedding_size=8,
        hidden_size=12,
        num_hidden_layers=2,
        direct_connections=True,
        tie_word_embeddings=True,
        embedding_dropout=0.1,
        hidden_dropout=0.1,
        initializer_range=0.3,  # logits far enough from uniform that a changed label moves the loss
    )
    no_dropout = NO_DROPOUT
    has_position_limit = False

    def hidden_state_widths(self, config, name: str) -> list[int]:
        """The embedding output is x, the n-1 embeddings side by side that the first tanh layer reads: (n-1) m wide."""
        return [config.context_size * config.embedding_size] + [config.hidden_size] * config.num_hidden_layers


class TestWindowPaper(TestWindow):
    """The paper's own architecture: one tanh layer, separate output weights U, no direct connections."""

    config_overrides = dict(num_hidden_layers=1, direct_connections=False, tie_word_embeddings=False)
    expensive_checks = False


class TestWindowTiedSameSize(TestWindow):
    config_overrides = dict(hidden_size=8, context_size=1)
    expensive_checks = False


def test_logits_are_the_papers_equation_on_hand_set_weights():
    """y = b + W x + U tanh(d + H x), x = (C(w_{t-1}), C(w_{t-2})), on a 3-word vocabulary with m = h = 1."""
    config = WindowConfig(
        vocab_size=3, context_size=2, embedding_size=1, hidden_size=1, direct_connections=True, pad_token_id=None
    )
    model = WindowForCausalLM(config).eval()
    C, H, d, U, b, W = [0.5, -1.0, 2.0], [0.3, -0.7], 0.1, [1.0, -2.0, 0.5], [0.0, 0.2, -0.1], [[1, 0], [0, 1], [1, 1]]
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(torch.tensor(C)[:, None])
        model.model.layers[0].linear.weight.copy_(torch.tensor([H]))
        model.model.layers[0].linear.bias.fill_(d)
        model.lm_head.weight.copy_(torch.tensor(U)[:, None])
        model.lm_head.bias.copy_(torch.tensor(b))
        model.direct.weight.copy_(torch.tensor(W, dtype=torch.float))
        logits = model(torch.tensor([[2, 0, 1]])).logits[0]
    words = [2, 0, 1]
    for t in range(3):
        # newest first; before the first word: the zero vector
        x = [C[words[t]], C[words[t - 1]] if t >= 1 else 0.0]
        h = math.tanh(d + H[0] * x[0] + H[1] * x[1])
        y = [b[i] + W[i][0] * x[0] + W[i][1] * x[1] + U[i] * h for i in range(3)]
        torch.testing.assert_close(logits[t], torch.tensor(y), rtol=1e-6, atol=1e-6)


def tiny_model(**overrides):
    torch.manual_seed(0)
    kwargs = dict(vocab_size=40, context_size=3, embedding_size=6, hidden_size=10, direct_connections=True)
    return WindowForCausalLM(WindowConfig(**{**kwargs, **overrides})).eval()


def test_a_position_sees_exactly_the_previous_n_minus_1_tokens():
    model = tiny_model()
    ids = torch.randint(FIRST_WORD, 40, (1, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base = model(ids).logits
        for changed in (2, 5):
            other = ids.clone()
            other[0, changed] = FIRST_WORD + (ids[0, changed] + 1 - FIRST_WORD) % (40 - FIRST_WORD)
            moved = ~torch.isclose(model(other).logits, base, atol=1e-6).all(-1)[0]
            # token `changed` is in the window of positions changed .. changed + n-2
            assert moved.nonzero().flatten().tolist() == list(range(changed, changed + 3))


def test_state_is_the_last_window_and_beams_reorder_it():
    model = tiny_model()
    ids = torch.randint(FIRST_WORD, 40, (2, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model(ids, use_cache=True)
    state = out.past_key_values
    assert isinstance(state, WindowState) and state.get_seq_length() == 5
    (window,) = state.conv_states
    torch.testing.assert_close(window, model.model.embed_tokens(ids[:, -3:]))
    state.reorder_cache(torch.tensor([1, 1]))
    assert torch.equal(state.conv_states[0][0], state.conv_states[0][1])


def test_generation_ignores_tokens_older_than_the_window():
    """Two prompts that differ only before their last n-1 tokens continue identically."""
    model = tiny_model()
    tail = torch.tensor([[7, 8, 9]])
    a = torch.cat([torch.tensor([[4, 5, 6]]), tail], 1)
    b = torch.cat([torch.tensor([[30, 31, 32]]), tail], 1)
    kwargs = dict(max_new_tokens=8, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(model.generate(a, **kwargs)[:, 6:], model.generate(b, **kwargs)[:, 6:])


def test_hidden_states_are_x_then_each_tanh_layers_output():
    """As in transformers, num_hidden_layers + 1 states, the first the embedding output the first layer reads: here x,
    n-1 embeddings side by side ((n-1) m = 18 features, also returned as `window`), then each tanh layer's output,
    h = 10 wide, the last being `last_hidden_state`."""
    model = tiny_model(num_hidden_layers=2)
    ids = torch.randint(FIRST_WORD, 40, (2, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
        base = model.model(ids, output_hidden_states=True)
        assert [tuple(h.shape) for h in out.hidden_states] == [(2, 5, 18), (2, 5, 10), (2, 5, 10)]
        assert base.hidden_states[0] is base.window
        embeds = model.model.embed_tokens(ids)  # x at position t: C(w_t), C(w_{t-1}), C(w_{t-2}); zeros before w_1
        torch.testing.assert_close(base.window[:, 2], torch.cat([embeds[:, 2], embeds[:, 1], embeds[:, 0]], -1))
        torch.testing.assert_close(base.window[:, 0, 6:], torch.zeros(2, 12))
        h1 = model.model.layers[0](base.window)
        torch.testing.assert_close(base.hidden_states[1], h1)
        torch.testing.assert_close(base.hidden_states[2], model.model.layers[1](h1))
        torch.testing.assert_close(base.hidden_states[-1], base.last_hidden_state)
        assert len(model(ids, output_hidden_states=True, return_dict=False)) == 3  # (logits, state, hidden states)


def test_foreign_cache_is_refused():
    model = tiny_model()
    with pytest.raises(TypeError, match="QueueState"):
        model(torch.tensor([[4, 5]]), past_key_values=(torch.zeros(1),))


def test_bad_config_names_the_parameter():
    with pytest.raises(ValueError, match="context_size"):
        WindowConfig(context_size=0)
