"""Sizes chosen by the budget (`hf-seq lineage --sizes auto`, the default under a seconds or FLOPs budget).

A member's best size depends on its budget: a larger model learns more per token but sees fewer tokens in the same
time. The lineage does not guess it. For each member it trains short pilots at a few sizes, fits one loss surface to
their validation curves, and trains the member at the size the surface predicts best for the budget:

    L(N, D) = E + A / N^alpha + B / D^beta

the parametric form of Hoffmann et al. (2022, "Training compute-optimal large language models", approach 3), with N
the non-embedding parameters and D the training tokens. The budget fixes D for each N: under a seconds budget
D = budget x tokens per second at N (measured by the pilots, a power law in N between them), under a FLOPs budget
D = budget / FLOPs per token at N (counted on the pilots' shapes, a power law in N as well).

The fit: for each (alpha, beta) on a grid, E, A and B are the non-negative least-squares solution of a linear
problem; the pair with the smallest squared error wins. Its points are every validation evaluation of the pilots past
the first quarter of each pilot's tokens (the warm-up's evaluations would tilt beta). A pilot's curve is measured part-way down its own schedule,
not at the end of one as Hoffmann et al.'s points are, so the surface is pessimistic for D inside a pilot; the
report says how far the prediction was from what the final run reached.
"""

import math
from dataclasses import dataclass

PILOT_SCALES = (0.25, 1.0, 4.0)  # the pilots' sizes, as multiples of the settings' target
PILOT_FRACTION = 0.1  # a pilot's share of the member's budget
PILOT_EVALUATIONS = 8  # a pilot evaluates about this many times, so its curve gives the fit points
CHOICE_RANGE = (0.5, 4.0)  # the sizes considered: from half the smallest pilot to 4x the largest
SKIP_FRACTION = 0.25  # a pilot's evaluations before this share of its tokens are left out of the fit


@dataclass
class Pilot:
    """One pilot run: its non-embedding parameters, FLOPs per token, seconds of training steps (its evaluations'
    time left out: a pilot evaluates often, a final run seldom) and tokens trained, and its validation curve as
    (tokens, loss) points."""

    size: int
    non_embedding: int
    flops_per_token: float
    seconds: float
    tokens: int
    curve: list

    def as_dict(self) -> dict:
        final = self.curve[-1][1] if self.curve else None
        return {"size": self.size, "non_embedding_params": self.non_embedding, "flops_per_token": self.flops_per_token,
                "seconds": self.seconds, "tokens": self.tokens, "final_eval_loss": final}  # fmt: skip


def fit_surface(points: list[tuple[float, float, float]]) -> dict | None:
    """The least-squares fit of L = E + A N^-alpha + B D^-beta to (N, D, L) points, E, A, B >= 0 (see the module's
    docstring). None with fewer than 5 points or fewer than two sizes."""
    import numpy as np

    if len(points) < 5 or len({n for n, _, _ in points}) < 2:
        return None
    n, d, loss = (np.asarray(v, dtype=float) for v in zip(*points))
    best = None
    for alpha in np.arange(0.05, 1.51, 0.05):
        for beta in np.arange(0.05, 1.51, 0.05):
            columns = np.stack([np.ones_like(n), n**-alpha, d**-beta], axis=1)
            coefficients, error = _nonnegative_least_squares(columns, loss)
            if best is None or error < best["error"]:
                e, a, b = (float(c) for c in coefficients)
                best = {"E": e, "A": a, "alpha": float(alpha), "B": b, "beta": float(beta), "error": error}
    best["rmse"] = math.sqrt(best["error"] / len(points))
    best["points"] = len(points)
    return best


def _nonnegative_least_squares(columns, target):
    """min |columns c - target|^2 over c >= 0, for a handful of columns: the best unconstrained solution over every
    subset of columns whose solution is non-negative (one of them is the constrained optimum)."""
    import itertools

    import numpy as np

    k = columns.shape[1]
    best = (np.zeros(k), float((target**2).sum()))
    for r in range(1, k + 1):
        for subset in itertools.combinations(range(k), r):
            solution, *_ = np.linalg.lstsq(columns[:, subset], target, rcond=None)
            if (solution < 0).any():
                continue
            full = np.zeros(k)
            full[list(subset)] = solution
            error = float(((columns @ full - target) ** 2).sum())
            if error < best[1]:
                best = (full, error)
    return best


