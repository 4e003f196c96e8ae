"""The studio's token-by-token views (hf_seq/studio/tokens.py), on tiny untrained models of every causal family and a
trigram fitted here: the surprisal strip averages to the model's own loss, the back-off probabilities are the
n-gram's, the reach's gradients vanish exactly outside the conv LM's and the window's context, and the sampling view
shows the distribution generate() samples from."""

import io
import math

import numpy as np
import pytest
import torch

from hf_seq.baselines.ngram import KneserNeyLM
from hf_seq.data.tokenization import train_bpe_tokenizer
from hf_seq.registry import family
from hf_seq.studio import Loaded, to_csv
from hf_seq.studio import tokens as views

TEXT = "the cat sat on the mat and the dog ran in the park"
CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the dog sat in the sun", "the cat ran"] * 10

GPT = dict(
    hidden_size=32,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    num_hidden_layers=2,
    embedding_dropout=0.0,
    attention_dropout=0.0,
    hidden_dropout=0.0,
)
CAUSAL = {
    "gpt": GPT,
    "rnn": dict(hidden_size=16, embedding_size=12, num_hidden_layers=1, dropout=0.0),
    "ssm": dict(hidden_size=16, num_hidden_layers=2, state_size=4),
    "conv": dict(hidden_size=16, kernel_size=2, dilation_cycle=2, num_blocks=1, skip_channels=16),  # R = 4
    "window": dict(context_size=3, embedding_size=8, hidden_size=16),
    "hmm": dict(num_states=8),
}


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(CORPUS, vocab_size=300, show_progress=False)


