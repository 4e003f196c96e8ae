"""MkDocs hook that generates the pages the site builds from the code: the landing page (from README.md), one page
per family of `hf_seq.registry.FAMILIES` (a new row gives a new page), the API reference, the notebooks, the
benchmark results, and the MathJax files copied from the installed `mathjax` package (the site loads nothing from
the network).

mkdocstrings cannot see the names that `hf_seq` resolves lazily (its module `__getattr__`), so every reference uses
the module path where the name is defined (`hf_seq.models.modeling_gpt.GPTModel`)."""

import base64
import dataclasses
import json
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent

# The figure a family page shows, where the repository has one (a path under docs/ or bench/results/).
FIGURES = {
    "rnn": ("experiments/vanishing_gradients/gradient_norms.png", "Gradient norms against distance for the four cells"),
    "gpt": ("experiments/attention_maps/gpt.png", "Every head of every layer of a small GPT"),
    "bert": ("experiments/attention_maps/bert.png", "Every head of every layer of a small BERT"),
    "transformer": ("experiments/attention_maps/transformer.png", "Self- and cross-attention of a small Transformer"),
    "bahdanau": ("experiments/bottleneck/alignment.png", "Bahdanau alignments on sequence reversal"),
    "window": ("lineage/learning_curves.png", "The lineage study's learning curves, the fixed window among them"),
    "ssm": ("experiments/selective_copying/selective_copying.png", "Selective Copying: S4D, Mamba and the others"),
    "conv": ("experiments/selective_copying/selective_copying.png", "Selective Copying, the WaveNet among them"),
}

# Shared modules whose docstrings state equations a family's model uses.
SEE_ALSO = {
    "rnn": ["hf_seq.models.recurrent"],
    "bahdanau": [
        "hf_seq.models.recurrent",
        "hf_seq.models.layers.WordDropout",
        "hf_seq.models.seq2seq.SourceLengthLimit",
    ],
    "gpt": ["hf_seq.models.layers.FeedForward", "hf_seq.models.layers.MixtureOfExperts"],
    "bert": ["hf_seq.models.layers.FeedForward"],
    "transformer": [
        "hf_seq.models.positional.SinusoidalPositionalEmbedding",
        "hf_seq.models.layers.FeedForward",
        "hf_seq.models.layers.WordDropout",
        "hf_seq.models.seq2seq.SourceLengthLimit",
    ],
    "ssm": ["hf_seq.models.scan", "hf_seq.models.ssd"],  # S4D and Mamba; Mamba-2 (state-space duality)
    "conv": ["hf_seq.models.convolution"],
}

# Which pipeline task each Auto class serves (transformers' own, and the ones hf_seq registers).
PIPELINES = {
    "AutoModel": ["feature-extraction"],
    "AutoModelForCausalLM": ["text-generation"],
    "AutoModelForMaskedLM": ["fill-mask"],
    "AutoModelForSequenceClassification": ["text-classification"],
    "AutoModelForTokenClassification": ["token-classification"],
    "AutoModelForQuestionAnswering": ["hf-seq-question-answering"],
    "AutoModelForSeq2SeqLM": ["translation", "text2text-generation", "summarization"],
}

