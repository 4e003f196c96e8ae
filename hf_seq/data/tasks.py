"""The one table of tasks, the way `registry.py` is the one table of families.

A task says what its rows hold, which Auto class models it, the tokenizer style it wants, how rows become model
inputs, how a batch is collated, which labels are predicted (and so how many tokens a batch predicts), how a
trained model is scored, and how its card is tagged. `hf-seq train` (the accelerate loop), `hf-seq finetune`
(Trainer), `hf-seq evaluate` and the experiments all go through `prepare` and `evaluate` here, so they read the
same rows and report the same numbers; nothing outside this file asks which task it is running.
"""

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import (
    DataCollatorForSeq2Seq,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    EvalPrediction,
    default_data_collator,
)

from hf_seq.data import corpora as data_lib
from hf_seq.data import music as music_lib
from hf_seq.data import series as series_lib
from hf_seq.data import streaming
from hf_seq.errors import MissingFileError
from hf_seq.evaluation import metrics as evaluation


# ---------------------------------------------------------------------------------------------- rows -> inputs
def _causal_packing(tokenizer) -> dict:
    return {"separator": tokenizer.eos_token_id}


def _masked_packing(tokenizer) -> dict:
    """RoBERTa's FULL-SENTENCES blocks: [SEP] between documents, each block wrapped as [CLS] ... [SEP]."""
    from hf_seq.data.tokenization import check_special_tokens

    ids = check_special_tokens(tokenizer, ("cls_token", "sep_token"), purpose="packing masked-LM blocks")
    return {"separator": ids["sep_token"], "wrap": (ids["cls_token"], ids["sep_token"])}


def _encode_packed(packing):
    def encode(recipe, tokenizer, rows, label2id):
        blocks = data_lib.pack_blocks(
            data_lib.tokenize_texts(rows, tokenizer, recipe.data.num_proc),
            recipe.data.block_size,
            **packing(tokenizer),
            num_proc=data_lib.worker_processes(recipe.data.num_proc),
        )
        return blocks, {}

    return encode


def _encode_pairs(recipe, tokenizer, rows, label2id):
    """Source ids as `input_ids` (as the translation pipeline tokenizes them: no special tokens), target ids + EOS
    as `labels` (the model shifts them right into its decoder inputs; EOS teaches it to stop). Longer sequences are
    cut to `data.block_size` and counted."""
    from hf_seq.data.tokenization import check_special_tokens

    eos = check_special_tokens(tokenizer, ("eos_token",), purpose="sequence-to-sequence targets")["eos_token"]
    limit = recipe.data.block_size

    def encode(batch):
        sources = tokenizer(batch["source"], add_special_tokens=False, verbose=False)["input_ids"]
        targets = tokenizer(batch["target"], add_special_tokens=False, verbose=False)["input_ids"]
        return {
            "input_ids": [s[:limit] for s in sources],
            "labels": [t[: limit - 1] + [eos] for t in targets],
            "cut_source": [len(s) > limit for s in sources],
            "cut_target": [len(t) + 1 > limit for t in targets],
        }

    encoded = rows.map(
        encode, batched=True, remove_columns=rows.column_names, num_proc=data_lib.worker_processes(recipe.data.num_proc)
    )
    counts = {"truncated_sources": sum(encoded["cut_source"]), "truncated_targets": sum(encoded["cut_target"])}
    return encoded.remove_columns(["cut_source", "cut_target"]), counts


def _encode_classification(recipe, tokenizer, rows, label2id):
    limit = recipe.data.block_size

    def encode(batch):
        encoded = tokenizer(batch["text"], truncation=True, max_length=limit, return_overflowing_tokens=False)
        full = tokenizer(batch["text"], verbose=False)["input_ids"]
        return {
            **encoded,
            "labels": [label2id[str(label)] for label in batch["label"]],
            "cut": [len(ids) > limit for ids in full],
        }

    encoded = rows.map(
        encode, batched=True, remove_columns=rows.column_names, num_proc=data_lib.worker_processes(recipe.data.num_proc)
    )
    return encoded.remove_columns("cut"), {"truncated": sum(encoded["cut"])}


