"""State-space duality (Dao and Gu 2024, "Transformers are SSMs", sections 3 to 6): the state-space layer of Mamba-2
is one function with three ways to compute it (models/ssd.py states them):

- the recurrence (`ssd_reference`): H_t = e^{dt_t A} H_{t-1} + dt_t x_t B_t^T, y_t = H_t C_t + D x_t, one step after
  the other: T sequential steps of O(P N) work per head, each a handful of small operations.
- the quadratic form (`ssd_quadratic`): y = M x + D x with M = L o (C B^T) diag(dt), a causal attention whose mask L
  is 1-semiseparable: O(T^2 N) per head, all of it matrix products.
- the chunked form (`ssd_chunked`, the paper's SSD algorithm, what training runs): the quadratic form within chunks
  of Q steps, the recurrence over the T / Q chunk states between them: O(T Q N) per head.

The inputs are a real layer's: a randomly initialised Mamba-2 block (`SSMConfig(ssm_type="mamba2")`) reads random
hidden states through its norm, and its `ssm_inputs` give x, dt, B and C, its own A = -exp(A_log) and D the rest.
The run checks that the three forms give the same outputs and final states (max |difference| per pair of forms,
at several lengths and chunk sizes, in float32, the precision the layer computes in, and in float64, where only
rounding is left), then times one call of each form (forward, no gradients, median of `steps` calls) at lengths
from 64 up and fits the growth exponent k of time ~ T^k over the longer half of the lengths.
"""

import math
import statistics
import time
from dataclasses import dataclass
from functools import partial

import torch

from hf_seq import SSMConfig, SSMModel
from hf_seq.errors import InvalidValueError
from hf_seq.models.ssd import ssd_chunked, ssd_quadratic, ssd_reference

from .common import (
    chosen_settings,
    claim,
    figure,
    finish,
    markdown_table,
    output_folder,
    prose,
    save_figure,
    settings_record,
    torch_threads,
)

NAME = "duality"
TITLE = "State-space duality: Mamba-2's recurrence, quadratic (attention) and chunked forms"
FLOAT64_TOLERANCE = 1e-10  # float64 differences are rounding only
LINEAR_BELOW = 1.5  # a growth exponent k below this is closer to linear (1) than to quadratic (2)


def recurrence(inputs: dict, chunk_size: int):
    return ssd_reference(**inputs)


def quadratic(inputs: dict, chunk_size: int):
    return ssd_quadratic(**inputs)[:2]  # (y, state); the matrix M is not compared


def chunked(inputs: dict, chunk_size: int):
    return ssd_chunked(**inputs, chunk_size=chunk_size)


FORMS = {"recurrence": recurrence, "quadratic": quadratic, "chunked": chunked}  # name -> (inputs, Q) -> (y, state)


@dataclass(frozen=True)
class Settings:
    """One Mamba-2 layer of width `hidden_size` (inner width 2x, heads of `head_dim` channels, `state_size` N,
    `n_groups` groups of B and C) on `batch_size` random sequences. The forms are compared at `check_lengths` with
    the chunked form at each of `chunk_sizes`, and timed at `lengths` (the chunked form with chunks of
    `chunk_size`, the recurrence only up to `recurrence_max_length`), `steps` timed calls each."""

    hidden_size: int = 64
    head_dim: int = 32
    state_size: int = 64
    n_groups: int = 1
    batch_size: int = 2
    check_lengths: tuple[int, ...] = (1, 37, 64, 200)
    chunk_sizes: tuple[int, ...] = (1, 16, 64, 256)
    tolerance: float = 1e-4  # max |difference| allowed in float32
    lengths: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
    chunk_size: int = 64
    recurrence_max_length: int = 2048
    steps: int = 5  # timed calls per form and length; the median is reported
    seed: int = 0
    threads: int | None = 1  # None: torch's default

    def __post_init__(self):
        sizes = {"check_lengths": self.check_lengths, "chunk_sizes": self.chunk_sizes, "lengths": self.lengths}
        for key, values in sizes.items():
            if not values or min(values) < 1:
                raise InvalidValueError(f"{NAME}: {key}={','.join(map(str, values))}: each must be a positive int")
        for key in ("chunk_size", "steps", "batch_size"):
            if getattr(self, key) < 1:
                raise InvalidValueError(f"{NAME}: {key}={getattr(self, key)}: must be a positive int")


