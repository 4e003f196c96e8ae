"""The translation lineage: the lectures' story of neural machine translation, the encoder-decoder without attention
(Sutskever, Vinyals and Le 2014: a reversed source, the final LSTM state as the only summary; Cho et al. 2014: GRUs
and the summary fed at every step), Bahdanau, Cho and Bengio's (2015) additive attention, Luong et al.'s (2015)
bilinear score, and the encoder-decoder Transformer (Vaswani et al. 2017), trained on one parallel corpus with one
joint BPE tokenizer under one budget, sizes matched by non-embedding parameters, and scored on the same test pairs.

    hf-seq lineage --task translation [--corpus gettext | TRAIN.jsonl --validation V --test T
                   --source-column en --target-column es] [--quick] [--budget-tokens N] [--output-dir DIR]

It is the language-model lineage's runner (`study.py`: sizes x members x tuning trials x seeds, budgets in tokens,
seconds or FLOPs, reuse of finished runs, the seeds' summary) with a table of its own members. Writes `lineage.md`
(a table per size: parameters, FLOPs per token, best step, validation perplexity, test BLEU with beam search, chrF,
repetition rate, length ratio, seconds; the ordering against the lectures'), `lineage.json` (one record per run),
`bleu_by_length.png` (test BLEU against source length, Bahdanau et al.'s figure 2) and `alignment-<member>.png` for the
attention members (one test sentence: source tokens across, target tokens down).

The corpus is split once: the given validation and test files (or a Hub dataset's splits), else pairs held out from
the training rows with a fixed seed (the default corpus, the machine's gettext catalogs, has no splits); the three
splits are written to `data/` as JSON lines, and every member trains on those files.

Fairness: one embedding width for every member and tied embeddings where the family allows it (the Sutskever model's
linear output layer reads its LSTM state, which is the size parameter, so it keeps its own output layer); the rest of
each model (its non-embedding parameters: the output layer is counted as an embedding) is sized to the same target.
All train with the same optimizer, schedule and pairs, on token-budget batches (`data.batch_tokens`: about
`batch_size` pairs of the corpus's mean length a step), keep the evaluation with the highest validation BLEU
(`training.select_by: bleu`; tuning trials compare validation losses), and translate the test set with the same beam
search, scored by `tasks.evaluate` as `hf-seq evaluate` scores a run.
"""

import json
import os
from pathlib import Path

from hf_seq.compute import seq2seq_flops_per_token
from hf_seq.errors import InvalidValueError
from hf_seq.experiments import study
from hf_seq.experiments.study import Member, count_parameters, summarize
from hf_seq.hub import public_name

SETTINGS = {
    "default": dict(
        vocab_size=4000,
        max_pairs=None,  # every pair of the corpus
        held_out_fraction=0.02,  # of the pairs, for a validation or test split the corpus does not have
        validation_pairs=400,
        test_pairs=500,
        block_size=128,  # the longest source / target kept, in tokens: prose sentences of 60 words fit whole
        batch_size=32,
        width=128,
        target=400_000,
        rnn_layers=1,
        transformer_layers=2,
        learning_rate=2e-3,
        warmup_steps=100,
        budget_tokens=None,  # filled in by `run`: the pairs' tokens of `steps` steps
        # the five members in 4 min 45 s on 2 idle cores (measured, token-budget batches, one seed, no tuning)
        steps=1600,
        eval_every=400,
        eval_pairs=100,  # validation pairs of the periodic evaluations (loss, and BLEU with the same beam search)
        num_beams=5,
        max_new_tokens=None,  # 1.2 x source tokens + 10 (training.generation_max_length_a / _b)
    ),
    "quick": dict(
        vocab_size=500,
        max_pairs=1500,
        held_out_fraction=0.02,
        validation_pairs=24,
        test_pairs=24,
        block_size=48,
        batch_size=8,
        width=16,
        target=6_000,
        rnn_layers=1,
        transformer_layers=1,
        learning_rate=3e-3,
        warmup_steps=2,
        budget_tokens=None,
        steps=24,
        eval_every=8,
        eval_pairs=8,
        num_beams=2,
        max_new_tokens=16,
    ),
}
DEFAULT_CORPUS = "gettext"


