"""Input checks, index helpers and the bases and heads shared by the model families."""

import copy
import inspect
import math
import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch
from safetensors import SafetensorError
from torch import nn
from transformers import CompileConfig, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    SequenceClassifierOutputWithPast,
)
from transformers.utils import can_return_tuple

from .losses import causal_lm_linear_cross_entropy, uses_fused_loss

# transformers 5.24 renamed generate()'s cache argument and the outputs' field from `past_key_values` to `cache`
CACHE_NAME = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


class IndexOutOfRangeError(ValueError, IndexError):
    """A token id outside the vocabulary or a position past the model's limit: a ValueError naming the value and the
    range, that callers catching the IndexError of the embedding lookup it replaces also catch."""


class TokenDtypeError(ValueError, RuntimeError):
    """Token ids that are not integers: also the RuntimeError the embedding lookup raises for them."""


class MismatchedSizesError(ValueError, RuntimeError):
    """Checkpoint tensors of another shape than the model's: also the RuntimeError transformers raises there, so code
    that catches it (and retries with `ignore_mismatched_sizes=True`) works unchanged."""


class IncompleteSafetensorsError(OSError, SafetensorError):
    """A truncated, empty or foreign `.safetensors` file: also the `SafetensorError` the safetensors reader raises."""


def cache_field(cache) -> dict:
    """A model output's cache (or recurrent state) field, under the installed transformers' name (see CACHE_NAME)."""
    return {CACHE_NAME: cache}


def cache_of(outputs):
    """The cache (or recurrent state) a model output holds, under either name."""
    return getattr(outputs, CACHE_NAME)


def cache_argument(past_key_values, kwargs: dict):
    """The cache (or recurrent state) a call continues from: `past_key_values`, or `cache`, its name in transformers
    >= 5.24 (popped from `kwargs`, where it would pass unread)."""
    cache = kwargs.pop("cache", None)
    return past_key_values if cache is None else cache


def check_attention_mask(attention_mask: torch.Tensor | None, batch_size: int, total_length: int) -> None:
    """The mask is (batch, past + new tokens) with 1 on real tokens and 0 on padding, as tokenizers return it.
    A 4D mask is taken as already prepared (transformers' convention, e.g. generate with a static cache)."""
    if attention_mask is None or attention_mask.dim() == 4:
        return
    if attention_mask.dim() != 2 or tuple(attention_mask.shape) != (batch_size, total_length):
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)}, expected (batch_size, past + input length) = "
            f"({batch_size}, {total_length}): 1 for tokens to attend to, 0 for padding."
        )


def check_input_ids(
    input_ids: torch.Tensor | None,
    inputs_embeds: torch.Tensor | None,
    vocab_size: int,
    name: str = "input_ids",
) -> None:
    """Token ids are a non-empty (batch_size, sequence_length) integer tensor of ids in [0, vocab_size); embeddings
    a non-empty (batch_size, sequence_length, features) tensor. Checked before the embedding lookup, which would
    otherwise answer "index out of range in self" on CPU and a device-side assert on a GPU."""
    tokens = input_ids if input_ids is not None else inputs_embeds
    if tokens is None:
        return
    label = name if input_ids is not None else name.replace("input_ids", "inputs_embeds")
    expected = "(batch_size, sequence_length" + (", features)" if input_ids is None else ")")
    if tokens.dim() != (2 if input_ids is not None else 3):
        hint = (
            f"; for one sequence add a batch dimension: {label}[None]"
            if tokens.dim() == (1 if input_ids is not None else 2)
            else ""
        )
        raise ValueError(f"{label} must have shape {expected}, got {tuple(tokens.shape)}{hint}.")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        what = "a batch of 0 sequences" if tokens.shape[0] == 0 else "empty sequences (0 tokens)"
        raise ValueError(f"{label} has shape {tuple(tokens.shape)}: {what}; pass at least one token per sequence.")
    if input_ids is None:
        return
    if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TokenDtypeError(f"{name} must hold integer token ids (torch.long), got dtype {input_ids.dtype}.")
    if torch.compiler.is_compiling():  # a data-dependent branch would break a full-graph compile
        return
    outside = (input_ids < 0) | (input_ids >= vocab_size)
    if outside.any():
        row, column = (int(i) for i in outside.nonzero()[0])
        raise IndexOutOfRangeError(
            f"{name} holds token id {int(input_ids[row, column])} (row {row}, position {column}), outside the "
            f"vocabulary: ids must be in [0, {vocab_size - 1}] (vocab_size={vocab_size}). Was the text tokenized "
            "with this model's tokenizer?"
        )


