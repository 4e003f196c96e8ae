"""Evaluation: one set of numbers for the training loop, `hf-seq evaluate`, model cards and the experiments.

Language models (causal, masked, the target side of seq2seq) are scored by `evaluate_language_model`: the NLL of
every predicted token from the model's logits (never the model's own, possibly label-smoothed, loss), its
perplexity, and bits per byte, the total NLL in bits over the UTF-8 bytes those tokens stand for. Bits per byte
does not depend on the tokenizer, so models with different vocabularies rank on one number; an n-gram or any other
scorer reports the same figures through `lm_metrics` and `token_byte_lengths`.

The classification metrics are written to be passed to `Trainer(compute_metrics=...)`:

Trainer(..., compute_metrics=classification_metrics)                            # accuracy, macro F1
Trainer(..., compute_metrics=token_classification_metrics(config.id2label))    # token accuracy, entity F1
Seq2SeqTrainer(..., compute_metrics=bleu_metrics(tokenizer))                      # BLEU of generated text
"""

import math
from collections.abc import Callable, Mapping

import numpy as np


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def classification_metrics(eval_pred) -> dict[str, float]:
    """Accuracy and macro-averaged F1 (the mean of each class's F1, so a rare class counts as much as a frequent
    one) of a sequence classifier, from its logits (N, num_labels) and labels (N,)."""
    logits, labels = eval_pred.predictions, eval_pred.label_ids
    logits = logits[0] if isinstance(logits, tuple) else logits
    predictions = np.asarray(logits).argmax(-1)
    labels = np.asarray(labels)
    f1s = []
    for c in np.union1d(np.unique(labels), np.unique(predictions)):
        true_positives = np.sum((predictions == c) & (labels == c))
        precision = true_positives / max(np.sum(predictions == c), 1)
        recall = true_positives / max(np.sum(labels == c), 1)
        f1s.append(_f1(precision, recall))
    return {"accuracy": float(np.mean(predictions == labels)), "f1": float(np.mean(f1s))}


def entity_spans(tags: list[str]) -> set[tuple[str, int, int]]:
    """The (type, first, last) entities of an IOB2 tag sequence (`B-PER I-PER O ...`). As in the CoNLL evaluation
    script, an `I-X` that does not continue an `X` entity starts one."""
    spans, current = set(), None  # current: [type, first, last]
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, kind = tag.partition("-")
        continues = prefix == "I" and current is not None and current[0] == kind
        if continues:
            current[2] = i
            continue
        if current is not None:
            spans.add(tuple(current))
            current = None
        if prefix in ("B", "I") and kind:
            current = [kind, i, i]
    return spans


def token_classification_metrics(id2label: Mapping[int, str]) -> Callable[..., dict[str, float]]:
    """A `compute_metrics` for token classification: accuracy over the labelled tokens (label -100, i.e. special
    tokens and continuation subwords, is skipped) and, when the labels are IOB2 tags, entity-level precision, recall
    and F1 (an entity counts only if its type and both boundaries are right, as in the CoNLL-2003 evaluation)."""
    id2label = {int(k): v for k, v in id2label.items()}
    tagged = any(label.startswith(("B-", "I-")) for label in id2label.values())

    def compute(eval_pred) -> dict[str, float]:
        logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
        predictions, labels = np.asarray(logits).argmax(-1), np.asarray(eval_pred.label_ids)
        kept = labels != -100
        metrics = {"accuracy": float(np.mean(predictions[kept] == labels[kept]))}
        if tagged:
            found = gold = correct = 0
            for row_predictions, row_labels, row_kept in zip(predictions, labels, kept):
                predicted = entity_spans([id2label[int(i)] for i in row_predictions[row_kept]])
                true = entity_spans([id2label[int(i)] for i in row_labels[row_kept]])
                found, gold, correct = found + len(predicted), gold + len(true), correct + len(predicted & true)
            precision, recall = correct / max(found, 1), correct / max(gold, 1)
            metrics |= {"precision": precision, "recall": recall, "f1": _f1(precision, recall)}
        return metrics

    return compute


def corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """Corpus BLEU (Papineni et al. 2002) of detokenized texts, one reference each, computed by sacrebleu (Post
    2018) with its default 13a tokenization, so scores compare with published ones."""
    import sacrebleu

    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu: {len(hypotheses)} hypotheses but {len(references)} references.")
    return sacrebleu.corpus_bleu(hypotheses, [references]).score


LENGTH_BUCKET = 10  # bleu_by_length: source sentences grouped by length in words, 1-10, 11-20, ...
LAST_BUCKET = 51  # and every source of this many words or more in one bucket
MAX_REPEAT = 4  # repetition_rate: n-grams of 1 to this many words


