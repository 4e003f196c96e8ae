"""The hidden Markov model family: the shared tester, plus what is particular to it: its likelihood is the textbook
forward algorithm's, its gradient is Baum-Welch's expected counts and one EM step raises the likelihood it computes,
the state it carries is the O(S) belief over the states, and padding leaves that belief alone."""

import math

import numpy as np
import pytest
import torch

from hf_seq.models.configuration_hmm import HMMConfig
from hf_seq.models.modeling_hmm import HMMForCausalLM, HMMModel, HMMState
from tests.tester import PAD, ModelTesterMixin


class TestHMM(ModelTesterMixin):
    family = "hf_seq_hmm"
    config_kwargs = dict(num_states=6, initializer_range=1.0)
    has_position_limit = False

    def hidden_state_widths(self, config, name: str) -> list[int]:
        """The embedding output is the emission log-likelihoods log B_j(x_t) the chain reads, its one layer's output
        the belief h_t: both S wide."""
        return [config.num_states, config.num_states]


# ------------------------------------------------------------------------------------------ textbook references
S, V = 3, 5  # the small model of the Baum-Welch checks: 3 states, 5 tokens


def small_model(seed=0, num_states=S, vocab_size=V) -> HMMForCausalLM:
    torch.manual_seed(seed)
    config = HMMConfig(vocab_size=vocab_size, num_states=num_states, pad_token_id=None, bos_token_id=None,
                       eos_token_id=None)  # fmt: skip
    return HMMForCausalLM(config).double().eval()


def parameters(model) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pi (S,), A (S, S), B (S, V)) as probabilities."""
    chain = model.model.chain
    with torch.no_grad():
        pi = torch.softmax(chain.initial_logits, -1)
        a = torch.softmax(chain.transition_logits, -1)
        b = torch.softmax(model.model.embed_tokens.weight, 0).t()
    return pi.numpy(), a.numpy(), b.numpy()


def set_parameters(model, pi, a, b) -> None:
    """Logits whose softmaxes are pi, A and B."""
    with torch.no_grad():
        model.model.chain.initial_logits.copy_(torch.from_numpy(np.log(pi)))
        model.model.chain.transition_logits.copy_(torch.from_numpy(np.log(a)))
        model.model.embed_tokens.weight.copy_(torch.from_numpy(np.log(b).T))


def forward_backward(pi, a, b, x):
    """Rabiner's scaled forward-backward in probability space: (log p(x), alpha-hat, beta-hat, the scales c) with
    alpha-hat_t = alpha_t / (c_1 ... c_t), p(x) = prod c_t, gamma_t = alpha-hat_t beta-hat_t."""
    T = len(x)
    alpha, beta, c = np.zeros((T, len(pi))), np.ones((T, len(pi))), np.zeros(T)
    for t in range(T):
        alpha[t] = (pi if t == 0 else alpha[t - 1] @ a) * b[:, x[t]]
        c[t] = alpha[t].sum()
        alpha[t] /= c[t]
    for t in range(T - 2, -1, -1):
        beta[t] = a @ (b[:, x[t + 1]] * beta[t + 1]) / c[t + 1]
    return np.log(c).sum(), alpha, beta, c


def posteriors(pi, a, b, x):
    """gamma (T, S): p(z_t = j | x); xi (T-1, S, S): p(z_t = i, z_{t+1} = j | x)."""
    _, alpha, beta, c = forward_backward(pi, a, b, x)
    gamma = alpha * beta
    xi = alpha[:-1, :, None] * a[None] * (b[:, x[1:]].T * beta[1:])[:, None, :] / c[1:, None, None]
    return gamma, xi


def sequences(seed=0, count=4, length=9, vocab_size=V):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (length,), generator=g).tolist() for _ in range(count)]


def log_likelihood(model, x) -> torch.Tensor:
    """log p(x_1..x_T) from the model's logits, in its dtype: one padded position before x_1 keeps the belief at
    log pi, so the logits there are log p(x_1 = v); the logits at x_t are log p(x_{t+1} = v | x_{<=t})."""
    ids = torch.tensor([[0] + x])
    logits = model(input_ids=ids, attention_mask=torch.tensor([[0] + [1] * len(x)])).logits[0, :-1]
    return logits.gather(-1, torch.tensor(x)[:, None]).sum()


def model_log_likelihood(model, x) -> float:
    with torch.no_grad():
        return log_likelihood(model, x).item()


# ------------------------------------------------------------------------------------------ the likelihood
def test_logits_are_the_plain_forward_algorithms_next_token_probabilities():
    """l_t(v) = log p(x_{t+1} = v | x_{<=t}) = log (alpha-hat_t A B)_v, and the LM loss is
    -log p(x_2..x_T | x_1) / (T - 1), from Rabiner's scaled forward pass on the same pi, A, B."""
    model = small_model()
    pi, a, b = parameters(model)
    for x in sequences():
        log_p, alpha, _, c = forward_backward(pi, a, b, x)
        ids = torch.tensor([x])
        with torch.no_grad():
            out = model(input_ids=ids, labels=ids)
        expected = np.log(alpha @ a @ b)  # (T, V)
        np.testing.assert_allclose(out.logits[0].numpy(), expected, rtol=1e-10, atol=1e-10)
        conditional = log_p - math.log(c[0])  # log p(x_2..x_T | x_1); transformers' loss is computed in float32
        assert out.loss.item() == pytest.approx(-conditional / (len(x) - 1), rel=1e-6)
        assert model_log_likelihood(model, x) == pytest.approx(log_p, rel=1e-10)


