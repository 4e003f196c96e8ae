r"""The encoder-decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need"), built from the shared layers.

The encoder (section 3.1) reads the source tokens x_1 .. x_S, the decoder the target prefix y_0 (the start token)
.. y_{T-1}; each of the N layers of a stack applies its sub-layers in turn (post-LN):

$$
\begin{aligned}
h_0 &= \sqrt{d}\, E[x] + PE \qquad \text{sections 3.4, 3.5} \\
h &= \mathrm{LN}(h + \mathrm{SelfAttn}(h)) \qquad \text{each encoder layer} \\
h &= \mathrm{LN}(h + \mathrm{FFN}(h)) \\
g_0 &= \sqrt{d}\, E[y] + PE \\
g &= \mathrm{LN}(g + \mathrm{CausalSelfAttn}(g)) \qquad \text{each decoder layer} \\
g &= \mathrm{LN}(g + \mathrm{CrossAttn}(g, h_N)) \\
g &= \mathrm{LN}(g + \mathrm{FFN}(g)) \\
p(y_{t+1} \mid y_{\le t}, x) &= \mathrm{softmax}(g_N W_{out}) \qquad W_{out} = E^\top \text{ when tied (section 3.4)}
\end{aligned}
$$

Pre-LN (an option) computes x + Sublayer(LN(x)) instead and normalises each stack's output once more.

In generation the decoder's self-attention keys/values are cached step by step and the cross-attention keys/values
are computed once per source sentence (transformers' `EncoderDecoderCache`).
Shapes: B batch, S source length, T target length, C = hidden_size, V vocabulary.
"""

import math

import torch
from torch import nn
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.utils import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .attention import MultiHeadAttention
from .configuration_transformer import TransformerConfig
from .decoding import TransposedWeightsDecoding
from .layers import FeedForward, ResidualLayer, WordDropout, make_norm
from .positional import SinusoidalPositionalEmbedding
from .seq2seq import Seq2SeqLMMixin, Seq2SeqPreTrainedMixin, as_encoder_output, seq2seq_loss, shift_tokens_right
from .utils import (
    CheckedGenerationMixin,
    CheckedPreTrainedModel,
    IndexOutOfRangeError,
    cache_argument,
    cache_field,
    cache_of,
    check_attention_mask,
    check_input_ids,
    positions_from_attention_mask,
)


class TransformerLayer(GradientCheckpointingLayer, ResidualLayer):
    """What encoder and decoder layers share: the feed-forward sub-layer, and the residual connection around every
    sub-layer (section 3.1; layers.ResidualLayer)."""

    def __init__(self, config: TransformerConfig):
        super().__init__(config.norm_position, config.dropout)
        self.mlp = FeedForward(
            config.hidden_size,
            config.intermediate_size,
            config.hidden_act,
            dropout=config.activation_dropout,
            bias=config.mlp_bias,
        )
        self.final_layer_norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.residual(x, self.mlp(self.sublayer_input(x, self.final_layer_norm)), self.final_layer_norm)


class TransformerEncoderLayer(TransformerLayer):
    def __init__(self, config: TransformerConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = MultiHeadAttention(config, layer_idx, is_causal=False)
        self.self_attn_layer_norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        x = hidden_states  # (B, S, C)
        attn, _ = self.self_attn(self.sublayer_input(x, self.self_attn_layer_norm), attention_mask, **kwargs)
        x = self.residual(x, attn, self.self_attn_layer_norm)
        return self.feed_forward(x)


class TransformerDecoderLayer(TransformerLayer):
    def __init__(self, config: TransformerConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = MultiHeadAttention(config, layer_idx, is_causal=True)
        self.self_attn_layer_norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)
        self.cross_attn = MultiHeadAttention(config, layer_idx, is_causal=False, is_cross_attention=True)
        self.cross_attn_layer_norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps)

    def forward(
        self,
        hidden_states,
        encoder_hidden_states,
        attention_mask=None,
        encoder_attention_mask=None,
        past_key_values=None,
        **kwargs,
    ):
        x = hidden_states  # (B, T, C); encoder_hidden_states (B, S, C)
        attn, _ = self.self_attn(
            self.sublayer_input(x, self.self_attn_layer_norm), attention_mask, past_key_values, **kwargs
        )
        x = self.residual(x, attn, self.self_attn_layer_norm)
        attn, _ = self.cross_attn(
            self.sublayer_input(x, self.cross_attn_layer_norm),
            encoder_attention_mask,
            past_key_values,
            encoder_hidden_states=encoder_hidden_states,
            **kwargs,
        )
        x = self.residual(x, attn, self.cross_attn_layer_norm)
        return self.feed_forward(x)


