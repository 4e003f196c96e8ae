r"""The RNN encoder-decoder with attention of Bahdanau, Cho and Bengio (2015), "Neural Machine Translation by Jointly
Learning to Align and Translate" (RNNsearch), implemented from the paper's equations (section 3 and appendix A),
on the shared recurrent layers (recurrent.py states the GRU and LSTM equations).

The encoder (section 3.2) reads the source tokens x_1 .. x_S, each layer both ways; the decoder (section 3.1 and
appendix A.2.2) the target prefix y_0 (the start token) .. y_{T-1}:

$$
\begin{aligned}
\overrightarrow{h}_j &= f(\overrightarrow{h}_{j-1}, E_x x_j), \quad \overleftarrow{h}_j = f(\overleftarrow{h}_{j+1}, E_x x_j) \\
h_j &= [\overrightarrow{h}_j; \overleftarrow{h}_j] \qquad \text{the annotations, } 2n \\
s_0 &= \tanh(W_s \overleftarrow{h}_1) \qquad \text{the backward state at the first source word} \\
e_{ij} &= v_a^\top \tanh(W_a s_{i-1} + U_a h_j) \qquad \text{the alignment model; } U_a h_j \text{ once per sentence} \\
\alpha_{ij} &= \frac{\exp(e_{ij})}{\sum_k \exp(e_{ik})} \qquad \text{over the real source positions only} \\
c_i &= \textstyle\sum_j \alpha_{ij} h_j \qquad \text{the context vector} \\
s_i &= f(s_{i-1}, [E_y y_{i-1}; c_i]) \qquad \text{a GRU or LSTM step; the context enters every gate} \\
\tilde t_i &= U_o s_i + V_o E_y y_{i-1} + C_o c_i \qquad \text{deep output} \\
t_{i,k} &= \max(\tilde t_{i,2k-1}, \tilde t_{i,2k}) \qquad \text{maxout} \\
p(y_i \mid y_{<i}, x) &= \mathrm{softmax}(W_o t_i)
\end{aligned}
$$

The output reads s_i, as section 3.1 has it (g(y_{i-1}, s_i, c_i)); appendix A.2.2 writes s_{i-1}.
`attention_type` swaps the score (Luong et al. 2015's `dot` s^T h_j and `general` s^T W_a h_j), or removes the
alignment (`none`): c_i = c = [->h_S; <-h_1] for every i, the fixed-size summary of the RNN encoder-decoder of Cho
et al. (2014) and Sutskever et al. (2014). The shared GRU applies its reset gate after the recurrent product, as
cuDNN does; the paper's (Cho et al.'s) applies it before: a small, standard variant.

Stacked layers (`num_hidden_layers` > 1, not in the paper): the encoder's annotations are the top layer's, W_s
initialises every decoder layer, and the score and the deep output read the top decoder layer.

The classic encoder-decoder (Sutskever et al. 2014; Cho et al. 2014) changes single equations (config flags):

| flag | what it changes |
|---|---|
| `encoder_bidirectional=False` | \(h_j = \overrightarrow{h}_j\) (annotations of size n) |
| `reverse_source=True` | the encoder reads x_S .. x_1; h_j stays indexed by source position j |
| `bridge="final_state"` | \(s_0^l = h^l_{final}\) (and \(c_0^l = c^l_{final}\)): each encoder layer's last state |
| `bridge="linear"` | \(s_0^l = W_b^l h^l_{final} + b^l\) (\(c_0^l = W_c^l c^l_{final} + b_c^l\)) |
| `bridge="zeros"` | \(s_0 = 0\) |
| `decoder_input="embedding"` | \(s_i = f(s_{i-1}, E_y y_{i-1})\) |
| `output_layer="linear"` | \(p(y_i \mid y_{<i}, x) = \mathrm{softmax}(W_o s_i + b_o)\) |

Without attention nothing the decoder reads depends on its own previous state, so its layers run over the whole
target in one fused call (cuDNN / oneDNN) instead of one step per token.

Generation carries a `BahdanauState` (the decoder states s_{i-1} of every layer and the projected annotations
U_a h_j) from step to step, so each new token costs one decoder step; beam search reorders it.
Shapes: B batch, S source length, T target length, n encoder units per direction, D encoder directions (2 or 1),
A = D * n annotation size, L layers, d decoder units, m embedding size, a alignment units, l deep-output units,
V (target) vocabulary.
"""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.utils import can_return_tuple

