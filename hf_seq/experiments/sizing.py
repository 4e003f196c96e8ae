"""Sizes chosen by the budget, inside it (`hf-seq lineage --sizes auto`, the default under a seconds or FLOPs budget).

A member's best size depends on its budget: a larger model learns more per token but sees fewer tokens in the same
time. The study does not guess it, and does not spend time outside the budget to find it. The candidates, the member at
SCALES times the settings' target, share the member's budget by successive halving (Jamieson & Talwalkar 2016;
Li et al. 2018, Hyperband's inner loop) on rungs of the budget's own clock (seconds, or steps under a FLOPs budget):

    rung 1   every candidate trains to RUNGS[0] of the budget at its peak rate (the stable phase of wsd,
             hf_seq.training.schedules), then a decay branch from there (BRANCH of what it trained, on a copy)
             says what its loss would be had it stopped; KEEP[0] go on (below: which);
    rung 2   the survivors continue from their own checkpoints to RUNGS[1], branch again, KEEP[1] goes on;
    the end  the survivor continues from its checkpoint to the end of what is left of the budget, with the decay
             in its last DECAY_FRACTION: its training is never thrown away, nor is the rungs' compute outside it.

Which go on. A rung's branches say which size is best for the compute spent so far: the leader, the lowest branch
loss. But the survivor trains on to several times that compute, and a larger model gains more from it: kept by the
rung's losses alone, halving favours the small ("slow to start" read as "worse"). The compute-optimal size grows about
as compute^0.5 (Hoffmann et al. 2022: a = 0.46 to 0.50 by their three methods), so a rung aims at the leader's size
times (survivor's end / rung)^GROWTH, and the candidates nearest that size in log-size go on (`aim`, `rank`).

Every time the aim reads is on the clock of the data it is worth. Past its first epoch a run sees the corpus again,
and a repeated token teaches less than a fresh one: Muennighoff et al. (2023, "Scaling data-constrained language
models", eq. 5) fit the effective data of U unique tokens seen 1 + R times as U (1 + R* (1 - exp(-R / R*))), with
R* = 15.4. A leader that would read its corpus many times by the survivor's end has less effective compute ahead of
it, and aims lower; a run inside its first epoch is unchanged.

A floor under the aim: tokens per parameter. The aim's growth is a ratio of seconds, the same on every machine, and
the rungs hold sizes a factor of two apart, so on a machine half as fast the same leader is grown to the same size,
which then trains on half the tokens. Hoffmann et al. (2022) find the compute-optimal run sees about 20 tokens per
parameter at every scale; a candidate that would see far fewer by the survivor's end is too large for the time this
machine gives it, whatever its early lead. So a candidate whose effective tokens by the survivor's end (its own
measured rate, repeated data counted as above) would be under MIN_TOKENS_PER_PARAMETER per non-embedding parameter is
set aside, and the nearest to the aim of the others go on (when none clears the floor, the one with the most tokens
per parameter). In the committed Austen runs (docs/lineage/prose and its slower/), the three sizes chosen on the
slower machine would see 2.7 to 3.0 tokens per parameter by the end, and each lost to half its size, by 0.015 to
0.092 nats per token; on the faster machine Mamba's 408k and the LSTM's 798k, at 6.0 and 5.7, were the best of their
three (half, chosen, twice), and GPT's 800k, at 4.8, lost to its 400k by 0.020 to 0.031. The floor lies between. Measured with it (docs/lineage/prose/
floor), Mamba's share of the hour chose 408k at 5.7 tokens per parameter, regret 0; and the whole hour (docs/
lineage/prose/hour) chose GPT 800k, Mamba 408k and the LSTM 798k (5.1, 7.1 and 7.8 by the rungs' estimates), regrets
0.022, 0 and 0, every network below the 5-gram's test perplexity, the best 26%.

Why the aim, and not a prediction of each candidate's own end. The search first kept the lowest predicted loss at
the survivor's end: each candidate's branch loss less the drop its stable curve, L(t) = E + A t^-alpha fitted to its
periodic evaluations (Domhan et al. 2015 extrapolate learning curves the same way), or from the second rung its two
branches' slope in log-time, carried on (`judge`). In the committed runs it chose too small: all six members of the
Austen and time-budget translation studies (docs/lineage/prose, in its history, and docs/lineage/translation/budget)
would have done better at twice their chosen size (0.02 to 0.35 nats per token), and for three of them that size had
been a candidate and left at the first rung: 6% of the budget is too little of a larger model's curve to extrapolate
it. Replayed on those runs' rungs, the aim keeps the larger size the regret measured better wherever it was a
candidate: the LSTM's 398k, Bahdanau's 400k and Luong's 796k at the first rung, GPT's and the Transformer's 800k at the
second. In the Austen run made with the aim (docs/lineage/prose), Mamba's and the LSTM's choices were the best of
half, chosen and twice, and GPT's was one size too large (behind its half by 0.042 nats per token at seed 0, 0.020 at
seed 1, 0.031 on the two seeds' means); on slower machines its aim overshot again, by 0.036 and 0.016 with the
three sizes trained from the start in turns, the search's own cost to its survivor (0.017, 0.010) apart. The
prediction is still computed and reported, and decides between candidates of one size at several learning rates (--tune).

Why not Optuna's pruners: its successive-halving and Hyperband pruners are asynchronous (ASHA): each trial runs to
the end unless a rung prunes it, so on one machine, trials one after another, the first runs the whole budget before
any other starts. The synchronous form here keeps every candidate inside the member's budget and lets the survivor
continue from its own checkpoint. An interrupted search resumes from its runs' folders: a finished rung or branch is
reused (`hf_seq.training.runs.finished_run`).
"""

