"""Attention maps: every head of every layer of three small trained Transformers on one chosen input, as one figure
per model (Vaswani et al. 2017; Clark et al. 2019, "What does BERT look at?").

- GPT (causal self-attention), trained as a language model on the standard library's sources;
- BERT (bidirectional self-attention), trained as a masked language model on the same text (BERT-style tokenizer);
- the encoder-decoder Transformer, trained on `hf_seq.data.date_conversion` (dates as people write them to ISO
  8601, one token per character): encoder self-attention, decoder self-attention and cross-attention, which shows
  where the decoder reads while it writes each character.

Each map is a row-stochastic matrix (queries down, keys across, white = 1). The models run with the eager attention
kernel so that `output_attentions=True` returns the weights.
"""

import time
from dataclasses import dataclass

import torch

from hf_seq import (
    BERTConfig,
    BERTForMaskedLM,
    GPTConfig,
    GPTForCausalLM,
    TransformerConfig,
    TransformerForConditionalGeneration,
)
from hf_seq.data.corpora import date_conversion, masked_lm_collator

from .common import (
    BOS,
    EOS,
    PAD,
    chosen_settings,
    claim,
    figure,
    finish,
    markdown_table,
    output_folder,
    prose,
    save_figure,
    settings_record,
    stdlib_tokenizer_and_blocks,
    torch_threads,
    total_parameters,
    train,
)

NAME = "attention_maps"
TITLE = "Attention maps: every head of every layer of a small GPT, BERT and Transformer"
SENTENCE = "for name in sorted(names):\n    print(name)\n"
DATE = "Thu, Mar 5, 1998"


@dataclass(frozen=True)
class Settings:
    """The three models' shape (`layers` x `heads`, width `hidden_size`); GPT and BERT trained for `lm_steps` on
    blocks of `context` tokens of the first `train_chars` characters (BPE of `vocab_size` tokens), the Transformer for
    `date_steps` on dates; the maps drawn for `sentence` (GPT, BERT) and `date` (the Transformer)."""

    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    vocab_size: int = 1024
    context: int = 64
    lm_steps: int = 400
    date_steps: int = 800
    batch_size: int = 32
    learning_rate: float = 2e-3
    train_chars: int = 1_000_000
    sentence: str = SENTENCE
    date: str = DATE
    seed: int = 0
    threads: int | None = 1  # two threads stall at every barrier when the cores are shared; one is steadier


QUICK = Settings(
    hidden_size=32,
    vocab_size=300,
    context=32,
    sentence="for x in y:\n",
    lm_steps=10,
    date_steps=20,
    batch_size=8,
    train_chars=50_000,
)


def small(config_class, s: Settings, **kwargs):
    dropout = {
        k: 0.0
        for k in ("embedding_dropout", "attention_dropout", "hidden_dropout")
        if k in config_class.__annotations__
    }
    return config_class(num_attention_heads=s.heads, hidden_size=s.hidden_size, **dropout, **kwargs)


