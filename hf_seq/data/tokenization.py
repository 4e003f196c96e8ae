"""Train byte-level BPE tokenizers (Sennrich et al. 2016; byte-level as in GPT-2, Radford et al. 2019) with the
`tokenizers` library and wrap them as `transformers` tokenizers that `save_pretrained` / `AutoTokenizer` and the
pipelines accept.

Two styles:

- `byte_level` (GPT-2 style, for the causal LMs and the seq2seq models): `<pad> <s> </s> <unk>` are ids 0..3,
  nothing is added around a text, and `decode(encode(text)) == text` for any Unicode text. Padding is on the
  right, which is what training wants (learned positions count from the first slot). Batched `generate()` on a
  decoder-only model wants left padding: set `tokenizer.padding_side = "left"` before calling it. The
  text-generation pipeline does that itself (it switches the tokenizer it is given to left padding).
- `bert` (for the encoder models): `[PAD] [UNK] [CLS] [SEP] [MASK]` are ids 0..4, a text becomes `[CLS] A [SEP]`
  and a pair `[CLS] A [SEP] B [SEP]` with `token_type_ids` 0 for A and 1 for B, as BERT's fill-mask,
  text-classification and token-classification pipelines expect. A space is put before the first word, so a word
  is split the same way at the start of a text, inside it, and in pre-split input (`is_split_into_words=True`,
  the format of NER datasets); `decode` removes that space again (so a text that began with a space comes back
  with one space fewer).

The byte alphabet (256 symbols) is always in the vocabulary, so no text ever maps to the unknown token.
"""

import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from hf_seq.errors import InvalidValueError

STYLES = ("byte_level", "bert")
BYTE_ALPHABET_SIZE = 256

