"""The machinery every conversion shares: weight `Rule`s, the `ConfigMap` that reads one declared field map in both
directions, the one refusal (`require`), the table of pairs (`CONVERSIONS`), and `from_transformers` /
`to_transformers`, which look a model up in that table and move its weights."""

import copy
import os
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import torch
import transformers
from transformers import PreTrainedConfig, PreTrainedModel

# Activation names of GPT-2, BERT and Marian -> ours. `gelu_pytorch_tanh` is the same tanh approximation as
# `gelu_new`; read back, each of ours is the reference name listed first for it.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu"}


def same(*names: str) -> dict[str, str]:
    """Fields that have the same name in our config and the reference's, for a `ConfigMap`'s `fields`."""
    return {name: name for name in names}


def require(config: PreTrainedConfig, name: str, allowed: Collection, direction: str, other: str, why: str = ""):
    """The refusal of every conversion: `config.<name>` must be one of `allowed`, else a ValueError says which
    parameter, its value, that `other` (the side being converted to) has no equivalent, and what is allowed."""
    value = getattr(config, name)
    if value not in allowed:
        shown = repr(next(iter(allowed))) if len(allowed) == 1 else sorted(allowed, key=str)
        raise ValueError(
            f"{direction}: {type(config).__name__}.{name}={value!r} has no {other} equivalent; allowed: {shown}{why}."
        )


@dataclass(frozen=True)
class ConfigMap:
    """How our config and a reference config correspond, declared once and read both ways.

    `fields` maps our field to the reference's, copied in both directions; a tuple names several reference fields
    that ours sets alike (Marian's encoder and decoder widths) and that must be equal on the way in. `fixed` holds
    our fields the reference cannot vary (set on the way in, required on the way out); `reference_fixed` the
    reference fields we cannot vary (required on the way in, set on the way out). `values` translates the values of
    one of our fields, `{reference value: our value}`; read back, each of ours is the first reference value listed for
    it. `derive_ours(reference_config)` and `derive_reference(our_config)` return what renaming cannot say (a default
    the reference leaves implicit, a value computed from two fields); they may refuse too, and they are applied
    last."""

    name: str  # the reference architecture as the messages name it, e.g. "GPT-2"
    ours: type[PreTrainedConfig]
    reference: type[PreTrainedConfig]
    fields: dict[str, str | tuple[str, ...]]
    fixed: dict[str, object] = field(default_factory=dict)
    reference_fixed: dict[str, object] = field(default_factory=dict)
    values: dict[str, dict] = field(default_factory=dict)
    derive_ours: Callable[[PreTrainedConfig], dict] = lambda config: {}
    derive_reference: Callable[[PreTrainedConfig], dict] = lambda config: {}

    def to_ours(self, config: PreTrainedConfig) -> PreTrainedConfig:
        refuse = dict(direction="from_transformers", other=self.ours.__name__)
        for name, allowed in self.reference_fixed.items():
            if hasattr(config, name):  # an option this version of the reference class lacks is its default
                require(config, name, [allowed], **refuse)
        kwargs = dict(self.fixed)
        for ours, (first, *alike) in self._fields():
            for name in alike:
                require(config, name, [getattr(config, first)], **refuse, why=f" (the value of {first})")
            value, table = getattr(config, first), self.values.get(ours)
            if table is not None:
                require(config, first, table, **refuse)
                value = table[value]
            kwargs[ours] = value
        return self.ours(**{**kwargs, **self.derive_ours(config)})

    def to_reference(self, config: PreTrainedConfig) -> PreTrainedConfig:
        refuse = dict(direction="to_transformers", other=self.name)
        for name, allowed in self.fixed.items():
            require(config, name, [allowed], **refuse)
        kwargs = dict(self.reference_fixed)
        for ours, names in self._fields():
            value, table = getattr(config, ours), self.values.get(ours)
            if table is not None:
                back = {our_value: theirs for theirs, our_value in reversed(table.items())}
                require(config, ours, back, **refuse)
                value = back[value]
            kwargs.update(dict.fromkeys(names, value))
        return self.reference(**{**kwargs, **self.derive_reference(config)})

    def _fields(self):
        return [(ours, (names,) if isinstance(names, str) else names) for ours, names in self.fields.items()]


