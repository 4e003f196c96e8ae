"""The music lineage: the language-model lineage's members on symbolic music, the Bach chorales by default. The n-gram
over note events (Kneser-Ney), WaveNet's dilated causal convolutions (van den Oord et al. 2016, a model of audio
first), Elman's tanh network, the GRU and the LSTM (compared on polyphonic music by Chung et al. 2014), the
Transformer decoder (GPT) and Mamba, trained on one tokenization of the same pieces under one budget, sizes matched by
non-embedding parameters, and scored in **bits per note** on the same held-out pieces.

    hf-seq lineage --task music [--corpus chorales | FOLDER | GLOB | FILES] [--validation FILES] [--test FILES]
                   [--set pieces=N transpose=2] [--tune N] [--sizes LIST] [--seeds K] [--budget-tokens N] [--quick]

The data is the `music` task's (`hf_seq.data.music`): pieces split whole into train / validation / test, each
training piece again transposed by 1 to `transpose` semitones either way, MidiTok's REMI tokens with BPE merges
learned on the training pieces, packed into blocks for training. Each held-out piece is cut into windows that predict
each of its tokens once, and every member, the n-gram included, is scored on those windows: its total NLL in bits over
the pieces' notes is bits per note, a figure that does not depend on the tokenization (`evaluation.note_metrics`).

The members are the language-model lineage's rows (`lineage.py`: the same configs, knobs and fairness rules: one
embedding width, tied embeddings, dropout only past an epoch), on the study runner (`study.py`). Writes `lineage.md`
(a table per size, the ordering against the lectures', the recurrent cells against Chung et al.'s finding),
`lineage.json` (one record per run), `learning_curves.png` (validation bits per note against training tokens) and one
folder per member with its model card and the MidiTok tokenizer.
"""

from dataclasses import dataclass
from pathlib import Path

from hf_seq.errors import UserError
from hf_seq.experiments import lineage, study
from hf_seq.experiments.lineage_report import member_row, size_sections
from hf_seq.experiments.study import Record, Settings, StudyData, save_log_plot

CHORALES = "chorales"  # hf_seq.data.corpora.CHORALES: the default corpus, named here without importing the data layer


@dataclass
class MusicSettings(Settings):
    """`pieces`: the first this many pieces of the corpus (None: every piece); `eval_fraction`: of the pieces for
    validation, and as many for test; `transpose`: each training piece again shifted by 1 to this many semitones up
    and down (0: none)."""

    pieces: int | None = None
    eval_fraction: float = 0.05
    transpose: int = 2


SETTINGS = {
    "default": MusicSettings(
        vocab_size=1024, block_size=128, batch_size=16, width=64, target=100_000, learning_rate=3e-3,
        warmup_steps=20, eval_every=64,
        budget_tokens=2**20,  # 512 steps of 16 x 128 tokens: about two epochs of the 314 training chorales in 5 keys
    ),
    "quick": MusicSettings(
        vocab_size=540, block_size=48, batch_size=8, width=16, target=6_000, learning_rate=3e-3, warmup_steps=2,
        eval_every=8, budget_tokens=8 * 48 * 32, pieces=24, eval_fraction=0.1, transpose=1,
    ),
}  # fmt: skip

# the language-model lineage's rows, in its order: the n-gram over events, WaveNet, the tanh RNN, GRU, LSTM, GPT, Mamba
MEMBERS = ("ngram", "conv", "elman", "gru", "lstm", "gpt", "ssm")
ROWS = tuple(row for row in lineage.ROWS if row.name in MEMBERS)
RECURRENT = ("elman", "gru", "lstm")  # Chung et al.'s tanh, GRU and LSTM units


@dataclass
class MusicData(StudyData):
    train_stream: object = None  # the training blocks' token ids, in order (the n-gram counts them)
    splits: dict = None  # what each split holds: pieces, notes, tokens


