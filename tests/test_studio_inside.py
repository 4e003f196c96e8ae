"""The studio's views of the models' insides (hf_seq/studio/inside.py), on tiny untrained models of each family: the
layer's gates give back the model's own states, attention rows are distributions (GPT's causal), BERT's fillers
are its softmaxed logits, the step-by-step alignment decodes what generate() decodes, and the SSMs' modes agree."""

import io

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from hf_seq.data.tokenization import train_bpe_tokenizer
from hf_seq.models.scan import s4d_step
from hf_seq.models.utils import cache_of
from hf_seq.registry import family
from hf_seq.studio import Loaded, inside, to_csv

TEXT = "the cat sat on the mat in the park"
CORPUS = ["the cat sat on the mat", "a dog ran in the park", "the dog sat in the sun"] * 10


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(CORPUS, vocab_size=300, show_progress=False)


@pytest.fixture(scope="module")
def bert_tokenizer():
    return train_bpe_tokenizer(CORPUS, vocab_size=300, style="bert", show_progress=False)


def build(kind: str, auto_class: str, tokenizer, **config) -> Loaded:
    """A tiny untrained model of the family `kind`, in eval mode, as the studio holds it."""
    entry = family(kind)
    torch.manual_seed(0)
    ids = dict(pad_token_id=tokenizer.pad_token_id)
    if tokenizer.bos_token_id is not None:
        ids |= dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    model = entry.model_class(auto_class)(entry.config_class(vocab_size=len(tokenizer), **ids, **config)).eval()
    return Loaded(kind, model, tokenizer, kind)


def ids_of(loaded: Loaded, text: str) -> torch.Tensor:
    return torch.tensor([loaded.tokenizer(text, add_special_tokens=False)["input_ids"]])


RNN = dict(hidden_size=16, embedding_size=12, num_hidden_layers=2, dropout=0.0, initializer_range=0.3)
SEQ2SEQ = dict(
    hidden_size=16,
    embedding_size=12,
    attention_size=10,
    deep_output_size=8,
    num_hidden_layers=2,
    dropout=0.0,
    initializer_range=0.3,
)


def seq2seq_model(tokenizer, **config) -> Loaded:
    """A tiny Bahdanau model whose alignment weights are drawn at random: the paper's init sets v_a = 0, which makes
    every alignment uniform, and then a decoder step reading the wrong state would go unnoticed."""
    loaded = build("bahdanau", "AutoModelForSeq2SeqLM", tokenizer, **SEQ2SEQ, **config)
    with torch.no_grad():
        for name, param in loaded.model.named_parameters():
            if ".attention." in name:
                param.normal_(0.0, 2.0)
    return loaded


ATTENTION = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
GPT = dict(ATTENTION, num_hidden_layers=2, embedding_dropout=0.0, attention_dropout=0.0, hidden_dropout=0.0)
TRANSFORMER = dict(ATTENTION, encoder_layers=2, decoder_layers=2, dropout=0.0, attention_dropout=0.0)


# ---------------------------------------------------------------------------------------------- recurrent state
@pytest.mark.parametrize("cell_type", ["lstm", "gru", "gated"])
def test_the_views_gates_give_back_the_models_states(tokenizer, cell_type):
    """h_t rebuilt from the view's gates equals the model's own states at every step (and, for the LSTM, c_T its
    final memory cell): a gate read from the wrong rows of the weights, or from the wrong layer, breaks the equality."""
    loaded = build("rnn", "AutoModelForCausalLM", tokenizer, cell_type=cell_type, **RNN)
    result = inside.recurrent_state(loaded, TEXT, unit=3)
    with torch.no_grad():
        outputs = loaded.model.base_model(input_ids=ids_of(loaded, TEXT), use_cache=True)
    h = outputs.last_hidden_state[0].T.numpy()  # (H, T)
    h_prev = np.concatenate([np.zeros_like(h[:, :1]), h[:, :-1]], 1)
    if cell_type == "lstm":
        c_prev = np.concatenate([np.zeros_like(h[:, :1]), result["cell"][:, :-1]], 1)
        cell = result["forget_gate"] * c_prev + result["input_gate"] * result["candidate"]
        np.testing.assert_allclose(cell, result["cell"], atol=1e-6)
        recomputed = result["output_gate"] * np.tanh(result["cell"])
        np.testing.assert_allclose(result["cell"][:, -1], cache_of(outputs).cell[-1, 0].numpy(), atol=1e-5)
    else:
        z = result["update_gate"]
        recomputed = (1 - z) * result["candidate"] + z * h_prev
    np.testing.assert_allclose(recomputed, h, atol=1e-5)
    np.testing.assert_allclose(result["hidden"], h, atol=1e-6)
    np.testing.assert_array_equal(result["unit_values"], result["hidden"][3])
    gates = [name for name in inside._GATE_NAMES if name in result]
    assert gates and all(((result[g] > 0) & (result[g] < 1)).all() for g in gates)
    assert "token,unit_values" in to_csv(result).splitlines()[0]


