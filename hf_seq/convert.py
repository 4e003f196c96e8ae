"""Weights to and from the `transformers` reference classes, where the architectures agree, with identical outputs.

    ours = from_transformers(GPT2LMHeadModel.from_pretrained("gpt2"))    # -> GPTForCausalLM
    reference = to_transformers(ours)                                     # -> GPT2LMHeadModel
    bert = from_transformers("path/to/bert")   # a folder saved by transformers (BertForMaskedLM) -> BERTForMaskedLM

Each supported pair is one `Conversion` in `CONVERSIONS`, keyed by the reference class. A conversion is two config
functions (each rejects, naming it, any option the other side cannot represent) and a list of weight `Rule`s; the
rules are read in both directions, so a pair is described once. To add a pair (e.g. `MarianMTModel` <->
`TransformerForConditionalGeneration`), write its two config functions and its rules, and add an entry with
`register_conversion`. Reference models that store q, k and v separately (BERT, Marian) map onto our fused
projections with the `"concat"` rule (a fused K/V of cross-attention likewise).

`from_state_dict(state_dict, config)` ports a plain PyTorch RNN encoder-decoder (no transformers class exists for
it) into the Bahdanau family, whose flags represent the classic models exactly (see its docstring for the mapping).
"""

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
import transformers
from transformers import PreTrainedConfig, PreTrainedModel

from .models.configuration_bahdanau import BahdanauConfig
from .models.configuration_bert import BERTConfig
from .models.configuration_gpt import GPTConfig
from .models.configuration_ssm import SSMConfig
from .models.configuration_transformer import TransformerConfig
from .models.modeling_bahdanau import BahdanauForConditionalGeneration
from .models.modeling_bert import BERTForMaskedLM, BERTModel
from .models.modeling_gpt import GPTForCausalLM, GPTModel
from .models.modeling_ssm import SSMForCausalLM, SSMModel
from .models.modeling_transformer import TransformerForConditionalGeneration


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
    conversion = matches[0]
    config = conversion.config_to_reference(model.config)
    return _convert(model, conversion.reference, config, conversion, to_reference=True)


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


# GPT-2 (Radford et al. 2019) <-> GPT ------------------------------------------------------------------------------