def build(kind: str, tokenizer, auto_class: str = "AutoModelForCausalLM", name: str | None = None, **config):
    """A tiny untrained model of the family `kind`, in eval mode, as the studio holds it."""
    entry = family(kind)
    torch.manual_seed(0)
    special = dict(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    config = entry.config_class(vocab_size=len(tokenizer), **special, **config)
    return Loaded(name or kind, entry.model_class(auto_class)(config).eval(), tokenizer, kind)


@pytest.fixture(scope="module")
def models(tokenizer):
    return {kind: build(kind, tokenizer, **config) for kind, config in CAUSAL.items()}


@pytest.fixture(scope="module")
def trigram(tokenizer):
    ids = [i for line in CORPUS for i in tokenizer(line + "\n", add_special_tokens=False)["input_ids"]]
    return Loaded("trigram", None, tokenizer, "ngram", ngram=KneserNeyLM(len(tokenizer), order=3).fit(ids))


def ids_of(tokenizer, text: str = TEXT) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------------------------------------- 1. surprisal
@pytest.mark.parametrize("kind", list(CAUSAL))
def test_mean_surprisal_is_the_models_loss(models, kind):
    """The strip's mean over the predicted tokens, in nats, is the model's own shifted cross-entropy on the text;
    the first token has no prediction."""
    loaded = models[kind]
    result = views.surprisal(loaded, TEXT)
    ids = torch.tensor([result["ids"]])
    with torch.no_grad():
        loss = loaded.model(input_ids=ids, labels=ids).loss.item()
    assert math.isnan(result["bits"][0]) and not np.isnan(result["bits"][1:]).any()
    assert result["mean_bits"] * math.log(2) == pytest.approx(loss, rel=1e-5)
    assert np.nanmean(result["bits"]) == pytest.approx(result["mean_bits"])
    assert result["tokens"] == [loaded.tokenizer.decode([i]) for i in result["ids"]]


def test_ngram_surprisal_is_its_token_nll(trigram):
    result = views.surprisal(trigram, TEXT)
    nll = trigram.ngram.token_nll(ids_of(trigram.tokenizer))
    np.testing.assert_allclose(result["bits"][1:] * math.log(2), nll, rtol=1e-12)
    assert result["mean_bits"] * math.log(2) == pytest.approx(nll.mean(), rel=1e-12)


@pytest.mark.parametrize("which", ["gpt", "trigram"])
def test_topk_agrees_with_the_strip(models, trigram, which):
    """The probability topk at position t gives the text's next token is 2^-bits of the strip at t + 1, its rank
    counts the candidates above it, and the candidates come most probable first."""
    loaded = trigram if which == "trigram" else models[which]
    bits = views.surprisal(loaded, TEXT)["bits"]
    for position in (0, 5, len(bits) - 2):
        result = views.topk(loaded, TEXT, position, k=300)
        assert result["actual_probability"] == pytest.approx(2.0 ** -bits[position + 1], rel=1e-5)
        assert np.all(np.diff(result["probabilities"]) <= 0)
        assert result["probabilities"].sum() == pytest.approx(1.0, abs=1e-4)
        rank, actual = result["actual_rank"], ids_of(loaded.tokenizer)[position + 1]
        assert result["probabilities"][rank - 1] == result["actual_probability"]  # ties share the rank
        assert rank == 1 or result["probabilities"][rank - 2] > result["actual_probability"]
        assert result["probabilities"][result["ids"].index(actual)] == result["actual_probability"]
    after = views.topk(loaded, TEXT, len(bits) - 1, k=3)
    assert after["actual"] is None and len(after["tokens"]) == 3
    with pytest.raises(ValueError, match=f"position {len(bits)} is outside"):
        views.topk(loaded, TEXT, len(bits))


def test_a_long_text_is_cut_to_the_position_table(models):
    """GPT's table holds 64 positions: its strip stops there, a comparison with the RNN reads the same 64 tokens, and
    sampling continues the text's end."""
    long_text = " ".join([TEXT] * 10)
    assert len(views.surprisal(models["rnn"], long_text)["tokens"]) > 64
    assert len(views.surprisal(models["gpt"], long_text)["tokens"]) == 64
    assert len(views.compare(models["gpt"], models["rnn"], long_text)["tokens"]) == 64
    assert len(views.sampling(models["gpt"], long_text, length=8)["sample"]["ids"]) <= 8


def test_views_refuse_what_they_cannot_read(tokenizer, models):
    bert = build("bert", tokenizer, "AutoModelForMaskedLM", **GPT)
    with pytest.raises(ValueError, match="not a causal language model"):
        views.surprisal(bert, TEXT)
    with pytest.raises(ValueError, match="no tokens"):
        views.surprisal(models["gpt"], "")
    with pytest.raises(ValueError, match="not an n-gram"):
        views.ngram_backoff(models["gpt"], TEXT)


# ---------------------------------------------------------------------------------------------- 2, 3. side by side
def test_compare_is_the_difference_of_the_two_strips(models, trigram):
    a, b = trigram, models["gpt"]
    result = views.compare(a, b, TEXT, k=3)
    bits_a, bits_b = views.surprisal(a, TEXT)["bits"], views.surprisal(b, TEXT)["bits"]
    np.testing.assert_allclose(result["difference"], bits_a - bits_b)
    assert result["total_a"] == pytest.approx(np.nansum(bits_a))
    assert result["total_b"] == pytest.approx(np.nansum(bits_b))
    np.testing.assert_allclose(result["cumulative_b"][1:], np.cumsum(bits_b[1:]))
    difference = np.nan_to_num(result["difference"])
    a_wins = [i for i, w in enumerate(result["winner"]) if w == a.name]
    b_wins = [i for i, w in enumerate(result["winner"]) if w == b.name]
    assert sorted(difference[a_wins]) == sorted(np.sort(difference)[:3][np.sort(difference)[:3] < 0])
    assert sorted(difference[b_wins]) == sorted(np.sort(difference)[-3:][np.sort(difference)[-3:] > 0])
    assert to_csv(result).splitlines()[0].startswith("token,ids,bits_a,bits_b,difference")


def test_compare_refuses_two_tokenizers(models):
    other_tokenizer = train_bpe_tokenizer(["completely different words here"] * 10, vocab_size=280, show_progress=False)
    other = build("gpt", other_tokenizer, name="other-gpt", **GPT)
    with pytest.raises(ValueError, match="gpt and other-gpt do not share a tokenizer"):
        views.compare(models["gpt"], other, TEXT)


def test_lineage_strip_holds_every_models_strip(models, trigram):
    members = [trigram, models["rnn"], models["gpt"]]
    result = views.lineage_strip(members, TEXT)
    assert result["row_labels"] == ["trigram", "rnn", "gpt"]
    assert result["column_labels"] == views.surprisal(trigram, TEXT)["tokens"]
    for row, loaded in zip(result["matrix"], members):
        np.testing.assert_allclose(row, views.surprisal(loaded, TEXT)["bits"])
    assert result["vmax"] == pytest.approx(np.nanmax(result["matrix"]))
    assert len(to_csv(result).splitlines()) == 1 + len(members)


# ---------------------------------------------------------------------------------------------- 8. context reach
@pytest.mark.parametrize("kind, reach", [("conv", 4), ("window", 3)])
def test_the_gradient_vanishes_exactly_outside_the_stated_reach(models, kind, reach):
    """The prediction made at token 10 reads tokens 10 - reach + 1 .. 10: the gradient of its log-probability is
    nonzero at each of their embeddings and exactly zero at every other token's."""
    position = 10
    result = views.context_reach(models[kind], TEXT, position)
    inside = np.arange(position + 1 - reach, position + 1)
    assert result["reach"] == reach
    np.testing.assert_array_equal(np.flatnonzero(result["in_reach"]), inside)
    assert np.all(result["influence"][inside] > 0)
    outside = np.setdiff1d(np.arange(len(result["tokens"])), inside)
    np.testing.assert_array_equal(result["influence"][outside], 0.0)
    assert result["target"] == result["tokens"][position + 1]
    assert all(p.grad is None for p in models[kind].model.parameters())  # the view leaves no gradients behind


@pytest.mark.parametrize("kind", ["gpt", "rnn", "ssm", "hmm"])
def test_every_token_so_far_reaches_the_others(models, kind):
    position = 8
    result = views.context_reach(models[kind], TEXT, position)
    assert result["reach"] == position + 1
    np.testing.assert_array_equal(np.flatnonzero(result["in_reach"]), np.arange(position + 1))
    assert np.all(result["influence"][: position + 1] > 0)
    np.testing.assert_array_equal(result["influence"][position + 1 :], 0.0)


def test_reach_after_the_text_differentiates_the_most_probable_token(models):
    loaded = models["window"]
    last = len(ids_of(loaded.tokenizer)) - 1
    result = views.context_reach(loaded, TEXT, last)
    assert result["target"] == views.topk(loaded, TEXT, last, k=1)["tokens"][0]
    assert np.count_nonzero(result["influence"]) == 3 and result["influence"][last] > 0


def test_ngram_reach_is_its_order(trigram):
    result = views.context_reach(trigram, TEXT, 6)
    np.testing.assert_array_equal(np.flatnonzero(result["in_reach"]), [5, 6])
    assert np.isnan(result["influence"]).all()


# ---------------------------------------------------------------------------------------------- 9. back-off
def test_backoff_probabilities_are_the_ngrams(trigram):
    result = views.ngram_backoff(trigram, TEXT)
    ids = ids_of(trigram.tokenizer)
    np.testing.assert_allclose(result["probability"][1:], np.exp(-trigram.ngram.token_nll(ids)), rtol=1e-12)
    order = result["order"][1:]
    assert set(order) <= {1, 2, 3} and order[0] == 2  # the second token has one token of history
    assert (order == 3).any()  # the text repeats trigrams of the corpus
    tables = trigram.ngram.orders
    for t in range(1, len(ids)):
        k = int(result["order"][t])
        assert result["discount"][t] == tables[k]["discount"]
        assert 0 <= result["backoff_weight"][t] < 1 and result["count"][t] >= 0
    assert math.isnan(result["probability"][0])


def test_backoff_sees_an_unseen_history():
    """A history never seen at order 3 leaves the token at order 2, with the plain bigram arithmetic."""
    lm = KneserNeyLM(5, order=3).fit([0, 1, 2, 0, 1, 3, 0, 1, 2])

    class Tokenizer:  # ids as characters "0".."4"
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [int(c) for c in text]}

        def decode(self, ids):
            return "".join(str(i) for i in ids)

    result = views.ngram_backoff(Loaded("tiny", None, Tokenizer(), "ngram", ngram=lm), "2123")
    np.testing.assert_array_equal(result["order"][1:], [2, 2, 3])  # "2 1" never occurred, "1 2" did
    # order 2 counts continuations: "1 2" follows only 0, so 1; order 3 plain counts: "1 2 3" never occurred
    np.testing.assert_array_equal(result["count"][2:], [1, 0])
    # "2" after "1" at order 2: D_2 = 4 / (4 + 2 * 1) (bigram continuation counts 2, 1, 1, 1, 1), and "1" is followed
    # by 2 distinct tokens in 2 continuations, so the back-off weight is D_2 * 2 / 2
    assert result["backoff_weight"][2] == pytest.approx(2 / 3, rel=1e-12)
    np.testing.assert_allclose(result["probability"][1:], np.exp(-lm.token_nll([2, 1, 2, 3])), rtol=1e-12)