QUICK = Settings(check_lengths=(37, 200), chunk_sizes=(16, 64), lengths=(64, 256, 1024), steps=3)


def layer(s: Settings):
    """A randomly initialised Mamba-2 block (its norm and mixer), seeded by `s.seed`."""
    torch.manual_seed(s.seed)
    config = SSMConfig(
        vocab_size=16,
        hidden_size=s.hidden_size,
        num_hidden_layers=1,
        ssm_type="mamba2",
        head_dim=s.head_dim,
        state_size=s.state_size,
        n_groups=s.n_groups,
    )
    return SSMModel(config).layers[0].eval()


@torch.no_grad()
def layer_inputs(block, length: int, batch_size: int, seed: int, dtype=torch.float32) -> dict:
    """The SSM's inputs as the block computes them from random hidden states (batch, length, hidden): x, dt, A, B,
    C and D, in `dtype`."""
    hidden = torch.randn(batch_size, length, block.norm.weight.shape[0], generator=torch.Generator().manual_seed(seed))
    mixer = block.mixer
    _, x, dt, B, C, _ = mixer.ssm_inputs(block.norm(hidden))
    inputs = dict(x=x, dt=dt, A=-torch.exp(mixer.A_log.float()), B=B, C=C, D=mixer.D.float())
    return {key: value.to(dtype) for key, value in inputs.items()}


def pairs(chunk_sizes) -> list[tuple[str, str, int | None]]:
    """(form, reference form, chunk size): the quadratic form against the recurrence once, the chunked form at each
    chunk size against both."""
    rows = [("quadratic", "recurrence", None)]
    for q in chunk_sizes:
        rows += [("chunked", "recurrence", q), ("chunked", "quadratic", q)]
    return rows


@torch.no_grad()
def differences(block, s: Settings, forms: dict = FORMS) -> list[dict]:
    """For each pair of forms, at each of `check_lengths`, in float32 and float64: the largest |difference| of the
    outputs y and of the final states, each relative to the largest |value| of the reference form's. The skip D x is
    the same product in every form, so the forms are compared without it: on what they compute differently."""
    rows = []
    for length in s.check_lengths:
        for dtype in (torch.float32, torch.float64):
            inputs = layer_inputs(block, length, s.batch_size, s.seed + length, dtype) | {"D": None}
            results = {("quadratic", None): forms["quadratic"](inputs, s.chunk_size)}
            results["recurrence", None] = forms["recurrence"](inputs, s.chunk_size)
            results |= {("chunked", q): forms["chunked"](inputs, q) for q in s.chunk_sizes}
            for form, reference, q in pairs(s.chunk_sizes):
                (y, state) = results[form, q if form == "chunked" else None]
                (y_ref, state_ref) = results[reference, q if reference == "chunked" else None]
                rows.append(
                    {
                        "length": length,
                        "dtype": str(dtype).removeprefix("torch."),
                        "pair": f"{form} - {reference}",
                        "chunk_size": q,
                        "output": ((y - y_ref).abs().max() / y_ref.abs().max()).item(),
                        "state": ((state - state_ref).abs().max() / state_ref.abs().max()).item(),
                    }
                )
    return rows


@torch.no_grad()
def seconds_per_call(function, steps: int) -> float:
    """The median wall-clock time of `steps` calls, after one untimed call."""
    function()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timings(block, s: Settings) -> dict[str, dict[int, float]]:
    """Seconds per call of each form at each of `lengths` (the recurrence up to `recurrence_max_length`)."""
    times = {form: {} for form in FORMS}
    for length in s.lengths:
        inputs = layer_inputs(block, length, s.batch_size, s.seed)
        for form, function in FORMS.items():
            if form == "recurrence" and length > s.recurrence_max_length:
                continue
            times[form][length] = seconds_per_call(partial(function, inputs, s.chunk_size), s.steps)
    return times