def positions_from_attention_mask(
    attention_mask: torch.Tensor | None, past_length: int, seq_len: int, device: torch.device
) -> torch.LongTensor:
    """Positions count real tokens only, so a left-padded row gets the positions it would have alone. A 4D mask (one
    prepared by transformers, e.g. for a static cache) holds no padding per row: positions then follow the cache."""
    if attention_mask is None or attention_mask.dim() == 4:
        # offset after arange: a static cache counts in a tensor, and a length read from a tensor would be
        # data-dependent inside a compiled graph
        return torch.arange(seq_len, device=device)[None] + past_length
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.clamp(min=0)[:, -seq_len:]


def last_token_indices(
    input_ids: torch.LongTensor | None,
    attention_mask: torch.Tensor | None,
    pad_token_id: int | None,
    batch_size: int,
) -> torch.LongTensor | int:
    """Index of each row's last real token, for left or right padding: from the attention mask if given, else from
    the pad token. Without either, a batch of several rows cannot be read correctly, so it is refused."""
    if attention_mask is not None:
        positions = torch.arange(attention_mask.shape[-1], device=attention_mask.device)
        return (positions * attention_mask.bool()).argmax(-1)
    if input_ids is not None and pad_token_id is not None:
        positions = torch.arange(input_ids.shape[-1], device=input_ids.device)
        return (positions * (input_ids != pad_token_id)).argmax(-1)
    if batch_size != 1:
        raise ValueError(
            "Cannot find the last token of each sequence in a batch without an attention_mask or a pad token: pass "
            "attention_mask (the tokenizer returns it), or set config.pad_token_id (e.g. to the tokenizer's pad id)."
        )
    return -1


def sequence_classification_loss(loss_function, logits, labels, config, num_items_in_batch=None) -> torch.Tensor:
    """transformers' sequence-classification loss (cross-entropy, MSE for regression, BCE for multi-label, chosen
    from `config.problem_type`), exact under Trainer's gradient accumulation: Trainer passes `num_items_in_batch`
    (the labels of the whole accumulated batch) and then leaves the loss unscaled, so the loss must be a sum over
    this micro-batch divided by it. Cross-entropy takes it directly; the MSE and BCE means are rescaled."""
    loss = loss_function(
        logits=logits, labels=labels, pooled_logits=logits, config=config, num_items_in_batch=num_items_in_batch
    )
    if num_items_in_batch is not None and config.problem_type != "single_label_classification":
        loss = loss * labels.numel() / num_items_in_batch
    return loss


