import random

import datasets
import pytest
import torch
import transformers

from hf_seq import (
    BERTConfig,
    BERTForMaskedLM,
    BERTForQuestionAnswering,
    BERTForSequenceClassification,
    BERTForTokenClassification,
    BERTModel,
)
from hf_seq.convert import from_transformers, to_transformers
from hf_seq.data.corpora import masked_lm_collator, packed_mlm_dataset
from hf_seq.data.tokenization import train_bpe_tokenizer
from hf_seq.evaluation.metrics import classification_metrics, entity_spans, token_classification_metrics
from hf_seq.pipelines.qa import best_span
from tests.tester import ModelTesterMixin


class TestBERT(ModelTesterMixin):
    family = "hf_seq_bert"
    config_kwargs = dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=32
    )
    no_dropout = dict(hidden_dropout=0.0, attention_dropout=0.0)
    is_causal = False

    @property
    def trained_class(self):
        return BERTForMaskedLM


class TestBERTPreLN(TestBERT):
    config_overrides = dict(norm_position="pre", hidden_act="gelu_new")
    expensive_checks = False


class TestBERTEager(TestBERT):
    config_overrides = dict(attn_implementation="eager", norm_type="rmsnorm", hidden_act="swiglu")
    expensive_checks = False


TINY = dict(vocab_size=99, **TestBERT.config_kwargs)
WORDS = "the cat sat on a mat while dog ran to park and bird sang in tree".split()


def corpus(n=300, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 20))) for _ in range(n)]


def bert_tokenizer():
    return train_bpe_tokenizer(corpus(), vocab_size=300, style="bert", model_max_length=32)


def make(cls, seed=0, **overrides):
    torch.manual_seed(seed)
    return cls(BERTConfig(**{**TINY, **overrides})).eval()


@pytest.mark.parametrize(
    "option, value",
    [("norm_type", "batchnorm"), ("norm_position", "middle"), ("hidden_act", "tanh")],
)
def test_config_rejects_unknown_values_listing_the_allowed_ones(option, value):
    with pytest.raises(ValueError, match=rf"{option}='{value}' is not supported; allowed values: \["):
        BERTConfig(**TINY, **{option: value})


def test_config_accepts_berts_own_dropout_names():
    config = BERTConfig(**TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.2)
    assert (config.hidden_dropout, config.attention_dropout) == (0.0, 0.2)
    with pytest.raises(ValueError, match="divisible"):
        BERTConfig(**dict(TINY, num_attention_heads=5))


def test_mlm_loss_is_the_mean_over_positions_not_labelled_minus_100():
    model = make(BERTForMaskedLM)
    ids = torch.randint(3, 99, (2, 8))
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 5], labels[1, 6] = 7, 8, 9
    with torch.no_grad():
        logits = model(ids).logits
        loss = model(ids, labels=labels).loss
        single = model(ids, labels=torch.where(torch.arange(8) == 2, labels, -100)).loss
    kept = labels != -100
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(logits[kept], labels[kept]))
    torch.testing.assert_close(single, torch.nn.functional.cross_entropy(logits[0, 2:3], labels[0, 2:3]))
    assert not torch.allclose(loss, torch.nn.functional.cross_entropy(logits.reshape(-1, 99), ids.reshape(-1)))


def test_mlm_training_scores_only_labelled_positions_with_the_full_loss_and_gradients():
    """In training the head runs on the positions with a label only; loss and every gradient equal the full
    computation's (logits for all positions), also with Trainer's num_items_in_batch."""
    ids = torch.randint(3, 99, (3, 10))
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, -100)
    labels[0, 0], labels[2, :] = 5, -100  # a row with nothing to predict
    for kwargs in ({}, {"num_items_in_batch": torch.tensor(11)}):
        grads, losses = [], []
        for full in (False, True):
            model = make(BERTForMaskedLM, hidden_dropout=0.0, attention_dropout=0.0).train()
            out = model(ids, labels=labels, full_logits=full, **kwargs)
            out.loss.backward()
            losses.append(out.loss.detach())
            grads.append({n: p.grad for n, p in model.named_parameters() if p.grad is not None})
        kept = labels != -100
        assert out.logits.shape == (3, 10, 99)
        sparse_logits = make(BERTForMaskedLM, hidden_dropout=0.0, attention_dropout=0.0).train()(ids, labels=labels)
        assert sparse_logits.logits.shape == (int(kept.sum()), 99)
        torch.testing.assert_close(sparse_logits.logits, out.logits[kept].detach())
        torch.testing.assert_close(losses[0], losses[1])
        assert grads[0].keys() == grads[1].keys() and len(grads[0]) == len(list(model.parameters()))
        for name in grads[0]:
            torch.testing.assert_close(grads[0][name], grads[1][name], msg=name)