def _encode_tagging(recipe, tokenizer, rows, label2id):
    """The first piece of each word carries its tag; the other pieces and the special tokens are not scored."""
    limit = recipe.data.block_size

    def encode(batch):
        encoded = tokenizer(batch["tokens"], is_split_into_words=True, truncation=True, max_length=limit)
        full = tokenizer(batch["tokens"], is_split_into_words=True)["input_ids"]
        labels = []
        for i, tags in enumerate(batch["tags"]):
            previous, row = None, []
            for word in encoded.word_ids(i):
                row.append(-100 if word is None or word == previous else label2id[tags[word]])
                previous = word
            labels.append(row)
        return {**encoded, "labels": labels, "cut": [len(ids) > limit for ids in full]}

    encoded = rows.map(
        encode, batched=True, remove_columns=rows.column_names, num_proc=data_lib.worker_processes(recipe.data.num_proc)
    )
    return encoded.remove_columns("cut"), {"truncated": sum(encoded["cut"])}


# ---------------------------------------------------------------------------------------------- collators
class CausalLMCollator:
    """Packed blocks need no padding; the labels are the inputs (the model shifts them)."""

    def __call__(self, features):
        batch = default_data_collator([{"input_ids": f["input_ids"]} for f in features])
        batch["labels"] = batch["input_ids"].clone()
        return batch


def _causal_collator(recipe, tokenizer, model, seed=None):
    return CausalLMCollator()


def _masked_collator(recipe, tokenizer, model, seed=None):
    return data_lib.masked_lm_collator(tokenizer, recipe.data.mlm_probability, seed=seed)


def _seq2seq_collator(recipe, tokenizer, model, seed=None):
    return DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, return_tensors="pt")


def _classification_collator(recipe, tokenizer, model, seed=None):
    return DataCollatorWithPadding(tokenizer)


def _tagging_collator(recipe, tokenizer, model, seed=None):
    return DataCollatorForTokenClassification(tokenizer)


class SeriesCollator:
    """Windows of one length need no padding: the past and future values as float tensors (NaN: missing)."""

    def __call__(self, features):
        return {key: torch.tensor([f[key] for f in features]) for key in ("past_values", "future_values")}


def _series_collator(recipe, tokenizer, model, seed=None):
    return SeriesCollator()


def _music_collator(recipe, tokenizer, model, seed=None):
    return music_lib.MusicCollator(tokenizer.pad_token_id)


# ---------------------------------------------------------------------------------------------- scoring
def _score_language_model(task, recipe, model, tokenizer, encoded, rows, device, prefix):
    collator = task.collator(recipe, tokenizer, model, seed=recipe.training.seed)  # the same masks every time
    return evaluation.evaluate_language_model(
        model,
        encoded,
        collator,
        recipe.training.batch_size,
        device,
        evaluation.token_byte_lengths(tokenizer),
        shift_labels=task.shift_labels,
        prefix=prefix,
    )


def _score_seq2seq(task, recipe, model, tokenizer, encoded, rows, device, prefix):
    metrics = _score_language_model(task, recipe, model, tokenizer, encoded, rows, device, prefix)
    if rows is None:
        return metrics
    hypotheses = translate(model, tokenizer, list(rows["source"]), recipe, device)
    scores = evaluation.translation_metrics(hypotheses, list(rows["target"]), list(rows["source"]))
    return metrics | {f"{prefix}_{k}": v for k, v in scores.items()} | decoding(recipe)


def _score_music(task, recipe, model, tokenizer, encoded, rows, device, prefix):
    """Held-out pieces, each scored whole (windows that predict each token once): the NLL per token, its perplexity,
    and bits per note, the pieces' total NLL in bits over their notes (counted in the scores, not the tokens)."""
    collator = task.collator(recipe, tokenizer, model)
    nll, tokens, _ = evaluation.language_model_nll(
        model, encoded, collator, recipe.training.batch_size, device, shift_labels=task.shift_labels
    )
    return evaluation.note_metrics(nll, tokens, sum(encoded["notes"]), prefix)