class CheckedGenerationMixin(GenerationMixin):
    """transformers' `GenerationMixin`, with the arguments it does not check itself checked first: `num_beams=0`
    would end in a ZeroDivisionError, `num_return_sequences=0` would return one sequence, `top_p=1.5` would be
    taken as no top-p filtering."""

    def generate(self, *args, **kwargs):
        config = kwargs.get("generation_config") or getattr(self, "generation_config", None)
        for name in ("num_beams", "num_return_sequences"):
            value = kwargs.get(name, getattr(config, name, None))
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"generate: {name} must be an integer >= 1, got {value!r}.")
        top_p = kwargs.get("top_p", getattr(config, "top_p", None))
        if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
            raise ValueError(f"generate: top_p must be a number in (0, 1] (1 keeps every token), got {top_p!r}.")
        compile_config = kwargs.get("compile_config")
        if compile_config is not None and not isinstance(compile_config, CompileConfig):
            raise ValueError(
                f"generate: compile_config must be a transformers.CompileConfig, got {type(compile_config).__name__} "
                f"{compile_config!r}; e.g. CompileConfig(fullgraph=True, dynamic=False), with "
                'cache_implementation="static".'
            )
        if compile_config is not None and self.device.type == "cpu" and not compile_config._compile_all_devices:
            # transformers compiles the decode step on accelerators only, and on a CPU skips a compile_config with a
            # warning unless a private flag is set: passing one is asking for the compiled step, so it is honoured
            kwargs["compile_config"] = copy.copy(compile_config)
            kwargs["compile_config"]._compile_all_devices = True
        return super().generate(*args, **kwargs)

    def prepare_inputs_for_generation(self, *args, cache=None, inputs_embeds=None, **kwargs):
        """transformers >= 5.24 passes the cache (or recurrent state) as `cache`, and generate() refuses an argument
        that this signature does not name (`inputs_embeds` too: it is read at the first step); the families' forward
        takes the cache as `past_key_values`."""
        if cache is not None:
            kwargs[CACHE_NAME] = cache
        inputs = super().prepare_inputs_for_generation(*args, inputs_embeds=inputs_embeds, **kwargs)
        if "cache" in inputs:
            inputs["past_key_values"] = inputs.pop("cache")
        return inputs


class CheckedPreTrainedModel(PreTrainedModel):
    """The base of every hf-seq family's `PreTrainedModel`: `from_pretrained` reads nothing that can run code and
    never returns a model that silently is not the saved one.

    - Weights are read from safetensors only (`use_safetensors=True` unless the caller says otherwise): a pickled
      `pytorch_model.bin` is refused. A truncated or empty `.safetensors` file is an error naming the file.
    - A fresh task head on a pretrained backbone (a classifier from a language model's folder) is normal and only
      logged, as transformers does. Backbone tensors missing from the checkpoint (config.json naming another
      family, or a changed architecture) or of another shape are an error naming them.
    - Weights that load as NaN or infinity are an error naming the tensors; values larger than any trained weight
      reaches (`IMPLAUSIBLE_WEIGHT`: bytes flipped in the file) a warning naming them.

    `_backbone_optional_keys` (regexes): backbone parts that a checkpoint may lack (BERT's pooler, which masked-LM
    pretraining does not train)."""

    _backbone_optional_keys: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # transformers' generate() reads the signature of a remote-code model's forward at every decoding step (to
        # see whether it still takes `cache_position`); unwrapping the decorators costs about 0.17 ms each time, so
        # a 32-token beam search spent 2% of its time there. The signature is fixed when the class is made.
        # its own forward, or one a mixin gives it (the heads below, prediction.py's); never torch's
        owner = next(c for c in cls.__mro__ if "forward" in c.__dict__)
        forward = owner.__dict__["forward"]
        if not owner.__module__.startswith("torch") and "__signature__" not in forward.__dict__:
            forward.__signature__ = inspect.signature(forward)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        kwargs.setdefault("use_safetensors", True)
        wants_info = kwargs.pop("output_loading_info", False)
        mismatch_allowed = kwargs.get("ignore_mismatched_sizes", False)
        kwargs["ignore_mismatched_sizes"] = True  # collected below, and refused with the keys named
        source = str(pretrained_model_name_or_path)
        try:
            model, info = super().from_pretrained(
                pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
            )
        except Exception as error:
            pickles = _pickled_weights(source) if isinstance(error, OSError) else []
            if pickles:
                raise OSError(
                    f"{source} holds pickled weights ({', '.join(pickles)}) and no model.safetensors. hf-seq reads "
                    "safetensors only, because unpickling a file can run code. Where you trust the file, convert it: "
                    "model.load_state_dict(torch.load(path, weights_only=True)); model.save_pretrained(folder)."
                ) from error
            if type(error).__name__ != "SafetensorError":
                raise
            files = sorted(str(p) for p in _unreadable_safetensors(source)) or [f"the .safetensors files of {source}"]
            raise IncompleteSafetensorsError(
                f"{', '.join(files)}: not a complete safetensors file ({error}); the file is truncated, empty or "
                "not safetensors. Save the model again, or download it again."
            ) from error
        check_loaded_weights(model, info, source, mismatch_allowed)
        return (model, info) if wants_info else model