# ---------------------------------------------------------------------------------------------- the members
def _recurrent(**switches):
    """A member of the RNN encoder-decoder family: n = the size parameter units per direction, deep output (or
    tied output) of the embedding width, dropout on the family's three connections."""

    def config(s: dict, size: int, dropout: float) -> dict:
        model = dict(embedding_size=s["width"], hidden_size=size, num_hidden_layers=s["rnn_layers"])
        model |= dict(embedding_dropout=dropout, hidden_dropout=dropout, output_dropout=dropout)
        model |= dict(deep_output_size=s["width"], tie_word_embeddings=True, initializer_range=0.1)
        return model | switches

    return config


def _transformer(s: dict, size: int, dropout: float) -> dict:
    """Post-LN, sinusoidal positions, tied embeddings; the width is the model width, the feed-forward width is
    what is sized."""
    layers = s["transformer_layers"]
    return dict(
        hidden_size=s["width"],
        num_attention_heads=max(1, s["width"] // 32),
        encoder_layers=layers,
        decoder_layers=layers,
        intermediate_size=size,
        max_position_embeddings=2 * s["block_size"] + 16,  # outputs run to 1.2 x the source + 10 tokens
        dropout=dropout,
        tie_word_embeddings=True,
    )


# The members in the lectures' order, worst to best; the switches are BahdanauConfig's (its docstring).
ROWS = {
    row.name: row
    for row in (
        Member(
            "sutskever",
            "Sutskever et al. 2014 (LSTM, reversed source, no attention)",
            "bahdanau",
            _recurrent(
                cell_type="lstm",
                attention_type="none",
                encoder_bidirectional=False,
                reverse_source=True,
                bridge="final_state",
                decoder_input="embedding",
                output_layer="linear",
                tie_word_embeddings=False,  # W_o reads the LSTM state (the size parameter), not an embedding
            ),
        ),
        Member(
            "cho",
            "Cho et al. 2014 (GRU, the summary at every step)",
            "bahdanau",
            _recurrent(
                cell_type="gru",
                attention_type="none",
                encoder_bidirectional=False,
                bridge="bahdanau",  # s_0 = tanh(V' c)
                decoder_input="embedding_and_context",
                output_layer="deep",
            ),
        ),
        Member("bahdanau", "Bahdanau et al. 2015 (additive attention)", "bahdanau", _recurrent()),
        Member("luong", "Luong et al. 2015 (bilinear score)", "bahdanau", _recurrent(attention_type="general")),
        Member("transformer", "Transformer (Vaswani et al. 2017)", "transformer", _transformer),
    )
}
MEMBERS = tuple(ROWS)
LECTURE_ORDER = ("sutskever", "cho", ("bahdanau", "luong"), "transformer")  # worst first; a tuple: not ranked
ATTENTION_MEMBERS = ("bahdanau", "luong", "transformer")


def build(name: str, s: dict, size: int, vocab_size: int, device: str = "meta"):
    """The member, on the meta device by default: shapes only, for counting."""
    import torch

    from hf_seq.registry import family

    row = ROWS[name]
    fam = family(row.family)
    config = fam.config_class(vocab_size=vocab_size, **row.config(s, size, 0.0))
    with torch.device(device):
        return fam.model_class("AutoModelForSeq2SeqLM")(config)


def matched_size(name: str, s: dict, vocab_size: int, target: int | None = None) -> int:
    count = lambda size: count_parameters(build(name, s, size, vocab_size))[1]
    return study.matched_size(count, target or s["target"], 64 * s["width"])


# ---------------------------------------------------------------------------------------------- data
def split_corpus(s: dict, corpus, validation, test, columns: dict, language: str, folder: Path) -> dict:
    """Write the train / validation / test pairs to `folder` as JSON lines with `source` and `target` columns and
    return their paths. Splits the corpus does not have are held out from its training rows with a fixed seed
    (`held_out_fraction` each); a split not named by `validation` / `test` is cut to its first `validation_pairs` /
    `test_pairs` pairs (a file named is scored whole)."""
    import torch

    from hf_seq import data as data_lib
    from hf_seq.recipes import load_recipe

    section = dict(dataset=corpus, validation=validation, test=test, max_examples=s["max_pairs"])
    section |= dict(target_language=language, eval_fraction=s["held_out_fraction"]) | columns
    data = load_recipe({"family": "transformer", "task": "seq2seq", "data": section}).data
    names = {"source": data.source_column, "target": data.target_column}
    try:
        splits = data_lib.load_splits(data, names)
    except InvalidValueError as error:
        if "no column(s)" not in str(error):
            raise
        raise InvalidValueError(
            f"lineage: --source-column {names['source']!r} / --target-column {names['target']!r}: {error}"
        ) from None
    if "test" not in splits:
        train = splits["train"]
        n = max(1, round(len(train) * s["held_out_fraction"]))
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(data_lib.HELD_OUT_SEED + 1))
        splits["test"] = train.select(sorted(order[:n].tolist()))
        splits["train"] = train.select(sorted(order[n:].tolist()))
    caps = {"validation": None if validation else s["validation_pairs"], "test": None if test else s["test_pairs"]}
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, rows in splits.items():
        rows = rows.select(range(min(caps.get(split) or len(rows), len(rows))))
        path = folder / f"{split}.jsonl"
        lines = [json.dumps({"source": r["source"], "target": r["target"]}, ensure_ascii=False) for r in rows]
        text = "\n".join(lines) + "\n"
        if not path.exists() or path.read_text() != text:  # unchanged files keep finished runs reusable
            path.write_text(text)
        paths[split] = str(path)
    return paths