def _score_series(task, recipe, model, tokenizer, encoded, rows, device, prefix):
    """A forecaster's figures on held-out windows: the NLL per observed future value (`loss`, the distribution's
    log-density, teacher-forced), and from `num_parallel_samples` sample paths (with `rows`) MASE of their median
    (scaled by the seasonal-naive in-sample error, `data.season`), sMAPE and CRPS (the weighted quantile loss)."""
    from hf_seq.evaluation import forecasting

    nll, points, paths = 0.0, 0, []
    collate, size, was_training = SeriesCollator(), recipe.training.batch_size, model.training
    model.eval()
    for start in range(0, len(encoded), size):
        batch = collate(encoded.select(range(start, min(start + size, len(encoded)))))
        batch = {k: v.to(device) for k, v in batch.items()}
        count = task.count_predicted(batch)
        with torch.no_grad():
            nll += float(model(**batch).loss) * count
            points += count
            if rows is not None:
                horizon = batch["future_values"].shape[1]
                drawn = model.generate(past_values=batch["past_values"], prediction_length=horizon).sequences.cpu()
                paths.append(drawn.double().numpy())
    model.train(was_training)
    metrics = {f"{prefix}_loss": nll / max(points, 1), f"{prefix}_points": points}
    if rows is not None:
        actual = np.array(encoded["future_values"], dtype=np.float64)
        history = [np.array(h, dtype=np.float64) for h in encoded["history"]]
        scored = forecasting.score_samples(np.concatenate(paths), actual, history, recipe.data.season)
        metrics |= {f"{prefix}_{k}": v for k, v in scored.items()}
    return metrics


def decoding(recipe) -> dict:
    """The decoding settings of the recipe (`training.generation_*`): what the BLEU of its evaluations used and what
    the saved folder's generation config holds. Beam search finishes once it holds `num_beams` complete outputs."""
    t = recipe.training
    settings = {"num_beams": t.generation_num_beams, "do_sample": False}
    if t.generation_num_beams > 1:
        settings |= {"length_penalty": t.generation_length_penalty, "early_stopping": True}
    if t.generation_max_new_tokens:
        return settings | {"max_new_tokens": t.generation_max_new_tokens}
    return settings | {"max_length_a": t.generation_max_length_a, "max_length_b": t.generation_max_length_b}


def set_decoding(model, recipe) -> None:
    """Write the recipe's decoding settings into the model's generation config, which `save_pretrained` saves as
    generation_config.json: `hf-seq generate`, `pipeline("translation")` and a bare `model.generate()` on the saved
    folder then decode as the run's evaluations did."""
    config = model.generation_config
    settings = decoding(recipe)
    for name, value in settings.items():
        setattr(config, name, value)
    config._from_model_config = False  # settings of its own, not a copy of the model config's
    if "max_new_tokens" not in settings:  # the source-relative rule: no fixed limit left over (Trainer sets one)
        config.max_new_tokens = config.max_length = None