class TransformerPreTrainedModel(Seq2SeqPreTrainedMixin, CheckedPreTrainedModel):
    config_class = TransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["TransformerEncoderLayer", "TransformerDecoderLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True

    @torch.no_grad()
    def _init_weights(self, module):
        """The paper does not say; this follows the authors' tensor2tensor code and fairseq. Linear layers are
        Glorot-uniform (each of q, k and v on its own in a fused projection); token embeddings, multiplied by
        sqrt(d), start with std d^-1/2 so the sum has unit variance like the sinusoids added to it; an untied output
        projection starts like the embeddings."""
        super()._init_weights(module)  # normal(0, initializer_range) linears and embeddings, unit norms
        if isinstance(module, SinusoidalPositionalEmbedding):
            module.reset_buffers()
        elif isinstance(module, nn.Embedding) and self.config.scale_embedding:
            init.normal_(module.weight, mean=0.0, std=self.config.hidden_size**-0.5)
        elif isinstance(module, nn.Linear) and module is getattr(self, "lm_head", None):
            init.normal_(module.weight, mean=0.0, std=self.config.hidden_size**-0.5)  # replaced when tied
        elif isinstance(module, nn.Linear) and not getattr(module.weight, "_is_hf_initialized", False):
            for block in module.weight.split(self._projection_width(module)):  # q, k, v of a fused projection
                nn.init.xavier_uniform_(block)

    def _projection_width(self, linear: nn.Linear) -> int:
        for attention in self.modules():
            if isinstance(attention, MultiHeadAttention) and linear in (
                getattr(attention, "qkv_proj", None),
                getattr(attention, "kv_proj", None),
            ):
                return attention.num_heads * attention.head_dim
        return linear.out_features


class TransformerStack(TransformerPreTrainedModel):
    """Embeddings and the final norm of one stack (encoder or decoder): sqrt(d) E[x] + positions, then dropout.

    A PreTrainedModel of its own, as BART's encoder and decoder are, so that transformers' output capturing
    (`_can_record_outputs`, `@capture_outputs`) collects every layer's states and attention maps with hooks instead
    of a bookkeeping loop. Its config is the model's: the attention kernel is read from
    `config._attn_implementation` at each call, so `model.set_attn_implementation(...)` takes effect at once."""

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        if config.position_embedding_type == "sinusoidal":
            self.embed_positions = SinusoidalPositionalEmbedding(config.max_position_embeddings, config.hidden_size)
        else:
            self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.embed_scale = math.sqrt(config.hidden_size) if config.scale_embedding else 1.0
        self.dropout = nn.Dropout(config.dropout)
        self.word_dropout = nn.Identity()  # the encoder's: WordDropout(source_word_dropout)
        # Pre-LN leaves the residual stream unnormalised, so each stack ends with a LN; post-LN ends normalised.
        pre = config.norm_position == "pre"
        self.norm = make_norm(config.norm_type, config.hidden_size, config.layer_norm_eps) if pre else nn.Identity()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def init_weights(self):
        """Nothing here: a stack is built inside `TransformerModel`, whose `post_init` initialises every weight in
        one pass, in module order (so a seed gives the same weights as when the stacks were plain modules)."""

    def input_shape(self, input_ids, inputs_embeds) -> tuple[int, int, torch.device]:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"{type(self).__name__}: pass exactly one of input_ids or inputs_embeds.")
        check_input_ids(input_ids, inputs_embeds, self.embed_tokens.num_embeddings, self.input_name)
        tokens = input_ids if input_ids is not None else inputs_embeds
        return tokens.shape[0], tokens.shape[1], tokens.device

    def embed(self, input_ids, inputs_embeds, position_ids, total_length: int) -> torch.Tensor:
        """`inputs_embeds`, if given, are the unscaled token embeddings E[x] (B, T, C)."""
        # A static cache counts in a tensor: compare outside a compiled graph only (a data-dependent branch would
        # break it; the compiled decode is bounded by the cache's length).
        if not torch.compiler.is_compiling() and total_length > self.config.max_position_embeddings:
            raise IndexOutOfRangeError(
                f"{type(self).__name__}: {total_length} positions exceed max_position_embeddings="
                f"{self.config.max_position_embeddings}; truncate the input or use a model with more positions."
            )
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        positions = self.embed_positions(position_ids).to(inputs_embeds.dtype)
        return self.dropout(self.word_dropout(inputs_embeds) * self.embed_scale + positions)


