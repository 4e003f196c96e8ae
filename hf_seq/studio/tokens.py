"""What the models predict, token by token: surprisal, two models side by side, the lineage on one sentence, the
context a prediction can read, the n-gram's back-off and the sampling distribution.

Every view is a pure function `(loaded model(s), text, settings) -> dict` of token strings, numpy arrays and numbers
(`to_csv` writes it); `figure_<view>(result)` draws that dict on a matplotlib figure of its own (the Agg canvas, so
pyplot is left alone and nothing needs closing). The views read any causal LM of the registry (GPT, RNN, SSM, conv,
window, HMM: `model(input_ids=...).logits`) and the Kneser-Ney n-gram (`Loaded.ngram`).

Units: surprisal is in bits, -log2 p(token | the tokens before it). A causal LM's logits at position t predict token
t + 1, and the text is scored without a BOS token, so the first token has no prediction: NaN in every per-token array.
A view reads the first `MAX_TOKENS` tokens of the text, or as many as the model's position table holds (GPT's
`max_position_embeddings`; the shortest among the models a view sets side by side); sampling reads the text's end.
"""

import math

import numpy as np
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from hf_seq.registry import family
from hf_seq.studio.views import MAX_TOKENS, Loaded, encode, token_limit

LN2 = math.log(2.0)


# ------------------------------------------------------------------------------------------------ what views share
def _check_scorer(loaded: Loaded, view: str) -> None:
    """A view reads an n-gram or a causal LM (an instance of its family's AutoModelForCausalLM class)."""
    if loaded.ngram is not None:
        return
    fam = family(loaded.model.config.model_type)
    causal = fam.models.get("AutoModelForCausalLM")
    if causal is None or not isinstance(loaded.model, fam.model_class("AutoModelForCausalLM")):
        raise ValueError(
            f"{view}: {loaded.name} ({loaded.kind}) is not a causal language model; this view reads the n-gram and "
            "the GPT, RNN, SSM, conv, window and HMM language models."
        )


def _ids(loaded: Loaded, text: str, view: str, limit: int | None = None) -> tuple[list[int], list[str]]:
    """The text's ids and token strings under the model's tokenizer (the first `limit` of them, by default
    `token_limit(loaded)`), refusing an empty text."""
    _check_scorer(loaded, view)
    ids, tokens = encode(loaded, text, limit or token_limit(loaded))
    if not ids:
        raise ValueError(f"{view}: the text has no tokens under {loaded.name}'s tokenizer; type some text.")
    return ids, tokens


def _shared_ids(loaded_list: list[Loaded], text: str, view: str) -> tuple[list[int], list[str]]:
    """The text's ids, the same under every model's tokenizer, else a ValueError naming the two that differ; as many
    as the shortest-reading model takes."""
    limit = min(token_limit(loaded) for loaded in loaded_list)
    ids, tokens = _ids(loaded_list[0], text, view, limit)
    first = loaded_list[0]
    for other in loaded_list[1:]:
        other_ids, _ = _ids(other, text, view, limit)
        if other.tokenizer.get_vocab() != first.tokenizer.get_vocab() or other_ids != ids:
            raise ValueError(
                f"{view}: {first.name} and {other.name} do not share a tokenizer (their vocabularies or their "
                "tokens of this text differ), so their predictions cannot be set side by side token by token; load "
                "models trained with the same tokenizer."
            )
    return ids, tokens


def _logits(model, ids: list[int]) -> torch.Tensor:
    """(T, V) float32 logits of a causal LM on one sequence: row t scores the token after ids[t]."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids], device=model.device)).logits[0].float()


def _bits(loaded: Loaded, ids: list[int]) -> np.ndarray:
    """-log2 p(ids[t] | ids[:t]) for every t, NaN at t = 0 (no prediction)."""
    bits = np.full(len(ids), np.nan)
    if len(ids) < 2:
        return bits
    if loaded.ngram is not None:
        bits[1:] = loaded.ngram.token_nll(ids) / LN2
    else:
        log_probs = torch.log_softmax(_logits(loaded.model, ids)[:-1], -1)
        targets = torch.tensor(ids[1:], device=log_probs.device)[:, None]
        bits[1:] = -log_probs.gather(1, targets)[:, 0].double().cpu().numpy() / LN2
    return bits


def _next_scores(loaded: Loaded, context: list[int]) -> torch.Tensor:
    """The scores of the next token after `context` over the vocabulary, on the CPU: a network's float32 logits, what
    generate() warps and samples from; the n-gram's log-probabilities in float64."""
    if loaded.ngram is not None:
        return torch.from_numpy(np.log(loaded.ngram.next_token_probs(context)))
    return _logits(loaded.model, context)[-1].cpu()