def base_recipe(s: dict, paths: dict, output_dir: Path, tokenizer_path: str | None = None) -> dict:
    """The recipe every member shares: the split pairs (the test pairs only where `paths` names them: training never
    sees them) and the joint tokenizer."""
    data = dict(dataset=paths["train"], validation=paths["validation"], block_size=s["block_size"])
    data |= {"test": paths["test"]} if "test" in paths else {}
    return {
        "family": "transformer",
        "task": "seq2seq",
        "model": {},
        "tokenizer": {"vocab_size": s["vocab_size"], **({"path": tokenizer_path} if tokenizer_path else {})},
        "data": data,
        "training": {"output_dir": str(output_dir), "log_with": "none"},
    }


# ---------------------------------------------------------------------------------------------- scoring
def alignment_figure(folder: Path, tokenizer, source: str, recipe, path: Path, title: str) -> None:
    """The cross-attention of the model in `folder` over its own translation of `source` (the recipe's decoding):
    the Bahdanau family's alignments alpha_ij, the Transformer's last layer averaged over heads; source tokens
    across, target tokens down."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    from hf_seq.plotting import plot_alignment
    from hf_seq.tasks import decoding

    model = AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()  # weights, not a kernel
    ids = tokenizer(source, add_special_tokens=False, return_tensors="pt")["input_ids"][:, : recipe.data.block_size]
    with torch.no_grad():
        generated = model.generate(input_ids=ids, **decoding(recipe))
        out = model(input_ids=ids, decoder_input_ids=generated[:, :-1], output_attentions=True)
    label = lambda i: tokenizer.decode([int(i)]) or tokenizer.convert_ids_to_tokens(int(i))
    plot_alignment(
        out.cross_attentions[-1][0],  # (heads, target, source); the Bahdanau family gives one "head"
        [label(i) for i in ids[0]],
        [label(i) for i in generated[0, 1:]],
        path,
        title=title,
    )


# ---------------------------------------------------------------------------------------------- a member
def plan_member(name, s, target, vocab_size, lengths, corpus_tokens, given) -> dict:
    """A member's size parameter, shapes (on the meta device), FLOPs per token and steps under the budget. A token
    is a source or target token of a training pair (no padding), so a step trains batch x (S + T) tokens at the
    corpus's mean lengths."""
    size = matched_size(name, s, vocab_size, target)
    model = build(name, s, size, vocab_size)
    params, non_embedding = count_parameters(model)
    flops = seq2seq_flops_per_token(model, *lengths)
    tokens_per_step = round(s["batch_size"] * sum(lengths))

    def step_time() -> float:  # under a seconds budget: will the member pass an epoch, and so need dropout?
        import torch

        g = torch.Generator().manual_seed(0)
        source, target = (
            torch.randint(4, vocab_size, (s["batch_size"], max(1, round(n))), generator=g) for n in lengths
        )
        return study.seconds_per_step(build(name, s, size, vocab_size, "cpu"), {"input_ids": source, "labels": target})

    steps, past_epoch = study.plan_steps(given, s["budget_tokens"], flops, tokens_per_step, corpus_tokens, step_time)
    return dict(
        size=size,
        params=params,
        non_embedding=non_embedding,
        flops=round(flops),
        steps=steps,
        past_epoch=past_epoch,
        tokens_per_step=tokens_per_step,
    )


