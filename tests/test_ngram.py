"""The Kneser-Ney baseline: a distribution after every context, held-out scores equal to a hand computation of the
interpolated Kneser-Ney equations, and a 5-gram that beats a unigram on standard-library code."""

import itertools
import math

import numpy as np
import pytest

from hf_seq.baselines.ngram import KneserNeyLM
from hf_seq.data.corpora import stdlib_texts
from hf_seq.evaluation.metrics import lm_metrics, token_byte_lengths


def bits_per_byte(nll_nats, num_bytes):
    return lm_metrics(float(np.sum(nll_nats)), len(nll_nats), num_bytes)["eval_bits_per_byte"]


def test_probabilities_sum_to_one_after_every_context():
    """Every context over a 4-token vocabulary, up to the order's length, including tokens and histories never
    seen in training (token 3 never occurs)."""
    rng = np.random.default_rng(0)
    train = rng.choice(3, size=60, p=[0.6, 0.3, 0.1])
    for order in (1, 2, 3):
        lm = KneserNeyLM(vocab_size=4, order=order).fit(train)
        for length in range(order):
            for context in itertools.product(range(4), repeat=length):
                p = lm.next_token_probs(list(context))
                assert p.shape == (4,) and (p > 0).all(), (order, context)
                assert abs(p.sum() - 1.0) < 1e-12, (order, context, p.sum())


def test_scores_of_a_stream_are_the_next_token_distributions():
    rng = np.random.default_rng(1)
    lm = KneserNeyLM(vocab_size=6, order=3).fit(rng.integers(0, 5, size=200))
    held_out = rng.integers(0, 6, size=30)
    nll = lm.token_nll(held_out)
    expected = [-math.log(lm.next_token_probs(held_out[:i])[held_out[i]]) for i in range(1, held_out.size)]
    np.testing.assert_allclose(nll, expected, rtol=1e-12)


def test_bits_per_byte_equals_a_hand_computation():
    """Bigram KN on "a b a b a a", scored on "b a c a", tokens of 1, 2 and 3 bytes."""
    a, b, c = 0, 1, 2
    lm = KneserNeyLM(vocab_size=3, order=2).fit([a, b, a, b, a, a])
    # bigrams: ab x2, ba x2, aa x1 -> n1 = 1, n2 = 2, D2 = 1 / (1 + 2*2); c(a.) = 3 over 2 types, c(b.) = 2 over 1
    D2 = 1 / 5
    # unigram continuation counts N1+(. w): a after {a, b} = 2, b after {a} = 1, c = 0; total 3 over 2 types;
    # n1 = 1, n2 = 1 -> D1 = 1/3; P1(w) = max(N(w) - D1, 0) / 3 + D1 * 2/3 * 1/3
    D1 = 1 / 3
    P1 = {w: max(n - D1, 0) / 3 + D1 * 2 / 3 / 3 for w, n in {a: 2, b: 1, c: 0}.items()}
    assert math.isclose(sum(P1.values()), 1.0)
    p_a_after_b = (2 - D2) / 2 + D2 * 1 / 2 * P1[a]
    p_c_after_a = 0 + D2 * 2 / 3 * P1[c]
    p_a_after_c = P1[a]  # history c was never seen: the unigram level alone
    held_out = [b, a, c, a]
    byte_lengths = np.array([1, 2, 3])
    scored_bytes = byte_lengths[held_out[1:]].sum()  # the predicted tokens a, c, a: 5 bytes
    by_hand = -(math.log2(p_a_after_b) + math.log2(p_c_after_a) + math.log2(p_a_after_c)) / scored_bytes
    assert math.isclose(bits_per_byte(lm.token_nll(held_out), scored_bytes), by_hand, rel_tol=1e-12)


def test_five_gram_beats_unigram_on_stdlib_code():
    from hf_seq.data.tokenization import train_bpe_tokenizer

    texts = stdlib_texts(max_files=60)
    train_texts, held_out_texts = texts[:50], texts[50:]
    tokenizer = train_bpe_tokenizer(train_texts, vocab_size=800)
    encode = lambda docs: np.concatenate([tokenizer(t, add_special_tokens=False)["input_ids"] for t in docs])
    train, held_out = encode(train_texts), encode(held_out_texts)
    scored_bytes = int(token_byte_lengths(tokenizer)[held_out[1:]].sum())
    bpb = {
        o: bits_per_byte(KneserNeyLM(len(tokenizer), o).fit(train).token_nll(held_out), scored_bytes) for o in (1, 5)
    }
    assert bpb[5] < 0.75 * bpb[1], bpb


def test_sampling_is_reproducible_and_stops_at_eos():
    lm = KneserNeyLM(vocab_size=5, order=3).fit([0, 1, 2, 3] * 5)
    assert lm.next_token_probs([0, 1]).argmax() == 2  # the cycle's continuation dominates
    sample = lm.generate([0, 1], max_new_tokens=20, seed=3)
    assert len(sample) == 20 and sample == lm.generate([0, 1], max_new_tokens=20, seed=3)
    stopped = lm.generate([0, 1], max_new_tokens=20, seed=3, eos_token_id=3)
    assert stopped[-1] == 3 and 3 not in stopped[:-1]


@pytest.mark.parametrize("kwargs, match", [(dict(vocab_size=0), "vocab_size"), (dict(vocab_size=5, order=0), "order")])
def test_bad_arguments_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KneserNeyLM(**kwargs)


def test_out_of_vocabulary_ids_are_refused():
    with pytest.raises(ValueError, match="vocab_size=4"):
        KneserNeyLM(vocab_size=4, order=2).fit([0, 1, 4])