def test_the_log_space_recursion_holds_where_probabilities_underflow():
    """1000 tokens of a 3-state model: p(x) is about 1e-700, below any float; the log-space belief stays exact (the
    scaled forward algorithm agrees) and sums to one."""
    model = small_model(seed=1)
    pi, a, b = parameters(model)
    x = sequences(seed=2, count=1, length=1000)[0]
    log_p = forward_backward(pi, a, b, x)[0]
    assert log_p < -1000
    assert model_log_likelihood(model, x) == pytest.approx(log_p, rel=1e-9)
    with torch.no_grad():
        state = model(torch.tensor([x]), use_cache=True).past_key_values
    assert state.log_belief.exp().sum().item() == pytest.approx(1.0, abs=1e-12)


def test_float32_and_float64_agree():
    model = small_model(seed=3, num_states=16, vocab_size=50)
    ids = torch.randint(0, 50, (2, 200), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        exact = model(ids, labels=ids).loss
        single = model.float()(ids, labels=ids).loss
    assert single.item() == pytest.approx(exact.item(), rel=1e-5)


def test_one_state_is_a_unigram_model():
    """With S = 1 nothing is remembered: every position predicts the one state's emissions B_1."""
    model = small_model(seed=16, num_states=1, vocab_size=12)
    ids = torch.randint(0, 12, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = model(ids).logits
    unigram = torch.log_softmax(model.model.embed_tokens.weight[:, 0], 0)
    torch.testing.assert_close(logits, unigram.expand_as(logits))


def test_sums_over_states_stay_in_float32_under_bfloat16_autocast():
    """Mixed-precision training runs the matrix products in bf16 (8 bits of mantissa); the sums over states are kept
    in float32, so the logits move by float32 rounding, not by bf16's (about 1e-2 here)."""
    model = small_model(seed=15, num_states=32, vocab_size=200).float()
    ids = torch.randint(0, 200, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = model(ids).logits
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, expected, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------ Baum-Welch
def test_gradient_of_the_likelihood_is_baum_welchs_expected_counts():
    """d log p(x) / d log B_j(v) = sum_t gamma_t(j) [x_t = v], the counts Baum-Welch divides to re-estimate B, with
    gamma from a textbook forward-backward. The model's parameters are logits E with log B = log_softmax(E) over the
    vocabulary, so its gradient is that minus B_j(v) times the expected visits of j: N_j(v) - N_j B_j(v), which is
    zero exactly when B is Baum-Welch's re-estimate N_j(v) / N_j. The same for pi (gamma_1) and A (sum_t xi_t)."""
    model = small_model(seed=4)
    pi, a, b = parameters(model)
    xs = sequences(seed=5)
    counts_b, counts_a, counts_pi = np.zeros((S, V)), np.zeros((S, S)), np.zeros(S)
    model.zero_grad()
    for x in xs:
        gamma, xi = posteriors(pi, a, b, x)
        for t, v in enumerate(x):
            counts_b[:, v] += gamma[t]
        counts_a += xi.sum(0)
        counts_pi += gamma[0]
        log_likelihood(model, x).backward()
    grad_b = model.model.embed_tokens.weight.grad.t().numpy()
    grad_a = model.model.chain.transition_logits.grad.numpy()
    grad_pi = model.model.chain.initial_logits.grad.numpy()
    np.testing.assert_allclose(grad_b, counts_b - counts_b.sum(1, keepdims=True) * b, atol=1e-10)
    np.testing.assert_allclose(grad_a, counts_a - counts_a.sum(1, keepdims=True) * a, atol=1e-10)
    np.testing.assert_allclose(grad_pi, counts_pi - counts_pi.sum() * pi, atol=1e-10)


def test_a_baum_welch_step_raises_the_likelihood_the_model_computes():
    """One EM re-estimate of pi, A and B from gamma and xi, loaded into the model: the model's log-likelihood of the
    sequences goes up (EM never lowers it), and before and after it equals the forward-backward one."""
    model = small_model(seed=6)
    pi, a, b = parameters(model)
    xs = sequences(seed=7, count=6, length=12)
    new_pi, new_a, new_b = np.zeros(S), np.zeros((S, S)), np.zeros((S, V))
    for x in xs:
        gamma, xi = posteriors(pi, a, b, x)
        new_pi += gamma[0]
        new_a += xi.sum(0)
        for t, v in enumerate(x):
            new_b[:, v] += gamma[t]
    new_pi, new_a, new_b = new_pi / len(xs), new_a / new_a.sum(1, keepdims=True), new_b / new_b.sum(1, keepdims=True)

    def total(model, pi, a, b):
        ours = sum(model_log_likelihood(model, x) for x in xs)
        textbook = sum(forward_backward(pi, a, b, x)[0] for x in xs)
        assert ours == pytest.approx(textbook, rel=1e-10)
        return ours

    before = total(model, pi, a, b)
    set_parameters(model, new_pi, new_a, new_b)
    after = total(model, new_pi, new_a, new_b)
    assert after > before + 0.1, (before, after)


def test_gradient_training_learns_the_chain():
    """Training by gradient on the marginal likelihood: on sequences drawn from a 3-state HMM whose states persist and
    emit tokens of their own, a fresh model trained with Adam ends well below the best model without memory (the
    tokens' unigram entropy, what a 1-state HMM reaches), towards the true model's NLL per token."""
    true_model = small_model(seed=8, vocab_size=6)
    emissions = np.full((S, 6), 0.025)  # state j mostly emits tokens 2j and 2j + 1
    for j in range(S):
        emissions[j, 2 * j : 2 * j + 2] = 0.45
    set_parameters(true_model, np.full(S, 1 / S), 0.85 * np.eye(S) + 0.05, emissions)
    pi, a, b = parameters(true_model)
    rng = np.random.default_rng(0)
    xs = []
    for _ in range(16):
        z, x = rng.choice(S, p=pi), []
        for _ in range(30):
            x.append(int(rng.choice(6, p=b[z])))
            z = rng.choice(S, p=a[z])
        xs.append(x)
    ids = torch.tensor(xs)
    frequencies = np.bincount(ids[:, 1:].flatten().numpy(), minlength=6) / ids[:, 1:].numel()
    unigram = -(frequencies * np.log(frequencies)).sum()
    with torch.no_grad():
        best = true_model(ids, labels=ids).loss.item()
    model = small_model(seed=9, vocab_size=6).float().train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(50):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert unigram > best + 0.3 and loss.item() < unigram - 0.15, (unigram, loss.item(), best)


# ------------------------------------------------------------------------------------------ the state
def test_the_state_is_the_belief_over_the_states():
    """After x_1..x_T the state is log p(z_{T+1} | x_{<=T}) = log (alpha-hat_T A), S numbers per sequence; before any
    token the belief is log pi."""
    model = small_model(seed=10)
    pi, a, b = parameters(model)
    xs = sequences(seed=11, count=2, length=30)
    with torch.no_grad():
        state = model(torch.tensor(xs), use_cache=True).past_key_values
    assert isinstance(state, HMMState) and state.log_belief.shape == (2, S) and state.get_seq_length() == 30
    for row, x in enumerate(xs):
        alpha = forward_backward(pi, a, b, x)[1]
        np.testing.assert_allclose(state.log_belief[row].numpy(), np.log(alpha[-1] @ a), atol=1e-12)
    with torch.no_grad():
        before = model.model(torch.tensor([[2]]), attention_mask=torch.tensor([[0]]), use_cache=True)
    np.testing.assert_allclose(before.past_key_values.log_belief[0].numpy(), np.log(pi), atol=1e-12)


def test_generate_with_the_state_equals_recomputation_and_feeds_one_token_a_step():
    """Greedy and sampled generation with the carried belief equal generation that recomputes the whole prefix;
    with the state each step reads one token."""
    model = small_model(seed=12, num_states=8, vocab_size=30)
    prompt = torch.tensor([[3, 7, 9, 4], [5, 5, 6, 20]])
    lengths = []
    hook = model.register_forward_pre_hook(lambda m, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]),
                                           with_kwargs=True)  # fmt: skip
    kwargs = dict(max_new_tokens=10, min_new_tokens=10, pad_token_id=0)
    with torch.no_grad():
        cached = model.generate(prompt, do_sample=False, **kwargs)
        assert lengths == [4] + [1] * 9
        assert torch.equal(cached, model.generate(prompt, do_sample=False, use_cache=False, **kwargs))
        torch.manual_seed(0)
        sampled = model.generate(prompt, do_sample=True, **kwargs)
        torch.manual_seed(0)
        assert torch.equal(sampled, model.generate(prompt, do_sample=True, use_cache=False, **kwargs))
    hook.remove()


def test_a_padded_position_keeps_the_previous_belief():
    model = small_model(seed=13, num_states=4, vocab_size=12)
    ids = torch.tensor([[3, 4, 5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 0, 0, 1, 0]])
    with torch.no_grad():
        out = model.model(ids, attention_mask=mask, use_cache=True)
        beliefs = out.last_hidden_state[0]
        assert torch.equal(beliefs[2], beliefs[1]) and torch.equal(beliefs[3], beliefs[1])
        assert torch.equal(beliefs[5], beliefs[4]) and not torch.allclose(beliefs[4], beliefs[1])
        # the padded tokens are never read: the belief is that of the real tokens alone
        alone = model.model(torch.tensor([[3, 4, 7]]), use_cache=True)
        torch.testing.assert_close(out.past_key_values.log_belief, alone.past_key_values.log_belief)
        other = ids.clone()
        other[0, [2, 3, 5]] = torch.tensor([9, 10, 11])
        assert torch.equal(model.model(other, attention_mask=mask).last_hidden_state, out.last_hidden_state)


# ------------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "kwargs, key",
    [
        (dict(num_states=0), "num_states"),
        (dict(num_states=-3), "num_states"),
        (dict(num_states=2.5), "num_states"),
        (dict(num_states="8"), "num_states"),
        (dict(hidden_size=0), "num_states"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(initializer_range=-1.0), "initializer_range"),
        (dict(vocab_size=10, pad_token_id=10), "pad_token_id"),
        (dict(use_cache="yes"), "use_cache"),
        (dict(num_stats=8), "num_states"),
        (dict(num_hidden_layers=2), "num_hidden_layers"),
        (dict(tie_word_embeddings=False), "tie_word_embeddings"),
    ],
)
def test_bad_config_values_are_refused_naming_the_key(kwargs, key):
    with pytest.raises(ValueError, match=key):
        HMMConfig(**kwargs)