from .configuration_bahdanau import BahdanauConfig
from .layers import WordDropout
from .recurrent import RecurrentStack
from .seq2seq import Seq2SeqLMMixin, Seq2SeqPreTrainedMixin
from .state import RecurrentState
from .utils import (
    CheckedGenerationMixin,
    CheckedPreTrainedModel,
    cache_argument,
    cache_field,
    cache_of,
    check_attention_mask,
    check_input_ids,
    last_token_indices,
)


@dataclass(eq=False)
class BahdanauState(RecurrentState):
    """The decoder's state between calls: `hidden` (and `cell` for an LSTM), (L, B, d), are s_{i-1} of every layer;
    `keys` (B, S, a) are the annotations as the score reads them (U_a h_j for `additive`, W_a h_j for `general`,
    h_j for `dot`, None for `none`), and `context` (B, A) the fixed context of `attention_type='none'`, both
    computed once per source sentence."""

    keys: torch.Tensor | None = None
    context: torch.Tensor | None = None

    batch_dims: ClassVar[dict[str, int]] = {"hidden": 1, "cell": 1, "keys": 0, "context": 0}


@dataclass
class BahdanauEncoderOutput(BaseModelOutput):
    """`last_hidden_state` (B, S, A): the annotations h_j, in source order. `final_hidden_state` (B, L * D, n) and,
    for an LSTM, `final_cell_state`: each layer's and direction's last state (index layer * D + direction), batch
    first so that generate() copies them per beam with the annotations."""

    final_hidden_state: torch.FloatTensor | None = None
    final_cell_state: torch.FloatTensor | None = None

    @classmethod
    def from_tuple(cls, values: tuple) -> "BahdanauEncoderOutput":
        """Read what the encoder returns with return_dict=False: the annotations, then the hidden states (a tuple)
        if they were asked for, then the final hidden and cell states (tensors). Only the annotations are required
        (the default bridge reads nothing else)."""
        annotations, *rest = values
        hidden_states = next((v for v in rest if isinstance(v, tuple)), None)
        finals = [v for v in rest if torch.is_tensor(v)] + [None, None]
        return cls(annotations, hidden_states, None, finals[0], finals[1])


@dataclass
class BahdanauModelOutput(Seq2SeqModelOutput):
    """`last_hidden_state` is what the output layer reads: the deep output t_i (B, T, l), or s_i (B, T, d) with
    `output_layer='linear'`; `alignments` (B, T, S) the weights alpha_ij, also given as `cross_attentions` =
    (alignments[:, None],) in transformers' (B, heads, T, S) layout."""

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
        annotation_size, d, a = config.annotation_size, config.decoder_hidden_size, config.attention_size
        if self.attention_type == "additive":
            self.query_weight = nn.Parameter(torch.empty(a, d))  # W_a
            self.key_weight = nn.Parameter(torch.empty(a, annotation_size))  # U_a
            self.energy_weight = nn.Parameter(torch.empty(1, a))  # v_a^T
        elif self.attention_type == "general":
            self.key_weight = nn.Parameter(torch.empty(d, annotation_size))  # W_a

    def project_keys(self, annotations: torch.Tensor) -> torch.Tensor:
        """(B, S, A) -> (B, S, a): U_a h_j (additive), W_a h_j (general), h_j itself (dot)."""
        if self.attention_type == "dot":
            return annotations
        return nn.functional.linear(annotations, self.key_weight)

    def forward(self, query, keys, annotations, source_mask):
        """query s_{i-1} (B, d), keys (B, S, a), annotations h (B, S, A), source_mask (B, S) bool or None.
        Returns the context c_i (B, A) and the weights alpha_i (B, S), exactly 0 on padding."""
        if self.attention_type == "additive":
            hidden = torch.tanh(nn.functional.linear(query, self.query_weight)[:, None] + keys)  # (B, S, a)
            scores = nn.functional.linear(hidden, self.energy_weight).squeeze(-1)  # (B, S)
        else:
            scores = torch.bmm(keys, query[:, :, None]).squeeze(-1)  # (B, S)
        if source_mask is not None:
            scores = scores.masked_fill(~source_mask, float("-inf"))
        weights = scores.float().softmax(-1).to(annotations.dtype)
        context = torch.bmm(weights[:, None], annotations).squeeze(1)  # (B, A)
        return context, weights