def _decode(loaded: Loaded, ids) -> list[str]:
    return [loaded.tokenizer.decode([int(i)]) for i in ids]


def _check_position(position: int, n: int, view: str) -> None:
    if not 0 <= position < n:
        raise ValueError(
            f"{view}: position {position} is outside [0, {n - 1}] for a text of {n} tokens (position t is the "
            "prediction made after token t, of the token that follows it)."
        )


# ------------------------------------------------------------------------------------------------ 1. surprisal
def surprisal(loaded: Loaded, text: str) -> dict:
    """Per token of the text, its surprisal in bits under the model: `bits[t]` = -log2 p(token t | tokens 0..t-1).
    `bits[0]` is NaN: the text is scored without a BOS token, so nothing predicts the first token.

    Returns `tokens` (strings), `ids`, `bits`, `mean_bits` (over the predicted tokens 1..T-1; times ln 2 it is the
    model's loss on the text in nats) and `model` (the name)."""
    ids, tokens = _ids(loaded, text, "surprisal")
    bits = _bits(loaded, ids)
    mean = float(np.nanmean(bits)) if len(ids) > 1 else math.nan
    return {"tokens": tokens, "ids": ids, "bits": bits, "mean_bits": mean, "model": loaded.name}


def topk(loaded: Loaded, text: str, position: int, k: int = 10) -> dict:
    """The k most probable next tokens at `position`: the distribution of the token after token `position`, given
    tokens 0..position (the logits' row `position`; the last position gives the token after the text).

    Returns `tokens` and `ids` of the k candidates, most probable first, their `probabilities`, `position`, `actual`
    (the text's next token, None after the text), its `actual_probability` (2^-bits of the surprisal strip at
    position + 1; NaN after the text) and `actual_rank` (1 = the most probable, ties sharing a rank; 0 after the
    text)."""
    ids, tokens = _ids(loaded, text, "topk")
    _check_position(position, len(ids), "topk")
    probs = torch.softmax(_next_scores(loaded, ids[: position + 1]).double(), -1).numpy()
    top = np.argsort(-probs, kind="stable")[:k]
    within = position + 1 < len(ids)
    actual_probability = float(probs[ids[position + 1]]) if within else math.nan
    return {
        "tokens": _decode(loaded, top),
        "ids": top.tolist(),
        "probabilities": probs[top],
        "position": position,
        "actual": tokens[position + 1] if within else None,
        "actual_probability": actual_probability,
        "actual_rank": int(np.sum(probs > actual_probability)) + 1 if within else 0,
    }


# ------------------------------------------------------------------------------------------------ 2. two models
def compare(loaded_a: Loaded, loaded_b: Loaded, text: str, k: int = 5) -> dict:
    """Two models on the same tokens (they must share a tokenizer: a ValueError otherwise).

    Returns `tokens`, `ids`, `bits_a` and `bits_b` (each model's surprisal, NaN on the first token), `difference`
    (bits_a - bits_b: negative where a predicts better), `cumulative_a` and `cumulative_b` (bits summed through each
    token), `winner` (per token: the name of the model whose k largest wins include it, else ""), `name_a`, `name_b`,
    `total_a` and `total_b` (the bits of the whole text)."""
    ids, tokens = _shared_ids([loaded_a, loaded_b], text, "compare")
    bits_a, bits_b = _bits(loaded_a, ids), _bits(loaded_b, ids)
    difference = bits_a - bits_b
    winner = [""] * len(ids)
    order = np.argsort(np.nan_to_num(difference), kind="stable")  # a's largest wins first, b's last
    for i in order[:k]:
        if difference[i] < 0:
            winner[i] = loaded_a.name
    for i in order[::-1][:k]:
        if difference[i] > 0:
            winner[i] = loaded_b.name
    cumulative_a, cumulative_b = np.nancumsum(bits_a), np.nancumsum(bits_b)
    return {
        "tokens": tokens,
        "ids": ids,
        "bits_a": bits_a,
        "bits_b": bits_b,
        "difference": difference,
        "cumulative_a": cumulative_a,
        "cumulative_b": cumulative_b,
        "winner": winner,
        "name_a": loaded_a.name,
        "name_b": loaded_b.name,
        "total_a": float(cumulative_a[-1]),
        "total_b": float(cumulative_b[-1]),
    }