def test_hidden_size_is_the_number_of_states():
    config = HMMConfig(hidden_size=12)
    assert config.num_states == 12 and config.hidden_size == 12
    assert HMMModel(HMMConfig(vocab_size=20, hidden_size=7)).chain.transition_logits.shape == (7, 7)


def test_foreign_caches_and_ids_outside_the_vocabulary_are_refused():
    model = small_model()
    with pytest.raises(TypeError, match="HMMState"):
        model(torch.tensor([[1, 2]]), past_key_values=(torch.zeros(1),))
    with pytest.raises(ValueError, match="vocab_size=5"):
        model(torch.tensor([[1, 5]]))
    with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
        model(torch.tensor([[1, 2]]), inputs_embeds=torch.zeros(1, 2, S, dtype=torch.double))
    with pytest.raises(ValueError, match=rf"inputs_embeds .*num_states={S}\), .* got \(1, 2, 1\)"):
        model(inputs_embeds=torch.zeros(1, 2, 1, dtype=torch.double))  # would broadcast over the states


# ------------------------------------------------------------------------------------------ the embedding API
def test_the_input_embeddings_are_the_emission_table_read_and_predicted_with():
    """get_input_embeddings() is the (V, S) table of unnormalised log B_j(v), the very module get_output_embeddings()
    returns; setting another table changes what the model reads and what it predicts."""
    model = small_model(seed=17)
    table = model.get_input_embeddings()
    assert isinstance(table, torch.nn.Embedding) and table.weight.shape == (V, S)
    assert model.get_output_embeddings() is table is model.model.embed_tokens
    _, _, b = parameters(model)
    np.testing.assert_allclose(torch.softmax(table.weight.detach(), 0).t().numpy(), b)
    ids = torch.tensor([[1, 3, 2, 4]])
    new = torch.nn.Embedding(V, S).double()
    with torch.no_grad():
        new.weight.copy_(table.weight.flip(0))  # token v emitted as token V - 1 - v was
        expected = model(V - 1 - ids).logits.flip(-1)  # what the old table gives read and predicted so
    model.set_input_embeddings(new)
    assert model.get_output_embeddings() is new
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, expected)