def test_mlm_logits_cover_every_position_without_labels_and_in_eval_mode():
    model = make(BERTForMaskedLM).train()
    ids = torch.randint(3, 99, (2, 7))
    labels = torch.where(torch.arange(7) == 3, ids, -100)
    assert model(ids).logits.shape == (2, 7, 99)
    assert model.eval()(ids, labels=labels).logits.shape == (2, 7, 99)


def test_decoder_is_tied_to_word_embeddings_with_its_own_bias():
    model = make(BERTForMaskedLM)
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert model.lm_head.decoder.bias.shape == (99,)
    model.resize_token_embeddings(120)
    assert model.lm_head.decoder.weight is model.model.embeddings.word_embeddings.weight
    assert model(torch.randint(3, 99, (1, 5))).logits.shape == (1, 5, 120)


def test_token_type_ids_change_the_output_and_default_to_zero():
    model = make(BERTModel)
    ids = torch.randint(3, 99, (2, 6))
    types = torch.tensor([[0, 0, 0, 1, 1, 1]] * 2)
    with torch.no_grad():
        plain = model(ids).last_hidden_state
        zeros = model(ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        pair = model(ids, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(plain, zeros)
    assert not torch.allclose(pair, plain)


def test_pooler_reads_the_first_token_and_add_pooling_layer_false_removes_it():
    model = make(BERTModel)
    out = model(torch.randint(3, 99, (2, 6)))
    torch.testing.assert_close(out.pooler_output, torch.tanh(model.pooler.dense(out.last_hidden_state[:, 0])))
    bare = BERTModel(BERTConfig(**TINY), add_pooling_layer=False)
    assert bare.pooler is None and bare(torch.randint(3, 99, (1, 4))).pooler_output is None
    assert not any("pooler" in name for name, _ in make(BERTForMaskedLM).named_parameters())


def test_pre_ln_has_a_final_norm_and_no_embedding_norm():
    post, pre = make(BERTModel), make(BERTModel, norm_position="pre")
    assert isinstance(post.embeddings.norm, torch.nn.LayerNorm) and isinstance(post.norm, torch.nn.Identity)
    assert isinstance(pre.embeddings.norm, torch.nn.Identity) and isinstance(pre.norm, torch.nn.LayerNorm)


def test_attention_kernels_agree_with_padding():
    ids = torch.randint(3, 99, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0
    for position in ("post", "pre"):
        model = make(BERTForMaskedLM, norm_position=position)
        outputs = {}
        for impl in ("eager", "sdpa"):
            model.set_attn_implementation(impl)
            with torch.no_grad():
                outputs[impl] = model(ids, attention_mask=mask).logits
        real = mask.bool()
        torch.testing.assert_close(outputs["eager"][real], outputs["sdpa"][real], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "problem_type, labels",
    [
        ("regression", torch.tensor([0.5, -1.0, 2.0, 0.0])),
        ("single_label_classification", torch.tensor([0, 2, 1, 2])),
        ("multi_label_classification", torch.tensor([[1.0, 0, 1], [0, 0, 1], [1, 1, 0], [0, 0, 0]])),
    ],
)
def test_sequence_classification_losses_and_accumulation(problem_type, labels):
    """Each problem type gets transformers' loss, and with Trainer's `num_items_in_batch` the micro-batch losses of
    an accumulated batch sum to the full batch's loss (what makes gradient accumulation exact)."""
    num_labels = 1 if problem_type == "regression" else 3
    model = make(BERTForSequenceClassification, num_labels=num_labels, problem_type=problem_type)
    ids = torch.randint(3, 99, (4, 6))
    with torch.no_grad():
        out = model(ids, labels=labels)
        logits = out.logits
        expected = {
            "regression": lambda: torch.nn.functional.mse_loss(logits.squeeze(-1), labels),
            "single_label_classification": lambda: torch.nn.functional.cross_entropy(logits, labels),
            "multi_label_classification": lambda: torch.nn.functional.binary_cross_entropy_with_logits(logits, labels),
        }[problem_type]()
        torch.testing.assert_close(out.loss, expected)
        total = torch.tensor(labels.numel())
        halves = [model(ids[s], labels=labels[s], num_items_in_batch=total).loss for s in (slice(0, 1), slice(1, 4))]
    torch.testing.assert_close(sum(halves), out.loss)


def test_question_answering_loss_ignores_positions_past_the_sequence():
    model = make(BERTForQuestionAnswering)
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        out = model(ids, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 4]))
        start, end = out.start_logits, out.end_logits
        by_hand = (
            torch.nn.functional.cross_entropy(start, torch.tensor([1, 2]))
            + torch.nn.functional.cross_entropy(end, torch.tensor([3, 4]))
        ) / 2
        torch.testing.assert_close(out.loss, by_hand)
        far = model(ids, start_positions=torch.tensor([1, 50]), end_positions=torch.tensor([3, 50])).loss
        first = (
            torch.nn.functional.cross_entropy(start[:1], torch.tensor([1]))
            + torch.nn.functional.cross_entropy(end[:1], torch.tensor([3]))
        ) / 2
    torch.testing.assert_close(far, first)
    assert start.shape == end.shape == (2, 6)


def test_token_classification_ignores_minus_100():
    model = make(BERTForTokenClassification, num_labels=3)
    ids = torch.randint(3, 99, (2, 5))
    labels = torch.tensor([[-100, 1, 2, 0, -100], [-100, 0, -100, 2, -100]])
    with torch.no_grad():
        out = model(ids, labels=labels)
    kept = labels != -100
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits[kept], labels[kept]))


