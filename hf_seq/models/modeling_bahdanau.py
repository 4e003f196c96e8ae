"""The RNN encoder-decoder with attention of Bahdanau, Cho and Bengio (2015), "Neural Machine Translation by Jointly
Learning to Align and Translate" (RNNsearch), implemented from the paper's equations (section 3 and appendix A),
on the shared recurrent layers (recurrent.py states the GRU and LSTM equations).

Encoder (section 3.2), over source tokens x_1 .. x_S, each layer reading both ways:
    ->h_j = f(->h_{j-1}, E_x x_j),   <-h_j = f(<-h_{j+1}, E_x x_j),   h_j = [->h_j; <-h_j]   (annotations, 2n)
Decoder (section 3.1 and appendix A.2.2), over the target prefix y_0 (the start token) .. y_{T-1}:
    s_0    = tanh(W_s <-h_1)                                   (the backward state at the first source word)
    e_ij   = v_a^T tanh(W_a s_{i-1} + U_a h_j)                  (the alignment model; U_a h_j once per sentence)
    alpha_ij = exp(e_ij) / sum_k exp(e_ik)                       (over the real source positions only)
    c_i    = sum_j alpha_ij h_j                                  (the context vector)
    s_i    = f(s_{i-1}, [E_y y_{i-1}; c_i])                      (a GRU or LSTM step; the context enters every gate)
    t~_i   = U_o s_i + V_o E_y y_{i-1} + C_o c_i,   t_i = max(t~_{i,2k-1}, t~_{i,2k})   (deep output, maxout)
    p(y_i | y_<i, x) = softmax(W_o t_i)
The output reads s_i, as section 3.1 has it (g(y_{i-1}, s_i, c_i)); appendix A.2.2 writes s_{i-1}.
`attention_type` swaps the score (Luong et al. 2015's `dot` s^T h_j and `general` s^T W_a h_j), or removes the
alignment (`none`): c_i = c = [->h_S; <-h_1] for every i, the fixed-size summary of the RNN encoder-decoder of Cho
et al. (2014) and Sutskever et al. (2014). The shared GRU applies its reset gate after the recurrent product, as
cuDNN does; the paper's (Cho et al.'s) applies it before: a small, standard variant.

Stacked layers (`num_hidden_layers` > 1, not in the paper): the encoder's annotations are the top layer's, W_s
initialises every decoder layer, and the score and the deep output read the top decoder layer.

Generation carries a `BahdanauState` (the decoder states s_{i-1} of every layer and the projected annotations
U_a h_j) from step to step, so each new token costs one decoder step; beam search reorders it.
Shapes: B batch, S source length, T target length, n encoder units per direction, d decoder units, m embedding
size, a alignment units, l deep-output units, V vocabulary.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.loss.loss_utils import fixed_cross_entropy
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.models.bart.modeling_bart import shift_tokens_right
from transformers.utils import can_return_tuple

from .configuration_bahdanau import BahdanauConfig
from .recurrent import RecurrentStack
from .state import RecurrentState
from .utils import check_attention_mask, last_token_indices


@dataclass(eq=False)
class BahdanauState(RecurrentState):
    """The decoder's state between calls: `hidden` (and `cell` for an LSTM), (L, B, d), are s_{i-1} of every layer;
    `keys` (B, S, a) are the annotations as the score reads them (U_a h_j for `additive`, W_a h_j for `general`,
    h_j for `dot`, None for `none`), computed once per source sentence."""

    keys: torch.Tensor | None = None

    batch_dims: ClassVar[dict[str, int]] = {"hidden": 1, "cell": 1, "keys": 0}


@dataclass
class BahdanauModelOutput(Seq2SeqModelOutput):
    """`last_hidden_state` is the deep output t_i (B, T, l); `alignments` (B, T, S) the weights alpha_ij, also given
    as `cross_attentions` = (alignments[:, None],) in transformers' (B, heads, T, S) layout."""

    alignments: torch.FloatTensor | None = None