def train_gpt(s: Settings):
    tokenizer, blocks, _ = stdlib_tokenizer_and_blocks(s.vocab_size, s.train_chars, 1, s.context)
    torch.manual_seed(s.seed)
    config = small(
        GPTConfig,
        s,
        vocab_size=len(tokenizer),
        num_hidden_layers=s.layers,
        max_position_embeddings=s.context,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPTForCausalLM(config)
    order = torch.randint(len(blocks), (s.lm_steps, s.batch_size), generator=torch.Generator().manual_seed(0))
    run_ = train(
        model,
        lambda step: {"input_ids": blocks[order[step]], "labels": blocks[order[step]]},
        s.lm_steps,
        s.learning_rate,
    )
    return model, tokenizer, run_


def train_bert(s: Settings):
    tokenizer, blocks, _ = stdlib_tokenizer_and_blocks(s.vocab_size, s.train_chars, 1, s.context - 2, "bert")
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
    blocks = torch.cat([torch.full((len(blocks), 1), cls), blocks, torch.full((len(blocks), 1), sep)], 1)
    torch.manual_seed(s.seed)
    config = small(
        BERTConfig,
        s,
        vocab_size=len(tokenizer),
        num_hidden_layers=s.layers,
        max_position_embeddings=s.context,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = BERTForMaskedLM(config)
    collator = masked_lm_collator(tokenizer, seed=s.seed)
    order = torch.randint(len(blocks), (s.lm_steps, s.batch_size), generator=torch.Generator().manual_seed(0))

    def batch(step):
        masked = collator([{"input_ids": blocks[i].tolist()} for i in order[step]])
        return {"input_ids": masked["input_ids"], "labels": masked["labels"]}

    return model, tokenizer, train(model, batch, s.lm_steps, s.learning_rate)


def date_vocabulary() -> dict[str, int]:
    characters = sorted({c for r in date_conversion(2000, seed=0) for c in r["source"] + r["target"]})
    return {c: i + 4 for i, c in enumerate(characters)}  # ids 0-3: PAD, BOS, EOS and the unused SEP


def encode_dates(rows, vocab) -> tuple[torch.Tensor, torch.Tensor]:
    """Characters -> ids; sources right-padded, EOS after each target (all targets have 10 characters)."""
    longest = max(len(r["source"]) for r in rows)
    source = torch.tensor(
        [[vocab[c] for c in r["source"]] + [EOS] + [PAD] * (longest - len(r["source"])) for r in rows]
    )
    target = torch.tensor([[vocab[c] for c in r["target"]] + [EOS] for r in rows])
    return source, target


def train_dates(s: Settings):
    vocab = date_vocabulary()
    torch.manual_seed(s.seed)
    config = small(
        TransformerConfig,
        s,
        vocab_size=len(vocab) + 4,
        encoder_layers=s.layers,
        decoder_layers=s.layers,
        intermediate_size=4 * s.hidden_size,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
    )
    model = TransformerForConditionalGeneration(config)

    def batch(step):
        source, target = encode_dates(date_conversion(s.batch_size, seed=s.seed * 100_003 + step), vocab)
        return {"input_ids": source, "attention_mask": (source != PAD).long(), "labels": target}

    run_ = train(model, batch, s.date_steps, s.learning_rate)
    source, target = encode_dates(date_conversion(200, seed=10**9), vocab)
    generated = model.generate(
        input_ids=source,
        attention_mask=(source != PAD).long(),
        max_new_tokens=11,
        do_sample=False,
        decoder_start_token_id=BOS,
    )
    exact = (generated[:, 1:12] == target).all(1).float().mean().item() if generated.shape[1] >= 12 else 0.0
    return model, vocab, run_, exact


def token_labels(tokenizer, ids) -> list[str]:
    return [
        tokenizer.convert_tokens_to_string([t]).replace("\n", "\\n") or t for t in tokenizer.convert_ids_to_tokens(ids)
    ]


def draw(maps: list[tuple[str, torch.Tensor, list[str], list[str]]], title: str, path) -> str:
    """One row of panels per (row title, weights (heads, queries, keys), query labels, key labels); token labels on
    the first panel of each row only (drawing thousands of tick labels is what makes such figures slow)."""
    heads = maps[0][1].shape[0]
    cell = 0.16 * max(max(len(m[2]), len(m[3])) for m in maps)
    fig = figure(heads * (cell + 0.4) + 1.2, len(maps) * (cell + 0.9) + 0.6)
    for row, (name, weights, q_labels, k_labels) in enumerate(maps):
        for h in range(heads):
            axes = fig.add_subplot(len(maps), heads, row * heads + h + 1)
            axes.imshow(weights[h].numpy(), cmap="gray", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
            axes.set_title(f"{name}, head {h}", fontsize=7)
            if h == 0:
                axes.set_xticks(range(len(k_labels)), k_labels, rotation=90, fontsize=5)
                axes.set_yticks(range(len(q_labels)), q_labels, fontsize=5)
            else:
                axes.set_xticks([])
                axes.set_yticks([])
    fig.suptitle(title)
    return save_figure(fig, path)


@torch.no_grad()
def run(quick: bool = False, output_dir=None, overrides=(), **changes) -> dict:
    """The experiment at the default settings (or QUICK's), with `overrides` (`KEY=VALUE`) and `changes` applied."""
    base = QUICK if quick else Settings()
    s = chosen_settings(NAME, base, overrides, changes)
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    with torch_threads(s.threads), torch.enable_grad():
        gpt, gpt_tokenizer, gpt_run = train_gpt(s)
        bert, bert_tokenizer, bert_run = train_bert(s)
        transformer, vocab, date_run, date_exact = train_dates(s)
    for model in (gpt, bert, transformer):
        model.set_attn_implementation("eager")  # the fused kernels do not return their weights

    gpt_maps, gpt_labels = self_attention(gpt, gpt_tokenizer, s.sentence)
    bert_maps, bert_labels = self_attention(bert, bert_tokenizer, s.sentence)
    cross, written, rows = date_attention(transformer, vocab, s.date)
    plots = [
        draw(layer_rows(gpt_maps, gpt_labels), "GPT (causal)", folder / "gpt.png"),
        draw(layer_rows(bert_maps, bert_labels), "BERT (bidirectional)", folder / "bert.png"),
        draw(rows, f"Transformer: {s.date!r} -> {written!r}", folder / "transformer.png"),
    ]
    models = {
        "gpt": {"parameters": total_parameters(gpt), "final_train_loss": gpt_run["final_loss"]},
        "bert": {"parameters": total_parameters(bert), "final_train_loss": bert_run["final_loss"]},
        "transformer": {
            "parameters": total_parameters(transformer),
            "final_train_loss": date_run["final_loss"],
            "exact_match": date_exact,
            "written": written,
        },
    }
    measured = measure(gpt_maps, bert_maps, cross, written, s.date)
    results = {"options": settings_record(s, base, quick), **models, **measured, "claims": claims(measured)}
    return finish(NAME, TITLE, folder, results, report(s, models), started, plots)


def self_attention(model, tokenizer, text: str) -> tuple[list[torch.Tensor], list[str]]:
    """Every layer's weights on `text`, each (heads, T, T), and its tokens as labels."""
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    maps = [m[0] for m in model(input_ids=ids, output_attentions=True).attentions]
    return maps, token_labels(tokenizer, ids[0])


def layer_rows(maps: list[torch.Tensor], labels: list[str]) -> list[tuple]:
    return [(f"layer {i}", m, labels, labels) for i, m in enumerate(maps)]


def date_attention(transformer, vocab: dict[str, int], date: str) -> tuple[tuple, str, list[tuple]]:
    """Let the Transformer write `date` as ISO 8601, then read it back with the weights returned: (cross-attention
    per layer, each (1, heads, target, source); what it wrote; the figure's rows for encoder self-attention, decoder
    self-attention and cross-attention)."""
    source, _ = encode_dates([{"source": date, "target": ""}], vocab)
    generated = transformer.generate(input_ids=source, max_new_tokens=11, do_sample=False, decoder_start_token_id=BOS)
    decoder_input = generated[:, :-1] if generated[0, -1] == EOS else generated
    out = transformer(input_ids=source, decoder_input_ids=decoder_input, output_attentions=True)
    characters = {i: c for c, i in vocab.items()} | {EOS: "</s>", BOS: "<s>", PAD: "<pad>"}
    src_labels = [characters[int(i)] for i in source[0]]
    tgt_labels = [characters[int(i)] for i in decoder_input[0]]
    written = "".join(characters[int(i)] for i in generated[0, 1:] if int(i) not in (EOS, PAD))
    rows = [(f"encoder self {i}", m[0], src_labels, src_labels) for i, m in enumerate(out.encoder_attentions)]
    rows += [(f"decoder self {i}", m[0], tgt_labels, tgt_labels) for i, m in enumerate(out.decoder_attentions)]
    rows += [(f"cross {i}", m[0], tgt_labels, src_labels) for i, m in enumerate(out.cross_attentions)]
    return out.cross_attentions, written, rows


def measure(gpt_maps, bert_maps, cross_attentions, written: str, date: str) -> dict:
    """What the maps show, as numbers: the weight on later tokens (GPT's largest, BERT's mean over layers), the most
    previous-token-focused GPT head, and the cross-attention on the source's year while the year is written."""

    def above_diagonal(m):  # the weight on later tokens (keys j > query i), averaged over queries and heads
        return torch.triu(m, diagonal=1).sum(-1).mean().item()

    gpt_future = max(above_diagonal(m) for m in gpt_maps)
    bert_future = sum(above_diagonal(m) for m in bert_maps) / len(bert_maps)
    previous_token = max(torch.diagonal(m, offset=-1, dim1=-2, dim2=-1).mean(-1).max().item() for m in gpt_maps)
    # cross-attention while writing the year (the first 4 characters after <s>): weight on the source's year digits
    year = date.split()[-1] if date.split()[-1].isdigit() else None
    year_weight = float("nan")
    if year is not None and written.startswith(year):
        start = date.rindex(year)
        cross = torch.stack([m[0] for m in cross_attentions]).mean((0, 1))  # (target, source): layers, heads
        year_weight = cross[1:5, start : start + 4].sum(-1).mean().item()
    return {
        "gpt_weight_on_later_tokens": gpt_future,
        "bert_weight_on_later_tokens": bert_future,
        "previous_token_head": previous_token,
        "cross_attention_on_year": year_weight,
    }


def report(s: Settings, models: dict) -> str:
    """The Markdown body: the three models and how each was trained, and the inputs."""
    gpt, bert, transformer = models["gpt"], models["bert"], models["transformer"]
    return "\n\n".join(
        [
            prose(__doc__),
            markdown_table(
                ["model", "parameters", "layers x heads", "training", "final training loss"],
                [
                    [
                        "GPT",
                        f"{gpt['parameters']:,}",
                        f"{s.layers} x {s.heads}",
                        f"{s.lm_steps} steps, blocks of {s.context} tokens",
                        f"{gpt['final_train_loss']:.2f}",
                    ],
                    [
                        "BERT",
                        f"{bert['parameters']:,}",
                        f"{s.layers} x {s.heads}",
                        f"{s.lm_steps} steps, 15% masking",
                        f"{bert['final_train_loss']:.2f}",
                    ],
                    [
                        "Transformer",
                        f"{transformer['parameters']:,}",
                        f"{s.layers} + {s.layers} x {s.heads}",
                        f"{s.date_steps} steps of date conversion; exact match on 200 new dates "
                        f"{transformer['exact_match']:.2f}",
                        f"{transformer['final_train_loss']:.3f}",
                    ],
                ],
            ),
            f"Input of GPT and BERT: `{s.sentence!r}`; of the Transformer: `{s.date!r}`, which it wrote as "
            f"`{transformer['written']!r}`.",
        ]
    )


def claims(measured: dict) -> list[dict]:
    gpt_future, bert_future = measured["gpt_weight_on_later_tokens"], measured["bert_weight_on_later_tokens"]
    previous_token, year_weight = measured["previous_token_head"], measured["cross_attention_on_year"]
    return [
        claim(
            "Causal self-attention never looks ahead: GPT's maps are lower-triangular",
            f"largest weight on later tokens in any GPT head: {gpt_future:.1e}",
            gpt_future < 1e-6,
        ),
        claim(
            "BERT's self-attention reads both directions",
            f"mean weight BERT puts on later tokens: {bert_future:.2f} (0 would be causal)",
            bert_future > 0.1,
        ),
        claim(
            "Heads specialise; a common one attends to the previous token",
            f"the GPT head most focused on the previous token puts {previous_token:.2f} of its weight there on average",
            previous_token > 0.5,
        ),
        claim(
            "Cross-attention aligns: writing the year, the decoder reads the source's year",
            f"cross-attention weight (mean of layers and heads) on the source's 4 year digits while writing the year: "
            f"{year_weight:.2f}" + ("" if year_weight == year_weight else " (the model did not write the year right)"),
            year_weight > 0.5,
        ),
    ]