# GPT-2's activation names -> ours. `gelu_pytorch_tanh` is the same tanh approximation as `gelu_new`.
_GPT2_ACTIVATIONS = {"gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}


def _gpt2_config_to_ours(config) -> GPTConfig:
    unsupported = {
        "add_cross_attention": (getattr(config, "add_cross_attention", False), False),
        "scale_attn_weights": (config.scale_attn_weights, True),
        "scale_attn_by_inverse_layer_idx": (config.scale_attn_by_inverse_layer_idx, False),
    }
    for option, (value, supported) in unsupported.items():
        if value != supported:
            raise ValueError(
                f"from_transformers: GPT2Config.{option}={value!r} has no GPTConfig equivalent (only {supported!r})."
            )
    if config.activation_function not in _GPT2_ACTIVATIONS:
        raise ValueError(
            f"from_transformers: GPT2Config.activation_function={config.activation_function!r} has no GPTConfig "
            f"equivalent; supported: {sorted(_GPT2_ACTIVATIONS)}."
        )
    return GPTConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.n_embd,
        num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head,
        intermediate_size=config.n_inner if config.n_inner is not None else 4 * config.n_embd,
        max_position_embeddings=config.n_positions,
        position_embedding_type="learned",
        norm_type="layernorm",
        norm_position="pre",
        layer_norm_eps=config.layer_norm_epsilon,
        hidden_act=_GPT2_ACTIVATIONS[config.activation_function],
        attention_bias=True,
        mlp_bias=True,
        embedding_dropout=config.embd_pdrop,
        attention_dropout=config.attn_pdrop,
        hidden_dropout=config.resid_pdrop,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _require(options: dict, config, other: str, model: str) -> None:
    """to_transformers: each of `options` must hold the one value the other library's `model` has."""
    for option, supported in options.items():
        if getattr(config, option) != supported:
            raise ValueError(
                f"to_transformers: {type(config).__name__}.{option}={getattr(config, option)!r} has no {other} "
                f"equivalent ({model} needs {option}={supported!r})."
            )


def _gpt_config_to_gpt2(config: GPTConfig):
    gpt2_options = {
        "position_embedding_type": "learned",
        "norm_type": "layernorm",
        "norm_position": "pre",
        "attention_bias": True,
        "mlp_bias": True,
        "is_causal": True,
        "num_local_experts": 0,  # GPT-2's feed-forward is dense
    }
    _require(gpt2_options, config, "GPT-2", "GPT2LMHeadModel")
    if config.hidden_act not in ("gelu_new", "gelu", "relu"):
        raise ValueError(
            f"to_transformers: GPTConfig.hidden_act={config.hidden_act!r} has no GPT-2 equivalent; "
            "supported: ['gelu', 'gelu_new', 'relu']."
        )
    return transformers.GPT2Config(
        vocab_size=config.vocab_size,
        n_embd=config.hidden_size,
        n_layer=config.num_hidden_layers,
        n_head=config.num_attention_heads,
        n_inner=config.intermediate_size,
        n_positions=config.max_position_embeddings,
        layer_norm_epsilon=config.layer_norm_eps,
        activation_function=config.hidden_act,
        embd_pdrop=config.embedding_dropout,
        attn_pdrop=config.attention_dropout,
        resid_pdrop=config.hidden_dropout,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _gpt2_rules(config: GPTConfig, head: bool) -> list[Rule]:
    ours, ref = ("model.", "transformer.") if head else ("", "")
    rules = [
        Rule(f"{ours}embed_tokens.weight", (f"{ref}wte.weight",)),
        Rule(f"{ours}embed_positions.weight", (f"{ref}wpe.weight",)),
        Rule(f"{ours}norm.weight", (f"{ref}ln_f.weight",)),
        Rule(f"{ours}norm.bias", (f"{ref}ln_f.bias",)),
    ]
    # Each block: (ours, GPT-2's, is it a Conv1D). GPT-2's c_attn outputs q, k, v in that order, heads contiguous in
    # each, which is the layout of our qkv_proj, so the fused weight maps as one tensor.
    layer_names = [
        ("input_layernorm", "ln_1", False),
        ("self_attn.qkv_proj", "attn.c_attn", True),
        ("self_attn.o_proj", "attn.c_proj", True),
        ("post_attention_layernorm", "ln_2", False),
        ("mlp.up_proj", "mlp.c_fc", True),
        ("mlp.down_proj", "mlp.c_proj", True),
    ]
    for i in range(config.num_hidden_layers):
        for our_name, gpt2_name, conv1d in layer_names:
            our_prefix, gpt2_prefix = f"{ours}layers.{i}.{our_name}", f"{ref}h.{i}.{gpt2_name}"
            rules.append(Rule(f"{our_prefix}.weight", (f"{gpt2_prefix}.weight",), "transpose" if conv1d else "copy"))
            rules.append(Rule(f"{our_prefix}.bias", (f"{gpt2_prefix}.bias",)))
    if head and not config.tie_word_embeddings:
        rules.append(Rule("lm_head.weight", ("lm_head.weight",)))
    return rules


register_conversion(
    Conversion(
        transformers.GPT2LMHeadModel,
        GPTForCausalLM,
        _gpt2_config_to_ours,
        _gpt_config_to_gpt2,
        partial(_gpt2_rules, head=True),
    )
)
register_conversion(
    Conversion(
        transformers.GPT2Model, GPTModel, _gpt2_config_to_ours, _gpt_config_to_gpt2, partial(_gpt2_rules, head=False)
    )
)

# BERT (Devlin et al. 2019) <-> BERT ------------------------------------------------------------------------------

# BERT's activation names -> ours.
_BERT_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new", "relu": "relu"}


def _bert_config_to_ours(config, head: bool) -> BERTConfig:
    for option in ("is_decoder", "add_cross_attention"):
        if getattr(config, option, False):
            raise ValueError(
                f"from_transformers: BertConfig.{option}=True has no BERTConfig equivalent (an encoder only)."
            )
    if config.hidden_act not in _BERT_ACTIVATIONS:
        raise ValueError(
            f"from_transformers: BertConfig.hidden_act={config.hidden_act!r} has no BERTConfig equivalent; "
            f"supported: {sorted(_BERT_ACTIVATIONS)}."
        )
    if head and not config.tie_word_embeddings:
        raise ValueError("from_transformers: BertForMaskedLM with tie_word_embeddings=False is not supported.")
    return BERTConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        norm_type="layernorm",
        norm_position="post",
        layer_norm_eps=config.layer_norm_eps,
        hidden_act=_BERT_ACTIVATIONS[config.hidden_act],
        hidden_dropout=config.hidden_dropout_prob,
        attention_dropout=config.attention_probs_dropout_prob,
        classifier_dropout=config.classifier_dropout,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        id2label=config.id2label,
    )


def _bert_config_to_reference(config: BERTConfig, head: bool):
    bert_options = {"norm_type": "layernorm", "norm_position": "post", "attention_bias": True, "mlp_bias": True}
    _require(bert_options, config, "BERT", "BertModel")
    if config.hidden_act not in ("gelu", "gelu_new", "relu"):
        raise ValueError(
            f"to_transformers: BERTConfig.hidden_act={config.hidden_act!r} has no BERT equivalent; "
            "supported: ['gelu', 'gelu_new', 'relu']."
        )
    if head and not config.tie_word_embeddings:
        raise ValueError("to_transformers: BERTForMaskedLM with tie_word_embeddings=False is not supported.")
    return transformers.BertConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        hidden_act=config.hidden_act,
        hidden_dropout_prob=config.hidden_dropout,
        attention_probs_dropout_prob=config.attention_dropout,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size,
        initializer_range=config.initializer_range,
        layer_norm_eps=config.layer_norm_eps,
        classifier_dropout=config.classifier_dropout,
        tie_word_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        id2label=config.id2label,
    )


