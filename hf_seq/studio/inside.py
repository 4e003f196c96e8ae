"""What the models hold inside on one text: recurrent states and gates, attention weights, alignments, the
state-space models' step sizes, kernels and scans, and the attention matrix a Mamba-2 layer computes. Each view is
a pure function `(loaded, text, settings) -> dict` of numpy arrays, token strings and floats (views.py's convention,
so `to_csv` writes it); `figure_<view>(result)` draws one with matplotlib.

Everything is read from the models' weights, outputs, forward hooks and the methods they offer for it: the fused
recurrent kernels return no gates, so `recurrent_state` asks the top layer for them (`RecurrentLayer.gates`, the
equations of recurrent.py step by step); the attention views switch a model to the eager kernel for the call, since
the fused ones form no weights.

Shapes in the dicts: T tokens (S source, U target), H units or channels, L layers, A heads, N state size.
"""

from contextlib import contextmanager

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure
from torch.nn import functional as F

from hf_seq.models.scan import s4d_convolution, s4d_kernel, s4d_step
from hf_seq.models.utils import cache_of
from hf_seq.studio.tokens import _shared_ids
from hf_seq.studio.views import LANGUAGE_MODEL, Loaded, encode, token_limit


# ------------------------------------------------------------------------------------------------------ helpers
def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().float().cpu().numpy()


def _batch(loaded: Loaded, ids: list[int]) -> torch.Tensor:
    return torch.tensor([ids], dtype=torch.long, device=loaded.model.device)


def _labels(tokenizer, ids) -> list[str]:
    return [tokenizer.decode([int(i)]) for i in ids]


def _check_kind(loaded: Loaded, view: str, kinds: tuple[str, ...]) -> None:
    if loaded.kind not in kinds:
        raise ValueError(f"{view}: {loaded.name} is a {loaded.kind!r} model; this view reads {', '.join(kinds)}.")


def _ids(loaded: Loaded, text: str) -> list[int]:
    """The text's ids, as many as the model reads; BERT reads `[CLS] text [SEP]`, as it was trained."""
    bert = loaded.kind == "bert"
    ids, _ = encode(loaded, text, token_limit(loaded) - (2 if bert else 0))
    if not ids:
        raise ValueError(f"{loaded.name}: the text has no tokens under its tokenizer; type some text.")
    tokenizer = loaded.tokenizer
    return [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id] if bert else ids


@contextmanager
def _eager(model):
    """The eager attention kernel for the duration (the fused kernels form no weights to return)."""
    kernel = model.config._attn_implementation
    if kernel not in (None, "eager"):
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if kernel not in (None, "eager"):
            model.set_attn_implementation(kernel)


def _start_token(config) -> int:
    return config.decoder_start_token_id if config.decoder_start_token_id is not None else config.bos_token_id


MAX_LABELS = 80  # tick labels per axis; a longer text labels every k-th token
MAX_INCHES = 24.0  # a figure's largest side


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(min(width, MAX_INCHES), min(height, MAX_INCHES)), layout="constrained")


def _along(count: int, per_token: float = 0.2, least: float = 6.0) -> float:
    """A width for `count` tokens across."""
    return max(least, per_token * count + 2.0)