def growth_exponent(times: dict[int, float]) -> float:
    """k of time ~ T^k, least squares on log-log over the longer half of the lengths (at least two); NaN with
    fewer than two lengths. The short lengths are left out: there the fixed cost of each call dominates."""
    lengths = sorted(times)
    upper = lengths[(len(lengths) - 1) // 2 :]
    if len(upper) < 2:
        return float("nan")
    xs, ys = [math.log(t) for t in upper], [math.log(times[t]) for t in upper]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def run(quick: bool = False, output_dir=None, overrides=(), **changes) -> dict:
    """The experiment at the default settings (or QUICK's), with `overrides` (`KEY=VALUE`) and `changes` applied."""
    base = QUICK if quick else Settings()
    s = chosen_settings(NAME, base, overrides, changes)
    started, folder = time.perf_counter(), output_folder(output_dir, NAME)
    with torch_threads(s.threads):
        block = layer(s)
        rows = differences(block, s)
        times = timings(block, s)
    largest = {
        dtype: max(r[key] for r in rows if r["dtype"] == dtype for key in ("output", "state"))
        for dtype in ("float32", "float64")
    }
    growth = {form: growth_exponent(times[form]) for form in FORMS}
    results = {
        "options": settings_record(s, base, quick),
        "differences": rows,
        "largest_difference": largest,
        "tolerance": {"float32": s.tolerance, "float64": FLOAT64_TOLERANCE},
        "seconds_per_call": times,
        "growth_exponent": growth,
        "claims": claims(largest, s.tolerance, times, growth),
    }
    plots = [plot(times, rows, s, folder / "duality.png")]
    return finish(NAME, TITLE, folder, results, report(s, rows, times, growth), started, plots)


def faster_from(times: dict, form: str, other: str) -> int | None:
    """The shortest length from which `form` is faster than `other` at every longer length measured by both."""
    common = sorted(set(times[form]) & set(times[other]))
    start = None
    for length in common:
        if times[form][length] < times[other][length]:
            start = length if start is None else start
        else:
            start = None
    return start


def claims(largest: dict, tolerance: float, times: dict, growth: dict) -> list[dict]:
    """The paper's claims against this run's differences, timings and growth exponents."""
    k = {form: growth[form] for form in FORMS}
    overtakes = faster_from(times, "chunked", "quadratic")
    longest = max(times["chunked"])
    common = sorted(set(times["chunked"]) & set(times["recurrence"]))
    speedup = [times["recurrence"][t] / times["chunked"][t] for t in common]
    return [
        claim(
            "The three forms compute one function: an SSM is a semiseparable matrix, the quadratic form applies it as "
            "masked attention, the chunked (SSD) algorithm is an exact block decomposition of it (sections 3 to 6)",
            f"largest difference (max abs, relative) over every pair, length and chunk size: {largest['float32']:.1e} in float32 "
            f"(tolerance {tolerance:.0e}), {largest['float64']:.1e} in float64",
            largest["float32"] <= tolerance and largest["float64"] <= FLOAT64_TOLERANCE,
        ),
        claim(
            "The quadratic (attention) form costs O(T^2 N) per head (section 6's comparison: attention's training "
            "FLOPs grow as T^2)",
            f"time ~ T^{k['quadratic']:.2f} over the longer lengths",
            k["quadratic"] >= LINEAR_BELOW,
        ),
        claim(
            "The chunked (SSD) form costs O(T Q N): linear in T, like the recurrence, but in matrix products "
            "(section 6, the SSD algorithm)",
            f"chunked time ~ T^{k['chunked']:.2f}; faster than the quadratic form from T = {overtakes} on "
            f"(measured up to {longest})"
            if overtakes
            else f"chunked time ~ T^{k['chunked']:.2f}; not faster than the quadratic form at the longest length",
            k["chunked"] < LINEAR_BELOW and overtakes is not None,
        ),
        claim(
            "The recurrence is linear in T but sequential, T small steps without matrix products: slower than the "
            "chunked form that computes the same function (section 6)",
            f"recurrence time ~ T^{k['recurrence']:.2f}; {min(speedup):.0f}x to {max(speedup):.0f}x the chunked "
            f"form's time at T = {common[0]}..{common[-1]}",
            k["recurrence"] < LINEAR_BELOW and min(speedup) > 1,
        ),
    ]


def report(s: Settings, rows: list[dict], times: dict, growth: dict) -> str:
    """The Markdown body: the setup, the differences, the timings, the paper's statement."""
    heads = 2 * s.hidden_size // s.head_dim
    worst = {}
    for r in rows:  # the largest differences of each pair and precision over lengths and chunk sizes
        y, h = worst.get((r["pair"], r["dtype"]), (0.0, 0.0))
        worst[r["pair"], r["dtype"]] = (max(y, r["output"]), max(h, r["state"]))
    lengths = sorted({t for form in times for t in times[form]})
    return "\n\n".join(
        [
            prose(__doc__),
            f"This run: width {s.hidden_size}, {heads} heads of {s.head_dim} channels, N {s.state_size}, "
            f"{s.n_groups} group(s), batch {s.batch_size}; compared at lengths {', '.join(map(str, s.check_lengths))} "
            f"with chunks of {', '.join(map(str, s.chunk_sizes))}; timed with chunks of {s.chunk_size}, "
            f"{s.steps} calls per form and length, on {s.threads or 'torch default'} thread(s).",
            "Largest difference per pair of forms, max abs over lengths and chunk sizes, relative to the largest abs value of the reference form (y without the skip D x; the final state):",
            markdown_table(
                ["pair", "precision", "outputs y", "final state"],
                [[pair, dtype, f"{y:.1e}", f"{h:.1e}"] for (pair, dtype), (y, h) in worst.items()],
            ),
            "Milliseconds per call (forward, no gradients), and the growth exponent k (time ~ T^k, fitted over the "
            "longer half of the lengths):",
            markdown_table(
                ["form", *(f"T = {t}" for t in lengths), "k"],
                [
                    [form, *(f"{times[form][t] * 1000:.2f}" if t in times[form] else "-" for t in lengths)]
                    + [f"{growth[form]:.2f}"]
                    for form in FORMS
                ],
            ),
            PAPER,
        ]
    )


PAPER = (
    "The paper (Dao and Gu 2024, section 6, as recalled here, not re-checked against its text) sets the three side "
    "by side: attention (the quadratic form) costs T^2 N training FLOPs and T^2 memory; the SSM's recurrence T N^2 "
    "FLOPs but no matrix products; the SSD algorithm (the chunked form) T N^2 FLOPs (with P = N), mostly in matrix "
    "products, so that on a GPU it beats both the quadratic form at long sequences and the sequential scan. On a "
    "CPU the recurrence loses for another reason as well: each of its T steps is a few small operations, each with "
    "a fixed cost, so its constant is large."
)


def plot(times: dict, rows: list[dict], s: Settings, path) -> str:
    fig = figure(11, 4.2)
    cost, error = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    for form in FORMS:
        lengths = sorted(times[form])
        cost.loglog(lengths, [times[form][t] * 1000 for t in lengths], marker="o", label=form)
    longest = max(times["quadratic"])
    for k, style in ((1, ":"), (2, "--")):  # guides through the quadratic form's last point
        guide = [times["quadratic"][longest] * 1000 * (t / longest) ** k for t in sorted(times["quadratic"])]
        cost.loglog(sorted(times["quadratic"]), guide, color="gray", linestyle=style, linewidth=0.8, label=f"~ T^{k}")
    cost.set_xlabel("length T")
    cost.set_ylabel("ms per call (forward)")
    cost.grid(alpha=0.3, which="both")
    cost.legend(fontsize=8)
    for (pair, dtype), marker in zip(
        [(p, d) for p in dict.fromkeys(r["pair"] for r in rows) for d in ("float32", "float64")], "os^v<>"
    ):
        points = [(r["length"], max(r["output"], 1e-18)) for r in rows if r["pair"] == pair and r["dtype"] == dtype]
        error.scatter(*zip(*points), marker=marker, label=f"{pair}, {dtype}", s=18)
    error.axhline(s.tolerance, color="black", linewidth=0.8, linestyle="--")
    error.text(1, s.tolerance, " float32 tolerance", fontsize=8, va="bottom")
    error.set_xscale("log")
    error.set_yscale("log")
    error.set_xlabel("length T")
    error.set_ylabel("max |difference| of the outputs, relative")
    error.legend(fontsize=7)
    fig.suptitle("One Mamba-2 layer, three forms: cost against length, and how far apart their outputs are")
    return save_figure(fig, path)
