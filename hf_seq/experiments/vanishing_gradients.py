"""Vanishing gradients (Hochreiter 1991; Bengio, Simard and Frasconi 1994; Pascanu, Mikolov and Bengio 2013).

Backpropagation through time multiplies one Jacobian per step, dh_T/dh_t = prod_{k=t+1..T} dh_k/dh_{k-1}, and in an
Elman network each factor is diag(f'(a_k)) W_hh: the gradient reaching step t shrinks (or grows) geometrically with
the distance T - t, at a rate set by W_hh's spectrum and the slope of f. The LSTM's memory cell,
c_t = f_t * c_{t-1} + i_t * g_t, adds a path whose factor per step is the forget gate f_t, which training can hold
near 1 (the constant error carousel); the GRU's and the gated Elman network's update gates do the same.

Measured for one-layer Elman (tanh, ReLU), gated Elman, GRU and LSTM language models of the same width, from the
same seed, at initialisation and after training on a task that needs memory: recall, read the letters of a
`hf_seq.data.sequence_reversal` source and a separator, then predict the first letter (`k d a |` -> `k`, L steps
back). The model reads one token per call and hands its `RecurrentState` back, as generate() does, so autograd can
read the gradient at every state h_t:

- ||dh_T/dh_t||: the Frobenius norm of the Jacobian relative to ||I|| (1 at distance 0), estimated by backpropagating
  v . h_T with a random Gaussian v per sequence (E||J^T v||^2 = ||J||_F^2), summed over the batch.
- ||dl_T/dh_t||: the gradient of the recall loss (the prediction made at the separator) reaching h_t, relative to
  its norm at h_T.
"""

import math
import random
import time
from dataclasses import dataclass

import torch

from hf_seq import RNNConfig, RNNForCausalLM
from hf_seq.data.corpora import sequence_reversal
from hf_seq.models.utils import cache_of

from .common import (
    LETTER_VOCAB_SIZE,
    SEP,
    chosen_settings,
    claim,
    figure,
    finish,
    letter_ids,
    markdown_table,
    output_folder,
    prose,
    save_figure,
    settings_record,
    torch_threads,
    total_parameters,
    train,
)

NAME = "vanishing_gradients"
TITLE = "Vanishing gradients: the gradient reaching step t against the distance T - t"
CELLS = {  # label -> RNNConfig flags
    "Elman tanh": dict(cell_type="elman", nonlinearity="tanh"),
    "Elman ReLU": dict(cell_type="elman", nonlinearity="relu"),
    "gated Elman": dict(cell_type="gated"),
    "GRU": dict(cell_type="gru"),
    "LSTM": dict(cell_type="lstm"),
}


@dataclass(frozen=True)
class Settings:
    """One layer of `hidden_size` units per cell; `steps` AdamW steps on batches of `batch_size` recalls over
    1-`train_length` letters; gradients measured on `examples` unseen recalls over `length` letters."""

    hidden_size: int = 64
    steps: int = 1000
    batch_size: int = 32
    # at 5e-3 the LSTM stays on the recall plateau for this budget; the Elman nets fail at both
    learning_rate: float = 2e-2
    train_length: int = 30
    length: int = 40
    examples: int = 64
    seed: int = 0
    threads: int | None = 1  # None: torch's default


QUICK = Settings(hidden_size=32, steps=40, batch_size=16, train_length=10, length=16, examples=16)
ACCURACY_LENGTHS = (10, 20, 30, 40)


def make_model(cell: str, hidden_size: int, seed: int) -> RNNForCausalLM:
    torch.manual_seed(seed)
    config = RNNConfig(
        vocab_size=LETTER_VOCAB_SIZE,
        hidden_size=hidden_size,
        num_hidden_layers=1,
        embedding_dropout=0.0,
        hidden_dropout=0.0,
        output_dropout=0.0,
        **CELLS[cell],
    )
    return RNNForCausalLM(config)


def recall_batch(num_examples: int, length: int, seed: int) -> dict:
    """`source | first-letter`, scored on the recalled letter only: input_ids and labels (-100 elsewhere)."""
    rows = sequence_reversal(num_examples, seed, min_length=length, max_length=length)
    ids = torch.tensor([letter_ids(r["source"]) + [SEP, letter_ids(r["source"])[0]] for r in rows])
    labels = torch.full_like(ids, -100)
    labels[:, -1] = ids[:, -1]
    return {"input_ids": ids, "labels": labels}


@torch.no_grad()
def recall_accuracy(model, length: int, examples: int) -> float:
    batch = recall_batch(examples, length, seed=10**9 + length)
    predicted = model(input_ids=batch["input_ids"][:, :-1]).logits[:, -1].argmax(-1)
    return (predicted == batch["input_ids"][:, -1]).float().mean().item()


