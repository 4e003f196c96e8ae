"""The `hf-seq` command: train, fine-tune, evaluate, generate, card and publish any hf-seq family.

hf-seq demo                                  the README's main job, offline, a few minutes on CPU
hf-seq recipes [show NAME]                   the shipped recipes, one line each; `show` prints one
hf-seq train RECIPE [key=value ...]          pretraining with accelerate (a YAML file or a shipped recipe's name)
accelerate launch -m hf_seq.cli train RECIPE.yaml       the same recipe on several GPUs / processes
"""

import argparse
import json
import sys
from pathlib import Path

from hf_seq.errors import InvalidValueError, MissingFileError, UserError

DEBUG_HELP = "show the traceback of every error, including errors in the recipe, arguments, files or folders"

# The demo: a byte-level BPE tokenizer and a small GPT on the standard library sources (~3 MB of Python).
DEMO_RECIPE = {
    "family": "gpt",
    "model": {
        "hidden_size": 128,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "max_position_embeddings": 128,
        "embedding_dropout": 0.0,
        "attention_dropout": 0.0,
        "hidden_dropout": 0.0,
    },
    "tokenizer": {"vocab_size": 4096},
    "data": {"dataset": "stdlib", "block_size": 128, "max_chars": 3_000_000},
    "training": {
        "output_dir": "hf-seq-demo",  # the budget is --minutes (training.max_seconds)
        "batch_size": 16,
        "learning_rate": 2e-3,
        "warmup_steps": 30,
        "eval_every": 100_000,
        "save_every": 100,
    },
    "card": {"description": "A small GPT trained by `hf-seq demo` on the Python standard library sources."},
}
# No trailing spaces: byte-level BPE tokens carry the space before a word, so "def " would end in a lone space token.
DEMO_PROMPTS = ("def", "import os\n", "class", "    return", "for i in")


def cmd_demo(args) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    from hf_seq.training import run
    from hf_seq.training.recipes import load_recipe

    overrides = [f"training.output_dir={args.output_dir}", f"training.max_seconds={args.minutes * 60}", *args.overrides]
    recipe = load_recipe(DEMO_RECIPE, overrides)
    out = Path(recipe.training.output_dir)
    earlier = out / "checkpoints" / "recipe.json"
    # a finished earlier demo in the same folder is replaced; anything else there is protected as `train` protects it
    replace = (
        not args.resume
        and (out / "metrics.json").exists()
        and earlier.exists()
        and (json.loads(earlier.read_text()).get("card") == DEMO_RECIPE["card"])
    )
    print(f"Training a tokenizer and a GPT on the Python standard library for {args.minutes:g} min; output in {out}/")
    summary = run(recipe, resume=args.resume, overwrite=replace)
    print(
        f"{summary['steps']} steps, {summary['tokens']:,} tokens in {summary['seconds']:.0f}s "
        f"({summary['tokens_per_second']:,.0f} tokens/s); held-out perplexity {summary['eval_perplexity']:.1f}, "
        f"{summary['eval_bits_per_byte']:.3f} bits per byte"
    )
    print(f"Model, tokenizer, model card (README.md) and loss curve (loss_curve.png) saved in {out}/")
    print("Reloading the folder through AutoModelForCausalLM; completions from pipeline('text-generation'):")
    model = AutoModelForCausalLM.from_pretrained(out)
    generator = pipeline("text-generation", model=model, tokenizer=AutoTokenizer.from_pretrained(out))
    for prompt in DEMO_PROMPTS:
        text = generator(prompt, max_new_tokens=args.new_tokens, do_sample=True, top_k=20, temperature=0.7)
        print("-" * 60)
        print(text[0]["generated_text"])
    print("-" * 60)
    from hf_seq.hub.publish import check_folder

    loaded = check_folder(out)  # what `hf-seq push` would upload, loaded where hf-seq cannot be imported
    print(f"The folder loads without hf-seq (trust_remote_code=True) as {sorted(set(loaded.values()))};")
    print(f"publish it with: hf-seq push {out} <your-name>/<model-name>")


def cmd_train(args) -> None:
    from hf_seq.training import run
    from hf_seq.training.recipes import load_recipe

    recipe = load_recipe(args.recipe, args.overrides)  # every check happens here, before any data is read
    result = run(recipe, resume=args.resume, overwrite=args.overwrite)
    if _is_main_process():
        print(json.dumps(result.summary, indent=2))