import math

SCALES = (0.25, 0.5, 1.0, 2.0)  # the candidates' sizes, as multiples of the settings' target
RUNGS = (0.06, 0.15)  # the rungs, as shares of the member's budget (training each candidate has had by then)
KEEP = (2, 1)  # how many candidates go on after each rung
BRANCH = 0.25  # a decay branch's length, as a share of the training it branches from
DECAY_FRACTION = 0.2  # the survivor's decay: the last share of its training
EVALUATIONS_PER_RUNG = 8  # periodic evaluations in a candidate's first rung: its curve's points
SKIP_FRACTION = 0.25  # a curve's points before this share of its length are left out of the fit (the warm-up's)
REPETITION = 15.4  # R*: repeated data's decay constant, in epochs (Muennighoff et al. 2023, fitted to their runs)
GROWTH = 0.5  # the compute-optimal size grows as compute^GROWTH (Hoffmann et al. 2022: a = 0.46 to 0.50)
MIN_TOKENS_PER_PARAMETER = 4.0  # the floor: effective tokens per non-embedding parameter by the survivor's end


def effective_epochs(epochs: float) -> float:
    """The fresh-data epochs `epochs` passes over one corpus are worth (Muennighoff et al. 2023, eq. 5)."""
    if epochs <= 1.0:
        return epochs
    return 1.0 + REPETITION * (1.0 - math.exp(-(epochs - 1.0) / REPETITION))


def effective_clock(epochs_per_unit: float | None):
    """t -> the time a run would take to see data worth as much as its `epochs_per_unit * t` epochs (identity
    without an epoch rate)."""
    if not epochs_per_unit:
        return lambda t: t
    return lambda t: effective_epochs(epochs_per_unit * t) / epochs_per_unit


def survivor_share(candidates: int, rungs=RUNGS, keep=KEEP, branch: float = BRANCH) -> float:
    """The share of the member's budget the survivor trains in all: its rungs, and what the candidates' rungs and
    branches leave."""
    spent, alive, done = 0.0, candidates, 0.0
    for rung, kept in zip(rungs, keep):
        spent += alive * ((rung - done) + branch * rung)
        alive, done = min(kept, alive), rung
    return done + (1.0 - spent)


def fit_curve(points: list[tuple[float, float]]) -> dict | None:
    """The least-squares L(t) = E + A t^-alpha (E, A >= 0, alpha on a grid) through (t, loss) points; None with fewer
    than 4 points."""
    import numpy as np

    if len(points) < 4:
        return None
    t, loss = (np.asarray(v, dtype=float) for v in zip(*points))
    best = None
    for alpha in np.arange(0.05, 2.01, 0.05):
        columns = np.stack([np.ones_like(t), t**-alpha], axis=1)
        (e, a), error = _nonnegative_least_squares(columns, loss)
        if best is None or error < best["error"]:
            best = {"E": float(e), "A": float(a), "alpha": float(alpha), "error": error}
    best["rmse"] = math.sqrt(best["error"] / len(points))
    return best


def curve_at(fit: dict, t: float) -> float:
    return fit["E"] + fit["A"] * t ** -fit["alpha"]


