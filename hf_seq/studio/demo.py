"""`hf-seq studio --demo`: tiny models of every family, trained in about a minute on 2 CPU cores, so a first look at
the studio needs no run folder. The language models read the Python standard library's sources (one byte-level BPE
tokenizer for all of them, and a 5-gram on the same tokens), BERT the same text with its own tokenizer, and the
encoder-decoders learn to write dates in ISO 8601 ("Thu, Mar 5, 1998" -> "1998-03-05"), a task whose alignment a
student can check by eye. The weights mean little after seconds of training; the views show how each model computes.
"""

import time

import torch

from hf_seq.studio.views import Loaded

WIDTH = 64
BLOCK = 64
CORPUS_CHARS = 300_000
# name -> (registry family, its config keys): the causal language models, cheapest first
LANGUAGE_MODELS = {
    "hmm": ("hmm", dict(num_states=48)),
    "window": ("window", dict(context_size=4, embedding_size=WIDTH, hidden_size=WIDTH)),
    "conv": ("conv", dict(hidden_size=WIDTH, kernel_size=2, dilation_cycle=4, num_blocks=1, skip_channels=WIDTH)),
    "gru": ("rnn", dict(cell_type="gru", hidden_size=WIDTH, embedding_size=WIDTH, num_hidden_layers=1)),
    "lstm": ("rnn", dict(cell_type="lstm", hidden_size=WIDTH, embedding_size=WIDTH, num_hidden_layers=2)),
    "gpt": ("gpt", dict(hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256)),
    "mamba": ("ssm", dict(ssm_type="mamba", hidden_size=WIDTH, num_hidden_layers=2, state_size=8)),
    "s4d": ("ssm", dict(ssm_type="s4d", hidden_size=WIDTH, num_hidden_layers=2, state_size=16)),
    # 4 heads of 32 channels (expand 2), drawn beside the GPT's 4 heads by the Mamba-2 attention view
    "mamba2": ("ssm", dict(ssm_type="mamba2", hidden_size=WIDTH, num_hidden_layers=2, head_dim=32, state_size=32,
                           chunk_size=32)),
}
SEQ2SEQ = {
    "bahdanau": ("bahdanau", dict(hidden_size=WIDTH, embedding_size=WIDTH, num_hidden_layers=1)),
    "transformer": ("transformer", dict(hidden_size=WIDTH, encoder_layers=2, decoder_layers=2, num_attention_heads=4,
                                        intermediate_size=2 * WIDTH, max_position_embeddings=64)),
}  # fmt: skip


def demo_models(seconds_per_model: float = 2.0, say=print) -> list[Loaded]:
    """Every family, trained for `seconds_per_model` each (the encoder-decoders 3x as long, at a higher rate: their
    attention starts uniform and needs the steps to align), and the 5-gram: the studio's `--demo` models."""
    from hf_seq.baselines.ngram import KneserNeyLM
    from hf_seq.data.corpora import date_conversion, stdlib_texts
    from hf_seq.data.tokenization import train_bpe_tokenizer

    torch.manual_seed(0)
    started = time.perf_counter()
    texts = stdlib_texts(max_chars=CORPUS_CHARS)
    tokenizer = train_bpe_tokenizer(texts, vocab_size=1024, style="byte_level", show_progress=False)
    ids = torch.tensor([i for text in texts for i in tokenizer(text)["input_ids"]])
    loaded = [Loaded("5-gram", None, tokenizer, ngram=KneserNeyLM(len(tokenizer), order=5).fit(ids.numpy()))]
    for name, (fam, keys) in LANGUAGE_MODELS.items():
        model = _model(fam, "AutoModelForCausalLM", tokenizer, keys)
        _train(model, lambda: _blocks(ids, 16), seconds_per_model)
        loaded.append(Loaded(name, model.eval(), tokenizer))
        say(f"studio: trained {name} ({time.perf_counter() - started:.0f} s)")
    loaded.append(_bert(texts, seconds_per_model))
    pairs = date_conversion(4000)
    pair_tokenizer = train_bpe_tokenizer([p["source"] + "\n" + p["target"] for p in pairs], vocab_size=300,
                                         style="byte_level", show_progress=False)  # fmt: skip
    for name, (fam, keys) in SEQ2SEQ.items():
        model = _model(fam, "AutoModelForSeq2SeqLM", pair_tokenizer, keys)
        _train(model, lambda: _pairs(pairs, pair_tokenizer, 32), 3 * seconds_per_model, learning_rate=1e-2)
        loaded.append(Loaded(name, model.eval(), pair_tokenizer, extra={"example": pairs[0]["source"]}))
        say(f"studio: trained {name} ({time.perf_counter() - started:.0f} s)")
    return loaded


def _model(fam_name: str, auto: str, tokenizer, keys: dict):
    from hf_seq.registry import family

    fam = family(fam_name)
    specials = {f"{k}_token_id": getattr(tokenizer, f"{k}_token_id") for k in ("pad", "bos", "eos")}
    if auto == "AutoModelForSeq2SeqLM":
        specials["decoder_start_token_id"] = tokenizer.bos_token_id
    config = fam.config_class(vocab_size=len(tokenizer), **specials, **keys)
    return fam.model_class(auto)(config)


def _train(model, batches, seconds: float, learning_rate: float = 3e-3) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        loss = model(**batches()).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def _blocks(ids: torch.Tensor, batch_size: int) -> dict:
    starts = torch.randint(0, len(ids) - BLOCK, (batch_size,))
    block = torch.stack([ids[s : s + BLOCK] for s in starts.tolist()])
    return {"input_ids": block, "labels": block}


def _pairs(pairs: list[dict], tokenizer, batch_size: int) -> dict:
    rows = [pairs[i] for i in torch.randint(0, len(pairs), (batch_size,)).tolist()]
    source = tokenizer([r["source"] for r in rows], padding=True, return_tensors="pt")
    target = tokenizer([r["target"] + tokenizer.eos_token for r in rows], padding=True, return_tensors="pt")
    labels = target["input_ids"].masked_fill(target["attention_mask"] == 0, -100)
    return {"input_ids": source["input_ids"], "attention_mask": source["attention_mask"], "labels": labels}


def _bert(texts: list[str], seconds: float) -> Loaded:
    from hf_seq.data.corpora import masked_lm_collator
    from hf_seq.data.tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(texts, vocab_size=1024, style="bert", show_progress=False)
    model = _model("bert", "AutoModelForMaskedLM", tokenizer, dict(hidden_size=WIDTH, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=2 * WIDTH, max_position_embeddings=128))  # fmt: skip
    ids = torch.tensor([i for text in texts[:200] for i in tokenizer(text, add_special_tokens=False)["input_ids"]])
    collate = masked_lm_collator(tokenizer, seed=0)
    _train(model, lambda: collate([{"input_ids": b.tolist()} for b in _blocks(ids, 16)["input_ids"]]), seconds)
    return Loaded("bert", model.eval(), tokenizer)
