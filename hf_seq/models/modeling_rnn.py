r"""Recurrent language models and classifiers: Elman (1990), the gated Elman network, GRU (Cho et al. 2014) and
LSTM (Hochreiter and Schmidhuber 1997) over token embeddings, built on the shared recurrent layers
(recurrent.py states each cell's equations).

$$
\begin{aligned}
h^0_t &= E[x_t] \qquad \text{embedding dropout} \\
h^l_t &= \mathrm{cell}_l(h^{l-1}_t,\, h^l_{t-1}) \qquad \text{dropout between layers, not through time} \\
p(x_{t+1} \mid x_{\le t}) &= \mathrm{softmax}(W_{out} P h^L_t + b) \qquad W_{out} = E \text{ when tied}
\end{aligned}
$$

P projects the top layer's state to the embedding size where the two differ.

A call returns the state after its last token (a `RecurrentState`, under `past_key_values`) and accepts it back:
generation costs one step per token whatever the context length, and training can carry the state across batches
(truncated backpropagation through time, `state.detach()` between them).
"""

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.utils import can_return_tuple

from .configuration_rnn import RNNConfig
from .decoding import TransposedWeightsDecoding
from .prediction import ValuePredictionHead
from .recurrent import GatedElman, RecurrentStack
from .state import RecurrentState
from .utils import (
    CheckedGenerationMixin,
    StatefulCausalLMHead,
    StatefulPreTrainedModel,
    cache_field,
    cache_of,
    sequence_classification_loss,
)


class RNNPreTrainedModel(StatefulPreTrainedModel):
    config_class = RNNConfig
    state_class = RecurrentState
    _no_split_modules = ["RecurrentLayer"]

    def _init_weights(self, module):
        if isinstance(module, (nn.RNNBase, GatedElman)):  # PyTorch's own recurrent init: U(-1/sqrt(H), 1/sqrt(H))
            bound = module.hidden_size**-0.5
            for param in module.parameters():
                init.uniform_(param, -bound, bound)
        else:  # linears and embeddings N(0, initializer_range), biases 0
            super()._init_weights(module)


