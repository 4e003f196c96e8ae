"""The `hf-seq` command."""

import argparse
import sys
from pathlib import Path

DEMO_PROMPTS = ("def ", "import os\n", "class ", "    return ")


def demo(args: argparse.Namespace) -> None:
    """Train a BPE tokenizer and a small GPT on the standard library sources, save both, reload the folder through
    the Auto classes and print completions from the text-generation pipeline. Offline, a few minutes on 2 cores."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    from hf_seq import GPTConfig, GPTForCausalLM
    from hf_seq.data import packed_lm_dataset, stdlib_texts
    from hf_seq.tokenization import train_bpe_tokenizer
    from hf_seq.training import perplexity, train_causal_lm

    torch.manual_seed(args.seed)
    torch.set_flush_denormal(True)  # CPU training slows down badly on denormal floats (see bench/)
    output = Path(args.output_dir)
    print(f"[1/5] reading the Python standard library sources ({args.corpus_chars:,} characters)")
    texts = stdlib_texts(max_chars=args.corpus_chars)
    held_out = max(1, len(texts) // 20)
    train_texts, eval_texts = texts[held_out:], texts[:held_out]

    print(f"[2/5] training a byte-level BPE tokenizer (vocab {args.vocab_size})")
    tokenizer = train_bpe_tokenizer(train_texts, vocab_size=args.vocab_size, model_max_length=args.block_size)
    train_set = packed_lm_dataset(train_texts, tokenizer, args.block_size)
    eval_set = packed_lm_dataset(eval_texts, tokenizer, args.block_size)
    eval_set = eval_set.select(range(min(64, len(eval_set))))

    config = GPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden_size,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        max_position_embeddings=args.block_size,
        embedding_dropout=0.0,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPTForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"[3/5] training a GPT ({params / 1e6:.2f}M parameters, {len(train_set):,} blocks of {args.block_size} "
        f"tokens) for {args.steps} steps"
    )
    result = train_causal_lm(
        model,
        train_set,
        max_steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        max_seconds=args.max_minutes * 60,
        seed=args.seed,
    )
    model = model.cpu()
    ppl = perplexity(model, eval_set)
    print(
        f"      {result.steps} steps in {result.seconds:.0f}s ({result.tokens_per_second:,.0f} tokens/s); "
        f"held-out perplexity {ppl:.1f}"
    )

    print(f"[4/5] saving model and tokenizer to {output}/")
    model.save_pretrained(output)
    tokenizer.save_pretrained(output)

    print("[5/5] reloading through AutoModelForCausalLM and generating with pipeline('text-generation')")
    reloaded = AutoModelForCausalLM.from_pretrained(output)
    generator = pipeline("text-generation", model=reloaded, tokenizer=AutoTokenizer.from_pretrained(output))
    for prompt in DEMO_PROMPTS:
        out = generator(prompt, max_new_tokens=args.new_tokens, do_sample=True, top_k=40, temperature=0.8)
        print("-" * 60)
        print(out[0]["generated_text"])
    print("-" * 60)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-seq", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("demo", help="train a tokenizer and a small GPT on the standard library, offline")
    p.add_argument("--output-dir", default="hf-seq-demo")
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--max-minutes", type=float, default=4.0, help="stop training early after this long")
    p.add_argument("--corpus-chars", type=int, default=3_000_000)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--hidden-size", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=2e-3)
    p.add_argument("--new-tokens", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