def cmd_finetune(args) -> None:
    from hf_seq.training.finetuning import finetune
    from hf_seq.training.recipes import load_recipe

    recipe = load_recipe(args.recipe, args.overrides, command="finetune")
    result = finetune(recipe, resume=args.resume, overwrite=args.overwrite)
    if _is_main_process():
        print(json.dumps(result.summary, indent=2))


class _PlannedVocabulary:
    """What `runs.build_config` reads of a tokenizer, before one is trained: its size and no special-token ids."""

    pad_token_id = bos_token_id = eos_token_id = None

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def recipe_parameters(recipe) -> int:
    """The parameters of the recipe's model, built on the meta device (no memory, no data) with tokenizer.vocab_size
    tokens: a trained tokenizer may hold fewer, so the count is the recipe's size, not a run's to the last unit."""
    import torch

    from hf_seq.data.tasks import TASKS
    from hf_seq.registry import family
    from hf_seq.training.runs import build_config

    vocabulary = None if TASKS[recipe.task].series else _PlannedVocabulary(recipe.tokenizer.vocab_size)
    config = build_config(recipe, vocabulary)  # a model of real values has no tokenizer
    with torch.device("meta"):
        model = family(recipe.family).model_class(TASKS[recipe.task].auto_class)(config)
    return sum(p.numel() for p in model.parameters())


def _count(n: int) -> str:
    if n < 100_000:
        return f"{n / 1e3:.0f}k"
    return f"{n / 1e6:.1f}M" if n < 10_000_000 else f"{n / 1e6:.0f}M"


def cmd_recipes(args) -> None:

    from hf_seq.training.recipes import load_recipe, read_yaml, recipe_command, shipped_files, shipped_recipes

    if args.action == "show":
        files = shipped_files()
        name = (args.name or "").removesuffix(".yaml")
        if name not in files:
            what = f"no shipped file {args.name!r}" if args.name else "name what to show"
            raise MissingFileError(f"recipes show: {what}; allowed names: {', '.join(files)}")
        print(files[name].read_text(), end="")
        return
    print(f"{'recipe':26} {'command':9} {'family':12} {'task':24} {'parameters':>10}  laptop CPU")
    for name, path in shipped_recipes().items():
        command = recipe_command(read_yaml(path.read_text()))
        recipe = load_recipe(path, command=command)
        minutes = recipe.card.get("cpu_minutes")
        when, size = f"~{minutes:g} min" if minutes else "GPU-sized", _count(recipe_parameters(recipe))
        print(f"{name:26} {command:9} {recipe.family:12} {recipe.task:24} {size:>10}  {when}")
    others = [name for name in shipped_files() if "/" in name]
    print(
        "\nhf-seq train NAME [key=value ...] runs one (finetune for its fine-tuning tasks); hf-seq recipes show NAME "
        "prints it, to copy and edit.\nAlso shipped, for `recipes show`: " + ", ".join(others)
    )


def _is_main_process() -> bool:
    import os

    return os.environ.get("RANK", "0") == "0"  # torchrun / accelerate launch set RANK in every process


def cmd_train_tokenizer(args) -> None:
    from hf_seq.data.corpora import load_text_dataset
    from hf_seq.data.tokenization import train_bpe_tokenizer

    if args.files:
        from hf_seq.data.corpora import load_files

        dataset = load_files(args.files, what="--files")  # local files only: a missing path is never a Hub name
    else:
        dataset = load_text_dataset(args.dataset, text_column=args.text_column)
    tokenizer = train_bpe_tokenizer(
        dataset,
        vocab_size=args.vocab_size,
        min_frequency=args.min_frequency,
        style=args.style,
        text_column=args.text_column,
    )
    tokenizer.save_pretrained(args.output_dir)
    print(f"saved a {args.style} BPE tokenizer with {len(tokenizer)} tokens to {args.output_dir}")


def cmd_card(args) -> None:
    from hf_seq.hub.cards import write_card
    from hf_seq.training.runs import open_run

    run = open_run(args.folder, hub=False)  # the card describes a model that loads, with the weights it was saved with
    print(f"wrote {write_card(run.folder, metrics=run.summary, repo_id=args.repo_id)}")