# ------------------------------------------------------------------------------------------------ 3. lineage strip
def lineage_strip(loaded_list: list[Loaded], text: str) -> dict:
    """Every model's surprisal on the same tokens (they must share a tokenizer), one row per model.

    Returns `matrix` (models x tokens, bits; NaN in the first column), `row_labels` (the models' names),
    `column_labels` (the tokens), `mean_bits` (per model, over the predicted tokens) and `vmax` (the largest bits:
    the top of the one colour scale)."""
    if not loaded_list:
        raise ValueError("lineage_strip: load at least one model.")
    ids, tokens = _shared_ids(loaded_list, text, "lineage_strip")
    matrix = np.stack([_bits(loaded, ids) for loaded in loaded_list])
    predicted = matrix[:, 1:]
    return {
        "matrix": matrix,
        "row_labels": [loaded.name for loaded in loaded_list],
        "column_labels": tokens,
        "mean_bits": predicted.mean(1) if predicted.size else np.full(len(loaded_list), np.nan),
        "vmax": float(predicted.max()) if predicted.size else 1.0,
    }


# ------------------------------------------------------------------------------------------------ 8. context reach
def _stated_reach(loaded: Loaded, position: int) -> int:
    """How many tokens, ending with token `position`, the prediction made there can read by construction."""
    if loaded.ngram is not None:
        return min(loaded.ngram.order - 1, position + 1)
    config = loaded.model.config
    if hasattr(config, "receptive_field"):  # the conv LM: its output at t reads t - R + 1 .. t
        return min(config.receptive_field, position + 1)
    if hasattr(config, "context_size"):  # the fixed window: the last n - 1 tokens
        return min(config.context_size, position + 1)
    return position + 1  # recurrent, state-space, attention and HMM: every token so far


def _influence(model, ids: list[int], target: int) -> np.ndarray:
    """|d log p(target | ids) / d e_s|, the L2 norm of the gradient at each input embedding e_s of `ids`. The leaf is
    the input embedding layer's output (what `inputs_embeds` would pass), taken with a forward hook so that the HMM,
    which accepts token ids only, is measured too; `autograd.grad` leaves the parameters' .grad untouched."""
    leaves = []

    def as_leaf(module, args, output):
        leaves.append(output.detach().requires_grad_(True))
        return leaves[-1]

    handle = model.get_input_embeddings().register_forward_hook(as_leaf)
    try:
        with torch.enable_grad():
            logits = model(input_ids=torch.tensor([ids], device=model.device)).logits
            log_p = torch.log_softmax(logits[0, -1].float(), -1)[target]
            (gradient,) = torch.autograd.grad(log_p, leaves[0])
    finally:
        handle.remove()
    return gradient[0].float().norm(dim=-1).cpu().numpy().astype(np.float64)


def context_reach(loaded: Loaded, text: str, position: int) -> dict:
    """Which tokens can influence the prediction made at `position` (of the token after it, from tokens
    0..position).

    Returns `tokens`, `ids`, `in_reach` (1 for the tokens the model reads by construction, all ending at `position`:
    the conv LM's receptive field of `config.receptive_field` tokens, the window's `context_size`, the n-gram's
    order - 1, every token so far for the others; 0 elsewhere), `influence` (the measured reach: the L2 norm of the
    gradient of log p(target) with respect to each input embedding; 0 after `position`; NaN for the n-gram, which has
    no gradient), `reach` (the number of tokens in reach), `position` and `target` (the token whose log-probability is
    differentiated: the text's next token, or after the text the model's most probable one)."""
    ids, tokens = _ids(loaded, text, "context_reach")
    _check_position(position, len(ids), "context_reach")
    reach = _stated_reach(loaded, position)
    in_reach = np.zeros(len(ids), dtype=np.int64)
    in_reach[position + 1 - reach : position + 1] = 1
    if position + 1 < len(ids):
        target = ids[position + 1]
    else:
        target = int(_next_scores(loaded, ids).argmax())
    influence = np.full(len(ids), np.nan if loaded.ngram is not None else 0.0)
    if loaded.ngram is None:
        influence[: position + 1] = _influence(loaded.model, ids[: position + 1], target)
    return {
        "tokens": tokens,
        "ids": ids,
        "in_reach": in_reach,
        "influence": influence,
        "reach": reach,
        "position": position,
        "target": loaded.tokenizer.decode([target]),
    }


