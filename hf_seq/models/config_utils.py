"""Helpers every hf-seq config uses: options are checked when the config is built, and the error names what
is allowed, so a typo never trains the wrong model."""

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable

from transformers import PreTrainedConfig


def check_choice(config, name: str, allowed: Iterable[str]) -> None:
    value = getattr(config, name)
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{type(config).__name__}: {name}={value!r} is not supported; allowed values: {allowed}.")


def check_positive(config, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{type(config).__name__}: {name} must be a positive integer, got {value!r}.")


def check_probability(config, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ValueError(f"{type(config).__name__}: {name} must be a number in [0, 1), got {value!r}.")


def resolve_options(config, extra: dict) -> None:
    """The first step of every hf-seq config's `__post_init__`, before any value is read:

    - Other libraries' names for a field (the class's `attribute_map`, e.g. GPT-2's `n_head`) are applied now.
      transformers would set them only at the end of `__post_init__`, after the defaults were checked and
      derived fields (`intermediate_size = 4 * hidden_size`) were computed from the wrong values.
    - A name in the class's `option_groups` (e.g. `dropout`) sets every field of its group.
    - Misspelled options are refused, and every field declared by the family must have its declared type: a string
      where a bool belongs (`tie_word_embeddings="no"`) would otherwise act as True.
    """
    cls = type(config)
    aliases = getattr(cls, "attribute_map", {})
    groups = getattr(cls, "option_groups", {})
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for key in [k for k in extra if k in aliases or k in groups]:
        value = extra.pop(key)
        for target in groups.get(key, (aliases.get(key),)):
            current = getattr(config, target)
            if current != defaults.get(target) and current != value:
                raise ValueError(
                    f"{cls.__name__}: {key}={value!r} sets {target}, which was also given as {current!r}; "
                    "pass only one of them."
                )
            setattr(config, target, value)
    num_labels = extra.get("num_labels")
    if num_labels is not None and (isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1):
        raise ValueError(f"{cls.__name__}: num_labels must be an integer >= 1, got {num_labels!r}.")
    reject_misspelled_options(config, extra)
    check_field_types(config)


def _type_name(annotation) -> str | None:
    """What a field annotation allows, in words, or None for annotations not checked here."""
    if annotation is bool:
        return "a bool (True or False)"
    if annotation is int:
        return "an integer"
    if annotation is float:
        return "a number"
    if annotation is str:
        return "a string"
    if typing.get_origin(annotation) is list and typing.get_args(annotation) == (int,):
        return "a list of integers"
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        names = [_type_name(a) if a is not type(None) else "None" for a in typing.get_args(annotation)]
        return None if None in names else " or ".join(names)
    return None


def _has_type(value, annotation) -> bool:
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if typing.get_origin(annotation) is list:
        return isinstance(value, list) and all(_has_type(v, typing.get_args(annotation)[0]) for v in value)
    return any(_has_type(value, a) for a in typing.get_args(annotation))


def check_field_types(config) -> None:
    """Every field the family declares (not transformers' base fields) holds a value of its annotated type."""
    cls = type(config)
    own = {}
    for klass in reversed(cls.__mro__):
        if issubclass(klass, PreTrainedConfig) and klass is not PreTrainedConfig:
            own.update(klass.__dict__.get("__annotations__", {}))
    for name, annotation in own.items():
        if name.startswith("_") or typing.get_origin(annotation) is typing.ClassVar:
            continue
        expected = _type_name(annotation)
        value = getattr(config, name, None)
        if expected is not None and not _has_type(value, annotation):
            raise ValueError(f"{cls.__name__}: {name} must be {expected}, got {value!r}.")


def check_common_values(config) -> None:
    """The last checks of every hf-seq config's `__post_init__`, on fields most families share: special token ids
    inside the vocabulary, positive `layer_norm_eps` and `rope_theta`, every `*dropout` in [0, 1), a non-negative
    `initializer_range`, and at least one label.

    A special token id left at the family's default (GPT-2's 50256) that a smaller vocabulary does not hold is unset
    (None): it named a token of another vocabulary, and no generated token could ever equal it."""
    cls = type(config).__name__
    vocab_size = getattr(config, "vocab_size", None)
    for f in dataclasses.fields(config):
        if not f.name.endswith("_token_id") or vocab_size is None:
            continue
        value = getattr(config, f.name)
        if value == f.default and isinstance(value, int) and value >= vocab_size:
            setattr(config, f.name, None)
            continue
        for token_id in value if isinstance(value, list) else [value]:
            if token_id is not None and not 0 <= token_id < vocab_size:
                raise ValueError(
                    f"{cls}: {f.name}={value!r} is outside the vocabulary: token ids must be in [0, {vocab_size - 1}] "
                    f"(vocab_size={vocab_size}). Set the special token ids from the tokenizer, or enlarge vocab_size."
                )
    for name in ("layer_norm_eps", "rope_theta"):
        value = getattr(config, name, None)
        if value is not None and not value > 0:
            raise ValueError(f"{cls}: {name} must be > 0, got {value!r}.")
    check_probability(config, *(f.name for f in dataclasses.fields(config) if f.name.endswith("dropout")))
    initializer_range = getattr(config, "initializer_range", None)
    if initializer_range is not None and initializer_range < 0:
        raise ValueError(f"{cls}: initializer_range (a standard deviation) must be >= 0, got {initializer_range!r}.")
    if config.id2label is not None and len(config.id2label) < 1:
        raise ValueError(f"{cls}: num_labels must be >= 1, got {len(config.id2label)} (id2label={config.id2label}).")


def reject_misspelled_options(config, extra: dict) -> None:
    """transformers keeps unknown keyword arguments as plain attributes (users rely on that), so a misspelled option
    would silently fall back to its default. Reject extras that are one typo away from a real field."""
    names = [f.name for f in dataclasses.fields(config)]
    for key in extra:
        if key.startswith("_") or key in names:
            continue
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.85)
        if close:
            raise ValueError(
                f"{type(config).__name__} got an unknown option {key!r}; did you mean {close[0]!r}? "
                f"Options: {sorted(n for n in names if not n.startswith('_'))}."
            )


def fill_auto_map(config) -> None:
    """Give the config the full `auto_map` of its family (set on the class by `hf_seq.registry`), so that
    `save_pretrained` writes every Auto class, not only the one of the object saved, and the folder loads with
    `trust_remote_code=True` where hf-seq is not installed. A config read from such a folder keeps its own map."""
    family_map = getattr(type(config), "family_auto_map", None)
    if getattr(config, "auto_map", None) is None and family_map:
        config.auto_map = dict(family_map)
