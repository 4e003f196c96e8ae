"""The study runner both lineages share (the language models in `lineage.py`, the translation models in
`lineage_translation.py`): a table of member rows, and one loop over sizes x members x tuning trials x seeds under one
budget, with parameter-matched sizes, reuse of finished runs, the seeds' summary and the ordering statement against the
lectures' order. A study gives the loop three functions (plan a member at a size, train it, and, for a member that is
not trained, such as the n-gram, its record) and says what its report holds.
"""

import json
import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hf_seq.errors import InvalidValueError

TUNE_FRACTION = 0.25  # a tuning trial trains on this share of the member's budget
EPOCH_FOR_DROPOUT = 1.0  # past this many epochs of the training text, dropout is on by default
DROPOUT_PAST_AN_EPOCH = 0.1


@dataclass(frozen=True)
class Member:
    """One row of a lineage: its name on the command line, its title in the reports, its family (None for a member
    that is not a neural model) and `config(settings, size, dropout)`, the family's config keys of the member whose
    free size parameter is `size` (the one `matched_size` searches)."""

    name: str
    title: str
    family: str | None
    config: Callable[[dict, int, float], dict] | None = None


# ---------------------------------------------------------------------------------------------- arguments
def check_arguments(members, allowed, budgets: dict, seeds: int, tune: int, sizes, target: int, task: str) -> list:
    """The budget actually given ({kind: value}: at most one of tokens, seconds, flops) and the sizes; refuses
    anything else with a message that names the option, the value and what is allowed."""
    given = {k: v for k, v in budgets.items() if v}
    if len(given) > 1:
        raise InvalidValueError(
            f"lineage: give one budget (--budget-tokens, --budget-seconds or --budget-flops), got {sorted(given)}"
        )
    for kind, value in given.items():
        if value <= 0:
            raise InvalidValueError(f"lineage: --budget-{kind} must be positive, got {value!r}")
    for name in members:
        if name not in allowed:
            raise InvalidValueError(
                f"lineage: unknown member {name!r} for --task {task}; allowed values: {list(allowed)}."
            )
    if seeds < 1 or tune < 0:
        raise InvalidValueError(f"lineage: --seeds must be >= 1 and --tune >= 0, got {seeds} and {tune}")
    sizes = sorted(sizes) if sizes else [target]
    if any(size <= 0 for size in sizes):
        raise InvalidValueError(f"lineage: --sizes must be positive parameter counts, got {sizes}")
    return given, sizes


def budget_text(given: dict, budget_tokens: int, unit: str = "training tokens") -> str:
    if "flops" in given:
        return f"{given['flops']:.3g} training FLOPs per member"
    if "seconds" in given:
        return f"{given['seconds']:g} s of training per member"
    return f"{budget_tokens:,} {unit} per member"


def machine(load_before: float) -> str:
    import torch

    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{os.cpu_count()} CPU cores, torch {torch.__version__}, 1-min load {load_before:.2f} before and "
        f"{load_after:.2f} after"
    )


def shared_data(recipe, output_dir: Path):
    """The study's data prepared once, with one tokenizer trained on its training split and saved in
    `output_dir/tokenizer`, from where every member loads it: (the prepared data, that folder)."""
    from hf_seq import tasks

    folder = output_dir / "tokenizer"
    prepared = tasks.prepare(recipe, tokenizer_folder=folder)
    if not (folder / "tokenizer.json").exists():
        prepared.tokenizer.save_pretrained(folder)
    return prepared, folder


def result_fields(given: dict, budgets: dict, s: dict, tune: int, seeds: int, sizes: list, metric: str,
                  load_before: float, records: list[dict], budget: str) -> dict:  # fmt: skip
    """What every study's lineage.json records of how it ran: the budget, the tuning, seeds and sizes, the ranking
    metric, the machine, the settings, the records and their summary over the seeds."""
    return {
        "budget": budget,
        "budget_tokens": s["budget_tokens"] if "tokens" in given or not given else None,
        "budget_seconds": budgets["seconds"],
        "budget_flops": budgets["flops"],
        "tuning": f"{tune} trials per member at {TUNE_FRACTION:g} of the budget, chosen on validation loss"
        if tune
        else "none (the defaults)",
        "seeds": seeds,
        "sizes": sizes,
        "metric": metric,
        "machine": machine(load_before),
        "settings": s,
        "members": records,
        "summary": summarize(records, metric),
    }