# ------------------------------------------------------------------------------------------------ 9. n-gram back-off
def ngram_backoff(loaded: Loaded, text: str) -> dict:
    """How the interpolated Kneser-Ney model (`hf_seq.baselines.ngram`) reaches each token's probability, read from its
    own trace (`KneserNeyLM.backoff`). P_k mixes the discounted order-k estimate with P_{k-1}, from order 1 up; an
    order whose history h (the k-1 tokens before) was never seen leaves P_{k-1} as it is, so the last order with a
    seen history decides the final mix.

    Returns per token (NaN on the first, which has no prediction): `order` (the longest k whose history was seen in
    the counts; 1 means only the unigram), `count` (c_k(h w) at that order: the plain count at the highest order, the
    continuation count below; 0 when h was seen but never followed by this token), `discount` (D_k), `backoff_weight`
    (D_k N_k(h .) / c_k(h .), the mass that order hands to P_{k-1}) and `probability` (the final P(token | history),
    equal to exp(-token_nll)); plus `tokens` and `ids`."""
    if loaded.ngram is None:
        raise ValueError(f"ngram_backoff: {loaded.name} ({loaded.kind}) is not an n-gram model.")
    ids, tokens = _ids(loaded, text, "ngram_backoff")
    columns = {name: np.full(len(ids), np.nan) for name in ("order", "count", "discount", "backoff_weight")}
    probability = np.full(len(ids), np.nan)
    if len(ids) > 1:
        trace = loaded.ngram.backoff(ids)  # per token 1..T-1 and per order
        seen = trace["seen"]  # order 1's empty history is always seen, so every row has a last seen order
        decided = seen.shape[1] - 1 - np.argmax(seen[:, ::-1], 1)  # its column
        rows = np.arange(decided.size)
        columns["order"][1:] = decided + 1
        columns["count"][1:] = trace["count"][rows, decided]
        columns["discount"][1:] = trace["discount"][decided]
        columns["backoff_weight"][1:] = trace["backoff_weight"][rows, decided]
        probability[1:] = trace["probability"][:, -1]
    return {"tokens": tokens, "ids": ids, **columns, "probability": probability}


# ------------------------------------------------------------------------------------------------ 10. sampling
def _warp(scores: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The scores generate(do_sample=True) samples from: transformers' own warpers, in generate's order."""
    processors = LogitsProcessorList()
    if temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if top_k:
        processors.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    return processors(torch.zeros(1, 0, dtype=torch.long), scores[None])[0]


def _sample(loaded: Loaded, ids: list[int], settings: dict, seed: int, length: int) -> list[int]:
    """`length` tokens after `ids` (fewer if the model ends the text): generate(do_sample=True) for a network, the
    same warpers over the n-gram's distributions for the n-gram; the seed fixes the draw, the global RNG is kept."""
    if loaded.ngram is not None:
        generator, context = torch.Generator().manual_seed(seed), list(ids)
        for _ in range(length):
            probs = torch.softmax(_warp(_next_scores(loaded, context), **settings), -1)
            context.append(int(torch.multinomial(probs, 1, generator=generator)))
        return context[len(ids) :]
    model = loaded.model
    input_ids = torch.tensor([ids], device=model.device)
    with torch.random.fork_rng(devices=[model.device] if model.device.type == "cuda" else []):
        torch.manual_seed(seed)
        output = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            max_new_tokens=length,
            pad_token_id=loaded.tokenizer.pad_token_id,
            **settings,
        )
    return output[0, len(ids) :].tolist()


