r"""The fixed-window neural language model of Bengio, Ducharme, Vincent and Jauvin (2003), "A Neural Probabilistic
Language Model": the n-gram's Markov assumption (only the previous n-1 words count) with the count table replaced
by learned word vectors and a small network, so that similar contexts share statistics.

$$
\begin{aligned}
x &= (C(w_{t-1}), C(w_{t-2}), \dots, C(w_{t-n+1})) \\
y &= b + W x + U \tanh(d + H x) \\
P(w_t = i \mid w_{t-1}, \dots, w_{t-n+1}) &= \mathrm{softmax}(y)_i
\end{aligned}
$$

C is the embedding table (m features a word, so x holds (n-1) m features); W = 0 without direct connections.

Position t predicts token t+1 from the window ending at t; positions before the first token and padding read a
zero vector. A call returns the last n-1 embeddings (a `WindowState`, the `QueueState` of models/state.py, under
`past_key_values`) and accepts them back, so generation costs one window per token: each step sees the last n-1
tokens and nothing older.

The model's layers are its tanh layers, and x is their embedding output: with `output_hidden_states=True` it returns
`num_hidden_layers + 1` states, as transformers' models do, x first (the n-1 embeddings side by side, (n-1) m wide,
also returned as `window` at every call), then each tanh layer's output (h wide); the last is `last_hidden_state`.
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import can_return_tuple

from .configuration_window import WindowConfig
from .prediction import ValuePredictionHead
from .state import WindowState
from .utils import CheckedGenerationMixin, StatefulCausalLMHead, StatefulPreTrainedModel, cache_field


@dataclass
class WindowModelOutput(BaseModelOutputWithPast):
    """`window`: x at every position, (B, T, (n-1) * m), which the first tanh layer and the direct connections read.
    `hidden_states`: x, then each tanh layer's output (B, T, h): `num_hidden_layers + 1` entries."""

    window: torch.FloatTensor | None = None


class WindowHiddenLayer(GradientCheckpointingLayer):
    """h = tanh(d + H x)."""

    def __init__(self, input_size: int, hidden_size: int, dropout: float):
        super().__init__()
        self.linear = nn.Linear(input_size, hidden_size)  # H, d
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(torch.tanh(self.linear(x)))


class WindowPreTrainedModel(StatefulPreTrainedModel):
    config_class = WindowConfig
    state_class = WindowState
    _no_split_modules = ["WindowHiddenLayer"]


class WindowModel(WindowPreTrainedModel):
    """The embedding table C and the tanh layers; returns the last layer's states (B, T, h), x at every position
    (`window`) and the `WindowState` after the last token. `hidden_states`: x, the layers' input, then every tanh
    layer's output."""

    def __init__(self, config: WindowConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_size)  # C
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)
        sizes = [config.context_size * config.embedding_size] + [config.hidden_size] * config.num_hidden_layers
        self.layers = nn.ModuleList(
            WindowHiddenLayer(sizes[i], sizes[i + 1], config.hidden_dropout) for i in range(config.num_hidden_layers)
        )
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: WindowState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> WindowModelOutput:
        """`attention_mask` (B, past + T): 1 on real tokens, 0 on padding (a padded position reads as no word).
        `past_key_values`: the state a previous call returned (None: the sequence starts here)."""
        inputs = self.stateful_inputs(
            input_ids, inputs_embeds, past_key_values, attention_mask, use_cache, output_hidden_states, kwargs
        )
        embeds = inputs.embeds if inputs.mask is None else inputs.embeds * inputs.mask[..., None]
        batch_size, seq_len, width = embeds.shape
        n_1 = self.config.context_size
        if inputs.state is None:
            before = embeds.new_zeros(batch_size, n_1, width)  # no word before the first token
        else:
            (before,) = inputs.state.conv_states
        sequence = torch.cat([before.to(embeds.dtype), embeds], 1)  # (B, n-1 + T, m)
        # the window ending at each new token, newest first as in the paper: (B, T, m, n-1) -> (B, T, (n-1) * m)
        windows = sequence.unfold(1, n_1, 1)[:, 1:].flip(-1)
        x = self.embedding_dropout(windows.transpose(-1, -2).reshape(batch_size, seq_len, n_1 * width))

        hidden_states, all_hidden_states = x, [x]  # the embedding output: (n-1) * m wide, not h
        for layer in self.layers:
            hidden_states = layer(hidden_states)
            all_hidden_states.append(hidden_states)
        return WindowModelOutput(
            last_hidden_state=hidden_states,
            **cache_field(inputs.state_after((sequence[:, -n_1:],)) if inputs.use_cache else None),
            hidden_states=tuple(all_hidden_states) if inputs.output_hidden_states else None,
            window=x,
        )


class WindowForCausalLM(StatefulCausalLMHead, WindowPreTrainedModel, CheckedGenerationMixin):
    """y = b + W x + U tanh(d + H x), the next-token logits at every position.

    `lm_head` is U and b; with tied embeddings U = C^T P (`output_projection` is P, present when h != m);
    `direct` is W (present with `direct_connections=True`)."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: WindowConfig):
        super().__init__(config)
        self.model = WindowModel(config)
        head_size = config.hidden_size
        self.output_projection = None
        if config.tie_word_embeddings and config.hidden_size != config.embedding_size:
            self.output_projection = nn.Linear(config.hidden_size, config.embedding_size, bias=False)
            head_size = config.embedding_size
        self.lm_head = nn.Linear(head_size, config.vocab_size)
        self.direct = None
        if config.direct_connections:
            self.direct = nn.Linear(config.context_size * config.embedding_size, config.vocab_size, bias=False)
        self.post_init()

    def head_features(self, outputs, keep) -> torch.Tensor:
        hidden_states = outputs.last_hidden_state[:, keep, :]
        return self.output_projection(hidden_states) if self.output_projection is not None else hidden_states

    def head_logits(self, outputs, keep) -> torch.Tensor:
        logits = self.lm_head(self.head_features(outputs, keep))  # b + U tanh(d + H x)
        if self.direct is not None:
            logits = logits + self.direct(outputs.window[:, keep, :])  # + W x
        return logits

    def output_layer(self, outputs):
        """With direct connections, b + U a + W x is one linear map of [a; x] with weights [U, W]."""
        features, weight, bias = super().output_layer(outputs)
        if self.direct is None:
            return features, weight, bias
        return torch.cat([features, outputs.window], -1), torch.cat([weight, self.direct.weight], -1), bias


class WindowForPrediction(ValuePredictionHead, WindowPreTrainedModel):
    """Forecasts a real-valued series with the fixed-window MLP: a neural AR(n-1) model: lagged values in place of token embeddings, a Student-t (or
    normal) distribution over the next value in place of the softmax (models/prediction.py)."""

    backbone_class = WindowModel


__all__ = ["WindowState", "WindowPreTrainedModel", "WindowModel", "WindowForCausalLM", "WindowForPrediction"]
