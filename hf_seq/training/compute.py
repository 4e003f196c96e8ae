"""Training compute from a model's shapes, for planning runs and for MFU.

The estimate is the PaLM paper's (Chowdhery et al. 2022, appendix B): training a decoder costs

    6 N + 12 L d s   FLOPs per token

where N counts the parameters a token's forward pass multiplies with (every parameter except the token and position
tables, which are looked up, plus the output projection, which is the token table again when the two are tied), L is
the number of layers, d the model width and s the sequence length; 6 = 2 (a multiply-add) x 3 (forward, and a
backward that costs twice the forward), and 12 L d s is the attention scores and their weighted sum over s positions.
Kaplan et al. (2020) count the same 6 N without the output projection; with GPT-2 small's 50,257-token vocabulary
that is 6 x 38.6M fewer FLOPs per token, 27% of the total, so the convention matters for MFU at this size.

6 N is read from any model's parameters; the attention term, which no parameter holds, is asked of the family's row
in the registry (`Family.attention_flops`), so this file names no family.
"""

import torch

from hf_seq.models.configuration_gpt import GPTConfig
from hf_seq.registry import family


def flop_parameters(config: GPTConfig) -> int:
    """N above: the parameters of a `GPTForCausalLM` built from `config` that a token's forward pass multiplies
    with. Built on the meta device, so it costs no memory and holds for every variant the config allows."""
    if not isinstance(config, GPTConfig):
        raise TypeError(f"flop_parameters: a GPTConfig is needed (the GPT family), got {type(config).__name__}")
    if config.num_local_experts:
        raise ValueError(
            "flop_parameters: a mixture of experts multiplies with num_experts_per_tok of num_local_experts experts "
            "per token; this count covers dense models (num_local_experts=0)"
        )
    from hf_seq.models.modeling_gpt import GPTForCausalLM

    with torch.device("meta"):
        model = GPTForCausalLM(config)
    tables = ("model.embed_tokens.", "model.embed_positions.")
    # remove_duplicate=False lists a tied lm_head.weight under its own name as well: the projection is counted once
    return sum(p.numel() for name, p in model.named_parameters(remove_duplicate=False) if not name.startswith(tables))


def training_flops_per_token(config: GPTConfig, seq_len: int) -> int:
    """6 N + 12 L d s: forward and backward FLOPs per trained token at sequence length `seq_len` (module docstring)."""
    return 6 * flop_parameters(config) + family(config.model_type).attention_flops(config, seq_len)


def model_flops_per_token(model: torch.nn.Module, seq_len: int) -> int:
    """6 N (+ the family's attention term, 12 L d s for GPT and BERT) for any hf-seq model over one sequence, from its
    shapes (the model may sit on the meta device): N counts every parameter except the looked-up tables
    (`nn.Embedding`s), with a tied output projection counted once under its own name. Recurrences, convolutions and
    scans multiply each parameter once per token too; what this leaves out is the state-space scan's elementwise
    work, a few percent at the lineage's sizes. An encoder-decoder's count is `seq2seq_flops_per_token`'s."""
    tables = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    outputs = model.get_output_embeddings()
    projection = outputs.weight if outputs is not None else None
    n = sum(p.numel() for p in model.parameters() if id(p) not in tables)
    if projection is not None and id(projection) in tables:  # tied: the table is also the output layer
        n += projection.numel()
    config = model.config
    attention_flops = family(config.model_type).attention_flops
    if attention_flops is None:
        return 6 * n
    if config.is_encoder_decoder:
        raise ValueError(
            f"model_flops_per_token: a {type(model).__name__} reads a source and a target, whose attention costs "
            "depend on both lengths; use seq2seq_flops_per_token(model, source_len, target_len)"
        )
    return 6 * n + attention_flops(config, seq_len)


def seq2seq_flops_per_token(model: torch.nn.Module, source_len: float, target_len: float) -> float:
    """Training FLOPs per token of an encoder-decoder, a token being a source or a target token of a pair of
    `source_len` and `target_len` tokens: the encoder's N_enc parameters multiply with each source token, the
    decoder's N_dec (the output projection counted as `model_flops_per_token` counts it) with each target token, so a
    pair costs 6 N_enc S + 6 N_dec T, plus, for the Transformer's attention, 12 L_enc d S per source token (encoder
    self-attention) and 12 L_dec d (T + S) per target token (decoder self- and cross-attention); the mean over the
    pair's S + T tokens. An RNN decoder's attention scores (about 4 n' S multiply-adds per target token for the
    additive score) are left out, as the state-space scan is: a few percent at the lineage's sizes."""
    tables = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    encoder = {id(p): p for p in model.get_encoder().parameters() if id(p) not in tables}
    n_encoder = sum(p.numel() for p in encoder.values())
    n_decoder = sum(p.numel() for p in model.parameters() if id(p) not in tables and id(p) not in encoder)
    projection = model.get_output_embeddings().weight
    if id(projection) in tables:  # tied: the table is also the output layer
        n_decoder += projection.numel()
    per_token = (6 * n_encoder * source_len + 6 * n_decoder * target_len) / (source_len + target_len)
    attention_flops = family(model.config.model_type).attention_flops
    if attention_flops is not None:
        per_token += attention_flops(model.config, source_len, target_len)
    return per_token


__all__ = ["flop_parameters", "model_flops_per_token", "seq2seq_flops_per_token", "training_flops_per_token"]