class Music(study.Study):
    name, title, rows, settings = "music", "music lineage", ROWS, SETTINGS
    report_title, about = "music lineage", "the language models on symbolic music, in bits per note"
    auto_class, default_corpus = "AutoModelForCausalLM", CHORALES
    corpus_help = "chorales, the Bach chorales music21 ships (or MIDI / MusicXML files, a folder or a glob)"
    files = "lineage.md, lineage.json and learning_curves.png"
    trial_keys = ("eval_loss", "eval_bits_per_note", "steps")
    curve_keys = ("step", "tokens", "seconds", "eval_bits_per_note")

    def prepare(self, s, options, output_dir: Path) -> MusicData:
        """The pieces read, split, transposed and tokenized once by the music task; one MidiTok tokenizer for all."""
        import numpy as np

        from hf_seq.hub.publish import public_name
        from hf_seq.training.recipes import load_recipe

        corpus = options.corpus or self.default_corpus
        if isinstance(corpus, list | tuple) and len(corpus) == 1:
            corpus = corpus[0]
        dataset = first_pieces(corpus, s.pieces) if s.pieces else corpus
        shifts = [k for k in range(-s.transpose, s.transpose + 1) if k]
        given = {k: v for k, v in dict(validation=options.validation, test=options.test).items() if v}
        data = dict(dataset=dataset, block_size=s.block_size, eval_fraction=s.eval_fraction,
                    transpose=shifts or None, **given)  # fmt: skip
        tree = {"family": "gpt", "task": "music", "tokenizer": {"vocab_size": s.vocab_size}, "data": data}
        recipe = load_recipe(tree | {"training": {"output_dir": str(output_dir / "tokenizer-run"), "log_with": "none"}})
        prepared, tokenizer_dir = study.shared_data(recipe, output_dir)
        train_stream = np.asarray(prepared.train["input_ids"], dtype=np.int64).reshape(-1)
        splits = {"train": {"pieces": prepared.notes["train_pieces"], "transposed": prepared.notes["train_transposed"],
                            "tokens": len(train_stream)}}  # fmt: skip
        for split, prefix in (("validation", "eval"), ("test", "test")):
            windows = prepared.held_out.get(prefix)
            if windows is not None:
                splits[split] = {"pieces": prepared.notes[f"{prefix}_pieces"], "notes": sum(windows["notes"]),
                                 "windows": len(windows)}  # fmt: skip
        name = lambda given_files, default: public_name(str(given_files)) if given_files else default
        held_out = f"{s.eval_fraction:g} of the pieces, drawn with a fixed seed"
        names = {"validation": name(options.validation, held_out),
                 "test": name(options.test, held_out if "test" in splits else "none")}  # fmt: skip
        shown = corpus if isinstance(corpus, str) else ", ".join(map(str, corpus))
        corpus_name = public_name(shown) + (f" (the first {s.pieces} pieces)" if s.pieces else "")
        say = print if options.progress else (lambda *a: None)
        say(f"lineage: {splits['train']['pieces']} training pieces (+{splits['train']['transposed']} transposed), "
            f"{len(train_stream):,} training tokens, "
            + ", ".join(f"{v['pieces']} {k} pieces ({v['notes']:,} notes)" for k, v in splits.items() if k != "train")
            + f", vocab {len(prepared.tokenizer)}")  # fmt: skip
        return MusicData(prepared, recipe, tokenizer_dir, corpus_name, len(train_stream), s.batch_size * s.block_size,
                         None, names, train_stream, splits)  # fmt: skip

    def metric(self, data) -> str:
        return "test_bits_per_note" if "test" in data.prepared.held_out else "validation_bits_per_note"

    def flops(self, model, data, s) -> float:
        from hf_seq.training.compute import model_flops_per_token

        return model_flops_per_token(model, s.block_size)

    def step_batch(self, data, s, vocab_size: int) -> dict:
        return lineage.LINEAGE.step_batch(data, s, vocab_size)

    def score(self, row, run, plan, data, s) -> dict:
        """The kept weights scored once by `tasks.evaluate` on the whole validation and test pieces, as `hf-seq
        evaluate` scores a run."""
        from hf_seq.data import tasks

        return split_figures(tasks.evaluate(run.recipe, data.prepared, run.model, run.device))

    def fit_fixed(self, row, data, s, given, output_dir) -> dict:
        """The n-gram over the events' token ids: fit once on the training tokens (the first `budget_tokens` under a
        token budget), scored on the same windows as the networks, its curve from refits on growing prefixes."""
        return fit_ngram(data, s.knobs[row.name]["order"], s.budget_tokens if "tokens" in given or not given else None,
                         output_dir / row.name)  # fmt: skip

    def describe(self, data, s, records) -> dict:
        return {"block_size": s.block_size, "transpose": s.transpose, "splits": data.splits}

    def report(self, result, data, output_dir, title) -> None:
        plot_curves(study.largest_records(result), output_dir / "learning_curves.png", title)
        write_report(result, output_dir, self)