@dataclass(frozen=True)
class Rule:
    """One of our tensors and the reference tensor(s) it is made of.

    kind: `"copy"`; `"transpose"` (GPT-2's Conv1D stores (in, out), nn.Linear (out, in)); `"concat"` (ours is the
    reference tensors stacked along dim 0 in the order given, e.g. separate q, k, v into one qkv projection; read
    back, ours is split into equal parts); `"row"` (ours is the single row of a (1, n) reference tensor, e.g.
    Marian's `final_logits_bias`); `"reference_only"` (`ours` is empty: reference tensors that have no counterpart
    in ours and do not change the outputs, because the config fixes them (Marian's sinusoid tables), they are zero
    (Marian's `final_logits_bias` against a model without output bias) or unused; nothing is copied, and a reference
    model built from ours keeps its own initialisation of them)."""

    ours: str
    reference: tuple[str, ...]
    kind: str = "copy"

    def to_ours(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        if self.kind == "concat":
            return torch.cat(tensors, dim=0)
        (tensor,) = tensors
        if self.kind == "row":
            return tensor[0]
        return tensor.t() if self.kind == "transpose" else tensor

    def to_reference(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        if self.kind == "concat":
            return list(tensor.chunk(len(self.reference), dim=0))
        if self.kind == "row":
            return [tensor[None]]
        return [tensor.t() if self.kind == "transpose" else tensor]


def module_rules(
    ours: str, reference: str, modules: dict[str, str | tuple[str, ...]], transposed: Collection[str] = ()
) -> list[Rule]:
    """The weight and bias of each module (a linear layer or a norm) under the prefixes `ours` and `reference`:
    `modules` maps our module's name to the reference's. A tuple names reference modules stacked into ours (q, k, v
    into `qkv_proj`: `"concat"`, biases too); a module in `transposed` stores its weight (in, out) in the reference."""
    rules = []
    for our_name, names in modules.items():
        names = (names,) if isinstance(names, str) else names
        for param in ("weight", "bias"):
            kind = "transpose" if our_name in transposed and param == "weight" else "copy"
            kind = "concat" if len(names) > 1 else kind
            rules.append(Rule(f"{ours}{our_name}.{param}", tuple(f"{reference}{name}.{param}" for name in names), kind))
    return rules


@dataclass(frozen=True)
class Conversion:
    """A reference class and ours: `config_to_ours(reference_config) -> our config`, `config_to_reference(our
    config) -> reference config` (both raise a ValueError naming an option the other side lacks), and
    `rules(our_config) -> [Rule]` covering every weight of both models except tied copies."""

    reference: type[PreTrainedModel]
    ours: type[PreTrainedModel]
    config_to_ours: Callable[[PreTrainedConfig], PreTrainedConfig]
    config_to_reference: Callable[[PreTrainedConfig], PreTrainedConfig]
    rules: Callable[[PreTrainedConfig], list[Rule]]


CONVERSIONS: dict[type[PreTrainedModel], Conversion] = {}


def register_conversion(conversion: Conversion) -> None:
    CONVERSIONS[conversion.reference] = conversion


def register(
    reference: type[PreTrainedModel],
    ours: type[PreTrainedModel],
    config: ConfigMap,
    rules: Callable[[PreTrainedConfig], list[Rule]],
) -> None:
    """Register the pair `reference` <-> `ours`, whose configs correspond by `config`."""
    register_conversion(Conversion(reference, ours, config.to_ours, config.to_reference, rules))


def from_transformers(model: PreTrainedModel | str | os.PathLike) -> PreTrainedModel:
    """The hf-seq model with the same weights as a `transformers` reference model (same device, dtype and attention
    implementation); its outputs equal the reference's up to float rounding.

    `model` may also be a checkpoint saved by transformers (a folder or a Hub name): it is loaded with the reference
    class its config names (`architectures`, e.g. `BertForMaskedLM`) and converted. The tokenizer files are not
    touched: `AutoTokenizer.from_pretrained` of the same folder gives the tokenizer that goes with the result."""
    if isinstance(model, (str, os.PathLike)):
        model = _load_reference(model)
    conversion = CONVERSIONS.get(type(model))
    if conversion is None:
        raise ValueError(
            f"from_transformers: no conversion from {type(model).__name__}; supported: "
            f"{sorted(c.reference.__name__ for c in CONVERSIONS.values())}."
        )
    return _convert(model, conversion.ours, conversion.config_to_ours(model.config), conversion, to_reference=False)


def _load_reference(path: str | os.PathLike) -> PreTrainedModel:
    architectures = transformers.AutoConfig.from_pretrained(path).architectures or []
    by_name = {c.reference.__name__: c.reference for c in CONVERSIONS.values()}
    known = [name for name in architectures if name in by_name]
    if not known:
        raise ValueError(
            f"from_transformers: the checkpoint {str(path)!r} names the architectures {architectures}; supported: "
            f"{sorted(by_name)}."
        )
    return by_name[known[0]].from_pretrained(path)


def to_transformers(model: PreTrainedModel) -> PreTrainedModel:
    """The `transformers` reference model with the same weights as an hf-seq model (see `from_transformers`)."""
    matches = [c for c in CONVERSIONS.values() if type(model) is c.ours]
    if not matches:
        raise ValueError(
            f"to_transformers: no conversion from {type(model).__name__}; supported: "
            f"{sorted(c.ours.__name__ for c in CONVERSIONS.values())}."
        )
    # Several references may share our class (Mamba and Mamba-2 both convert SSMForCausalLM): the first whose config
    # conversion accepts this config is used; when none does, the error gives each one's refusal.
    refusals = []
    for conversion in matches:
        try:
            config = conversion.config_to_reference(model.config)
        except ValueError as refusal:
            refusals.append(refusal)
            continue
        return _convert(model, conversion.reference, config, conversion, to_reference=True)
    if len(refusals) == 1:
        raise refusals[0]
    names = " or ".join(c.reference.__name__ for c in matches)
    raise ValueError(
        f"{type(model).__name__} converts to {names}; each refuses this model: "
        + " | ".join(str(refusal) for refusal in refusals)
    ) from refusals[0]


def _convert(source, target_class, target_config, conversion: Conversion, to_reference: bool):
    source_state = source.state_dict()
    # The rules are written against our config; when converting to ours it is the target's config.
    rules = conversion.rules(source.config if to_reference else target_config)
    implementation = source.config._attn_implementation
    if implementation not in ("eager", "sdpa"):
        implementation = None  # let the target choose its default
    target = target_class._from_config(target_config, attn_implementation=implementation, dtype=source.dtype)
    target.to(source.device)

    tied = set(getattr(target, "all_tied_weights_keys", {})) | set(getattr(source, "all_tied_weights_keys", {}))
    state, used, keep_initialised = {}, set(), set()
    for rule in rules:
        if rule.kind == "reference_only":
            (keep_initialised if to_reference else used).update(rule.reference)
        elif to_reference:
            for name, tensor in zip(rule.reference, rule.to_reference(source_state[rule.ours])):
                state[name] = tensor
            used.add(rule.ours)
        else:
            state[rule.ours] = rule.to_ours([source_state[name] for name in rule.reference])
            used.update(rule.reference)
    left_over = sorted(set(source_state) - used - tied)
    if left_over:
        raise ValueError(
            f"Converting {type(source).__name__} to {target_class.__name__}: no rule for the weights {left_over}; "
            "the conversion table in hf_seq.convert does not cover this model."
        )
    missing, unexpected = target.load_state_dict({k: v.contiguous() for k, v in state.items()}, strict=False)
    missing = sorted(set(missing) - tied - keep_initialised)
    if missing or unexpected:
        raise ValueError(
            f"Converting {type(source).__name__} to {target_class.__name__}: weights not set {missing}, "
            f"unknown weights {sorted(unexpected)}."
        )
    target.tie_weights()
    if getattr(source, "generation_config", None) is not None and target.can_generate():
        target.generation_config = copy.deepcopy(source.generation_config)
    target.train(source.training)
    return target
