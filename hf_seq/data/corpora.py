"""Corpora and data preparation.

Embedded defaults need no network: the CPython standard library sources (present wherever Python is) for language
modelling. Anything else comes through `datasets`: a Hub dataset name or local text/JSON/CSV files.
"""

import csv
import io
import json
import math
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import datasets
import torch
from transformers import DataCollatorForLanguageModeling

from hf_seq.data.tokenization import check_special_tokens
from hf_seq.errors import InvalidValueError, MissingFileError

STDLIB = "stdlib"
CO2 = "co2"  # the embedded weekly Mauna Loa CO2 series (its source and licence: hf_seq.data.series)
CHORALES = "chorales"  # the Bach chorales music21 ships, read as scores by the music task (hf_seq.data.music)


def stdlib_files() -> list[Path]:
    """The standard library's own .py files (tests and vendored packages left out), in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in root.rglob("*.py")
        if not {"test", "tests", "idle_test", "site-packages", "dist-packages"} & set(p.relative_to(root).parts)
    )
    if not files:
        raise MissingFileError(
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


# ---------------------------------------------------------------------------------------------- reading corpora
TEXT_SUFFIXES = {".txt": "text", ".md": "text", ".py": "text", ".json": "json", ".jsonl": "json", ".csv": "csv"}
HELD_OUT_SEED = 1234  # the held-out split never depends on the training seed


def _looks_like_files(source) -> bool:
    items = source if isinstance(source, list | tuple) else [source]
    return all(isinstance(p, str | Path) and (Path(p).suffix in TEXT_SUFFIXES or Path(p).exists()) for p in items)


def load_files(paths, what: str = "data.dataset", streaming: bool = False) -> datasets.Dataset:
    """Local files as rows: .json/.jsonl/.csv by their columns; any other file is plain text, one document per
    blank-line-separated paragraph (so a book, a code file or a one-sentence-per-line corpus keeps its order), in
    a `text` column. A missing or unreadable path is an error that names it. `streaming`: an IterableDataset of the
    same rows, read as they are iterated."""
    paths = [Path(p) for p in (paths if isinstance(paths, list | tuple) else [paths])]
    if not paths:
        raise InvalidValueError(f"{what}: no files given")
    for p in paths:
        if not p.is_file():
            raise MissingFileError(f"{what}: file not found: {str(p)!r}")
    builders = {TEXT_SUFFIXES.get(p.suffix, "text") for p in paths}
    if len(builders) > 1:
        raise InvalidValueError(
            f"{what}: mixes file kinds {sorted(builders)}; give files of one kind (text, json or csv)"
        )
    builder = builders.pop()
    check_rows(paths, builder, what)
    kwargs = {"sample_by": "paragraph"} if builder == "text" else {}
    files = [str(p) for p in paths]
    return datasets.load_dataset(builder, data_files=files, split="train", streaming=streaming, **kwargs)


ROWS_NEEDED = {
    "text": "text (documents separated by blank lines)",
    "json": "rows (one JSON object per line)",
    "csv": "rows under its header line",
}


def check_rows(paths: list[Path], builder: str, what: str) -> None:
    """Refuse files that hold no rows before `datasets` reads them (it answers an empty file with a
    DatasetGenerationError and a long traceback): an error naming the file, or the files where several are given and
    none holds a row. An empty file among others that hold rows is read as no rows (an empty `__init__.py` among a
    corpus of code files), except a CSV file without even a header line, which datasets cannot read."""
    reasons = {path: _no_rows(path, builder) for path in paths}
    headless = [path for path, reason in reasons.items() if builder == "csv" and reason not in (None, HEADER_ONLY)]
    if headless:  # datasets cannot read a CSV file without a header line, even among others
        paths = headless[:1]
    elif not all(reasons.values()):
        return
    if len(paths) == 1:
        message = f"{what}: {str(paths[0])!r} {reasons[paths[0]]}"
    else:
        message = f"{what}: none of its {len(paths)} files holds a row ({', '.join(repr(str(p)) for p in paths[:4])}"
        message += f" and {len(paths) - 4} more)" if len(paths) > 4 else ")"
    raise InvalidValueError(f"{message}: give a file that holds {ROWS_NEEDED[builder]}")


HEADER_ONLY = "holds a header line and no rows"


def _no_rows(path: Path, builder: str) -> str | None:
    """Why `path` holds no rows for `builder` (e.g. "is empty"), or None where it holds some. Reads as little as it
    takes: up to the first non-blank character (text, json), the first two non-blank lines (csv)."""
    if path.stat().st_size == 0:
        return "is empty"
    with open(path, "rb") as file:
        if builder == "csv":  # the first non-blank line is the header
            lines = (line for line in file if line.strip())
            if next(lines, None) is None:
                return "holds only blank lines"
            return None if next(lines, None) is not None else HEADER_ONLY
        start = file.read(1 << 16).lstrip(b"\xef\xbb\xbf").strip()  # a byte-order mark alone is no text either
        while not start:
            chunk = file.read(1 << 20)
            if not chunk:
                return "holds only blank lines"
            start = chunk.strip()
    if builder == "json" and start.startswith(b"[") and path.stat().st_size < 1 << 16:
        try:
            if json.loads(path.read_bytes()) == []:
                return "holds an empty JSON list"
        except ValueError:
            pass  # not JSON: datasets names the error
    return None


def load_text_dataset(source=STDLIB, split: str = "train", text_column: str = "text", **kwargs) -> datasets.Dataset:
    """A `datasets.Dataset` with a `text_column` column: `stdlib` (the default), local files (a path or a list of
    paths; see `load_files`), or a dataset on the Hub (`name` or `name:config`)."""
    if source in (None, STDLIB):
        return datasets.Dataset.from_dict({text_column: stdlib_texts(**kwargs)})
    if _looks_like_files(source):
        dataset = load_files(source)
    else:
        dataset = load_hub_dataset(source, split=split)
    if text_column not in dataset.column_names:
        raise InvalidValueError(f"dataset {source!r} has no column {text_column!r}; columns: {dataset.column_names}")
    return dataset


def load_hub_dataset(source: str, what: str = "dataset", **kwargs):
    """`datasets.load_dataset` of a Hub name (`name` or `name:config`); a name the Hub does not have, or cannot be
    reached for, is an error in what the user gave."""
    name, _, config = str(source).partition(":")
    try:
        return datasets.load_dataset(name, config or None, **kwargs)
    except (datasets.exceptions.DatasetNotFoundError, ConnectionError) as error:
        message = f"{what}: {source!r} is neither a local file nor a Hub dataset that loads ({error})"
        raise MissingFileError(message) from error


MIN_HELD_OUT_DOCUMENTS = 2  # fewer documents than this in eval_fraction: hold out running text instead (packed tasks)


def load_splits(data, columns: dict[str, str], blocks_fallback: bool = False) -> dict[str, datasets.Dataset]:
    """The `train`, `validation` and (when there is one) `test` rows of a recipe's data section, with the columns
    renamed to the task's names (`columns`: task's name -> the dataset's column).

    Held-out data, in order of preference: the files or split named by `data.validation` / `data.test`; a Hub
    dataset's own `validation` / `test` splits; else `data.eval_fraction` of the documents, drawn with a fixed
    seed. Training rows keep their order (packing relies on it). With `blocks_fallback` (tasks that pack running
    text into blocks), a corpus of too few documents for that (a file of one sentence a line and no blank lines is one
    document) comes back without a validation split: the caller holds out the last blocks (`hold_out_tail`)."""
    splits: dict[str, datasets.Dataset] = {}
    if isinstance(data.dataset, str) and data.dataset in EMBEDDED:
        splits["train"] = EMBEDDED[data.dataset](data)
        columns = {name: name for name in columns}  # embedded rows already use the tasks' names
    elif _looks_like_files(data.dataset):
        splits["train"] = load_files(data.dataset)
    else:
        hub = load_hub_dataset(data.dataset, what="data.dataset")
        splits = {"train": hub["train"], **{s: hub[s] for s in ("validation", "test") if s in hub}}
        for split in ("validation", "test"):
            named = getattr(data, split)
            if isinstance(named, str) and named in hub:
                splits[split] = hub[named]
    for split in ("validation", "test"):
        named = getattr(data, split)
        if named is not None and not (isinstance(named, str) and split in splits and named in splits):
            if not _looks_like_files(named):
                raise MissingFileError(f"data.{split}: {named!r} is neither a file nor a split of {data.dataset!r}")
            splits[split] = load_files(named, what=f"data.{split}")
    if data.max_examples is not None:
        splits["train"] = splits["train"].select(range(min(data.max_examples, len(splits["train"]))))
    if "validation" not in splits:
        train = splits["train"]
        n_eval = max(1, round(len(train) * data.eval_fraction))
        if blocks_fallback and len(train) * data.eval_fraction < MIN_HELD_OUT_DOCUMENTS:
            return select_columns(splits, columns)
        if n_eval >= len(train):
            raise InvalidValueError(
                f"data.eval_fraction={data.eval_fraction} leaves no training rows out of {len(train)}; lower it or "
                "give data.validation"
            )
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(HELD_OUT_SEED)).tolist()
        held_out = sorted(order[:n_eval])
        splits["validation"] = train.select(held_out)
        splits["train"] = train.select(sorted(order[n_eval:]))
    return select_columns(splits, columns)


def hold_out_tail(blocks: datasets.Dataset, fraction: float) -> tuple[datasets.Dataset, datasets.Dataset]:
    """(training blocks, held-out blocks): the last `fraction` of the packed running text held out whole, the way
    char-rnn and nanoGPT split one long text: contiguous, so no held-out sentence was also trained on."""
    n_eval = max(1, round(len(blocks) * fraction))
    if n_eval >= len(blocks):
        raise InvalidValueError(
            f"data.eval_fraction={fraction} of {len(blocks)} blocks leaves no training blocks: give more text, a "
            "smaller data.block_size, or data.validation (a held-out file)"
        )
    return blocks.select(range(len(blocks) - n_eval)), blocks.select(range(len(blocks) - n_eval, len(blocks)))


def translation_languages(dataset) -> set[str]:
    """The languages of a `translation` column of {language: text} (the WMT / OPUS layout on the Hub: a
    `Translation` feature, or a struct of strings), as far as the dataset's features say."""
    feature = (getattr(dataset, "features", None) or {}).get("translation")
    if isinstance(feature, datasets.Translation):
        return set(feature.languages)
    return set(feature) if isinstance(feature, dict) else set()