def _bert_rules(config: BERTConfig, head: bool) -> list[Rule]:
    ours, ref = ("model.", "bert.") if head else ("", "")
    rules = [
        Rule(f"{ours}embeddings.{name}.weight", (f"{ref}embeddings.{name}.weight",))
        for name in ("word_embeddings", "position_embeddings", "token_type_embeddings")
    ]
    rules += [Rule(f"{ours}embeddings.norm.{p}", (f"{ref}embeddings.LayerNorm.{p}",)) for p in ("weight", "bias")]
    for i in range(config.num_hidden_layers):
        our_layer, bert_layer = f"{ours}layers.{i}", f"{ref}encoder.layer.{i}"
        attention = f"{bert_layer}.attention.self"
        for p in ("weight", "bias"):
            # BERT projects q, k, v separately; our fused projection is the three stacked in that order.
            qkv = tuple(f"{attention}.{name}.{p}" for name in ("query", "key", "value"))
            rules += [
                Rule(f"{our_layer}.self_attn.qkv_proj.{p}", qkv, "concat"),
                Rule(f"{our_layer}.self_attn.o_proj.{p}", (f"{bert_layer}.attention.output.dense.{p}",)),
                Rule(f"{our_layer}.input_layernorm.{p}", (f"{bert_layer}.attention.output.LayerNorm.{p}",)),
                Rule(f"{our_layer}.mlp.up_proj.{p}", (f"{bert_layer}.intermediate.dense.{p}",)),
                Rule(f"{our_layer}.mlp.down_proj.{p}", (f"{bert_layer}.output.dense.{p}",)),
                Rule(f"{our_layer}.post_attention_layernorm.{p}", (f"{bert_layer}.output.LayerNorm.{p}",)),
            ]
    for p in ("weight", "bias"):
        if head:  # BertForMaskedLM has no pooler; its decoder weight is the tied word embedding matrix
            rules += [
                Rule(f"lm_head.dense.{p}", (f"cls.predictions.transform.dense.{p}",)),
                Rule(f"lm_head.norm.{p}", (f"cls.predictions.transform.LayerNorm.{p}",)),
            ]
        else:
            rules.append(Rule(f"pooler.dense.{p}", (f"pooler.dense.{p}",)))
    if head:
        rules.append(Rule("lm_head.decoder.bias", ("cls.predictions.bias",)))
    return rules


