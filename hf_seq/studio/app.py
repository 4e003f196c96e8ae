"""The studio's web page: one tab per view of `tokens.py` and `inside.py`, on the models loaded from run folders, the
members of a lineage run, or the `--demo` models. Gradio lays the views out; every number comes from the view
functions, so the page shows what a notebook calling them would. Which models a tab offers comes from the registry
(`views.view_kinds`). Offline by default: analytics off, no share link, the bundled theme (no web fonts), bound to
127.0.0.1, one queue (a room of students waits its turn instead of stalling the machine).
"""

import json
import os
import tempfile
from pathlib import Path

from hf_seq.baselines.ngram import KneserNeyLM
from hf_seq.data import tasks
from hf_seq.data.music import MidiTokTokenizer
from hf_seq.errors import InvalidValueError, MissingFileError, UserError
from hf_seq.studio import inside, tokens
from hf_seq.studio.views import LANGUAGE_MODEL, MAX_TOKENS, MUSIC, NGRAM, Loaded, reads, save_png, to_csv
from hf_seq.training.runs import check_run_folder, open_run

OFFLINE = {"GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_DISABLE_TELEMETRY": "1", "NO_PROXY": "localhost,127.0.0.1",
           "no_proxy": "localhost,127.0.0.1"}  # fmt: skip
EXAMPLE = "def read_file(path):\n    with open(path) as f:\n        return f.read()\n"
QUEUE_SIZE = 64  # requests waiting beyond this are turned away with a message
# What the studio reads (`open_run(accept=...)`): language models, BERT, the encoder-decoders and a saved n-gram
SHOWN = ("AutoModelForCausalLM", "AutoModelForMaskedLM", "AutoModelForSeq2SeqLM", "KneserNeyLM")
LINEAGE = "lineage.json"  # what a lineage run's output folder holds beside its members' folders


def load(source) -> Loaded:
    """A run folder (or a Hub name) as the studio shows it, opened as every command opens one (`open_run`: checksums
    verified, the class it was saved as, its tokenizer); a saved n-gram (a lineage's n-gram member) as its counts; a
    music run (`music_recipe`) as a model the music view reads, with its recipe."""
    run = open_run(source, accept=SHOWN)
    name = Path(source).name if Path(source).exists() else str(source)
    if isinstance(run.model, KneserNeyLM):
        return Loaded(name, None, run.tokenizer, ngram=run.model)
    is_music, recipe = music_recipe(source, run.tokenizer)
    if is_music:
        return Loaded(name, run.model, run.tokenizer, music=True, extra={"recipe": recipe})
    return Loaded(name, run.model, run.tokenizer)


def music_recipe(source, tokenizer) -> tuple[bool, object | None]:
    """(whether the run trained for the music task, its recipe): as its recipe.json says (`task: music`), or for a
    folder without one (a Hub model) where its tokenizer is MidiTok's; the recipe None where there is none or it no
    longer reads (the music view then scores uploaded files only)."""
    from hf_seq.training.recipes import load_recipe

    record = Path(source) / "recipe.json"
    if not record.is_file():
        return isinstance(tokenizer, MidiTokTokenizer), None
    tree = json.loads(record.read_text())
    if not tasks.reads_music(tree.get("task")):
        return False, None
    try:
        return True, load_recipe(tree)
    except UserError:
        return True, None


def run_folders(source: str) -> list[Path | str]:
    """The run folders `source` names: itself, or for a lineage run's output folder (it holds lineage.json) the folder
    of each member lineage.json lists, named as the study names them (`study.member_folder`)."""
    from hf_seq.experiments.study import member_folder

    record = Path(source) / LINEAGE
    if not record.is_file():
        return [source]
    try:
        lineage = json.loads(record.read_text())
        single = len(lineage["sizes"]) == 1 and lineage["seeds"] == 1
        names = [
            member_folder(m["name"], m["target"], m["seed"], single, m["family"] is None) for m in lineage["members"]
        ]
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidValueError(f"studio: {record} is not a lineage record ({error!r}); give the folder "
                                "`hf-seq lineage --output-dir` wrote") from None  # fmt: skip
    folders = [Path(source) / name for name in dict.fromkeys(names)]  # the n-gram's record repeats for every size
    for folder in folders:
        if not folder.is_dir():
            raise MissingFileError(f"studio: {record} lists the member {folder.name!r}, but {folder} does not exist "
                                   "(the studio shows the lineages of language models and of translation)")  # fmt: skip
    return folders