class RNNModel(RNNPreTrainedModel):
    """Embeddings and the recurrent stack; returns the top layer's states (B, T, D*H), zero on padding, and the
    `RecurrentState` after the last token."""

    def __init__(self, config: RNNConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        self.rnn = RecurrentStack(
            config.cell_type,
            config.embedding_size,
            config.hidden_size,
            config.num_hidden_layers,
            nonlinearity=config.nonlinearity,
            dropout=config.hidden_dropout,
            bidirectional=config.bidirectional,
        )
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: RecurrentState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """`attention_mask` (B, past + T): 1 on real tokens, 0 on padding, which may be on either side: the state
        skips pads. `past_key_values`: the state a previous call returned (None: zeros)."""
        inputs = self.stateful_inputs(
            input_ids, inputs_embeds, past_key_values, attention_mask, use_cache, output_hidden_states, kwargs
        )
        hidden_states = self.embedding_dropout(inputs.embeds)
        state = inputs.state.to_tuple() if inputs.state is not None else None
        out = self.rnn(hidden_states, state, inputs.mask, output_hidden_states=inputs.output_hidden_states)
        return BaseModelOutputWithPast(
            last_hidden_state=out.output,
            **cache_field(inputs.state_after(out.hidden, out.cell) if inputs.use_cache else None),
            hidden_states=(hidden_states, *out.layer_outputs) if inputs.output_hidden_states else None,
        )


class RNNForCausalLM(TransposedWeightsDecoding, StatefulCausalLMHead, RNNPreTrainedModel, CheckedGenerationMixin):
    """The recurrent language model (the design of Mikolov et al. 2010 and Zaremba et al. 2014): predicts token
    t+1 from the top layer's state at t, through the (tied) output embedding. `generate()` on CPU reads the output
    projection as a contiguous W^T copy (models/decoding.py); the one-step update is already one fused cell kernel
    per layer (`RecurrentLayer._one_step`), which compiling would not fuse further."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: RNNConfig):
        if config.bidirectional:
            raise ValueError(
                "RNNForCausalLM: bidirectional=True is not allowed for a language model. The backward direction reads "
                "the tokens to the right of each position, the very tokens the model is trained to predict, so the "
                "loss would leak the answer and generation could not run one token at a time. Use "
                "bidirectional=False, or a bidirectional encoder with RNNForSequenceClassification or "
                "RNNForTokenClassification."
            )
        super().__init__(config)
        self.model = RNNModel(config)
        self.output_dropout = nn.Dropout(config.output_dropout)
        # Tying needs the output layer to read embedding_size features; project the states if they differ.
        self.output_projection = None
        if config.embedding_size != config.hidden_size:
            self.output_projection = nn.Linear(config.hidden_size, config.embedding_size, bias=False)
        self.lm_head = nn.Linear(config.embedding_size, config.vocab_size)
        self.post_init()

    def head_features(self, outputs, keep) -> torch.Tensor:
        hidden_states = self.output_dropout(outputs.last_hidden_state[:, keep, :])
        if self.output_projection is not None:
            hidden_states = self.output_projection(hidden_states)
        return hidden_states


def _classifier_dropout(config: RNNConfig) -> float:
    return config.classifier_dropout if config.classifier_dropout is not None else config.output_dropout


def _mask_from_pad_tokens(input_ids, attention_mask, pad_token_id):
    """Without a mask, pad tokens in the input are taken as padding, so they never enter the state."""
    if attention_mask is None and input_ids is not None and pad_token_id is not None:
        return (input_ids != pad_token_id).long()
    return attention_mask


class RNNForSequenceClassification(RNNPreTrainedModel):
    """Classifies a sequence from a summary of the top layer's states (`config.classifier_pooling`): the final state
    of each direction (the state at the last real token, and reading backwards at the first), or the mean or max over
    the real tokens."""

    def __init__(self, config: RNNConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = RNNModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.score = nn.Linear(self.model.rnn.output_size, config.num_labels)
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
        attention_mask = _mask_from_pad_tokens(input_ids, attention_mask, self.config.pad_token_id)
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, use_cache=True, **kwargs
        )
        states = outputs.last_hidden_state  # (B, T, D*H), zeros on padding
        pooling = self.config.classifier_pooling
        if pooling == "last":
            directions = self.model.rnn.num_directions
            final = cache_of(outputs).hidden[-directions:]  # (D, B, H): the top layer, each direction
            pooled = final.transpose(0, 1).reshape(states.shape[0], -1)  # (B, D*H)
        else:
            real = torch.ones_like(states[..., :1]) if attention_mask is None else attention_mask[..., None].to(states)
            if pooling == "mean":
                pooled = states.sum(1) / real.sum(1).clamp(min=1)
            else:
                pooled = states.masked_fill(real == 0, torch.finfo(states.dtype).min).amax(1)
        logits = self.score(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = sequence_classification_loss(self.loss_function, logits, labels, self.config, num_items_in_batch)
        return SequenceClassifierOutputWithPast(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


class RNNForTokenClassification(RNNPreTrainedModel):
    """Labels every token from the top layer's state there (with `bidirectional=True`, from both its sides)."""

    def __init__(self, config: RNNConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = RNNModel(config)
        self.dropout = nn.Dropout(_classifier_dropout(config))
        self.classifier = nn.Linear(self.model.rnn.output_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        attention_mask = _mask_from_pad_tokens(input_ids, attention_mask, self.config.pad_token_id)
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, use_cache=False, **kwargs
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, config=self.config, **kwargs)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


class RNNForPrediction(ValuePredictionHead, RNNPreTrainedModel):
    """Forecasts a real-valued series with the recurrent network (DeepAR's LSTM, Salinas et al. 2020, with cell_type=lstm): lagged values in place of token embeddings, a Student-t (or
    normal) distribution over the next value in place of the softmax (models/prediction.py)."""

    backbone_class = RNNModel


__all__ = [
    "RNNPreTrainedModel",
    "RNNModel",
    "RNNForCausalLM",
    "RNNForSequenceClassification",
    "RNNForTokenClassification",
    "RNNForPrediction",
]