def word_pieces(tokenizer) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three (len(tokenizer),) tensors for `BackToBackRepeatBlock`: bool, the tokens that begin a word (their text
    starts with a space: byte-level BPE's `Ġ`, SentencePiece's `▁`); long, a key shared by the tokens of one text
    once lowercased and without its leading space (`la`, `Ġla`, `ĠLa`); bool, the tokens that continue a word (no
    space, a letter or digit first). A token that is part of a character (a byte of UTF-8 that decodes to U+FFFD
    alone) continues a word if it has no space and has a key of its own; special tokens do neither."""
    special = set(tokenizer.all_special_ids)
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    starts, keys, inside, seen = [], [], [], {}
    for i, piece in enumerate(pieces):
        text = tokenizer.convert_tokens_to_string([piece])
        partial = "\ufffd" in text
        start = i not in special and piece[:1] in ("Ġ", "▁", " ")
        starts.append(start)
        inside.append(i not in special and not start and (partial or text[:1].isalnum()))
        keys.append(seen.setdefault((i,) if partial or i in special else text.lower().lstrip(), len(seen)))
    return torch.tensor(starts), torch.tensor(keys), torch.tensor(inside)


@torch.no_grad()
def translate(model, tokenizer, sources: list[str], recipe, device) -> list[str]:
    """The model's translations of `sources` as the recipe decodes (`decoding`), in batches of
    training.batch_size sources of similar length (sorted, so a batch's longest output limit fits its rows), returned
    in the order given. With training.generation_block_repeats = n > 0 no translation repeats a run of 1 to n words
    back to back (`BackToBackRepeatBlock`)."""
    from hf_seq.models.seq2seq import BackToBackRepeatBlock

    block = recipe.training.generation_block_repeats
    pieces = word_pieces(tokenizer) if block else None
    was_training, side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "right"  # encoder inputs: padding is masked, its side does not matter
    lengths = [len(ids) for ids in tokenizer(sources, add_special_tokens=False, verbose=False)["input_ids"]]
    order = sorted(range(len(sources)), key=lambda i: lengths[i])
    hypotheses: list[str] = [""] * len(sources)
    size = recipe.training.batch_size
    for start in range(0, len(order), size):
        rows = order[start : start + size]
        batch = tokenizer(
            [sources[i] for i in rows],
            add_special_tokens=False,
            padding=True,
            truncation=True,
            max_length=recipe.data.block_size,
            return_tensors="pt",
        ).to(device)
        processors = [BackToBackRepeatBlock(pieces[0], block, *pieces[1:])] if block else None  # one a call
        out = model.generate(**batch, **decoding(recipe), logits_processor=processors)
        for i, text in zip(rows, tokenizer.batch_decode(out, skip_special_tokens=True)):
            hypotheses[i] = text.strip()
    model.train(was_training)
    tokenizer.padding_side = side
    return hypotheses


@torch.no_grad()
def _predict(model, tokenizer, encoded, collator, batch_size, device) -> EvalPrediction:
    """Logits and labels of a classifier over `encoded`, padded to one length (labels with -100)."""
    was_training = model.training
    model.eval()
    logits, labels = [], []
    for start in range(0, len(encoded), batch_size):
        batch = collator([encoded[i] for i in range(start, min(start + batch_size, len(encoded)))])
        batch = {k: v.to(device) for k, v in batch.items()}
        logits.append(model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float().cpu().numpy())
        labels.append(batch["labels"].cpu().numpy())
    model.train(was_training)
    if logits[0].ndim == 3:  # per-token logits: pad every batch to the longest sequence
        length = max(x.shape[1] for x in logits)
        logits = [np.pad(x, ((0, 0), (0, length - x.shape[1]), (0, 0))) for x in logits]
        labels = [np.pad(y, ((0, 0), (0, length - y.shape[1])), constant_values=-100) for y in labels]
    return EvalPrediction(predictions=np.concatenate(logits), label_ids=np.concatenate(labels))


def _score_classifier(task, recipe, model, tokenizer, encoded, rows, device, prefix):
    collator = task.collator(recipe, tokenizer, model)
    prediction = _predict(model, tokenizer, encoded, collator, recipe.training.batch_size, device)
    metrics = task.trainer_metrics(tokenizer, model)(prediction)
    return {f"{prefix}_{k}": v for k, v in metrics.items()}


# ---------------------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Task:
    name: str
    auto_class: str
    command: str  # the hf-seq command that trains it: "train" (accelerate loop) or "finetune" (Trainer)
    columns: dict[str, str]  # the task's column -> the recipe's data key naming it in the dataset
    encode: Callable  # (recipe, tokenizer, rows, label2id) -> (model inputs, truncation counts)
    collator: Callable  # (recipe, tokenizer, model, seed=None) -> a collator
    score: Callable  # (task, recipe, model, tokenizer, encoded, rows, device, prefix) -> metrics
    pipeline_tag: str
    tokenizer_style: str | None = None  # None: the family's (BERT-style for encoders, else byte-level)
    shift_labels: bool = False  # position t predicts labels[t + 1] (causal LMs)
    label_column: str | None = None  # the column whose values name the classes
    language_model: bool = False  # scored by NLL, perplexity and bits per byte
    generates: bool = False  # scored on generated text too (BLEU): the run's decoding settings are saved with it
    tags: tuple[str, ...] = ()
    trainer_metrics: Callable | None = None  # (tokenizer, model) -> a Trainer compute_metrics
    packing: Callable | None = None  # tokenizer -> pack_blocks' separator and wrap: packed blocks, which can stream
    # real values, no tokenizer: recipe -> (encoded train / validation / test splits, notes), in place of reading
    # rows and encoding them; a "token" of the budgets and counts is a value predicted
    series: Callable | None = None
    # scores with a tokenizer of their own (MidiTok): (recipe, tokenizer, folder, is_main, wait, main_first) ->
    # (tokenizer, encoded train / validation / test splits, notes), in place of reading rows and training a BPE tokenizer
    music: Callable | None = None

    def tokenizer_texts(self, rows: datasets.Dataset):
        """The texts a tokenizer is trained on: every text column of the rows."""
        for batch in rows.iter(batch_size=1000):
            for column, values in batch.items():
                if column in ("text", "source", "target"):
                    yield from values
                elif column == "tokens":
                    yield from (" ".join(words) for words in values)

    def __reduce__(self):
        """A task pickles as its name in the table (its functions need not: a study's runs in processes of their own)."""
        return get_task, (self.name,)

    def count_predicted(self, batch: dict) -> int:
        """The values the loss averages over: labels not -100 (shifted for causal LMs); for a series, the observed
        future values."""
        if self.series:
            return int(batch["future_values"].isnan().logical_not().sum())
        labels = batch["labels"]
        return int((labels[:, 1:] if self.shift_labels else labels).ne(-100).sum())

    def count_inputs(self, batch: dict) -> int:
        """The tokens (for a series, the values) a batch feeds the model, padding included."""
        if self.series:
            return int(batch["past_values"].numel() + batch["future_values"].numel())
        return int(batch["input_ids"].numel())

    def count_real(self, batch: dict) -> int:
        """The tokens a batch feeds the model without padding (for a series, the observed values)."""
        if self.series:
            return int(sum(batch[k].isnan().logical_not().sum() for k in ("past_values", "future_values")))
        return int(batch["attention_mask"].sum()) if "attention_mask" in batch else int(batch["input_ids"].numel())


def _classifier_metrics(tokenizer, model):
    return evaluation.classification_metrics


def _tagging_metrics(tokenizer, model):
    return evaluation.token_classification_metrics(model.config.id2label)


def _bleu_metrics(tokenizer, model):
    return evaluation.bleu_metrics(tokenizer)


_PAIRS = {"source": "source_column", "target": "target_column"}
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            "causal_lm",
            "AutoModelForCausalLM",
            "train",
            {"text": "text_column"},
            _encode_packed(_causal_packing),
            _causal_collator,
            _score_language_model,
            "text-generation",
            shift_labels=True,
            language_model=True,
            tags=("causal-lm",),
            packing=_causal_packing,
        ),
        Task(
            "masked_lm",
            "AutoModelForMaskedLM",
            "train",
            {"text": "text_column"},
            _encode_packed(_masked_packing),
            _masked_collator,
            _score_language_model,
            "fill-mask",
            tokenizer_style="bert",
            language_model=True,
            tags=("masked-lm",),
            packing=_masked_packing,
        ),
        Task(
            "seq2seq",
            "AutoModelForSeq2SeqLM",
            "train",
            _PAIRS,
            _encode_pairs,
            _seq2seq_collator,
            _score_seq2seq,
            "translation",
            language_model=True,
            generates=True,
            tags=("seq2seq",),
            trainer_metrics=_bleu_metrics,
        ),
        Task(
            "translation",
            "AutoModelForSeq2SeqLM",
            "finetune",
            _PAIRS,
            _encode_pairs,
            _seq2seq_collator,
            _score_seq2seq,
            "translation",
            language_model=True,
            generates=True,
            tags=("translation",),
            trainer_metrics=_bleu_metrics,
        ),
        Task(
            "sequence_classification",
            "AutoModelForSequenceClassification",
            "finetune",
            {"text": "text_column", "label": "label_column"},
            _encode_classification,
            _classification_collator,
            _score_classifier,
            "text-classification",
            label_column="label",
            tags=("text-classification",),
            trainer_metrics=_classifier_metrics,
        ),
        Task(
            "token_classification",
            "AutoModelForTokenClassification",
            "finetune",
            {"tokens": "tokens_column", "tags": "tags_column"},
            _encode_tagging,
            _tagging_collator,
            _score_classifier,
            "token-classification",
            label_column="tags",
            tags=("token-classification",),
            trainer_metrics=_tagging_metrics,
        ),
        Task(
            "time_series",
            "AutoModelForTimeSeriesPrediction",
            "train",
            {"target": "target_column"},
            None,
            _series_collator,
            _score_series,
            "time-series-forecasting",
            tokenizer_style="none",
            tags=("time-series-forecasting",),
            series=series_lib.prepare_series,
        ),
        Task(
            "music",
            "AutoModelForCausalLM",
            "train",
            {},
            None,
            _music_collator,
            _score_music,
            "text-generation",
            tokenizer_style="miditok",
            shift_labels=True,
            tags=("music", "midi", "symbolic-music"),
            music=music_lib.prepare_music,
        ),
    )
}