def _names(models: list[Loaded], view: str) -> list[str]:
    return [m.name for m in models if reads(view, m)]


def build(models: list[Loaded]):
    """The Gradio Blocks of the studio on `models`. The views read at most `views.MAX_TOKENS` tokens of the text (and
    no more than a model's position table holds); the page says so."""
    import gradio as gr

    by_name = {m.name: m for m in models}
    folder = Path(tempfile.mkdtemp(prefix="hf-seq-studio-"))

    def pick(name: str) -> Loaded:
        if name not in by_name:
            raise gr.Error(f"choose a model (loaded: {', '.join(by_name)})")
        return by_name[name]

    def checked(text: str) -> str:
        if not text or not text.strip():
            raise gr.Error("type some text first")
        return text

    def shown(key: str, result: dict, figure):
        """(the figure, its PNG and the view's CSV as downloads)."""
        fig = figure(result)
        png, csv = folder / f"{key}.png", folder / f"{key}.csv"
        save_png(fig, png)
        csv.write_text(to_csv(result))
        return fig, str(png), str(csv)

    def plot_tab(key: str, title: str, view: str, inputs: list, compute, figure, note: str = "", more=None):
        """A tab: a model menu (the models `view` reads), the view's own inputs, a Show button, the plot and two
        downloads; `more(result, shown, plot)` adds the tab's interactions on the view's last result (a `gr.State`)
        after the Show event `shown`."""
        with gr.Tab(title, id=key):
            if note:
                gr.Markdown(note)
            names = _names(models, view)
            choice = gr.Dropdown(names, value=names[0] if names else None, label="model")
            extra = [make() for make in inputs]
            button = gr.Button("Show", variant="primary")
            plot = gr.Plot(label=title)
            with gr.Row():
                png, csv = gr.DownloadButton("PNG"), gr.DownloadButton("CSV")
            result = gr.State()

            def run(name, value, *args):
                computed = compute(pick(name), checked(value), *args)
                return (*shown(key, computed, figure), computed)

            event = button.click(run, [choice, text, *extra], [plot, png, csv, result], api_name=key)
            if more:
                more(result, event, plot)
        return choice

    with gr.Blocks(title="hf-seq studio", analytics_enabled=False) as app:
        gr.Markdown(f"# hf-seq studio\nThe models' insides on one text: {', '.join(by_name)}. The views read at most "
                    f"{MAX_TOKENS} tokens of it (fewer for a model with fewer positions).")  # fmt: skip
        text = gr.Textbox(EXAMPLE, lines=4, label="text", max_length=8 * MAX_TOKENS)
        with gr.Tabs():
            with gr.Tab("What the models predict", id="predictions"):
                with gr.Tabs():
                    surprisal_tab(models, text, pick, checked, shown)
                    lineage_tab(models, text, checked, shown)
                    for tab in prediction_tabs(models, pick):
                        plot_tab(**tab)
            with gr.Tab("Inside the models", id="insides"):
                with gr.Tabs():
                    for tab in inside_tabs(models, pick):
                        plot_tab(**tab)
            if _names(models, MUSIC):
                music_tab(models, pick, folder)
    app.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    return app