def flatten_translation(dataset, languages: list[str]):
    """Each of `languages` as a column of its own, read from the `translation` column (data.source_column=en,
    data.target_column=fr name languages of it)."""
    return dataset.map(lambda row: {lang: row["translation"][lang] for lang in languages}, remove_columns="translation")


def select_columns(splits: dict, columns: dict[str, str], names: dict[str, list[str]] | None = None) -> dict:
    """Each split (a Dataset or an IterableDataset) with only the task's columns, renamed to the task's names
    (`columns`: task's name -> the dataset's column); a missing column is an error naming the recipe key. `names`:
    a split's column names where the split does not know them (a stream of files, before it is read)."""
    for split, dataset in splits.items():
        present = (names or {}).get(split) or dataset.column_names
        missing = [source for source in columns.values() if source not in present]
        languages = translation_languages(dataset) if missing and "translation" in present else set()
        if languages and set(missing) <= languages:
            dataset = flatten_translation(dataset, missing)
            present, missing = dataset.column_names, []
        elif languages:
            missing = [source for source in missing if source not in languages]
            present = [*present, *(f"translation.{language}" for language in sorted(languages))]
        if missing:
            raise InvalidValueError(
                f"the {split} data has no column(s) {missing} (columns: {present}); set "
                + ", ".join(f"data.{name}_column" for name, source in columns.items() if source in missing)
            )
        renamed = dataset.select_columns(list(columns.values()))
        renamed = renamed.rename_columns({s: n for n, s in columns.items() if s != n})
        splits[split] = renamed
    return splits


