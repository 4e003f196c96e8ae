"""The Kneser-Ney baseline: a distribution after every context, held-out scores equal to a hand computation of the
interpolated Kneser-Ney equations, a 5-gram that beats a unigram on standard-library code, a back-off trace that ends
at the model's own probabilities, and counts saved and loaded without a pickle."""

import itertools
import math

import numpy as np
import pytest

from hf_seq.baselines.ngram import KneserNeyLM
from hf_seq.data.corpora import stdlib_texts
from hf_seq.errors import InvalidValueError, MissingFileError
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


# ------------------------------------------------------------------------------------------------ the back-off trace
TRAIN = [0, 1, 2, 0, 1, 3, 0, 1, 2, 4, 2, 0, 1, 2]  # token 5 never occurs


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_backoff_ends_at_the_models_probability_for_seen_and_unseen_contexts(order):
    """The trace's last order is P(w | context) as next_token_probs and token_nll give it, for contexts seen in
    training, half seen ("4 1": "4" was, "4 1" was not), never seen (5), and tokens never seen after them."""
    lm = KneserNeyLM(vocab_size=6, order=order).fit(TRAIN)
    for context in ([0, 1], [4, 1], [5], [5, 5, 5], [2, 0], [3]):
        for w in range(6):
            trace = lm.backoff([*context, w])
            assert trace["probability"].shape == (len(context), order)
            assert trace["probability"][-1, -1] == pytest.approx(lm.next_token_probs(context)[w], rel=1e-12)
    stream = [0, 1, 2, 5, 1, 4, 1, 2, 3, 5, 5, 0]
    trace = lm.backoff(stream)
    np.testing.assert_allclose(trace["probability"][:, -1], np.exp(-lm.token_nll(stream)), rtol=1e-12)


def test_backoff_terms_are_the_interpolation_order_by_order():
    """P_k = share_k + weight_k P_{k-1} from P_0 = 1/V at every order, share and weight from the counts as the module
    docstring defines them, and an unseen history hands on P_{k-1} whole; bigram numbers by hand as in
    test_bits_per_byte_equals_a_hand_computation."""
    a, b, c = 0, 1, 2
    lm = KneserNeyLM(vocab_size=3, order=2).fit([a, b, a, b, a, a])
    trace = lm.backoff([b, a, c, a])  # rows: a after b, c after a, a after c
    D1, D2 = 1 / 3, 1 / 5
    np.testing.assert_allclose(trace["discount"], [D1, D2])
    below = np.hstack([np.full((3, 1), 1 / 3), trace["probability"][:, :-1]])
    np.testing.assert_allclose(trace["probability"], trace["share"] + trace["backoff_weight"] * below, rtol=1e-15)
    np.testing.assert_array_equal(trace["seen"], [[True, True], [True, True], [True, False]])  # c was never a history
    np.testing.assert_array_equal(trace["count"][:, 1], [2, 0, 0])  # "b a" twice, "a c" and "c a" never
    np.testing.assert_allclose(trace["share"][:, 1], [(2 - D2) / 2, 0, 0])
    np.testing.assert_allclose(trace["backoff_weight"][:, 1], [D2 * 1 / 2, D2 * 2 / 3, 1.0])
    np.testing.assert_allclose(trace["count"][:, 0], [2, 0, 2])  # continuation counts N1+(. w)
    assert lm.backoff([a])["probability"].shape == (0, 2)


# ------------------------------------------------------------------------------------------------ saving
def test_a_saved_ngram_loads_with_the_same_probabilities(tmp_path):
    rng = np.random.default_rng(2)
    lm = KneserNeyLM(vocab_size=20, order=4).fit(rng.integers(0, 18, size=500))
    lm.save_pretrained(tmp_path / "ngram")
    assert sorted(p.name for p in (tmp_path / "ngram").iterdir()) == ["ngram.safetensors", "ngram_config.json"]
    loaded = KneserNeyLM.from_pretrained(tmp_path / "ngram")
    assert (loaded.vocab_size, loaded.order) == (20, 4)
    held_out = rng.integers(0, 20, size=200)
    np.testing.assert_array_equal(loaded.token_nll(held_out), lm.token_nll(held_out))
    np.testing.assert_array_equal(loaded.next_token_probs([19, 3, 5]), lm.next_token_probs([19, 3, 5]))
    assert loaded.generate([1, 2], 15, seed=4) == lm.generate([1, 2], 15, seed=4)


