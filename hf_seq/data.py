"""Corpora and data preparation.

Embedded defaults need no network: the CPython standard library sources (present wherever Python is) for language
modelling. Anything else comes through `datasets`: a Hub dataset name or local text/JSON/CSV files.
"""

import sysconfig
from collections.abc import Iterable, Iterator
from pathlib import Path

import datasets
from transformers import DataCollatorForLanguageModeling

from .tokenization import check_special_tokens

STDLIB = "stdlib"


def stdlib_files() -> list[Path]:
    """The standard library's own .py files (tests and vendored packages left out), in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in root.rglob("*.py")
        if not {"test", "tests", "idle_test", "site-packages", "dist-packages"} & set(p.relative_to(root).parts)
    )
    if not files:
        raise FileNotFoundError(
            f"No Python standard library sources found under {root}: this Python ships without them. Install the "
            "full Python (e.g. the python3 package, not a stripped runtime) or pass --dataset with a Hub name or files."
        )
    return files


def stdlib_texts(max_files: int | None = None, max_chars: int | None = None) -> list[str]:
    """Source files as texts, up to `max_files` files and `max_chars` characters in all."""
    texts, total = [], 0
    for path in stdlib_files()[:max_files]:
        text = path.read_text(encoding="utf-8", errors="replace")
        if max_chars is not None and total + len(text) > max_chars:
            text = text[: max_chars - total]
        if text:
            texts.append(text)
            total += len(text)
        if max_chars is not None and total >= max_chars:
            break
    return texts


def load_text_dataset(source: str | None = STDLIB, split: str = "train", text_column: str = "text", **kwargs):
    """A `datasets.Dataset` with a `text_column` column: `stdlib` (the default), local files (.txt/.json/.jsonl/.csv,
    a path or a list of paths), or a dataset name on the Hub (`name` or `name:config`)."""
    if source in (None, STDLIB):
        return datasets.Dataset.from_dict({text_column: stdlib_texts(**kwargs)})
    paths = [Path(p) for p in ([source] if isinstance(source, str | Path) else source)]
    if all(p.suffix in {".txt", ".json", ".jsonl", ".csv"} for p in paths):
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise FileNotFoundError(f"data file(s) not found: {missing}")
        builder = {".txt": "text", ".json": "json", ".jsonl": "json", ".csv": "csv"}[paths[0].suffix]
        dataset = datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train")
    else:
        name, _, config = str(source).partition(":")
        dataset = datasets.load_dataset(name, config or None, split=split)
    if text_column not in dataset.column_names:
        raise ValueError(f"dataset {source!r} has no column {text_column!r}; columns: {dataset.column_names}")
    return dataset


def pack_token_ids(documents: Iterable[list[int]], block_size: int, separator: int | None) -> Iterator[list[int]]:
    """Concatenate tokenized documents (separated by `separator`, e.g. EOS) and cut the stream into blocks of
    exactly `block_size` tokens; the tail shorter than a block is dropped."""
    buffer: list[int] = []
    for ids in documents:
        buffer.extend(ids)
        if separator is not None:
            buffer.append(separator)
        while len(buffer) >= block_size:
            yield buffer[:block_size]
            buffer = buffer[block_size:]


def packed_lm_dataset(texts: Iterable[str], tokenizer, block_size: int) -> datasets.Dataset:
    """Causal-LM training blocks: {'input_ids': [...], 'labels': [...]} with no padding anywhere."""
    documents = (tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] for text in texts)
    blocks = list(pack_token_ids(documents, block_size, tokenizer.eos_token_id))
    if not blocks:
        raise ValueError(f"the corpus holds fewer than block_size={block_size} tokens; use more text or smaller blocks")
    return datasets.Dataset.from_dict({"input_ids": blocks, "labels": blocks})


def packed_mlm_dataset(texts: Iterable[str], tokenizer, block_size: int) -> datasets.Dataset:
    """Masked-LM pretraining blocks, packed as RoBERTa's FULL-SENTENCES inputs (Liu et al. 2019): the documents are
    concatenated with [SEP] between them and cut into blocks of `block_size - 2` tokens, each wrapped as
    [CLS] block [SEP]. No padding anywhere.

    Columns: `input_ids` and `special_tokens_mask` (so the collator never masks [CLS] / [SEP]). Masking is done per
    batch by `masked_lm_collator`, so each epoch sees new masks."""
    ids = check_special_tokens(tokenizer, ("cls_token", "sep_token"), purpose="packing masked-LM blocks")
    cls, sep = ids["cls_token"], ids["sep_token"]
    documents = (tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] for text in texts)
    blocks = [[cls, *block, sep] for block in pack_token_ids(documents, block_size - 2, sep)]
    if not blocks:
        raise ValueError(f"the corpus holds fewer than block_size={block_size} tokens; use more text or smaller blocks")
    special = [tokenizer.get_special_tokens_mask(block, already_has_special_tokens=True) for block in blocks]
    return datasets.Dataset.from_dict({"input_ids": blocks, "special_tokens_mask": special})


def masked_lm_collator(tokenizer, mlm_probability: float = 0.15, seed: int | None = None):
    """BERT's masking (Devlin et al. 2019, section 3.1) by transformers' `DataCollatorForLanguageModeling`: each
    non-special token is chosen with probability `mlm_probability`; a chosen token becomes [MASK] 80% of the time, a
    random token 10%, and stays itself 10%; `labels` hold the original ids at the chosen positions, -100 elsewhere."""
    check_special_tokens(tokenizer, ("mask_token", "pad_token"), purpose="masked-LM training")
    return DataCollatorForLanguageModeling(
        tokenizer,
        mlm=True,
        mlm_probability=mlm_probability,
        mask_replace_prob=0.8,
        random_replace_prob=0.1,
        seed=seed,
    )


LOCALE_DIR = Path("/usr/share/locale")


def gettext_pairs(target_language: str = "fr", max_pairs: int | None = None, max_chars: int = 200) -> list[dict]:
    """English messages paired with their translations, read from the gettext catalogs (`.mo`) that programs install
    under /usr/share/locale: a small parallel corpus on any Linux machine, no download. Pairs are deduplicated,
    limited to single-line messages of at most `max_chars` characters, and returned in a fixed order."""
    import gettext

    folder = LOCALE_DIR / target_language / "LC_MESSAGES"
    catalogs = sorted(folder.glob("*.mo")) if folder.is_dir() else []
    if not catalogs:
        raise FileNotFoundError(
            f"No gettext catalogs for {target_language!r} under {folder}. Install translated packages (on Debian or "
            f"Ubuntu: the language's locale packages, e.g. `apt-get install language-pack-{target_language}`), choose "
            "another target_language, or pass a parallel dataset with data.dataset=..."
        )
    pairs: dict[str, str] = {}
    for path in catalogs:
        try:
            with open(path, "rb") as handle:
                catalog = gettext.GNUTranslations(handle)._catalog
        except (OSError, UnicodeDecodeError, ValueError):
            continue  # a catalog in a legacy encoding or damaged: skip it
        for source, target in catalog.items():
            if not isinstance(source, str) or not source.strip() or not isinstance(target, str) or not target.strip():
                continue  # plural forms are keyed by tuples; the header has an empty msgid
            if "\n" in source or "\n" in target or len(source) > max_chars or len(target) > max_chars:
                continue
            pairs.setdefault(source.strip(), target.strip())
    rows = [{"source": s, "target": t} for s, t in sorted(pairs.items())]
    return rows[:max_pairs]
