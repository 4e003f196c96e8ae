"""Translation as translators expect it: how outputs are decoded (beam search, length penalty, a length relative to
the source), what an evaluation reports (sacreBLEU with its signature, chrF, BLEU by source length, length ratio,
repetition rate), model selection on BLEU and checkpoint averaging."""

import json
import math
import subprocess
import sys

import pytest
import torch
from sacrebleu.metrics import BLEU

from hf_seq.evaluation.metrics import repeats_back_to_back, translation_metrics
from hf_seq.training.recipes import RecipeError, load_recipe


# ---------------------------------------------------------------------------------------------- the metrics
def test_bleu_by_length_is_corpus_bleu_within_each_source_length_bucket():
    sources = ["a b c", "a " * 14, "one two", "w " * 60]
    hypotheses = ["le chat noir", "il fait beau aujourd'hui", "un deux", "x y z"]
    references = ["le chat noir", "il fait très beau", "un trois", "x y z w"]
    got = translation_metrics(hypotheses, references, sources)
    buckets = {b["bucket"]: b for b in got["bleu_by_length"]}
    assert list(buckets) == ["1-10", "11-20", "51+"]
    assert buckets["1-10"]["sentences"] == 2 and buckets["51+"]["max_words"] is None
    short = BLEU().corpus_score([hypotheses[0], hypotheses[2]], [[references[0], references[2]]]).score
    assert buckets["1-10"]["bleu"] == pytest.approx(short)
    assert got["bleu"] == pytest.approx(BLEU().corpus_score(hypotheses, [references]).score)
    assert got["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert got["length_ratio"] == pytest.approx(12 / 13)  # words of the hypotheses / of the references


def test_repetition_rate_counts_hypotheses_that_loop():
    assert repeats_back_to_back("de la de la maison".split())
    assert repeats_back_to_back("pas pas".split())
    assert repeats_back_to_back("El el modo".split())  # case-insensitive
    assert repeats_back_to_back("un dispositivo de entrada de entrada".split())
    assert repeats_back_to_back("a b c d a b c d".split()) and not repeats_back_to_back("a b c d e a b c d e".split())
    assert not repeats_back_to_back("le chat de la maison de ma mère".split())  # repeated, but not back to back
    assert not repeats_back_to_back("archivo, archivo y carpeta".split())  # a list: the comma is part of the word
    assert not repeats_back_to_back("Ayuda → Ayuda".split())  # a menu path
    assert not repeats_back_to_back("uno - - dos * *".split())  # punctuation alone is not a word
    got = translation_metrics(["la la la", "un chat", "a b c d a b c d", "ok"], ["x"] * 4, ["s"] * 4)
    assert got["repetition_rate"] == pytest.approx(0.5)


# ---------------------------------------------------------------------------------------------- output lengths
def _silent_model(**config):
    """A tiny Bahdanau model that never chooses EOS on its own: every output runs to its length limit."""
    from hf_seq import BahdanauConfig, BahdanauForConditionalGeneration

    torch.manual_seed(0)
    keys = dict(vocab_size=40, embedding_size=8, hidden_size=8, deep_output_size=8, attention_size=8)
    model = BahdanauForConditionalGeneration(BahdanauConfig(**keys, **config)).eval()
    with torch.no_grad():
        model.lm_head.bias[model.config.eos_token_id] = -1e4
    return model


def _output_lengths(out, eos):
    """Tokens written before the first EOS (the start token left out)."""
    return [int((row[1:] == eos).nonzero()[0]) if (row[1:] == eos).any() else len(row) - 1 for row in out]


@pytest.mark.parametrize("beams", [1, 3])
def test_each_output_is_limited_by_its_own_source_length(beams):
    model = _silent_model()
    sources = torch.randint(3, 40, (3, 20))
    mask = torch.ones_like(sources)
    mask[1, 5:] = 0
    mask[2, 12:] = 0
    out = model.generate(input_ids=sources, attention_mask=mask, num_beams=beams)
    expected = [math.ceil(1.2 * n + 10) for n in (20, 5, 12)]  # the defaults: fairseq's a = 1.2, b = 10
    assert _output_lengths(out, model.config.eos_token_id) == expected
    out = model.generate(input_ids=sources, attention_mask=mask, num_beams=beams, max_length_a=0.5, max_length_b=2)
    assert _output_lengths(out, model.config.eos_token_id) == [12, 5, 8]
    # a fixed limit, from the call or the generation config, replaces the rule: never transformers' 20
    assert model.generate(input_ids=sources, attention_mask=mask, max_new_tokens=4).shape[1] == 5
    with pytest.raises(ValueError, match="max_length_a must be a number >= 0"):
        model.generate(input_ids=sources, max_length_a=-1)


# ---------------------------------------------------------------------------------------------- back-to-back repeats
def _stuttering_model(biases=(40.0, 30.0, 20.0, 10.0)):
    """A tiny Bahdanau model whose output layer prefers token 7, then 8, 9 and 10, whatever the source: left alone
    it writes 7 7 7 ..., the one-word stutter of an under-trained attention decoder."""
    model = _silent_model()
    with torch.no_grad():
        model.lm_head.bias[7 : 7 + len(biases)] = torch.tensor(biases)
    return model


def _words(row, word_start):
    """A row of tokens as words: a word is a token that starts one and the tokens that continue it."""
    words = []
    for i, token in enumerate(row):
        if i == 0 or word_start[token]:
            words.append([])
        words[-1].append(token)
    return [" ".join(map(str, w)) for w in words]


def _generate(model, sources, beams, tokens, *block):
    from transformers import LogitsProcessorList

    from hf_seq.models.seq2seq import BackToBackRepeatBlock

    processors = LogitsProcessorList([BackToBackRepeatBlock(*block)]) if block else None
    out = model.generate(input_ids=sources, num_beams=beams, max_new_tokens=tokens, logits_processor=processors)
    return out[:, 1:].tolist()


@pytest.mark.parametrize("beams", [1, 3])
def test_blocking_back_to_back_repeats_removes_the_stutter(beams):
    model, sources = _stuttering_model(), torch.randint(3, 40, (2, 10))
    word_start = torch.ones(40, dtype=torch.bool)
    word_start[9] = False  # 9 continues the word before it (and only 9 does)
    assert _generate(model, sources, beams, 12) == [[7] * 12] * 2  # the stutter the block is for
    for max_words in (1, 4):
        for row in _generate(model, sources, beams, 12, word_start, max_words):
            # the last word may be unfinished: max_new_tokens cuts where an EOS would wait for the word to go on
            words = _words(row, word_start)[:-1]
            assert len(row) == 12 and not repeats_back_to_back(words, longest=max_words), (max_words, row)
    # a repeat is known once its last word ends: "7 7" may go on as "7 79" (as "en entornos" is Ġen Ġen tornos)
    assert _generate(model, sources, 1, 4, word_start, 4) == [[7, 7, 9, 7]] * 2


def test_a_repeat_in_another_case_is_one_too():
    from hf_seq.models.seq2seq import BackToBackRepeatBlock

    word_start, word_key = torch.ones(40, dtype=torch.bool), torch.arange(40)
    word_start[9] = False  # 9 continues a word
    word_key[11] = 7  # 11 is 7 in another case: "Se se"
    outputs = torch.tensor([[2, 7, 11], [2, 7, 12]])  # the decoder's start token, then the output

    def allowed(*key):
        block = BackToBackRepeatBlock(word_start, 4, *key)
        block(outputs[:, :1], torch.zeros(2, 40))  # the first call sees the prompt alone
        finite = torch.isfinite(block(outputs, torch.zeros(2, 40)))
        return [row.nonzero().flatten().tolist() for row in finite]

    assert allowed() == [list(range(40))] * 2  # token ids alone: no repeat
    assert allowed(word_key)[0] == [9] and allowed(word_key)[1] == list(range(40))  # "7 11" must go on as "7 119"


def test_word_pieces_mark_word_starts_and_share_keys_across_case_and_the_space_marker(trained):
    from transformers import AutoTokenizer

    from hf_seq.data.tasks import word_pieces

    folder, _ = trained
    tokenizer = AutoTokenizer.from_pretrained(folder)
    starts, keys, inside = word_pieces(tokenizer)
    ids = tokenizer("le chat voit", add_special_tokens=False)["input_ids"]
    assert starts.shape == keys.shape == inside.shape == (len(tokenizer),) and len(ids) > 3  # words of a few tokens
    assert not starts[ids[0]] and starts[ids].sum() == 2  # "chat" and "voit" begin with a space, their pieces do not
    assert inside[ids].tolist() == (~starts[ids]).tolist()  # every other piece (letters) can continue a word
    assert not (starts | inside)[tokenizer.all_special_ids].any() and not (starts & inside).any()
    vocab = tokenizer.get_vocab()
    pairs = [(p, "Ġ" + p) for p in vocab if "Ġ" + p in vocab and p.isalpha()]
    assert pairs and all(keys[vocab[a]] == keys[vocab[b]] for a, b in pairs)  # "le" and " le": one key
    assert len(set(keys.tolist())) > len(tokenizer) / 2


# ---------------------------------------------------------------------------------------------- a trained run
WORDS = {"the": "le", "cat": "chat", "dog": "chien", "sees": "voit", "eats": "mange", "red": "rouge", "big": "grand",
         "small": "petit", "bird": "oiseau", "fish": "poisson", "and": "et", "sleeps": "dort", "runs": "court"}  # fmt: skip


def word_pairs(path, count: int, seed: int) -> str:
    """A learnable toy translation, word for word in the same order, 3-12 words a sentence, as a jsonl file."""
    import random

    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(count):
            words = [rng.choice(list(WORDS)) for _ in range(rng.randint(3, 12))]
            f.write(json.dumps({"source": " ".join(words), "target": " ".join(WORDS[w] for w in words)}) + "\n")
    return str(path)


TINY = {
    "family": "bahdanau",
    "task": "seq2seq",
    "model": {"hidden_size": 32, "embedding_size": 32, "attention_size": 32, "deep_output_size": 32,
              "initializer_range": 0.1},
    "tokenizer": {"vocab_size": 300, "min_frequency": 1},
    "data": {"block_size": 24, "eval_examples": 24},
    "training": {"max_steps": 60, "batch_size": 16, "learning_rate": 2e-2, "warmup_steps": 0, "eval_every": 12,
                 "save_every": 1000, "log_with": "none", "weight_decay": 0.0},
}  # fmt: skip


def _tiny(tmp_path, name, **training):
    recipe = json.loads(json.dumps(TINY))
    recipe["data"] |= {
        "dataset": word_pairs(tmp_path / "train.jsonl", 800, seed=0),
        "validation": word_pairs(tmp_path / "valid.jsonl", 24, seed=1),
    }
    recipe["training"] |= {"output_dir": str(tmp_path / name), **training}
    return load_recipe(recipe)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One run selecting on BLEU and averaging the last 3 evaluations' weights, shared by the tests below."""
    from hf_seq.training.pretraining import run

    tmp_path = tmp_path_factory.mktemp("translation")
    summary = run(_tiny(tmp_path, "run", select_by="bleu", average_checkpoints=3), progress=False)
    return tmp_path / "run", summary


def test_a_seq2seq_recipe_without_generation_keys_decodes_with_beams_and_a_length_penalty(trained):
    folder, summary = trained
    saved = json.loads((folder / "generation_config.json").read_text())
    assert saved["num_beams"] == 5 and saved["length_penalty"] == 1.0 and saved["early_stopping"] is True
    assert (saved["max_length_a"], saved["max_length_b"]) == (1.2, 10) and saved.get("max_length") is None
    assert summary["num_beams"] == 5 and summary["length_penalty"] == 1.0
    card = (folder / "README.md").read_text()
    assert "beam search of 5 with length penalty 1" in card and summary["eval_bleu_signature"] in card
    assert "chrF (sacrebleu) (validation)" in card

    out = subprocess.run(
        [sys.executable, "-m", "hf_seq.cli", "evaluate", str(folder), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, out.stderr
    metrics = json.loads(out.stdout)
    wanted = {"eval_bleu", "eval_bleu_signature", "eval_chrf", "eval_bleu_by_length", "eval_repetition_rate"}
    assert wanted | {"eval_length_ratio", "num_beams", "length_penalty"} <= set(metrics)
    assert metrics["eval_bleu"] == pytest.approx(summary["eval_bleu"])  # one evaluation, run and folder alike
    assert sum(b["sentences"] for b in metrics["eval_bleu_by_length"]) == metrics["eval_examples"] == 24


def test_the_folder_decodes_as_its_evaluations_did(trained):
    """pipeline("translation") and a bare generate() on the saved folder use its beams and length rule."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    folder, _ = trained
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    text = "the big cat sees the small bird"
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    explicit = model.generate(**ids, num_beams=5, length_penalty=1.0, early_stopping=True, max_length_a=1.2,
                              max_length_b=10)  # fmt: skip
    translated = pipeline("translation", model=folder)(text)[0]["translation_text"]
    assert translated == tokenizer.decode(explicit[0], skip_special_tokens=True)
    assert torch.equal(model.generate(**ids), explicit)
    assert model.generation_config.num_beams == 5  # the folder's default, not transformers' greedy one


def test_select_by_bleu_keeps_the_best_evaluation_and_averaging_lists_its_steps(trained):
    folder, summary = trained
    metrics = json.loads((folder / "metrics.json").read_text())
    bleus = {e["step"]: e["eval_bleu"] for e in metrics["evaluations"]}
    assert len(set(bleus.values())) > 2, f"BLEU hardly moved ({bleus}): the test does not test selection"
    best = max(bleus, key=bleus.get)  # the first of equals
    assert metrics["best_step"] == best and metrics["selected_by"] == "bleu"
    steps = sorted(bleus)
    assert metrics["averaged_checkpoints"] == [s for s in steps if s <= best][-3:]


def test_the_saved_weights_are_the_mean_of_the_averaged_evaluations(tmp_path):
    from safetensors.torch import load_file

    from hf_seq.training.pretraining import run

    summary = run(_tiny(tmp_path, "avg", average_checkpoints=2, max_steps=24), progress=False)
    assert summary["averaged_checkpoints"] == [12, 24]
    snapshots = [
        load_file(tmp_path / "avg" / "checkpoints" / "average" / f"step-{s:08d}.safetensors") for s in (12, 24)
    ]
    saved = load_file(tmp_path / "avg" / "model.safetensors")
    assert not torch.equal(snapshots[0]["lm_head.weight"], snapshots[1]["lm_head.weight"])
    for name, tensor in saved.items():
        if name in snapshots[0]:
            torch.testing.assert_close(tensor, (snapshots[0][name] + snapshots[1][name]) / 2)
    from hf_seq.training.pretraining import evaluate_folder

    assert evaluate_folder(tmp_path / "avg")["eval_loss"] == pytest.approx(summary["eval_loss"])


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        ({"family": "gpt", "training": {"select_by": "bleu"}}, "'bleu' scores generated translations"),
        ({"family": "bahdanau", "task": "seq2seq", "training": {"average_checkpoints": 1}}, "average_checkpoints"),
        ({"family": "bahdanau", "task": "seq2seq", "training": {"generation_max_length_a": -1}}, "max_length_a"),
        ({"family": "bahdanau", "task": "seq2seq", "training": {"select_by": "bleu!"}}, "allowed values"),
    ],
)
def test_bad_selection_and_decoding_keys_are_refused_by_name(recipe, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe(recipe)


# ---------------------------------------------------------------------------------------------- small-data settings
@pytest.mark.parametrize("family", ["bahdanau", "transformer"])
def test_source_word_dropout_drops_whole_source_tokens_in_training_only(family):
    from hf_seq.registry import family as get_family

    fam = get_family(family)
    if family == "bahdanau":
        keys = dict(embedding_size=8, hidden_size=8, deep_output_size=8, attention_size=8)
    else:
        keys = dict(hidden_size=8, num_attention_heads=2, intermediate_size=16, num_hidden_layers=1, dropout=0.0)
    keys |= dict(vocab_size=50, source_word_dropout=0.5)
    model = fam.model_class("AutoModelForSeq2SeqLM")(fam.config_class(**keys))
    encoder = model.get_encoder()
    seen = {}
    encoder.word_dropout.register_forward_hook(lambda module, args, out: seen.update(out=out, inp=args[0]))
    source = torch.randint(3, 50, (4, 30))
    model.train()
    torch.manual_seed(0)
    model(input_ids=source, labels=source)
    zeroed = seen["out"].abs().sum(-1).eq(0)
    assert 0.3 < zeroed.float().mean() < 0.7  # whole vectors, about half of them
    kept = ~zeroed
    torch.testing.assert_close(seen["out"][kept], seen["inp"][kept] * 2)
    model.eval()
    model(input_ids=source, labels=source)
    assert torch.equal(seen["out"], seen["inp"])
    with pytest.raises(ValueError, match="source_word_dropout"):
        fam.config_class(**(keys | {"source_word_dropout": 1.5}))


def test_the_gettext_pairs_come_in_an_order_that_any_first_n_samples_fairly():
    """Capped or cut, the embedded pairs must not be the alphabetically first messages (punctuation and format
    strings), which made the held-out BLEU of the gettext recipes a score on "%s" tokens."""
    from hf_seq.data.corpora import gettext_pairs
    from hf_seq.errors import MissingFileError

    try:
        rows = gettext_pairs("fr")
    except MissingFileError:
        pytest.skip("no French gettext catalogs on this machine")
    if len(rows) < 2000:
        pytest.skip("too few French gettext messages on this machine")
    starts_with_letter = lambda group: sum(r["source"][0].isalpha() for r in group) / len(group)  # noqa: E731
    assert abs(starts_with_letter(rows[:500]) - starts_with_letter(rows)) < 0.08
    assert rows == gettext_pairs("fr")  # a fixed order