def test_elman_shows_states_and_no_gates(tokenizer):
    loaded = build("rnn", "AutoModelForCausalLM", tokenizer, cell_type="elman", **RNN)
    result = inside.recurrent_state(loaded, TEXT, unit=-1)
    assert not any(name in result for name in (*inside._GATE_NAMES, "cell"))
    assert result["unit"] == 15 and len(result["tokens"]) == result["hidden"].shape[1]


# ---------------------------------------------------------------------------------------------------- attention
def rows_sum_to_one(weights: np.ndarray) -> None:
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)


def test_gpt_attention_is_causal_and_each_row_a_distribution(tokenizer):
    loaded = build("gpt", "AutoModelForCausalLM", tokenizer, **GPT)
    result = inside.attention(loaded, TEXT)
    weights = result["attentions"]
    assert weights.shape == (2, 4, len(result["tokens"]), len(result["tokens"]))
    rows_sum_to_one(weights)
    assert (np.triu(weights, k=1) == 0).all() and (np.tril(weights, k=-1) > 0).any()
    assert loaded.model.config._attn_implementation == "sdpa"  # the eager kernel was only borrowed
    np.testing.assert_allclose(result["matrix"], weights.mean((0, 1)))
    assert len(to_csv(result).splitlines()) == 1 + len(result["tokens"])  # the averaged map, one row per query
    light = inside.attention_from(result, query=4, layer=1, head=2)
    np.testing.assert_array_equal(light["weight"], weights[1, 2, 4])
    np.testing.assert_allclose(inside.attention_from(result, query=4)["weight"], weights[:, :, 4].mean((0, 1)))


def test_a_long_text_is_cut_to_the_models_positions(tokenizer, bert_tokenizer):
    long = " ".join([TEXT] * 15)  # ~135 tokens, past the 64 positions
    gpt = build("gpt", "AutoModelForCausalLM", tokenizer, **GPT)
    bert = build("bert", "AutoModelForMaskedLM", bert_tokenizer, **GPT)
    assert inside.attention(gpt, long)["attentions"].shape[-1] == 64
    tokens = inside.attention(bert, long)["tokens"]
    assert len(tokens) == 64 and tokens[-1] == "[SEP]"


def test_bert_attention_reads_both_sides(bert_tokenizer):
    loaded = build("bert", "AutoModelForMaskedLM", bert_tokenizer, **GPT)
    result = inside.attention(loaded, TEXT)
    assert result["tokens"][0] == "[CLS]" and result["tokens"][-1] == "[SEP]"
    rows_sum_to_one(result["attentions"])
    assert (np.triu(result["attentions"], k=1) > 0).any()


