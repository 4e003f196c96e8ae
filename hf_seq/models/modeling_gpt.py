r"""GPT: a decoder-only Transformer language model (Radford et al. 2018, 2019), built from the shared layers.

$$
\begin{aligned}
h_0 &= E[x] \;(+\, P[\text{positions}]) \\
h_l &= h_{l-1} + \mathrm{Attn}(\mathrm{LN}(h_{l-1})) \\
h_l &= h_l + \mathrm{FFN}(\mathrm{LN}(h_l)) \qquad \text{pre-LN (GPT-2); post-LN: } \mathrm{LN}(h + f(h)) \\
p(x_{t+1} \mid x_{\le t}) &= \mathrm{softmax}(\mathrm{LN}(h_L)\, E^\top) \qquad \text{tied input and output embeddings}
\end{aligned}
$$

With `num_local_experts` set, FFN is a mixture of experts (layers.MixtureOfExperts: each token through its top-k
experts) and the LM loss gains `router_aux_loss_coef` times the load-balancing loss (layers.load_balancing_loss).
Dense or not, the outputs are those of transformers' mixture-of-experts models (`MoeModelOutputWithPast`,
`MoeCausalLMOutputWithPast`), so code written for one GPT reads any: a dense GPT has no router, and its
`router_logits` and `aux_loss` are None, as Mixtral's are when they are not asked for.
"""

import functools
import inspect

import torch
from torch import nn
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import MoeCausalLMOutputWithPast, MoeModelOutputWithPast
from transformers.utils import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .attention import MultiHeadAttention
from .configuration_gpt import GPTConfig
from .decoding import TransposedWeightsDecoding
from .layers import ResidualLayer, Router, load_balancing_loss, make_feed_forward, make_norm
from .losses import causal_lm_linear_cross_entropy, uses_fused_loss
from .positional import ALiBi, RotaryEmbedding, SinusoidalPositionalEmbedding
from .prediction import ValuePredictionHead
from .utils import (
    CheckedGenerationMixin,
    CheckedPreTrainedModel,
    IndexOutOfRangeError,
    LastTokenSequenceClassification,
    cache_argument,
    cache_field,
    cache_of,
    check_attention_mask,
    check_input_ids,
    positions_from_attention_mask,
)


class GPTBlock(GradientCheckpointingLayer, ResidualLayer):
    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__(config.norm_position, config.hidden_dropout)
        self.input_layernorm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.self_attn = MultiHeadAttention(config, layer_idx, is_causal=True)
        self.post_attention_layernorm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.mlp = make_feed_forward(config)  # dense, or a mixture of experts

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, **kwargs):
        x = hidden_states  # (B, T, C)
        attn, _ = self.self_attn(
            self.sublayer_input(x, self.input_layernorm), attention_mask, past_key_values, **kwargs
        )
        x = self.residual(x, attn, self.input_layernorm)
        mlp = self.mlp(self.sublayer_input(x, self.post_attention_layernorm))
        return self.residual(x, mlp, self.post_attention_layernorm)


