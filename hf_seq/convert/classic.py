"""A plain PyTorch RNN encoder-decoder (Sutskever et al. 2014; Cho et al. 2014) -> the Bahdanau family.

No transformers class exists for these models, so the conversion reads a state dict, one way: `from_state_dict`.
The Bahdanau family's flags represent the classic models exactly (see `from_state_dict` for the mapping)."""

import torch

from ..models.configuration_bahdanau import BahdanauConfig
from ..models.modeling_bahdanau import BahdanauForConditionalGeneration
from .base import Rule

# Where a hand-written classic encoder-decoder keeps its weights: the layout of the PyTorch seq2seq tutorial, with
# multi-layer nn.GRU / nn.LSTM modules. Pass `names=` to `from_state_dict` for other module names.
CLASSIC_NAMES = {
    "source_embedding": "encoder.embedding",  # nn.Embedding(source vocabulary, m)
    "encoder_rnn": "encoder.rnn",  # nn.GRU / nn.LSTM(m, n, num_layers=L, batch_first=True[, bidirectional])
    "target_embedding": "decoder.embedding",  # nn.Embedding(target vocabulary, m)
    "decoder_rnn": "decoder.rnn",  # nn.GRU / nn.LSTM(m [+ A], d, num_layers=L, batch_first=True)
    "output": "decoder.out",  # nn.Linear(d, target vocabulary): logits = W_o s_i + b_o
}


def _classic_rules(config: BahdanauConfig, names: dict[str, str]) -> list[Rule]:
    """Ours <- theirs, for `from_state_dict`. A multi-layer PyTorch recurrent module names layer k's tensors
    `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}` (with `_reverse` for the backward direction);
    ours keeps one single-layer module per layer (`layers.{k}.rnn.weight_ih_l0`), with the same gate order."""
    rules = [
        Rule("model.encoder.embed_tokens.weight", (f"{names['source_embedding']}.weight",)),
        Rule("model.decoder.embed_tokens.weight", (f"{names['target_embedding']}.weight",)),
        Rule("lm_head.weight", (f"{names['output']}.weight",)),
        Rule("lm_head.bias", (f"{names['output']}.bias",)),
    ]
    stacks = (
        ("model.encoder.rnn", names["encoder_rnn"], ("", "_reverse") if config.encoder_bidirectional else ("",)),
        ("model.decoder.rnn", names["decoder_rnn"], ("",)),
    )
    for ours, theirs, directions in stacks:
        for k in range(config.num_hidden_layers):
            for tensor in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                for direction in directions:
                    rules.append(
                        Rule(f"{ours}.layers.{k}.rnn.{tensor}_l0{direction}", (f"{theirs}.{tensor}_l{k}{direction}",))
                    )
    return rules


def from_state_dict(
    state_dict: dict[str, torch.Tensor], config: BahdanauConfig, names: dict[str, str] | None = None
) -> BahdanauForConditionalGeneration:
    """A `BahdanauForConditionalGeneration` with the weights of a plain PyTorch RNN encoder-decoder, such as the
    classic ones of Sutskever et al. (2014) and Cho et al. (2014). `config` states the architecture the weights come
    from (e.g. `attention_type="none", encoder_bidirectional=False, bridge="final_state", decoder_input="embedding",
    output_layer="linear"`, plus `reverse_source` if the model read sources backwards); `names` (default
    `CLASSIC_NAMES`) says where the state dict keeps each part. The mapping, ours <- theirs:

        model.encoder.embed_tokens.weight               <- {source_embedding}.weight
        model.encoder.rnn.layers.{k}.rnn.{t}_l0[_reverse] <- {encoder_rnn}.{t}_l{k}[_reverse]
        model.decoder.embed_tokens.weight               <- {target_embedding}.weight
        model.decoder.rnn.layers.{k}.rnn.{t}_l0           <- {decoder_rnn}.{t}_l{k}
        lm_head.weight, lm_head.bias                    <- {output}.weight, {output}.bias

    for every layer k and t in weight_ih, weight_hh, bias_ih, bias_hh. Any other weight of ours (a deep output, an
    alignment model, a `linear` or `bahdanau` bridge) is read under its own name from the state dict. Every tensor
    of the state dict must be used and every weight of ours set, with the same shape: otherwise a ValueError names
    them. Outputs equal the source model's up to float rounding (`tests/test_classic_seq2seq.py`)."""
    if not isinstance(config, BahdanauConfig):
        raise TypeError(f"from_state_dict: config must be a BahdanauConfig, got {type(config).__name__}.")
    unknown = set(names or {}) - set(CLASSIC_NAMES)
    if unknown:
        raise ValueError(f"from_state_dict: unknown names {sorted(unknown)}; allowed: {sorted(CLASSIC_NAMES)}.")
    rules = _classic_rules(config, {**CLASSIC_NAMES, **(names or {})})
    model = BahdanauForConditionalGeneration(config)
    ours = model.state_dict()
    tied = set(model.all_tied_weights_keys)
    state, used, tied_copies = {}, set(), {}
    for rule in rules:
        if all(name in state_dict for name in rule.reference):
            tensor = rule.to_ours([state_dict[name] for name in rule.reference])
            (tied_copies if rule.ours in tied else state)[rule.ours] = tensor  # a tied one is set through its source
            used.update(rule.reference)
    for name in set(ours) - set(state) - tied:  # our own names for the parts beyond the classic model
        if name in state_dict:
            state[name] = state_dict[name]
            used.add(name)
    missing = sorted(set(ours) - set(state) - tied)
    left_over = sorted(set(state_dict) - used)
    if missing or left_over:
        raise ValueError(
            f"from_state_dict: weights of ours not found {missing}; tensors of the state dict not used {left_over}. "
            "Check the config (layers, directions, bridge, output layer) and `names` against the source model."
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(ours[name].shape):
            raise ValueError(
                f"from_state_dict: {name} has shape {tuple(ours[name].shape)} in this config, the state dict gives "
                f"{tuple(tensor.shape)}; check the sizes (hidden_size, decoder_hidden_size, vocabularies)."
            )
    for name, tensor in tied_copies.items():
        source = state.get(model.all_tied_weights_keys[name])
        if source is not None and not torch.equal(source, tensor):
            raise ValueError(
                f"from_state_dict: tie_word_embeddings=True makes {name} the same matrix as "
                f"{model.all_tied_weights_keys[name]}, but the state dict holds different values for them."
            )
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    return model.eval()