def write_results(result: dict, output_dir: Path, title: str) -> list[dict]:
    """lineage.json, and scaling.png for several sizes; returns the records of the first seed at the largest size,
    which the curves and pictures show."""
    (output_dir / "lineage.json").write_text(json.dumps(result, indent=2, ensure_ascii=False))
    if len(result["sizes"]) > 1:
        plot_scaling(result["summary"], result["metric"], output_dir / "scaling.png", title)
    return [r for r in result["members"] if r["target"] == result["sizes"][-1] and r["seed"] == 0]


# ---------------------------------------------------------------------------------------------- sizes and budgets
def count_parameters(model) -> tuple[int, int]:
    """(all parameters, non-embedding parameters): embedding tables (token, position) and an untied output layer
    (the output embedding) are left out of the second; a tied output layer shares the token table, so it is counted
    once."""
    import torch

    total = sum(p.numel() for p in model.parameters())
    tables = {id(p): p for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if output is not None:
        tables |= {id(p): p for p in output.parameters()}
    return total, total - sum(p.numel() for p in tables.values())


def matched_size(non_embedding: Callable[[int], int], target: int, largest: int) -> int:
    """The size parameter in [1, largest] whose non-embedding count (`non_embedding(size)`, growing with the size)
    is closest to `target`."""
    lo, hi = 1, largest
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if non_embedding(mid) <= target:
            lo = mid
        else:
            hi = mid
    return min((lo, hi), key=lambda size: abs(non_embedding(size) - target))


def plan_steps(
    given: dict,
    default_tokens: int,
    flops_per_token: int,
    tokens_per_step: float,
    corpus_tokens: int,
    seconds_per_step: Callable[[], float] | None = None,
):
    """(steps, past_epoch) under the budget: a token or FLOPs budget fixes the steps (a FLOPs budget gives each
    member the steps its FLOPs per token allow), a seconds budget leaves them to the run (None); whether the member
    will pass an epoch then comes from its measured step time (`seconds_per_step()`, called only then)."""
    if "flops" in given:
        steps = max(1, math.ceil(given["flops"] / (flops_per_token * tokens_per_step)))
    elif "seconds" in given:
        steps = None
    else:
        steps = math.ceil((given.get("tokens") or default_tokens) / tokens_per_step)
    expected = steps
    if steps is None and seconds_per_step is not None:
        expected = given["seconds"] / seconds_per_step()
    past_epoch = expected is not None and expected * tokens_per_step > EPOCH_FOR_DROPOUT * corpus_tokens
    return steps, past_epoch


def seconds_per_step(model, batch: dict, repeats: int = 3) -> float:
    """A member's training step, timed: forward, backward and an AdamW step on `batch` (input_ids and labels), the
    median of `repeats` steps after one to warm up."""
    import time

    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


# ---------------------------------------------------------------------------------------------- tuning
def trial_grid(count: int, s: dict, past_epoch: bool) -> list[dict]:
    """The same `count` trials for every member: learning rates spread over [lr / 4, 4 lr] on a log scale and, once
    the budget passes an epoch, dropout over [0, 0.4], drawn from a Halton sequence (bases 2 and 3), so any count
    covers the square evenly and the first trial is always the default learning rate."""

    def halton(index: int, base: int) -> float:
        value, fraction = 0.0, 1.0
        while index:
            fraction /= base
            value += fraction * (index % base)
            index //= base
        return value

    trials = []
    for k in range(count):
        u = 0.5 if k == 0 else halton(k + 1, 2)
        trial = {"learning_rate": s["learning_rate"] * 4 ** (2 * u - 1)}
        trial["dropout"] = round(0.4 * halton(k + 1, 3), 3) if past_epoch else default_dropout(past_epoch)
        trials.append(trial)
    return trials


def default_dropout(past_epoch: bool) -> float:
    """Dropout when nothing is tuned: off within an epoch (no sample is seen twice, so there is nothing to
    overfit), 0.1 past it."""
    return DROPOUT_PAST_AN_EPOCH if past_epoch else 0.0


def finished_run(folder: Path, recipe) -> dict | None:
    """The summary of a run already finished in `folder` with exactly this recipe (its weights checked against
    their recorded checksums), else None: a study stopped part-way and started again with the same command trains
    only what it had not finished. The saved recipe is read through the recipe loader before the comparison, so a
    run saved before a recipe key existed counts as that key's default (which is what it ran with)."""
    from hf_seq.checksums import verify_checksums
    from hf_seq.recipes import load_recipe

    done = [folder / name for name in ("recipe.json", "metrics.json", "model.safetensors", "checksums.json")]
    if not all(path.exists() for path in done):
        return None
    try:
        if load_recipe(json.loads(done[0].read_text())).to_dict() != recipe.to_dict():
            return None
        verify_checksums(folder)
    except Exception:  # noqa: BLE001  (an unreadable recipe, damaged weights: train it again)
        return None
    return json.loads(done[1].read_text())


# ---------------------------------------------------------------------------------------------- the loop
def member_training(s: dict, context: dict, settings: dict, seed: int, steps, seconds, select_by: str) -> dict:
    """The training section every member of a study shares: its budget, seed and tuned learning rate, the study's
    batch, warm-up and evaluations, no checkpoints inside the budget, and the metric that selects the weights."""
    return {
        "max_steps": steps,
        "max_seconds": seconds,
        "threads": context["threads"],
        "seed": seed,
        "batch_size": s["batch_size"],
        "learning_rate": settings["learning_rate"],
        "warmup_steps": s["warmup_steps"],
        "eval_every": s["eval_every"],
        "save_every": 10**9,
        "select_by": select_by,
    }


def train_or_reuse(member_recipe: dict, folder: Path, progress: bool):
    """(the recipe, the run's summary): trained through `hf_seq.training.run`, or a finished run of the very same
    recipe in `folder` reused."""
    from hf_seq.recipes import load_recipe
    from hf_seq.training import run as train

    recipe = load_recipe(member_recipe)
    summary = finished_run(folder, recipe)
    if summary is None:
        summary = train(recipe, progress=progress, overwrite=True)
    elif progress:
        print(f"lineage: {folder.name}: a finished run of the same recipe is there, reused")
    return recipe, summary


def train_all(
    members, sizes, seeds: int, tune: int, s: dict, budget_seconds, output_dir: Path, plan, train, fixed=None, say=print
) -> list[dict]:
    """Every member at every size: `tune` trials at TUNE_FRACTION of the budget (the lowest validation loss wins),
    then one scored run per seed with the chosen settings. `plan(name, target)` -> the member's plan (`steps`,
    `past_epoch`, ...); `train(name, plan, settings, seed, folder, steps, seconds, score)` -> a trial's `eval_loss`
    and `steps` or, with `score`, the member's record; `fixed(name, target)` -> the record of a member that is not
    trained (None for the others)."""
    records = []
    for target in sizes:
        for name in members:
            record = fixed(name, target) if fixed else None
            if record is not None:
                records.append(record | {"target": target, "seed": 0})
                continue
            plan_ = plan(name, target)
            trials = []
            chosen = {"learning_rate": s["learning_rate"], "dropout": default_dropout(plan_["past_epoch"])}
            if tune:
                for k, trial in enumerate(trial_grid(tune, s, plan_["past_epoch"])):
                    folder = output_dir / "trials" / f"{name}-{target}-{k}"
                    steps = max(1, math.ceil(plan_["steps"] * TUNE_FRACTION)) if plan_["steps"] else None
                    seconds = budget_seconds * TUNE_FRACTION if budget_seconds else None
                    got = train(name, plan_, trial, seed=0, folder=folder, steps=steps, seconds=seconds)
                    trials.append(trial | got)
                    say(f"lineage: {name} trial {k}: {trial} -> validation loss {got['eval_loss']:.4f}")
                best = min(trials, key=lambda t: t["eval_loss"])
                chosen = {k: best[k] for k in ("learning_rate", "dropout")}
            for seed in range(seeds):
                single = len(sizes) == 1 and seeds == 1
                folder = output_dir / (name if single else f"{name}-{target}-seed{seed}")
                say(f"lineage: training {name} (size {target:,}, seed {seed}, {chosen})")
                record = train(name, plan_, chosen, seed=seed, folder=folder, steps=plan_["steps"],
                               seconds=budget_seconds, score=True)  # fmt: skip
                records.append(record | {"target": target, "seed": seed, "trials": trials})
    return records


# ---------------------------------------------------------------------------------------------- summary
def summarize(records: list[dict], metric: str) -> list[dict]:
    """One row per (size, member): the mean of `metric` over the seeds, its range, and the member's settings."""
    rows = {}
    for r in records:
        rows.setdefault((r["target"], r["name"]), []).append(r)
    summary = []
    for (target, name), group in rows.items():
        values = [r[metric] for r in group]
        first = group[0]
        summary.append(
            {
                "target": target,
                "name": name,
                "title": first["title"],
                "non_embedding_params": first["non_embedding_params"],
                "mean": statistics.fmean(values),
                "min": min(values),
                "max": max(values),
                "seeds": len(values),
            }
        )
    return summary


def ordering_notes(rows: list[dict], order, higher_is_better: bool = False) -> list[str]:
    """Where the measured ranking inverts the lectures' `order` (worst first; a tuple in it is a group the lectures
    do not rank, e.g. Bahdanau's and Luong's scores), and whether each such difference exceeds the seeds' spread (the
    two ranges do not overlap) or not."""
    by_name = {r["name"]: r for r in rows}
    groups = [[m for m in (g if isinstance(g, tuple) else (g,)) if m in by_name] for g in order]
    groups = [g for g in groups if g]
    notes = []
    for i, earlier_group in enumerate(groups):
        for later_group in groups[i + 1 :]:
            for earlier in earlier_group:
                for later in later_group:
                    a, b = by_name[earlier], by_name[later]
                    worse = b["mean"] < a["mean"] if higher_is_better else b["mean"] > a["mean"]
                    if not worse:
                        continue
                    clear = b["max"] < a["min"] if higher_is_better else b["min"] > a["max"]
                    seeded = max(a["seeds"], b["seeds"]) > 1
                    notes.append(
                        f"{later} ({b['mean']:.3f}) is worse than {earlier} ({a['mean']:.3f})"
                        + ("" if not seeded else (", beyond the seeds' spread" if clear else ", within the spread"))
                    )
    return notes


def separations(rows: list[dict], higher_is_better: bool = False) -> list[str]:
    """Neighbours in the measured order (best first) whose seed ranges do not overlap: the differences the seeds
    resolve."""
    ranked = sorted(rows, key=lambda r: -r["mean"] if higher_is_better else r["mean"])
    sign = ">" if higher_is_better else "<"
    resolved = []
    for a, b in zip(ranked, ranked[1:]):
        apart = b["max"] < a["min"] if higher_is_better else a["max"] < b["min"]
        if max(a["seeds"], b["seeds"]) > 1 and apart:
            resolved.append(f"{a['name']} {sign} {b['name']}")
    return resolved


def ordering_lines(rows: list[dict], order, seeds: int, higher_is_better: bool = False) -> list[str]:
    """The report's paragraph under a size's table: the measured order (best first, with the seeds' range), the
    lectures' order and its inversions, and the differences the seeds resolve."""
    ranked = sorted(rows, key=lambda r: -r["mean"] if higher_is_better else r["mean"])
    spread = lambda r: "" if r["seeds"] == 1 else f" [{r['min']:.3f}-{r['max']:.3f}]"
    present = {r["name"] for r in rows}
    names = lambda g: " ~ ".join(m for m in (g if isinstance(g, tuple) else (g,)) if m in present)
    lectures = [names(g) for g in order if names(g)]
    notes, resolved = ordering_notes(rows, order, higher_is_better), separations(rows, higher_is_better)
    sign = " > " if higher_is_better else " < "
    return [
        "",
        "Measured order, best first: " + sign.join(f"{r['name']} {r['mean']:.3f}{spread(r)}" for r in ranked),
        "",
        "Lectures' order, worst first: "
        + (" < " if higher_is_better else " > ").join(lectures)
        + ". "
        + ("Inversions: " + "; ".join(notes) + "." if notes else "No inversion: the measured order is the lectures'.")
        + (f" Differences beyond the seeds' spread: {', '.join(resolved)}." if seeds > 1 else ""),
        "",
    ]


# ---------------------------------------------------------------------------------------------- extrapolation
def lower_envelope(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points (x, y) lower than every point at a smaller x: the best y reached by each x (a compute frontier)."""
    frontier, best = [], math.inf
    for x, y in sorted(points):
        if y < best:
            frontier.append((x, y))
            best = y
    return frontier


def fit_power_law(points: list[tuple[float, float]]) -> dict | None:
    """Least squares fit of y = E + A x^-alpha (a loss against compute, Kaplan et al. 2020; Hoffmann et al. 2022) to
    at least four points: for each floor E on a grid below the lowest y, log(y - E) is a line in log x; the E whose
    curve has the smallest squared error in y wins. None when the points do not fall with x."""
    import numpy as np

    if len(points) < 4:
        return None
    x, y = (np.asarray(v, dtype=float) for v in zip(*points))
    best = None
    for floor in np.linspace(0.0, y.min(), 400, endpoint=False):
        slope, intercept = np.polyfit(np.log(x), np.log(y - floor), 1)
        if slope >= 0:
            continue
        error = float(((floor + np.exp(intercept) * x**slope - y) ** 2).sum())
        if best is None or error < best["error"]:
            best = {"floor": float(floor), "scale": float(np.exp(intercept)), "alpha": float(-slope), "error": error}
    return best


def power_law_reaches(fit: dict, y: float) -> float:
    """The x at which the fitted curve comes down to y (infinite when y is at or below its floor)."""
    if y <= fit["floor"]:
        return math.inf
    return ((y - fit["floor"]) / fit["scale"]) ** (-1 / fit["alpha"])


# ---------------------------------------------------------------------------------------------- plots
def save_log_plot(fig, ax, xlabel: str, ylabel: str, title: str, path: Path, log_x: bool = True) -> None:
    """The lineage's plots: a log x axis, a grid, the legend, saved at 120 dpi."""
    import matplotlib.pyplot as plt

    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_scaling(summary: list[dict], metric: str, path: Path, title: str) -> None:
    """`metric` against non-embedding parameters, one line per member (a member without such parameters, the
    n-gram, as a horizontal line), with the seeds' range as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name in dict.fromkeys(row["name"] for row in summary):
        rows = sorted((r for r in summary if r["name"] == name), key=lambda r: r["target"])
        if rows[0]["non_embedding_params"] is None:
            ax.axhline(rows[0]["mean"], ls="--", color="gray", label=rows[0]["title"])
            continue
        x = [r["non_embedding_params"] for r in rows]
        y = [r["mean"] for r in rows]
        spread = [[r["mean"] - r["min"] for r in rows], [r["max"] - r["mean"] for r in rows]]
        ax.errorbar(x, y, yerr=spread, fmt="o-", ms=4, lw=1.5, capsize=3, label=rows[0]["title"])
    save_log_plot(fig, ax, "non-embedding parameters", metric.replace("_", " "), title, path)