def sampling(
    loaded: Loaded,
    text: str,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
    length: int = 20,
    top: int = 20,
) -> dict:
    """The next token's distribution after the text, before and after temperature / top-k (0: off) / top-p (1: off),
    and a sample of `length` tokens drawn with those settings and `seed` (the same seed, the same sample).

    Returns `tokens` and `ids` (the `top` most probable next tokens, most probable first; the warpers keep the order,
    so these are also the most probable after truncation), `before` and `after` (their probabilities before and after
    truncation; 0 where a token was cut), `kept` (how many tokens of the vocabulary keep a nonzero probability),
    `settings` (temperature, top_k, top_p, seed) and `sample` (a dict: `ids`, `tokens` and `text` of the sample)."""
    ids, _ = _ids(loaded, text, "sampling", MAX_TOKENS)
    ids = ids[-max(1, token_limit(loaded) - length) :]  # the end of the text, leaving the position table room for the sample
    settings = {"temperature": float(temperature), "top_k": int(top_k), "top_p": float(top_p)}
    scores = _next_scores(loaded, ids)
    before = torch.softmax(scores.double(), -1).numpy()
    after = torch.softmax(_warp(scores, **settings).double(), -1).numpy()
    shown = np.argsort(-before, kind="stable")[:top]
    sample_ids = _sample(loaded, ids, settings, seed, length)
    return {
        "tokens": _decode(loaded, shown),
        "ids": shown.tolist(),
        "before": before[shown],
        "after": after[shown],
        "kept": int(np.count_nonzero(after)),
        "settings": {**settings, "seed": seed},
        "sample": {
            "ids": sample_ids,
            "tokens": _decode(loaded, sample_ids),
            "text": loaded.tokenizer.decode(sample_ids),
        },
    }


# ------------------------------------------------------------------------------------------------ figures
def _figure(width: float, height: float, rows: int = 1):
    """A figure on its own Agg canvas (pyplot untouched) and its axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, 1, squeeze=False)[:, 0]
    return figure, axes


def _label(token: str) -> str:
    """A token as a tick label: spaces as middle dots and newlines as \\n, so they can be seen."""
    token = token.replace(" ", "·").replace("\n", "\\n").replace("\t", "\\t")
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in token) or "∅"


def _width(n: int) -> float:
    return min(max(4.0, 1.5 + 0.3 * n), 30.0)


def _token_axis(axes, tokens: list[str]) -> None:
    """Tokens along the x axis, every one labelled up to 120 of them, then every k-th."""
    step = max(1, math.ceil(len(tokens) / 120))
    ticks = list(range(0, len(tokens), step))
    axes.set_xticks(ticks, [_label(tokens[i]) for i in ticks], rotation=90, fontsize=8)
    axes.set_xlim(-0.5, len(tokens) - 0.5)


def figure_surprisal(result: dict):
    """Bars of each token's bits, coloured on the same scale."""
    from matplotlib import colormaps

    bits = np.nan_to_num(result["bits"])
    figure, (axes,) = _figure(_width(len(bits)), 3.0)
    top = max(bits.max(), 1e-9)
    axes.bar(range(len(bits)), bits, color=colormaps["viridis"](bits / top))
    _token_axis(axes, result["tokens"])
    axes.set_ylabel("surprisal (bits)")
    axes.set_title(f"{result['model']}: {result['mean_bits']:.2f} bits per predicted token")
    return figure


def figure_topk(result: dict):
    """Horizontal bars of the top-k next tokens' probabilities, the text's own token marked."""
    probabilities = result["probabilities"]
    figure, (axes,) = _figure(5.0, 1.0 + 0.3 * len(probabilities))
    labels = [_label(t) for t in result["tokens"]]
    colors = ["tab:orange" if t == result["actual"] else "tab:blue" for t in result["tokens"]]
    axes.barh(range(len(probabilities)), probabilities, color=colors)
    axes.set_yticks(range(len(labels)), labels)
    axes.invert_yaxis()
    axes.set_xlabel("probability")
    actual = "" if result["actual"] is None else f"; the text has {_label(result['actual'])!r}"
    axes.set_title(f"position {result['position']}{actual}", fontsize=9)
    return figure