# Tooling modules documented beside the models, with the names a user calls.
TOOLS = {
    "hf_seq.training.runs": "A run as a value: RunResult, finished runs, hf-seq evaluate",
    "hf_seq.experiments.study": "The study runner the lineages share",
    "hf_seq.experiments.sizing": "Sizes chosen by the budget: pilots and the loss surface (--sizes auto)",
    "hf_seq.models.losses": "The fused language-model loss (config.fused_loss)",
    "hf_seq.models.prediction": "Forecasting heads: lagged values in, a distribution over the next value out",
    "hf_seq.evaluation.forecasting": "Forecasting metrics: MASE, sMAPE, the weighted quantile loss (CRPS)",
    "hf_seq.baselines.forecasting": "The benchmark forecasts (naive, seasonal naive) and AR(p)",
    "hf_seq.data.series": "Series for the time_series task: reading, splits in time, training windows, the CO2 series",
    "hf_seq.studio.tokens": "The studio's views: what the models predict, token by token",
    "hf_seq.studio.inside": "The studio's views: the models' states, gates, attention and scans",
    "hf_seq.studio.music": "The studio's music view: piano rolls, each note's surprisal, a synthesiser",
    "hf_seq.data.tokenization": "Tokenizers",
    "hf_seq.evaluation.metrics": "Evaluation",
    "hf_seq.convert": "Conversion to and from transformers",
    "hf_seq.experiments.plotting": "Plots",
    "hf_seq.baselines.ngram": "The n-gram baseline",
    "hf_seq.errors": "Errors",
    "hf_seq.training.compute": "Training compute from a model's shapes",
    "hf_seq.training.sharding": "Fully sharded data parallelism (FSDP2)",
    "hf_seq.data.streaming": "Streaming corpora",
    "hf_seq.training.divergence": "A run that diverges stops with its reason",
    "hf_seq.training.memory": "What a run needs, checked before anything is allocated",
    "hf_seq.faces": "The packages' faces, their layers, and the import paths of 0.1.0",
}

MKDOCSTRINGS_OPTIONS = "    options:\n      show_root_heading: true\n      members: false\n"


def public_paths():
    """`hf_seq.__all__` as (name, module path where it is defined)."""
    import hf_seq

    paths = {"FAMILIES": "hf_seq.registry"}
    for fam in hf_seq.FAMILIES:
        paths[fam.config] = f"hf_seq.models.configuration_{fam.name}"
        for model in fam.models.values():
            paths[model] = f"hf_seq.models.modeling_{fam.name}"
    for name, module in hf_seq._ELSEWHERE.items():
        paths[name] = f"hf_seq.models.{module}"
    missing = sorted(set(hf_seq.__all__) - set(paths))
    if missing:
        raise RuntimeError(f"docs/hooks.py: no module path for the public names {missing}")
    return [(name, f"{paths[name]}.{name}") for name in hf_seq.__all__]


def title(fam):
    """The config's name without `Config` (GPT, RNN, Bahdanau, ...): the name a reader looks for."""
    return fam.config.removesuffix("Config") or fam.name


def example_config(fam):
    """Small config keyword arguments that the family's config accepts: the first that builds."""
    base = {"vocab_size": 100, "hidden_size": 32}
    fields = {f.name for f in dataclasses.fields(fam.config_class)}
    candidates = [dict(base, num_hidden_layers=2), dict(base), {}]
    if "num_attention_heads" in fields:
        candidates = [dict(c, num_attention_heads=4) for c in candidates[:2]] + candidates
    for kwargs in candidates:
        try:
            fam.config_class(**kwargs)
        except Exception:
            continue
        return kwargs
    return {}


def example(fam):
    kwargs = ", ".join(f"{k}={v!r}" for k, v in example_config(fam).items())
    heads = [auto for auto in fam.models if auto != "AutoModel"] or ["AutoModel"]
    auto = heads[0]
    lines = [
        "import torch",
        f"from transformers import {auto}",
        f"from hf_seq.models.configuration_{fam.name} import {fam.config}",
        "",
        f"config = {fam.config}({kwargs})",
        f"model = {auto}.from_config(config).eval()  # a {fam.models[auto]}",
        "input_ids = torch.randint(3, config.vocab_size, (2, 12))",
    ]
    if auto in ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM"):
        lines += [
            "loss = model(input_ids=input_ids, labels=input_ids).loss",
            "print(loss.item())  # about ln(vocab_size) before training",
            "print(model.generate(input_ids, max_new_tokens=5, do_sample=False).shape)",
        ]
    elif auto == "AutoModelForQuestionAnswering":
        lines += ["out = model(input_ids=input_ids)", "print(out.start_logits.shape, out.end_logits.shape)"]
    elif auto == "AutoModel":
        lines += ["print(model(input_ids=input_ids).last_hidden_state.shape)"]
    else:
        lines += ["print(model(input_ids=input_ids).logits.shape)"]
    return "\n".join(lines)