# ---------------------------------------------------------------------------------------------- 10. sampling
@pytest.mark.parametrize("kind", ["gpt", "rnn", "conv"])
def test_sampling_shows_what_generate_samples_from(models, kind):
    """`after` is softmax of the scores generate() samples from (top_k=0 really switches top-k off, not back to its
    default of 50), the same seed draws the same sample, and every first sampled token survived the truncation."""
    loaded = models[kind]
    settings = dict(temperature=0.7, top_k=0, top_p=0.9)
    result = views.sampling(loaded, TEXT, seed=3, length=6, top=300, **settings)
    ids = torch.tensor([ids_of(loaded.tokenizer)])
    torch.manual_seed(0)
    generated = loaded.model.generate(
        ids, do_sample=True, max_new_tokens=1, output_scores=True, return_dict_in_generate=True, **settings
    )
    expected = torch.softmax(generated.scores[0][0].double(), -1).numpy()
    np.testing.assert_allclose(result["after"], expected[result["ids"]], atol=1e-6)
    assert result["kept"] == np.count_nonzero(expected)
    assert views.sampling(loaded, TEXT, seed=3, length=6, **settings)["sample"] == result["sample"]
    kept = {i for i, p in zip(result["ids"], result["after"]) if p > 0}
    for seed in range(8):
        first = views.sampling(loaded, TEXT, seed=seed, length=1, temperature=1.3, top_k=5)
        assert first["sample"]["ids"][0] in {i for i, p in zip(first["ids"], first["after"]) if p > 0}
    assert kept and len(result["sample"]["ids"]) <= 6