def reads_music(name: str | None) -> bool:
    """Whether the task `name` (a recipe's `task`; None or an unknown name: no) reads music with a tokenizer of its own,
    whose tokens are notes (`Task.music`)."""
    return name in TASKS and TASKS[name].music is not None


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}; known: {list(TASKS)}")
    return TASKS[name]


# ---------------------------------------------------------------------------------------------- preparation
@dataclass
class Prepared:
    """What a run needs from its data: the tokenizer, the encoded training set, the encoded held-out sets (`eval`,
    and `test` when there is one) with their raw rows, the class names, and what was cut or left out."""

    task: Task
    tokenizer: object
    train: datasets.Dataset
    held_out: dict[str, datasets.Dataset] = field(default_factory=dict)  # prefix -> encoded
    held_out_rows: dict[str, datasets.Dataset] = field(default_factory=dict)
    label_names: list[str] | None = None
    notes: dict = field(default_factory=dict)  # truncation counts and evaluation caps, reported with the metrics

    @property
    def label_kwargs(self) -> dict:
        if not self.label_names:
            return {}
        return {
            "num_labels": len(self.label_names),
            "id2label": dict(enumerate(self.label_names)),
            "label2id": {name: i for i, name in enumerate(self.label_names)},
        }


def tokenizer_style(recipe, task: Task) -> str:
    from hf_seq.registry import family

    encoder = "AutoModelForMaskedLM" in family(recipe.family).models  # BERT-style inputs: [CLS] A [SEP]
    return recipe.tokenizer.style or task.tokenizer_style or ("bert" if encoder else "byte_level")


