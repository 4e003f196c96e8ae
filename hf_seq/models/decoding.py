"""Decoding at a few rows per step: every weight matrix is read once per generated token, so a step costs what the
matrix-vector products cost, and their speed depends on the weight's memory layout.

nn.Linear keeps W as (out, in) and computes x W^T. For one row x and a weight that is not in the CPU caches, MKL (the
BLAS of the machines measured in bench/results/) reads a wide W^T faster as a contiguous (in, out) copy than through
the transposed view, and a narrow one more slowly (one thread, microseconds, weights cycled so each read is cold):

    W (out x in)     8000 x 256   1024 x 256   768 x 256   256 x 256   256 x 1024
    x W^T, W as is   1,080        130-150      110-130     57          98-111
    contiguous W^T   480-550      76-95        74-83       44          140

`transposed_linear_weights(model)` lets every nn.Linear with out >= in features use a contiguous copy of W^T for the
duration of a `generate()` call (the copy takes a few milliseconds, is freed afterwards and can never be stale), for
inputs of at most `max_rows` rows; a longer input (the prompt) and training use W.

A compiled one-row step needs no copy: inductor turns y_j = sum_k x_k W_jk into one loop over the rows of W as it is,
fused with the ops around it, which reads every layer's W at least as fast as MKL reads the better layout (the down
projection too: the small bench GPT's compiled step 1.14x faster with it than with MKL there). So a decode that is
compiled at one row per step makes no copies (about 6 ms per generate() call for that GPT).
"""

from contextlib import contextmanager

import torch
from torch import nn
from transformers.cache_utils import EncoderDecoderCache

from .utils import CACHE_NAME


class _FewRowsLinear(nn.Linear):
    """An nn.Linear for the duration of a decode: y = x (W^T) + b with W^T contiguous, for inputs of few rows."""

    max_rows = 16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one row, in the weight's dtype and not under autocast (where nn.Linear casts: left to it)
        same_dtype = x.dtype == self.weight.dtype and not torch.is_autocast_enabled(x.device.type)
        if x.numel() == x.shape[-1] and same_dtype and torch.compiler.is_compiling():
            return one_row_linear(x, self.weight, self.bias)
        weight_t = self.weight_t
        if weight_t is None or x.numel() > self.max_rows * x.shape[-1]:
            return nn.functional.linear(x, self.weight, self.bias)
        rows = x.reshape(-1, x.shape[-1])
        y = rows @ weight_t if self.bias is None else torch.addmm(self.bias, rows, weight_t)
        return y.view(*x.shape[:-1], weight_t.shape[1])