class BahdanauEncoder(nn.Module):
    """Source embeddings and a recurrent stack, bidirectional or not, reading the source forwards or (with
    `reverse_source`) backwards; returns the annotations of the top layer in source order, zero on padding (padding
    may be on either side), and every layer's final states."""

    def __init__(self, config: BahdanauConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.source_vocab_size or config.vocab_size, config.embedding_size)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        self.word_dropout = WordDropout(config.source_word_dropout)
        self.rnn = RecurrentStack(
            config.cell_type,
            config.embedding_size,
            config.hidden_size,
            config.num_hidden_layers,
            dropout=config.hidden_dropout,
            bidirectional=config.encoder_bidirectional,
        )

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BahdanauEncoderOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("BahdanauEncoder: pass exactly one of input_ids or inputs_embeds.")
        check_input_ids(input_ids, inputs_embeds, self.embed_tokens.num_embeddings)
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        check_attention_mask(attention_mask, *inputs_embeds.shape[:2])
        output_hidden_states = (
            self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        x = self.embedding_dropout(self.word_dropout(inputs_embeds))  # (B, S, m)
        # Sutskever et al.: read x_S .. x_1 (`reverse_source`); the annotations stay in source order
        out = self.rnn(
            x,
            attention_mask=attention_mask,
            output_hidden_states=output_hidden_states,
            reverse=self.config.reverse_source,
        )
        return BahdanauEncoderOutput(
            last_hidden_state=out.output,  # (B, S, A)
            hidden_states=(x, *out.layer_outputs) if output_hidden_states else None,
            final_hidden_state=out.hidden.transpose(0, 1),  # (B, L * D, n)
            final_cell_state=out.cell.transpose(0, 1) if out.cell is not None else None,
        )


class BahdanauDecoder(nn.Module):
    """The recurrent decoder, its first state (the bridge) and the output features. With attention, one recurrent
    step per target token (the context c_i depends on s_{i-1}); without, one fused call over the target. See the
    module docstring for the equations."""

    def __init__(self, config: BahdanauConfig):
        super().__init__()
        self.config = config
        n, d, m, layers = (
            config.hidden_size,
            config.decoder_hidden_size,
            config.embedding_size,
            config.num_hidden_layers,
        )
        A = config.annotation_size
        self.embed_tokens = nn.Embedding(config.vocab_size, m)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        if config.bridge == "bahdanau":
            self.init_proj = nn.Linear(n, layers * d)  # W_s
        elif config.bridge == "linear":
            self.bridge_hidden = nn.ModuleList(nn.Linear(A, d) for _ in range(layers))  # W_b^l
            if config.cell_type == "lstm":
                self.bridge_cell = nn.ModuleList(nn.Linear(A, d) for _ in range(layers))  # W_c^l
        self.attention = BahdanauAttention(config) if config.attention_type != "none" else None
        self.reads_context = config.decoder_input == "embedding_and_context"
        self.rnn = RecurrentStack(
            config.cell_type, m + (A if self.reads_context else 0), d, layers, dropout=config.hidden_dropout
        )
        if config.output_layer == "deep":
            deep = config.deep_output_size  # l
            self.deep_output = nn.Linear(d + m + A, 2 * deep if config.maxout else deep)  # [U_o, V_o, C_o]
        self.output_dropout = nn.Dropout(config.output_dropout)

    def final_context(self, annotations: torch.Tensor, source_mask: torch.Tensor | None) -> torch.Tensor:
        """The top encoder layer's final state of each direction, read from the annotations (B, A): [->h_S; <-h_1]
        for a bidirectional encoder, h_S for a unidirectional one (S and 1 in reading order: swapped when the source
        is read reversed)."""
        batch_size, length = annotations.shape[:2]
        n = self.config.hidden_size
        first, last = _first_and_last_real(source_mask, batch_size, length, annotations.device)
        if self.config.reverse_source:
            first, last = last, first
        rows = torch.arange(batch_size, device=annotations.device)
        if not self.config.encoder_bidirectional:
            return annotations[rows, last]
        return torch.cat([annotations[rows, last, :n], annotations[rows, first, n:]], -1)

    fixed_context = final_context  # `attention_type='none'`: c_i = c for every i

    def _per_layer(self, final: torch.Tensor | None, name: str) -> torch.Tensor:
        """(B, L * D, n) final encoder states -> (L, B, A), each layer's directions concatenated."""
        if final is None:
            raise ValueError(
                f"BahdanauDecoder: bridge={self.config.bridge!r} reads every encoder layer's final {name} state; pass "
                "encoder_outputs as the encoder returns them (a BahdanauEncoderOutput or its full tuple), not only "
                "the annotations."
            )
        return final.reshape(final.shape[0], self.config.num_hidden_layers, -1).transpose(0, 1)

    def initial_state(self, encoder_outputs: BahdanauEncoderOutput, source_mask: torch.Tensor | None) -> BahdanauState:
        """s_0 (and c_0) of every layer from the bridge, and what the decoder reads from the source at every step:
        the keys of the score, or the fixed context."""
        config, annotations = self.config, encoder_outputs.last_hidden_state
        batch_size, layers, d = annotations.shape[0], config.num_hidden_layers, config.decoder_hidden_size
        zeros = annotations.new_zeros(layers, batch_size, d)
        cell = zeros if config.cell_type == "lstm" else None
        if config.bridge == "bahdanau":  # tanh(W_s <-h_1), or tanh(W_s h_S) when unidirectional
            summary = self.final_context(annotations, source_mask)[:, -config.hidden_size :]
            hidden = torch.tanh(self.init_proj(summary)).view(batch_size, layers, d).transpose(0, 1).contiguous()
        elif config.bridge == "zeros":
            hidden = zeros
        else:
            hidden = self._per_layer(encoder_outputs.final_hidden_state, "hidden")
            if cell is not None:
                cell = self._per_layer(encoder_outputs.final_cell_state, "cell")
            if config.bridge == "linear":
                hidden = torch.stack([proj(h) for proj, h in zip(self.bridge_hidden, hidden)])
                if cell is not None:
                    cell = torch.stack([proj(c) for proj, c in zip(self.bridge_cell, cell)])
            hidden = hidden.contiguous()
            cell = cell.contiguous() if cell is not None else None
        keys = context = None
        if self.attention is not None:
            keys = self.attention.project_keys(annotations)
        else:
            context = self.fixed_context(annotations, source_mask)
        return BahdanauState(hidden, cell, 0, keys, context)

    def output_features(self, states: torch.Tensor, embedded_prev: torch.Tensor, contexts: torch.Tensor | None):
        """What W_o reads, from s_i (B, T, d), E y_{i-1} (B, T, m) and c_i (B, T, A): the deep output t_i (B, T, l),
        or s_i itself with `output_layer='linear'`."""
        if self.config.output_layer == "linear":
            return self.output_dropout(states)
        t = self.deep_output(torch.cat([states, embedded_prev, contexts], -1))
        t = t.view(*t.shape[:-1], -1, 2).amax(-1) if self.config.maxout else torch.tanh(t)  # maxout over pairs
        return self.output_dropout(t)

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        encoder_outputs: BahdanauEncoderOutput,
        source_mask: torch.Tensor | None = None,
        state: BahdanauState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        sampling_head: nn.Module | None = None,
    ):
        """input_ids (B, T): y_{i-1} for the T steps; encoder_outputs: the annotations (B, S, A) and final states;
        source_mask (B, S), 1 on real tokens; state: what the previous call returned (None: start from the bridge).
        `sampling_head` (W_o, given by the LM head) enables scheduled sampling in training. Returns the output
        features (B, T, l or d), the new state, (alignments (B, T, S), the same as maps (B, 1, T, S)) or None, and
        the hidden states (the embeddings and each layer's s_i) or None."""
        if state is None:
            state = self.initial_state(encoder_outputs, source_mask)
        check_input_ids(input_ids, inputs_embeds, self.embed_tokens.num_embeddings, "decoder_input_ids")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        embedded = self.embedding_dropout(inputs_embeds)  # (B, T, m)
        p = self.config.scheduled_sampling
        sampling = self.training and p > 0 and sampling_head is not None
        if self.attention is None and not sampling:
            return self._forward_fused(embedded, state, output_hidden_states)
        return self._forward_steps(
            embedded,
            encoder_outputs.last_hidden_state,
            source_mask,
            state,
            output_attentions,
            output_hidden_states,
            sampling_head if sampling else None,
        )

    def _forward_fused(self, embedded, state: BahdanauState, output_hidden_states: bool):
        """No attention: the inputs [E y_{i-1}; c] are known for every step up front, so the whole target runs as
        one sequence through each layer. The returned hidden states are the tensors the next layer and the output
        read."""
        steps = embedded.shape[1]
        contexts = state.context[:, None].expand(-1, steps, -1)  # (B, T, A)
        inputs = torch.cat([embedded, contexts], -1) if self.reads_context else embedded
        out = self.rnn(inputs, (state.hidden, state.cell), None, output_hidden_states)
        features = self.output_features(out.output, embedded, contexts)
        new_state = BahdanauState(out.hidden, out.cell, state.seen_tokens + steps, None, state.context)
        hidden_states = (embedded, *out.layer_outputs) if output_hidden_states else None
        return features, new_state, None, hidden_states

    def _forward_steps(
        self, embedded, annotations, source_mask, state, output_attentions, output_hidden_states, sampling_head
    ):
        """One recurrent step per token: c_i reads s_{i-1}. The output features are computed once after the loop,
        from the stacked s_i, E y_{i-1} and c_i.

        Asked for hidden states or alignments, the stack runs once more over the whole target, its inputs
        [E y_{i-1}; c_i] known by then, with c_i = sum_j alpha_ij h_j formed from the returned alignments and the
        same dropout masks: the same values, so the same outputs and gradients, but now every returned tensor
        (each layer's s_i, the alignments) is one the output features are computed from. (A step loop consumes each
        s_i as it goes, so stacking them afterwards would give copies that no gradient reaches.)"""
        mask = source_mask.bool() if source_mask is not None else None
        hidden, cell = state.hidden, state.cell
        steps, replay = embedded.shape[1], output_attentions or output_hidden_states
        dropout_masks = None
        if replay and self.training and self.rnn.num_layers > 1:  # keep-masks drawn once, for the loop and the replay
            shape = (embedded.shape[0], steps, self.rnn.output_size)
            dropout_masks = [self.rnn.dropout(embedded.new_ones(shape)) for _ in range(self.rnn.num_layers - 1)]
        inputs, tops, contexts, weights = [], [], [], []
        for i in range(steps):
            y_prev = embedded[:, i]  # E y_{i-1} (B, m)
            if sampling_head is not None and i > 0:
                # Bengio et al. 2015: with probability p, read a token sampled from the model's own previous
                # output distribution instead of the true one (no gradient through the sample).
                with torch.no_grad():
                    features = self.output_features(tops[-1][:, None], inputs[-1][:, None], contexts[-1][:, None])
                    sampled = torch.multinomial(sampling_head(features[:, 0]).float().softmax(-1), 1).squeeze(-1)
                replace = torch.rand(sampled.shape, device=sampled.device) < self.config.scheduled_sampling
                y_prev = torch.where(replace[:, None], self.embedding_dropout(self.embed_tokens(sampled)), y_prev)
            if self.attention is None:
                context = state.context
            else:
                context, alpha = self.attention(hidden[-1], state.keys, annotations, mask)  # reads s_{i-1}
                weights.append(alpha)
            x = torch.cat([y_prev, context], -1) if self.reads_context else y_prev
            step_masks = [m[:, i : i + 1] for m in dropout_masks] if dropout_masks is not None else None
            step = self.rnn(x[:, None], (hidden, cell), None, dropout_masks=step_masks)
            hidden, cell = step.hidden, step.cell  # s_i of every layer
            inputs.append(y_prev)
            tops.append(step.output[:, 0])
            contexts.append(context)

        read = embedded if sampling_head is None else torch.stack(inputs, 1)  # (B, T, m)
        top, contexts = torch.stack(tops, 1), torch.stack(contexts, 1)  # (B, T, d), (B, T, A)
        new_state = BahdanauState(hidden, cell, state.seen_tokens + steps, state.keys, state.context)
        attention = hidden_states = None
        if replay:
            if weights:
                maps = torch.stack(weights, 1)[:, None]  # (B, 1, T, S): transformers' cross-attention layout
                alignments = maps[:, 0]
                contexts = torch.bmm(alignments, annotations)
                attention = (alignments, maps) if output_attentions else None
            stack_inputs = torch.cat([read, contexts], -1) if self.reads_context else read
            out = self.rnn(stack_inputs, (state.hidden, state.cell), None, True, dropout_masks=dropout_masks)
            top, hidden_states = out.output, (read, *out.layer_outputs)
        features = self.output_features(top, read, contexts)
        return features, new_state, attention, hidden_states if output_hidden_states else None