def cmd_push(args) -> None:
    from hf_seq.hub.publish import push

    print(push(args.folder, args.repo_id, private=args.private, token=args.token, dry_run=args.dry_run))


def cmd_evaluate(args) -> None:
    """Evaluate a saved model on the held-out split of the recipe it was trained with (recipe.json in the folder),
    or of another recipe, with key=value overrides."""
    from hf_seq.data.tasks import describe_scoring
    from hf_seq.training.runs import evaluate_folder

    metrics = evaluate_folder(args.folder, recipe=args.recipe, overrides=args.overrides)  # opened by open_run
    if args.json:
        print(json.dumps(metrics, indent=2))
        return
    for key, value in metrics.items():
        if key.endswith("bleu_by_length"):  # one bucket of source length (words) after another
            value = "; ".join(f"{b['bucket']}: {b['bleu']:.1f} ({b['sentences']})" for b in value)
        print(f"{key:28s} {value:.6g}" if isinstance(value, float) else f"{key:28s} {value}")
    for prefix in ("eval", "test"):
        note = describe_scoring(metrics, prefix)
        if note:
            print(f"note: {note}")


def cmd_generate(args) -> None:
    from transformers import pipeline

    import hf_seq  # noqa: F401  (registers the families and the translation pipeline)
    from hf_seq.training.runs import open_run

    if args.prompt_midi is not None or args.output is not None:
        return generate_music(args)
    if args.prompt is None and args.file is None:
        raise InvalidValueError("give --prompt TEXT or --file FILE (one prompt per line)")
    if args.file is not None and not Path(args.file).is_file():
        raise MissingFileError(f"--file {args.file} does not exist")
    prompts = [args.prompt] if args.prompt is not None else Path(args.file).read_text().splitlines()
    if not prompts:
        raise InvalidValueError(f"--file {args.file} holds no prompts (one prompt per line)")
    if args.greedy and (args.num_beams not in (None, 1) or args.do_sample):
        raise InvalidValueError("--greedy decodes with one beam and no sampling: drop --num-beams / --do-sample")
    run = open_run(args.folder, accept=("AutoModelForCausalLM", "AutoModelForSeq2SeqLM"))
    if _is_music(run):
        raise InvalidValueError(f"{args.folder} is a music model: give --output FILE.mid (and --prompt-midi FILE)")
    if args.seed is not None:
        from transformers import set_seed

        set_seed(args.seed)
    config = run.model.config
    pipeline_name = "translation" if config.is_encoder_decoder else "text-generation"
    generator = pipeline(pipeline_name, model=run.model, tokenizer=run.tokenizer)
    # Unset options come from the folder's generation config: a translation model decodes as its evaluations did
    # (beam search, length penalty, output length a x source + b); a language model continues for 50 tokens.
    limit = args.max_new_tokens or (None if config.is_encoder_decoder else 50)
    kwargs = dict(max_new_tokens=limit, num_beams=1 if args.greedy else args.num_beams, do_sample=args.do_sample)
    kwargs |= dict(length_penalty=args.length_penalty)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if args.do_sample:
        kwargs |= dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    for prompt in prompts:
        out = generator(prompt, **kwargs)
        key = "translation_text" if config.is_encoder_decoder else "generated_text"
        print(out[0][key])


def _is_music(run) -> bool:
    from hf_seq.data.music import MidiTokTokenizer

    return isinstance(run.tokenizer, MidiTokTokenizer)