def _printable(label: str) -> str:
    """A token as a tick label: newlines, tabs and control bytes spelled out (`\\n`), which no font draws."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in label)


def _label_tokens(axes, labels, axis: str = "x") -> None:
    """The tokens as tick labels along `axis`, every k-th of them past MAX_LABELS."""
    every = -(-len(labels) // MAX_LABELS)
    positions = range(0, len(labels), every)
    text = [_printable(labels[i]) for i in positions]
    if axis == "x":
        axes.set_xticks(positions, text, rotation=90, fontsize=6)
    else:
        axes.set_yticks(positions, text, fontsize=6)


def _heatmap(axes, matrix, rows=None, columns=None, title="", **kwargs):
    image = axes.imshow(matrix, aspect="auto", interpolation="nearest", **kwargs)
    if columns is not None:
        _label_tokens(axes, columns, "x")
    if rows is not None:
        _label_tokens(axes, rows, "y")
    axes.set_title(title, fontsize=8)
    return image


# ---------------------------------------------------------------------------------------------- 4. recurrent state
@torch.no_grad()
def recurrent_state(loaded: Loaded, text: str, unit: int = 0) -> dict:
    """The top recurrent layer over the text, from a zero state. Returns `tokens`; `hidden` (H, T), its states h_t
    (units x time; both directions' units, forward first, for a bidirectional model); for the LSTM `cell` (H, T),
    the memory cells c_t; the gates over the text, each (H, T) in [0, 1] and for the forward direction:
    `input_gate`, `forget_gate`, `output_gate` (LSTM), `update_gate` z (GRU: h_t = (1 - z) n + z h_{t-1}; gated
    Elman: h_t = z h_{t-1} + (1 - z) candidate), `reset_gate` (GRU), and `candidate` (H, T), the new content (the
    LSTM's g, the GRU's n); Elman has none. `unit` and `unit_values` (T,): one unit's h over the tokens.
    The gates are the top layer's own (`RecurrentLayer.gates`) on its input, the layer below's states."""
    _check_kind(loaded, "recurrent_state", Loaded.view_kinds("recurrent"))
    ids = _ids(loaded, text)
    backbone = loaded.model.base_model
    outputs = backbone(input_ids=_batch(loaded, ids), output_hidden_states=True, use_cache=False)
    top, below = outputs.hidden_states[-1][0], outputs.hidden_states[-2][0]  # (T, D*H), (T, I)
    layer = backbone.rnn.layers[-1]
    result = {"tokens": _labels(loaded.tokenizer, ids), "hidden": _numpy(top.T)}
    if layer.cell_type != "elman":
        gates = layer.gates(below[None])  # from h_0 = 0 (and c_0 = 0), as the model ran; each (1, T, H)
        del gates["hidden"]  # the view shows the model's own states, both directions'
        result |= {name: _numpy(value[0].T) for name, value in gates.items()}  # the gates, and the LSTM's `cell`
    unit = int(unit) % top.shape[1]
    return result | {"unit": unit, "unit_values": result["hidden"][unit]}


_GATE_NAMES = ("input_gate", "forget_gate", "output_gate", "update_gate", "reset_gate")


def figure_recurrent_state(result: dict) -> Figure:
    """h (and c) as units x time, then each gate, on the tokens: gates on [0, 1], states on a scale symmetric about 0
    (at least [-1, 1], wider where an LSTM cell or a ReLU state goes past it)."""
    panels = [name for name in ("hidden", "cell", *_GATE_NAMES) if name in result]
    tokens = result["tokens"]
    fig = _figure(_along(len(tokens)), 1.8 * len(panels))
    for row, name in enumerate(panels):
        axes = fig.add_subplot(len(panels), 1, row + 1)
        bound = max(1.0, float(np.abs(result[name]).max()))
        gate = name.endswith("gate")
        limits = dict(vmin=0.0, vmax=1.0, cmap="viridis") if gate else dict(vmin=-bound, vmax=bound, cmap="RdBu_r")
        image = _heatmap(axes, result[name], columns=tokens if row == len(panels) - 1 else None, title=name, **limits)
        axes.set_ylabel("unit", fontsize=7)
        if row < len(panels) - 1:
            axes.set_xticks([])
        fig.colorbar(image, ax=axes, shrink=0.8)
    return fig


# ---------------------------------------------------------------------------------------------------- 5. attention
def _stack(attentions) -> np.ndarray:
    """A tuple of L tensors (1, A, queries, keys) -> (L, A, queries, keys)."""
    return _numpy(torch.cat(attentions))


def _translation(loaded: Loaded, source_ids: list[int], target: str | None, max_new_tokens: int) -> list[int]:
    """The target ids an encoder-decoder writes for the source: `target`'s own, or the model's greedy decoding."""
    if target is not None:
        ids, _ = encode(loaded, target)
        if not ids:
            raise ValueError(f"{loaded.name}: the target has no tokens under its tokenizer; type a target.")
        return ids
    generated = loaded.model.generate(
        input_ids=_batch(loaded, source_ids), max_new_tokens=max_new_tokens, do_sample=False, num_beams=1
    )
    return generated[0, 1:].tolist()


def _decoder_inputs(loaded: Loaded, written: list[int]) -> list[int]:
    """The decoder's inputs while it writes `written`: the start token, then each token but the last."""
    return [_start_token(loaded.model.config), *written[:-1]]


@torch.no_grad()
def attention(loaded: Loaded, text: str, target: str | None = None, max_new_tokens: int = 32) -> dict:
    """Every layer's and head's attention weights on the text, each row (a query) a distribution over the keys.
    GPT and BERT (BERT reads `[CLS] text [SEP]`): `tokens` and `attentions` (L, A, T, T), query i down, key j
    across. The encoder-decoder Transformer, on the text as source and `target` (None: its own greedy
    translation): `tokens` (S,), `target_tokens` (U,), the tokens the decoder writes, `decoder_tokens` (U,), what it
    reads (the start token, then the target shifted right), `encoder_attentions` (L, A, S, S),
    `decoder_attentions` (L, A, U, U) (queries: the target token being written; keys: the decoder's inputs) and
    `cross_attentions` (L, A, U, S). Both also give `matrix`, the self-attention (GPT, BERT) or the cross-attention
    (Transformer) averaged over layers and heads, with its `row_labels` and `column_labels` (what `to_csv` writes)."""
    _check_kind(loaded, "attention", Loaded.view_kinds("attention"))
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = _ids(loaded, text)
    result = {"tokens": _labels(tokenizer, ids)}
    with _eager(model):
        if loaded.kind != "transformer":
            outputs = model(input_ids=_batch(loaded, ids), output_attentions=True)
            weights = _stack(outputs.attentions)
            labels = {"row_labels": result["tokens"], "column_labels": result["tokens"]}
            return result | {"attentions": weights, "matrix": weights.mean((0, 1))} | labels
        written = _translation(loaded, ids, target, min(max_new_tokens, token_limit(loaded) - 1))[: token_limit(loaded)]
        reads = _decoder_inputs(loaded, written)
        outputs = model(input_ids=_batch(loaded, ids), decoder_input_ids=_batch(loaded, reads), output_attentions=True)
    cross, target_tokens = _stack(outputs.cross_attentions), _labels(tokenizer, written)
    return result | {
        "target_tokens": target_tokens,
        "decoder_tokens": _labels(tokenizer, reads),
        "encoder_attentions": _stack(outputs.encoder_attentions),
        "decoder_attentions": _stack(outputs.decoder_attentions),
        "cross_attentions": cross,
        "matrix": cross.mean((0, 1)),
        "row_labels": target_tokens,
        "column_labels": result["tokens"],
    }


def attention_from(
    result: dict, query: int, name: str = "attentions", layer: int | None = None, head: int | None = None
) -> dict:
    """One query's row of an `attention` result, to light its keys in the text: `tokens` (the keys) and `weight`
    (keys,), the weight of each key in layer `layer` and head `head` (None: the mean over layers, or heads)."""
    weights = result[name]
    weights = weights.mean(0) if layer is None else weights[layer]
    weights = weights.mean(0) if head is None else weights[head]
    keys = result["tokens"] if name in ("attentions", "encoder_attentions", "cross_attentions") else None
    keys = keys if keys is not None else result["decoder_tokens"]
    return {"tokens": keys, "weight": weights[query], "query": int(query)}


def figure_attention(result: dict, name: str | None = None) -> Figure:
    """Every layer and head (layers down, heads across) in one image, each block queries down and keys across, white
    = 1, a gap between blocks; the tokens label the first block. One image rather than a panel per head: drawing 16
    labelled panels took over a second. `name`: which weights of the result (default `attentions`, or for the
    Transformer `cross_attentions`)."""
    name = name or ("attentions" if "attentions" in result else "cross_attentions")
    weights = result[name]
    layers, heads, rows, columns = weights.shape
    queries = result["tokens"] if name in ("attentions", "encoder_attentions") else result["target_tokens"]
    keys = result["decoder_tokens"] if name == "decoder_attentions" else result["tokens"]
    gap = max(1, max(rows, columns) // 16)
    mosaic = np.full((layers * (rows + gap) - gap, heads * (columns + gap) - gap), np.nan)
    for layer in range(layers):
        for head in range(heads):
            top, left = layer * (rows + gap), head * (columns + gap)
            mosaic[top : top + rows, left : left + columns] = weights[layer, head]
    cell = min(0.12 * max(rows, columns) + 0.8, 4.0)
    fig = _figure(heads * cell + 0.8, layers * cell + 0.6)
    axes = fig.add_subplot()
    palette = matplotlib.colormaps["gray"].with_extremes(bad="white")
    axes.imshow(mosaic, aspect="auto", interpolation="nearest", cmap=palette, vmin=0, vmax=1)
    _label_tokens(axes, keys[:columns], "x")
    _label_tokens(axes, queries[:rows], "y")
    for head in range(heads):
        axes.text(head * (columns + gap) + columns / 2, -1, f"head {head}", ha="center", va="bottom", fontsize=8)
    for layer in range(layers):
        axes.text(mosaic.shape[1] + gap / 2, layer * (rows + gap) + rows / 2, f"layer {layer}",
                  rotation=270, ha="left", va="center", fontsize=8)  # fmt: skip
    axes.set_frame_on(False)
    fig.suptitle(name.replace("_", " "), fontsize=9)
    return fig


@torch.no_grad()
def fill_mask(loaded: Loaded, text: str, k: int = 5) -> dict:
    """BERT's top-k fillers of the first mask token in the text (`[MASK]`): `tokens` (k,), the fillers, and
    `probability` (k,), p(filler | the text) by the masked-LM head's softmax, highest first; `token_ids` (k,);
    `text_tokens`, the input as BERT reads it, and `position`, the mask's index in it."""
    _check_kind(loaded, "fill_mask", Loaded.view_kinds("fill"))
    tokenizer = loaded.tokenizer
    ids = _ids(loaded, text)
    if tokenizer.mask_token_id not in ids:
        raise ValueError(f"fill_mask: the text has no {tokenizer.mask_token} to fill.")
    position = ids.index(tokenizer.mask_token_id)
    logits = loaded.model(input_ids=_batch(loaded, ids)).logits[0, position]
    top = logits.float().softmax(-1).topk(min(k, logits.shape[-1]))
    fillers = top.indices.tolist()
    return {
        "tokens": _labels(tokenizer, fillers),
        "probability": _numpy(top.values),
        "token_ids": fillers,
        "text_tokens": _labels(tokenizer, ids),
        "position": position,
    }


def figure_fill_mask(result: dict) -> Figure:
    """The fillers' probabilities as horizontal bars, the most likely on top."""
    fig = _figure(5.0, 0.35 * len(result["tokens"]) + 1.0)
    axes = fig.add_subplot()
    rows = range(len(result["tokens"]))[::-1]
    axes.barh(rows, result["probability"])
    axes.set_yticks(rows, [repr(t) for t in result["tokens"]], fontsize=8)
    axes.set_xlabel("p(token | text)")
    return fig


# ------------------------------------------------------------------------------------------------ 6. alignment
def _greedy_steps(loaded: Loaded, source_ids: list[int], steps: int) -> tuple[list[int], list, list[float]]:
    """Decode one token at a time, carrying the decoder's state: the argmax at each step, its row of alpha (S,) and
    its probability; stops after the end-of-sequence token or `steps` tokens."""
    model = loaded.model
    encoder_outputs = model.get_encoder()(input_ids=_batch(loaded, source_ids))
    token, state, eos = _start_token(model.config), None, model.config.eos_token_id
    written, rows, probabilities = [], [], []
    for _ in range(steps):
        outputs = model(
            encoder_outputs=encoder_outputs,
            decoder_input_ids=_batch(loaded, [token]),
            past_key_values=state,
            use_cache=True,
            output_attentions=True,
        )
        p = outputs.logits[0, -1].float().softmax(-1)
        token, state = int(p.argmax()), cache_of(outputs)
        written.append(token)
        rows.append(outputs.alignments[0, -1])
        probabilities.append(float(p[token]))
        if token == eos:
            break
    return written, rows, probabilities


def _beam_steps(loaded: Loaded, source_ids: list[int], steps: int, num_beams: int):
    """generate()'s beam search, then the chosen translation read back in one teacher-forced pass: the alignments
    of a prefix do not depend on the other beams, so each row is the one the decoder had at that step."""
    model = loaded.model
    source = _batch(loaded, source_ids)
    generated = model.generate(input_ids=source, max_new_tokens=steps, num_beams=num_beams, do_sample=False)
    written = generated[0, 1:].tolist()
    outputs = model(input_ids=source, decoder_input_ids=generated[:, :-1], output_attentions=True)
    p = outputs.logits[0].float().softmax(-1)
    return written, list(outputs.alignments[0]), p[torch.arange(len(written)), written].tolist()


@torch.no_grad()
def alignment_steps(loaded: Loaded, source: str, steps: int = 32, num_beams: int = 1) -> dict:
    """The Bahdanau / Luong decoder translating `source` one token per step (greedy: the argmax at each step,
    carrying its state as generate() does; `num_beams` > 1: generate()'s beam search), with each step's alignment.
    Returns `matrix` (U, S): row i is alpha_ij, the weights over the source tokens while writing target token i
    (each row sums to 1); `row_labels` = `target_tokens` (U,), `column_labels` = `source_tokens` (S,);
    `target_ids` (U,); `probability` (U,): each written token's probability at its step."""
    _check_kind(loaded, "alignment_steps", Loaded.view_kinds("alignment"))
    if loaded.model.config.attention_type == "none":
        raise ValueError(f"alignment_steps: {loaded.name} has no attention (attention_type='none') to show.")
    ids = _ids(loaded, source)
    if num_beams > 1:
        written, rows, probabilities = _beam_steps(loaded, ids, steps, num_beams)
    else:
        written, rows, probabilities = _greedy_steps(loaded, ids, steps)
    tokenizer = loaded.tokenizer
    target_tokens, source_tokens = _labels(tokenizer, written), _labels(tokenizer, ids)
    return {
        "matrix": _numpy(torch.stack(rows)),
        "row_labels": target_tokens,
        "column_labels": source_tokens,
        "target_tokens": target_tokens,
        "source_tokens": source_tokens,
        "target_ids": written,
        "probability": np.asarray(probabilities, dtype=np.float32),
    }


@torch.no_grad()
def cross_attention_average(loaded: Loaded, source: str, target: str | None = None, max_new_tokens: int = 32) -> dict:
    """The Transformer's cross-attention averaged over its layers and heads: `matrix` (U, S), row i the weights over
    the source tokens while the decoder writes target token i (each row sums to 1), on `target` (None: its own
    greedy translation); `row_labels` = `target_tokens`, `column_labels` = `source_tokens`."""
    _check_kind(loaded, "cross_attention_average", Loaded.view_kinds("cross"))
    result = attention(loaded, source, target, max_new_tokens)
    return {
        "matrix": result["cross_attentions"].mean((0, 1)),
        "row_labels": result["target_tokens"],
        "column_labels": result["tokens"],
        "target_tokens": result["target_tokens"],
        "source_tokens": result["tokens"],
    }


def figure_alignment_steps(result: dict, upto: int | None = None) -> Figure:
    """An `alignment_steps` (or `cross_attention_average`) result: target tokens down, source across, white = 1;
    with `upto`, only the first `upto` steps (one more per click)."""
    matrix, rows = result["matrix"], result["row_labels"]
    if upto is not None:
        matrix, rows = matrix[:upto], rows[:upto]
    columns = result["column_labels"]
    fig = _figure(_along(len(columns), 0.25, 3.0), _along(len(rows), 0.25, 1.5))
    axes = fig.add_subplot()
    _heatmap(axes, matrix, rows, columns, cmap="gray", vmin=0.0, vmax=1.0)
    axes.set_xlabel("source")
    axes.set_ylabel("target")
    return fig


def figure_cross_attention_average(result: dict) -> Figure:
    """The Transformer's averaged cross-attention, drawn as an alignment."""
    return figure_alignment_steps(result)


# ------------------------------------------------------------------------------------------ 7. state-space models
def _mixer(loaded: Loaded, layer: int):
    return loaded.model.base_model.layers[layer].mixer


def _state_norms_stepwise(loaded: Loaded, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor, object]:
    """The model run one token at a time with its state: the norm of every layer's SSM state after each token
    (L, T), the top outputs (T, H), and the last state."""
    backbone, state, norms, tops = loaded.model.base_model, None, [], []
    for token in ids:
        outputs = backbone(input_ids=_batch(loaded, [token]), past_key_values=state, use_cache=True)
        state = cache_of(outputs)
        norms.append(torch.linalg.vector_norm(state.ssm_states[:, 0].flatten(1), dim=-1))
        tops.append(outputs.last_hidden_state[0, -1])
    return torch.stack(norms, 1), torch.stack(tops), state


@torch.no_grad()
def ssm_inside(loaded: Loaded, text: str, layer: int = -1) -> dict:
    """Inside an SSM layer (`layer`, default the top one) on the text. Both kinds: `tokens`; `state_norm` (L, T),
    the norm of each layer's scan state x (over its channels and modes) after each token, from the model run one
    token at a time with its state (`state_norm_layer` (T,): the chosen layer's); `stepwise_difference`, the
    largest difference between those one-token outputs and one full forward (zero up to rounding). Mamba: `delta`
    (E, T), the step size Delta = softplus(W_Delta (W_r u) + b_Delta) of each channel at each token (a hook on
    `dt_proj`), and `delta_mean` (T,) over channels: a large Delta writes the token into the state, a small one
    keeps the state. S4D: `kernel` (H, T), K_l = C A_bar^l B_bar of each channel over the lag l = 0..T-1, and
    `step_size` (H,), each channel's fixed Delta."""
    _check_kind(loaded, "ssm_inside", Loaded.view_kinds("ssm"))
    ids = _ids(loaded, text)
    backbone, mixer = loaded.model.base_model, _mixer(loaded, layer)
    captured = []
    hook = None
    if loaded.kind == "mamba":  # Delta's pre-activation W_Delta (W_r u) + b_Delta, (1, T, E)
        hook = mixer.dt_proj.register_forward_hook(lambda module, args, output: captured.append(output))
    try:
        full = backbone(input_ids=_batch(loaded, ids), use_cache=False).last_hidden_state[0]
    finally:
        if hook is not None:
            hook.remove()
    norms, tops, _ = _state_norms_stepwise(loaded, ids)
    layer_index = layer % len(backbone.layers)
    result = {
        "tokens": _labels(loaded.tokenizer, ids),
        "state_norm": _numpy(norms),
        "state_norm_layer": _numpy(norms[layer_index]),
        "stepwise_difference": float((tops - full).abs().max()),
    }
    if captured:
        delta = F.softplus(captured[0][0].float()).T  # (E, T)
        return result | {"delta": _numpy(delta), "delta_mean": _numpy(delta.mean(0))}
    dt_A, B_bar, C = mixer.discretized()
    return result | {"kernel": _numpy(s4d_kernel(dt_A, B_bar, C, len(ids))), "step_size": _numpy(mixer.log_dt.exp())}


def figure_ssm_inside(result: dict) -> Figure:
    """Mamba's Delta (channels x tokens) or S4D's kernel (channels x lag), and the state's norm over the tokens."""
    tokens = result["tokens"]
    fig = _figure(_along(len(tokens)), 5.0)
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)
    if "delta" in result:
        image = _heatmap(top, result["delta"], title="step size Delta (channel x token)", cmap="magma")
    else:
        image = _heatmap(top, result["kernel"], title="S4D kernel K (channel x lag)", cmap="RdBu_r")
        top.set_xlabel("lag", fontsize=7)
    fig.colorbar(image, ax=top, shrink=0.8)
    for index, norms in enumerate(result["state_norm"]):
        bottom.plot(norms, label=f"layer {index}")
    _label_tokens(bottom, tokens)
    bottom.set_ylabel("|x| after the token", fontsize=7)
    bottom.legend(fontsize=7)
    return fig


@torch.no_grad()
def scan_vs_convolution(loaded: Loaded, text: str, layer: int = -1, channel: int = 0) -> dict:
    """An S4D layer's SSM output y (before its GELU and output layer) on the text, computed twice from the input u the
    layer receives in the model: by the convolution y = K * u + D u (FFT, the mode training uses) and by the
    recurrence x_k = A_bar x_{k-1} + B_bar u_k, y_k = C x_k + D u_k (one token at a time, the mode generation uses).
    Returns `tokens`; `convolution` and `recurrence` (H, T); `difference` (T,), the largest difference over the
    channels at each token; `max_difference`; `channel` and its `convolution_channel`, `recurrence_channel` (T,)."""
    _check_kind(loaded, "scan_vs_convolution", Loaded.view_kinds("scan"))
    mixer = _mixer(loaded, layer)
    ids = _ids(loaded, text)
    captured = []
    hook = mixer.register_forward_hook(lambda module, args, output: captured.append(args[0]))
    try:
        loaded.model.base_model(input_ids=_batch(loaded, ids), use_cache=False)
    finally:
        hook.remove()
    u = captured[0].float().transpose(1, 2)  # (1, H, T): the normed states the mixer reads
    dt_A, B_bar, C = mixer.discretized()
    D = mixer.D.float()
    convolution, _ = s4d_convolution(u, dt_A, B_bar, C, D)
    state, steps = torch.zeros(*u.shape[:2], B_bar.shape[-1], dtype=B_bar.dtype, device=u.device), []
    for t in range(u.shape[-1]):
        y, state = s4d_step(u[..., t], dt_A, B_bar, C, D, state)
        steps.append(y)
    recurrence = torch.stack(steps, -1)
    difference = (convolution - recurrence).abs()[0].amax(0)
    channel = int(channel) % u.shape[1]
    return {
        "tokens": _labels(loaded.tokenizer, ids),
        "convolution": _numpy(convolution[0]),
        "recurrence": _numpy(recurrence[0]),
        "difference": _numpy(difference),
        "max_difference": float(difference.max()),
        "channel": channel,
        "convolution_channel": _numpy(convolution[0, channel]),
        "recurrence_channel": _numpy(recurrence[0, channel]),
    }


def figure_scan_vs_convolution(result: dict) -> Figure:
    """One channel's output by both modes over the tokens, drawn over each other, and their difference."""
    tokens, channel = result["tokens"], result["channel"]
    fig = _figure(_along(len(tokens)), 4.5)
    top, bottom = fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2, sharex=None)
    top.plot(result["convolution_channel"], lw=3, alpha=0.5, label="convolution (FFT)")
    top.plot(result["recurrence_channel"], ls="--", marker=".", label="recurrence (one token at a time)")
    top.set_title(f"channel {channel}: the same output, max difference {result['max_difference']:.1e}", fontsize=8)
    top.set_xticks([])
    top.legend(fontsize=7)
    bottom.bar(range(len(tokens)), result["difference"])
    _label_tokens(bottom, tokens)
    bottom.set_ylabel("max |difference|", fontsize=7)
    return fig