def test_transformer_attention_on_a_given_target(tokenizer):
    loaded = build("transformer", "AutoModelForSeq2SeqLM", tokenizer, **TRANSFORMER)
    result = inside.attention(loaded, TEXT, target="the dog ran")
    target = tokenizer.convert_ids_to_tokens(ids_of(loaded, "the dog ran")[0])
    source, written = len(result["tokens"]), len(result["target_tokens"])
    assert written == len(target) and result["decoder_tokens"][0] == tokenizer.bos_token
    assert result["encoder_attentions"].shape == (2, 4, source, source)
    assert result["cross_attentions"].shape == (2, 4, written, source)
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        rows_sum_to_one(result[name])
    assert (np.triu(result["decoder_attentions"], k=1) == 0).all()
    average = inside.cross_attention_average(loaded, TEXT, target="the dog ran")
    np.testing.assert_allclose(average["matrix"], result["cross_attentions"].mean((0, 1)), atol=1e-7)
    rows_sum_to_one(average["matrix"])
    reads = inside.attention_from(result, query=1, name="decoder_attentions", layer=0, head=3)
    assert reads["tokens"] == result["decoder_tokens"] and reads["weight"][2:].sum() == 0  # a query reads its past
    with pytest.raises(ValueError, match="the target has no tokens"):
        inside.attention(loaded, TEXT, target="")
    assert to_csv(average).splitlines()[0].split(",")[1:] == average["column_labels"]


def test_fill_mask_gives_the_softmaxed_logits(bert_tokenizer):
    loaded = build("bert", "AutoModelForMaskedLM", bert_tokenizer, **GPT)
    text = "the cat [MASK] on the mat"
    result = inside.fill_mask(loaded, text, k=4)
    encoded = bert_tokenizer(text, return_tensors="pt")
    position = encoded["input_ids"][0].tolist().index(bert_tokenizer.mask_token_id)
    with torch.no_grad():
        probabilities = loaded.model(**encoded).logits[0, position].softmax(-1)
    top = probabilities.topk(4)
    assert result["token_ids"] == top.indices.tolist() and result["position"] == position
    np.testing.assert_allclose(result["probability"], top.values.numpy(), rtol=1e-6)
    assert result["tokens"] == [bert_tokenizer.decode([i]) for i in top.indices]
    with pytest.raises(ValueError, match="no \\[MASK\\]"):
        inside.fill_mask(loaded, "no mask here")


# ---------------------------------------------------------------------------------------------------- alignment
@pytest.mark.parametrize("cell_type, attention_type", [("gru", "additive"), ("lstm", "general")])
def test_alignment_steps_decode_what_generate_decodes(tokenizer, cell_type, attention_type):
    """Greedy steps carrying the decoder's state write generate()'s tokens, and each step's alignment equals the one
    of a teacher-forced pass over the same prefix (the decoder's sequence mode)."""
    loaded = seq2seq_model(tokenizer, cell_type=cell_type, attention_type=attention_type)
    model, source = loaded.model, ids_of(loaded, TEXT)
    result = inside.alignment_steps(loaded, TEXT, steps=7)
    generated = model.generate(input_ids=source, max_new_tokens=7, do_sample=False, num_beams=1)
    assert result["target_ids"] == generated[0, 1:].tolist()
    assert result["matrix"].shape == (len(result["target_ids"]), source.shape[1])
    rows_sum_to_one(result["matrix"])
    assert result["matrix"].std(-1).min() > 1e-4  # not uniform: each row says where the decoder reads
    with torch.no_grad():
        forced = model(input_ids=source, decoder_input_ids=generated[:, :-1], output_attentions=True)
    np.testing.assert_allclose(result["matrix"], forced.alignments[0].numpy(), atol=1e-5)
    chosen = forced.logits[0].softmax(-1)[torch.arange(len(result["target_ids"])), result["target_ids"]]
    np.testing.assert_allclose(result["probability"], chosen.numpy(), rtol=1e-5)


def test_alignment_steps_with_beam_search(tokenizer):
    loaded = seq2seq_model(tokenizer)
    result = inside.alignment_steps(loaded, TEXT, steps=6, num_beams=3)
    generated = loaded.model.generate(input_ids=ids_of(loaded, TEXT), max_new_tokens=6, num_beams=3, do_sample=False)
    assert result["target_ids"] == generated[0, 1:].tolist()
    rows_sum_to_one(result["matrix"])
    assert len(to_csv(result).splitlines()) == 1 + len(result["target_ids"])


def test_alignment_steps_refuses_a_model_without_attention(tokenizer):
    loaded = build("bahdanau", "AutoModelForSeq2SeqLM", tokenizer, attention_type="none", **SEQ2SEQ)
    with pytest.raises(ValueError, match="no attention"):
        inside.alignment_steps(loaded, TEXT)


