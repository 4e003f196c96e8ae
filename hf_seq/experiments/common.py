"""What every experiment shares: writing results.md / results.json, claims, figures, a small training loop, threads,
and the language-model metrics (the same computation the training loop and `hf-seq evaluate` report)."""

import dataclasses
import json
import math
import os
import platform
import shlex
import time
import types
import typing
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers.optimization import get_cosine_with_min_lr_schedule_with_warmup

from hf_seq.errors import InvalidValueError
from hf_seq.evaluation.metrics import lm_metrics, token_byte_lengths  # noqa: F401  (the figures every experiment reports)


def claim(claim: str, measured: str, agrees: bool) -> dict:
    """One row of the claims table: what the lecture claims, what this run measured, and whether they agree."""
    return {"claim": claim, "measured": measured, "agrees": bool(agrees)}


def stdlib_tokenizer_and_blocks(
    vocab_size: int, train_chars: int, heldout_chars: int, block_size: int, style: str = "byte_level"
) -> tuple:
    """A BPE tokenizer trained on the first `train_chars` characters of the standard library sources (files in a
    fixed order), and (training blocks, held-out blocks) of `block_size` token ids, (N, block_size) each: the text
    packed in document order with EOS between files; the held-out text is the files that follow."""
    from hf_seq.data.corpora import pack_token_ids, stdlib_texts
    from hf_seq.data.tokenization import train_bpe_tokenizer

    texts = stdlib_texts(max_chars=train_chars + heldout_chars)
    split, total = len(texts), 0
    for i, text in enumerate(texts):
        total += len(text)
        if total >= train_chars:
            split = i + 1
            break
    train_texts, heldout_texts = texts[:split], texts[split:] or texts[-1:]
    tokenizer = train_bpe_tokenizer(train_texts, vocab_size=vocab_size, style=style, show_progress=False)
    separator = tokenizer.eos_token_id if style == "byte_level" else tokenizer.sep_token_id

    def blocks(part):
        documents = (tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"] for text in part)
        return torch.tensor(list(pack_token_ids(documents, block_size, separator)))

    return tokenizer, blocks(train_texts), blocks(heldout_texts)


@contextmanager
def torch_threads(n: int | None):
    """Run the block on `n` torch threads (None: leave it). Small recurrent steps gain nothing from a second thread
    and lose a barrier per step on a busy machine, so most experiments train on one."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def train(
    model,
    batch: Callable[[int], dict],
    steps: int,
    learning_rate: float,
    warmup: int | None = None,
    clip: float = 1.0,
    weight_decay: float = 0.0,
    before_step: Callable[[int], None] | None = None,
    min_lr_rate: float = 0.0,
) -> dict:
    """AdamW on `model(**batch(step)).loss` for `steps` steps, linear warm-up then cosine decay to `min_lr_rate` x the
    peak rate, gradient clipping.
    `before_step(step)` runs before each step (e.g. to set a scheduled-sampling probability). Returns the losses and
    the wall-clock seconds."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    warmup = min(100, steps // 10 + 1) if warmup is None else warmup
    scheduler = get_cosine_with_min_lr_schedule_with_warmup(optimizer, warmup, steps, min_lr_rate=min_lr_rate)
    model.train()
    losses, start = [], time.perf_counter()
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        loss = model(**batch(step)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    model.eval()
    tail = losses[-max(1, steps // 20) :]
    return {"losses": losses, "final_loss": sum(tail) / len(tail), "seconds": time.perf_counter() - start}


def total_parameters(model) -> int:
    """Every weight of `model`, embeddings included (the study runner's `count_parameters` also gives the
    non-embedding count)."""
    return sum(p.numel() for p in model.parameters())


def matched_width(build: Callable[[int], torch.nn.Module], budget: int, step: int = 8, widest: int = 1024) -> int:
    """The width (a multiple of `step`) whose model `build(width)` is closest to `budget` weights. The count grows
    with the width, so the search stops once past the budget; the models are built on the meta device (shapes
    only, no memory, no initialisation)."""
    best, best_gap = step, float("inf")
    for width in range(step, widest + 1, step):
        with torch.device("meta"):
            count = total_parameters(build(width))
        if abs(count - budget) < best_gap:
            best, best_gap = width, abs(count - budget)
        if count > budget:
            break
    return best


def figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas: no window, pyplot's global state left alone."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    return path.name


def markdown_table(header: Iterable[str], rows: Iterable[Iterable]) -> str:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def prose(doc: str) -> str:
    """A module docstring as Markdown: wrapped lines joined, each `- ` line starting a list item."""
    paragraphs = []
    for paragraph in doc.strip().split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if line.strip().startswith("- ") or not lines:
                lines.append(line.strip())
            else:
                lines[-1] += " " + line.strip()
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def claims_table(claims: list[dict]) -> str:
    return markdown_table(
        ("the lecture claims", "this run measured", "agrees"),
        ((c["claim"], c["measured"], "yes" if c["agrees"] else "**no**") for c in claims),
    )


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpu": platform.machine(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__.split("+")[0],
        "load_average": [round(x, 2) for x in load],
    }


def finish(name: str, title: str, output_dir: Path, results: dict, body: str, started: float, plots: list[str]) -> dict:
    """Write results.json (`results` plus timing, machine and plot names) and results.md (title, command, `body`,
    the claims table, the plots); return the results."""
    results = {
        "experiment": name,
        **results,
        "seconds": round(time.perf_counter() - started, 1),
        "cpu_seconds": round(_cpu_seconds(), 1),
        "machine": machine(),
        "plots": plots,
    }
    options, command = results.get("options", {}), f"hf-seq experiment {name}"
    if options.get("quick"):
        command += " --quick"
    if options.get("set"):
        command += " --set " + " ".join(map(shlex.quote, options["set"]))
    results["command"] = command
    text = "\n\n".join(
        [
            f"# {title}",
            f"`{results['command']}`: {results['seconds']:.0f} s wall clock, {results['cpu_seconds']:.0f} CPU seconds, "
            f"on {results['machine']['cores']} CPU cores shared with other work (load average "
            f"{results['machine']['load_average'][0]:.2f} at the end).",
            body.strip(),
            "## What the lecture claims, and what this run measured",
            claims_table(results["claims"]),
            *(f"![{plot}]({plot})" for plot in plots),
        ]
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "results.md").write_text(text + "\n")
    (output_dir / "results.json").write_text(json.dumps(_plain(results), indent=1, allow_nan=False) + "\n")
    return results


def _cpu_seconds() -> float:
    """CPU time of this process and of the worker processes it waited for, since it started (the wall clock of a run
    on a shared machine says more about the others' load than about the run)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _plain(value):
    """JSON-ready: paths as strings, tuples as lists, NaN and infinities as null (JSON has no such numbers)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def output_folder(output_dir, name: str) -> Path:
    path = Path(output_dir if output_dir is not None else Path("hf-seq-experiments") / name)
    path.mkdir(parents=True, exist_ok=True)
    return path


# ---------------------------------------------------------------------------------------------- settings
def chosen_settings(name: str, base, overrides: Iterable[str] = (), changes: dict | None = None):
    """`base` (an experiment's frozen `Settings`, the default or the quick one) with `overrides` (`KEY=VALUE`
    strings, as `--set` gives them) and then `changes` (keyword values) applied. Each key must be a setting and each
    value of its type; a string is read as that type (`steps=100`, `seeds=0,1`, `threads=none`). An error names the
    key, the value and what is allowed."""
    values = {}
    for item in (overrides,) if isinstance(overrides, str) else overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidValueError(f"{name}: --set {item!r} is not KEY=VALUE (e.g. steps=100)")
        values[key.strip()] = value  # as given: a text setting may end in spaces or a newline
    values |= changes or {}
    hints, checked = typing.get_type_hints(type(base)), {}
    for key, value in values.items():
        if key not in hints:
            allowed = ", ".join(f"{k} ({type_name(t)})" for k, t in hints.items())
            raise InvalidValueError(f"{name}: unknown setting {key}={value!r}; the settings: {allowed}")
        try:
            checked[key] = _as_type(value, hints[key])
        except (ValueError, KeyError):
            raise InvalidValueError(f"{name}: {key}={value!r}: expected {type_name(hints[key])}") from None
    return dataclasses.replace(base, **checked)  # a settings class's own checks (__post_init__) run here


def check_choices(name: str, key: str, given: tuple, allowed) -> None:
    """Refuse a tuple setting that holds a value outside `allowed`, naming the setting, the value and the choices."""
    unknown = [value for value in given if value not in allowed]
    if unknown:
        raise InvalidValueError(
            f"{name}: {key}={','.join(map(str, given))}: unknown {unknown}; allowed: {list(allowed)}"
        )


def settings_record(s, base, quick: bool) -> dict:
    """results.json's "options": the mode, every setting, and `set`: the settings changed from the mode's, as `--set`
    takes them (so that the command written in results.md runs again)."""
    changed = [
        f"{f.name}={_as_text(getattr(s, f.name))}"
        for f in dataclasses.fields(s)
        if getattr(s, f.name) != getattr(base, f.name)
    ]
    return {"quick": quick, "set": changed, **dataclasses.asdict(s)}


def type_name(annotation) -> str:
    """int, float, str, bool, `int or none`, `comma-separated int`: a setting's type as the command line takes it."""
    options = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join([*(type_name(a) for a in options), "none"])
    if typing.get_origin(annotation) is tuple:
        return f"comma-separated {type_name(options[0])}"
    return annotation.__name__


def _as_type(value, annotation):
    """`value` as `annotation` (int, float, str, bool, X | None, tuple[X, ...]), a string read as that type; a
    ValueError (or KeyError) where it is not one."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        (annotation,) = [a for a in arguments if a is not type(None)]
        return _as_type(value, annotation)
    if origin is tuple:
        items = value.strip("[]() ").split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ValueError(value)
        return tuple(_as_type(item.strip() if isinstance(item, str) else item, arguments[0]) for item in items)
    if isinstance(value, str) and annotation is not str:
        readers = {bool: lambda text: {"true": True, "false": False}[text.lower()], int: int, float: float}
        value = readers[annotation](value)
    if annotation is float and type(value) is int:
        value = float(value)
    if type(value) is not annotation:
        raise ValueError(value)
    return value


def _as_text(value) -> str:
    """A setting's value as `--set` reads it back."""
    if isinstance(value, tuple):
        return ",".join(map(_as_text, value))
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


# Synthetic letter tasks (hf_seq.data.sequence_reversal) read one token per letter; ids of the special tokens first.
PAD, BOS, EOS, SEP = 0, 1, 2, 3
LETTERS = "abcdefghijklmnopqrstuvwxyz"
LETTER_IDS = {letter: i + 4 for i, letter in enumerate(LETTERS)}
ID_TOKENS = {i: letter for letter, i in LETTER_IDS.items()} | {PAD: "<pad>", BOS: "<s>", EOS: "</s>", SEP: "|"}
LETTER_VOCAB_SIZE = len(ID_TOKENS)


def letter_ids(text: str) -> list[int]:
    """'k d a' -> the letters' ids (the synthetic tasks separate symbols by spaces)."""
    return [LETTER_IDS[c] for c in text.split()]