def surprisal_tab(models: list[Loaded], text, pick, checked, shown) -> None:
    """The surprisal tab: the token strip coloured by bits, a click on a token for the top-k after it, the plot."""
    import gradio as gr

    with gr.Tab("Surprisal", id="surprisal"):
        names = _names(models, LANGUAGE_MODEL)
        model = gr.Dropdown(names, value=names[0] if names else None, label="model")
        strip = gr.HighlightedText(label="bits per token (click a token for the next-token top-k)",
                                   combine_adjacent=False, show_legend=False)  # fmt: skip
        top = gr.Dataframe(headers=["next token", "probability"], label="top-k after the clicked token")
        button = gr.Button("Show", variant="primary")
        plot = gr.Plot(label="surprisal")
        with gr.Row():
            png, csv = gr.DownloadButton("PNG"), gr.DownloadButton("CSV")

        def surprisal(name, value):
            result = tokens.surprisal(pick(name), checked(value))
            bits = [b for b in result["bits"] if b == b]  # the first token has no prediction (NaN)
            scale = max(bits) if bits else 1.0
            marks = [(t, (b / scale if b == b else None)) for t, b in zip(result["tokens"], result["bits"])]
            return marks, *shown("surprisal", result, tokens.figure_surprisal)

        def topk(name, value, event: gr.SelectData):
            result = tokens.topk(pick(name), checked(value), event.index)
            return [[t, round(float(p), 4)] for t, p in zip(result["tokens"], result["probabilities"])]

        button.click(surprisal, [model, text], [strip, plot, png, csv], api_name="surprisal")
        strip.select(topk, [model, text], top)


def lineage_tab(models: list[Loaded], text, checked, shown) -> None:
    """The lineage strip: every loaded language model's bits per token on the text, one row each."""
    import gradio as gr

    with gr.Tab("Lineage strip", id="lineage"):
        button = gr.Button("Show every language model", variant="primary")
        plot = gr.Plot(label="bits per token, one row per model")
        with gr.Row():
            png, csv = gr.DownloadButton("PNG"), gr.DownloadButton("CSV")
        strip_models = [m for m in models if reads(LANGUAGE_MODEL, m)]
        button.click(lambda value: shown("lineage", tokens.lineage_strip(strip_models, checked(value)),
                                         tokens.figure_lineage_strip), [text], [plot, png, csv],
                     api_name="lineage")  # fmt: skip


MUSIC_FILES = [".mid", ".midi", ".xml", ".musicxml", ".mxl", ".krn"]
SURPRISAL_CAPTION = ("Each note's bits: the sum of the NLL of the tokens that make it (the tokens that place it, its "
                     "pitch, its velocity and duration; a BPE token shared equally among the notes it holds), so the "
                     "notes add up to the piece's total NLL, and bits per note is that total over the notes, as "
                     "`hf-seq evaluate` scores held-out pieces.")  # fmt: skip


def music_tab(models: list[Loaded], pick, folder: Path) -> None:
    """The Music tab (the models of music runs): a sample as a piano roll (the prompt, the first beats of a held-out
    piece, in one colour, the continuation in another) and as sound; the surprisal of each note of a piece."""
    import gradio as gr

    from hf_seq.studio import music

    names = _names(models, MUSIC)
    pieces = {m.name: music.held_out_pieces(m) for m in models if m.name in names}
    sample, surprisal = music_actions(pick, pieces, folder)
    with gr.Tab("Music", id="music"):
        with gr.Row():
            model = gr.Dropdown(names, value=names[0], label="model")
            first = [p.name for p in pieces[names[0]]]
            piece = gr.Dropdown(first, value=(first or [None])[0], label="held-out piece (the run's test split)")
            upload = gr.File(label="or a piece of your own (MIDI, MusicXML)", file_types=MUSIC_FILES, type="filepath",
                             height=140)  # fmt: skip
        with gr.Row():
            beats = gr.Number(8, label="prompt: the piece's first beats (0: none)")
            length = gr.Number(256, precision=0, label="length (new tokens)")
            seed = gr.Number(0, precision=0, label="seed")
            temperature = gr.Slider(0.1, 2.0, value=1.0, label="temperature")
        sample_button = gr.Button("Sample", variant="primary")
        roll = gr.Plot(label="the sample: prompt (blue) and continuation (orange)")
        audio = gr.Audio(label="the sample", type="filepath", interactive=False)
        with gr.Row(equal_height=True):
            said = gr.Markdown()
            midi = gr.DownloadButton("MIDI", scale=0)
        score_button = gr.Button("Show surprisal", variant="primary")
        gr.Markdown(SURPRISAL_CAPTION)
        plot = gr.Plot(label="surprisal per note")
        with gr.Row():
            png, csv = gr.DownloadButton("PNG"), gr.DownloadButton("CSV")
        model.change(lambda name: gr.Dropdown([p.name for p in pieces[name]]), model, piece)
        sample_button.click(sample, [model, piece, upload, beats, length, seed, temperature],
                            [roll, audio, said, midi], api_name="music_sample")  # fmt: skip
        score_button.click(surprisal, [model, piece, upload], [plot, png, csv], api_name="music_surprisal")