def obtain_tokenizer(recipe, task: Task, train_rows, folder: Path | None, is_main: bool = True, wait=lambda: None):
    """The recipe's tokenizer (`tokenizer.path`, else the model it starts from), or one trained on the training
    rows (of a stream: its first `streaming.TOKENIZER_SAMPLE_CHARS` characters), saved once (on the main process) in
    `folder` and loaded from there by every process."""
    from transformers import AutoTokenizer

    from hf_seq.data.tokenization import train_bpe_tokenizer

    path = recipe.tokenizer.path or recipe.model.get("from_pretrained")
    if path:
        return load_tokenizer(path, "tokenizer.path" if recipe.tokenizer.path else "model.from_pretrained")
    if is_main and (folder is None or not (folder / "tokenizer.json").exists()):
        texts = task.tokenizer_texts(train_rows)
        if isinstance(train_rows, datasets.IterableDataset):
            texts = streaming.first_texts(texts)
        tokenizer = train_bpe_tokenizer(
            texts,
            vocab_size=recipe.tokenizer.vocab_size,
            min_frequency=recipe.tokenizer.min_frequency,
            style=tokenizer_style(recipe, task),
        )
        if folder is None:
            return tokenizer
        tokenizer.save_pretrained(folder)
    wait()  # every process, always: the others load what the main process saved
    return AutoTokenizer.from_pretrained(folder)