@dataclass
class BahdanauLMOutput(Seq2SeqLMOutput):
    """`alignments` (B, T, S): alpha_ij, each row summing to 1 over the real source positions (with
    `output_attentions=True`; None for `attention_type='none'`)."""

    alignments: torch.FloatTensor | None = None


def _first_and_last_real(attention_mask: torch.Tensor | None, batch_size: int, length: int, device):
    """Index of each row's first and last real source token, whichever side the padding is on."""
    if attention_mask is None:
        first = torch.zeros(batch_size, dtype=torch.long, device=device)
        return first, first + length - 1
    last = last_token_indices(None, attention_mask, None, batch_size)
    return attention_mask.long().argmax(-1), last


class BahdanauAttention(nn.Module):
    """The score e_ij of decoder state s_{i-1} (the query) and annotation h_j, its softmax over the real source
    positions, and the context c_i = sum_j alpha_ij h_j. Scores (no biases, as in the paper's equations):

        additive  e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)     Bahdanau et al. 2015, appendix A.1.2
        general   e_ij = s_{i-1}^T W_a h_j                     Luong et al. 2015, eq. 8 (a bilinear score)
        dot       e_ij = s_{i-1}^T h_j                         Luong et al. 2015, eq. 8

    The part that depends on the source only (U_a h_j, W_a h_j) is `project_keys`, run once per sentence."""

    def __init__(self, config: BahdanauConfig):
        super().__init__()
        self.attention_type = config.attention_type
        annotation_size, d, a = 2 * config.hidden_size, config.decoder_hidden_size, config.attention_size
        if self.attention_type == "additive":
            self.query_weight = nn.Parameter(torch.empty(a, d))  # W_a
            self.key_weight = nn.Parameter(torch.empty(a, annotation_size))  # U_a
            self.energy_weight = nn.Parameter(torch.empty(1, a))  # v_a^T
        elif self.attention_type == "general":
            self.key_weight = nn.Parameter(torch.empty(d, annotation_size))  # W_a

    def project_keys(self, annotations: torch.Tensor) -> torch.Tensor:
        """(B, S, 2n) -> (B, S, a): U_a h_j (additive), W_a h_j (general), h_j itself (dot)."""
        if self.attention_type == "dot":
            return annotations
        return nn.functional.linear(annotations, self.key_weight)

    def forward(self, query, keys, annotations, source_mask):
        """query s_{i-1} (B, d), keys (B, S, a), annotations h (B, S, 2n), source_mask (B, S) bool or None.
        Returns the context c_i (B, 2n) and the weights alpha_i (B, S), exactly 0 on padding."""
        if self.attention_type == "additive":
            hidden = torch.tanh(nn.functional.linear(query, self.query_weight)[:, None] + keys)  # (B, S, a)
            scores = nn.functional.linear(hidden, self.energy_weight).squeeze(-1)  # (B, S)
        else:
            scores = torch.bmm(keys, query[:, :, None]).squeeze(-1)  # (B, S)
        if source_mask is not None:
            scores = scores.masked_fill(~source_mask, float("-inf"))
        weights = scores.float().softmax(-1).to(annotations.dtype)
        context = torch.bmm(weights[:, None], annotations).squeeze(1)  # (B, 2n)
        return context, weights