def judge(curve: list[tuple[float, float]], branch_loss: float, at: float, end: float, earlier=None,
          epochs_per_unit: float | None = None) -> dict:  # fmt: skip
    """A candidate's predicted loss at `end`: its decay branch's loss at `at` less the drop predicted from `at` to
    `end`: from `earlier`, (t, loss) of its previous rung's branch, their slope in log-time carried on; without it, the
    drop its stable curve (`curve`: (t, validation loss) of its periodic evaluations up to `at`) predicts. With
    `epochs_per_unit` (the epochs it passes per unit of t) every time is first put on the effective clock."""
    clock = effective_clock(epochs_per_unit)
    if earlier is not None and 0 < earlier[0] < at and math.isfinite(earlier[1]):
        slope = max(0.0, earlier[1] - branch_loss) / math.log(clock(at) / clock(earlier[0]))  # per unit of log-time
        drop = slope * math.log(clock(end) / clock(at))
        return {"branch_loss": branch_loss, "judged_by": "branches", "earlier_branch": list(earlier),
                "predicted_drop": drop, "predicted_loss": branch_loss - drop}  # fmt: skip
    curve = [(clock(t), loss) for t, loss in curve]
    at, end = clock(at), clock(end)
    kept = [(t, loss) for t, loss in curve if t >= SKIP_FRACTION * at and t > 0 and math.isfinite(loss)]
    fit = fit_curve(kept)
    drop = max(0.0, curve_at(fit, at) - curve_at(fit, end)) if fit else 0.0
    if fit and kept[-1][0] > kept[0][0]:
        # at most the observed drop per unit of log t, carried on to `end`: E + A t^-alpha is convex in log t, so a fit
        # that asks for more is reading noise
        observed = max(0.0, kept[0][1] - kept[-1][1])
        drop = min(drop, observed * math.log(end / at) / math.log(kept[-1][0] / kept[0][0]))
    return {"branch_loss": branch_loss, "judged_by": "curve", "fit": fit, "predicted_drop": drop,
            "predicted_loss": branch_loss - drop}


def aim(judged: list[dict], end: float) -> dict | None:
    """The size to keep nearest after a rung: the rung's leader (the lowest decay-branch loss: the best size for what
    it has trained) grown to the survivor's `end` as the compute-optimal size grows, (end / reached)^GROWTH, each time
    on the leader's effective clock (repeated data buys less). None when every candidate diverged."""
    done = [j for j in judged if math.isfinite(j.get("branch_loss", math.inf))]
    if not done:
        return None
    leader = min(done, key=lambda j: j["branch_loss"])
    at, epochs = leader["reached"], leader.get("epochs")
    clock = effective_clock(epochs / at if epochs and at else None)
    growth = (clock(end) / clock(at)) ** GROWTH
    return {"leader": leader["candidate"], "growth": growth, "size": leader["non_embedding_params"] * growth}


def tokens_per_parameter(candidate: dict, end: float) -> float | None:
    """The effective tokens per non-embedding parameter `candidate` would see by `end` at the rate it has trained
    (its `tokens` by `reached`), repeated data counted at its worth; None without a token count."""
    tokens, at = candidate.get("tokens"), candidate.get("reached")
    if not tokens or not at:
        return None
    epochs = candidate.get("epochs")
    clock = effective_clock(epochs / at if epochs else None)
    return tokens / at * clock(end) / candidate["non_embedding_params"]


def rank(judged: list[dict], end: float) -> tuple[list[dict], dict | None]:
    """(the candidates in the order they go on, the aim): those that clear the floor of tokens per parameter nearest
    the aimed size in log-size first, and between candidates as near (one size at several learning rates, with --tune)
    the lower predicted loss; then those under the floor, the most tokens per parameter first; the diverged last.
    Each candidate is returned with its `tokens_per_parameter` by `end`."""
    target = aim(judged, end)
    judged = [j | {"tokens_per_parameter": tokens_per_parameter(j, end)} for j in judged]

    def order(j: dict) -> tuple:
        if target is None or not math.isfinite(j.get("branch_loss", math.inf)):
            return (2, math.inf, j.get("predicted_loss", math.inf))
        per_parameter = j["tokens_per_parameter"]
        if per_parameter is not None and per_parameter < MIN_TOKENS_PER_PARAMETER:
            return (1, -per_parameter, j["predicted_loss"])
        return (0, round(abs(math.log(j["non_embedding_params"] / target["size"])), 6), j["predicted_loss"])

    return sorted(judged, key=order), target


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