# ---------------------------------------------------------------- conversion to and from transformers' BERT
def randomize(model, seed=0):
    """Every parameter random (biases and norms too), so that a swapped or missing tensor shows in the outputs."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            base = 1.0 if "norm" in name.lower() and name.endswith("weight") else 0.0
            param.copy_(base + 0.1 * torch.randn(param.shape, generator=g))
    return model.eval()


def reference_bert(cls, **overrides):
    kwargs = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        type_vocab_size=2,
    )
    torch.manual_seed(0)
    return randomize(cls(transformers.BertConfig(**{**kwargs, **overrides})))


def pair_inputs():
    ids = torch.randint(3, 99, (2, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # right padding, as BERT's tokenizers pad
    types = torch.tensor([[0] * 5 + [1] * 4, [0] * 3 + [1] * 3 + [0] * 3])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_bert_model_converts_both_ways_with_equal_outputs(implementation):
    reference = reference_bert(transformers.BertModel)
    reference.set_attn_implementation(implementation)
    ours = from_transformers(reference)
    assert type(ours) is BERTModel and ours.config._attn_implementation == implementation
    inputs, real = pair_inputs(), pair_inputs()["attention_mask"].bool()
    with torch.no_grad():
        expected, got = reference(**inputs), ours(**inputs)
        back = to_transformers(ours)(**inputs)
    torch.testing.assert_close(got.last_hidden_state[real], expected.last_hidden_state[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(got.pooler_output, expected.pooler_output, rtol=0, atol=1e-5)
    torch.testing.assert_close(back.last_hidden_state, expected.last_hidden_state, rtol=0, atol=0)


def test_bert_masked_lm_converts_both_ways_with_equal_logits():
    reference = reference_bert(transformers.BertForMaskedLM)
    ours = from_transformers(reference)
    assert type(ours) is BERTForMaskedLM
    assert ours.lm_head.decoder.weight is ours.model.embeddings.word_embeddings.weight
    inputs, real = pair_inputs(), pair_inputs()["attention_mask"].bool()
    labels = torch.where(real, inputs["input_ids"], -100)
    with torch.no_grad():
        expected, got = reference(**inputs, labels=labels), ours(**inputs, labels=labels)
    torch.testing.assert_close(got.logits[real], expected.logits[real], rtol=0, atol=1e-5)
    torch.testing.assert_close(got.loss, expected.loss, rtol=0, atol=1e-5)
    back = to_transformers(randomize(ours, seed=3))
    assert type(back) is transformers.BertForMaskedLM
    with torch.no_grad():
        torch.testing.assert_close(back(**inputs).logits[real], ours(**inputs).logits[real], rtol=0, atol=1e-5)


def test_bert_conversion_refuses_what_the_other_side_cannot_represent():
    with pytest.raises(ValueError, match="norm_position='pre'"):
        to_transformers(make(BERTModel, norm_position="pre"))
    with pytest.raises(ValueError, match="hidden_act='swiglu'"):
        to_transformers(make(BERTForMaskedLM, hidden_act="swiglu"))
    with pytest.raises(ValueError, match="is_decoder"):
        from_transformers(reference_bert(transformers.BertModel, is_decoder=True))


def test_a_bert_checkpoint_saved_by_transformers_converts_with_the_same_embeddings(tmp_path):
    """config.json + model.safetensors + tokenizer files, written by transformers, become an hf-seq model (saved with
    its tokenizer and reloaded through the Auto classes) that embeds text exactly as the original."""
    tokenizer = bert_tokenizer()
    reference = reference_bert(
        transformers.BertForMaskedLM, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id
    )
    reference.save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (tmp_path / "bert").iterdir()}

    ours = from_transformers(tmp_path / "bert")
    assert type(ours) is BERTForMaskedLM
    ours.save_pretrained(tmp_path / "ours")
    transformers.AutoTokenizer.from_pretrained(tmp_path / "bert").save_pretrained(tmp_path / "ours")
    reloaded = transformers.AutoModel.from_pretrained(tmp_path / "ours")  # the encoder alone, as feature extraction
    assert type(reloaded) is BERTModel

    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "ours")
    batch = tok(
        ["the cat sat on the mat", "a dog ran"], ["in the park", "to the tree"], padding=True, return_tensors="pt"
    )
    assert batch["token_type_ids"].max() == 1
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = transformers.BertModel.from_pretrained(tmp_path / "bert")(**batch).last_hidden_state
        got = reloaded(**batch).last_hidden_state
    torch.testing.assert_close(got[real], expected[real], rtol=0, atol=1e-5)


# ---------------------------------------------------------------- data, pipelines, Trainer
def tiny_config(tokenizer, **overrides):
    return BERTConfig(**{**TINY, "vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id, **overrides})


def test_packed_mlm_blocks_and_berts_masking():
    tokenizer = bert_tokenizer()
    dataset = packed_mlm_dataset(corpus(), tokenizer, block_size=24)
    blocks = torch.tensor(dataset["input_ids"])
    assert blocks.shape[1] == 24 and len(dataset) > 50  # every block full: no padding
    assert (blocks[:, 0] == tokenizer.cls_token_id).all() and (blocks[:, -1] == tokenizer.sep_token_id).all()
    assert ((blocks == tokenizer.sep_token_id).sum(1) > 1).any()  # documents run on across block boundaries
    batch = masked_lm_collator(tokenizer, seed=0)([dataset[i] for i in range(len(dataset))])
    chosen = batch["labels"] != -100
    special = torch.tensor(dataset["special_tokens_mask"]).bool()
    assert not (chosen & special).any()
    assert torch.equal(batch["labels"][chosen], blocks[chosen])
    rate = chosen.sum() / (~special).sum()
    masked = (batch["input_ids"][chosen] == tokenizer.mask_token_id).float().mean()
    kept = (batch["input_ids"][chosen] == blocks[chosen]).float().mean()
    assert 0.12 < rate < 0.18 and 0.72 < masked < 0.88 and 0.04 < kept < 0.16, (rate, masked, kept)


def train_args(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=16,
        per_device_eval_batch_size=32,
        learning_rate=3e-3,
        max_steps=40,
        lr_scheduler_type="constant",
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    return transformers.TrainingArguments(**{**kwargs, **overrides})


def test_mlm_pretraining_with_trainer_reduces_the_loss(tmp_path):
    tokenizer = bert_tokenizer()
    dataset = packed_mlm_dataset(corpus(), tokenizer, block_size=24)
    torch.manual_seed(0)
    model = BERTForMaskedLM(tiny_config(tokenizer))
    trainer = transformers.Trainer(
        model=model,
        args=train_args(tmp_path),
        train_dataset=dataset,
        eval_dataset=dataset.select(range(64)),
        data_collator=masked_lm_collator(tokenizer, seed=0),
    )
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    assert trainer.evaluate()["eval_loss"] < before - 1.0


def sentiment_rows(n, seed):
    """Label 1 when the first sentence holds an animal word; pairs, so that token types are exercised."""
    rng = random.Random(seed)
    animals = {"cat", "dog", "bird"}
    rows = []
    for _ in range(n):
        first = [rng.choice(WORDS) for _ in range(rng.randint(3, 8))]
        second = [rng.choice(WORDS) for _ in range(rng.randint(2, 5))]
        rows.append((" ".join(first), " ".join(second), int(bool(animals & set(first)))))
    return rows


def test_sequence_classification_fine_tuning_with_trainer(tmp_path):
    tokenizer = bert_tokenizer()
    rows = sentiment_rows(320, seed=0)
    encoded = tokenizer([a for a, _, _ in rows], [b for _, b, _ in rows], truncation=True)
    dataset = datasets.Dataset.from_dict({**encoded, "labels": [label for *_, label in rows]})
    torch.manual_seed(0)
    model = BERTForSequenceClassification(tiny_config(tokenizer, num_labels=2))
    trainer = transformers.Trainer(
        model=model,
        args=train_args(tmp_path, max_steps=60),
        train_dataset=dataset.select(range(256)),
        eval_dataset=dataset.select(range(256, 320)),
        data_collator=transformers.DataCollatorWithPadding(tokenizer),
        compute_metrics=classification_metrics,
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < before["eval_loss"] - 0.2
    assert after["eval_accuracy"] > 0.85 and after["eval_f1"] > 0.85, after


def ner_rows(n, seed):
    """Animals are entities; "big" before an animal begins a two-word entity."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 10))]
        tags = ["O"] * len(words)
        for i, word in enumerate(words):
            if word in ("cat", "dog", "bird"):
                if i and words[i - 1] == "big":
                    tags[i - 1], tags[i] = "B-ANI", "I-ANI"
                else:
                    tags[i] = "B-ANI"
        rows.append((words, tags))
    return rows


