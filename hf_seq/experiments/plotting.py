"""Pictures of what a model attends to.

`plot_alignment` draws an attention matrix as a heatmap with the source tokens along the top and the target tokens
down the side, white for weight 1 and black for 0, like figure 3 of Bahdanau et al. (2015). It takes the alignment
of the Bahdanau family (`outputs.attentions`, (batch, target, source)) as well as a Transformer's cross-attention
(`outputs.cross_attentions[layer]`, (batch, heads, target, source); the heads are averaged unless one is chosen):

    out = model(**batch, decoder_input_ids=generated, output_attentions=True)   # eager attention for a Transformer
    plot_alignment(out.cross_attentions[-1][0], source_tokens, target_tokens, "alignment.png")

It draws on a figure of its own (matplotlib's Agg canvas), so it never opens a window and leaves pyplot alone.
"""

import os

import numpy as np
import torch


def plot_alignment(
    attention,
    source_tokens: list[str],
    target_tokens: list[str],
    path: str | os.PathLike | None = None,
    title: str | None = None,
    head: int | None = None,
):
    """The heatmap of `attention`, (target, source) or (heads, target, source), as a matplotlib `Figure`; written
    as a PNG to `path` if given. Rows are target tokens, columns source tokens, and each row's weights sum to 1."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    weights = attention.detach().float().cpu().numpy() if torch.is_tensor(attention) else np.asarray(attention)
    if weights.ndim == 3:
        weights = weights.mean(0) if head is None else weights[head]
    if weights.ndim != 2:
        raise ValueError(
            f"plot_alignment: attention must be (target, source) or (heads, target, source), got shape "
            f"{tuple(attention.shape)}; pick one example of the batch first, e.g. cross_attentions[-1][0]."
        )
    if weights.shape != (len(target_tokens), len(source_tokens)):
        raise ValueError(
            f"plot_alignment: attention is {weights.shape[0]} x {weights.shape[1]} (target x source) but there are "
            f"{len(target_tokens)} target and {len(source_tokens)} source tokens."
        )
    cell = 0.35  # inches per token
    figure = Figure(figsize=(2 + cell * len(source_tokens), 1.5 + cell * len(target_tokens)))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    image = axes.imshow(weights, cmap="gray", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(len(source_tokens)), source_tokens, rotation=90)
    axes.set_yticks(range(len(target_tokens)), target_tokens)
    axes.xaxis.tick_top()
    axes.set_xlabel("source")
    axes.set_ylabel("target")
    if title:
        axes.set_title(title)
    figure.colorbar(image, ax=axes, fraction=0.04)
    figure.tight_layout()
    if path is not None:
        figure.savefig(path, format="png", dpi=120)
    return figure


__all__ = ["plot_alignment"]