def generate_music(args) -> None:
    """A music model's sample written as a MIDI file (`--output`): a continuation of `--prompt-midi`, or a piece
    started from BOS; the file is read back and its notes counted."""
    from hf_seq.data.music import sample_midi
    from hf_seq.training.runs import open_run

    if args.prompt is not None or args.file is not None:
        raise InvalidValueError("--prompt / --file are text prompts; a music model takes --prompt-midi FILE")
    if args.output is None or Path(args.output).suffix.lower() not in (".mid", ".midi"):
        raise InvalidValueError(f"--output: give the MIDI file to write (FILE.mid), got {args.output!r}")
    if args.prompt_midi is not None and not Path(args.prompt_midi).is_file():
        raise MissingFileError(f"--prompt-midi {args.prompt_midi} does not exist")
    run = open_run(args.folder, accept=("AutoModelForCausalLM",))
    if not _is_music(run):
        raise InvalidValueError(f"{args.folder} holds no MidiTok tokenizer (not a music model): use --prompt")
    if args.seed is not None:
        from transformers import set_seed

        set_seed(args.seed)
    sampling = dict(do_sample=not args.greedy, num_beams=args.num_beams or 1)
    if not args.greedy:
        sampling |= dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    notes, prompt_notes = sample_midi(
        run.model, run.tokenizer, args.output, args.prompt_midi, args.max_new_tokens or 256, **sampling
    )
    start = f"the prompt's {prompt_notes} notes and their continuation" if args.prompt_midi else "a piece"
    print(f"wrote {args.output}: {start}, {notes} notes in all (read back from the file)")
    if notes - prompt_notes < args.min_notes:
        raise InvalidValueError(
            f"the sample in {args.output} adds {notes - prompt_notes} notes, fewer than --min-notes {args.min_notes}: "
            "raise --max-new-tokens, or sample again (another --seed)"
        )


def cmd_studio(args) -> None:
    from hf_seq.studio.app import serve

    serve(args.folders, args.demo, args.host, args.port, args.root_path)


def _at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return value


def _number_in(low: float, high: float, what: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number {what}, got {text!r}") from None
        if not low < value <= high:
            raise argparse.ArgumentTypeError(f"must be a number {what}, got {value:g}")
        return value

    return parse


def parse_sizes(text: str) -> list[int] | str:
    """`0.4M,1.6M,6.4M` or `400000,1600000` as parameter counts, or `auto`."""
    if text.strip().lower() == "auto":
        return "auto"
    sizes = []
    for item in text.split(","):
        number = item.strip().upper()
        scale = {"K": 10**3, "M": 10**6}.get(number[-1:], 1)
        try:
            sizes.append(round(float(number.rstrip("KM")) * scale))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r} is not a parameter count (e.g. 400000, 400K or 0.4M) or auto"
            ) from None
    return sizes


def cmd_lineage(args) -> None:
    from dataclasses import fields

    from hf_seq.experiments.study import Options, all_studies, get_study

    study = get_study(args.task)
    options = {f.name: getattr(args, f.name) for f in fields(Options) if hasattr(args, f.name)}
    options["corpus"] = args.corpus if args.corpus is None or len(args.corpus) > 1 else args.corpus[0]
    options["members"] = tuple(args.members.split(",")) if args.members else None
    options["set"] = tuple(args.set or ())
    own = {name for other in all_studies().values() for name in other.own_options}
    options |= {name: getattr(args, name) for name in own if hasattr(args, name)}  # only the flags given
    result = study.run(study.make_options(**options))
    metric = result["metric"]
    best_first = -1 if study.higher_is_better else 1
    width = max([7, *(len(row["name"]) for row in result["summary"])])
    for row in sorted(result["summary"], key=lambda r: (r["target"], best_first * r["mean"])):
        spread = f" [{row['min']:.4f}-{row['max']:.4f}]" if row["seeds"] > 1 else ""
        size = f"{row['target']:>10,}" if isinstance(row["target"], int) else f"{row['target']:>10}"  # or "auto"
        print(f"{size} {row['name']:>{width}}: {row['mean']:.4f}{spread} {metric.replace('_', ' ')}")
    print(f"{study.files} in {args.output_dir}/")