# --------------------------------------------------------------------------------------- 8. Mamba-2's attention
def _mixer_input(loaded: Loaded, ids: list[int], layer: int) -> torch.Tensor:
    """What layer `layer`'s mixer reads in the model on the ids (after its block's norm), (1, T, H), by a hook."""
    captured = []
    hook = _mixer(loaded, layer).register_forward_hook(lambda module, args, output: captured.append(args[0]))
    try:
        loaded.model.base_model(input_ids=_batch(loaded, ids), use_cache=False)
    finally:
        hook.remove()
    return captured[0]


def causal_attention_kinds() -> tuple[str, ...]:
    """The kinds a Mamba-2 layer's attention is set beside (GPT): the causal language models whose attention weights
    the attention view reads, from the registry."""
    language_models = Loaded.view_kinds(LANGUAGE_MODEL)
    return tuple(kind for kind in Loaded.view_kinds("attention") if kind in language_models)


def _causal_attention(loaded: Loaded, ids: list[int], layer: int) -> tuple[np.ndarray, int]:
    """A causal Transformer's attention weights in one layer (`layer` clipped to its depth, counted from the top when
    negative) on the ids: (A, T, T), and the layer's index."""
    with _eager(loaded.model):
        weights = loaded.model(input_ids=_batch(loaded, ids), output_attentions=True).attentions
    index = min(max(layer, -len(weights)), len(weights) - 1) % len(weights)
    return _numpy(weights[index][0]), index