def test_token_classification_fine_tuning_with_trainer(tmp_path):
    tokenizer = bert_tokenizer()
    label2id = {"O": 0, "B-ANI": 1, "I-ANI": 2}
    rows = ner_rows(320, seed=1)
    features = []
    for words, tags in rows:  # label each word's first subword; -100 on the rest and on [CLS] / [SEP]
        encoded = tokenizer(words, is_split_into_words=True, truncation=True)
        word_ids, previous, labels = encoded.word_ids(), None, []
        for word in word_ids:
            labels.append(-100 if word is None or word == previous else label2id[tags[word]])
            previous = word
        features.append({**encoded, "labels": labels})
    torch.manual_seed(0)
    model = BERTForTokenClassification(
        tiny_config(tokenizer, num_labels=3, id2label={i: t for t, i in label2id.items()}, label2id=label2id)
    )
    trainer = transformers.Trainer(
        model=model,
        args=train_args(tmp_path, max_steps=60),
        train_dataset=features[:256],
        eval_dataset=features[256:],
        data_collator=transformers.DataCollatorForTokenClassification(tokenizer),
        compute_metrics=token_classification_metrics(model.config.id2label),
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    assert after["eval_loss"] < before["eval_loss"] - 0.2
    assert after["eval_accuracy"] > 0.9 and after["eval_f1"] > 0.8, after


def test_entity_spans_follow_conll_rules():
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-ORG"]) == {
        ("PER", 0, 1),
        ("LOC", 3, 3),
        ("LOC", 4, 4),
        ("ORG", 5, 5),
    }


