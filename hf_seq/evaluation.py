"""Evaluation metrics, written to be passed to `Trainer(compute_metrics=...)`.

Trainer(..., compute_metrics=classification_metrics)                            # accuracy, macro F1
Trainer(..., compute_metrics=token_classification_metrics(config.id2label))    # token accuracy, entity F1
Seq2SeqTrainer(..., compute_metrics=bleu_metrics(tokenizer))                      # BLEU of generated text
"""

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


__all__ = ["bleu_metrics", "classification_metrics", "corpus_bleu", "entity_spans", "token_classification_metrics"]