class GPTPreTrainedModel(CheckedPreTrainedModel):
    config_class = GPTConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["GPTBlock"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True

    def _init_weights(self, module):
        super()._init_weights(module)  # normal(0, initializer_range) linears and embeddings, unit norms
        if isinstance(module, (SinusoidalPositionalEmbedding, RotaryEmbedding, ALiBi)):
            module.reset_buffers()


def _dense_returns_no_router_logits(forward):
    """A dense GPT has no router: asked for router logits (by argument or config), it returns None, not the empty
    tuple output capturing would record."""

    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        if not self.config.num_local_experts:
            kwargs["output_router_logits"] = False
        return forward(self, *args, **kwargs)

    return wrapper


class GPTModel(GPTPreTrainedModel):
    """The stack of decoder blocks; returns the final hidden states (B, T, C) and the KV cache."""

    # hidden_states: the input of the first block, then each block's output (the last one after the final norm);
    # router_logits: each mixture of experts' router logits (batch * tokens, experts), for the load-balancing loss
    _can_record_outputs = {
        "hidden_states": GPTBlock,
        "attentions": OutputRecorder(MultiHeadAttention, index=1),
        "router_logits": OutputRecorder(Router, index=0),
    }

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        kind = config.position_embedding_type
        self.embed_positions = None
        self.rotary_emb = self.alibi = None
        if kind == "learned":
            self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        elif kind == "sinusoidal":
            self.embed_positions = SinusoidalPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
        elif kind == "rope":
            self.rotary_emb = RotaryEmbedding(config.hidden_size // config.num_attention_heads, config.rope_theta)
        else:
            self.alibi = ALiBi(config.num_attention_heads)
        self.dropout = nn.Dropout(config.embedding_dropout)
        self.layers = nn.ModuleList(GPTBlock(config, i) for i in range(config.num_hidden_layers))
        # Pre-LN leaves the residual stream unnormalised, so a final LN precedes the head; post-LN ends normalised.
        pre = config.norm_position == "pre"
        self.norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps) if pre else nn.Identity()
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def check_position_limit(self, past_length, seq_len) -> None:
        """Learned and sinusoidal position tables end at max_position_embeddings. A static cache counts in a tensor:
        compared outside a compiled graph only (a data-dependent branch would break it; the cache's own length bounds
        a compiled decode)."""
        if self.embed_positions is None or torch.compiler.is_compiling():
            return
        total_length = past_length + seq_len
        if int(total_length) > self.config.max_position_embeddings:
            raise IndexOutOfRangeError(
                f"GPTModel: {total_length} positions (cache {past_length} + input {seq_len}) exceed "
                f"max_position_embeddings={self.config.max_position_embeddings} of "
                f"{self.config.position_embedding_type} position embeddings; truncate the input or use a model with a "
                "longer context."
            )

    def embed(self, inputs_embeds, position_ids, past_key_values, past_length) -> tuple[torch.Tensor, dict]:
        """h_0 (B, T, C): the token embeddings plus learned or sinusoidal positions, then dropout; and what every
        attention layer reads for rotary positions (`position_embeddings`) or ALiBi (`position_bias`)."""
        hidden_states = inputs_embeds
        if self.embed_positions is not None:
            hidden_states = hidden_states + self.embed_positions(position_ids).to(hidden_states.dtype)
        hidden_states = self.dropout(hidden_states)
        positions = {}
        if self.rotary_emb is not None:
            positions["position_embeddings"] = self.rotary_emb(position_ids, hidden_states.dtype)
        if self.alibi is not None:
            seq_len = hidden_states.shape[1]
            key_length = past_key_values.get_mask_sizes(seq_len, 0)[0] if past_key_values is not None else seq_len
            bias = self.alibi(past_length, seq_len, key_length, hidden_states.device)
            positions["position_bias"] = bias.to(hidden_states.dtype)
        return hidden_states, positions

    @_dense_returns_no_router_logits
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        output_router_logits: bool | None = None,
        **kwargs,
    ) -> MoeModelOutputWithPast:
        """Each block's hidden states and attention maps, and each mixture's router logits (batch * tokens, experts),
        are recorded when asked (`output_*`, default: the config's) by `@capture_outputs`; a dense model's
        `router_logits` is None."""
        past_key_values = cache_argument(past_key_values, kwargs)
        config = self.config
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("GPTModel: pass exactly one of input_ids or inputs_embeds.")
        check_input_ids(input_ids, inputs_embeds, self.embed_tokens.num_embeddings)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_len = inputs_embeds.shape[:2]
        use_cache = (config.use_cache and not self.training) if use_cache is None else use_cache
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=config)
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        check_attention_mask(attention_mask, batch_size, past_length + seq_len)
        self.check_position_limit(past_length, seq_len)
        if position_ids is None:
            position_ids = positions_from_attention_mask(attention_mask, past_length, seq_len, inputs_embeds.device)
        hidden_states, positions = self.embed(inputs_embeds, position_ids, past_key_values, past_length)
        kwargs |= positions
        # the cache by position: transformers 5.24 renamed that argument from past_key_values to cache
        mask = create_causal_mask(config, hidden_states, attention_mask, past_key_values, position_ids=position_ids)
        if config.output_attentions if output_attentions is None else output_attentions:
            kwargs["output_attentions"] = True  # a kernel that forms no weights says so, as in transformers
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=mask, past_key_values=past_key_values, **kwargs)
        return MoeModelOutputWithPast(
            last_hidden_state=self.norm(hidden_states), **cache_field(past_key_values if use_cache else None)
        )