def figure_compare(result: dict):
    """Per-token difference in bits (a - b; below 0, a predicts better) and both models' cumulative bits."""
    difference = np.nan_to_num(result["difference"])
    figure, (top, bottom) = _figure(_width(len(difference)), 5.0, rows=2)
    colors = ["tab:blue" if d < 0 else "tab:orange" for d in difference]
    top.bar(range(len(difference)), difference, color=colors)
    top.axhline(0.0, color="black", linewidth=0.5)
    top.set_ylabel(f"bits: {result['name_a']} - {result['name_b']}")
    top.set_xticks([])
    top.set_xlim(-0.5, len(difference) - 0.5)
    for name, key, color in (
        (result["name_a"], "cumulative_a", "tab:blue"),
        (result["name_b"], "cumulative_b", "tab:orange"),
    ):
        bottom.plot(result[key], color=color, label=f"{name} ({result[key][-1]:.1f} bits)")
    bottom.set_ylabel("cumulative bits")
    bottom.legend(fontsize=8)
    _token_axis(bottom, result["tokens"])
    return figure


def figure_lineage_strip(result: dict):
    """One row per model, one cell per token, all on one colour scale of bits (the first token blank)."""
    matrix = np.asarray(result["matrix"])
    figure, (axes,) = _figure(_width(matrix.shape[1]) + 1.5, 1.5 + 0.4 * matrix.shape[0])
    image = axes.imshow(matrix, cmap="viridis", vmin=0.0, vmax=result["vmax"], aspect="auto")
    labels = [f"{name} ({mean:.2f})" for name, mean in zip(result["row_labels"], result["mean_bits"])]
    axes.set_yticks(range(len(labels)), labels)
    _token_axis(axes, result["column_labels"])
    figure.colorbar(image, ax=axes, label="bits", fraction=0.03)
    return figure


def figure_context_reach(result: dict):
    """The measured influence of each token on the prediction made at `position`, over the stated reach."""
    influence = np.nan_to_num(result["influence"])
    figure, (axes,) = _figure(_width(len(influence)), 3.0)
    position, reach = result["position"], result["reach"]
    axes.axvspan(position - reach + 0.5, position + 0.5, color="tab:green", alpha=0.15, label=f"reach: {reach} tokens")
    axes.bar(range(len(influence)), influence, color="tab:blue")
    axes.axvline(position + 0.5, color="tab:red", linestyle="--", label=f"predicts: {_label(result['target'])!r}")
    axes.set_ylabel("|gradient| at the embedding")
    axes.legend(fontsize=8, loc="upper left")
    _token_axis(axes, result["tokens"])
    return figure


def figure_ngram_backoff(result: dict):
    """The order that decided each token's probability, and that probability (log scale)."""
    order, probability = np.nan_to_num(result["order"]), result["probability"]
    figure, (top, bottom) = _figure(_width(len(order)), 4.5, rows=2)
    top.bar(range(len(order)), order, color="tab:purple")
    top.set_ylabel("matched order")
    top.set_xticks([])
    top.set_xlim(-0.5, len(order) - 0.5)
    bottom.plot(range(len(probability)), probability, marker="o", color="tab:blue")
    bottom.set_yscale("log")
    bottom.set_ylabel("P(token | history)")
    _token_axis(bottom, result["tokens"])
    return figure


def figure_sampling(result: dict):
    """The next token's top probabilities before and after truncation, side by side, with the sample as title."""
    n = len(result["tokens"])
    figure, (axes,) = _figure(_width(n), 3.5)
    x = np.arange(n)
    axes.bar(x - 0.2, result["before"], width=0.4, color="tab:gray", label="before")
    axes.bar(x + 0.2, result["after"], width=0.4, color="tab:blue", label=f"after ({result['kept']} tokens kept)")
    _token_axis(axes, result["tokens"])
    axes.set_ylabel("probability")
    axes.legend(fontsize=8)
    settings = result["settings"]
    axes.set_title(
        f"T={settings['temperature']:g}, top-k={settings['top_k']}, top-p={settings['top_p']:g}, seed {settings['seed']}: "
        f"{result['sample']['text'][:80]!r}",
        fontsize=9,
    )
    return figure


__all__ = [
    "surprisal",
    "topk",
    "compare",
    "lineage_strip",
    "context_reach",
    "ngram_backoff",
    "sampling",
    "figure_surprisal",
    "figure_topk",
    "figure_compare",
    "figure_lineage_strip",
    "figure_context_reach",
    "figure_ngram_backoff",
    "figure_sampling",
]