def repeats_back_to_back(words: list[str], longest: int = MAX_REPEAT) -> bool:
    """Whether some n-gram of 1 to `longest` words is followed at once by itself ("de la de la", "être être", "El
    el"): the stutter of a decoder that translates one source phrase twice. Words are the whitespace-separated
    pieces of the text, compared case-insensitively and otherwise as written, so punctuation attached to a word
    counts ("archivo, archivo" is a list, not a stutter); an n-gram of punctuation only ("- -", "* *") does not
    count. By this definition 0.2% of the test references of the English->Spanish manuals repeat (two typos,
    "que que" and "tema tema"; docs/lineage/translation/corpus.md)."""
    words = [w.lower() for w in words]
    return any(
        words[i : i + n] == words[i + n : i + 2 * n] and any(c.isalnum() for w in words[i : i + n] for c in w)
        for n in range(1, longest + 1)
        for i in range(len(words) - 2 * n + 1)
    )


def translation_metrics(hypotheses: list[str], references: list[str], sources: list[str]) -> dict:
    """The figures of a test set of translations, one reference each, all from sacrebleu (Post 2018) at its
    defaults, so they compare with published detokenized scores:

    - `bleu`: corpus BLEU (Papineni et al. 2002, 13a tokenization) and `bleu_signature`, sacrebleu's string that
      says how it was computed;
    - `chrf`: chrF (Popovic 2015), the character n-gram F-score, kinder than BLEU to morphology and small test sets;
    - `bleu_by_length`: corpus BLEU within each bucket of source length in words (1-10, 11-20, ..., 51+), as Bahdanau
      et al. (2015, figure 2) and Luong et al. (2015, figure 6) draw it; only non-empty buckets;
    - `length_ratio`: hypothesis length / reference length in BLEU's tokens (its brevity penalty starts below 1);
    - `repetition_rate`: the share of hypotheses in which an n-gram of 1-4 words repeats back to back.
    """
    from sacrebleu.metrics import BLEU, CHRF

    if not len(hypotheses) == len(references) == len(sources):
        raise ValueError(
            f"translation_metrics: {len(hypotheses)} hypotheses, {len(references)} references and {len(sources)} "
            "sources; one of each per sentence"
        )
    if not hypotheses:
        raise ValueError("translation_metrics: no sentences to score")
    bleu = BLEU()
    score = bleu.corpus_score(hypotheses, [references])
    buckets: dict[int, list[int]] = {}
    for i, source in enumerate(sources):
        words = max(len(source.split()), 1)
        buckets.setdefault(min((words - 1) // LENGTH_BUCKET, (LAST_BUCKET - 1) // LENGTH_BUCKET), []).append(i)
    by_length = []
    for k in sorted(buckets):
        rows = buckets[k]
        low = k * LENGTH_BUCKET + 1
        last = low >= LAST_BUCKET
        by_length.append(
            {
                "bucket": f"{low}+" if last else f"{low}-{low + LENGTH_BUCKET - 1}",
                "min_words": low,
                "max_words": None if last else low + LENGTH_BUCKET - 1,
                "sentences": len(rows),
                "bleu": BLEU().corpus_score([hypotheses[i] for i in rows], [[references[i] for i in rows]]).score,
            }
        )
    return {
        "bleu": score.score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf": CHRF().corpus_score(hypotheses, [references]).score,
        "bleu_by_length": by_length,
        "length_ratio": score.sys_len / max(score.ref_len, 1),
        "repetition_rate": sum(repeats_back_to_back(h.split()) for h in hypotheses) / len(hypotheses),
    }


def bleu_metrics(tokenizer) -> Callable[..., dict[str, float]]:
    """A `compute_metrics` for `Seq2SeqTrainer(args=Seq2SeqTrainingArguments(predict_with_generate=True))`: decodes
    the generated ids and the labels (-100, the padding of both, is read as the pad token) and scores corpus BLEU
    on a 0-100 scale."""

    def decode(ids) -> list[str]:
        ids = np.asarray(ids[0] if isinstance(ids, tuple) else ids)
        return tokenizer.batch_decode(np.where(ids < 0, tokenizer.pad_token_id, ids), skip_special_tokens=True)

    def compute(eval_pred) -> dict[str, float]:
        hypotheses, references = decode(eval_pred.predictions), decode(eval_pred.label_ids)
        return {"bleu": corpus_bleu([h.strip() for h in hypotheses], [r.strip() for r in references])}

    return compute


# ---------------------------------------------------------------------------------------------- language models
def lm_metrics(nll_nats: float, tokens: int, num_bytes: int, prefix: str = "eval") -> dict[str, float]:
    """The language-model figures of a scored text, from its total NLL (nats, summed over `tokens` predicted
    tokens that stand for `num_bytes` UTF-8 bytes): `{prefix}_loss` (mean NLL per token, nats), its perplexity,
    `{prefix}_bits_per_byte` (total NLL in bits / bytes), and the two counts."""
    if tokens <= 0:
        raise ValueError(f"lm_metrics: no predicted tokens were scored (tokens={tokens}); the held-out set is empty")
    loss = nll_nats / tokens
    return {
        f"{prefix}_loss": loss,
        f"{prefix}_perplexity": math.exp(min(loss, 700.0)),
        f"{prefix}_bits_per_byte": nll_nats / math.log(2) / max(num_bytes, 1),
        f"{prefix}_tokens": int(tokens),
        f"{prefix}_bytes": int(num_bytes),
    }


def token_byte_lengths(tokenizer):
    """A LongTensor (len(tokenizer),): how many UTF-8 bytes of text each token id stands for; 0 for special tokens.

    hf-seq's tokenizers are byte-level BPE, whose vocabulary is written in GPT-2's byte alphabet (one character per
    byte), so a token's length is its byte count exactly, also for a token that holds part of a multi-byte
    character. For any other tokenizer the bytes of the decoded token are counted (a WordPiece `##` marker and
    the space a word-level decoder adds are not text and are not counted)."""
    import torch
    from tokenizers import pre_tokenizers

    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    vocab = tokenizer.get_vocab()
    special = set(tokenizer.all_special_ids) | {
        i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if getattr(t, "special", False)
    }
    byte_level = all(set(token) <= alphabet for token in vocab if vocab[token] not in special)
    lengths = torch.zeros(max(len(tokenizer), max(vocab.values()) + 1), dtype=torch.long)
    for token, index in vocab.items():
        if index in special:
            continue
        if byte_level:
            lengths[index] = len(token)
        else:
            text = tokenizer.convert_tokens_to_string([token.removeprefix("##")]).strip()
            lengths[index] = len(text.encode("utf-8"))
    return lengths


def evaluate_language_model(
    model, dataset, collator, batch_size: int, device, byte_lengths, shift_labels: bool, prefix: str = "eval"
) -> dict[str, float]:
    """Score a tokenized dataset with `labels` (-100 = not predicted): the NLL of each predicted token under the
    model's logits, without label smoothing. `shift_labels`: position t predicts labels[t + 1] (causal LMs);
    otherwise labels[t] (masked LMs, and seq2seq models, whose decoder inputs are the labels shifted right)."""
    nll, tokens, num_bytes = language_model_nll(
        model, dataset, collator, batch_size, device, byte_lengths, shift_labels
    )
    return lm_metrics(nll, tokens, num_bytes, prefix)


def language_model_nll(
    model, dataset, collator, batch_size: int, device, byte_lengths=None, shift_labels: bool = True
) -> tuple[float, int, int]:
    """(total NLL in nats, predicted tokens, the bytes they stand for) of a tokenized dataset, as
    `evaluate_language_model` scores it; `byte_lengths` None: no bytes counted (0)."""
    import torch
    import torch.nn.functional as F

    was_training = model.training
    model.eval()
    byte_lengths = byte_lengths.to(device) if byte_lengths is not None else None
    nll, tokens, num_bytes = 0.0, 0, 0
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            batch = collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
            batch = {k: v.to(device) for k, v in batch.items() if k != "special_tokens_mask"}
            labels = batch.pop("labels")
            if "decoder_input_ids" not in batch and getattr(model.config, "is_encoder_decoder", False):
                batch["labels"] = labels  # the model shifts them into decoder inputs; its loss is not used
            logits = model(**batch).logits.float()
            if shift_labels:
                logits, labels = logits[:, :-1], labels[:, 1:]
            kept = labels.ne(-100)
            targets = labels[kept]
            nll += F.cross_entropy(logits[kept], targets, reduction="sum").item()
            tokens += int(targets.numel())
            num_bytes += int(byte_lengths[targets].sum()) if byte_lengths is not None else 0
    model.train(was_training)
    return nll, tokens, num_bytes


def note_metrics(nll_nats: float, tokens: int, notes: int, prefix: str = "eval") -> dict[str, float]:
    """The figures of scored music, from its total NLL (nats, summed over `tokens` predicted tokens that encode
    `notes` notes): `{prefix}_loss` (mean NLL per token, nats), its perplexity, `{prefix}_bits_per_note` (total NLL in
    bits / notes: like bits per byte for text, a figure that does not depend on the tokenization), and the counts."""
    if tokens <= 0 or notes <= 0:
        raise ValueError(
            f"note_metrics: nothing was scored (tokens={tokens}, notes={notes}); the held-out set is empty"
        )
    loss = nll_nats / tokens
    return {
        f"{prefix}_loss": loss,
        f"{prefix}_perplexity": math.exp(min(loss, 700.0)),
        f"{prefix}_bits_per_note": nll_nats / math.log(2) / notes,
        f"{prefix}_tokens": int(tokens),
        f"{prefix}_notes": int(notes),
    }


__all__ = [
    "evaluate_language_model",
    "language_model_nll",
    "lm_metrics",
    "note_metrics",
    "token_byte_lengths",
    "bleu_metrics",
    "classification_metrics",
    "corpus_bleu",
    "entity_spans",
    "token_classification_metrics",
    "translation_metrics",
]