# ---------------------------------------------------------------------------------------------- packing
PACK_DOCUMENTS = 1000  # documents packed together: the tail of each such group shorter than a block is dropped


def pack_token_ids(documents: Iterable[list[int]], block_size: int, separator: int | None) -> Iterator[list[int]]:
    """Concatenate tokenized documents in their order (`separator`, e.g. EOS, after each) and cut the stream into
    blocks of exactly `block_size` tokens; the tail shorter than a block is dropped."""
    buffer: list[int] = []
    for ids in documents:
        buffer.extend(ids)
        if separator is not None:
            buffer.append(separator)
        while len(buffer) >= block_size:
            yield buffer[:block_size]
            buffer = buffer[block_size:]


def worker_processes(num_proc: int | None) -> int | None:
    """`datasets.map`'s num_proc: None below 2, since num_proc=1 still starts a pool of one worker and a manager."""
    return num_proc if num_proc and num_proc > 1 else None


def tokenize_texts(dataset: datasets.Dataset, tokenizer, num_proc: int | None = None) -> datasets.Dataset:
    """The `text` column as token ids (no special tokens), through `datasets.map`: batched, in `num_proc`
    processes, cached in Arrow files next to a corpus read from disk (a second run with the same tokenizer reuses
    them), so memory is bounded by the corpus on disk rather than by Python lists."""
    return dataset.map(
        lambda batch: {"input_ids": tokenizer(batch["text"], add_special_tokens=False, verbose=False)["input_ids"]},
        batched=True,
        remove_columns=dataset.column_names,
        num_proc=worker_processes(num_proc),
        desc="tokenizing",
    )