def cmd_experiment(args) -> None:
    from hf_seq.experiments import EXPERIMENTS  # a table only: no torch until an experiment runs

    if args.list or args.name is None:
        width = max(map(len, EXPERIMENTS))
        print("\n".join(f"{name:<{width}}  {line}" for name, line in EXPERIMENTS.items()))
        if not args.list:
            raise InvalidValueError("name one of the experiments above (or --list)")
        return
    if args.name not in EXPERIMENTS:
        raise InvalidValueError(f"unknown experiment {args.name!r}; choose one of {', '.join(EXPERIMENTS)}")
    from hf_seq.experiments import get_experiment

    output_dir = args.output_dir or f"hf-seq-experiments/{args.name}"
    results = get_experiment(args.name).run(quick=args.quick, output_dir=output_dir, overrides=args.set or ())
    for row in results["claims"]:
        print(f"[{'agrees' if row['agrees'] else 'DISAGREES'}] {row['claim']}: {row['measured']}")
    print(f"{results['seconds']:.0f} s; results.md, results.json and {', '.join(results['plots'])} in {output_dir}/")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-seq", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    for add_parser in (
        add_demo_parser, add_train_parser, add_finetune_parser, add_recipes_parser, add_train_tokenizer_parser,
        add_card_parser, add_evaluate_parser, add_generate_parser, add_studio_parser, add_push_parser,
        add_lineage_parser, add_experiment_parser,
    ):  # fmt: skip
        add_parser(commands)
    for p in commands.choices.values():  # `hf-seq train --debug ...` as well as `hf-seq --debug train ...`
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def add_demo_parser(commands) -> None:
    p = commands.add_parser("demo", help="train a tokenizer and a small GPT on the standard library, offline")
    p.add_argument("--output-dir", default="hf-seq-demo")
    p.add_argument("--minutes", type=_positive_float, default=2.0, help="the training budget (default 2)")
    p.add_argument("--new-tokens", type=_at_least(1), default=40)
    p.add_argument("--resume", action="store_true", help="continue an interrupted demo from its last checkpoint")
    p.add_argument("overrides", nargs="*", help="recipe overrides, e.g. training.max_steps=100")
    p.set_defaults(func=cmd_demo)


def add_train_parser(commands) -> None:
    p = commands.add_parser("train", help="pretrain a model from a YAML recipe")
    p.add_argument("recipe", help="a YAML file, or the name of a shipped recipe (hf-seq recipes lists them)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. training.max_steps=100 model.hidden_size=64")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in the output_dir")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in the output_dir")
    p.set_defaults(func=cmd_train)


def add_finetune_parser(commands) -> None:
    p = commands.add_parser("finetune", help="fine-tune with Trainer: sequence/token classification, translation")
    p.add_argument("recipe", help="a YAML file, or the name of a shipped recipe (hf-seq recipes lists them)")
    p.add_argument("overrides", nargs="*", help="key=value overrides")
    p.add_argument("--resume", action="store_true", help="continue from the last Trainer checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in the output_dir")
    p.set_defaults(func=cmd_finetune)


def add_recipes_parser(commands) -> None:
    p = commands.add_parser("recipes", help="list the shipped recipes; `hf-seq recipes show NAME` prints one")
    p.add_argument("action", nargs="?", choices=["show"], help="print the named recipe, to copy and edit")
    p.add_argument("name", nargs="?", help="a recipe, or a launch config such as accelerate/fsdp")
    p.set_defaults(func=cmd_recipes)


def add_train_tokenizer_parser(commands) -> None:
    p = commands.add_parser("train-tokenizer", help="train a byte-level or BERT-style BPE tokenizer")
    p.add_argument("--dataset", default="stdlib", help="stdlib (default), a Hub dataset name, or use --files")
    p.add_argument("--files", nargs="*", help="local .txt/.json/.jsonl/.csv files")
    p.add_argument("--text-column", default="text")
    p.add_argument("--vocab-size", type=_at_least(1), default=8000)
    p.add_argument("--min-frequency", type=_at_least(1), default=2)
    p.add_argument("--style", choices=["byte_level", "bert"], default="byte_level")
    p.add_argument("--output-dir", required=True)
    p.set_defaults(func=cmd_train_tokenizer)


def add_card_parser(commands) -> None:
    p = commands.add_parser("card", help="write or refresh the model card (README.md) of a saved model")
    p.add_argument("folder")
    p.add_argument("--repo-id", help="the Hub name to show in the usage examples")
    p.set_defaults(func=cmd_card)


def add_evaluate_parser(commands) -> None:
    p = commands.add_parser("evaluate", help="evaluate a saved model (perplexity, BLEU) on its recipe's held-out data")
    p.add_argument("folder")
    p.add_argument("--recipe", help="a recipe to take the data from (default: the folder's recipe.json)")
    p.add_argument("overrides", nargs="*", help="recipe overrides, e.g. data.validation=valid.txt data.test=test.txt")
    p.add_argument("--json", action="store_true", help="print the metrics as JSON")
    p.set_defaults(func=cmd_evaluate)


