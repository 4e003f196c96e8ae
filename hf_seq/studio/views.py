"""What every view shares: the models a view reads (`Loaded`) and the kinds each view reads, the text as tokens, and
a view's dict as CSV."""

import csv
import io
from dataclasses import dataclass, field

import numpy as np

MAX_TOKENS = 512  # a view reads at most this many tokens of the text (the app says so when it cuts)
NGRAM = "ngram"  # the kind of the Kneser-Ney n-gram (hf_seq.baselines.ngram), the one model the registry does not hold
# The views every causal language model answers (surprisal, the lineage strip, two models, context reach, sampling):
# the families with an AutoModelForCausalLM, and the n-gram.
LANGUAGE_MODEL = "language_model"
# The music view (music.py): the causal language models of a music run (`Loaded.music`), whose tokens are notes; they
# are offered there only, and the text views offer every other model.
MUSIC = "music"


def view_kinds(view: str) -> tuple[str, ...]:
    """The kinds of model the studio's `view` reads, from the registry's rows: for `LANGUAGE_MODEL` every kind of
    the families with an AutoModelForCausalLM and the n-gram; for `NGRAM` the n-gram; for any other view the kinds
    whose `Family.studio_views` name it."""
    from hf_seq.registry import FAMILIES

    causal = tuple(kind for fam in FAMILIES if "AutoModelForCausalLM" in fam.models for kind in fam.kinds)
    if view == LANGUAGE_MODEL:
        return (*causal, NGRAM)
    if view == MUSIC:
        return causal
    if view == NGRAM:
        return (NGRAM,)
    kinds = tuple(kind for fam in FAMILIES for kind, views in fam.studio_views.items() if view in views)
    if not kinds:
        named = sorted({v for fam in FAMILIES for views in fam.studio_views.values() for v in views})
        raise ValueError(f"view={view!r} is read by no family; views: {[LANGUAGE_MODEL, NGRAM, MUSIC, *named]}")
    return kinds


def reads(view: str, loaded: "Loaded") -> bool:
    """Whether the studio's `view` reads `loaded`: its kind is one `view_kinds(view)` names, and the music view reads
    the models of music runs while every other view reads the others."""
    return loaded.kind in view_kinds(view) and loaded.music == (view == MUSIC)


@dataclass
class Loaded:
    """One model the studio shows: its name (the run folder's), the model in eval mode (None for the n-gram), its
    tokenizer, and for the n-gram its counts (`hf_seq.baselines.ngram.KneserNeyLM`). `kind` says which views read it
    (`view_kinds`): taken from the model's config through the registry (`Family.kind_of`: the family's name, or for
    the ssm family `mamba` or `s4d`), `ngram` for the n-gram. A family's name given as `kind` is taken as the kind
    its config names; any other kind that is not the config's is refused. `music`: the run trained for a task whose
    tokens are notes (`tasks.reads_music`): shown by the music view only; `extra["recipe"]` is then its recipe, for
    its held-out pieces and its window."""

    name: str
    model: object | None
    tokenizer: object
    kind: str | None = None
    ngram: object | None = None
    extra: dict = field(default_factory=dict)
    music: bool = False

    view_kinds = staticmethod(view_kinds)  # so the view modules, which hold `Loaded`, ask it where they check a kind

    def __post_init__(self):
        if self.model is None and self.ngram is None:
            if self.kind is None:
                raise ValueError(f"Loaded {self.name!r}: give a model, an n-gram (ngram=) or its kind")
            return  # a stand-in without a model: its kind is the one given
        kind, names = self._registry_kind()
        if self.kind not in (None, *names):
            raise ValueError(f"Loaded {self.name!r}: kind={self.kind!r}, but its model is of kind {kind!r}")
        self.kind = kind

    def _registry_kind(self) -> tuple[str, tuple[str, ...]]:
        """(the model's kind, the names a caller may give for it: the kind, or its family's name)."""
        if self.ngram is not None:
            return NGRAM, (NGRAM,)
        from hf_seq.registry import family

        try:
            fam = family(self.model.config.model_type)
        except KeyError as error:
            raise ValueError(f"Loaded {self.name!r}: the studio reads hf-seq models; {error.args[0]}") from None
        kind = fam.kind_of(self.model.config)
        return kind, (kind, fam.name)


def token_limit(loaded: Loaded) -> int:
    """How many tokens a view reads: MAX_TOKENS, or fewer where the model's position table ends sooner."""
    positions = getattr(getattr(loaded.model, "config", None), "max_position_embeddings", None)
    return min(MAX_TOKENS, positions or MAX_TOKENS)


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