class BahdanauEncoder(nn.Module):
    """Source embeddings and a bidirectional recurrent stack; returns the annotations h_j = [->h_j; <-h_j]
    (B, S, 2n) of the top layer, zero on padding (padding may be on either side)."""

    def __init__(self, config: BahdanauConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        self.rnn = RecurrentStack(
            config.cell_type,
            config.embedding_size,
            config.hidden_size,
            config.num_hidden_layers,
            dropout=config.hidden_dropout,
            bidirectional=True,
        )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("BahdanauEncoder: pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        check_attention_mask(attention_mask, *inputs_embeds.shape[:2])
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        x = self.embedding_dropout(inputs_embeds)
        out = self.rnn(x, attention_mask=attention_mask, output_hidden_states=output_hidden_states)
        return BaseModelOutput(
            last_hidden_state=out.output,  # (B, S, 2n)
            hidden_states=(x, *out.layer_outputs) if output_hidden_states else None,
        )


class BahdanauDecoder(nn.Module):
    """The attentive decoder: one recurrent step per target token (the context c_i depends on s_{i-1}, so the steps
    cannot run as one fused sequence), and the deep output t_i. See the module docstring for the equations."""

    def __init__(self, config: BahdanauConfig):
        super().__init__()
        self.config = config
        n, d, m = config.hidden_size, config.decoder_hidden_size, config.embedding_size
        deep = config.deep_output_size  # l
        self.embed_tokens = nn.Embedding(config.vocab_size, m)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        self.init_proj = nn.Linear(n, config.num_hidden_layers * d)  # W_s
        self.attention = BahdanauAttention(config) if config.attention_type != "none" else None
        self.rnn = RecurrentStack(
            config.cell_type, m + 2 * n, d, config.num_hidden_layers, dropout=config.hidden_dropout
        )
        self.deep_output = nn.Linear(d + m + 2 * n, 2 * deep if config.maxout else deep)  # [U_o, V_o, C_o]
        self.output_dropout = nn.Dropout(config.output_dropout)

    def initial_state(self, annotations: torch.Tensor, source_mask: torch.Tensor | None) -> BahdanauState:
        """s_0 = tanh(W_s <-h_1) for every layer (an LSTM's cells start at 0), and the keys of the score."""
        batch_size, length = annotations.shape[:2]
        n, layers = self.config.hidden_size, self.config.num_hidden_layers
        first, _ = _first_and_last_real(source_mask, batch_size, length, annotations.device)
        backward_first = annotations[torch.arange(batch_size, device=annotations.device), first, n:]  # <-h_1 (B, n)
        hidden = torch.tanh(self.init_proj(backward_first)).view(batch_size, layers, -1).transpose(0, 1)  # (L, B, d)
        hidden = hidden.contiguous()
        cell = torch.zeros_like(hidden) if self.config.cell_type == "lstm" else None
        keys = self.attention.project_keys(annotations) if self.attention is not None else None
        return BahdanauState(hidden, cell, 0, keys)

    def fixed_context(self, annotations: torch.Tensor, source_mask: torch.Tensor | None) -> torch.Tensor:
        """`attention_type='none'`: c = [->h_S; <-h_1], the final state of each direction (B, 2n)."""
        batch_size, length = annotations.shape[:2]
        n = self.config.hidden_size
        first, last = _first_and_last_real(source_mask, batch_size, length, annotations.device)
        rows = torch.arange(batch_size, device=annotations.device)
        return torch.cat([annotations[rows, last, :n], annotations[rows, first, n:]], -1)

    def deep_output_features(self, state_i, embedded_prev, context):
        """t_i from s_i (B, d), E y_{i-1} (B, m) and c_i (B, 2n): (B, l)."""
        t = self.deep_output(torch.cat([state_i, embedded_prev, context], -1))
        t = t.view(*t.shape[:-1], -1, 2).amax(-1) if self.config.maxout else torch.tanh(t)  # maxout over pairs
        return self.output_dropout(t)

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        annotations: torch.Tensor,
        source_mask: torch.Tensor | None = None,
        state: BahdanauState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        output_layer: nn.Module | None = None,
    ):
        """input_ids (B, T): y_{i-1} for the T steps; annotations (B, S, 2n); source_mask (B, S), 1 on real tokens;
        state: what the previous call returned (None: start from s_0). `output_layer` (W_o, given by the LM head)
        enables scheduled sampling in training. Returns t (B, T, l), the new state, alignments (B, T, S) or None and
        the hidden states (embeddings and each layer's s_i) or None."""
        if state is None:
            state = self.initial_state(annotations, source_mask)
        mask = source_mask.bool() if source_mask is not None else None
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        embedded = self.embedding_dropout(inputs_embeds)  # (B, T, m)
        fixed = self.fixed_context(annotations, source_mask) if self.attention is None else None
        p = self.config.scheduled_sampling
        sampling = self.training and p > 0 and output_layer is not None

        hidden, cell = state.hidden, state.cell
        features, weights, layer_states, embeddings = [], [], [], []
        for i in range(embedded.shape[1]):
            y_prev = embedded[:, i]  # E y_{i-1} (B, m)
            if sampling and i > 0:
                # Bengio et al. 2015: with probability p, read a token sampled from the model's own previous
                # output distribution instead of the true one (no gradient through the sample).
                with torch.no_grad():
                    sampled = torch.multinomial(output_layer(features[-1]).float().softmax(-1), 1).squeeze(-1)
                replace = torch.rand(sampled.shape, device=sampled.device) < p
                y_prev = torch.where(replace[:, None], self.embedding_dropout(self.embed_tokens(sampled)), y_prev)
            if self.attention is None:
                context = fixed
            else:
                context, alpha = self.attention(hidden[-1], state.keys, annotations, mask)  # reads s_{i-1}
                weights.append(alpha)
            step = self.rnn(torch.cat([y_prev, context], -1)[:, None], (hidden, cell), None, output_hidden_states)
            hidden, cell = step.hidden, step.cell  # s_i of every layer
            features.append(self.deep_output_features(step.output[:, 0], y_prev, context))
            embeddings.append(y_prev)
            if output_hidden_states:
                layer_states.append(step.layer_outputs)

        new_state = BahdanauState(hidden, cell, state.seen_tokens + embedded.shape[1], state.keys)
        alignments = torch.stack(weights, 1) if output_attentions and weights else None  # (B, T, S)
        hidden_states = None
        if output_hidden_states:
            per_layer = [torch.cat(steps, 1) for steps in zip(*layer_states)]  # each (B, T, d)
            hidden_states = (torch.stack(embeddings, 1), *per_layer)
        return torch.stack(features, 1), new_state, alignments, hidden_states


class BahdanauPreTrainedModel(PreTrainedModel):
    config_class = BahdanauConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["RecurrentLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _is_stateful = True  # no assisted decoding: a recurrent state cannot be rewound to drop rejected tokens

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the decoder creates its own BahdanauState; generate must not build a key/value cache

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True):
        """Source and target share one vocabulary: untied target embeddings are resized with the source ones."""
        decoder = self.get_decoder()
        if not self.config.tie_word_embeddings:
            decoder.embed_tokens = self._get_resized_embeddings(
                decoder.embed_tokens, new_num_tokens, pad_to_multiple_of, mean_resizing
            )
        return super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)

    @torch.no_grad()
    def _init_weights(self, module):
        """Appendix B.1 of the paper, with std = initializer_range (the paper's 0.01): recurrent matrices random
        orthogonal (one block per gate), W_a and U_a N(0, std / 10) (the paper's 0.001), v_a and every bias 0, all
        other matrices N(0, std)."""
        std = self.config.initializer_range
        if isinstance(module, nn.RNNBase):
            for name, param in module.named_parameters():
                if getattr(param, "_is_hf_initialized", False):
                    continue
                if name.startswith("weight_hh"):
                    for block in param.split(module.hidden_size):
                        nn.init.orthogonal_(block)
                elif name.startswith("weight_ih"):
                    nn.init.normal_(param, 0.0, std)
                else:
                    nn.init.zeros_(param)
        elif isinstance(module, BahdanauAttention):
            for name, param in module.named_parameters():
                init.zeros_(param) if name == "energy_weight" else init.normal_(param, 0.0, std / 10)
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, 0.0, std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)