def gradient_norms(model, input_ids: torch.Tensor, target: torch.Tensor, seed: int) -> dict[str, list[float]]:
    """Relative gradient norms at every step t, listed by distance T - t (0 first), of v . h_T and of the loss of
    the prediction made at step T. The model reads one token per call and hands its state back (as generate does)."""
    batch_size, steps = input_ids.shape
    norms = {}
    for kind in ("jacobian", "loss"):
        state, hidden = None, []
        for t in range(steps):
            out = model(input_ids=input_ids[:, t : t + 1], past_key_values=state, use_cache=True)
            state = cache_of(out)
            state.hidden.retain_grad()  # h_t, (layers, B, H): its .grad is d objective / d h_t
            hidden.append(state.hidden)
        if kind == "jacobian":
            generator = torch.Generator().manual_seed(seed)
            v = torch.randn(hidden[-1].shape, generator=generator)
            objective = (hidden[-1] * v).sum()
        else:
            # the output layer applied to the state h_T itself (one layer, no dropout: the same logits as out.logits),
            # so that the gradient at distance 0 is read on the state too
            logits = model.get_output_embeddings()(hidden[-1][-1])
            objective = torch.nn.functional.cross_entropy(logits, target, reduction="sum")
        objective.backward()
        squared = torch.stack([h.grad.pow(2).sum() for h in hidden])  # summed over the batch: (T,)
        relative = (squared / squared[-1]).sqrt().flip(0)  # distance 0 first, 1 at distance 0
        norms[kind] = [float(x) for x in relative]
        model.zero_grad(set_to_none=True)
    return norms