def add_generate_parser(commands) -> None:
    p = commands.add_parser(
        "generate", help="continue prompts (language models), translate them (seq2seq), or write music (MIDI)"
    )
    p.add_argument("folder")
    p.add_argument("--prompt")
    p.add_argument("--file", help="a text file, one prompt per line")
    p.add_argument("--prompt-midi", help="music models: a MIDI or MusicXML file to continue (default: start a piece)")
    p.add_argument("--output", help="music models: the MIDI file to write (FILE.mid)")
    p.add_argument(
        "--min-notes", type=_at_least(0), default=16, help="music models: fewer new notes than this is an error"
    )
    p.add_argument(
        "--max-new-tokens",
        type=_at_least(1),
        help="default: 50 for a language model, 256 for a music model; for a translation model the folder's rule, "
        "a x source tokens + b",
    )
    p.add_argument("--num-beams", type=_at_least(1), help="default: the folder's generation config (translation: 5)")
    p.add_argument("--length-penalty", type=float, help="beam score = log-probability / length ** this")
    p.add_argument("--greedy", action="store_true", help="one beam, no sampling: the most probable token each step")
    p.add_argument("--do-sample", action="store_true", help="sample (music models always sample unless --greedy)")
    p.add_argument("--temperature", type=_number_in(0, float("inf"), "> 0"), default=1.0)
    p.add_argument("--top-k", type=_at_least(0), default=50, help="0: no top-k filtering")
    p.add_argument("--top-p", type=_number_in(0, 1, "in (0, 1]"), default=1.0)
    p.add_argument("--seed", type=int, help="seed the sampling, for output that can be reproduced")
    p.set_defaults(func=cmd_generate)


def add_studio_parser(commands) -> None:
    p = commands.add_parser("studio", help="the models' insides in a web page (Gradio: pip install 'hf-seq[studio]')")
    p.add_argument("folders", nargs="*", help="run folders (hf-seq train / lineage) or Hub names")
    p.add_argument(
        "--demo", action="store_true", help="train tiny models of every family (about a minute) and show them"
    )
    p.add_argument("--host", default="127.0.0.1", help="the address to serve on (default: this machine only)")
    p.add_argument("--port", type=_at_least(1), default=7860)
    p.add_argument("--root-path", help="the path the page is served under behind a proxy (a course server)")
    p.set_defaults(func=cmd_studio)


def add_push_parser(commands) -> None:
    p = commands.add_parser("push", help="check a saved model loads without hf-seq, then upload it to the Hub")
    p.add_argument("folder")
    p.add_argument("repo_id", help="e.g. your-name/gpt-stdlib-tiny")
    p.add_argument("--private", action="store_true")
    p.add_argument("--token", help="a Hub token (default: the one `hf auth login` saved)")
    p.add_argument("--dry-run", action="store_true", help="check and list the files, upload nothing")
    p.set_defaults(func=cmd_push)


