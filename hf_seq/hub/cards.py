"""Model cards: every saved model gets a README.md with Hub metadata, the architecture in words, the data and recipe,
the evaluation results the run measured, and how to load it. A card states no number that was not measured: the
metrics come from the run's metrics.json, and a model without one says so."""

import json
from importlib import resources
from pathlib import Path

import yaml

from hf_seq.data.corpora import DATA_DESCRIPTIONS
from hf_seq.errors import MissingFileError
from hf_seq.hub.publish import hub_dataset_ids, public_recipe
from hf_seq.registry import family as get_family

PIPELINE_TAGS = {
    "AutoModelForCausalLM": "text-generation",
    "AutoModelForMaskedLM": "fill-mask",
    "AutoModelForSeq2SeqLM": "translation",
    "AutoModelForSequenceClassification": "text-classification",
    "AutoModelForTokenClassification": "token-classification",
    "AutoModelForQuestionAnswering": "question-answering",
    "AutoModel": "feature-extraction",
}
METRIC_NAMES = {  # the names metrics.json uses -> (model-index type, what the card calls it)
    f"{prefix}_{key}": (kind, f"{label} ({split})")
    for prefix, split in (("eval", "validation"), ("test", "test"))
    for key, kind, label in (
        ("bits_per_byte", "bits_per_byte", "Bits per byte"),
        ("bits_per_note", "bits_per_note", "Bits per note"),
        ("perplexity", "perplexity", "Perplexity per token"),
        ("loss", "loss", "NLL per token (nats, no label smoothing)"),
        ("bleu", "bleu", "BLEU (sacrebleu)"),
        ("chrf", "chrf", "chrF (sacrebleu)"),
        ("length_ratio", "length_ratio", "Length ratio, output / reference"),
        ("repetition_rate", "repetition_rate", "Outputs with an n-gram repeated back to back"),
        ("accuracy", "accuracy", "Accuracy"),
        ("f1", "f1", "F1"),
        ("mase", "mase", "MASE, seasonal-naive scale"),
        ("smape", "smape", "sMAPE (%)"),
        ("crps", "crps", "CRPS (mean weighted quantile loss)"),
    )
}
SERIES_DATA_KEYS = ("dataset", "validation", "test", "target_column", "id_column", "timestamp_column", "test_windows",
                    "season", "max_examples")  # fmt: skip
# a forecaster's loss is per value, not per token (its metrics count `points`, hf_seq.data.tasks._score_series)
SERIES_LOSS = {f"{prefix}_loss": ("loss", f"NLL per value (nats) ({split})")
               for prefix, split in (("eval", "validation"), ("test", "test"))}  # fmt: skip


def describe_decoding(metrics: dict) -> str:
    """How the translations behind the BLEU figures were decoded, the sacreBLEU signature, and BLEU by source
    length."""
    if metrics.get("num_beams", 1) > 1:
        how = f"beam search of {metrics['num_beams']} with length penalty {metrics.get('length_penalty', 1.0):g}"
    else:
        how = "greedy decoding"
    if metrics.get("max_length_a") is not None:
        how += f", at most {metrics['max_length_a']:g} x source tokens + {metrics['max_length_b']} tokens each"
    text = f"Translations by {how}; BLEU signature `{metrics['eval_bleu_signature']}`."
    buckets = metrics.get("eval_bleu_by_length") or []
    if buckets:
        text += (
            " Validation BLEU by source length in words: "
            + ", ".join(f"{b['bucket']}: {b['bleu']:.1f} ({b['sentences']} sentences)" for b in buckets)
            + "."
        )
    return text


def template() -> str:
    return resources.files("hf_seq.hub").joinpath("templates/model_card.md").read_text()