# The named special tokens of each style, in id order: role -> token.
_STYLE_SPECIAL_TOKENS = {
    "byte_level": {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "bert": {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    },
}
_SPECIAL_TOKEN_ROLES = tuple(PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES)
# A string is read as a file name (not as a text) only if it has no whitespace and a path separator or a suffix.
_LOOKS_LIKE_PATH = re.compile(r"^\S*(/|\\)\S*$|^\S+\.[A-Za-z0-9]{1,8}$")


def train_bpe_tokenizer(
    corpus,
    vocab_size: int = 8000,
    min_frequency: int = 2,
    special_tokens: Sequence[str] | None = None,
    style: str = "byte_level",
    show_progress: bool | None = None,
    text_column: str = "text",
    model_max_length: int | None = None,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer and return it as a `PreTrainedTokenizerFast`.

    Args:
        corpus: the training text, one of: an iterable of strings; a file path or a list of file paths (`str` or
            `Path`; plain text, read line by line); a `datasets.Dataset` / `IterableDataset` (read from
            `text_column`).
        vocab_size: the size of the final vocabulary, special tokens and the 256 byte symbols included.
        min_frequency: a pair of symbols must occur this often to be merged.
        special_tokens: extra special tokens, added after the style's own (e.g. `["<mask>", "<|sep|>"]`). They are
            never split; `"<mask>"` becomes the byte-level tokenizer's `mask_token`, the others its
            `extra_special_tokens`.
        style: `"byte_level"` (GPT-2 style) or `"bert"` (BERT's special tokens and pair template); see the module
            docstring.
        show_progress: show the trainer's progress bar (default: when stderr is a terminal).
        text_column: the column of a `datasets` corpus that holds the text.
        model_max_length: the model's context length, used by `truncation=True` and the pipelines (default: no
            limit).
    """
    named, extras = _checked_arguments(style, special_tokens, vocab_size, min_frequency, model_max_length)
    all_special = [*named.values(), *extras]
    if show_progress is None:
        show_progress = sys.stderr.isatty()

    bert = style == "bert"
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bert)
    # ByteLevel decoding joins the tokens into one string; in the BERT style, Strip then drops the added space.
    tokenizer.decoder = (
        decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)]) if bert else decoders.ByteLevel()
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=all_special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    _train(tokenizer, trainer, corpus, text_column)

    if bert:
        tokenizer.post_processor = _bert_post_processor(tokenizer, named)
        extra_kwargs = {"model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
        extra_kwargs = {}
        if "<mask>" in extras:
            extra_kwargs["mask_token"] = "<mask>"
            extras = [token for token in extras if token != "<mask>"]
    if extras:
        extra_kwargs["extra_special_tokens"] = extras
    if model_max_length is not None:
        extra_kwargs["model_max_length"] = model_max_length
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        padding_side="right",
        clean_up_tokenization_spaces=False,
        add_prefix_space=bert,
        **named,
        **extra_kwargs,
    )


def _checked_arguments(style, special_tokens, vocab_size, min_frequency, model_max_length) -> tuple[dict, list]:
    """`train_bpe_tokenizer`'s arguments checked: the style's named special tokens and the extra ones."""
    if style not in _STYLE_SPECIAL_TOKENS:
        raise InvalidValueError(f"train_bpe_tokenizer: style={style!r} is not supported; allowed values: {list(STYLES)}.")
    named = _STYLE_SPECIAL_TOKENS[style]
    extras = _check_extra_special_tokens(special_tokens, named)
    all_special = [*named.values(), *extras]
    smallest = BYTE_ALPHABET_SIZE + len(all_special)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < smallest:
        raise InvalidValueError(
            f"train_bpe_tokenizer: vocab_size={vocab_size!r} is too small; it must hold the {BYTE_ALPHABET_SIZE} byte "
            f"symbols and the {len(all_special)} special tokens, so at least {smallest} (and more to learn any merges)."
        )
    if isinstance(min_frequency, bool) or not isinstance(min_frequency, int) or min_frequency < 1:
        raise InvalidValueError(f"train_bpe_tokenizer: min_frequency must be a positive integer, got {min_frequency!r}.")
    if model_max_length is not None and (
        isinstance(model_max_length, bool) or not isinstance(model_max_length, int) or model_max_length < 1
    ):
        raise InvalidValueError(
            f"train_bpe_tokenizer: model_max_length must be a positive integer (the model's context length) or None, "
            f"got {model_max_length!r}."
        )
    return named, extras


def _bert_post_processor(tokenizer: Tokenizer, named: dict):
    """BERT's templates: `[CLS] A [SEP]` and `[CLS] A [SEP] B [SEP]`, B's tokens of type 1."""
    cls, sep = named["cls_token"], named["sep_token"]
    return processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=True),  # offsets cover the word, not the space before it
            processors.TemplateProcessing(
                single=f"{cls} $A {sep}",
                pair=f"{cls} $A {sep} $B:1 {sep}:1",
                special_tokens=[(cls, tokenizer.token_to_id(cls)), (sep, tokenizer.token_to_id(sep))],
            ),
        ]
    )


def check_special_tokens(
    tokenizer: PreTrainedTokenizerBase,
    required: Iterable[str] = ("pad_token", "bos_token", "eos_token"),
    purpose: str | None = None,
) -> dict[str, int]:
    """Check that `tokenizer` defines the special tokens in `required` (names such as `"pad_token"`,
    `"mask_token"`) and that each is in its vocabulary; return their ids, e.g. `{"pad_token": 0}`.

    Raises a ValueError naming every missing token, so that a model is never trained with a silently absent
    `[MASK]` or padding token. `purpose` (e.g. `"BERT masked-LM training"`) is named in the message."""
    required = tuple(required)
    unknown = [name for name in required if name not in _SPECIAL_TOKEN_ROLES]
    if unknown:
        raise InvalidValueError(
            f"check_special_tokens: unknown special token names {unknown}; allowed: {list(_SPECIAL_TOKEN_ROLES)}."
        )
    ids, missing = {}, []
    for name in required:
        token = getattr(tokenizer, name, None)
        token_id = getattr(tokenizer, f"{name}_id", None) if token is not None else None
        if token_id is None:
            missing.append(name)
        else:
            ids[name] = token_id
    if missing:
        where = f" for {purpose}" if purpose else ""
        example = ", ".join(f"'{name}': '...'" for name in missing)
        raise InvalidValueError(
            f"The tokenizer lacks the special tokens {missing} needed{where}. Add them with "
            f"tokenizer.add_special_tokens({{{example}}}) and resize the model's embeddings "
            "(model.resize_token_embeddings(len(tokenizer))), or train one with "
            "hf_seq.data.tokenization.train_bpe_tokenizer (style='bert' has [CLS] [SEP] [MASK] [PAD] [UNK]; "
            "style='byte_level' has <pad> <s> </s> <unk>)."
        )
    return ids


def _check_extra_special_tokens(special_tokens, named: dict[str, str]) -> list[str]:
    if special_tokens is None:
        return []
    if isinstance(special_tokens, str):
        raise InvalidValueError(
            f"special_tokens must be a list of strings, got the string {special_tokens!r}; wrap it in a list."
        )
    extras = []
    for token in special_tokens:
        if not isinstance(token, str) or not token.strip():
            raise InvalidValueError(f"special_tokens must be non-empty strings, got {token!r}.")
        if token not in extras and token not in named.values():  # the style's own tokens are always there
            extras.append(token)
    return extras


def _train(tokenizer: Tokenizer, trainer, corpus, text_column: str) -> None:
    files = _as_files(corpus)
    if files is not None:
        if not any(_has_text(path) for path in files):
            raise InvalidValueError(
                f"train_bpe_tokenizer: the corpus is empty: the files {[str(p) for p in files]} hold no text."
            )
        tokenizer.train([str(path) for path in files], trainer)
        return
    texts = _CountingTexts(_iter_texts(corpus, text_column))
    tokenizer.train_from_iterator(texts, trainer, length=_length(corpus))
    if texts.characters == 0:
        raise InvalidValueError("train_bpe_tokenizer: the corpus is empty (no text to learn from).")


def _as_files(corpus) -> list[Path] | None:
    """The corpus as a list of existing files, or None when it is a collection of texts. A name that looks like a
    file but does not exist is an error (naming it), not a one-line text."""
    if isinstance(corpus, (str, os.PathLike)):
        items = [corpus]
    elif isinstance(corpus, (list, tuple)) and corpus and all(isinstance(c, (str, os.PathLike)) for c in corpus):
        items = list(corpus)
        as_paths = all(isinstance(c, os.PathLike) or _may_be_path(c) for c in items)
        if not as_paths:
            return None
    else:
        return None
    missing = [str(item) for item in items if not Path(item).is_file()]
    if missing:
        if len(items) == 1 and isinstance(corpus, str) and not _LOOKS_LIKE_PATH.match(corpus):
            raise InvalidValueError(
                f"train_bpe_tokenizer: corpus is a single string that is not a file: {corpus[:60]!r}. "
                "Pass texts as a list of strings, or the path of an existing file."
            )
        raise InvalidValueError(f"train_bpe_tokenizer: corpus file(s) not found: {missing}.")
    return [Path(item) for item in items]


def _may_be_path(text: str) -> bool:
    """A string with a line break, or longer than any file name, is a text; otherwise it is a path if it looks like
    one or names an existing file."""
    if "\n" in text or len(text) > 1024:
        return False
    return bool(_LOOKS_LIKE_PATH.match(text)) or Path(text).is_file()


def _has_text(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return any(line.strip() for line in handle)


def _is_datasets_object(corpus) -> bool:
    return type(corpus).__module__.split(".")[0] == "datasets"


def _iter_texts(corpus, text_column: str) -> Iterator[str]:
    if _is_datasets_object(corpus):
        if type(corpus).__name__ in ("DatasetDict", "IterableDatasetDict"):
            raise InvalidValueError(
                f"train_bpe_tokenizer: got a {type(corpus).__name__} with splits {list(corpus)}; pass one split, "
                "e.g. corpus['train']."
            )
        columns = corpus.column_names
        if columns is not None and text_column not in columns:
            raise InvalidValueError(f"train_bpe_tokenizer: the dataset has no column {text_column!r}; its columns: {columns}.")
        if hasattr(corpus, "iter"):
            for batch in corpus.iter(batch_size=1000):
                yield from _check_texts(batch[text_column])
        else:
            yield from _check_texts(row[text_column] for row in corpus)
        return
    if isinstance(corpus, (bytes, dict)) or not isinstance(corpus, Iterable):
        raise InvalidValueError(
            "train_bpe_tokenizer: corpus must be an iterable of strings, a file path or a list of them, or a "
            f"datasets.Dataset; got {type(corpus).__name__}."
        )
    yield from _check_texts(corpus)


def _check_texts(texts: Iterable) -> Iterator[str]:
    for text in texts:
        if not isinstance(text, str):
            raise InvalidValueError(
                f"train_bpe_tokenizer: the corpus must hold strings, found a {type(text).__name__}: {text!r:.60}."
            )
        yield text


class _CountingTexts:
    """Passes texts through and counts their non-blank characters, to tell an empty corpus after one pass."""

    def __init__(self, texts: Iterator[str]):
        self.texts, self.characters = texts, 0

    def __iter__(self):
        for text in self.texts:
            self.characters += len(text.strip())
            yield text


def _length(corpus) -> int | None:
    try:
        return len(corpus)
    except TypeError:
        return None


__all__ = ["STYLES", "check_special_tokens", "train_bpe_tokenizer"]