class BahdanauModel(BahdanauPreTrainedModel):
    """Encoder and decoder; returns the deep output t_i (B, T, l), the decoder state, the alignments and the
    annotations."""

    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: BahdanauConfig):
        super().__init__(config)
        self.encoder = BahdanauEncoder(config)
        self.decoder = BahdanauDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value):
        self.encoder.embed_tokens = value
        if self.config.tie_word_embeddings:
            self.decoder.embed_tokens = value

    def get_encoder(self, modality: str | None = None):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: BahdanauState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        output_layer: nn.Module | None = None,
        **kwargs,
    ) -> BahdanauModelOutput:
        """`attention_mask` (B, S) masks source padding (either side). `encoder_outputs`, if given (generate encodes
        once), replace running the encoder. `past_key_values`: the `BahdanauState` a previous call returned. The
        decoder reads left to right, so right-padded targets need no mask: `decoder_attention_mask` is accepted
        and not used."""
        config = self.config
        if past_key_values is not None and not isinstance(past_key_values, BahdanauState):
            raise TypeError(
                f"BahdanauModel: past_key_values must be the BahdanauState a previous call returned, not "
                f"{type(past_key_values).__name__} (a recurrent decoder keeps no key/value cache)."
            )
        use_cache = (config.use_cache and not self.training) if use_cache is None else use_cache
        output_attentions = config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_hidden_states=output_hidden_states,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):  # a tuple, from return_dict=False
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        annotations = encoder_outputs.last_hidden_state  # (B, S, 2n)
        check_attention_mask(attention_mask, *annotations.shape[:2])
        if (decoder_input_ids is None) == (decoder_inputs_embeds is None):
            raise ValueError("BahdanauModel: pass exactly one of decoder_input_ids or decoder_inputs_embeds.")
        features, state, alignments, decoder_hidden_states = self.decoder(
            decoder_input_ids,
            annotations,
            attention_mask,
            past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            output_layer=output_layer,
        )
        return BahdanauModelOutput(
            last_hidden_state=features,
            past_key_values=state if use_cache else None,
            decoder_hidden_states=decoder_hidden_states,
            cross_attentions=(alignments[:, None],) if alignments is not None else None,
            encoder_last_hidden_state=annotations,
            encoder_hidden_states=encoder_outputs.hidden_states,
            alignments=alignments,
        )