def music_actions(pick, pieces: dict, folder: Path):
    """The Music tab's two events: (sample, surprisal); a file that is not music, or a prompt without notes, is said
    on the page in the command's one line."""
    import functools

    import gradio as gr

    def plainly(event):
        @functools.wraps(event)
        def said(*args):
            try:
                return event(*args)
            except UserError as error:
                raise gr.Error(str(error)) from None

        return said

    from hf_seq.data.music import read_score
    from hf_seq.studio import music

    def chosen(name: str, piece_name, uploaded):
        """(the score, its name): the uploaded file, else the held-out piece chosen; (None, None) for neither."""
        if uploaded:
            return read_score(uploaded, "the uploaded file"), Path(uploaded).name
        found = [p for p in pieces.get(name, []) if p.name == piece_name]
        return (found[0].score, found[0].name) if found else (None, None)

    def sample(name, piece_name, uploaded, beats, length, seed, temperature):
        score, _ = chosen(name, piece_name, uploaded)
        result = music.sample(pick(name), score, float(beats or 0), int(length or 1), int(seed or 0), temperature)
        wav, mid = folder / "music_sample.wav", folder / "music_sample.mid"
        mid.write_bytes(result["midi"])
        synth = music.render_audio(result, result["midi"], wav)
        said = f"{len(result['pitch'])} notes, {result['end'].max() if len(result['end']) else 0:.1f} s; sound: {synth}"
        return music.figure_piano_roll(result), str(wav), said, str(mid)

    def surprisal(name, piece_name, uploaded):
        score, title = chosen(name, piece_name, uploaded)
        if score is None:
            raise gr.Error("choose a held-out piece or upload a MIDI file")
        result = music.note_surprisal(pick(name), score, title)
        figure = music.figure_piano_roll(result)
        png, csv = folder / "music_surprisal.png", folder / "music_surprisal.csv"
        save_png(figure, png)
        csv.write_text(music.surprisal_csv(result))
        return figure, str(png), str(csv)

    return plainly(sample), plainly(surprisal)


def prediction_tabs(models: list[Loaded], pick) -> list[dict]:
    """The other tabs of "What the models predict", as `plot_tab` arguments."""
    import gradio as gr

    names = _names(models, LANGUAGE_MODEL)
    return [
        dict(key="compare", title="Two models", view=LANGUAGE_MODEL,
             inputs=[lambda: gr.Dropdown(names, value=(names or [None])[-1], label="against")],
             compute=lambda a, value, b: tokens.compare(a, pick(b), value), figure=tokens.figure_compare),
        dict(key="reach", title="Context reach", view=LANGUAGE_MODEL,
             inputs=[lambda: gr.Number(8, precision=0, label="position (token index)")],
             compute=lambda m, value, position: tokens.context_reach(m, value, int(position)),
             figure=tokens.figure_context_reach),
        dict(key="ngram", title="n-gram back-off", view=NGRAM, inputs=[], compute=tokens.ngram_backoff,
             figure=tokens.figure_ngram_backoff),
        dict(key="sampling", title="Sampling", view=LANGUAGE_MODEL,
             inputs=[lambda: gr.Slider(0.1, 2.0, value=1.0, label="temperature"),
                     lambda: gr.Slider(0, 100, value=0, step=1, label="top-k (0: off)"),
                     lambda: gr.Slider(0.05, 1.0, value=1.0, label="top-p"),
                     lambda: gr.Number(0, precision=0, label="seed")],
             compute=lambda m, value, t, k, p, seed: tokens.sampling(m, value, t, int(k), p, int(seed)),
             figure=tokens.figure_sampling),
    ]  # fmt: skip