def decay_per_step(relative: list[float]) -> float:
    """The mean factor per step by which the norm shrinks, from a least-squares line through log norm against
    distance (from distance 1 on, where the first step's own Jacobian no longer dominates)."""
    points = [(d, math.log(x)) for d, x in enumerate(relative) if d >= 1 and x > 0 and math.isfinite(x)]
    if len(points) < 2:
        return float("nan")
    mean_d = sum(d for d, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    slope = sum((d - mean_d) * (y - mean_y) for d, y in points) / sum((d - mean_d) ** 2 for d, _ in points)
    return math.exp(slope)


def run(quick: bool = False, output_dir=None, overrides=(), **changes) -> dict:
    """The experiment at the default settings (or QUICK's), with `overrides` (`KEY=VALUE`) and `changes` applied."""
    base = QUICK if quick else Settings()
    s = chosen_settings(NAME, base, overrides, changes)
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    probe = recall_batch(s.examples, s.length, seed=10**9)  # sequences no training batch holds
    rng = random.Random(s.seed)
    lengths = [rng.randint(1, s.train_length) for _ in range(s.steps)]  # the short ones teach the task
    accuracy_lengths = sorted({*(n for n in ACCURACY_LENGTHS if n < s.length), s.length})
    with torch_threads(s.threads):
        models = {cell: measure(cell, s, probe, lengths, accuracy_lengths) for cell in CELLS}

    far = s.length  # the largest distance measured: from the separator back to the first letter
    plots = [plot(models, folder / "gradient_norms.png", s)]
    results = {
        "options": settings_record(s, base, quick),
        "distance_max": far,
        "models": models,
        "claims": claims(models, far),
    }
    return finish(NAME, TITLE, folder, results, report(s, models, accuracy_lengths), started, plots)


def measure(cell: str, s: Settings, probe: dict, lengths: list[int], accuracy_lengths: list[int]) -> dict:
    """One cell's gradient norms on the probe at initialisation and after training on recalls over `lengths[step]`
    letters, and its recall accuracy over each of `accuracy_lengths` letters after training."""
    probe_ids, probe_target = probe["input_ids"][:, :-1], probe["input_ids"][:, -1]
    model = make_model(cell, s.hidden_size, s.seed)
    init = gradient_norms(model, probe_ids, probe_target, s.seed)
    trained_run = train(
        model,
        lambda step: recall_batch(s.batch_size, lengths[step], seed=s.seed * 100_003 + step),
        s.steps,
        s.learning_rate,
    )
    trained = gradient_norms(model, probe_ids, probe_target, s.seed)
    return {
        "parameters": total_parameters(model),
        "train_seconds": round(trained_run["seconds"], 1),
        "final_train_loss": trained_run["final_loss"],
        "recall_accuracy": {n: recall_accuracy(model, n, 4 * s.examples) for n in accuracy_lengths},
        "init": init | {k + "_decay": decay_per_step(v) for k, v in init.items()},
        "trained": trained | {k + "_decay": decay_per_step(v) for k, v in trained.items()},
    }


def report(s: Settings, models: dict, accuracy_lengths: list[int]) -> str:
    """The Markdown body: the setup, the gradient norms at a few distances with their factor per step, and the recall
    accuracy after training."""
    far = s.length
    distances = sorted({d for d in (1, 5, 10, 20) if d < far} | {far})
    rows = []
    for cell, m in models.items():
        for phase in ("init", "trained"):
            rows.append(
                [cell, "initialisation" if phase == "init" else "trained"]
                + [f"{m[phase]['jacobian'][d]:.1e}" for d in distances]
                + [f"{m[phase]['jacobian_decay']:.2f}", f"{m[phase]['loss'][far]:.1e}", f"{m[phase]['loss_decay']:.2f}"]
            )
    return "\n\n".join(
        [
            prose(__doc__.split("\n\n", 1)[1]),
            f"One layer of {s.hidden_size} units per model, the same seed ({s.seed}); trained for {s.steps} "
            f"AdamW steps (peak rate {s.learning_rate}, cosine decay, clipping at 1) on batches of "
            f"{s.batch_size} recalls over 1-{s.train_length} letters; gradients measured on {s.examples} "
            f"unseen recalls over {s.length} letters (T = {far + 1} steps). Factor per step: exp of the slope of a "
            "least-squares line through log norm against distance (distances 1 and up).",
            markdown_table(
                [
                    "cell",
                    "weights",
                    *(f"‖dh_T/dh_t‖ @ {d}" for d in distances),
                    "factor per step",
                    f"‖dl_T/dh_t‖ @ {far}",
                    "factor per step (loss)",
                ],
                rows,
            ),
            "Recall accuracy after training (1/26 is chance):",
            markdown_table(
                ["cell", "parameters", "train s", *(f"recall over {n}" for n in accuracy_lengths)],
                [
                    [
                        c,
                        m["parameters"],
                        m["train_seconds"],
                        *(f"{m['recall_accuracy'][n]:.2f}" for n in accuracy_lengths),
                    ]
                    for c, m in models.items()
                ],
            ),
        ]
    )


def claims(models: dict, far: int) -> list[dict]:
    """The lecture's claims against the norms at distance `far` and the recall over `far` letters."""
    tanh, lstm, gru = (models[c] for c in ("Elman tanh", "LSTM", "GRU"))
    loss_at_far = {c: m["trained"]["loss"][far] for c, m in models.items()}  # after training
    recall = {c: m["recall_accuracy"][far] for c, m in models.items()}
    return [
        claim(
            "In a tanh Elman network the gradient reaching step t shrinks geometrically with the distance T - t",
            f"at initialisation ‖dh_T/dh_t‖ falls by a factor {tanh['init']['jacobian_decay']:.2f} per step, to "
            f"{tanh['init']['jacobian'][far]:.0e} at distance {far}",
            tanh["init"]["jacobian_decay"] < 0.9 and tanh["init"]["jacobian"][far] < 1e-3,
        ),
        claim(
            "The LSTM's memory cell lets the gradient of a distant loss arrive; the tanh Elman network cannot learn a "
            "dependency that far",
            f"after training, ‖dl_T/dh_t‖ at distance {far}: LSTM {loss_at_far['LSTM']:.0e}, Elman tanh "
            f"{loss_at_far['Elman tanh']:.0e}; recall over {far} letters: LSTM {recall['LSTM']:.2f}, Elman tanh "
            f"{recall['Elman tanh']:.2f}",
            loss_at_far["LSTM"] > loss_at_far["Elman tanh"] and recall["LSTM"] > recall["Elman tanh"] + 0.2,
        ),
        claim(
            "The GRU's update gate does the same",
            f"after training, ‖dl_T/dh_t‖ at distance {far}: GRU {loss_at_far['GRU']:.0e}; recall {recall['GRU']:.2f}",
            loss_at_far["GRU"] > loss_at_far["Elman tanh"] and recall["GRU"] > recall["Elman tanh"] + 0.2,
        ),
        claim(
            "The LSTM's cell path keeps gradients from vanishing by construction, before any training",
            f"at initialisation (PyTorch's init: forget gates near sigmoid(0) = 0.5) the LSTM's ‖dh_T/dh_t‖ falls by "
            f"{lstm['init']['jacobian_decay']:.2f} per step, the tanh Elman's by {tanh['init']['jacobian_decay']:.2f}: "
            "the LSTM learns to keep its gradients (or is given a forget-gate bias of 1, Gers et al. 2000)",
            lstm["init"]["jacobian_decay"] > 0.9,
        ),
    ]


def plot(models: dict, path, s: Settings) -> str:
    fig = figure(12, 7.2)
    panels = [("init", "jacobian"), ("trained", "jacobian"), ("init", "loss"), ("trained", "loss")]
    for k, (phase, kind) in enumerate(panels):
        axes = fig.add_subplot(2, 2, k + 1)
        for cell, m in models.items():
            values = m[phase][kind]
            axes.semilogy(range(len(values)), [max(v, 1e-30) for v in values], label=cell)
        what = "‖dh_T/dh_t‖ / ‖I‖" if kind == "jacobian" else "‖dl_T/dh_t‖ / ‖dl_T/dh_T‖"
        when = "at initialisation" if phase == "init" else f"after {s.steps} steps of recall training"
        axes.set_title(f"{what}, {when}", fontsize=10)
        axes.set_xlabel("distance T - t (steps)")
        axes.grid(alpha=0.3, which="both")
        if k == 0:
            axes.legend(fontsize=8)
    return save_figure(fig, path)