class GPTForCausalLM(TransposedWeightsDecoding, GPTPreTrainedModel, CheckedGenerationMixin):
    """`generate()` on CPU reads contiguous W^T copies for the one-token steps (models/decoding.py). For a compiled
    decode pass `cache_implementation="static"` and a `compile_config` (bench/bench_gpt.py --speed measures both).
    It returns MoeCausalLMOutputWithPast, as Mixtral does: `aux_loss` and `router_logits` are None in a dense model."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.model = GPTModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_router_logits: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> MoeCausalLMOutputWithPast:
        """`labels` are the input ids (shifted inside the loss; -100 is ignored). `logits_to_keep=k` computes logits
        for the last k positions only (0: all), or for the positions in a 1D index tensor. In training with labels
        and `config.fused_loss`, the loss is computed without the logits (models/losses.py) and `logits` is None.

        A mixture of experts computes the load-balancing loss `aux_loss` when given labels or asked for the router
        logits, and adds `router_aux_loss_coef` times it to the loss. Unlike Mixtral, which adds it only with
        `output_router_logits=True`, training balances the experts by default."""
        config = self.config
        output_router_logits = config.output_router_logits if output_router_logits is None else output_router_logits
        balance = config.num_local_experts > 0 and (output_router_logits or labels is not None)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            output_router_logits=balance,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        logits = loss = aux_loss = None
        if uses_fused_loss(self, labels, logits_to_keep):  # training: the same loss, without the logits
            lm_head = self.lm_head
            loss = causal_lm_linear_cross_entropy(hidden_states, lm_head.weight, lm_head.bias, labels, **kwargs)
        else:
            keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
            logits = self.lm_head(hidden_states[:, keep, :])
            if labels is not None:
                # transformers' causal LM loss: shifts labels (or takes `shift_labels`), ignores -100, and sums over
                # `num_items_in_batch` when Trainer passes it, so gradient accumulation equals the full batch.
                loss = self.loss_function(logits=logits, labels=labels, vocab_size=config.vocab_size, **kwargs)
        if balance:
            seq_len = hidden_states.shape[1]
            real = attention_mask[:, -seq_len:] if attention_mask is not None and attention_mask.dim() == 2 else None
            aux_loss = load_balancing_loss(outputs.router_logits, config.num_experts_per_tok, real)
            if labels is not None:
                loss = loss + config.router_aux_loss_coef * aux_loss * _aux_loss_share(labels, kwargs)
        return MoeCausalLMOutputWithPast(
            loss=loss,
            aux_loss=aux_loss,
            logits=logits,
            **cache_field(cache_of(outputs)),
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            router_logits=outputs.router_logits if output_router_logits else None,
        )


def _aux_loss_share(labels: torch.Tensor, kwargs: dict) -> torch.Tensor | float:
    """The weight of this batch's load-balancing loss: 1, or under gradient accumulation its share of the step's
    scored tokens. Trainer then passes `num_items_in_batch`, the step's token count, divides each micro-batch's LM
    loss sum by it and adds the micro-batches' losses up; weighted by its share, the balancing loss enters the step
    as a token-weighted mean over the micro-batches (not their sum, GA steps times the coefficient). It stays an
    approximation of the full batch's: f and P are means over the batch and their product does not split."""
    total = kwargs.get("num_items_in_batch")
    if total is None:
        return 1.0
    scored = kwargs.get("shift_labels")
    scored = labels[..., 1:] if scored is None else scored  # what Trainer counts for a causal LM
    return scored.ne(-100).sum() / total


# generate() reads the signature of a remote-code model's forward at every step (for a `cache_position` argument);
# computed once here, that costs microseconds instead of about a tenth of a one-token step.
GPTForCausalLM.forward.__signature__ = inspect.signature(GPTForCausalLM.forward)


class GPTForSequenceClassification(LastTokenSequenceClassification, GPTPreTrainedModel):
    """Classifies a sequence from the hidden state of its last real token (the only one that has seen them all)."""

    backbone_class = GPTModel


class GPTForPrediction(ValuePredictionHead, GPTPreTrainedModel):
    """Forecasts a real-valued series with the Transformer decoder: lagged values in place of token embeddings, a Student-t (or
    normal) distribution over the next value in place of the softmax (models/prediction.py)."""

    backbone_class = GPTModel


__all__ = ["GPTPreTrainedModel", "GPTModel", "GPTForCausalLM", "GPTForSequenceClassification", "GPTForPrediction"]