def pack_blocks(
    tokenized: datasets.Dataset,
    block_size: int,
    separator: int | None,
    wrap: tuple[int, int] | None = None,
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Blocks of `block_size` token ids from documents in their order (`pack_token_ids`), one `input_ids` column.
    `wrap=(first, last)` puts every block between two special tokens (BERT's [CLS] ... [SEP]). The stream is cut
    per 1,000 documents, so at most a block's worth of tokens per 1,000 documents is dropped."""
    inner = block_size - (2 if wrap else 0)

    def group(batch):
        blocks = list(pack_token_ids(batch["input_ids"], inner, separator))
        return {"input_ids": [[wrap[0], *b, wrap[1]] for b in blocks] if wrap else blocks}

    blocks = tokenized.map(
        group, batched=True, batch_size=PACK_DOCUMENTS, num_proc=worker_processes(num_proc), desc="packing"
    )
    if len(blocks) == 0:
        raise InvalidValueError(
            f"the text holds fewer than block_size={block_size} tokens: use more text or a smaller data.block_size"
        )
    return blocks


def packed_lm_dataset(texts, tokenizer, block_size: int) -> datasets.Dataset:
    """Causal-LM blocks of texts (a list or a dataset with a `text` column), `input_ids` and `labels`."""
    blocks = pack_blocks(tokenize_texts(_as_dataset(texts), tokenizer), block_size, tokenizer.eos_token_id)
    return blocks.map(lambda batch: {"labels": batch["input_ids"]}, batched=True)


def packed_mlm_dataset(texts, tokenizer, block_size: int) -> datasets.Dataset:
    """Masked-LM pretraining blocks, packed as RoBERTa's FULL-SENTENCES inputs (Liu et al. 2019): the documents are
    concatenated with [SEP] between them and cut into blocks of `block_size - 2` tokens, each wrapped as
    [CLS] block [SEP], with a `special_tokens_mask` column. No padding anywhere. Masking is done per batch by `masked_lm_collator` (which never masks
    [CLS] / [SEP]), so each epoch sees new masks."""
    ids = check_special_tokens(tokenizer, ("cls_token", "sep_token"), purpose="packing masked-LM blocks")
    cls, sep = ids["cls_token"], ids["sep_token"]
    blocks = pack_blocks(tokenize_texts(_as_dataset(texts), tokenizer), block_size, sep, wrap=(cls, sep))
    special = set(tokenizer.all_special_ids)
    return blocks.map(
        lambda b: {"special_tokens_mask": [[int(i in special) for i in ids] for ids in b["input_ids"]]}, batched=True
    )


def _as_dataset(texts) -> datasets.Dataset:
    return texts if isinstance(texts, datasets.Dataset) else datasets.Dataset.from_dict({"text": list(texts)})


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


# ---------------------------------------------------------------------------------------------- token-budget batches
def sequence_lengths(rows, column: str) -> list[int]:
    """The length of every row's `column` (a list of token ids), in row order, without reading the ids into Python."""
    if isinstance(rows, datasets.Dataset):
        import pyarrow.compute as pc

        return pc.list_value_length(rows.with_format("arrow")[column]).to_pylist()  # follows select()'s indices
    return [len(row[column]) for row in rows]


def token_budget_batches(
    source_lengths: list[int],
    target_lengths: list[int],
    budget: int,
    seed: int = 0,
    epoch: int = 0,
    min_rows: int = 1,
    shuffle: bool = True,
) -> list[list[int]]:
    """One epoch of `data.batch_tokens` batches (row indices), filled the way fairseq's --max-tokens fills them.

    The rows are sorted by (source length, target length), rows of equal lengths in an order drawn from (seed,
    epoch), and cut into consecutive batches whose padded size, rows x (longest source + longest target), stays within
    `budget`: the source and target tensors the collator pads. A row longer than the budget is a batch of its own.
    A batch holds at least `min_rows` rows (processes x accumulation steps: each gets a row), going over the budget
    where it must, and a shorter remainder at the end joins the batch before it. Then the order of the batches is
    shuffled by the same generator. The cuts depend on the lengths alone, so every epoch has the same number of
    batches, and step s is batch s mod n of epoch s // n. `shuffle=False`: equal lengths in row order, batches
    shortest first."""
    sources, targets = torch.as_tensor(source_lengths), torch.as_tensor(target_lengths)
    generator = torch.Generator().manual_seed(seed * 100003 + epoch)
    order = torch.randperm(len(sources), generator=generator) if shuffle else torch.arange(len(sources))
    order = order[torch.sort(targets[order], stable=True).indices]  # then by source: equal lengths keep the draw
    order = order[torch.sort(sources[order], stable=True).indices]
    cuts, start, longest = [0], 0, (0, 0)
    for i, (source, target) in enumerate(zip(sources[order].tolist(), targets[order].tolist())):
        grown = (max(longest[0], source), max(longest[1], target))
        if i - start >= min_rows and (i - start + 1) * sum(grown) > budget:
            cuts.append(i)
            start, grown = i, (source, target)
        longest = grown
    if len(cuts) > 1 and len(sources) - cuts[-1] < min_rows:
        cuts.pop()  # too few rows left for every process and accumulation step: they join the batch before
    rows = order.tolist()
    batches = [rows[a:b] for a, b in zip(cuts, [*cuts[1:], len(rows)]) if b > a]
    if shuffle:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches


LOCALE_DIR = Path("/usr/share/locale")


def gettext_pairs(target_language: str = "fr", max_pairs: int | None = None, max_chars: int = 200) -> list[dict]:
    """English messages paired with their translations, read from the gettext catalogs (`.mo`) that programs install
    under /usr/share/locale: a small parallel corpus on any Linux machine, no download. Pairs are deduplicated,
    limited to single-line messages of at most `max_chars` characters, and returned in a fixed order that does not
    follow the messages' alphabet (sorted by a hash of the English side): any first `max_pairs`, any cap on the
    held-out pairs, is a fair sample, not the messages that start with punctuation and format strings."""
    import gettext

    folder = LOCALE_DIR / target_language / "LC_MESSAGES"
    catalogs = sorted(folder.glob("*.mo")) if folder.is_dir() else []
    if not catalogs:
        raise MissingFileError(
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
    import hashlib

    def position(pair):
        return hashlib.sha1(pair[0].encode("utf-8")).hexdigest()

    rows = [{"source": s, "target": t} for s, t in sorted(pairs.items(), key=position)]
    return rows[:max_pairs]


BRACKETS = {"(": ")", "[": "]", "{": "}"}


def parentheses_classification(num_examples: int = 4000, seed: int = 0, min_length: int = 4, max_length: int = 24):
    """The balanced colored-parentheses task: is a string of ( ) [ ] { } well nested? Half the examples are
    balanced; the other half are balanced strings with one bracket replaced, so length alone does not give the
    answer. The replaced bracket always leaves some bracket type with unequal opening and closing counts, so counting
    each type does: a model can solve this set without tracking the nesting order (a classifier that calls
    `( [ ) ] { }` balanced can still score 1.0 on it).
    Returns [{"text": "( [ ] ) { }", "label": 1}, ...] (brackets separated by spaces)."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(num_examples):
        pairs = rng.randint(min_length // 2, max_length // 2)
        out, stack = [], []
        while len(out) < 2 * pairs:
            if stack and (len(stack) + len(out) >= 2 * pairs or rng.random() < 0.5):
                out.append(BRACKETS[stack.pop()])
            else:
                stack.append(rng.choice(list(BRACKETS)))
                out.append(stack[-1])
        label = i % 2
        if label == 0:  # corrupt one bracket into a different one: the string stops being balanced
            j = rng.randrange(len(out))
            out[j] = rng.choice([b for b in "()[]{}" if b != out[j]])
            if is_balanced(out):
                label = 1
        rows.append({"text": " ".join(out), "label": label})
    return rows


def is_balanced(brackets) -> bool:
    stack = []
    for b in brackets:
        if b in BRACKETS:
            stack.append(b)
        elif not stack or BRACKETS[stack.pop()] != b:
            return False
    return not stack


PYTHON_TAGS = ("O", "B-KEYWORD", "B-BUILTIN", "B-NAME", "B-NUMBER", "B-STRING")


def python_token_tagging(max_lines: int = 4000, seed: int = 0, max_tokens: int = 32) -> list[dict]:
    """Token classification from the standard library sources: each line of code is split into Python tokens by the
    `tokenize` module, and each token is tagged KEYWORD, BUILTIN, NAME, NUMBER or STRING (single-token entities in
    IOB2 form) or O (operators and punctuation). Returns [{"tokens": [...], "tags": [...]}, ...]."""
    import builtins
    import io
    import keyword
    import random
    import tokenize

    builtin_names = set(dir(builtins))
    rows = []
    for path in stdlib_files():
        try:
            source = path.read_text(encoding="utf-8")
            tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, IndentationError):
            continue
        line: dict[int, list] = {}
        for tok in tokens:
            if tok.type == tokenize.NAME:
                tag = (
                    "B-KEYWORD"
                    if keyword.iskeyword(tok.string)
                    else "B-BUILTIN"
                    if tok.string in builtin_names
                    else "B-NAME"
                )
            elif tok.type == tokenize.NUMBER:
                tag = "B-NUMBER"
            elif tok.type == tokenize.STRING and "\n" not in tok.string and len(tok.string) < 40:
                tag = "B-STRING"
            elif tok.type == tokenize.OP:
                tag = "O"
            else:
                continue
            line.setdefault(tok.start[0], []).append((tok.string, tag))
        for items in line.values():
            if 3 <= len(items) <= max_tokens:
                rows.append({"tokens": [s for s, _ in items], "tags": [t for _, t in items]})
        if len(rows) >= 4 * max_lines:
            break
    random.Random(seed).shuffle(rows)
    return rows[:max_lines]


# ---------------------------------------------------------------------------------------------- seq2seq synthetic tasks
def sequence_reversal(
    num_examples: int = 20000,
    seed: int = 0,
    min_length: int = 5,
    max_length: int = 20,
    vocabulary: str = "abcdefghijklmnopqrstuvwxyz",
) -> list[dict]:
    """Reverse a random sequence of symbols: {"source": "k d a", "target": "a d k"} (space-separated, so a BPE
    tokenizer keeps one token per symbol). Lengths are uniform in [min_length, max_length]. Every output token
    depends on one input token far away in the sequence: the task where a fixed-size summary of the source runs
    out of room as sequences grow and attention does not (Bahdanau et al. 2015, figure 2)."""
    import random

    if not 1 <= min_length <= max_length:
        raise ValueError(f"sequence_reversal: need 1 <= min_length <= max_length, got {min_length}, {max_length}")
    rng = random.Random(seed)
    rows = []
    for _ in range(num_examples):
        symbols = rng.choices(vocabulary, k=rng.randint(min_length, max_length))
        rows.append({"source": " ".join(symbols), "target": " ".join(reversed(symbols))})
    return rows


MONTHS = ("January February March April May June July August September October November December").split()
WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()


def date_conversion(num_examples: int = 20000, seed: int = 0, min_year: int = 1900, max_year: int = 2099) -> list[dict]:
    """Dates written the ways people write them, to ISO 8601: {"source": "Thu, Mar 5, 1998", "target": "1998-03-05"}.
    Formats (English month and day names): "March 5, 1998", "5 March 1998", "Thu, Mar 5, 1998", "05.03.1998"
    (day first) and "03/05/1998" (month first, US). The model must reorder fields, spell months as numbers, pad
    days, and learn to ignore the weekday."""
    import datetime
    import random

    rng = random.Random(seed)
    first = datetime.date(min_year, 1, 1).toordinal()
    last = datetime.date(max_year, 12, 31).toordinal()
    rows = []
    for _ in range(num_examples):
        date = datetime.date.fromordinal(rng.randint(first, last))
        month, day, year = MONTHS[date.month - 1], date.day, date.year
        source = rng.choice(
            (
                f"{month} {day}, {year}",
                f"{day} {month} {year}",
                f"{WEEKDAYS[date.weekday()][:3]}, {month[:3]} {day}, {year}",
                f"{day:02d}.{date.month:02d}.{year}",
                f"{date.month:02d}/{day:02d}/{year}",
            )
        )
        rows.append({"source": source, "target": date.isoformat()})
    return rows


# Sequence-to-sequence tasks the training loop finds by name (recipe `data.dataset`): name -> rows(num_examples, seed).
SYNTHETIC_TASKS = {
    "reversal": sequence_reversal,
    "dates": date_conversion,
}


def _rows(make, default: int):
    def build(data) -> datasets.Dataset:
        return datasets.Dataset.from_list(make(data.max_examples or default, seed=HELD_OUT_SEED))

    return build


CO2_WEEKLY_FILE = ("files", "co2_weekly.csv")  # statsmodels' co2.csv, byte for byte: columns date (YYYYMMDD), co2


def co2_rows(data=None) -> datasets.Dataset:
    """The weekly Mauna Loa CO2 series shipped in the package as the time_series task's rows: one row, its name in
    `id`, its weeks in `timestamp` (ISO dates, each week's Saturday) and its values in `target` (ppm by volume; NaN:
    a week without a measurement, an empty field of the file). Nothing of the recipe's data section applies."""
    text = resources.files("hf_seq.data").joinpath(*CO2_WEEKLY_FILE).read_text(encoding="utf-8")
    reader = csv.reader(io.StringIO(text))
    header = next(reader)
    if header != ["date", "co2"]:
        raise RuntimeError(f"{'/'.join(CO2_WEEKLY_FILE)}: expected the header date,co2, got {header}.")
    dates, values = [], []
    for date, value in reader:
        dates.append(f"{date[:4]}-{date[4:6]}-{date[6:]}")
        values.append(float(value) if value else math.nan)
    return datasets.Dataset.from_dict({"id": [CO2], "timestamp": [dates], "target": [values]})


def scores_only(data) -> datasets.Dataset:
    """Embedded scores are no rows of text: the music task reads them (hf_seq.data.music)."""
    raise InvalidValueError(f"data.dataset: {data.dataset!r} holds scores (MIDI), not rows: use it with task: music")


@dataclass(frozen=True)
class EmbeddedData:
    """Data that needs no download, named by a recipe's `data.dataset`. `load(data)` builds its rows from the
    recipe's data section, with the tasks' column names: text; source, target; text, label; tokens, tags; for a
    series (`series=True`, the time_series task), id, timestamp and target, one series a row (the Monash layout).
    `description` is what a model card says of it."""

    name: str
    description: str
    load: Callable[..., datasets.Dataset]
    series: bool = False


EMBEDDED_DATA = {
    entry.name: entry
    for entry in (
        EmbeddedData(
            STDLIB,
            "the CPython standard library sources (`.py` files, tests excluded) of the training machine",
            lambda data: datasets.Dataset.from_dict({"text": stdlib_texts(max_chars=data.max_chars)}),
        ),
        EmbeddedData(
            "gettext",
            "English messages paired with their translations from the system's gettext catalogs",
            lambda data: datasets.Dataset.from_list(gettext_pairs(data.target_language)),
        ),
        EmbeddedData(
            "reversal",
            "the synthetic sequence-reversal task of `hf_seq.data.corpora` (random letter sequences and their reverse)",
            _rows(sequence_reversal, 20000),
        ),
        EmbeddedData(
            "dates", "the synthetic date-format conversion task of `hf_seq.data.corpora`", _rows(date_conversion, 20000)
        ),
        EmbeddedData(
            "parentheses",
            "the synthetic balanced colored-parentheses task of `hf_seq.data.corpora`",
            _rows(parentheses_classification, 4000),
        ),
        EmbeddedData(
            "python-tokens",
            "Python tokens of the standard library sources tagged by the `tokenize` module",
            _rows(python_token_tagging, 4000),
        ),
        EmbeddedData(
            CO2,
            "the weekly mean CO2 concentration at Mauna Loa, 1958-2001 (Scripps; public domain), shipped in hf-seq",
            co2_rows,
            series=True,
        ),
        EmbeddedData(
            CHORALES,
            "the Bach chorales shipped with music21 (the 371 four-part chorales of its chorale iterator, 350 distinct "
            "scores; public domain), converted to MIDI by music21",
            scores_only,
        ),
    )
}
# What the table's readers look up: the rows of a dataset by name (the corpus readers), and what a model card says of
# each embedded dataset it was trained on.
EMBEDDED = {name: entry.load for name, entry in EMBEDDED_DATA.items()}
DATA_DESCRIPTIONS = {name: entry.description for name, entry in EMBEDDED_DATA.items()}
