"""Normalisation, the residual connection, position-wise feed-forward and word dropout layers shared by the
families."""

import torch
from torch import nn

NORM_TYPES = ("layernorm", "rmsnorm")
ACTIVATIONS = ("gelu", "gelu_new", "relu", "swiglu")


class WordDropout(nn.Module):
    """Drops whole tokens: in training, each token's embedding vector is zeroed with probability p (and the kept ones
    scaled by 1 / (1 - p)), so the model cannot lean on any one source word. Gal and Ghahramani (2016) drop word
    types; Sennrich and Zhang (2019, "Revisiting Low-Resource Neural Machine Translation") drop source tokens and
    found it among the settings that matter most on small data. Identity in evaluation."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, embedded: torch.Tensor) -> torch.Tensor:  # (B, T, C)
        if not self.training or self.p == 0:
            return embedded
        keep = torch.empty(embedded.shape[:-1] + (1,), device=embedded.device).bernoulli_(1 - self.p)
        return embedded * keep.to(embedded.dtype) / (1 - self.p)


def make_norm(norm_type: str, size: int, eps: float) -> nn.Module:
    """LayerNorm (Ba et al. 2016) or RMSNorm (Zhang and Sennrich 2019: no centring, no bias)."""
    if norm_type == "layernorm":
        return nn.LayerNorm(size, eps=eps)
    if norm_type == "rmsnorm":
        return nn.RMSNorm(size, eps=eps)
    raise ValueError(f"norm_type={norm_type!r} is not supported; allowed values: {list(NORM_TYPES)}.")


class ResidualLayer(nn.Module):
    """A Transformer layer: sub-layers (attention, feed-forward), each inside a residual connection (Vaswani et al.
    2017, section 3.1): LN(x + Dropout(Sublayer(x))) post-LN, x + Dropout(Sublayer(LN(x))) pre-LN (GPT-2; Xiong et
    al. 2020: no warm-up needed). Each sub-layer has its own norm, applied before or after:

        x = self.residual(x, sublayer(self.sublayer_input(x, norm)), norm)

    A block subclasses it after transformers' GradientCheckpointingLayer, which is not imported here: the
    configuration files import this module, and importing transformers' layers imports its Auto classes, which
    register hf-seq's configurations while they are being imported."""

    def __init__(self, norm_position: str, dropout: float):
        super().__init__()
        self.pre_norm = norm_position == "pre"
        self.dropout = nn.Dropout(dropout)

    def sublayer_input(self, x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        return norm(x) if self.pre_norm else x

    def residual(self, x: torch.Tensor, sublayer_output: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        x = x + self.dropout(sublayer_output)
        return x if self.pre_norm else norm(x)


class FeedForward(nn.Module):
    """FFN(x) = W_2 act(W_1 x + b_1) + b_2 (Vaswani et al. 2017, eq. 2), or with `swiglu`
    W_2 (silu(W_g x) * W_1 x) (Shazeer 2020, "GLU Variants Improve Transformer").

    `gelu` is the exact GELU, `gelu_new` its tanh approximation (the one GPT-2 uses). `dropout` acts on the
    activations (Marian's activation dropout); the residual dropout on the output belongs to the block."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        activation: str,
        dropout: float = 0.0,
        bias: bool = True,
    ):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r} is not supported; allowed values: {list(ACTIVATIONS)}.")
        self.activation = activation
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias) if activation == "swiglu" else None
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up_proj(x)
        if self.activation == "swiglu":
            h = nn.functional.silu(self.gate_proj(x)) * h
        elif self.activation == "relu":
            h = nn.functional.relu(h)
        else:
            h = nn.functional.gelu(h, approximate="tanh" if self.activation == "gelu_new" else "none")
        return self.down_proj(self.dropout(h))


class Router(nn.Linear):
    """The router of a mixture of experts: its logits W_r x (tokens, experts), one per expert (no bias). An nn.Linear
    with a class of its own, so that a model can record its outputs for the load-balancing loss."""

    def __init__(self, hidden_size: int, num_experts: int):
        super().__init__(hidden_size, num_experts, bias=False)


class MixtureOfExperts(nn.Module):
    r"""A sparse mixture of feed-forward experts (Shazeer et al. 2017; Mixtral's top-k routing, Jiang et al. 2024).
    Each token x goes to the k experts its router ranks highest:

    $$
    \begin{aligned}
    r &= W_r x \qquad \text{router logits, one per expert (} W_r \text{: the layer named gate, no bias)} \\
    p &= \mathrm{softmax}(r), \quad S = \text{top-}k(p) \qquad \text{the } k \text{ most probable experts} \\
    w_i &= \frac{p_i}{\sum_{j \in S} p_j} \quad (i \in S) \qquad \text{a softmax over the } k \text{ chosen logits} \\
    y &= \textstyle\sum_{i \in S} w_i E_i(x) \qquad E_i \text{: a FeedForward, the dense block's MLP}
    \end{aligned}
    $$

    With k = 1 every weight is 1: the router then learns from the load-balancing loss alone (as in Mixtral).
    `forward` returns y; the router logits (tokens, experts) that loss needs (`load_balancing_loss`) are the outputs
    of the `Router`, which a model records (`_can_record_outputs`), as Mixtral records its router's.

    Each expert runs once on the tokens routed to it (gathered, then added back with index_add). A compiled graph
    cannot hold that data-dependent gather, so under torch.compile every expert runs on every token and the
    unchosen ones are weighted 0: the same sum in the same order, E / k times the arithmetic (a one-token decode
    step reads every expert's weights either way)."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        activation: str,
        num_experts: int,
        top_k: int,
        bias: bool = True,
    ):
        super().__init__()
        self.top_k = top_k
        self.gate = Router(hidden_size, num_experts)
        self.experts = nn.ModuleList(
            FeedForward(hidden_size, intermediate_size, activation, bias=bias) for _ in range(num_experts)
        )

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For tokens x (T, C): the router logits (T, E), and the (T, E) weights w and choices S defined above."""
        router_logits = self.gate(x)
        probs = nn.functional.softmax(router_logits.float(), dim=-1)
        top_probs, top_experts = probs.topk(self.top_k, dim=-1)  # (T, k)
        top_probs = top_probs / top_probs.sum(-1, keepdim=True)
        weights = torch.zeros_like(probs).scatter(1, top_experts, top_probs)
        chosen = torch.zeros_like(probs, dtype=torch.bool).scatter(1, top_experts, True)
        return router_logits, weights.to(x.dtype), chosen

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states.reshape(-1, hidden_states.shape[-1])  # (B, T, C) -> (B*T, C)
        _, weights, chosen = self.route(x)
        y = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            if torch.compiler.is_compiling():
                y = y + weights[:, i, None] * expert(x)
                continue
            tokens = chosen[:, i].nonzero().squeeze(1)
            y.index_add_(0, tokens, weights[tokens, i, None] * expert(x[tokens]))
        return y.view_as(hidden_states)


def make_feed_forward(config) -> nn.Module:
    """The position-wise block of a Transformer layer: the dense FeedForward, or with `config.num_local_experts`
    >= 1 a MixtureOfExperts of that many FeedForwards, each token routed to `config.num_experts_per_tok`."""
    args = (config.hidden_size, config.intermediate_size, config.hidden_act)
    num_experts = getattr(config, "num_local_experts", 0)
    if num_experts:
        return MixtureOfExperts(*args, num_experts, config.num_experts_per_tok, bias=config.mlp_bias)
    return FeedForward(*args, bias=config.mlp_bias)


def load_balancing_loss(
    router_logits: tuple[torch.Tensor, ...], top_k: int, token_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The Switch Transformer's auxiliary loss (Fedus et al. 2022, eqs. 4-6) with top-k routing, as Mixtral
    computes it: over the T tokens of every layer (the router logits (tokens, N) of each), for N experts,

        f_i = (1 / T) sum_t [i in top-k(p_t)]       the share of tokens routed to expert i (sum_i f_i = k)
        P_i = (1 / T) sum_t p_t,i                    the mean router probability of expert i, p_t = softmax(r_t)
        aux = N sum_i f_i P_i                        k when routing is uniform, up to N k when one expert takes all

    f counts choices, so the gradient reaches the router through P only. `token_mask` (B, T) (1: a real token)
    leaves padding out of both means."""
    num_experts = router_logits[0].shape[-1]
    probs = torch.cat([nn.functional.softmax(r.float(), dim=-1) for r in router_logits])  # (layers * T, N)
    chosen = torch.zeros_like(probs).scatter(1, probs.topk(top_k, dim=-1).indices, 1.0)
    if token_mask is None:
        token_weight = torch.ones_like(probs[:, 0])
    else:
        token_weight = token_mask.reshape(-1).to(probs).repeat(len(router_logits))
    count = token_weight.sum()
    routed_share = (chosen * token_weight[:, None]).sum(0) / count  # f
    mean_prob = (probs * token_weight[:, None]).sum(0) / count  # P
    return num_experts * (routed_share * mean_prob).sum()