for _reference, _ours, _head in (
    (transformers.BertForMaskedLM, BERTForMaskedLM, True),
    (transformers.BertModel, BERTModel, False),
):
    register_conversion(
        Conversion(
            _reference,
            _ours,
            partial(_bert_config_to_ours, head=_head),
            partial(_bert_config_to_reference, head=_head),
            partial(_bert_rules, head=_head),
        )
    )

# MarianMT (Junczys-Dowmunt et al. 2018) <-> the encoder-decoder Transformer ---------------------------------------
# Marian is the paper's architecture: post-LN, sinusoidal positions (sines then cosines, as ours), embeddings scaled
# by sqrt(d_model) when `scale_embedding`, q/k/v projected separately (ours fused), and a `final_logits_bias` buffer
# that maps to our optional output bias. Marian counts positions 0, 1, ... from the first slot whatever the padding,
# ours count real tokens: the two agree on unpadded and right-padded sources (the tokenizers' default).

_MARIAN_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new"}


def _marian_config_to_ours(config) -> TransformerConfig:
    equal = {
        "decoder_vocab_size": (config.decoder_vocab_size, config.vocab_size),
        "decoder_attention_heads": (config.decoder_attention_heads, config.encoder_attention_heads),
        "decoder_ffn_dim": (config.decoder_ffn_dim, config.encoder_ffn_dim),
        "encoder_layerdrop": (config.encoder_layerdrop, 0.0),
        "decoder_layerdrop": (config.decoder_layerdrop, 0.0),
    }
    for option, (value, supported) in equal.items():
        if value != supported:
            raise ValueError(
                f"from_transformers: MarianConfig.{option}={value!r} has no TransformerConfig equivalent "
                f"(it must be {supported!r}: one vocabulary, and encoder and decoder of the same width)."
            )
    if not config.share_encoder_decoder_embeddings and config.tie_word_embeddings:
        raise ValueError(
            "from_transformers: MarianConfig with share_encoder_decoder_embeddings=False and tie_word_embeddings=True "
            "(output projection tied to the decoder embeddings only) has no TransformerConfig equivalent."
        )
    if config.activation_function not in _MARIAN_ACTIVATIONS:
        raise ValueError(
            f"from_transformers: MarianConfig.activation_function={config.activation_function!r} has no "
            f"TransformerConfig equivalent; supported: {sorted(_MARIAN_ACTIVATIONS)}."
        )
    return TransformerConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        num_attention_heads=config.encoder_attention_heads,
        intermediate_size=config.encoder_ffn_dim,
        max_position_embeddings=config.max_position_embeddings,
        position_embedding_type="sinusoidal",
        norm_type="layernorm",
        norm_position="post",
        layer_norm_eps=1e-5,  # Marian's nn.LayerNorm default
        hidden_act=_MARIAN_ACTIVATIONS[config.activation_function],
        scale_embedding=config.scale_embedding,
        output_bias=True,  # final_logits_bias: zero in a fresh model, trained in the published checkpoints
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        initializer_range=config.init_std,
        tie_word_embeddings=config.tie_word_embeddings,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
    )


def _transformer_config_to_marian(config: TransformerConfig):
    marian_options = {
        "position_embedding_type": "sinusoidal",
        "norm_type": "layernorm",
        "norm_position": "post",
        "layer_norm_eps": 1e-5,
        "attention_bias": True,
        "mlp_bias": True,
    }
    _require(marian_options, config, "Marian", "MarianMTModel")
    if config.hidden_act not in ("relu", "gelu", "gelu_new"):
        raise ValueError(
            f"to_transformers: TransformerConfig.hidden_act={config.hidden_act!r} has no Marian equivalent; "
            "supported: ['gelu', 'gelu_new', 'relu']."
        )
    start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.bos_token_id
    # label_smoothing is a training option of our loss, not of the architecture: the logits agree either way.
    return transformers.MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.vocab_size,
        d_model=config.hidden_size,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.num_attention_heads,
        decoder_attention_heads=config.num_attention_heads,
        encoder_ffn_dim=config.intermediate_size,
        decoder_ffn_dim=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        activation_function=config.hidden_act,
        scale_embedding=config.scale_embedding,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        init_std=config.initializer_range,
        share_encoder_decoder_embeddings=config.tie_word_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        forced_eos_token_id=None,
        decoder_start_token_id=start,
    )