def load_tokenizer(path: str, what: str):
    """The tokenizer of a local folder or a Hub model named by the recipe key `what`; a folder without a tokenizer or
    a name that does not load is an error in the recipe, naming the key."""
    from transformers import AutoTokenizer

    folder = Path(path).expanduser()
    if folder.is_dir() and not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise MissingFileError(f"{what}: {path} holds no tokenizer (tokenizer.json): give a folder saved by a run")
    if not folder.exists() and (path.startswith((".", "/", "~")) or path.count("/") > 1):
        raise MissingFileError(f"{what}: {path} does not exist (give a folder saved by a run or a Hub name user/model)")
    try:
        return AutoTokenizer.from_pretrained(str(folder) if folder.exists() else path)
    except OSError as error:  # transformers' answer for a Hub name it cannot find or reach
        raise MissingFileError(f"{what}: {path!r} does not load as a tokenizer: {error}") from error


def prepare(
    recipe,
    tokenizer=None,
    tokenizer_folder=None,
    is_main=True,
    wait=lambda: None,
    main_first=None,
    process_index=0,
    num_processes=1,
):
    """Read the recipe's rows (train, validation, test), obtain the tokenizer, encode every split, and cap the
    held-out sets at `data.eval_examples` (noted in `notes`, so the reports say how much was scored). With
    `data.streaming`, `train` is process `process_index`'s `streaming.BlockStream`, read as training asks."""
    task = get_task(recipe.task)
    if task.series:
        return _prepare_series(recipe, task)
    if task.music:
        return _prepare_music(recipe, task, tokenizer, tokenizer_folder, is_main, wait, main_first)
    columns = {name: getattr(recipe.data, key) for name, key in task.columns.items()}
    stream = recipe.data.streaming
    with main_first() if main_first else contextlib.nullcontext():  # the main process fills the datasets cache
        if stream:
            splits = streaming.load_splits(recipe.data, columns)
        else:
            splits = data_lib.load_splits(recipe.data, columns, blocks_fallback=task.packing is not None)
    if tokenizer is None:
        tokenizer = obtain_tokenizer(recipe, task, splits["train"], tokenizer_folder, is_main, wait)
    names = None
    if task.label_column:
        names = label_names(recipe, task, splits)
    label2id = {name: i for i, name in enumerate(names)} if names else None
    prepared = Prepared(task, tokenizer, train=None, label_names=names)
    with main_first() if main_first else contextlib.nullcontext():
        if stream:
            d = recipe.data
            prepared.train = streaming.BlockStream(
                splits["train"],
                tokenizer,
                d.block_size,
                **task.packing(tokenizer),
                seed=recipe.training.seed,
                shuffle=d.shuffle,
                buffer_size=d.shuffle_buffer,
                process_index=process_index,
                num_processes=num_processes,
            )
        else:
            prepared.train, counts = task.encode(recipe, tokenizer, splits["train"], label2id)
            prepared.notes |= {f"train_{k}": v for k, v in counts.items()}
            if "validation" not in splits:  # too few documents to hold some out: the end of the running text
                prepared.train, splits["validation"] = data_lib.hold_out_tail(prepared.train, recipe.data.eval_fraction)
                prepared.notes["eval_held_out_tail"] = len(splits["validation"])
                if is_main:
                    print(
                        f"note: no data.validation and too few documents to hold {recipe.data.eval_fraction:.0%} of "
                        f"them out: held out the last {len(splits['validation'])} blocks of the running text instead "
                        "(contiguous, as char-rnn and nanoGPT do); give data.validation for a split of your own",
                        file=sys.stderr,  # a note, not output: `hf-seq evaluate --json` prints only the JSON
                    )
        for split, prefix in (("validation", "eval"), ("test", "test")):
            if split not in splits:
                continue
            if prepared.notes.get(f"{prefix}_held_out_tail"):  # already blocks
                encoded, counts = splits[split], {}
            else:
                encoded, counts = task.encode(recipe, tokenizer, splits[split], label2id)
            prepared.notes |= {f"{prefix}_{k}": v for k, v in counts.items()}
            rows = splits[split] if len(splits[split]) == len(encoded) else None
            cap = recipe.data.eval_examples
            if cap is not None and cap < len(encoded):
                prepared.notes[f"{prefix}_examples_total"] = len(encoded)
                encoded = encoded.select(range(cap))
                rows = rows.select(range(cap)) if rows is not None else None
            prepared.notes[f"{prefix}_examples"] = len(encoded)
            prepared.held_out[prefix], prepared.held_out_rows[prefix] = encoded, rows
    return prepared


