"""The `hf-seq` command: train, fine-tune, evaluate, generate, card and publish any hf-seq family.

hf-seq demo                                  the README's main job, offline, a few minutes on CPU
hf-seq train RECIPE.yaml [key=value ...]     pretraining with accelerate (add --resume to continue)
accelerate launch -m hf_seq.cli train RECIPE.yaml       the same recipe on several GPUs / processes
"""

import argparse
import json
import sys
from pathlib import Path

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
    "data": {"dataset": "stdlib", "block_size": 128, "max_chars": 3_000_000, "eval_examples": 64},
    "training": {
        "output_dir": "hf-seq-demo",
        "max_steps": 500,
        "batch_size": 16,
        "learning_rate": 2e-3,
        "warmup_steps": 30,
        "eval_every": 250,
        "save_every": 250,
    },
    "card": {"description": "A small GPT trained by `hf-seq demo` on the Python standard library sources."},
}
DEMO_PROMPTS = ("def ", "import os\n", "class ", "    return ")


def cmd_demo(args) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    from hf_seq.recipes import load_recipe
    from hf_seq.training import run

    overrides = [f"training.output_dir={args.output_dir}", *args.overrides]
    recipe = load_recipe(DEMO_RECIPE, overrides)
    out = Path(recipe.training.output_dir)
    print(f"Training a tokenizer and a GPT on the Python standard library; output in {out}/")
    summary = run(recipe, resume=args.resume)
    print(
        f"{summary['steps']} steps, {summary['tokens']:,} tokens in {summary['seconds']:.0f}s "
        f"({summary['tokens_per_second']:,.0f} tokens/s); held-out perplexity {summary['perplexity']:.1f}"
    )
    print(f"Model, tokenizer, model card (README.md) and loss curve (loss_curve.png) saved in {out}/")
    print("Reloading the folder through AutoModelForCausalLM; completions from pipeline('text-generation'):")
    model = AutoModelForCausalLM.from_pretrained(out)
    generator = pipeline("text-generation", model=model, tokenizer=AutoTokenizer.from_pretrained(out))
    for prompt in DEMO_PROMPTS:
        text = generator(prompt, max_new_tokens=args.new_tokens, do_sample=True, top_k=40, temperature=0.8)
        print("-" * 60)
        print(text[0]["generated_text"])
    print("-" * 60)


def cmd_train(args) -> None:
    from hf_seq.recipes import load_recipe
    from hf_seq.training import run

    recipe = load_recipe(args.recipe, args.overrides)  # every check happens here, before any data is read
    summary = run(recipe, resume=args.resume)
    print(json.dumps(summary, indent=2))


def cmd_train_tokenizer(args) -> None:
    from hf_seq.data import load_text_dataset
    from hf_seq.tokenization import train_bpe_tokenizer

    dataset = load_text_dataset(args.dataset if not args.files else args.files, text_column=args.text_column)
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
    from hf_seq.cards import write_card

    print(f"wrote {write_card(args.folder, repo_id=args.repo_id)}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-seq", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("demo", help="train a tokenizer and a small GPT on the standard library, offline")
    p.add_argument("--output-dir", default="hf-seq-demo")
    p.add_argument("--new-tokens", type=int, default=40)
    p.add_argument("--resume", action="store_true", help="continue an interrupted demo from its last checkpoint")
    p.add_argument("overrides", nargs="*", help="recipe overrides, e.g. training.max_steps=100")
    p.set_defaults(func=cmd_demo)

    p = commands.add_parser("train", help="pretrain a model from a YAML recipe")
    p.add_argument("recipe")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. training.max_steps=100 model.hidden_size=64")
    p.add_argument("--resume", action="store_true", help="continue from the last checkpoint in the output_dir")
    p.set_defaults(func=cmd_train)

    p = commands.add_parser("train-tokenizer", help="train a byte-level or BERT-style BPE tokenizer")
    p.add_argument("--dataset", default="stdlib", help="stdlib (default), a Hub dataset name, or use --files")
    p.add_argument("--files", nargs="*", help="local .txt/.json/.jsonl/.csv files")
    p.add_argument("--text-column", default="text")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--min-frequency", type=int, default=2)
    p.add_argument("--style", choices=["byte_level", "bert"], default="byte_level")
    p.add_argument("--output-dir", required=True)
    p.set_defaults(func=cmd_train_tokenizer)

    p = commands.add_parser("card", help="write or refresh the model card (README.md) of a saved model")
    p.add_argument("folder")
    p.add_argument("--repo-id", help="the Hub name to show in the usage examples")
    p.set_defaults(func=cmd_card)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may come before or after flags such as --resume
    if extra and (not hasattr(args, "overrides") or any("=" not in item or item.startswith("-") for item in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
