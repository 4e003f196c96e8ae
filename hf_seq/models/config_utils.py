"""Helpers every hf-seq config uses: options are checked when the config is built, and the error names what
is allowed, so a typo never trains the wrong model."""

import dataclasses
import difflib
from collections.abc import Iterable


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
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{type(config).__name__}: {name} must be in [0, 1), got {value!r}.")


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