def config_fields(fam):
    rows = ["| field | default |", "|---|---|"]
    for field in dataclasses.fields(fam.config_class):
        if field.name.startswith("_"):
            continue
        default = field.default if field.default is not dataclasses.MISSING else None
        if field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        rows.append(f"| `{field.name}` | `{default!r}` |")
    return "\n".join(rows)


def family_page(fam):
    figure, caption = FIGURES.get(fam.name, (None, None))
    autos = "\n".join(
        f"| `{auto}` | [`{model}`](../reference/models.md#hf_seq.models.modeling_{fam.name}.{model}) | "
        + ", ".join(f"`{task}`" for task in PIPELINES.get(auto, []))
        + " |"
        for auto, model in fam.models.items()
    )
    parts = [
        f"# {title(fam)}",
        f"`model_type` `{fam.model_type}`: `{fam.config}` in `hf_seq/models/configuration_{fam.name}.py`, the models "
        f"in `hf_seq/models/modeling_{fam.name}.py`.",
        "## The paper and its equations",
        "The module docstring of the modeling file, as the code states it:",
        f"::: hf_seq.models.modeling_{fam.name}\n    options:\n      show_root_heading: false\n      show_root_toc_entry: false\n      members: false",
    ]
    if figure:
        parts.append(f"![{caption}](../{figure})\n\n*{caption}.*")
    for path in SEE_ALSO.get(fam.name, []):
        parts.append(f"::: {path}\n{MKDOCSTRINGS_OPTIONS}      heading_level: 3")
    parts += [
        "## The config: flags and what each changes",
        f"::: hf_seq.models.configuration_{fam.name}.{fam.config}\n{MKDOCSTRINGS_OPTIONS}      heading_level: 3",
        "Every field and its default (a value outside the allowed ones is an error naming them):",
        config_fields(fam),
        "## A minimal example",
        f"```python\n{example(fam)}\n```",
        "## Auto classes and pipelines",
        "`import hf_seq` registers the family with `AutoConfig` and these Auto classes; a saved folder loads with "
        "`trust_remote_code=True` where hf-seq is not installed.",
        "| Auto class | model | pipeline tasks |\n|---|---|---|\n" + autos,
    ]
    return "\n\n".join(parts) + "\n"


def families_index():
    import hf_seq

    rows = ["| family | `model_type` | config | models |", "|---|---|---|---|"]
    for fam in hf_seq.FAMILIES:
        models = ", ".join(f"`{m}`" for m in fam.models.values())
        rows.append(f"| [{title(fam)}]({fam.name}.md) | `{fam.model_type}` | `{fam.config}` | {models} |")
    return (
        "# Families\n\nOne page per row of `hf_seq.registry.FAMILIES`: the paper's equations from the modeling file's "
        "docstring, the config flags, a minimal example, and the Auto classes and pipelines.\n\n"
        + "\n".join(rows)
        + "\n"
    )


def reference_models():
    parts = [
        "# API reference: models\n\nEvery public name of `hf_seq` (`hf_seq.__all__`), rendered from its docstring. "
        "`from hf_seq import GPTConfig` works for each; the entries name the module that defines it."
    ]
    for _name, path in public_paths():
        parts.append(f"::: {path}\n    options:\n      heading_level: 2\n      members: false")
    parts.append("## The registry\n\nThe table behind `FAMILIES`, and the functions that read it.")
    for path in ("hf_seq.registry.Family", "hf_seq.registry.family", "hf_seq.registry.register"):
        parts.append(f"::: {path}\n    options:\n      heading_level: 3")
    return "\n\n".join(parts) + "\n"


def reference_tools():
    parts = [
        "# API reference: tools\n\nThe modules of tokenization, evaluation, conversion, plotting, compute, sharding and streaming."
    ]
    for module, heading in TOOLS.items():
        parts.append(
            f"## {heading}\n\n::: {module}\n    options:\n      heading_level: 3\n      show_root_heading: true"
        )
    return "\n\n".join(parts) + "\n"


