"""What every view shares: the models a view reads (`Loaded`), the text as tokens, and a view's dict as CSV."""

import csv
import io
from dataclasses import dataclass, field

import numpy as np

MAX_TOKENS = 512  # a view reads at most this many tokens of the text (the app says so when it cuts)


@dataclass
class Loaded:
    """One model the studio shows: its name (the run folder's), the model in eval mode (None for the n-gram), its
    tokenizer, and for the n-gram member its counts (`hf_seq.baselines.ngram.KneserNeyLM`). `kind` is the family's name in
    the registry (`gpt`, `rnn`, `ssm`, ...) or `ngram`."""

    name: str
    model: object | None
    tokenizer: object
    kind: str
    ngram: object | None = None
    extra: dict = field(default_factory=dict)


def encode(loaded: Loaded, text: str, limit: int = MAX_TOKENS) -> tuple[list[int], list[str]]:
    """(ids, the token strings as the text shows them) of `text` under the model's tokenizer, at most `limit` tokens."""
    tokenizer = loaded.tokenizer
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:limit]
    return ids, [tokenizer.decode([i]) for i in ids]


PNG_DPI = 110  # a view's figure as a PNG: this resolution, or less for a wide figure
PNG_WIDTH = 1800  # pixels: a wide figure (every attention head) is rendered no wider, in a third of the time


def save_png(figure, target) -> None:
    """A view's figure as a PNG (a path or a binary file), at most `PNG_WIDTH` pixels wide."""
    figure.savefig(target, format="png", dpi=min(PNG_DPI, PNG_WIDTH / figure.get_figwidth()))  # laid out: constrained


def to_csv(result: dict) -> str:
    """A view's dict as CSV: one column per 1-D entry of the tokens' length (tokens first), or for a single 2-D
    array (`matrix`) its rows labelled by `row_labels` and columns by `column_labels` when present."""
    out = io.StringIO()
    writer = csv.writer(out)
    matrix = result.get("matrix")
    if matrix is not None:
        matrix = np.asarray(matrix)
        columns = result.get("column_labels") or list(range(matrix.shape[1]))
        rows = result.get("row_labels") or list(range(matrix.shape[0]))
        writer.writerow(["", *columns])
        for label, values in zip(rows, matrix):
            writer.writerow([label, *(f"{v:.6g}" for v in values)])
        return out.getvalue()
    tokens = result["tokens"]
    keys = [k for k, v in result.items() if k != "tokens" and np.ndim(v) == 1 and len(v) == len(tokens)]
    writer.writerow(["token", *keys])
    for i, token in enumerate(tokens):
        writer.writerow([token, *(result[k][i] for k in keys)])
    return out.getvalue()
