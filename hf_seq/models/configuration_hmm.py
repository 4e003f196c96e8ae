"""Configuration of the discrete hidden Markov model language model (Baum and Petrie 1966; Rabiner 1989)."""

from typing import ClassVar

from transformers import PreTrainedConfig

from .config_utils import check_common_values, check_positive, fill_auto_map, resolve_options


class HMMConfig(PreTrainedConfig):
    """A hidden Markov model over tokens: a hidden state z_t in {1..S} follows a Markov chain, each state emits a token.

        p(z_1 = j) = pi_j          p(z_t = j | z_{t-1} = i) = A_ij          p(x_t = v | z_t = j) = B_jv

    - `num_states` (S, also read as `hidden_size`): the hidden states. The model holds S + S^2 + S V numbers: pi, A
      and the emission table B, whose V x S transpose is the token table `embed_tokens` (token v -> log B[:, v]).
    - `initializer_range`: the standard deviation of the unnormalised log-probabilities (logits) pi, A and B start
      from. Larger than a network's (0.02): states that start alike get the same gradient and stay alike, so a
      spread of about a nat between them is what lets them specialise.
    - `tie_word_embeddings` is always True: the tokens are read and predicted with the one emission table B.
    - `num_hidden_layers` is always 1: the chain over the states is the model's one layer.
    - There is no dropout, no position limit and no fused loss: the logits are log p(x_{t+1} | x_{<=t}) from the
      emission table itself (a log-sum-exp over the states, not one linear layer).
    """

    model_type = "hf_seq_hmm"
    attribute_map = {"hidden_size": "num_states"}
    num_hidden_layers: ClassVar[int] = 1  # read like any config's (hidden_states: layers + 1); not a field

    vocab_size: int = 10000
    num_states: int = 128
    initializer_range: float = 1.0
    tie_word_embeddings: bool = True
    use_cache: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2

    def __post_init__(self, **kwargs):
        layers = kwargs.pop("num_hidden_layers", 1)  # a network's depth: an HMM would keep it and ignore it
        if layers != 1:
            raise ValueError(
                f"HMMConfig: num_hidden_layers={layers!r} is not supported; allowed values: [1] (a hidden Markov "
                "model is one chain of states: size it with num_states)."
            )
        resolve_options(self, kwargs)
        check_positive(self, "vocab_size", "num_states")
        if not self.tie_word_embeddings:
            raise ValueError(
                "HMMConfig: tie_word_embeddings=False is not supported; allowed values: [True] (a hidden Markov model "
                "reads and predicts tokens with one emission table)."
            )
        super().__post_init__(**kwargs)
        check_common_values(self)
        fill_auto_map(self)


__all__ = ["HMMConfig"]