def describe_architecture(config) -> str:
    fam = get_family(config.model_type)
    summary = " ".join((fam.config_class.__doc__ or fam.config).strip().split("\n\n")[0].split())
    forecaster = getattr(config, "prediction_length", None) is not None
    if forecaster:
        summary = (
            f"A forecaster on the hf-seq `{fam.name}` family's backbone (`{fam.config}`): it reads lagged values of a "
            f"series in place of token embeddings and predicts a {config.distribution_output.replace('_', '-')} "
            "distribution for each next value (DeepAR's recipe; hf-seq's models/prediction.py)."
        )
    keys = ("prediction_length", "context_length", "lags_sequence", "scaling", "distribution_output")
    shape = {
        k: getattr(config, k)
        for k in (
            *(keys if forecaster else ("vocab_size",)),
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "cell_type",
            "attention_type",
            "position_embedding_type",
            "norm_position",
            "hidden_act",
            *(() if forecaster else ("tie_word_embeddings",)),  # a forecaster has no output embedding to tie
        )
        if getattr(config, k, None) is not None
    }
    lines = [summary, "", "| option | value |", "|---|---|"] + [f"| `{k}` | `{v}` |" for k, v in shape.items()]
    return "\n".join(lines)


def _architecture_class(folder: Path, config) -> str:
    saved = (config.architectures or [""])[0]
    fam = get_family(config.model_type)
    for auto, name in fam.models.items():
        if name == saved:
            return auto
    return "AutoModel"


DISTRIBUTED = {
    "NO": "one process",
    "MULTI_CPU": "data parallel (DDP) over CPU processes",
    "MULTI_GPU": "data parallel (DDP) over GPUs",
    "FSDP": "fully sharded data parallel (FSDP2)",
    "DEEPSPEED": "DeepSpeed",
}


def describe_distributed(metrics: dict) -> str:
    """How a run ran, from its metrics: 'It trained on 2 processes: fully sharded data parallel (FSDP2) ...'."""
    kind = metrics["distributed_type"]
    processes = metrics.get("num_processes", 1)
    how = DISTRIBUTED.get(kind, kind)
    text = f"It trained on {processes} process{'es' if processes != 1 else ''}: {how}"
    share = metrics.get("parameters_per_process")
    if share is not None and share < 1:
        text += f", each holding {share:.0%} of the parameters"
    precision = metrics.get("mixed_precision", "no")
    return text + (f", {precision} mixed precision." if precision != "no" else ", fp32.")


def write_card(folder, recipe: dict | None = None, metrics: dict | None = None, repo_id: str | None = None) -> Path:
    """Write (or refresh) folder/README.md from the saved config and, when present, the run's recipe and metrics
    (arguments, else recipe.json / metrics.json in the folder)."""
    from transformers import AutoConfig

    folder = Path(folder)
    if not (folder / "config.json").exists():
        raise MissingFileError(f"{folder} holds no config.json: save a model there first (save_pretrained)")
    config = AutoConfig.from_pretrained(folder)
    if recipe is None and (folder / "recipe.json").exists():
        recipe = json.loads((folder / "recipe.json").read_text())
    if metrics is None and (folder / "metrics.json").exists():
        metrics = json.loads((folder / "metrics.json").read_text())
    fam = get_family(config.model_type)
    auto_class = _architecture_class(folder, config)
    repo_id = repo_id or folder.name
    hub_datasets = hub_dataset_ids((recipe or {}).get("data", {}).get("dataset"))
    recipe = public_recipe(recipe) if recipe else recipe  # names, not the training machine's paths
    dataset = (recipe or {}).get("data", {}).get("dataset")
    if isinstance(dataset, list):
        dataset = ", ".join(map(str, dataset))
    card_extra = (recipe or {}).get("card", {})
    measured = {k: v for k, v in (metrics or {}).items() if k in METRIC_NAMES and v is not None}
    names = METRIC_NAMES | (SERIES_LOSS if "eval_points" in (metrics or {}) else {})
    measured = {names[k][1]: (names[k][0], v) for k, v in measured.items()}
    metadata = card_metadata(config, auto_class, recipe, repo_id, dataset, hub_datasets, measured)

    forecaster = getattr(config, "prediction_length", None) is not None
    from hf_seq.data.music import holds_tokenizer

    scores = holds_tokenizer(folder)  # a music model: its tokenizer is MidiTok's
    if recipe and forecaster:  # what a forecaster's run read: no tokenizer, and of the data keys the series' own
        recipe = {k: v for k, v in recipe.items() if k != "tokenizer"}
        recipe["data"] = {k: v for k, v in recipe.get("data", {}).items() if k in SERIES_DATA_KEYS}
    if recipe:
        recipe_text = "```yaml\n" + yaml.safe_dump(recipe, sort_keys=False) + "```"
    else:
        recipe_text = "Not recorded: this model was not trained by `hf-seq train`."
    description = card_extra.get(
        "description", f"A `{fam.config}` model of the hf-seq `{fam.name}` family, trained from scratch."
    )
    limitations = card_extra.get(
        "limitations",
        "A small research and teaching model trained from scratch on a small corpus: it shows how its architecture "
        "learns, not a production system. "
        + (
            "Its forecasts and intervals hold only as far as the series keeps behaving as it did; check them against "
            "the seasonal-naive benchmark (MASE) before any use."
            if forecaster
            else "Outputs are often wrong or incoherent; do not rely on them for any decision."
        )
        + " Its behaviour outside the training data's domain has not been evaluated.",
    )
    text = template().format(
        metadata=yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True).strip(),
        title=repo_id,
        description=description,
        architecture=describe_architecture(config),
        training_data=describe_training_data(recipe, dataset),
        training_recipe=recipe_text,
        evaluation=describe_evaluation(metrics, measured),
        auto_class=auto_class,
        repo_id=repo_id,
        # a forecaster reads values: it has no tokenizer
        tokenizer_import="" if forecaster or scores else ", AutoTokenizer",
        tokenizer_line=tokenizer_line(repo_id, forecaster, scores),
        usage=usage_example("music" if scores else metadata["pipeline_tag"], repo_id),
        limitations=limitations,
    )
    path = folder / "README.md"
    path.write_text(text)
    return path