@torch.no_grad()
def mamba2_attention(loaded: Loaded, text: str, layer: int = -1, beside: Loaded | None = None) -> dict:
    """The attention matrix a Mamba-2 layer (`layer`, default the top one) computes on the text, per head: its SSM
    output is y_t = sum_{s <= t} M_ts x_s with M = L o (C B^T) diag(Delta) + diag(D) (models/ssd.py: the dual,
    quadratic form; L_ts = exp(a_{s+1} + ... + a_t), one scalar decay a = Delta A per head and token), x the
    channels of `Mamba2Mixer.ssm_inputs`, before the gate, the norm and out_proj. Returns `tokens`, `attention`
    (heads, T, T) (row t: the weights output t gives the inputs s <= t; zero above the diagonal; signed, not a
    distribution), `skip` (heads,), the D on its diagonal, `A` (heads,), each head's decay rate, `layer` (the
    index), `name`, and `matrix`, the mean over the heads, with `row_labels` = `column_labels` = the tokens (what
    `to_csv` writes). `beside`: a causal Transformer (GPT) with the same tokenizer, whose attention weights in the
    layer `layer` names (clipped to its depth: -1 is its top layer too) on the same tokens are added as
    `beside_attention` (its heads, T, T), with `beside_name` and `beside_layer`."""
    _check_kind(loaded, "mamba2_attention", Loaded.view_kinds("mamba2_attention"))
    if beside is not None:
        _check_kind(beside, "mamba2_attention (beside)", causal_attention_kinds())
        ids, _ = _shared_ids([loaded, beside], text, "mamba2_attention")
    else:
        ids = _ids(loaded, text)
    depth = len(loaded.model.base_model.layers)
    if not -depth <= layer < depth:
        raise ValueError(f"mamba2_attention: {loaded.name} has {depth} layers; give a layer in [{-depth}, {depth - 1}] "
                         f"(-1: the top one), not {layer}.")  # fmt: skip
    mixer, index = _mixer(loaded, layer), layer % depth
    matrix = mixer.attention(_mixer_input(loaded, ids, index))[0]  # (heads, T, T), the skip D on the diagonal
    tokens = _labels(loaded.tokenizer, ids)
    result = {
        "tokens": tokens,
        "attention": _numpy(matrix),
        "skip": _numpy(mixer.D),
        "A": _numpy(-torch.exp(mixer.A_log.float())),
        "layer": index,
        "name": loaded.name,
        "matrix": _numpy(matrix.mean(0)),
        "row_labels": tokens,
        "column_labels": tokens,
    }
    if beside is not None:
        weights, beside_index = _causal_attention(beside, ids, layer)
        result |= {"beside_attention": weights, "beside_name": beside.name, "beside_layer": beside_index}
    return result