class TransformerEncoder(TransformerStack):
    input_name = "input_ids"
    # hidden_states: the input of the first layer, then each layer's output (the last one after the final norm)
    _can_record_outputs = {
        "hidden_states": TransformerEncoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
    }

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.word_dropout = WordDropout(config.source_word_dropout)
        self.layers = nn.ModuleList(TransformerEncoderLayer(config, i) for i in range(config.encoder_layers))
        self.post_init()

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """The source states (B, S, C). `attention_mask` (B, S): 1 on tokens, 0 on padding (either side).
        `output_hidden_states` / `output_attentions` are collected by `@capture_outputs`."""
        config = self.config
        batch_size, source_length, device = self.input_shape(input_ids, inputs_embeds)
        check_attention_mask(attention_mask, batch_size, source_length)
        if config.output_attentions if output_attentions is None else output_attentions:
            kwargs["output_attentions"] = True  # a kernel that forms no weights says so, as in transformers
        positions = positions_from_attention_mask(attention_mask, 0, source_length, device)
        hidden_states = self.embed(input_ids, inputs_embeds, positions, source_length)
        mask = create_bidirectional_mask(config=config, inputs_embeds=hidden_states, attention_mask=attention_mask)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=mask, **kwargs)
        return BaseModelOutput(last_hidden_state=self.norm(hidden_states))


class TransformerDecoder(TransformerStack):
    input_name = "decoder_input_ids"
    _can_record_outputs = {
        "hidden_states": TransformerDecoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(TransformerDecoderLayer(config, i) for i in range(config.decoder_layers))
        self.post_init()

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """The target states (B, T, C). `attention_mask` (B, past + T) masks target padding, `encoder_attention_mask`
        (B, S) source padding; `past_key_values` is an `EncoderDecoderCache`, filled as it goes."""
        past_key_values = cache_argument(past_key_values, kwargs)
        config = self.config
        batch_size, target_length, device = self.input_shape(input_ids, inputs_embeds)
        if config.output_attentions if output_attentions is None else output_attentions:
            kwargs["output_attentions"] = True  # a kernel that forms no weights says so, as in transformers
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
        self_cache = past_key_values
        if isinstance(past_key_values, EncoderDecoderCache):
            self_cache = past_key_values.self_attention_cache
        past_length = self_cache.get_seq_length() if self_cache is not None else 0
        check_attention_mask(attention_mask, batch_size, past_length + target_length)
        if position_ids is None:
            position_ids = positions_from_attention_mask(attention_mask, past_length, target_length, device)
        hidden_states = self.embed(input_ids, inputs_embeds, position_ids, past_length + target_length)
        # the cache by position: transformers 5.24 renamed that argument from past_key_values to cache
        causal_mask = create_causal_mask(config, hidden_states, attention_mask, self_cache)
        cross_mask = create_bidirectional_mask(
            config=config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )

        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                encoder_hidden_states,  # positional, so gradient checkpointing passes its gradient through
                attention_mask=causal_mask,
                encoder_attention_mask=cross_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=self.norm(hidden_states), **cache_field(past_key_values if use_cache else None)
        )


class TransformerModel(TransformerPreTrainedModel):
    """Encoder and decoder; returns the decoder's final states (B, T, C), the encoder's, and the cache."""

    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.encoder = TransformerEncoder(config)
        self.decoder = TransformerDecoder(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        decoder_position_ids: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """`encoder_outputs`, if given (e.g. by `generate`, which encodes once), replace running the encoder."""
        past_key_values = cache_argument(past_key_values, kwargs)
        config = self.config
        use_cache = (config.use_cache and not self.training) if use_cache is None else use_cache
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                **kwargs,
            )
        else:
            encoder_outputs = as_encoder_output(encoder_outputs)
        encoder_states = encoder_outputs.last_hidden_state  # (B, S, C)
        check_attention_mask(attention_mask, *encoder_states.shape[:2])
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_states,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            position_ids=decoder_position_ids,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **cache_field(cache_of(decoder_outputs)),
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_states,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class TransformerForConditionalGeneration(
    TransposedWeightsDecoding, Seq2SeqLMMixin, TransformerPreTrainedModel, CheckedGenerationMixin
):
    """The translation model: p(y_t | y_<t, x) over the shared vocabulary, trained with (label-smoothed)
    cross-entropy, decoded with `generate()` (greedy, sampling, beam search with length penalty)."""

    _tied_weights_keys = {
        "lm_head.weight": "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight": "model.encoder.embed_tokens.weight",
    }

    def __init__(self, config: TransformerConfig):
        super().__init__(config)
        self.model = TransformerModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=config.output_bias)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """`labels` (B, T) are the target tokens, aligned with the decoder outputs (-100 is ignored); without
        `decoder_input_ids` the decoder reads them shifted right behind the start token. `logits_to_keep=k` computes
        logits for the last k positions only (0: all)."""
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits, loss = self.logits_and_loss(outputs.last_hidden_state, labels, logits_to_keep, num_items_in_batch)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **cache_field(cache_of(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


__all__ = [
    "TransformerPreTrainedModel",
    "TransformerModel",
    "TransformerForConditionalGeneration",
    "seq2seq_loss",
    "shift_tokens_right",
]