def card_metadata(config, auto_class: str, recipe, repo_id: str, dataset, hub_datasets, measured: dict) -> dict:
    """The card's YAML header: library, pipeline tag and tags (from the run's task entry when it has one, else from
    the model's Auto class), license, language, Hub datasets, and the measured metrics as a model-index."""
    card_extra = (recipe or {}).get("card", {})
    metadata = {
        "library_name": "transformers",
        "pipeline_tag": PIPELINE_TAGS.get(auto_class, "feature-extraction"),
        "tags": ["hf-seq", get_family(config.model_type).name, config.model_type],
        "license": card_extra.get("license", "apache-2.0"),
    }
    if (recipe or {}).get("task"):  # a trained run: its task entry tags the card (a bare model: its Auto class)
        from hf_seq.data.tasks import get_task

        task = get_task(recipe["task"])
        metadata["pipeline_tag"] = task.pipeline_tag
        metadata["tags"] += list(task.tags)
    if hub_datasets:
        metadata["datasets"] = hub_datasets
    if card_extra.get("language"):
        metadata["language"] = card_extra["language"]
    if measured:
        metadata["model-index"] = [
            {
                "name": repo_id,
                "results": [
                    {
                        "task": {"type": metadata["pipeline_tag"]},
                        "dataset": {"name": dataset or "unspecified", "type": dataset or "unspecified"},
                        "metrics": [
                            {"type": kind, "value": round(float(v), 4), "name": name}
                            for name, (kind, v) in measured.items()
                        ],
                    }
                ],
            }
        ]
    return metadata


def describe_training_data(recipe, dataset) -> str:
    """An embedded dataset in words (with the language pair of the gettext translations), any other by its name."""
    if not recipe:
        return "Not recorded."
    data = recipe.get("data", {})
    training_data = DATA_DESCRIPTIONS.get(dataset, f"`{dataset}`")
    if recipe.get("task") == "seq2seq" and dataset == "gettext":
        training_data += f" ({data.get('source_language', 'en')} → {data.get('target_language', 'fr')})"
    return training_data