class BahdanauPreTrainedModel(Seq2SeqPreTrainedMixin, CheckedPreTrainedModel):
    config_class = BahdanauConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["RecurrentLayer"]
    _skip_keys_device_placement = ["past_key_values"]
    _is_stateful = True  # no assisted decoding: a recurrent state cannot be rewound to drop rejected tokens

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the decoder creates its own BahdanauState; generate must not build a key/value cache

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
    """Encoder and decoder; returns the output features (the deep output t_i, or s_i), the decoder state, the
    alignments and the annotations."""

    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: BahdanauConfig):
        super().__init__(config)
        if config.source_vocab_size is not None:
            self._tied_weights_keys = {}  # two vocabularies: the source embeddings are nobody's copy
        self.encoder = BahdanauEncoder(config)
        self.decoder = BahdanauDecoder(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BahdanauEncoderOutput | tuple | None = None,
        past_key_values: BahdanauState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        sampling_head: nn.Module | None = None,
        **kwargs,
    ) -> BahdanauModelOutput:
        """`attention_mask` (B, S) masks source padding (either side). `encoder_outputs`, if given (generate encodes
        once), replace running the encoder. `past_key_values`: the `BahdanauState` a previous call returned. The
        decoder reads left to right, so right-padded targets need no mask: `decoder_attention_mask` is accepted
        and not used."""
        past_key_values = cache_argument(past_key_values, kwargs)
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
            encoder_outputs = BahdanauEncoderOutput.from_tuple(encoder_outputs)
        annotations = encoder_outputs.last_hidden_state  # (B, S, A)
        check_attention_mask(attention_mask, *annotations.shape[:2])
        if (decoder_input_ids is None) == (decoder_inputs_embeds is None):
            raise ValueError("BahdanauModel: pass exactly one of decoder_input_ids or decoder_inputs_embeds.")
        features, state, attention, decoder_hidden_states = self.decoder(
            decoder_input_ids,
            encoder_outputs,
            attention_mask,
            past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            sampling_head=sampling_head,
        )
        return BahdanauModelOutput(
            last_hidden_state=features,
            **cache_field(state if use_cache else None),
            decoder_hidden_states=decoder_hidden_states,
            cross_attentions=(attention[1],) if attention is not None else None,
            encoder_last_hidden_state=annotations,
            encoder_hidden_states=encoder_outputs.hidden_states,
            alignments=attention[0] if attention is not None else None,
        )