def add_lineage_parser(commands) -> None:
    """`hf-seq lineage`, drawn from the registered studies (`hf_seq.experiments.study.STUDIES`): `--task` chooses one,
    `--members` lists each one's rows, and each study's own options are flags."""
    from hf_seq.experiments.study import all_studies

    studies = all_studies()
    default = next(iter(studies))
    each = lambda text: "; ".join(f"{name}: {text(study)}" for name, study in studies.items())
    p = commands.add_parser(
        "lineage", help=f"a study's members on one corpus and budget, sizes matched (--task {', '.join(studies)})"
    )
    p.add_argument("--task", choices=tuple(studies), default=default, help=f"the study (default {default}): "
                   + each(lambda study: study.about))  # fmt: skip
    p.add_argument("--corpus", nargs="+", help="local files or a Hub dataset name; the default: "
                   + each(lambda study: study.corpus_help))  # fmt: skip
    p.add_argument("--validation", help="held-out file(s) or Hub split (default: the corpus's own, else held out)")
    p.add_argument("--test", help="test file or Hub split, scored once at the end with the selected weights")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget-tokens", type=int, help="training tokens per member; the default: "
                        + each(lambda study: study.default_budget))  # fmt: skip
    budget.add_argument("--budget-seconds", type=float, help="training seconds per member, in place of tokens")
    budget.add_argument("--budget-flops", type=float, help="training FLOPs per member (6N + attention per token)")
    budget.add_argument(
        "--study-seconds",
        type=float,
        help="seconds for the whole study (its data, the n-gram, the "
        "size searches and the scored runs), shared by its members; it ends within 5%% of them",
    )
    p.add_argument(
        "--regret",
        type=int,
        nargs="?",
        const=1,
        default=0,
        metavar="SEEDS",
        help="also train each member from the start at half, the same and twice its chosen size for the chosen "
        "run's training, the three taking turns, and report the choice's regret and what the search cost its "
        "survivor (after the study: not in its time); with SEEDS > 1, every size at that many seeds and the regret "
        "of the means",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="with --regret: measure that many members side by side, each in a process of its own on --threads "
        "threads (default 1: one after another)",
    )
    p.add_argument("--tune", type=int, default=0, help="N trials per member (learning rate, dropout) on 1/4 budget")
    p.add_argument(
        "--sizes",
        type=parse_sizes,
        help="non-embedding parameter targets, e.g. 0.4M,1.6M,6.4M, or auto: each member's size chosen by successive "
        "halving inside its budget, the survivor trained on (the default with a seconds or FLOPs budget)",
    )
    p.add_argument("--seeds", type=int, default=1, help="seeds per member and size: mean and spread")
    p.add_argument("--quick", action="store_true", help="tiny corpus, models and budget (a test, not a result)")
    p.add_argument("--members", help="a comma-separated subset of the task's members (default all). "
                   + each(lambda study: ", ".join(f"{row.name} ({row.help})" for row in study.rows)))  # fmt: skip
    p.add_argument(
        "--set",
        action="extend",
        nargs="+",
        metavar="KEY=VALUE",
        help="change study settings (e.g. width=256 learning_rate=1e-3) or a member's knob (e.g. gru.layers=3)",
    )
    p.add_argument("--threads", type=int, help="torch threads (default: one per idle core)")
    p.add_argument("--output-dir", default="lineage")
    for flag, arguments in study_flags(studies).items():
        p.add_argument(flag, **arguments)
    p.set_defaults(func=cmd_lineage)


def study_flags(studies: dict) -> dict[str, dict]:
    """Each study's own options as flags: `--max-chars` for the field `max_chars`, of the field's type, with the help
    of every study that takes it ("translation: ...; time_series: ..."). A flag not given leaves no attribute
    (argparse.SUPPRESS), so the study's own default holds and `cmd_lineage` can tell which study a flag is for."""
    import typing

    from hf_seq.experiments.study import own_fields

    flags = {}
    for name, study in studies.items():
        types = typing.get_type_hints(study.options_class)
        for f in own_fields(study.options_class):
            default = "" if f.default is None else f" (default {f.default})"
            kind = next((t for t in typing.get_args(types[f.name]) if t is not type(None)), types[f.name])
            flag = flags.setdefault("--" + f.name.replace("_", "-"), {"type": kind, "default": argparse.SUPPRESS})
            flag["help"] = "; ".join(filter(None, (flag.get("help"), f"{name}: {f.metadata.get('help', '')}{default}")))
    return flags


def add_experiment_parser(commands) -> None:
    p = commands.add_parser("experiment", help="run one of the lectures' experiments: a table, a JSON file and plots")
    p.add_argument("name", nargs="?", help="the experiment (see --list)")
    p.add_argument("--list", action="store_true", help="name the experiments, one line each")
    p.add_argument("--quick", action="store_true", help="tiny models and budget (a test, not a result)")
    p.add_argument(
        "--output-dir", help="where results.md, results.json and the plots go (default hf-seq-experiments/NAME)"
    )
    p.add_argument(
        "--set", action="extend", nargs="+", metavar="KEY=VALUE",
        help="change one of the experiment's settings (e.g. steps=200 seeds=0,1); an unknown key's error lists them",
    )  # fmt: skip
    p.set_defaults(func=cmd_experiment)


def main(argv: list[str] | None = None) -> int:
    """Run one command. An error in what the user gave (`hf_seq.errors.UserError`) prints `hf-seq: error: ...`
    and exits with status 2, as argparse does; any other exception is a bug and keeps its traceback."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may come before or after flags such as --resume
    if extra and (not hasattr(args, "overrides") or any("=" not in item or item.startswith("-") for item in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    try:
        args.func(args)
    except UserError as error:
        if args.debug:
            raise
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