def _prepare_series(recipe, task: Task) -> Prepared:
    """A series task's data: no tokenizer; the splits cut in time by the task (hf_seq.data.series)."""
    encoded, notes = task.series(recipe)
    prepared = Prepared(task, None, train=encoded["train"], notes=notes)
    for split, prefix in (("validation", "eval"), ("test", "test")):
        windows = encoded[split]
        cap = recipe.data.eval_examples
        if cap is not None and cap < len(windows):
            prepared.notes[f"{prefix}_examples_total"] = len(windows)
            windows = windows.select(range(cap))
        prepared.notes[f"{prefix}_examples"] = len(windows)
        prepared.held_out[prefix], prepared.held_out_rows[prefix] = windows, windows
    return prepared


def _prepare_music(recipe, task: Task, tokenizer, folder, is_main, wait, main_first) -> Prepared:
    """A music task's data: the pieces read, split and tokenized by the task (hf_seq.data.music)."""
    tokenizer, encoded, notes = task.music(recipe, tokenizer, folder, is_main, wait, main_first)
    prepared = Prepared(task, tokenizer, train=encoded["train"], notes=notes)
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split in encoded:
            prepared.held_out[prefix], prepared.held_out_rows[prefix] = encoded[split], None
            prepared.notes[f"{prefix}_examples"] = len(encoded[split])
    return prepared


def label_names(recipe, task: Task, splits) -> list[str]:
    """The class names: a dataset's own label names (a `ClassLabel` feature), else the sorted values seen."""
    feature = splits["train"].features[task.label_column]
    inner = getattr(feature, "feature", feature)
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    if recipe.data.dataset == "python-tokens":
        return list(data_lib.PYTHON_TAGS)  # the tag set in its documented order, also for tags absent from a slice
    values = set()
    for split in splits.values():
        for value in split[task.label_column]:
            values.update(str(v) for v in value) if isinstance(value, list) else values.add(str(value))
    return sorted(values)


def evaluate(recipe, prepared: Prepared, model, device, generate_for=None) -> dict:
    """Every held-out set's metrics (`eval_*`, and `test_*` when there is a test set), with what was cut or capped.
    `generate_for`: the held-out sets ("eval", "test") whose generated text is scored too (BLEU and the rest, for
    seq2seq); default all of them. Runs under a forked RNG, so evaluating changes nothing that training draws next."""
    metrics = {}
    devices = [] if torch.device(device).type == "cpu" else [device]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(recipe.training.seed)
        for prefix, encoded in prepared.held_out.items():
            rows = prepared.held_out_rows[prefix] if generate_for is None or prefix in generate_for else None
            metrics |= prepared.task.score(
                prepared.task, recipe, model, prepared.tokenizer, encoded, rows, device, prefix
            )
            metrics[f"{prefix}_examples"] = len(encoded)
    notes = {k: v for k, v in prepared.notes.items() if k.startswith(("eval_", "test_"))}
    return metrics | notes


def describe_scoring(metrics: dict, prefix: str = "eval") -> str:
    """One line saying how much of the held-out set was scored (all of it, or the cap) and what was cut."""
    scored, total = metrics.get(f"{prefix}_examples"), metrics.get(f"{prefix}_examples_total")
    text = f"{prefix}: scored {scored} of {total} held-out examples (data.eval_examples)" if total else ""
    cut = {k.removeprefix(f"{prefix}_"): v for k, v in metrics.items() if "truncated" in k and k.startswith(prefix)}
    if any(cut.values()):
        text += ("; " if text else f"{prefix}: ") + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in cut.items())
    return text