def one_row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x W^T + b for one row x, written as the reduction y_j = sum_k x_k W_jk for a compiled graph: inductor makes it
    one loop over the rows of W (W read once, as it is stored). `as_strided` makes inductor store x before that loop;
    otherwise it would recompute x (a layer norm, a residual sum) inside it for every row of W, about 20% slower."""
    x = x.as_strided(x.shape, x.stride())
    y = (x.unsqueeze(-2) * weight).sum(-1)  # (..., 1, in) * (out, in) -> (..., out)
    return y if bias is None else y + bias


@contextmanager
def transposed_linear_weights(model: nn.Module):
    """Within the block, every nn.Linear of `model` on CPU computes a compiled one-row input as `one_row_linear`, and
    once the copies are made, those with at least as many outputs as inputs compute few-row inputs from a contiguous
    W^T (see the module docstring). The block yields the function that makes the copies (once; later calls do
    nothing). Weights shared between modules (tied embeddings) are transposed once."""
    linears = [m for m in model.modules() if type(m) is nn.Linear and m.weight.device.type == "cpu"]
    for linear in linears:
        linear.__class__ = _FewRowsLinear
        # A buffer, not a plain attribute: a compiled forward takes it as an input, so a new copy in the next
        # generate() call does not recompile.
        linear.register_buffer("weight_t", None, persistent=False)
    transposed = False

    def transpose():
        nonlocal transposed
        if transposed:
            return
        copies = {}
        with torch.no_grad():
            for linear in linears:
                key = linear.weight.data_ptr()
                if linear.out_features >= linear.in_features and key not in copies:
                    copies[key] = linear.weight.t().contiguous()
                linear.weight_t = copies.get(key)
        transposed = True

    try:
        yield transpose
    finally:
        for linear in linears:
            del linear.weight_t
            linear.__class__ = nn.Linear


# The keyword arguments generate() passes to a one-token step (decoder-only, encoder-decoder) beside the inputs named
# in the signature below; anything else takes the general path.
_STEP_KEYS = frozenset({"position_ids", "logits_to_keep", "use_cache"})
_SEQ2SEQ_STEP_KEYS = frozenset({"encoder_outputs", "decoder_attention_mask", "logits_to_keep", "use_cache"})


def one_token_step_inputs(
    model, input_ids, next_sequence_length, past_key_values, attention_mask, inputs_embeds, kwargs
):
    """The inputs of a one-token decode step with a static (compileable) cache, or None where the general path of
    `GenerationMixin.prepare_inputs_for_generation` is needed.

    With a static cache, transformers builds the 4D mask of the whole cache at every step through its general mask
    functions: about a third of a millisecond per token on CPU, a tenth of a compiled small GPT's step (measured in
    bench/bench_gpt.py --speed). For one new token the mask is one row: the 2D mask's entries (1: a real token), then
    False for the cache slots not written yet; the same boolean mask transformers builds (a test compares them).
    For an encoder-decoder that row is the decoder's self-attention mask (`decoder_attention_mask`); the encoder's
    2D `attention_mask` and `encoder_outputs` pass through as they are."""
    seq2seq = model.config.is_encoder_decoder
    cache = (
        past_key_values.self_attention_cache if isinstance(past_key_values, EncoderDecoderCache) else past_key_values
    )
    own_mask = kwargs.get("decoder_attention_mask") if seq2seq else attention_mask
    if (
        next_sequence_length != 1
        or not getattr(cache, "is_compileable", False)
        or any(getattr(cache, "is_sliding", [True]))
        or inputs_embeds is not None
        or (own_mask is not None and own_mask.shape != input_ids.shape)
        or not (_SEQ2SEQ_STEP_KEYS if seq2seq else _STEP_KEYS).issuperset(kwargs)
        or (seq2seq and kwargs.get("encoder_outputs") is None)
    ):
        return None
    batch, length = input_ids.shape
    cache_length, offset = cache.get_mask_sizes(1, 0)
    if offset != 0 or length > cache_length:
        return None
    mask = input_ids.new_zeros((batch, 1, 1, cache_length), dtype=torch.bool)
    mask[:, 0, 0, :length] = True if own_mask is None else own_mask.bool()
    # fresh copies: a column of the growing (batch, length) tensor keeps a stride that changes every step (even where
    # it counts as contiguous), and a compiled step would be recompiled for each
    last_ids = input_ids[:, -1:].clone(memory_format=torch.contiguous_format)
    if seq2seq:
        inputs = {
            "decoder_input_ids": last_ids,
            "past_key_values": past_key_values,
            "decoder_attention_mask": mask,
            "attention_mask": attention_mask,
        }
        return inputs | {k: v for k, v in kwargs.items() if k != "decoder_attention_mask"}
    inputs = {"input_ids": last_ids, "past_key_values": past_key_values, "attention_mask": mask}
    position_ids = kwargs.get("position_ids")
    if position_ids is not None:
        inputs["position_ids"] = position_ids[:, -1:].clone(memory_format=torch.contiguous_format)
    return inputs | {k: v for k, v in kwargs.items() if k != "position_ids"}


class TransposedWeightsDecoding:
    """Mixin (first among the bases, before the PreTrainedModel) for a language model: `generate()` runs within
        `transposed_linear_weights` on CPU. At batch 1 a step reads every weight once and the matrix-vector products are
        most of it (bench/results/gpt_speed_cpu_quiet.md, rnn_decode_cpu.md: same tokens, faster steps). The copies are
        made before the first one-token step, unless no step will read them: steps of more than `max_rows` rows (a batch
    times its beams) and steps compiled at one row (see the module docstring).
        `transpose_weights_for_decoding = False` (class or instance) turns it off."""

    transpose_weights_for_decoding = True

    def prepare_inputs_for_generation(
        self,
        input_ids,
        next_sequence_length=None,
        past_key_values=None,
        attention_mask=None,
        inputs_embeds=None,
        is_first_iteration=False,
        cache=None,
        **kwargs,
    ):
        past_key_values = cache if cache is not None else past_key_values  # its name from transformers 5.24 on
        plan = getattr(self, "_decode_plan", None)
        rows = input_ids.shape[0]  # one row per sequence and beam: a step of more rows reads W as it is
        if plan is not None and not is_first_iteration and rows <= _FewRowsLinear.max_rows:
            if not (plan["compiled"] and rows == 1):
                plan["transpose"]()
        inputs = one_token_step_inputs(
            self, input_ids, next_sequence_length, past_key_values, attention_mask, inputs_embeds, kwargs
        )
        if inputs is not None:
            return inputs
        return super().prepare_inputs_for_generation(
            input_ids,
            next_sequence_length=next_sequence_length,
            **{CACHE_NAME: past_key_values},
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            is_first_iteration=is_first_iteration,
            **kwargs,
        )

    def get_compiled_call(self, compile_config):
        plan = getattr(self, "_decode_plan", None)
        if plan is not None:  # generate() asks for the compiled step once, before its first step
            plan["compiled"] = True
        return super().get_compiled_call(compile_config)

    def generate(self, *args, **kwargs):
        if not self.transpose_weights_for_decoding or _fewest_rows(self, args, kwargs) > _FewRowsLinear.max_rows:
            return super().generate(*args, **kwargs)
        with transposed_linear_weights(self) as transpose:
            self._decode_plan = {"transpose": transpose, "compiled": False}
            try:
                return super().generate(*args, **kwargs)
            finally:
                del self._decode_plan


def _fewest_rows(model, args, kwargs) -> int:
    """The fewest rows a decoding step of this generate() call can have: its batch times its beams (0 if unknown)."""
    inputs = (
        args[0]
        if args
        else next((kwargs.get(k) for k in ("inputs", "input_ids", "inputs_embeds") if k in kwargs), None)
    )
    config = kwargs.get("generation_config") or model.generation_config
    beams = kwargs.get("num_beams", getattr(config, "num_beams", None) or 1)
    return inputs.shape[0] * beams if torch.is_tensor(inputs) and isinstance(beams, int) else 0


__all__ = ["TransposedWeightsDecoding", "transposed_linear_weights"]