NOTHING_BESIDE = "(none)"  # the Mamba-2 tab's menu of models to set beside it: none


def inside_tabs(models: list[Loaded], pick) -> list[dict]:
    """The tabs of "Inside the models", as `plot_tab` arguments."""
    import gradio as gr

    gpts = [m.name for m in models if m.kind in inside.causal_attention_kinds()]

    def mamba2(m, value, layer, other):
        beside = None if other in (None, NOTHING_BESIDE) else pick(other)
        return inside.mamba2_attention(m, value, int(layer), beside)

    return [
        dict(key="recurrent", title="Recurrent state", view="recurrent", inputs=[], compute=inside.recurrent_state,
             figure=inside.figure_recurrent_state, more=unit_strip),
        dict(key="attention", title="Attention", view="attention", inputs=[],
             compute=inside.attention, figure=inside.figure_attention, more=query_keys),
        dict(key="fill", title="Fill the mask", view="fill", inputs=[], compute=inside.fill_mask,
             figure=inside.figure_fill_mask,
             note="BERT fills the first `[MASK]` written in the text (e.g. `def [MASK](path):`)."),
        dict(key="alignment", title="Alignment", view="alignment",
             inputs=[lambda: gr.Slider(1, 32, value=12, step=1, label="steps"),
                     lambda: gr.Slider(1, 5, value=1, step=1, label="beams")],
             compute=lambda m, value, steps, beams: inside.alignment_steps(m, value, int(steps), int(beams)),
             figure=inside.figure_alignment_steps, more=word_by_word,
             note="The encoder-decoders read the text as a source: the demo's were trained on dates, e.g. `Thu, Mar 5, "
                  "1998`. Show decodes it whole; Next word draws it one target word at a time."),
        dict(key="cross", title="Cross-attention", view="cross", inputs=[],
             compute=inside.cross_attention_average, figure=inside.figure_cross_attention_average,
             note="The Transformer's cross-attention, averaged over layers and heads, on its own translation of the "
                  "text: the alignment of the Alignment tab, the attention way."),
        dict(key="ssm", title="State space", view="ssm", inputs=[], compute=inside.ssm_inside,
             figure=inside.figure_ssm_inside),
        dict(key="scan", title="Scan = convolution", view="scan", inputs=[], compute=inside.scan_vs_convolution,
             figure=inside.figure_scan_vs_convolution,
             note="S4D's layer computed by its convolution (training) and by its recurrence (generation) on the same "
                  "text: the same numbers."),
        dict(key="mamba2", title="Mamba-2 attention", view="mamba2_attention",
             inputs=[lambda: gr.Number(-1, precision=0, label="layer (-1: the top one)"),
                     lambda: gr.Dropdown([*gpts, NOTHING_BESIDE], value=(gpts or [NOTHING_BESIDE])[0],
                                         label="beside it (a GPT with the same tokenizer)")],
             compute=mamba2, figure=inside.figure_mamba2_attention,
             note="The matrix a Mamba-2 layer applies to its inputs, per head: y = (L o C B^T) diag(Delta) x + D x, "
                  "the state-space model written as causal attention whose mask L decays by one scalar per head. "
                  "Beside it, a GPT's softmax attention on the same tokens."),
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------- interactions
# What a tab does beyond Show: each takes the view's last result (a `gr.State`), the Show event and the plot.
def unit_strip(result, event, plot):
    """Recurrent state: the text coloured by one unit's h."""
    import gradio as gr

    unit = gr.Number(0, precision=0, label="unit (colour the text by its state h)")
    strip = gr.HighlightedText(label="the text, coloured by the unit's h (-1 to 1)", combine_adjacent=False,
                               show_legend=False)  # fmt: skip

    def colour(last, index):
        if last is None:
            return []
        values = last["hidden"][int(index or 0) % len(last["hidden"])]
        return [(token, float(v)) for token, v in zip(last["tokens"], values)]

    event.then(colour, [result, unit], strip)
    unit.change(colour, [result, unit], strip)


def query_keys(result, event, plot):
    """Attention: click a query token, see the keys it reads (the mean over layers and heads)."""
    import gradio as gr

    queries = gr.HighlightedText(label="click a query token", combine_adjacent=False, show_legend=False)
    keys = gr.HighlightedText(label="the keys it reads (mean over layers and heads; 1 = its largest weight)",
                              combine_adjacent=False, show_legend=False)  # fmt: skip
    event.then(lambda last: [(t, None) for t in last["tokens"]] if last else [], result, queries)

    def light(last, selected: gr.SelectData):
        name = "attentions" if "attentions" in last else "encoder_attentions"
        row = inside.attention_from(last, selected.index, name)
        weight = row["weight"] / max(float(row["weight"].max()), 1e-9)
        return [(token, float(w)) for token, w in zip(row["tokens"], weight)]

    queries.select(light, result, keys)


def word_by_word(result, event, plot):
    """Alignment: one more target word, and its row of the alignment, per click."""
    import gradio as gr

    shown_rows = gr.State(0)
    step = gr.Button("Next word")

    def advance(last, rows):
        if last is None:
            raise gr.Error("press Show first")
        rows = min(rows + 1, len(last["row_labels"]))
        return inside.figure_alignment_steps(last, upto=rows), rows

    step.click(advance, [result, shown_rows], [plot, shown_rows])
    event.then(lambda: 0, None, shown_rows)


def serve(sources: list[str], demo: bool, host: str, port: int, root_path: str | None, models=()):
    """`hf-seq studio`: load (or train) the models, build the page, serve it until Ctrl-C. `sources`: run folders,
    lineage folders (every member) and Hub names; `models`: `Loaded` models shown beside those (from a notebook)."""
    if not (sources or demo or models):
        raise InvalidValueError("studio: give run folders or lineage folders (hf-seq studio RUN_DIR ...) or --demo")
    folders = checked_folders(sources)  # a mistyped folder is said at once, not after Gradio's import
    os.environ.update(OFFLINE)
    try:
        import gradio  # noqa: F401
    except ImportError:
        raise MissingFileError('hf-seq studio needs Gradio, an optional extra: pip install "hf-seq[studio]"') from None
    models = [*models, *(load(folder) for folder in folders)]
    if demo:
        from hf_seq.studio.demo import demo_models

        models += demo_models()
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise InvalidValueError(f"studio: two models share a name ({names}): give folders with different names")
    app = build(models)
    try:
        app.launch(server_name=host, server_port=port, root_path=root_path or "", share=False,
                   inbrowser=False, ssr_mode=False)  # fmt: skip
    except OSError as error:
        raise InvalidValueError(f"studio: cannot serve on {host}:{port} ({error}); give another --port") from None


def checked_folders(sources: list[str]) -> list[Path | str]:
    """The run folders (and Hub names) `sources` name, a lineage folder's members in its place, each refused in one
    line if it is missing or holds no model (`check_run_folder`) before any is loaded."""
    folders = [folder for source in sources for folder in run_folders(source)]
    for folder in folders:
        check_run_folder(folder)
    return folders