class BahdanauForConditionalGeneration(Seq2SeqLMMixin, BahdanauPreTrainedModel, CheckedGenerationMixin):
    """RNNsearch: p(y_i | y_<i, x) = softmax(W_o t_i) (or softmax(W_o s_i) with `output_layer='linear'`), trained
    with cross-entropy (optionally label-smoothed, optionally with scheduled sampling), decoded with `generate()`
    (greedy, sampling, beam search)."""

    _tied_weights_keys = {
        "lm_head.weight": "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight": "model.encoder.embed_tokens.weight",
    }

    def __init__(self, config: BahdanauConfig):
        super().__init__(config)
        if config.source_vocab_size is not None:  # two vocabularies: W_o can only be the target embeddings
            self._tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}
        self.model = BahdanauModel(config)
        features = config.deep_output_size if config.output_layer == "deep" else config.decoder_hidden_size
        self.lm_head = nn.Linear(features, config.vocab_size)  # W_o
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BahdanauEncoderOutput | tuple | None = None,
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
            sampling_head=self.lm_head,
            **kwargs,
        )
        logits, loss = self.logits_and_loss(outputs.last_hidden_state, labels, logits_to_keep, num_items_in_batch)
        return BahdanauLMOutput(
            loss=loss,
            logits=logits,
            **cache_field(cache_of(outputs)),
            decoder_hidden_states=outputs.decoder_hidden_states,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            alignments=outputs.alignments,
        )


__all__ = [
    "BahdanauEncoderOutput",
    "BahdanauState",
    "BahdanauPreTrainedModel",
    "BahdanauModel",
    "BahdanauForConditionalGeneration",
]