def describe_evaluation(metrics: dict | None, measured: dict) -> str:
    """The measured metrics as a table, then how they were measured: after how much training, on how many
    processes, on how much of each split, how translations were decoded, what bits per byte means."""
    if not measured:
        return "No evaluation was recorded for this model."
    rows = [f"| {name} | {float(v):.4g} |" for name, (_, v) in measured.items()]
    extra = ""
    if metrics.get("steps"):
        extra = (
            f"\n\nMeasured by the training run on its held-out split after {metrics['steps']} steps "
            f"({metrics.get('tokens', 0):,} training {'values' if 'eval_points' in metrics else 'tokens'}, "
            f"{metrics.get('seconds', 0):.0f} s)."
        )
        if metrics.get("distributed_type"):
            extra += " " + describe_distributed(metrics)
    for prefix, split in (("eval", "validation"), ("test", "test")):
        scored, total = metrics.get(f"{prefix}_examples"), metrics.get(f"{prefix}_examples_total")
        if scored:
            what = (
                f"{scored} of {total} examples (capped by `data.eval_examples`)" if total else f"all {scored} examples"
            )
            units = [
                (key, metrics[f"{prefix}_{key}"])
                for key in ("tokens", "bytes", "notes")
                if f"{prefix}_{key}" in metrics
            ]
            counted = "".join(f", {count:,} {key}" for key, count in units)
            extra += f" The {split} figures score {what}{counted}."
    if metrics.get("eval_bleu_signature"):
        extra += " " + describe_decoding(metrics)
    if "eval_bits_per_byte" in (metrics or {}):
        extra += (
            " Bits per byte is the total NLL in bits over the UTF-8 bytes of the scored text: it compares models with"
            " different tokenizers."
        )
    if "eval_bits_per_note" in (metrics or {}):
        extra += (
            " Bits per note is the total NLL in bits of the held-out pieces over their notes (counted in the scores, "
            "not the tokens): it compares models with different tokenizations."
        )
    return "| metric | value |\n|---|---|\n" + "\n".join(rows) + extra


USAGE = {  # pipeline tag -> how to use a model of that tag ({r}: the repo id)
    "text-generation": 'from transformers import pipeline\n\nprint(pipeline("text-generation", model="{r}", trust_remote_code=True)("def ", max_new_tokens=20))',
    "fill-mask": 'from transformers import pipeline\n\nprint(pipeline("fill-mask", model="{r}", trust_remote_code=True)("import [MASK]"))',
    "translation": 'import hf_seq  # registers the translation pipeline (transformers 5 removed its own)\nfrom transformers import pipeline\n\nprint(pipeline("translation", model="{r}")("Open file"))',
    "music": 'import miditok\nimport torch\nfrom transformers import AutoModelForCausalLM\n\nmodel = AutoModelForCausalLM.from_pretrained("{r}", trust_remote_code=True).eval()\ntokenizer = miditok.MusicTokenizer.from_pretrained("{r}")\nbos, eos = tokenizer["BOS_None"], tokenizer["EOS_None"]\nids = model.generate(torch.tensor([[bos]]), do_sample=True, max_new_tokens=256, eos_token_id=eos)[0].tolist()\nids = ids[: ids.index(eos)] if eos in ids else ids\ntokenizer.decode([i for i in ids if i not in tokenizer.special_tokens_ids]).dump_midi("sample.mid")\n# with hf-seq: hf-seq generate {r} --output sample.mid',
    "time-series-forecasting": 'import torch\nfrom transformers import AutoModelForTimeSeriesPrediction\n\nmodel = AutoModelForTimeSeriesPrediction.from_pretrained("{r}", trust_remote_code=True).eval()\npast = torch.randn(1, model.past_length).cumsum(1)  # your series: its last past_length values, NaN where missing\npaths = model.generate(past_values=past).sequences  # (1, num_parallel_samples, prediction_length)\nprint(paths.median(1).values)  # the point forecast',
}


def tokenizer_line(repo_id: str, forecaster: bool, scores: bool) -> str:
    """How the card's loading example reads the tokenizer: none for a forecaster, MidiTok's for a music model."""
    if forecaster:
        return ""
    if scores:
        return f'\n\nimport miditok  # the tokenizer is MidiTok\'s (pip install miditok)\n\ntokenizer = miditok.MusicTokenizer.from_pretrained("{repo_id}")'
    return f'\ntokenizer = AutoTokenizer.from_pretrained("{repo_id}")'


def usage_example(pipeline_tag: str, repo_id: str) -> str:
    usage = USAGE.get(pipeline_tag)
    return f"```python\n{usage.format(r=repo_id)}\n```" if usage else ""
