import pytest
import torch
from transformers import (
    AutoTokenizer,
    BertConfig,
    BertForMaskedLM,
    BertForSequenceClassification,
    BertForTokenClassification,
    pipeline,
)

from hf_seq import GPTConfig, GPTForCausalLM
from hf_seq.data.tokenization import check_special_tokens, train_bpe_tokenizer

SUBJECTS = ["the cat", "a dog", "my neighbour", "the old sailor", "every student", "the robot"]
VERBS = ["reads", "writes", "paints", "finds", "loves", "builds"]
OBJECTS = ["a book.", "the letters, slowly.", "small boats!", "a garden", "new words?", "the house"]
CORPUS = [f"{s} {v} {o}" for s, v, o in zip(SUBJECTS * 6, VERBS * 6, OBJECTS[1:] * 6 + OBJECTS[:1] * 6)]
CORPUS += ["Über Café naïve résumé façade.", "日本語のテキストです。", "Ein schöner Tag in Zürich."]
UNSEEN = ["Emoji 🙂 and Ωμέγα, ñandú — «quotes»", "  two  spaces\tand a tab\nnew line ", "", "x"]


@pytest.fixture(scope="module")
def byte_tok():
    return train_bpe_tokenizer(CORPUS, vocab_size=320)


@pytest.fixture(scope="module")
def bert_tok():
    return train_bpe_tokenizer(CORPUS, vocab_size=320, style="bert")


def test_byte_level_special_tokens(byte_tok):
    assert [byte_tok.pad_token, byte_tok.bos_token, byte_tok.eos_token, byte_tok.unk_token] == [
        "<pad>",
        "<s>",
        "</s>",
        "<unk>",
    ]
    assert [byte_tok.pad_token_id, byte_tok.bos_token_id, byte_tok.eos_token_id, byte_tok.unk_token_id] == [0, 1, 2, 3]
    assert len(byte_tok) == 320
    assert byte_tok.padding_side == "right"
    assert byte_tok("the cat")["input_ids"] == byte_tok("the cat", add_special_tokens=False)["input_ids"]
    assert "<s>" not in byte_tok.convert_ids_to_tokens(byte_tok("<s>the cat</s>")["input_ids"][1:-1])
    assert byte_tok("<s>the cat</s>")["input_ids"][0] == 1  # special tokens in text are never split


@pytest.mark.parametrize("text", CORPUS[:3] + CORPUS[-3:] + UNSEEN)
def test_decode_encode_is_identity(byte_tok, bert_tok, text):
    assert byte_tok.decode(byte_tok(text)["input_ids"]) == text
    # The BERT style puts a space before a text that starts without one, and decode removes one leading space.
    expected = text[1:] if text.startswith(" ") else text
    assert bert_tok.decode(bert_tok(text)["input_ids"], skip_special_tokens=True) == expected


@pytest.mark.parametrize("style", ["byte_level", "bert"])
def test_save_and_auto_tokenizer_round_trip(tmp_path, style):
    tok = train_bpe_tokenizer(CORPUS, vocab_size=320, style=style, special_tokens=["<|sep|>"], model_max_length=64)
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = CORPUS + UNSEEN
    assert loaded(texts)["input_ids"] == tok(texts)["input_ids"]
    assert loaded(texts[0], texts[1]) == tok(texts[0], texts[1])
    assert loaded.special_tokens_map == tok.special_tokens_map
    assert loaded.all_special_ids == tok.all_special_ids
    assert loaded.extra_special_tokens == ["<|sep|>"]
    assert loaded.model_input_names == tok.model_input_names
    assert loaded.padding_side == "right"
    assert loaded.model_max_length == 64
    assert loaded.decode(loaded(UNSEEN[0])["input_ids"], skip_special_tokens=True) == UNSEEN[0]


def test_extra_special_tokens(byte_tok):
    tok = train_bpe_tokenizer(CORPUS, vocab_size=320, special_tokens=["<mask>", "<|sep|>", "<pad>"])
    assert tok.mask_token == "<mask>" and tok.mask_token_id == 4
    assert tok.convert_tokens_to_ids("<|sep|>") == 5
    assert tok.extra_special_tokens == ["<|sep|>"]
    assert tok("a<|sep|>b<mask>")["input_ids"][1] == 5
    assert len(tok) == 320
    assert check_special_tokens(tok, ("pad_token", "mask_token")) == {"pad_token": 0, "mask_token": 4}