class BahdanauForConditionalGeneration(BahdanauPreTrainedModel, GenerationMixin):
    """RNNsearch: p(y_i | y_<i, x) = softmax(W_o t_i), trained with cross-entropy (optionally with scheduled
    sampling), decoded with `generate()` (greedy, sampling, beam search)."""

    _tied_weights_keys = {
        "lm_head.weight": "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight": "model.encoder.embed_tokens.weight",
    }

    def __init__(self, config: BahdanauConfig):
        super().__init__(config)
        self.model = BahdanauModel(config)
        self.lm_head = nn.Linear(config.deep_output_size, config.vocab_size)  # W_o
        self.post_init()

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def get_encoder(self, modality: str | None = None):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.LongTensor:
        """Teacher forcing: the decoder reads the start token, then the labels but the last (-100 becomes padding),
        so its output at step i is scored against labels[:, i]. Called by `DataCollatorForSeq2Seq` and by `forward`
        when only labels are given."""
        config = self.config
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else config.bos_token_id
        if start is None or config.pad_token_id is None:
            raise ValueError(
                "BahdanauForConditionalGeneration: building decoder_input_ids from labels needs "
                "config.decoder_start_token_id (or bos_token_id) and config.pad_token_id."
            )
        return shift_tokens_right(labels, config.pad_token_id, start)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: BahdanauState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> BahdanauLMOutput:
        """`labels` (B, T) are the target tokens, aligned with the decoder outputs (the loss does not shift them;
        -100 is ignored); without `decoder_input_ids` the decoder reads them shifted right behind the start token.
        Trainer's `num_items_in_batch` makes the loss a sum over it, so gradient accumulation is exact."""
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
            output_layer=self.lm_head,
            **kwargs,
        )
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(outputs.last_hidden_state[:, keep, :])  # (B, T, V)
        loss = None
        if labels is not None:
            loss = fixed_cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                labels.reshape(-1).to(logits.device),
                num_items_in_batch=num_items_in_batch,
            )
        return BahdanauLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            alignments=outputs.alignments,
        )


__all__ = ["BahdanauState", "BahdanauPreTrainedModel", "BahdanauModel", "BahdanauForConditionalGeneration"]
