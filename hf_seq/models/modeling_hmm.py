r"""The discrete hidden Markov model (Baum and Petrie 1966; the tutorial of Rabiner 1989) as a language model: a
hidden state z_t in {1, ..., S} follows a Markov chain and emits the token x_t.

$$
p(z_1 = j) = \pi_j, \qquad p(z_t = j \mid z_{t-1} = i) = A_{ij}, \qquad p(x_t = v \mid z_t = j) = B_j(v)
$$

The parameters are unnormalised log-probabilities, normalised by a log-softmax: \(\pi\) over the states, each row of
\(A\) over the states it leads to, each state's emissions \(B_j\) over the vocabulary. The forward algorithm (Rabiner's
equations 19-21), in log space, gives the likelihood of a sequence with every path summed over:

$$
\begin{aligned}
\alpha_1(j) &= \log \pi_j + \log B_j(x_1) \\
\alpha_t(j) &= \log \textstyle\sum_i \exp\big(\alpha_{t-1}(i) + \log A_{ij}\big) + \log B_j(x_t) \\
\log p(x_1, \dots, x_T) &= \log \textstyle\sum_j \exp \alpha_T(j)
\end{aligned}
$$

A language model needs the next token's distribution at every position, so the model carries the normalised
\(\alpha\), its belief about the next state, \(h_t(j) = \log p(z_{t+1} = j \mid x_{\le t})\), starting from
\(h_0 = \log \pi\):

$$
\begin{aligned}
f_t(j) &= h_{t-1}(j) + \log B_j(x_t) - \log \textstyle\sum_k \exp\big(h_{t-1}(k) + \log B_k(x_t)\big)
    && \log p(z_t = j \mid x_{\le t}),\ \text{the filtered state} \\
h_t(j) &= \log \textstyle\sum_i \exp\big(f_t(i) + \log A_{ij}\big) && \text{one step of the chain} \\
\ell_t(v) &= \log \textstyle\sum_j \exp\big(h_t(j) + \log B_j(v)\big) = \log p(x_{t+1} = v \mid x_{\le t})
    && \text{the logits at position } t
\end{aligned}
$$

The normaliser of \(f_t\) is \(\log p(x_t \mid x_{<t}) = \ell_{t-1}(x_t)\), so
\(\alpha_t = f_t + \sum_{s \le t} \ell_{s-1}(x_s)\), and the usual shifted cross-entropy of the logits is
\(-\log p(x_2, \dots, x_T \mid x_1) / (T - 1)\): `labels` work as for any causal LM, and training by gradient descent
maximises the marginal likelihood. Its gradient holds the expected counts Baum-Welch re-estimates from: the gradient
of \(\log p(x_1, \dots, x_T)\) with respect to \(\log B_j(v)\) is the posterior \(p(z_t = j \mid x_{1..T})\) summed
over the positions where \(x_t = v\). To score \(x_1\) as well, put one padded position before it: the belief there
is still \(h_0 = \log \pi\), so its logits are \(\log p(x_1 = v)\).

Each sum over states \(\log \sum_i \exp(u_i + \log M_{ij})\) is computed as \(m + \log \sum_i e^{u_i - m} M_{ij}\) with
\(m = \max_i u_i\): the same log-sum-exp as one matrix product, which keeps O(S) numbers per step for the backward pass
instead of the S x S table a `torch.logsumexp` over (i, j) would hold. The step costs O(S^2) and the logits O(S V)
per token.

The state a call returns (an `HMMState` under `past_key_values`) is \(h\) after its last token, S numbers per
sequence, so generation costs O(S^2 + S V) per token and equals recomputation. A padded position leaves \(h\) as it
was. `last_hidden_state` is \(h_t\) at every position (B, T, S); the chain is the model's one layer, so
`hidden_states` holds `num_hidden_layers + 1 = 2` entries: the emission log-likelihoods \(\log B_j(x_t)\) that the
chain reads, then \(h\).

The input embeddings are the emission table: `get_input_embeddings()` is the (V, S) table whose row v holds the
unnormalised \(\log B_j(v)\), the same module as `get_output_embeddings()` (the tokens are read and predicted with
one table, so `set_input_embeddings` and `resize_token_embeddings` change both). `inputs_embeds` (B, T, S) are rows
of that kind: the model subtracts each state's normaliser over the vocabulary, so
`inputs_embeds=model.get_input_embeddings()(input_ids)` gives what `input_ids` give, and any other row is read as
unnormalised log-likelihoods of an observation under each state (soft evidence, e.g. the log of a mixture of
tokens' emission probabilities).
"""

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import can_return_tuple

from .configuration_hmm import HMMConfig
from .state import CarriedState
from .utils import CheckedGenerationMixin, StatefulCausalLMHead, StatefulPreTrainedModel, cache_field


@dataclass(eq=False)
class HMMState(CarriedState):
    """`log_belief` (B, S): h = log p(z_{t+1} | x_{<=t}), the distribution of the next hidden state given the tokens
    read so far (log pi before any)."""

    log_belief: torch.Tensor
    seen_tokens: int = 0

    batch_dims: ClassVar[dict[str, int]] = {"log_belief": 0}
    holds: ClassVar[str] = "a hidden Markov model keeps a distribution over its states, not keys and values"


