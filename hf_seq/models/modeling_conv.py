r"""A language model made of causal dilated convolutions: the stack of WaveNet (van den Oord et al. 2016, "WaveNet: A
Generative Model for Raw Audio"), reading token embeddings where WaveNet reads audio samples.

Layer l, dilation d_l (1, 2, 4, ..., doubling within a cycle), kernel k (WaveNet: 2), input x_l (B, T, C):

$$
\begin{aligned}
z_l &= \tanh(W_{f,l} * x_l) \odot \sigma(W_{g,l} * x_l) \qquad *\text{: causal convolution, } k \text{ taps spaced } d_l \text{ apart} \\
x_{l+1} &= x_l + R_l z_l \qquad R_l, S_l\text{: } 1 \times 1 \text{ convolutions (position-wise linear maps)} \\
s_l &= S_l z_l \\
\text{logits} &= U\, \mathrm{ReLU}(P\, \mathrm{ReLU}(\textstyle\sum_l s_l)) + b
\end{aligned}
$$

The stack sees R = (k - 1) * sum_l d_l + 1 tokens (`config.receptive_field`) and no more. Padding reads as zeros at
every layer's input, as positions before the first token do, so a padded row computes what it computes alone.

Generation (Paine et al. 2016, "Fast Wavenet Generation Algorithm"): each layer keeps a queue of its last (k-1) d_l
inputs, R - 1 vectors in all (a `ConvState`, the `QueueState` of models/state.py, returned under the cache field and
taken back). A new token then costs one k-tap convolution per layer, whatever the length of the context, where
recomputing would redo the whole prefix.
"""

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import can_return_tuple

from .configuration_conv import ConvConfig
from .convolution import CausalConv1d
from .prediction import ValuePredictionHead
from .state import ConvState
from .utils import CheckedGenerationMixin, StatefulCausalLMHead, StatefulPreTrainedModel, cache_field


class ConvLayer(GradientCheckpointingLayer):
    """z = tanh(W_f * x) ⊙ σ(W_g * x); returns (x + R z, S z) and the next queue. The last layer has no R: its
    residual output would feed nothing, only its skip reaches the output."""

    def __init__(self, config: ConvConfig, dilation: int, is_last: bool):
        super().__init__()
        # W_f and W_g as one convolution with 2C outputs: one queue per layer serves both
        self.dilated_conv = CausalConv1d(config.hidden_size, 2 * config.hidden_size, config.kernel_size, dilation)
        self.dropout = nn.Dropout(config.dropout)
        self.residual_proj = None if is_last else nn.Linear(config.hidden_size, config.hidden_size)  # R
        self.skip_proj = nn.Linear(config.hidden_size, config.skip_channels)  # S

    def forward(self, x: torch.Tensor, queue: torch.Tensor | None = None):
        """x (B, T, C); `queue` (B, (k-1) d, C): this layer's inputs before x (None: the sequence starts here)."""
        y, queue = self.dilated_conv(x, queue)
        filter_, gate = y.chunk(2, dim=-1)
        z = self.dropout(torch.tanh(filter_) * torch.sigmoid(gate))
        residual = None if self.residual_proj is None else x + self.residual_proj(z)
        return residual, self.skip_proj(z), queue


class ConvPreTrainedModel(StatefulPreTrainedModel):
    config_class = ConvConfig
    state_class = ConvState
    _no_split_modules = ["ConvLayer"]


class ConvModel(ConvPreTrainedModel):
    """Token embeddings (B, T, C), the gated dilated layers, and ReLU(P ReLU(sum of skips)) (B, T, C): the input of
    the output head. `hidden_states` (with `output_hidden_states=True`): every layer's input, then that output."""

    def __init__(self, config: ConvConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        dilations = config.dilations
        self.layers = nn.ModuleList(
            ConvLayer(config, dilation, is_last=i == len(dilations) - 1) for i, dilation in enumerate(dilations)
        )
        self.output_proj = nn.Linear(config.skip_channels, config.hidden_size)  # P
        self.post_init()

    def _layer_queues(self, state: ConvState | None, batch_size: int) -> tuple[torch.Tensor | None, ...]:
        """Each layer's queue (None for a sequence that starts here), from a state this model made."""
        if state is None:
            return (None,) * len(self.layers)
        held = [tuple(queue.shape) for queue in state.conv_states]
        expected = [(batch_size, layer.dilated_conv.queue_size, self.config.hidden_size) for layer in self.layers]
        if held != expected:
            raise ValueError(
                f"ConvModel: the ConvState holds queues of {held}, this model keeps {expected}, (batch, (k-1) d, "
                f"hidden_size) for each layer: its receptive field is {self.config.receptive_field} tokens. A state "
                "from another batch or another configuration cannot continue here."
            )
        return state.conv_states

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: ConvState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """`attention_mask` (B, past + T): 1 on real tokens, 0 on padding (which every layer reads as zeros).
        `past_key_values`: the `ConvState` a previous call returned (None: the sequence starts here)."""
        inputs = self.stateful_inputs(
            input_ids, inputs_embeds, past_key_values, attention_mask, use_cache, output_hidden_states, kwargs
        )
        hidden_states, skips, all_hidden_states, queues = inputs.embeds, 0, [], []
        for layer, queue in zip(self.layers, self._layer_queues(inputs.state, hidden_states.shape[0])):
            all_hidden_states.append(hidden_states)
            if inputs.mask is not None:  # padding reads as no input, like t < 0
                hidden_states = hidden_states * inputs.mask[..., None]
            hidden_states, skip, queue = layer(hidden_states, queue)
            skips = skips + skip
            queues.append(queue)
        output = nn.functional.relu(self.output_proj(nn.functional.relu(skips)))  # ReLU(P ReLU(sum_l s_l))
        all_hidden_states.append(output)
        return BaseModelOutputWithPast(
            last_hidden_state=output,
            **cache_field(inputs.state_after(tuple(queues)) if inputs.use_cache else None),
            hidden_states=tuple(all_hidden_states) if inputs.output_hidden_states else None,
        )


class ConvForCausalLM(StatefulCausalLMHead, ConvPreTrainedModel, CheckedGenerationMixin):
    """logits = U ReLU(P ReLU(sum_l s_l)) + b at every position: the next-token logits. `lm_head` is U and b (WaveNet's
    last 1x1 convolution); with tied embeddings U is the token embedding table."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: ConvConfig):
        super().__init__(config)
        self.model = ConvModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)
        self.post_init()


class ConvForPrediction(ValuePredictionHead, ConvPreTrainedModel):
    """Forecasts a real-valued series with WaveNet's dilated causal convolutions (van den Oord et al. 2016): lagged values in place of token embeddings, a Student-t (or
    normal) distribution over the next value in place of the softmax (models/prediction.py)."""

    backbone_class = ConvModel


__all__ = ["ConvState", "ConvLayer", "ConvPreTrainedModel", "ConvModel", "ConvForCausalLM", "ConvForPrediction"]