def landing_page():
    """README.md, its links into docs/ and bench/results/ made relative to the site (which ships copies of the
    results), and its family table linked to the family pages."""
    import hf_seq

    text = (ROOT / "README.md").read_text()
    text = re.sub(r"\]\(docs/", "](", text)
    text = re.sub(r"\]\(bench/results/", "](benchmarks/results/", text)
    for fam in hf_seq.FAMILIES:  # the family table's model types lead to the family pages
        text = text.replace(f"| `{fam.model_type}` |", f"| [`{fam.model_type}`](families/{fam.name}.md) |")
    return text


def notebook_markdown(path):
    """A notebook as Markdown with its stored outputs: text as code blocks, images inline."""
    nb = json.loads(path.read_text())
    out = [
        f"*The notebook `notebooks/{path.name}`: open it with Jupyter to run it. The outputs below are the ones "
        "stored with it.*\n"
    ]
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            out.append(source)
            continue
        if cell["cell_type"] != "code":
            continue
        out.append(f"```python\n{source}\n```")
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if "image/png" in data:
                png = data["image/png"]
                png = "".join(png) if isinstance(png, list) else png
                base64.b64decode(png)  # a broken image fails the build
                out.append(f'<img alt="output of the cell above" src="data:image/png;base64,{png.strip()}">')
            elif output.get("output_type") == "stream" or "text/plain" in data:
                text = output.get("text") or data.get("text/plain")
                text = "".join(text) if isinstance(text, list) else text
                out.append("```text\n" + text.rstrip("\n") + "\n```")
    return "\n\n".join(out) + "\n"


def add(files, config, uri, content=None, abs_src_path=None):
    existing = files.get_file_from_path(uri)
    if existing is not None:
        files.remove(existing)
    files.append(File.generated(config, uri, content=content, abs_src_path=abs_src_path))


def on_config(config):
    """Expand the nav's `Families` entry into one page per family, and `Notebooks` into one page per notebook."""
    import hf_seq

    def expand(entries):
        result = []
        for entry in entries:
            if isinstance(entry, dict) and entry.get("Families") == "families/index.md":
                entry = {
                    "Families": ["families/index.md"] + [{title(f): f"families/{f.name}.md"} for f in hf_seq.FAMILIES]
                }
            elif isinstance(entry, dict) and entry.get("Notebooks") == "notebooks/index.md":
                entry = {
                    "Notebooks": [f"notebooks/{nb.stem}.md" for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))]
                }
            elif isinstance(entry, dict):
                key, value = next(iter(entry.items()))
                entry = {key: expand(value) if isinstance(value, list) else value}
            result.append(entry)
        return result

    config["nav"] = expand(config["nav"])
    return config


def on_files(files, config):
    import hf_seq

    add(files, config, "index.md", landing_page())
    add(files, config, "families/index.md", families_index())
    for fam in hf_seq.FAMILIES:
        add(files, config, f"families/{fam.name}.md", family_page(fam))
    add(files, config, "reference/models.md", reference_models())
    add(files, config, "reference/tools.md", reference_tools())
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        add(files, config, f"notebooks/{nb.stem}.md", notebook_markdown(nb))
    results = sorted(path for path in (ROOT / "bench" / "results").iterdir() if path.suffix in (".md", ".png"))
    for result in results:
        add(files, config, f"benchmarks/results/{result.name}", abs_src_path=str(result))
    listing = [f"- [{path.name}]({path.name})" for path in results if path.suffix == ".md"]
    listing += [f"\n![{path.name}]({path.name})" for path in results if path.suffix == ".png"]
    add(
        files,
        config,
        "benchmarks/results/index.md",
        "# Benchmark results\n\nThe tables and figures of `bench/results/`, as committed "
        "([how they were made](../../guide/benchmarks.md)).\n\n" + "\n".join(listing) + "\n",
    )
    import mathjax

    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    add(files, config, "assets/mathjax/tex-chtml.js", abs_src_path=str(es5 / "tex-chtml.js"))
    # the fonts, and the TeX extensions MathJax loads on a command's first use (boldsymbol, cancel, ...)
    for folder in ("output/chtml/fonts/woff-v2", "input/tex/extensions"):
        for path in sorted((es5 / folder).rglob("*")):
            if path.is_file():
                add(files, config, f"assets/mathjax/{path.relative_to(es5).as_posix()}", abs_src_path=str(path))
    return files