def save_tiny(folder):
    KneserNeyLM(vocab_size=5, order=3).fit([0, 1, 2, 3] * 5).save_pretrained(folder)
    return folder


def test_a_folder_without_the_counts_is_refused_naming_the_file(tmp_path):
    (save_tiny(tmp_path) / "ngram.safetensors").unlink()
    with pytest.raises(MissingFileError, match=r"ngram\.safetensors does not exist; the folder should hold the n-gram"):
        KneserNeyLM.from_pretrained(tmp_path)
    with pytest.raises(MissingFileError, match="is not a folder"):
        KneserNeyLM.from_pretrained(tmp_path / "elsewhere")


def damaged_counts(change):
    """A damage that loads `ngram.safetensors`, changes its arrays in place and writes it back."""
    from safetensors.numpy import load_file, save_file

    def damage(folder):
        arrays = load_file(folder / "ngram.safetensors")
        change(arrays)
        save_file(arrays, folder / "ngram.safetensors")

    return damage


def damaged_file(name, content):
    return lambda folder: (folder / name).write_bytes(content)


CONFIG = b'{"model_type": "kneser_ney", "vocab_size": 5, "order": %d}'


@pytest.mark.parametrize(
    "damage, match",
    [
        (damaged_file("ngram.safetensors", b"\x10" + bytes(7) + b"{not json"), "not a readable safetensors file"),
        (damaged_file("ngram_config.json", b"{"), r"ngram_config\.json is not valid JSON"),
        (damaged_file("ngram_config.json", b'{"model_type": "gpt"}'), "model_type='gpt'"),
        (damaged_file("ngram_config.json", CONFIG % 0), "order=0; it must be a positive integer"),
        (damaged_file("ngram_config.json", CONFIG % 4), "holds the arrays"),  # a 3-gram's counts
        (damaged_counts(lambda a: a.update({"order_1.key": a["order_1.key"] + 1})), "not the vocabulary 0..4"),
        (damaged_counts(lambda a: a.update({"order_2.key": a["order_2.key"][::-1].copy()})), "not strictly increasing"),
        (damaged_counts(lambda a: a.update({"order_3.key": a["order_3.key"] + 10**6})), "keys outside"),
        (damaged_counts(lambda a: a.update({"order_1.count": -a["order_1.count"]})), "negative counts"),
        (damaged_counts(lambda a: a.update({"order_2.count": a["order_2.count"][:-1].copy()})), "keys int64"),
    ],
)
def test_a_damaged_file_is_refused_in_one_line(tmp_path, damage, match):
    damage(save_tiny(tmp_path))
    with pytest.raises(InvalidValueError, match=match) as caught:
        KneserNeyLM.from_pretrained(tmp_path)
    assert "\n" not in str(caught.value) and "KneserNeyLM.from_pretrained" in str(caught.value)


def test_an_unfitted_model_is_not_saved(tmp_path):
    with pytest.raises(RuntimeError, match="save_pretrained: the model holds no counts"):
        KneserNeyLM(vocab_size=5).save_pretrained(tmp_path)


def test_the_lineage_members_folder_holds_the_ngram_and_the_tokenizer(tmp_path):
    """What `hf-seq lineage` writes in `ngram/` beside the card, as a network's folder holds its model: the counts,
    their checksum, and the lineage's tokenizer, each loading back to what was saved."""
    from transformers import AutoTokenizer

    from hf_seq.data.tokenization import train_bpe_tokenizer
    from hf_seq.experiments.ngram_member import save_ngram
    from hf_seq.hub.checksums import verify_checksums

    texts = stdlib_texts(max_files=5)
    tokenizer = train_bpe_tokenizer(texts, vocab_size=300, show_progress=False)
    ids = np.concatenate([tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts])
    lm = KneserNeyLM(len(tokenizer), order=3).fit(ids)
    save_ngram(tmp_path, lm, tokenizer)
    assert verify_checksums(tmp_path) == ["ngram.safetensors"]
    assert AutoTokenizer.from_pretrained(tmp_path).get_vocab() == tokenizer.get_vocab()
    np.testing.assert_array_equal(KneserNeyLM.from_pretrained(tmp_path).token_nll(ids[:500]), lm.token_nll(ids[:500]))