def train_member(context, name, plan, settings, seed, folder, steps, seconds, score=False) -> dict:
    """One training run through `hf_seq.training.run`: a tuning trial reports its lowest validation loss; a final run
    (`score`) keeps its evaluation of highest validation BLEU, and those weights are scored once: the perplexity of
    the whole validation and test splits, and the test translations (beam search) by BLEU, chrF, BLEU by length,
    repetition and length ratio."""
    from transformers import AutoModelForSeq2SeqLM

    from hf_seq import tasks

    s, prepared, row = context["s"], context["prepared"], ROWS[name]
    model_keys = row.config(s, plan["size"], settings["dropout"])
    paths = {k: v for k, v in context["paths"].items() if k != "test"}
    member_recipe = base_recipe(s, paths, folder, str(context["tokenizer_dir"]))
    member_recipe |= {"family": row.family, "model": model_keys}
    member_recipe["data"]["eval_examples"] = s["eval_pairs"]
    # token-budget batches of as many tokens as batch_size pairs hold on average: about 3x the pairs per second of
    # fixed-size batches on these lengths (bench/results/batching_cpu.md); training.batch_size stays the
    # evaluations' batch
    member_recipe["data"]["batch_tokens"] = plan["tokens_per_step"]
    # tuning trials compare validation losses; a final run keeps its evaluation of highest validation BLEU
    training = study.member_training(s, context, settings, seed, steps, seconds, "bleu" if score else "loss")
    member_recipe["training"] |= training | {
        "generation_num_beams": s["num_beams"],
        "generation_max_new_tokens": s["max_new_tokens"],  # None: a x source + b (the recipe's default)
    }
    member_recipe["card"] = {"description": f"The {row.title} member of the hf-seq translation lineage."}
    recipe, summary = study.train_or_reuse(member_recipe, folder, context["progress"])
    got = {k: summary[k] for k in ("eval_loss", "steps")}
    if not score:
        return got
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    params, non_embedding = count_parameters(model)
    record = {"name": name, "title": row.title, "family": row.family, "config": model_keys}
    record |= {"params": params, "non_embedding_params": non_embedding, "flops_per_token": plan["flops"]}
    record |= settings | {"best_step": summary.get("best_step"), "epochs": summary.get("epochs")}
    record |= {"steps": summary["steps"], "train_tokens": summary["steps"] * plan["tokens_per_step"]}
    record |= {"seconds": summary["seconds"]}
    curve = json.loads((folder / "metrics.json").read_text())["evaluations"]
    record["curve"] = [{k: c.get(k) for k in ("step", "seconds", "eval_loss", "eval_bleu")} for c in curve]
    # the kept weights, scored once by `tasks.evaluate` as `hf-seq evaluate` scores them: the perplexity of the whole
    # validation split (not translated), and the test split, perplexity and translations
    metrics = tasks.evaluate(recipe, prepared, model, "cpu", generate_for=("test",))
    record |= {f"validation_{k}": metrics[f"eval_{k}"] for k in ("loss", "perplexity")}
    record |= {k: v for k, v in metrics.items() if k.startswith("test_") and k != "test_examples"}
    record["decoding"] = tasks.decoding(recipe)
    rows = prepared.held_out_rows["test"].select(range(min(3, len(prepared.held_out_rows["test"]))))
    translations = tasks.translate(model, prepared.tokenizer, list(rows["source"]), recipe, "cpu")
    record["examples"] = [
        {"source": a, "reference": b, "translation": c} for a, b, c in zip(rows["source"], rows["target"], translations)
    ]
    if name in ATTENTION_MEMBERS:
        path = folder.parent / f"alignment-{folder.name}.png"
        title = f"{row.title}: {context['alignment_source']!r}"
        alignment_figure(folder, prepared.tokenizer, context["alignment_source"], recipe, path, title)
        record["alignment"] = path.name
    return record