def test_inputs_embeds_are_emission_logits_that_the_model_normalises():
    """inputs_embeds = get_input_embeddings()(input_ids) gives what input_ids give (logits, loss, state, gradient
    into the looked-up rows); any other row is read as unnormalised emission log-likelihoods: the log of a mixture of
    two tokens' rows is the mixture of their emission probabilities, log(w B_j(a) + (1 - w) B_j(b))."""
    model = small_model(seed=18)
    ids = torch.tensor([[1, 3, 2, 4, 0]])
    embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
    from_ids = model(ids, labels=ids, use_cache=True, output_hidden_states=True)
    from_embeds = model(inputs_embeds=embeds, labels=ids, use_cache=True, output_hidden_states=True)
    torch.testing.assert_close(from_embeds.logits, from_ids.logits)
    torch.testing.assert_close(from_embeds.loss, from_ids.loss)
    torch.testing.assert_close(from_embeds.past_key_values.log_belief, from_ids.past_key_values.log_belief)
    from_embeds.loss.backward()
    assert embeds.grad.abs().sum() > 0
    _, _, b = parameters(model)
    rows = model.get_input_embeddings().weight.detach()
    soft = torch.logsumexp(torch.stack([rows[1] + math.log(0.3), rows[3] + math.log(0.7)]), 0)
    with torch.no_grad():
        emissions = model.model(inputs_embeds=soft[None, None], output_hidden_states=True).hidden_states[0]
    np.testing.assert_allclose(emissions[0, 0].numpy(), np.log(0.3 * b[:, 1] + 0.7 * b[:, 3]), atol=1e-12)