def _pickled_weights(source: str) -> list[str]:
    import os

    if not os.path.isdir(source) or any(name.endswith(".safetensors") for name in os.listdir(source)):
        return []
    return sorted(name for name in os.listdir(source) if name.endswith((".bin", ".pt", ".pth", ".ckpt")))


def _unreadable_safetensors(source: str) -> list:
    """The .safetensors files of a local folder whose header does not cover the file (truncated or empty)."""
    import json
    import os
    import struct

    if not os.path.isdir(source):
        return []
    bad = []
    for name in sorted(os.listdir(source)):
        path = os.path.join(source, name)
        if not name.endswith(".safetensors"):
            continue
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as handle:
                (header_size,) = struct.unpack("<Q", handle.read(8))
                header = json.loads(handle.read(header_size))
            end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
            complete = size >= 8 + header_size + end
        except (struct.error, ValueError, KeyError, TypeError, MemoryError, OverflowError):
            complete = False
        if not complete:
            bad.append(path)
    return bad


def check_loaded_weights(model, info: dict, source: str, mismatch_allowed: bool = False) -> None:
    """Refuse a model whose backbone did not load from `source`, or whose loaded weights are not finite (see
    `CheckedPreTrainedModel`). `info` is transformers' loading info (`output_loading_info=True`)."""
    import re

    prefix = model.base_model_prefix
    is_backbone = (lambda key: True) if getattr(model, prefix, None) is None else (lambda k: k.startswith(prefix + "."))
    optional = [re.compile(p) for p in getattr(model, "_backbone_optional_keys", ())]
    missing = sorted(k for k in info["missing_keys"] if is_backbone(k) and not any(p.search(k) for p in optional))
    if missing:
        held = sorted(info["unexpected_keys"])
        raise ValueError(
            f"{source}: the weights of the {type(model).__name__} backbone did not load: {len(missing)} tensors are "
            f"missing from the checkpoint: {_some(missing)}"
            + (f"; it holds tensors this model does not have: {_some(held)}" if held else "")
            + f". Does config.json (model_type {model.config.model_type!r}) describe the model that saved these "
            "weights, with an unchanged architecture? (A fresh task head on a pretrained backbone is fine; a fresh "
            "backbone is not. To start from partial weights, build the model with from_config and call "
            "load_state_dict(..., strict=False) yourself.)"
        )
    mismatched = sorted(info["mismatched_keys"])
    if mismatched and not mismatch_allowed:
        shapes = [
            f"{key} {tuple(saved)} in the checkpoint, {tuple(expected)} in the model"
            for key, saved, expected in mismatched
        ]
        raise MismatchedSizesError(
            f"{source}: {len(mismatched)} tensors of the checkpoint do not have the shape config.json gives them: "
            f"{_some(shapes)}. Does config.json match the saved weights? (ignore_mismatched_sizes=True re-initialises "
            "them instead, e.g. for a classifier with another number of labels.)"
        )
    fresh = set(info["missing_keys"]) | {key for key, *_ in mismatched}
    not_finite, implausible, seen = [], [], set()
    for name, tensor in model.state_dict().items():
        if name in fresh or not tensor.is_floating_point() or tensor.device.type == "meta" or not tensor.numel():
            continue
        if (tensor.data_ptr(), tensor.shape) in seen:  # a tied weight (lm_head.weight): checked under its first name
            continue
        seen.add((tensor.data_ptr(), tensor.shape))
        largest = weight_magnitude(tensor)
        if not math.isfinite(largest):
            not_finite.append(name)
        elif largest > IMPLAUSIBLE_WEIGHT:
            implausible.append(f"{name} ({largest:.3g})")
    if not_finite:
        raise ValueError(
            f"{source}: {len(not_finite)} weight tensors hold NaN or infinite values: {_some(not_finite)}. The "
            "checkpoint was saved from a diverged training run (lower the learning rate, clip gradients, use bf16 "
            "rather than fp16) or is corrupted."
        )
    if implausible:
        warnings.warn(
            f"{source}: {len(implausible)} weight tensors hold values beyond {IMPLAUSIBLE_WEIGHT:.0e}, which no trained "
            f"weight reaches: {_some(implausible)}. The file was probably damaged after it was saved (flipped bytes "
            "in model.safetensors); the model's outputs will be NaN or wrong. Copy or download the folder again.",
            stacklevel=3,
        )