def test_pipelines_from_a_saved_folder(tmp_path):
    tokenizer = bert_tokenizer()
    heads = {
        "fill-mask": (BERTForMaskedLM, {}),
        "text-classification": (BERTForSequenceClassification, dict(id2label={0: "neg", 1: "pos"})),
        "token-classification": (BERTForTokenClassification, dict(id2label={0: "O", 1: "B-ANI", 2: "I-ANI"})),
        "feature-extraction": (BERTModel, {}),
    }
    for task, (cls, overrides) in heads.items():
        torch.manual_seed(0)
        cls(tiny_config(tokenizer, **overrides)).save_pretrained(tmp_path / task)
        tokenizer.save_pretrained(tmp_path / task)
    text = "the big cat sat on a mat"

    fill = transformers.pipeline("fill-mask", model=str(tmp_path / "fill-mask"))
    guesses = fill(f"the big {tokenizer.mask_token} sat on a mat", top_k=3)
    assert len(guesses) == 3 and all(tokenizer.mask_token not in g["sequence"] for g in guesses)

    classify = transformers.pipeline("text-classification", model=str(tmp_path / "text-classification"))
    scores = classify({"text": "the cat", "text_pair": "a dog ran"}, top_k=None)
    assert {s["label"] for s in scores} == {"neg", "pos"} and abs(sum(s["score"] for s in scores) - 1) < 1e-5

    tag = transformers.pipeline(
        "token-classification", model=str(tmp_path / "token-classification"), aggregation_strategy="simple"
    )
    entities = tag(text)
    assert entities and all(e["entity_group"] == "ANI" for e in entities)
    for entity in entities:
        assert text[entity["start"] : entity["end"]] == entity["word"]

    extract = transformers.pipeline("feature-extraction", model=str(tmp_path / "feature-extraction"))
    features = torch.tensor(extract(text))
    model = BERTModel.from_pretrained(tmp_path / "feature-extraction").eval()
    with torch.no_grad():
        expected = model(**tokenizer(text, return_tensors="pt")).last_hidden_state
    torch.testing.assert_close(features, expected)