# ------------------------------------------------------------------------------------------- state-space models
SSM = dict(hidden_size=16, num_hidden_layers=2, hidden_dropout=0.0, initializer_range=0.3)


def test_mamba_delta_and_state_one_token_at_a_time(tokenizer):
    """One token at a time with its state, Mamba computes its full forward; the state's norm after the last token is
    that of the full forward's state; Delta is softplus(dt_proj(x_proj(x))) recomputed from the first layer's weights."""
    loaded = build("ssm", "AutoModelForCausalLM", tokenizer, ssm_type="mamba", state_size=4, **SSM)
    result = inside.ssm_inside(loaded, TEXT, layer=0)
    assert result["stepwise_difference"] < 1e-5
    backbone, ids = loaded.model.base_model, ids_of(loaded, TEXT)
    with torch.no_grad():
        state = cache_of(backbone(input_ids=ids, use_cache=True)).ssm_states[:, 0]  # (L, E, N)
        mixer = backbone.layers[0].mixer
        x, _ = mixer.in_proj(backbone.layers[0].norm(backbone.embed_tokens(ids))).chunk(2, -1)
        x = F.silu(mixer.conv1d(x)[0])
        dt, _, _ = mixer.x_proj(x).split(mixer.split, -1)
        delta = F.softplus(mixer.dt_proj(dt))[0].T
    np.testing.assert_allclose(result["state_norm"][:, -1], state.flatten(1).norm(dim=-1).numpy(), rtol=1e-5)
    np.testing.assert_allclose(result["delta"], delta.numpy(), rtol=1e-5)
    np.testing.assert_allclose(result["delta_mean"], delta.mean(0).numpy(), rtol=1e-5)
    np.testing.assert_array_equal(result["state_norm_layer"], result["state_norm"][0])
    with pytest.raises(ValueError, match="'mamba' model; this view reads s4d"):
        inside.scan_vs_convolution(loaded, TEXT)


def test_s4d_kernel_is_the_impulse_response(tokenizer):
    """K over the lag is what the recurrence answers to a unit impulse at the first token (less D u at lag 0)."""
    loaded = build("ssm", "AutoModelForCausalLM", tokenizer, ssm_type="s4d", state_size=8, **SSM)
    result = inside.ssm_inside(loaded, TEXT)
    assert result["stepwise_difference"] < 1e-5
    mixer = loaded.model.base_model.layers[-1].mixer
    with torch.no_grad():
        dt_A, B_bar, C = mixer.discretized()
        channels, steps = result["kernel"].shape
        state, response = torch.zeros(1, channels, B_bar.shape[-1], dtype=B_bar.dtype), []
        for t in range(steps):
            y, state = s4d_step(torch.full((1, channels), float(t == 0)), dt_A, B_bar, C, mixer.D * 0, state)
            response.append(y[0])
    np.testing.assert_allclose(result["kernel"], torch.stack(response, -1).numpy(), atol=1e-6)
    np.testing.assert_allclose(result["step_size"], mixer.log_dt.exp().detach().numpy())


def test_s4d_scan_and_convolution_agree_on_the_layers_own_input(tokenizer):
    """The convolution and the recurrence agree to 1e-5, and the convolution is what the layer computed: its GELU,
    output layer and GLU give back the mixer's output in the model."""
    loaded = build("ssm", "AutoModelForCausalLM", tokenizer, ssm_type="s4d", state_size=8, **SSM)
    mixer = loaded.model.base_model.layers[0].mixer
    outputs = []
    hook = mixer.register_forward_hook(lambda module, args, output: outputs.append(output[0]))
    try:
        result = inside.scan_vs_convolution(loaded, TEXT, layer=0, channel=5)
    finally:
        hook.remove()
    assert result["max_difference"] < 1e-5
    np.testing.assert_allclose(result["convolution"], result["recurrence"], atol=1e-5)
    with torch.no_grad():
        again = F.glu(mixer.out_proj(F.gelu(torch.from_numpy(result["convolution"]).T)), dim=-1)
    np.testing.assert_allclose(again.numpy(), outputs[0][0].numpy(), atol=1e-5)
    np.testing.assert_array_equal(result["recurrence_channel"], result["recurrence"][5])
    assert "difference" in to_csv(result).splitlines()[0]