def first_pieces(corpus, count: int) -> list[str]:
    """The first `count` pieces of `corpus` as files: for the chorales, the first of music21's chorale iterator from
    the music task's MIDI cache (only those converted, when they are not there yet)."""
    from hf_seq.data import music as music_lib

    if corpus != CHORALES:
        return [str(path) for path in music_lib.music_files(corpus)[:count]]
    try:
        from music21 import corpus as scores
    except ImportError:
        raise UserError(f"the chorales need music21: {music_lib.INSTALL}") from None
    names = list(dict.fromkeys(scores.chorales.Iterator(returnType="filename")))[:count]
    folder = music_lib.chorale_cache()
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for name in names:
        path = folder / f"{Path(name).name}.mid"
        if not path.is_file():  # the file name chorale_pieces reads, written whole
            partial = path.with_suffix(".part")
            partial.write_bytes(music_lib.music21_midi(name))
            partial.replace(path)
        files.append(str(path))
    return files


def split_figures(metrics: dict) -> dict:
    """`tasks.evaluate`'s `eval_*` and `test_*` figures as the record names them: `validation_*` and `test_*`."""
    keys = ("loss", "perplexity", "bits_per_note", "tokens", "notes")
    record = {f"validation_{k}": metrics.get(f"eval_{k}") for k in keys}
    return record | {f"test_{k}": metrics.get(f"test_{k}") for k in keys}


# ---------------------------------------------------------------------------------------------- the n-gram
def ngram_figures(lm, windows, prefix: str) -> dict:
    """The n-gram's figures on held-out windows, scored as the networks are: every token of a window after its first,
    given at most order-1 tokens before it inside the window; bits per note over the windows' notes."""
    from hf_seq.evaluation.metrics import note_metrics

    blocks = [list(ids) for ids in windows["input_ids"]]
    nll = sum(float(lm.token_nll(block).sum()) for block in blocks)
    tokens = sum(len(block) - 1 for block in blocks)
    return note_metrics(nll, tokens, sum(windows["notes"]), prefix)