def test_sampling_truncates_as_asked(models, trigram):
    for loaded in (models["gpt"], trigram):
        result = views.sampling(loaded, TEXT, top_k=4, seed=1, length=5)
        kept = result["kept"]  # 4, or more where the 4th probability is tied (TopKLogitsWarper keeps ties)
        assert kept >= 4 and np.count_nonzero(result["after"]) == kept and np.all(result["after"][kept:] == 0)
        assert kept == 4 or result["before"][3] == result["before"][kept - 1]
        np.testing.assert_allclose(result["after"][:kept], result["before"][:kept] / result["before"][:kept].sum())
        assert views.sampling(loaded, TEXT, top_k=4, seed=1, length=5)["sample"] == result["sample"]
        assert len(result["sample"]["ids"]) == 5 or loaded.ngram is None
    state = torch.random.get_rng_state()
    views.sampling(models["gpt"], TEXT, seed=5, length=3)
    assert torch.equal(state, torch.random.get_rng_state())  # the view keeps the caller's random state


# ---------------------------------------------------------------------------------------------- figures and CSV
def test_every_view_draws_and_writes_csv(models, trigram):
    gpt = models["gpt"]
    results = {
        "surprisal": views.surprisal(gpt, TEXT),
        "topk": views.topk(gpt, TEXT, 3),
        "topk_end": views.topk(gpt, TEXT, len(ids_of(gpt.tokenizer)) - 1),
        "compare": views.compare(trigram, gpt, TEXT),
        "lineage_strip": views.lineage_strip([trigram, gpt], TEXT),
        "context_reach": views.context_reach(models["conv"], TEXT, 6),
        "ngram_backoff": views.ngram_backoff(trigram, TEXT),
        "sampling": views.sampling(gpt, TEXT, top_k=10, length=4),
    }
    for name, result in results.items():
        buffer = io.BytesIO()
        getattr(views, f"figure_{name.removesuffix('_end')}")(result).savefig(buffer, format="png")
        assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n", name
        rows = to_csv(result).splitlines()
        assert len(rows) == 1 + len(result.get("row_labels") or result["tokens"]), name