def predict(fit: dict, n: float, d: float) -> float:
    return fit["E"] + fit["A"] * n ** -fit["alpha"] + fit["B"] * d ** -fit["beta"]


def power_law(xs: list[float], ys: list[float]):
    """y as a function of x, a line through the points in log-log space (least squares; one point: y constant)."""
    import numpy as np

    if len(set(xs)) < 2:
        return lambda x: float(ys[0])
    slope, intercept = np.polyfit(np.log(xs), np.log(ys), 1)
    return lambda x: float(math.exp(intercept) * x**slope)


def tokens_for(pilots: list[Pilot], budget: dict):
    """D(N): the training tokens a member of N non-embedding parameters gets from the budget ({"seconds": s} or
    {"flops": c}), from the pilots' measured speed or counted FLOPs per token."""
    sizes = [p.non_embedding for p in pilots]
    if "flops" in budget:
        per_token = power_law(sizes, [p.flops_per_token for p in pilots])
        return lambda n: budget["flops"] / per_token(n)
    speed = power_law(sizes, [p.tokens / p.seconds for p in pilots])
    return lambda n: budget["seconds"] * speed(n)


def choose(fit: dict, pilots: list[Pilot], budget: dict, candidates: int = 25, smallest: int = 1) -> dict:
    """The non-embedding size, among `candidates` spaced evenly in log scale over CHOICE_RANGE of the pilots' sizes
    (and not below `smallest`, the member's smallest model), with the lowest predicted loss for the budget; with its
    tokens and predicted loss."""
    tokens = tokens_for(pilots, budget)
    low = max(min(p.non_embedding for p in pilots) * CHOICE_RANGE[0], smallest)
    high = max(p.non_embedding for p in pilots) * CHOICE_RANGE[1]
    grid = [low * (high / low) ** (i / (candidates - 1)) for i in range(candidates)]
    best = min(grid, key=lambda n: predict(fit, n, tokens(n)))
    return {
        "non_embedding_params": round(best),
        "tokens": tokens(best),
        "predicted_eval_loss": predict(fit, best, tokens(best)),
    }


def fit_points(pilots: list[Pilot]) -> list[tuple[float, float, float]]:
    points = []
    for p in pilots:
        points += [(p.non_embedding, d, loss) for d, loss in p.curve if d >= SKIP_FRACTION * p.tokens and d > 0]
    return points


def budget_table(fits: dict, pilots: dict, budget: dict, scales=(0.25, 1.0, 4.0, 16.0)) -> list[dict]:
    """For budgets of `scales` times this one: each member's best predicted loss and size, from its fit. The rows
    say at which budget one member's best overtakes another's, if the fits say it does."""
    rows = []
    for scale in scales:
        scaled = {k: v * scale for k, v in budget.items()}
        row = {"scale": scale}
        for name, fit in fits.items():
            if fit is not None:
                chosen = choose(fit, pilots[name], scaled)
                row[name] = {"predicted_eval_loss": chosen["predicted_eval_loss"], "non_embedding_params": chosen["non_embedding_params"]}  # fmt: skip
        rows.append(row)
    return rows


def reached(sized: dict, record: dict) -> dict:
    """What lineage.json keeps of a member's sizing: the pilots, the fit, the chosen size with its predicted loss,
    and the final run's last validation loss beside the fit's prediction at the size and tokens it really trained."""
    fit, out = sized["fit"], {"pilots": [p.as_dict() for p in sized["pilots"]], "fit": sized["fit"]}
    out["chosen"] = dict(sized["chosen"])
    out["chosen_budget"] = sized["budget"]
    out["reached_eval_loss"] = record.get("final_eval_loss")
    out["predicted_at_reached"] = (
        predict(fit, record["non_embedding_params"], record["train_tokens"]) if fit and record["train_tokens"] else None
    )
    return out