def test_bert_style_tokens_and_pairs(bert_tok):
    tok = bert_tok
    assert [tok.pad_token, tok.unk_token, tok.cls_token, tok.sep_token, tok.mask_token] == [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
    ]
    assert [tok.pad_token_id, tok.unk_token_id, tok.cls_token_id, tok.sep_token_id, tok.mask_token_id] == [
        0,
        1,
        2,
        3,
        4,
    ]
    assert tok.model_input_names == ["input_ids", "token_type_ids", "attention_mask"]
    single = tok("the cat reads")
    assert single["input_ids"][0] == tok.cls_token_id and single["input_ids"][-1] == tok.sep_token_id
    a, b = tok("the cat", add_special_tokens=False)["input_ids"], tok("a book.", add_special_tokens=False)["input_ids"]
    pair = tok("the cat", "a book.")
    assert pair["input_ids"] == [2, *a, 3, *b, 3]
    assert pair["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)
    batch = tok(["the cat", "the old sailor writes"], padding=True, return_tensors="pt")
    assert set(batch) == {"input_ids", "token_type_ids", "attention_mask"}
    assert batch["input_ids"][0, -1] == tok.pad_token_id  # right padding


def test_bert_style_offsets_and_word_ids(bert_tok):
    text = "the sailor writes, slowly Zürich"
    enc = bert_tok(text, return_offsets_mapping=True)
    words = text.replace(",", " ,").split()
    word_ids = enc.word_ids()
    assert word_ids[0] is None and word_ids[-1] is None
    assert [w for w in word_ids if w is not None] == sorted(w for w in word_ids if w is not None)
    for index in range(len(words)):
        # The offsets of a word's tokens span the word, not the space before it. (A character of several bytes
        # split over two tokens is in the offsets of both.)
        spans = [span for span, w in zip(enc["offset_mapping"], word_ids) if w == index]
        assert text[spans[0][0] : spans[-1][1]] == words[index]
        assert all(s0 <= s1 for (s0, _), (s1, _) in zip(spans, spans[1:]))
    # A word is split the same way at the start of a text, inside it and in pre-split input (NER datasets).
    split = bert_tok(text.split(), is_split_into_words=True)
    assert split["input_ids"] == bert_tok(" ".join(text.split()))["input_ids"]
    inside = bert_tok("the sailor")
    alone = bert_tok("sailor")["input_ids"][1:-1]
    assert [t for t, w in zip(inside["input_ids"], inside.word_ids()) if w == 1] == alone


def tiny_bert(cls, tok, **kwargs):
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
        pad_token_id=tok.pad_token_id,
        **kwargs,
    )
    return cls(config).eval()


def test_bert_style_pipelines(bert_tok):
    fill = pipeline("fill-mask", model=tiny_bert(BertForMaskedLM, bert_tok), tokenizer=bert_tok, top_k=3)
    out = fill(f"the cat {bert_tok.mask_token} a book.")
    assert len(out) == 3 and all(r["sequence"].startswith("the cat") for r in out)

    classify = pipeline(
        "text-classification",
        model=tiny_bert(BertForSequenceClassification, bert_tok, num_labels=2),
        tokenizer=bert_tok,
    )
    assert classify(["the cat reads", "a dog"], top_k=None)[0][0]["label"] in ("LABEL_0", "LABEL_1")

    tagger = pipeline(
        "token-classification",
        model=tiny_bert(BertForTokenClassification, bert_tok, num_labels=3),
        tokenizer=bert_tok,
        aggregation_strategy="simple",
    )
    text = "the old sailor writes new words"
    entities = tagger(text)
    assert entities and all(text[e["start"] : e["end"]] == e["word"].strip() for e in entities)


def test_text_generation_pipeline_batches_like_single_prompts(byte_tok):
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=len(byte_tok),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
        pad_token_id=byte_tok.pad_token_id,
        bos_token_id=byte_tok.bos_token_id,
        eos_token_id=byte_tok.eos_token_id,
    )
    model = GPTForCausalLM(config).eval()
    tok = train_bpe_tokenizer(CORPUS, vocab_size=320)
    generate = pipeline("text-generation", model=model, tokenizer=tok)
    assert tok.padding_side == "left"  # the pipeline switches decoder-only generation to left padding
    prompts = ["the cat", "every student paints the"]
    kwargs = dict(max_new_tokens=6, do_sample=False, return_full_text=False)
    batched = generate(prompts, batch_size=2, **kwargs)
    single = [generate(p, **kwargs) for p in prompts]
    assert [b[0]["generated_text"] for b in batched] == [s[0]["generated_text"] for s in single]