# ----------------------------------------------------------------------------------------- Mamba-2's attention
# chunks of 4 over the text's ~10 tokens: the model runs the chunked form across chunks, the view the quadratic one
MAMBA2 = dict(SSM, ssm_type="mamba2", head_dim=8, state_size=8, chunk_size=4)


def mamba2_view_and_layer(loaded: Loaded, layer: int):
    """The view's result on layer `layer`, and that layer's mixer, its input and its output in the model."""
    mixer, seen = loaded.model.base_model.layers[layer].mixer, []
    hook = mixer.register_forward_hook(lambda module, args, output: seen.append((args[0], output[0])))
    try:
        result = inside.mamba2_attention(loaded, TEXT, layer=layer)
    finally:
        hook.remove()
    return result, mixer, *seen[0]


def test_mamba2_attention_gives_back_the_layers_output(tokenizer):
    """y = M x with the view's matrix, through the layer's gate, gated norm and out_proj, is the mixer's output in the
    model (which ran the chunked form): a matrix from the wrong layer, without the skip D or with a wrong decay
    fails. Each head's matrix is causal: zero above the diagonal, not below it."""
    loaded = build("ssm", "AutoModelForCausalLM", tokenizer, **MAMBA2)
    for layer in (0, -1):
        result, mixer, u, out = mamba2_view_and_layer(loaded, layer)
        T = len(result["tokens"])
        assert result["attention"].shape == (mixer.A_log.shape[0], T, T) == (4, T, T) and T > 2 * MAMBA2["chunk_size"]
        assert result["layer"] == layer % 2
        with torch.no_grad():
            z, x, *_ = mixer.ssm_inputs(u)
            y = torch.einsum("hts,shp->thp", torch.from_numpy(result["attention"]), x[0]).flatten(1)  # (T, E)
            again = mixer.out_proj(mixer.norm(y, z[0]))
        np.testing.assert_allclose(again.numpy(), out[0].numpy(), atol=1e-5)
        weights = result["attention"]
        below = np.tril_indices(T, k=-1)
        assert (np.triu(weights, k=1) == 0).all() and (weights[:, below[0], below[1]] != 0).all()
        np.testing.assert_allclose(result["skip"], mixer.D.detach().numpy())
        np.testing.assert_allclose(result["matrix"], weights.mean(0))
    assert len(to_csv(result).splitlines()) == 1 + T


def test_mamba2_attention_sets_a_gpt_beside_it_on_the_same_tokens(tokenizer, bert_tokenizer):
    loaded = build("ssm", "AutoModelForCausalLM", tokenizer, **MAMBA2)
    gpt = build("gpt", "AutoModelForCausalLM", tokenizer, **GPT)
    result = inside.mamba2_attention(loaded, TEXT, layer=-1, beside=gpt)
    gpt_weights = inside.attention(gpt, TEXT)["attentions"]  # (L, A, T, T)
    np.testing.assert_allclose(result["beside_attention"], gpt_weights[-1], atol=1e-6)
    assert (result["beside_name"], result["beside_layer"]) == ("gpt", 1)
    np.testing.assert_allclose(inside.mamba2_attention(loaded, TEXT, 0, gpt)["beside_attention"], gpt_weights[0])
    np.testing.assert_allclose(result["attention"], inside.mamba2_attention(loaded, TEXT)["attention"])
    mamba = build("ssm", "AutoModelForCausalLM", tokenizer, ssm_type="mamba", state_size=4, **SSM)
    with pytest.raises(ValueError, match=r"mamba2_attention \(beside\): ssm is a 'mamba' model; this view reads gpt"):
        inside.mamba2_attention(loaded, TEXT, beside=mamba)
    bert_gpt = build("gpt", "AutoModelForCausalLM", bert_tokenizer, **GPT)
    with pytest.raises(ValueError, match="do not share a tokenizer"):
        inside.mamba2_attention(loaded, TEXT, beside=bert_gpt)