def test_generate_from_inputs_embeds_continues_as_from_the_ids():
    model = small_model(seed=19, num_states=8, vocab_size=30)
    prompt = torch.tensor([[3, 7, 9, 4], [5, 5, 6, 20]])
    kwargs = dict(max_new_tokens=6, min_new_tokens=6, pad_token_id=0, do_sample=False)
    with torch.no_grad():
        from_ids = model.generate(prompt, **kwargs)
        from_embeds = model.generate(inputs_embeds=model.get_input_embeddings()(prompt), **kwargs)
    assert torch.equal(from_embeds, from_ids[:, 4:])  # transformers returns the new tokens only


def test_resize_token_embeddings_keeps_every_state_a_distribution():
    """The one table grows for reading and predicting alike (mean_resizing, transformers' default, or not); every
    state's emissions still sum to one over the larger vocabulary."""
    for mean_resizing in (False, True):
        model = small_model(seed=14)
        model.resize_token_embeddings(V + 3, mean_resizing=mean_resizing)
        assert model.get_output_embeddings() is model.get_input_embeddings()
        assert model.get_input_embeddings().weight.shape == (V + 3, S) and model.config.vocab_size == V + 3
        with torch.no_grad():
            logits = model(torch.tensor([[1, V + 2, PAD]])).logits
        assert logits.shape == (1, 3, V + 3)
        torch.testing.assert_close(logits.exp().sum(-1), torch.ones(1, 3, dtype=torch.double))