def test_training_from_files_and_datasets_equals_texts(tmp_path, byte_tok):
    half = len(CORPUS) // 2
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("\n".join(CORPUS[:half]) + "\n", encoding="utf-8")
    second.write_text("\n".join(CORPUS[half:]) + "\n", encoding="utf-8")
    expected = byte_tok.get_vocab()
    assert train_bpe_tokenizer([first, second], vocab_size=320).get_vocab() == expected
    assert train_bpe_tokenizer([str(first), str(second)], vocab_size=320).get_vocab() == expected
    assert train_bpe_tokenizer(iter(CORPUS), vocab_size=320).get_vocab() == expected

    datasets = pytest.importorskip("datasets")
    data = datasets.Dataset.from_dict({"sentence": CORPUS, "label": list(range(len(CORPUS)))})
    assert train_bpe_tokenizer(data, vocab_size=320, text_column="sentence").get_vocab() == expected
    with pytest.raises(ValueError, match=r"no column 'text'.*\['sentence', 'label'\]"):
        train_bpe_tokenizer(data, vocab_size=320)
    with pytest.raises(ValueError, match="pass one split"):
        train_bpe_tokenizer(datasets.DatasetDict(train=data), vocab_size=320, text_column="sentence")


def test_bad_input_errors(tmp_path, byte_tok):
    with pytest.raises(ValueError, match=r"at least 260"):
        train_bpe_tokenizer(CORPUS, vocab_size=259)
    with pytest.raises(ValueError, match=r"at least 262"):
        train_bpe_tokenizer(CORPUS, vocab_size=261, special_tokens=["<a>", "<b>"])
    with pytest.raises(ValueError, match=r"at least 261"):
        train_bpe_tokenizer(CORPUS, vocab_size=260, style="bert")
    for empty in ([], [""], ["  ", "\n"], iter([])):
        with pytest.raises(ValueError, match="corpus is empty"):
            train_bpe_tokenizer(empty, vocab_size=300)
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n", encoding="utf-8")
    with pytest.raises(ValueError, match="corpus is empty"):
        train_bpe_tokenizer([blank], vocab_size=300)
    missing = tmp_path / "missing.txt"
    with pytest.raises(ValueError, match="not found.*missing.txt"):
        train_bpe_tokenizer([blank, missing], vocab_size=300)
    with pytest.raises(ValueError, match="not found.*missing.txt"):
        train_bpe_tokenizer(str(missing), vocab_size=300)
    with pytest.raises(ValueError, match="not a file"):
        train_bpe_tokenizer("a text, not a list of texts", vocab_size=300)
    with pytest.raises(ValueError, match=r"style='wordpiece'.*\['byte_level', 'bert'\]"):
        train_bpe_tokenizer(CORPUS, style="wordpiece")
    with pytest.raises(ValueError, match="must hold strings"):
        train_bpe_tokenizer(["text", 3], vocab_size=300)
    with pytest.raises(ValueError, match="non-empty strings"):
        train_bpe_tokenizer(CORPUS, vocab_size=300, special_tokens=["<a>", ""])


def test_check_special_tokens(byte_tok, bert_tok):
    assert check_special_tokens(byte_tok) == {"pad_token": 0, "bos_token": 1, "eos_token": 2}
    assert check_special_tokens(bert_tok, ("cls_token", "sep_token", "mask_token")) == {
        "cls_token": 2,
        "sep_token": 3,
        "mask_token": 4,
    }
    with pytest.raises(ValueError, match=r"lacks the special tokens \['cls_token', 'mask_token'\] needed for BERT"):
        check_special_tokens(byte_tok, ("pad_token", "cls_token", "mask_token"), purpose="BERT")
    with pytest.raises(ValueError, match=r"lacks the special tokens \['bos_token', 'eos_token'\]"):
        check_special_tokens(bert_tok)
    with pytest.raises(ValueError, match="unknown special token names.*'pad'"):
        check_special_tokens(byte_tok, ("pad",))