def log_matmul(log_x: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """log sum_i exp(log_x[..., i] + log probs[i, j]), as m + log(exp(log_x - m) @ probs) with m = max_i log_x[i], so
    that exp(log_x - m) <= 1. In float32 at least, whatever the autocast: a bf16 product would lose the small
    probabilities."""
    shift = log_x.amax(-1, keepdim=True)
    dtype = torch.promote_types(torch.promote_types(log_x.dtype, probs.dtype), torch.float32)
    with torch.autocast(log_x.device.type, enabled=False):
        product = torch.exp(log_x - shift).to(dtype) @ probs.to(dtype)
    return shift + torch.log(product.clamp_min(torch.finfo(product.dtype).tiny))


class HMMForwardFilter(GradientCheckpointingLayer):
    """The forward algorithm over one call's tokens, holding pi and A as logits."""

    def __init__(self, config: HMMConfig):
        super().__init__()
        self.initial_logits = nn.Parameter(torch.empty(config.num_states))  # log pi, unnormalised
        self.transition_logits = nn.Parameter(torch.empty(config.num_states, config.num_states))  # row i: from i

    def initial_belief(self, batch_size: int) -> torch.Tensor:
        return torch.log_softmax(self.initial_logits, -1).expand(batch_size, -1)  # h_0 = log pi, (B, S)

    def forward(self, emissions: torch.Tensor, belief: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """`emissions` (B, T, S): log B_j(x_t); `belief` (B, S): h before the first of them; `mask` (B, T): 1 on
        real tokens (None: all). Returns h_t at every position (B, T, S)."""
        a = torch.softmax(self.transition_logits, -1)  # once per call, not once per token
        beliefs = []
        for t in range(emissions.shape[1]):
            joint = belief + emissions[:, t]  # log p(z_t, x_t | x_{<t})
            filtered = joint - joint.logsumexp(-1, keepdim=True)  # f_t = log p(z_t | x_{<=t})
            step = log_matmul(filtered, a)  # h_t = log p(z_{t+1} | x_{<=t})
            belief = step if mask is None else torch.where(mask[:, t, None] > 0, step, belief)
            beliefs.append(belief)
        return torch.stack(beliefs, 1)


class HMMPreTrainedModel(StatefulPreTrainedModel):
    config_class = HMMConfig
    state_class = HMMState
    _no_split_modules = ["HMMForwardFilter"]

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, HMMForwardFilter):
            init.normal_(module.initial_logits, mean=0.0, std=std)
            init.normal_(module.transition_logits, mean=0.0, std=std)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)


class HMMModel(HMMPreTrainedModel):
    """The emission table and the chain; returns h_t at every position (B, T, S) and the `HMMState` after the last
    token. `embed_tokens` holds B's logits transposed: row v is the unnormalised log B[:, v], each state's column
    normalised over the vocabulary."""

    def __init__(self, config: HMMConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.num_states)  # B^T, logits
        self.chain = HMMForwardFilter(config)
        self.post_init()

    def emission_probabilities(self) -> torch.Tensor:
        """B (S, V): each state's distribution over the vocabulary, a row."""
        return torch.softmax(self.embed_tokens.weight, 0).t()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: HMMState | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        """`attention_mask` (B, past + T): 1 on real tokens, 0 on padding (which leaves the belief unchanged).
        `past_key_values`: the state a previous call returned (None: the sequence starts here, from pi).
        `inputs_embeds` (B, T, S), in place of `input_ids`: unnormalised log B_j(x_t), as `embed_tokens` looks up."""
        inputs = self.stateful_inputs(
            input_ids, inputs_embeds, past_key_values, attention_mask, use_cache, output_hidden_states, kwargs
        )
        num_states = self.config.num_states
        if inputs.embeds.shape[-1] != num_states:  # a narrower row would broadcast over the states unnoticed
            raise ValueError(
                f"{type(self).__name__}: inputs_embeds must have shape (batch_size, sequence_length, num_states="
                f"{num_states}), one emission logit a state, got {tuple(inputs.embeds.shape)}."
            )
        # the looked-up (or given) logits minus each state's normaliser over the vocabulary: log B_j(x_t), (B, T, S)
        emissions = inputs.embeds - self.embed_tokens.weight.logsumexp(0)
        if inputs.state is None:
            belief = self.chain.initial_belief(emissions.shape[0])
        else:
            belief = inputs.state.log_belief
        beliefs = self.chain(emissions, belief, inputs.mask)
        return BaseModelOutputWithPast(
            last_hidden_state=beliefs,
            **cache_field(inputs.state_after(beliefs[:, -1]) if inputs.use_cache else None),
            hidden_states=(emissions, beliefs) if inputs.output_hidden_states else None,
        )


class HMMForCausalLM(StatefulCausalLMHead, HMMPreTrainedModel, CheckedGenerationMixin):
    """l_t(v) = log sum_j exp(h_t(j) + log B_j(v)): the next token's log-probabilities, from the emission table the
    model reads its tokens with (no separate output layer)."""

    def __init__(self, config: HMMConfig):
        super().__init__(config)
        self.model = HMMModel(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.model.embed_tokens

    def set_output_embeddings(self, new_embeddings):
        self.model.embed_tokens = new_embeddings

    def head_logits(self, outputs, keep) -> torch.Tensor:
        return log_matmul(outputs.last_hidden_state[:, keep, :], self.model.emission_probabilities())  # (B, T, V)


__all__ = ["HMMState", "HMMPreTrainedModel", "HMMModel", "HMMForCausalLM"]
