"""Gated recurrent units on music (Chung, Gulcehre, Cho and Bengio 2014, "Empirical evaluation of gated recurrent
neural networks on sequence modeling").

Chung et al. trained one-layer networks of tanh units, GRUs and LSTM units, of about equal parameter counts (about 20k
for music), on four polyphonic music corpora (Nottingham, JSB Chorales, MuseData, Piano-midi, as piano rolls) and
compared their average negative log-probability per time step on held-out pieces: the gated units were ahead of the
tanh units on most corpora, and the GRU and the LSTM were close, neither better on every corpus.

Re-measured here on the Bach chorales music21 ships, through the music lineage (`hf-seq lineage --task music`,
members `elman`, `gru` and `lstm`, one layer each): the pieces split whole, the training pieces transposed, MidiTok's
REMI events with BPE, every cell trained with the same optimizer, schedule and token budget at each size, sizes
matched by non-embedding parameters (the recurrence and the output projection: the token table, of the same width
for every cell, is left out, so the total counts match too), several seeds, and scored in bits per note on the
held-out pieces. Chung et al.'s sizes counted every weight of a network reading 88 piano keys; a table of 1,024
events of width 64 alone holds 65k weights, so their ~20k is matched here on the part that differs between the cells.
"""

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .common import (
    chosen_settings,
    claim,
    figure,
    finish,
    markdown_table,
    output_folder,
    prose,
    save_figure,
    settings_record,
)

NAME = "chung"
TITLE = "Gated recurrent units on music (Chung et al. 2014): tanh RNN, GRU and LSTM of equal size"
CELLS = {"elman": "tanh RNN", "gru": "GRU", "lstm": "LSTM"}  # the music lineage's members -> Chung et al.'s names


@dataclass(frozen=True)
class Settings:
    """Each cell at each of `sizes` non-embedding parameters, `seeds` seeds, `steps` steps of the music lineage's
    batch (16 blocks of 128 tokens; quick: 8 of 48), one layer, embedding width `width`; the music lineage's other
    settings (default or quick) otherwise. `corpus`: the
    chorales, or MIDI / MusicXML files (a folder or a glob); `pieces`: its first this many (None: all). `runs_dir`:
    where the runs' folders go (None: a temporary folder, removed at the end)."""

    sizes: tuple[int, ...] = (20_000, 100_000)  # Chung et al.'s ~20k, and five times it
    seeds: int = 3
    steps: int = 512  # 2**20 tokens: about two epochs of the chorales in 5 keys
    width: int = 64
    corpus: str = "chorales"
    pieces: int | None = None
    runs_dir: str | None = None
    threads: int | None = 1


QUICK = Settings(sizes=(3_000,), seeds=2, steps=24, width=16, pieces=24)


def run(quick: bool = False, output_dir=None, overrides=(), **changes) -> dict:
    """The experiment at the default settings (or QUICK's), with `overrides` (`KEY=VALUE`) and `changes` applied."""
    from hf_seq.experiments import lineage_music

    base = QUICK if quick else Settings()
    s = chosen_settings(NAME, base, overrides, changes)
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    knobs = [f"{cell}.layers=1" for cell in CELLS]
    shared = lineage_music.SETTINGS["quick" if quick else "default"]
    with tempfile.TemporaryDirectory() as scratch:
        study = lineage_music.run(
            quick=quick, output_dir=s.runs_dir or scratch, corpus=s.corpus, members=tuple(CELLS), sizes=list(s.sizes),
            seeds=s.seeds, budget_tokens=s.steps * shared.batch_size * shared.block_size, threads=s.threads, progress=False,
            set=(f"width={s.width}", f"pieces={'null' if s.pieces is None else s.pieces}", *knobs),
        )  # fmt: skip
    models = measured(study)
    results = {
        "options": settings_record(s, base, quick),
        "corpus": study["corpus"],
        "splits": study["splits"],
        "metric": study["metric"],
        "budget": study["budget"],
        "models": models,
        "claims": claims(models, s.sizes),
    }
    plots = [plot(models, s.sizes, folder / "bits_per_note.png")]
    return finish(NAME, TITLE, folder, results, report(s, study, models), started, plots)