def fit_ngram(data: MusicData, order: int, budget_tokens: int | None, folder: Path) -> dict:
    """The n-gram member's record: counts on the first `budget_tokens` training tokens (all without a token budget),
    its curve from refits on 1/16, 1/4 and all of them, scored on the validation and test windows; its folder holds
    the counts, the tokenizer and a card."""
    import time

    from hf_seq.baselines.ngram import KneserNeyLM
    from hf_seq.experiments.ngram_member import save_ngram

    held_out, vocab_size = data.prepared.held_out, data.vocab_size
    available = len(data.train_stream) if budget_tokens is None else min(budget_tokens, len(data.train_stream))
    curve = []
    for n in (max(order, available // 16), max(order, available // 4)):
        scored = ngram_figures(KneserNeyLM(vocab_size, order).fit(data.train_stream[:n]), held_out["eval"], "eval")
        curve.append({"tokens": n, "eval_bits_per_note": scored["eval_bits_per_note"]})
    start = time.perf_counter()
    lm = KneserNeyLM(vocab_size, order).fit(data.train_stream[:available])
    seconds = time.perf_counter() - start
    metrics = ngram_figures(lm, held_out["eval"], "eval")
    curve.append({"tokens": available, "eval_bits_per_note": metrics["eval_bits_per_note"]})
    if "test" in held_out:
        metrics |= ngram_figures(lm, held_out["test"], "test")
    params = sum(int((table["count"] > 0).sum()) for table in lm.orders[1:])
    title = f"{order}-gram over the events, interpolated Kneser-Ney"
    fit = Record("ngram", title, None, params, train_tokens=available, seconds=seconds, curve=curve)
    record = fit.to_dict({"order": order} | split_figures(metrics))
    save_ngram(folder, lm, data.prepared.tokenizer)
    (folder / "README.md").write_text(
        f"# {title}\n\nAn interpolated Kneser-Ney {order}-gram over the music lineage's MidiTok token ids "
        f"(`hf_seq.baselines.ngram`), fit on {available:,} training tokens of `{data.corpus_name}`. Its 'parameters' "
        f"are its {params:,} distinct stored n-grams (`ngram.safetensors`; `KneserNeyLM.from_pretrained` loads them). "
        f"Validation: {record['validation_bits_per_note']:.3f} bits per note.\n"
    )
    return record


# ---------------------------------------------------------------------------------------------- the report
def plot_curves(records: list[dict], path: Path, title: str) -> None:
    """Validation bits per note against training tokens, one line per member (the n-gram's: its refits)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for record in records:
        points = [(c["tokens"], c["eval_bits_per_note"]) for c in record["curve"] if c.get("tokens")]
        if points:
            ax.plot(*zip(*points), "s--" if record["family"] is None else "o-", ms=3, lw=1.5, label=record["title"])
    save_log_plot(fig, ax, "training tokens", "validation bits per note", title, path)


def chung_lines(result: dict) -> list[str]:
    """The recurrent cells against Chung et al. (2014): at each size, whether the GRU and the LSTM are below the tanh
    RNN in bits per note, and how far apart the two gated cells are."""
    lines = []
    for target in result["sizes"]:
        rows = {r["name"]: r for r in study.summarize(result["members"], result["metric"]) if r["target"] == target}
        if not set(RECURRENT) <= rows.keys():
            continue
        tanh, gru, lstm = (rows[name]["mean"] for name in RECURRENT)
        at = "" if len(result["sizes"]) == 1 else f" at {target:,}" if target != study.AUTO else " at the chosen sizes"
        ahead = [name.upper() for name, v in (("gru", gru), ("lstm", lstm)) if v < tanh]
        lines.append(
            f"- {at.strip().capitalize() + ': ' if at else ''}tanh RNN {tanh:.3f}, GRU {gru:.3f}, LSTM {lstm:.3f} bits "
            f"per note: {' and '.join(ahead) if ahead else 'neither gated cell'} ahead of the tanh RNN; GRU and LSTM "
            f"{abs(gru - lstm):.3f} apart."
        )
    if not lines:
        return []
    return [
        "## The recurrent cells against Chung et al. (2014)",
        "",
        "Chung et al. compared tanh, GRU and LSTM units of about equal parameter counts on four polyphonic music "
        "corpora (JSB Chorales among them, as piano rolls): the gated units were ahead of the tanh units on most of "
        "them, and the GRU and the LSTM were close, neither better everywhere. Here (one corpus, REMI events, bits "
        "per note; `hf-seq experiment chung` re-measures it with seeds):",
        "",
        *lines,
        "",
    ]


def write_report(result: dict, output_dir: Path, lineage_study: study.Study) -> None:
    """lineage.md of the music lineage."""
    records, metric, splits = result["members"], result["metric"], result["splits"]
    held = "; ".join(f"{k}: {v['pieces']} pieces, {v['notes']:,} notes" for k, v in splits.items() if k != "train")
    lines = [
        lineage_study.heading(r["name"] for r in records),
        "",
        f"Corpus `{result['corpus']}`: {splits['train']['pieces']} training pieces and their transpositions by up to "
        f"{result['transpose']} semitones up and down ({splits['train']['transposed']} more), "
        f"{result['train_tokens']:,} training tokens; {held} (validation: {result['validation']}; test: {result['test']}). One MidiTok REMI "
        f"tokenizer with BPE merges, {result['vocab_size']:,} tokens; blocks of {result['block_size']} tokens; budget: "
        f"{result['budget']}. Neural members: embedding width {result['width']}, tied embeddings, non-embedding "
        f"parameters matched per size; the weights kept are the evaluation with the lowest validation loss. Tuning: "
        f"{result['tuning']}. Seeds: {result['seeds']}. Machine: {result['machine']}.",
        "",
        *(
            ["**--quick: a test of the plumbing on a few pieces and tiny models, not a result.**", ""]
            if result["quick"]
            else []
        ),
        f"Ranked by **{metric.replace('_', ' ')}**: each held-out piece scored whole (windows that predict each of its "
        "tokens once), the total NLL in bits over the pieces' notes, so the n-gram and every network are scored on "
        "the same notes whatever the tokens.",
        "",
    ]
    header = (
        "| member | params | non-embedding | FLOPs / token | lr | dropout | best step | epochs | validation bits / note "
        "| test bits / note | test perplexity / token | seconds |"
    )

    def row(r: dict) -> str:
        return member_row(result, r, "bits_per_note", ".2f")

    lines += size_sections(result, header, row, lineage_study.order)
    lines += [
        "The n-gram counts the training tokens' events (its parameters: its distinct stored n-grams; its seconds: the "
        "counting); it is fit once, the same for every size and seed. FLOPs per token: 6 x the parameters a token "
        "multiplies with (+ 12 L d s for attention). Every trial is in lineage.json.",
        "",
        "![learning curves](learning_curves.png)",
        "",
    ]
    if len(result["sizes"]) > 1:
        lines += ["![scaling](scaling.png)", ""]
    lines += chung_lines(result)
    (output_dir / "lineage.md").write_text("\n".join(lines))


LINEAGE = Music()


def run(**options) -> dict:
    """`hf-seq lineage --task music`: train and score every member at every size and seed (`study.Options` names the
    options); write lineage.md, lineage.json, learning_curves.png and the member folders into `output_dir`."""
    return LINEAGE.run(LINEAGE.make_options(**options))


__all__ = ["LINEAGE", "MEMBERS", "ROWS", "SETTINGS", "run"]