def _head_mosaic(blocks: np.ndarray) -> tuple[np.ndarray, int]:
    """(heads, T, T) -> the heads side by side with a NaN gap between them (drawn white), and the gap."""
    heads, rows, columns = blocks.shape
    gap = max(1, columns // 16)
    mosaic = np.full((rows, heads * (columns + gap) - gap), np.nan)
    for head in range(heads):
        mosaic[:, head * (columns + gap) : head * (columns + gap) + columns] = blocks[head]
    return mosaic, gap


def figure_mamba2_attention(result: dict) -> Figure:
    """Mamba-2's heads across (each scaled to its largest |M_ts| off the skip, red positive, blue negative; the skip
    D is left off the diagonal, whose C_t B_t Delta_t it would hide), and under them the Transformer's heads set
    beside it (white = 1), queries down and keys across. One image per model: a panel per head draws slowly."""
    tokens, weights = result["tokens"], result["attention"]
    heads, length, _ = weights.shape
    ssd = weights - result["skip"][:, None, None] * np.eye(length)  # L o (C B^T) diag(Delta)
    scale = np.maximum(np.abs(ssd).max((1, 2), keepdims=True), 1e-12)
    panels = [(ssd / scale, "RdBu_r", -1.0, [f"head {h} (A = {a:.2g})" for h, a in enumerate(result["A"])],
               f"{result['name']}, layer {result['layer']}: M = L o (C B^T) diag(Delta), each head scaled to its "
               "largest |M| (red +, blue -)")]  # fmt: skip
    if "beside_attention" in result:
        beside = result["beside_attention"]
        panels.append((beside, "gray", 0.0, [f"head {h}" for h in range(len(beside))],
                       f"{result['beside_name']}, layer {result['beside_layer']}: softmax attention (white = 1)"))  # fmt: skip
    cell, most = min(0.12 * length + 0.8, 4.0), max(len(blocks) for blocks, *_ in panels)
    fig = _figure(most * cell + 1.0, len(panels) * (cell + 0.7))
    for row, (blocks, colours, low, labels, title) in enumerate(panels):
        axes = fig.add_subplot(len(panels), 1, row + 1)
        mosaic, gap = _head_mosaic(blocks)
        palette = matplotlib.colormaps[colours].with_extremes(bad="white")
        axes.imshow(mosaic, aspect="auto", interpolation="nearest", cmap=palette, vmin=low, vmax=1.0)
        axes.set_xlim(-0.5, most * (length + gap) - gap - 0.5)  # a head is as wide in both rows
        _label_tokens(axes, tokens, "x")
        _label_tokens(axes, tokens, "y")
        for head, label in enumerate(labels):  # just above the block, whatever the cell's size
            axes.annotate(label, (head * (length + gap) + (length - 1) / 2, 1), xycoords=("data", "axes fraction"),
                          xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7)  # fmt: skip
        axes.set_frame_on(False)
        axes.set_title(title, fontsize=8, pad=14)
    return fig


__all__ = [
    "alignment_steps",
    "attention",
    "attention_from",
    "causal_attention_kinds",
    "cross_attention_average",
    "figure_alignment_steps",
    "figure_cross_attention_average",
    "figure_attention",
    "figure_fill_mask",
    "figure_mamba2_attention",
    "figure_recurrent_state",
    "figure_scan_vs_convolution",
    "figure_ssm_inside",
    "fill_mask",
    "mamba2_attention",
    "recurrent_state",
    "scan_vs_convolution",
    "ssm_inside",
]