def _marian_rules(config: TransformerConfig) -> list[Rule]:
    rules = [
        # Marian's sinusoid tables are rebuilt from the config at load time, like ours.
        Rule("", ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"), "reference_only"),
    ]
    if config.tie_word_embeddings:  # one matrix: Marian's `shared`, tied to both embeddings and lm_head
        rules.append(Rule("model.encoder.embed_tokens.weight", ("model.shared.weight",)))
    else:  # three matrices; a `shared` matrix that Marian keeps unused when untied is not carried over
        for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
            rules.append(Rule(name, (name,)))
        rules.append(Rule("", ("model.shared.weight",), "reference_only"))
    if config.output_bias:
        rules.append(Rule("lm_head.bias", ("final_logits_bias",), "row"))
    else:
        rules.append(Rule("", ("final_logits_bias",), "reference_only"))  # Marian initialises it to zero

    def module(ours: str, reference: str, kind: str = "copy", parts: tuple[str, ...] = ("",)):
        """The weight and bias of a linear or LayerNorm module."""
        for param in ("weight", "bias"):
            rules.append(Rule(f"{ours}.{param}", tuple(f"{reference}{p}.{param}" for p in parts), kind))

    for stack, layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(layers):
            ours, ref = f"model.{stack}.layers.{i}", f"model.{stack}.layers.{i}"
            # Our fused projections are Marian's separate q, k, v (heads contiguous in each) stacked in that order.
            module(f"{ours}.self_attn.qkv_proj", f"{ref}.self_attn.", "concat", ("q_proj", "k_proj", "v_proj"))
            module(f"{ours}.self_attn.o_proj", f"{ref}.self_attn.out_proj")
            module(f"{ours}.self_attn_layer_norm", f"{ref}.self_attn_layer_norm")
            if stack == "decoder":
                module(f"{ours}.cross_attn.q_proj", f"{ref}.encoder_attn.q_proj")
                module(f"{ours}.cross_attn.kv_proj", f"{ref}.encoder_attn.", "concat", ("k_proj", "v_proj"))
                module(f"{ours}.cross_attn.o_proj", f"{ref}.encoder_attn.out_proj")
                module(f"{ours}.cross_attn_layer_norm", f"{ref}.encoder_attn_layer_norm")
            module(f"{ours}.mlp.up_proj", f"{ref}.fc1")
            module(f"{ours}.mlp.down_proj", f"{ref}.fc2")
            module(f"{ours}.final_layer_norm", f"{ref}.final_layer_norm")
    return rules


register_conversion(
    Conversion(
        transformers.MarianMTModel,
        TransformerForConditionalGeneration,
        _marian_config_to_ours,
        _transformer_config_to_marian,
        _marian_rules,
    )
)

# Mamba (Gu and Dao 2023) <-> the SSM family's mamba block --------------------------------------------------------
# Our Mamba block keeps transformers' parameter names and layouts (in_proj, conv1d, x_proj, dt_proj, A_log, D,
# out_proj, the RMSNorms), so the rules rename. MambaConfig's time_step_scale, time_step_init_scheme and
# rescale_prenorm_residual only initialise weights, and use_mambapy / use_associative_scan choose how the scan is
# computed: given the weights, the outputs do not depend on them, and they are not carried. Padding: transformers
# zeroes the block's input at padded positions, ours the convolution's input; without in_proj biases (Mamba's
# default) the two are the same numbers.


def _mamba_config_to_ours(config) -> SSMConfig:
    if config.hidden_act != "silu":
        raise ValueError(
            f"from_transformers: MambaConfig.hidden_act={config.hidden_act!r} has no SSMConfig equivalent (the Mamba "
            "block's activation is SiLU: only 'silu')."
        )
    return SSMConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        ssm_type="mamba",
        state_size=config.state_size,
        expand=config.expand,
        conv_kernel=config.conv_kernel,
        time_step_rank=int(config.time_step_rank),
        time_step_min=config.time_step_min,
        time_step_max=config.time_step_max,
        time_step_floor=config.time_step_floor,
        use_bias=config.use_bias,
        use_conv_bias=config.use_conv_bias,
        residual_in_fp32=config.residual_in_fp32,
        layer_norm_eps=config.layer_norm_epsilon,
        hidden_dropout=0.0,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _ssm_config_to_mamba(config: SSMConfig):
    _require({"ssm_type": "mamba", "hidden_dropout": 0.0}, config, "Mamba", "MambaForCausalLM")
    return transformers.MambaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        state_size=config.state_size,
        expand=config.expand,
        conv_kernel=config.conv_kernel,
        time_step_rank=config.time_step_rank,
        time_step_min=config.time_step_min,
        time_step_max=config.time_step_max,
        time_step_floor=config.time_step_floor,
        use_bias=config.use_bias,
        use_conv_bias=config.use_conv_bias,
        hidden_act="silu",
        residual_in_fp32=config.residual_in_fp32,
        layer_norm_epsilon=config.layer_norm_eps,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _mamba_rules(config: SSMConfig, head: bool) -> list[Rule]:
    ours, ref = ("model.", "backbone.") if head else ("", "")
    rules = [
        Rule(f"{ours}embed_tokens.weight", (f"{ref}embeddings.weight",)),
        Rule(f"{ours}norm.weight", (f"{ref}norm_f.weight",)),
    ]
    names = ["norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.x_proj.weight"]
    names += ["mixer.dt_proj.weight", "mixer.dt_proj.bias", "mixer.A_log", "mixer.D", "mixer.out_proj.weight"]
    if config.use_bias:
        names += ["mixer.in_proj.bias", "mixer.out_proj.bias"]
    if config.use_conv_bias:
        names.append("mixer.conv1d.bias")
    for i in range(config.num_hidden_layers):
        rules += [Rule(f"{ours}layers.{i}.{name}", (f"{ref}layers.{i}.{name}",)) for name in names]
    if head and not config.tie_word_embeddings:
        rules.append(Rule("lm_head.weight", ("lm_head.weight",)))
    return rules


for _reference, _ours, _head in (
    (transformers.MambaForCausalLM, SSMForCausalLM, True),
    (transformers.MambaModel, SSMModel, False),
):
    register_conversion(
        Conversion(_reference, _ours, _mamba_config_to_ours, _ssm_config_to_mamba, partial(_mamba_rules, head=_head))
    )

# A plain PyTorch encoder-decoder (Sutskever et al. 2014; Cho et al. 2014) -> Bahdanau family --------------------

# Where a hand-written classic encoder-decoder keeps its weights: the layout of the PyTorch seq2seq tutorial, with
# multi-layer nn.GRU / nn.LSTM modules. Pass `names=` to `from_state_dict` for other module names.
CLASSIC_NAMES = {
    "source_embedding": "encoder.embedding",  # nn.Embedding(source vocabulary, m)
    "encoder_rnn": "encoder.rnn",  # nn.GRU / nn.LSTM(m, n, num_layers=L, batch_first=True[, bidirectional])
    "target_embedding": "decoder.embedding",  # nn.Embedding(target vocabulary, m)
    "decoder_rnn": "decoder.rnn",  # nn.GRU / nn.LSTM(m [+ A], d, num_layers=L, batch_first=True)
    "output": "decoder.out",  # nn.Linear(d, target vocabulary): logits = W_o s_i + b_o
}


def _classic_rules(config: BahdanauConfig, names: dict[str, str]) -> list[Rule]:
    """Ours <- theirs, for `from_state_dict`. A multi-layer PyTorch recurrent module names layer k's tensors
    `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}` (with `_reverse` for the backward direction);
    ours keeps one single-layer module per layer (`layers.{k}.rnn.weight_ih_l0`), with the same gate order."""
    rules = [
        Rule("model.encoder.embed_tokens.weight", (f"{names['source_embedding']}.weight",)),
        Rule("model.decoder.embed_tokens.weight", (f"{names['target_embedding']}.weight",)),
        Rule("lm_head.weight", (f"{names['output']}.weight",)),
        Rule("lm_head.bias", (f"{names['output']}.bias",)),
    ]
    stacks = (
        ("model.encoder.rnn", names["encoder_rnn"], ("", "_reverse") if config.encoder_bidirectional else ("",)),
        ("model.decoder.rnn", names["decoder_rnn"], ("",)),
    )
    for ours, theirs, directions in stacks:
        for k in range(config.num_hidden_layers):
            for tensor in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                for direction in directions:
                    rules.append(
                        Rule(f"{ours}.layers.{k}.rnn.{tensor}_l0{direction}", (f"{theirs}.{tensor}_l{k}{direction}",))
                    )
    return rules


def from_state_dict(
    state_dict: dict[str, torch.Tensor], config: BahdanauConfig, names: dict[str, str] | None = None
) -> BahdanauForConditionalGeneration:
    """A `BahdanauForConditionalGeneration` with the weights of a plain PyTorch RNN encoder-decoder, such as the
    classic ones of Sutskever et al. (2014) and Cho et al. (2014). `config` states the architecture the weights come
    from (e.g. `attention_type="none", encoder_bidirectional=False, bridge="final_state", decoder_input="embedding",
    output_layer="linear"`, plus `reverse_source` if the model read sources backwards); `names` (default
    `CLASSIC_NAMES`) says where the state dict keeps each part. The mapping, ours <- theirs:

        model.encoder.embed_tokens.weight               <- {source_embedding}.weight
        model.encoder.rnn.layers.{k}.rnn.{t}_l0[_reverse] <- {encoder_rnn}.{t}_l{k}[_reverse]
        model.decoder.embed_tokens.weight               <- {target_embedding}.weight
        model.decoder.rnn.layers.{k}.rnn.{t}_l0           <- {decoder_rnn}.{t}_l{k}
        lm_head.weight, lm_head.bias                    <- {output}.weight, {output}.bias

    for every layer k and t in weight_ih, weight_hh, bias_ih, bias_hh. Any other weight of ours (a deep output, an
    alignment model, a `linear` or `bahdanau` bridge) is read under its own name from the state dict. Every tensor
    of the state dict must be used and every weight of ours set, with the same shape: otherwise a ValueError names
    them. Outputs equal the source model's up to float rounding (`tests/test_classic_seq2seq.py`)."""
    if not isinstance(config, BahdanauConfig):
        raise TypeError(f"from_state_dict: config must be a BahdanauConfig, got {type(config).__name__}.")
    unknown = set(names or {}) - set(CLASSIC_NAMES)
    if unknown:
        raise ValueError(f"from_state_dict: unknown names {sorted(unknown)}; allowed: {sorted(CLASSIC_NAMES)}.")
    rules = _classic_rules(config, {**CLASSIC_NAMES, **(names or {})})
    model = BahdanauForConditionalGeneration(config)
    ours = model.state_dict()
    tied = set(model.all_tied_weights_keys)
    state, used, tied_copies = {}, set(), {}
    for rule in rules:
        if all(name in state_dict for name in rule.reference):
            tensor = rule.to_ours([state_dict[name] for name in rule.reference])
            (tied_copies if rule.ours in tied else state)[rule.ours] = tensor  # a tied one is set through its source
            used.update(rule.reference)
    for name in set(ours) - set(state) - tied:  # our own names for the parts beyond the classic model
        if name in state_dict:
            state[name] = state_dict[name]
            used.add(name)
    missing = sorted(set(ours) - set(state) - tied)
    left_over = sorted(set(state_dict) - used)
    if missing or left_over:
        raise ValueError(
            f"from_state_dict: weights of ours not found {missing}; tensors of the state dict not used {left_over}. "
            "Check the config (layers, directions, bridge, output layer) and `names` against the source model."
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(ours[name].shape):
            raise ValueError(
                f"from_state_dict: {name} has shape {tuple(ours[name].shape)} in this config, the state dict gives "
                f"{tuple(tensor.shape)}; check the sizes (hidden_size, decoder_hidden_size, vocabularies)."
            )
    for name, tensor in tied_copies.items():
        source = state.get(model.all_tied_weights_keys[name])
        if source is not None and not torch.equal(source, tensor):
            raise ValueError(
                f"from_state_dict: tie_word_embeddings=True makes {name} the same matrix as "
                f"{model.all_tied_weights_keys[name]}, but the state dict holds different values for them."
            )
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    return model.eval()


__all__ = [
    "CLASSIC_NAMES",
    "CONVERSIONS",
    "Conversion",
    "Rule",
    "from_state_dict",
    "from_transformers",
    "register_conversion",
    "to_transformers",
]