# Larger than any trained weight: a flip of a high bit of a float32 weight's exponent lands beyond it (the highest
# makes 0.02 about 7e36), and such values overflow the activations into NaN logits. hf-seq commands refuse them;
# from_pretrained warns.
IMPLAUSIBLE_WEIGHT = 1e10


def weight_magnitude(tensor: torch.Tensor) -> float:
    """The largest |value| of a non-empty floating-point tensor: NaN if it holds a NaN, inf if it holds an infinity.
    One pass without a copy (aminmax): checking a 124M-parameter GPT takes about 0.06 s on one CPU thread, where
    `torch.isfinite(tensor).all()` took 1 s, longer than the rest of `from_pretrained` (which maps the file)."""
    low, high = torch.aminmax(tensor.detach())
    return max(-float(low), float(high)) if not (low.isnan() or high.isnan()) else math.nan


def _some(names: list, limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


class StatefulCausalLMHead:
    """The causal-LM head of the families that carry their own state (RNN, fixed window, WaveNet, SSM): `self.model`
    returns the last hidden states (and the state under the cache field), `self.lm_head` maps them to the vocabulary.
    Put it before the family's PreTrainedModel among the bases; a family with more between the states and the
    output layer (dropout, a projection) overrides `head_features`, one with more than `lm_head` after them (direct
    connections) `head_logits` and `output_layer`."""

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def head_features(self, outputs, keep) -> torch.Tensor:
        """What `lm_head` reads at the positions `keep` selects, from the backbone's outputs."""
        return outputs.last_hidden_state[:, keep, :]

    def head_logits(self, outputs, keep) -> torch.Tensor:
        """The logits at the positions `keep` selects."""
        return self.lm_head(self.head_features(outputs, keep))

    def output_layer(self, outputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(features, W, b) with logits = features W^T + b at every position, for the fused loss."""
        return self.head_features(outputs, slice(None)), self.lm_head.weight, self.lm_head.bias

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """`labels` are the input ids (shifted inside the loss; -100 is ignored). `logits_to_keep=k` computes logits
        for the last k positions only (0: all), or for the positions in a 1D index tensor. `past_key_values`: the
        state a previous call returned. In training with labels and `config.fused_loss`, the loss is computed
        without the logits (models/losses.py) and `logits` is None."""
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = loss = None
        if uses_fused_loss(self, labels, logits_to_keep):  # training: the same loss, without the logits
            loss = causal_lm_linear_cross_entropy(*self.output_layer(outputs), labels, **kwargs)
        else:
            keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
            logits = self.head_logits(outputs, keep)
            if labels is not None:
                # sums over `num_items_in_batch` when Trainer passes it, so gradient accumulation equals the full batch
                loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, **cache_field(cache_of(outputs)), hidden_states=outputs.hidden_states
        )


@dataclass
class StatefulInputs:
    """What a stateful backbone's forward starts from, checked (`StatefulPreTrainedModel.stateful_inputs`).

    `embeds` (B, T, D), the embedded inputs; `state`: the state a previous call returned (None: the sequence starts here); `mask`
    (B, T): this call's part of the attention mask, 1 on real tokens and 0 on padding, in the embeddings' dtype (None:
    no padding); `use_cache` and `output_hidden_states` with the config's defaults applied."""

    embeds: torch.Tensor
    state: object | None
    mask: torch.Tensor | None
    use_cache: bool
    output_hidden_states: bool
    seen_tokens: int  # after this call: the state's tokens and this call's
    state_class: type

    def state_after(self, *fields):
        """The family's state after this call, from its fields (in the state class's order)."""
        return self.state_class(*fields, seen_tokens=self.seen_tokens)


class StatefulPreTrainedModel(CheckedPreTrainedModel):
    """The base of the families that carry their own state between calls (RNN, fixed window, WaveNet, SSM) instead of
    a key/value cache: the state is an explicit object of `state_class` (models/state.py), returned under the cache
    field and taken back. A family sets `config_class`, `state_class` and `_no_split_modules`."""

    state_class: ClassVar[type]
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _skip_keys_device_placement = ["past_key_values"]
    _is_stateful = True  # generate refuses assisted decoding: a state cannot be rewound to drop rejected tokens

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model creates its own state; generate must not build a key/value cache

    def stateful_inputs(
        self, input_ids, inputs_embeds, past_key_values, attention_mask, use_cache, output_hidden_states, kwargs
    ) -> StatefulInputs:
        """The checks at the top of a stateful backbone's forward, then what it computes from: exactly one of
        input_ids / inputs_embeds, ids inside the vocabulary, a state of the family's own class (under
        `past_key_values`, or `cache` in `kwargs`), and a 2D attention mask that covers past and new tokens."""
        name, state_class = type(self).__name__, self.state_class
        state = cache_argument(past_key_values, kwargs)
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{name}: pass exactly one of input_ids or inputs_embeds.")
        if state is not None and not isinstance(state, state_class):
            raise TypeError(
                f"{name}: past_key_values must be the {state_class.__name__} a previous call returned, not "
                f"{type(state).__name__} ({state_class.holds})."
            )
        check_input_ids(input_ids, inputs_embeds, self.embed_tokens.num_embeddings)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_len = inputs_embeds.shape[:2]
        past_length = state.get_seq_length() if state is not None else 0
        check_attention_mask(attention_mask, batch_size, past_length + seq_len)
        if attention_mask is not None and attention_mask.dim() != 2:
            raise ValueError(f"{name}: attention_mask must be (batch_size, past + input length), 1 on real tokens.")
        config = self.config
        return StatefulInputs(
            embeds=inputs_embeds,
            state=state,
            mask=None if attention_mask is None else attention_mask[:, -seq_len:].to(inputs_embeds.dtype),
            use_cache=(config.use_cache and not self.training) if use_cache is None else use_cache,
            output_hidden_states=config.output_hidden_states if output_hidden_states is None else output_hidden_states,
            seen_tokens=past_length + seq_len,
            state_class=state_class,
        )


class LastTokenSequenceClassification:
    """A sequence classifier that reads the top hidden state at each row's last real token, the only one that has
    read the whole sequence in a causal model (GPT, SSM; transformers' `*ForSequenceClassification` of decoder-only
    models). Put it before the family's PreTrainedModel among the bases and set `backbone_class`, the family's base
    model; `score` has no bias, as in transformers."""

    backbone_class: ClassVar[type]

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = self.backbone_class(config)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout
        self.dropout = nn.Dropout(dropout)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
        **kwargs,
    ) -> SequenceClassifierOutputWithPast:
        """The last real token is found from `attention_mask`, else from `config.pad_token_id` (padding on either
        side). Other arguments (e.g. `position_ids`) go to the backbone."""
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, use_cache=False, **kwargs
        )
        hidden_states = outputs.last_hidden_state
        last = last_token_indices(input_ids, attention_mask, self.config.pad_token_id, hidden_states.shape[0])
        pooled = hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), last]
        logits = self.score(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = sequence_classification_loss(self.loss_function, logits, labels, self.config, num_items_in_batch)
        return SequenceClassifierOutputWithPast(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