# ---------------------------------------------------------------------------------------------- report
def plot_bleu_by_length(records: list[dict], path: Path, title: str) -> None:
    """Test BLEU against the source length bucket, one line per member (Bahdanau et al. 2015, figure 2)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    first_words = {b["bucket"]: b["min_words"] for record in records for b in record["test_bleu_by_length"]}
    sentences = {b["bucket"]: b["sentences"] for record in records for b in record["test_bleu_by_length"]}
    buckets = sorted(first_words, key=first_words.get)
    for record in records:
        points = {b["bucket"]: b["bleu"] for b in record["test_bleu_by_length"]}
        x = [i for i, name in enumerate(buckets) if name in points]
        ax.plot(x, [points[buckets[i]] for i in x], "o-", ms=4, lw=1.5, label=record["title"])
    ax.set_xticks(range(len(buckets)), [f"{name}\n({sentences[name]})" for name in buckets])  # a bucket's sentences
    study.save_log_plot(fig, ax, "source length in words (test sentences)", "test BLEU", title, path, log_x=False)


def write_report(result: dict, output_dir: Path) -> None:
    records, metric = result["members"], result["metric"]
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)
    lines = [
        "# The translation lineage: Sutskever, Cho, Bahdanau, Luong, Transformer",
        "",
        f"Corpus `{result['corpus']}` ({result['train_pairs']:,} training pairs; validation: {result['validation']}, "
        f"{result['validation_pairs']:,} pairs; test: {result['test']}, {result['test_pairs']:,} pairs), one joint "
        f"byte-level BPE tokenizer of {result['vocab_size']:,} tokens trained on the training sources and targets; "
        f"budget: {result['budget']}. Embedding width {result['width']}, non-embedding parameters matched per size; "
        f"the weights kept are the evaluation with the highest BLEU on the first {result['settings']['eval_pairs']} "
        f"validation pairs. Tuning: {result['tuning']}. Seeds: {result['seeds']}. Test translations: beam search of "
        f"{result['settings']['num_beams']} ("
        + ", ".join(f"{k} {v}" for k, v in (result["decoding"] or {}).items() if k != "do_sample")
        + "). "
        f"Machine: {result['machine']}.",
        "",
        "Ranked by **test BLEU** (the test split, scored once, with the selected weights; higher is better).",
        "",
    ]
    summary = summarize(records, metric)
    for target in result["sizes"]:
        rows = [r for r in summary if r["target"] == target]
        lines += [
            f"## Non-embedding parameters {target:,}",
            "",
            "| member | params | non-embedding | FLOPs / token | lr | dropout | best step | validation perplexity | "
            "test BLEU | chrF | repetition | length ratio | seconds |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in (r for r in records if r["target"] == target):
            seed = "" if result["seeds"] == 1 else f" (seed {r['seed']})"
            lines.append(
                f"| {r['title']}{seed} | {r['params']:,} | {r['non_embedding_params']:,} | "
                f"{r['flops_per_token']:,} | {r['learning_rate']:.2g} | {r['dropout']:g} | "
                f"{fmt(r['best_step'], 'd')} | {r['validation_perplexity']:.2f} | {r['test_bleu']:.2f} | "
                f"{r['test_chrf']:.2f} | {r['test_repetition_rate']:.2f} | {r['test_length_ratio']:.2f} | "
                f"{r['seconds']:.0f} |"
            )
        lines += study.ordering_lines(rows, LECTURE_ORDER, result["seeds"], higher_is_better=True)
    lines += [
        "The lectures' order puts Bahdanau's additive score and Luong's bilinear one level (`~`): neither is an "
        "inversion of the other. FLOPs per token: a token is a source or target token of a pair; 6 x the encoder's "
        "parameters per source token, 6 x the decoder's (with the output layer) per target token, plus the "
        "Transformer's attention (hf_seq.compute.seq2seq_flops_per_token). Repetition: the share of test "
        "translations that repeat an n-gram (1-4 words) back to back. Length ratio: translation length / reference "
        "length in BLEU's tokens. Every trial is in lineage.json.",
        "",
        "![BLEU by source length](bleu_by_length.png)",
        "",
    ]
    largest = [r for r in records if r["seed"] == 0 and r["target"] == result["sizes"][-1]]
    for r in largest:
        if r.get("alignment"):
            lines += [f"![{r['title']}: alignment]({r['alignment']})", ""]
    lines += ["## Examples (the first test pairs)", ""]
    for r in largest:
        lines += [f"**{r['title']}**", ""]
        lines += [f"- `{e['source']}` -> `{e['translation']}` (reference: `{e['reference']}`)" for e in r["examples"]]
        lines += [""]
    (output_dir / "lineage.md").write_text("\n".join(lines))


# ---------------------------------------------------------------------------------------------- the run
def run(
    quick: bool = False,
    output_dir="lineage",
    corpus=DEFAULT_CORPUS,
    validation=None,
    test=None,
    source_column: str = "source",
    target_column: str = "target",
    target_language: str = "fr",
    budget_tokens: int | None = None,
    budget_seconds: float | None = None,
    budget_flops: float | None = None,
    members=MEMBERS,
    sizes=None,
    seeds: int = 1,
    tune: int = 0,
    threads: int | None = None,
    progress: bool = True,
) -> dict:
    """Train and score every member at every size and seed; write lineage.md, lineage.json, bleu_by_length.png, the
    alignment pictures and the member folders into `output_dir`. Returns what lineage.json holds."""
    from hf_seq.recipes import load_recipe

    s = dict(SETTINGS["quick" if quick else "default"])
    budgets = dict(tokens=budget_tokens, seconds=budget_seconds, flops=budget_flops)
    given, sizes = study.check_arguments(members, MEMBERS, budgets, seeds, tune, sizes, s["target"], "translation")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    say = print if progress else (lambda *a, **k: None)
    corpus_name = f"gettext en-{target_language}" if corpus == DEFAULT_CORPUS else public_name(corpus)

    # one split, one tokenizer, one test set for everybody
    columns = dict(source_column=source_column, target_column=target_column)
    paths = split_corpus(s, corpus, validation, test, columns, target_language, output_dir / "data")
    recipe = load_recipe(base_recipe(s, paths, output_dir / "tokenizer-run"))
    prepared, tokenizer_dir = study.shared_data(recipe, output_dir)
    vocab_size = len(prepared.tokenizer)
    source_tokens = sum(map(len, prepared.train["input_ids"]))
    target_tokens = sum(map(len, prepared.train["labels"]))
    pairs = len(prepared.train)
    lengths = (source_tokens / pairs, target_tokens / pairs)
    if not given:  # the default budget: the settings' steps
        s["budget_tokens"] = round(s["steps"] * s["batch_size"] * sum(lengths))
    elif "tokens" in given:
        s["budget_tokens"] = budget_tokens
    test_sources = list(prepared.held_out_rows["test"]["source"])
    context = dict(s=s, prepared=prepared, recipe=recipe, paths=paths, tokenizer_dir=tokenizer_dir, threads=threads)
    context["progress"] = progress
    # the alignment pictures' sentence: the first test source of 5 to 12 words (else the first)
    context["alignment_source"] = next((x for x in test_sources if 5 <= len(x.split()) <= 12), test_sources[0])
    say(
        f"lineage: {pairs:,} training pairs ({source_tokens + target_tokens:,} tokens), "
        f"{len(prepared.held_out['eval'])} validation and {len(test_sources)} test pairs, vocab {vocab_size}"
    )
    metric = "test_bleu"

    def plan(name, target):
        return plan_member(name, s, target, vocab_size, lengths, source_tokens + target_tokens, given)

    def train(name, plan_, settings, seed, folder, steps, seconds, score=False):
        record = train_member(context, name, plan_, settings, seed, folder, steps, seconds, score)
        if score:
            say(f"lineage: {name}: test BLEU {record['test_bleu']:.2f}, chrF {record['test_chrf']:.2f}")
        return record

    records = study.train_all(members, sizes, seeds, tune, s, budget_seconds, output_dir, plan, train, say=say)
    budget = study.budget_text(given, s["budget_tokens"], unit="training tokens (source + target)")
    result = {
        "task": "translation",
        "corpus": corpus_name,
        "validation": public_name(validation) if validation else "held out from the training pairs",
        "test": public_name(test) if test else "held out from the training pairs",
        "quick": quick,
        "vocab_size": vocab_size,
        "width": s["width"],
        "train_pairs": pairs,
        "validation_pairs": len(prepared.held_out["eval"]),
        "test_pairs": len(test_sources),
        "train_tokens": source_tokens + target_tokens,
        "mean_source_tokens": lengths[0],
        "mean_target_tokens": lengths[1],
        "alignment_source": context["alignment_source"],
        "decoding": records[0]["decoding"] if records else None,
    }
    result |= study.result_fields(given, budgets, s, tune, seeds, sizes, metric, load_before, records, budget)
    largest = study.write_results(result, output_dir, f"{corpus_name}, {budget}")
    plot_bleu_by_length(largest, output_dir / "bleu_by_length.png", f"{corpus_name}, {budget}")
    write_report(result, output_dir)
    return result


__all__ = ["MEMBERS", "ROWS", "matched_size", "run"]
