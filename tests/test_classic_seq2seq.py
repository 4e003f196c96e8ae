"""Porting a classic encoder-decoder into the Bahdanau family, exactly.

Two models are written here by hand in plain PyTorch, as a user would have them (no hf-seq code): Cho et al.'s
(2014) GRU encoder-decoder as the issue describes it (unidirectional encoder, the decoder started from the raw final
encoder state, reading the previous target embedding only, logits = W s_i, separate source and target vocabularies)
and Sutskever et al.'s (2014) LSTM (stacked layers, the source read reversed, each layer's final h and c handed to
the decoder). Their weights go through `hf_seq.convert.from_state_dict`; logits must agree to 1e-5 and greedy
decoding must give the same tokens, on a padded batch.
"""

import pytest
import torch
from torch import nn

from hf_seq import BahdanauConfig
from hf_seq.convert import from_state_dict

PAD, BOS, EOS = 0, 1, 2
SOURCE_VOCAB, TARGET_VOCAB = 37, 45


class ClassicEncoderDecoder(nn.Module):
    """h_S = RNN_enc(E_x x) (read reversed if asked); s_0 = h_S per layer (with c for an LSTM);
    s_i = RNN_dec(s_{i-1}, E_y y_{i-1}); p(y_i) = softmax(W s_i + b)."""

    def __init__(self, cell: str, layers: int, reverse: bool, source_vocab: int, target_vocab: int, size=16, m=12):
        super().__init__()
        rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell]
        self.reverse = reverse
        self.encoder = nn.Module()
        self.encoder.embedding = nn.Embedding(source_vocab, m)
        self.encoder.rnn = rnn(m, size, num_layers=layers, batch_first=True)
        self.decoder = nn.Module()
        self.decoder.embedding = nn.Embedding(target_vocab, m)
        self.decoder.rnn = rnn(m, size, num_layers=layers, batch_first=True)
        self.decoder.out = nn.Linear(size, target_vocab)
        for p in self.parameters():  # far from uniform, so that greedy choices are decisive
            nn.init.normal_(p, 0.0, 0.5)

    def encode(self, source: torch.Tensor):
        """One unpadded sentence (S,) -> the final state: h (L, 1, n), or (h, c) for an LSTM."""
        x = source.flip(0) if self.reverse else source
        _, final = self.encoder.rnn(self.encoder.embedding(x)[None])
        return final

    def logits(self, source: torch.Tensor, target_inputs: torch.Tensor) -> torch.Tensor:
        states, _ = self.decoder.rnn(self.decoder.embedding(target_inputs)[None], self.encode(source))
        return self.decoder.out(states[0])  # (T, V)

    def greedy(self, source: torch.Tensor, steps: int) -> list[int]:
        """Argmax decoding one step at a time, EOS excluded (as generate's min_new_tokens does)."""
        state, token, tokens = self.encode(source), BOS, []
        for _ in range(steps):
            out, state = self.decoder.rnn(self.decoder.embedding(torch.tensor([[token]])), state)
            logits = self.decoder.out(out[0, -1])
            logits[EOS] = -float("inf")
            token = int(logits.argmax())
            tokens.append(token)
        return tokens


CLASSIC_FLAGS = dict(
    attention_type="none",
    encoder_bidirectional=False,
    bridge="final_state",
    decoder_input="embedding",
    output_layer="linear",
    hidden_size=16,
    embedding_size=12,
    vocab_size=TARGET_VOCAB,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
    embedding_dropout=0.0,
    hidden_dropout=0.0,
    output_dropout=0.0,
)

MODELS = {
    # Cho et al. 2014 as the user had it: one GRU layer, two vocabularies
    "cho-gru": (
        dict(cell="gru", layers=1, reverse=False, source_vocab=SOURCE_VOCAB, target_vocab=TARGET_VOCAB),
        dict(cell_type="gru", num_hidden_layers=1, source_vocab_size=SOURCE_VOCAB),
    ),
    # Sutskever et al. 2014 (smaller): stacked LSTM, reversed source, one vocabulary size for both sides
    "sutskever-lstm": (
        dict(cell="lstm", layers=3, reverse=True, source_vocab=TARGET_VOCAB, target_vocab=TARGET_VOCAB),
        dict(cell_type="lstm", num_hidden_layers=3, reverse_source=True),
    ),
}


def padded_sources(seed: int, lengths=(7, 3, 5, 6)):
    """Sentences of the given lengths, right-padded into one batch, and each sentence alone."""
    g = torch.Generator().manual_seed(seed)
    sentences = [torch.randint(3, SOURCE_VOCAB, (n,), generator=g) for n in lengths]
    ids = torch.full((len(lengths), max(lengths)), PAD)
    mask = torch.zeros_like(ids)
    for row, sentence in enumerate(sentences):
        ids[row, : len(sentence)], mask[row, : len(sentence)] = sentence, 1
    return sentences, {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(params=sorted(MODELS))
def ported(request):
    reference_kwargs, flags = MODELS[request.param]
    torch.manual_seed(0)
    reference = ClassicEncoderDecoder(**reference_kwargs).eval()
    model = from_state_dict(reference.state_dict(), BahdanauConfig(**{**CLASSIC_FLAGS, **flags}))
    return reference, model


def test_ported_logits_equal_the_hand_written_model(ported):
    reference, model = ported
    sentences, batch = padded_sources(seed=1)
    targets = torch.randint(3, TARGET_VOCAB, (len(sentences), 6), generator=torch.Generator().manual_seed(2))
    targets[:, 0] = BOS
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=targets).logits
        for row, sentence in enumerate(sentences):
            torch.testing.assert_close(logits[row], reference.logits(sentence, targets[row]), rtol=0, atol=1e-5)


def test_ported_greedy_outputs_equal_the_hand_written_model(ported):
    reference, model = ported
    sentences, batch = padded_sources(seed=3, lengths=(9, 4, 6, 2, 8, 5, 7, 3))
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=8, min_new_tokens=8, do_sample=False, num_beams=1)
        expected = [reference.greedy(sentence, 8) for sentence in sentences]
    assert generated[:, 1:].tolist() == expected
    assert len({tuple(tokens) for tokens in expected}) > 1  # the outputs depend on the source


def test_from_state_dict_names_what_does_not_fit():
    torch.manual_seed(0)
    reference = ClassicEncoderDecoder(cell="gru", layers=2, reverse=False, source_vocab=37, target_vocab=45)
    flags = {**CLASSIC_FLAGS, "cell_type": "gru", "source_vocab_size": 37}
    with pytest.raises(ValueError, match=r"not used \[.*decoder\.rnn\.weight_hh_l1"):
        from_state_dict(reference.state_dict(), BahdanauConfig(**flags, num_hidden_layers=1))
    with pytest.raises(ValueError, match=r"not found \[.*bridge_hidden"):
        from_state_dict(reference.state_dict(), BahdanauConfig(**{**flags, "bridge": "linear"}, num_hidden_layers=2))
    with pytest.raises(ValueError, match="encoder.embed_tokens.weight has shape"):
        from_state_dict(
            reference.state_dict(), BahdanauConfig(**{**flags, "source_vocab_size": 40}, num_hidden_layers=2)
        )
    with pytest.raises(ValueError, match=r"unknown names \['decoder'\]"):
        from_state_dict(reference.state_dict(), BahdanauConfig(**flags, num_hidden_layers=2), names={"decoder": "x"})