# ------------------------------------------------------------------------------------------ figures and refusals
def test_every_figure_draws(tokenizer, bert_tokenizer):
    rnn = build("rnn", "AutoModelForCausalLM", tokenizer, cell_type="lstm", **RNN)
    gpt = build("gpt", "AutoModelForCausalLM", tokenizer, **GPT)
    bert = build("bert", "AutoModelForMaskedLM", bert_tokenizer, **GPT)
    transformer = build("transformer", "AutoModelForSeq2SeqLM", tokenizer, **TRANSFORMER)
    bahdanau = build("bahdanau", "AutoModelForSeq2SeqLM", tokenizer, **SEQ2SEQ)
    mamba = build("ssm", "AutoModelForCausalLM", tokenizer, ssm_type="mamba", state_size=4, **SSM)
    s4d = build("ssm", "AutoModelForCausalLM", tokenizer, ssm_type="s4d", state_size=8, **SSM)
    mamba2 = build("ssm", "AutoModelForCausalLM", tokenizer, **MAMBA2)
    seq2seq = inside.attention(transformer, "the cat", target="a dog")
    figures = [
        inside.figure_recurrent_state(inside.recurrent_state(rnn, TEXT)),
        inside.figure_attention(inside.attention(gpt, TEXT)),
        inside.figure_attention(seq2seq),  # the Transformer's default: its cross-attention
        inside.figure_attention(seq2seq, "decoder_attentions"),
        inside.figure_fill_mask(inside.fill_mask(bert, "the [MASK] sat")),
        inside.figure_alignment_steps(inside.alignment_steps(bahdanau, TEXT, steps=4), upto=2),
        inside.figure_cross_attention_average(inside.cross_attention_average(transformer, TEXT, max_new_tokens=4)),
        inside.figure_ssm_inside(inside.ssm_inside(mamba, TEXT)),
        inside.figure_ssm_inside(inside.ssm_inside(s4d, TEXT)),
        inside.figure_mamba2_attention(inside.mamba2_attention(mamba2, TEXT)),
        inside.figure_mamba2_attention(inside.mamba2_attention(mamba2, TEXT, beside=gpt)),
    ]
    long = inside.figure_scan_vs_convolution(inside.scan_vs_convolution(s4d, " ".join([TEXT] * 15)))
    assert 40 < len(long.axes[1].get_xticklabels()) <= inside.MAX_LABELS  # ~135 tokens: every other one labelled
    figures.append(long)
    for figure in figures:
        png = io.BytesIO()
        figure.savefig(png, format="png", dpi=40)
        assert png.getvalue().startswith(b"\x89PNG")


def test_a_view_refuses_a_model_it_cannot_read(tokenizer):
    gpt = build("gpt", "AutoModelForCausalLM", tokenizer, **GPT)
    with pytest.raises(ValueError, match="recurrent_state: gpt is a 'gpt' model; this view reads rnn"):
        inside.recurrent_state(gpt, TEXT)


def test_mamba2_attention_refuses_every_other_kind_naming_the_view_and_the_kinds_it_reads(tokenizer):
    gpt = build("gpt", "AutoModelForCausalLM", tokenizer, **GPT)
    mamba = build("ssm", "AutoModelForCausalLM", tokenizer, ssm_type="mamba", state_size=4, **SSM)
    for other, kind in ((gpt, "gpt"), (mamba, "mamba")):
        with pytest.raises(ValueError, match=rf"mamba2_attention: {other.name} is a '{kind}' model; this view reads "
                                             r"mamba2\.$"):  # fmt: skip
            inside.mamba2_attention(other, TEXT)
    mamba2 = build("ssm", "AutoModelForCausalLM", tokenizer, **MAMBA2)
    with pytest.raises(ValueError, match=r"ssm has 2 layers; give a layer in \[-2, 1\] \(-1: the top one\), not 2"):
        inside.mamba2_attention(mamba2, TEXT, layer=2)
    # and Mamba's own view refuses Mamba-2
    with pytest.raises(ValueError, match="ssm_inside: ssm is a 'mamba2' model; this view reads mamba, s4d"):
        inside.ssm_inside(mamba2, TEXT)