def measured(study: dict) -> dict:
    """Per cell and size: the parameter counts and the held-out bits per note of each seed, with their mean and range."""
    models = {}
    for r in study["members"]:
        entry = models.setdefault(r["name"], {}).setdefault(str(r["target"]), {"runs": []})
        entry |= {"params": r["params"], "non_embedding_params": r["non_embedding_params"]}
        entry["runs"].append({"seed": r["seed"], "test": r[study["metric"]], "validation": r["validation_bits_per_note"],
                              "seconds": r["seconds"], "steps": r["steps"]})  # fmt: skip
    for sizes in models.values():
        for entry in sizes.values():
            values = [x["test"] for x in entry["runs"]]
            entry |= {"mean": sum(values) / len(values), "min": min(values), "max": max(values)}
    return models


def spread(entry: dict) -> str:
    return f"{entry['mean']:.3f}" + ("" if len(entry["runs"]) == 1 else f" [{entry['min']:.3f}-{entry['max']:.3f}]")


def claims(models: dict, sizes) -> list[dict]:
    """Chung et al.'s two findings against the seeds' ranges of held-out bits per note at every size."""
    at = {size: {cell: models[cell][str(size)] for cell in CELLS} for size in sizes}
    ahead = all(m[g]["max"] < m["elman"]["min"] for m in at.values() for g in ("gru", "lstm"))
    line = lambda cells: "; ".join(
        f"at {size:,}: " + ", ".join(f"{CELLS[c]} {spread(m[c])}" for c in cells) for size, m in at.items()
    )
    # "neither better everywhere": at some size their seed ranges overlap, or the better of the two changes with size
    overlap = any(m["gru"]["min"] <= m["lstm"]["max"] and m["lstm"]["min"] <= m["gru"]["max"] for m in at.values())
    leaders = {"gru" if m["gru"]["mean"] < m["lstm"]["mean"] else "lstm" for m in at.values()}
    return [
        claim(
            "The gated units (GRU, LSTM) reach a lower held-out negative log-likelihood on music than the tanh RNN "
            "(Chung et al. 2014). Agrees when, at every size, every seed of each gated cell is below every seed of the "
            "tanh RNN",
            "test bits per note, mean [seeds' range], " + line(("elman", "gru", "lstm")),
            ahead,
        ),
        claim(
            "The GRU and the LSTM are comparable: neither is better everywhere. Agrees when their seeds' ranges "
            "overlap at some size, or the better of the two changes with the size",
            line(("gru", "lstm")) + f"; lower mean: {', '.join(CELLS[c] for c in sorted(leaders))}",
            overlap or len(leaders) > 1,
        ),
    ]


def report(s: Settings, study: dict, models: dict) -> str:
    """The Markdown body: the setup and one row per cell and size."""
    splits = study["splits"]
    rows = []
    for cell, title in CELLS.items():
        for size in s.sizes:
            entry = models[cell][str(size)]
            seconds = sum(x["seconds"] for x in entry["runs"]) / len(entry["runs"])
            rows.append([title, f"{size:,}", f"{entry['params']:,}", f"{entry['non_embedding_params']:,}",
                         spread(entry), " ".join(f"{x['test']:.3f}" for x in entry["runs"]), f"{seconds:.1f}"])  # fmt: skip
    return "\n\n".join(
        [
            prose(__doc__.split("\n\n", 1)[1]),
            f"Corpus `{study['corpus']}`: {splits['train']['pieces']} training pieces (and {splits['train']['transposed']} "
            f"transpositions), {splits['test']['pieces']} test pieces of {splits['test']['notes']:,} notes, "
            f"{splits['validation']['pieces']} validation pieces (the weights kept: the lowest validation loss). "
            f"Budget: {study['budget']}; {s.seeds} seeds; embedding width {s.width}, one layer per cell.",
            markdown_table(
                ["cell", "target", "parameters", "non-embedding", "test bits / note", "each seed", "seconds"], rows
            ),
        ]
    )


def plot(models: dict, sizes, path: Path) -> str:
    fig = figure(7, 4.5)
    axes = fig.add_subplot(1, 1, 1)
    for cell, title in CELLS.items():
        entries = [models[cell][str(size)] for size in sizes]
        x = [e["non_embedding_params"] for e in entries]
        y = [e["mean"] for e in entries]
        errors = [[e["mean"] - e["min"] for e in entries], [e["max"] - e["mean"] for e in entries]]
        axes.errorbar(x, y, yerr=errors, fmt="o-", capsize=3, label=title)
    if len(sizes) > 1:
        axes.set_xscale("log")
    axes.set_xlabel("non-embedding parameters")
    axes.set_ylabel("held-out bits per note (seeds' range)")
    axes.set_title("tanh RNN, GRU and LSTM on music", fontsize=10)
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=8)
    return save_figure(fig, path)


__all__ = ["QUICK", "Settings", "claims", "run"]