def test_question_answering_pipeline_finds_the_span(tmp_path):
    """A tiny model trained to point at the animal of a context answers through the registered pipeline, also when
    the answer lies beyond the first window of a long context."""
    rng = random.Random(0)
    filler = [w for w in WORDS if w not in ("cat", "dog", "bird")]
    tokenizer = bert_tokenizer()
    questions, contexts, starts, ends = [], [], [], []
    for _ in range(400):
        words = [rng.choice(filler) for _ in range(rng.randint(4, 12))]
        animal = rng.choice(["cat", "dog", "bird"])
        words.insert(rng.randint(0, len(words)), animal)
        context = " ".join(words)
        char = context.index(animal)
        encoded = tokenizer("which animal", context)
        questions.append("which animal")
        contexts.append(context)
        starts.append(encoded.char_to_token(char, sequence_index=1))
        ends.append(encoded.char_to_token(char + len(animal) - 1, sequence_index=1))
    batch = tokenizer(questions, contexts, padding=True, return_tensors="pt")
    starts, ends = torch.tensor(starts), torch.tensor(ends)
    torch.manual_seed(0)
    model = BERTForQuestionAnswering(tiny_config(tokenizer, hidden_dropout=0.0, attention_dropout=0.0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(80):
        rows = torch.randint(0, len(starts), (32,))
        loss = model(
            **{k: v[rows] for k, v in batch.items()}, start_positions=starts[rows], end_positions=ends[rows]
        ).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval().save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)

    qa = transformers.pipeline("hf-seq-question-answering", model=str(tmp_path))
    context = "the big red fox sat on a mat near a dog"
    result = qa(question="which animal", context=context)
    assert result["answer"] == "dog" and result["start"] == context.index("dog") and result["score"] > 0.5, result
    long_context = " ".join(["the park and tree"] * 20) + " a cat sang"  # 3 or more windows of 32 tokens
    assert len(tokenizer(long_context)["input_ids"]) > 2 * 32
    result = qa({"question": "which animal", "context": long_context}, max_answer_length=4)
    assert result["answer"] == "cat" and long_context[result["start"] : result["end"]] == "cat", result


def test_best_span_respects_order_length_and_context():
    start = torch.tensor([0.0, 5.0, 0.0, 0.0, 9.0])
    end = torch.tensor([0.0, 0.0, 0.0, 4.0, 9.0])
    context = torch.tensor([False, True, True, True, True])
    assert best_span(start, end, context, max_answer_length=5)[:2] == (4, 4)
    assert best_span(start, end, context & torch.tensor([1, 1, 1, 1, 0]).bool(), 5)[:2] == (1, 3)
    assert best_span(start, end, context & torch.tensor([1, 1, 1, 1, 0]).bool(), 2)[:2] != (1, 3)
